// Byte-level BPE ("gpt2") tokenizer from GGUF metadata, as llama.cpp's llm_tokenizer_bpe does it:
// split the text with the pre-tokenizer regex that tokenizer.ggml.pre names, map each word's UTF-8
// bytes to GPT-2's printable characters, then repeatedly merge the adjacent pair with the lowest
// merge rank (ties: leftmost first). The llama3 family first looks the whole word up
// (ignore_merges). Decoding maps the characters back to bytes.
//
// Gemma 4's "gemma4" model is BPE the SentencePiece way (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_GEMMA4):
// spaces become ▁ before anything else, the text is split only into newline runs and the rest, the
// merges run over raw UTF-8 characters (no byte-to-character map), a word of newlines that is a token
// is taken whole, and a piece that is no token falls back to <0xXX> byte tokens. Decoding turns ▁
// back into spaces, and decoded text gets llama.cpp's clean_spaces (cleanUpTokenizationSpaces).
import { LonghandError } from '../../../common/errors.ts';
import { GgufTokenizerBase, Heap, TOKEN_TYPE } from './gguf-vocab.ts';
import type { GgufVocab } from './gguf-vocab.ts';

/** GPT-2's byte ↔ printable-character map (bytes_to_unicode in openai/gpt-2's encoder.py). */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const map = new Array<string>(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    map[b] = String.fromCodePoint(printable ? b : 256 + extra++);
  }
  return map;
})();
const CHAR_TO_BYTE = new Map<string, number>(BYTE_TO_CHAR.map((char, byte) => [char, byte]));

const UTF8 = new TextEncoder();
const CONTRACTIONS_ANY_CASE = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

/**
 * Pre-tokenizer patterns by tokenizer.ggml.pre (JavaScript, `u` flag; case-insensitive groups
 * spelled out since Node 20 has no `(?i:...)`). 'default' and an absent key use GPT-2's pattern
 * (llama.cpp's own "default" adds splits on punctuation and digit runs that few models use).
 */
const PRE_PATTERNS: Record<string, string> = {
  gpt2: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
  llama3: `${CONTRACTIONS_ANY_CASE}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
  qwen2: `${CONTRACTIONS_ANY_CASE}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
  // Qwen3.5 (LLAMA_VOCAB_PRE_TYPE_QWEN35): qwen2's with combining marks counted as letters, so a
  // letter and its marks stay one word
  qwen35: `${CONTRACTIONS_ANY_CASE}|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
  // o200k (GPT-4o, Phi-4-mini) as llama.cpp runs it (LLAMA_VOCAB_PRE_TYPE_GPT4O): its rewrite of
  // tokenizer.json's case classes into lookaheads, where only ASCII letters have a case (a non-ASCII
  // letter counts as upper and lower) and combining marks are not letters
  gpt4o:
    `[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+${CONTRACTIONS_ANY_CASE}?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*${CONTRACTIONS_ANY_CASE}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
};

const PRE_ALIASES: Record<string, keyof typeof PRE_PATTERNS> = {
  '': 'gpt2',
  default: 'gpt2',
  gpt2: 'gpt2',
  'gpt-2': 'gpt2',
  'phi-2': 'gpt2',
  llama3: 'llama3',
  'llama-v3': 'llama3',
  'llama-bpe': 'llama3',
  falcon3: 'llama3',
  qwen2: 'qwen2',
  'deepseek-r1-qwen': 'qwen2',
  qwen35: 'qwen35',
  'gpt-4o': 'gpt4o',
  llama4: 'gpt4o',
};

/** The pre-tokenizer family for a tokenizer.ggml.pre value, or undefined when we have none. */
export function preTokenizerFamily(pre: string): 'gpt2' | 'llama3' | 'qwen2' | 'qwen35' | 'gpt4o' | undefined {
  return PRE_ALIASES[pre] as 'gpt2' | 'llama3' | 'qwen2' | 'qwen35' | 'gpt4o' | undefined;
}

interface Bigram {
  left: number;
  right: number;
  rank: number;
  text: string;
}

/** Lower rank first; equal ranks: leftmost first (llama.cpp's llm_bigram_bpe::comparator). */
const bigramFirst = (a: Bigram, b: Bigram): boolean => a.rank < b.rank || (a.rank === b.rank && a.left < b.left);

export class BpeTokenizer extends GgufTokenizerBase {
  override readonly kind = 'bpe' as const;
  readonly family: 'gpt2' | 'llama3' | 'qwen2' | 'qwen35' | 'gpt4o' | 'gemma4';
  private readonly pattern: RegExp;
  private readonly ranks = new Map<string, number>();
  private readonly ignoreMerges: boolean;

  constructor(vocab: GgufVocab) {
    super(vocab);
    const family = vocab.model === 'gemma4' ? 'gemma4' : preTokenizerFamily(vocab.pre);
    if (family === undefined) {
      throw new LonghandError('TOKENIZER_INVALID', `GGUF tokenizer metadata: pre-tokenizer ${JSON.stringify(vocab.pre)} is not supported (gpt2, llama3, qwen2, qwen35, gpt-4o families)`, { key: 'tokenizer.ggml.pre' });
    }
    this.family = family;
    this.pattern = new RegExp(family === 'gemma4' ? '[^\\n]+|\\n+' : (PRE_PATTERNS[family] as string), 'gu');
    this.ignoreMerges = family === 'llama3';
    // llama.cpp keeps clean_spaces on for the gemma4 pre-tokenizer (the llama3 and qwen2 ones turn it off)
    this.cleanSpaces = family === 'gemma4';
    // "left right" → rank; the first occurrence of a duplicate merge keeps its rank
    vocab.merges.forEach((merge, rank) => {
      const space = merge.indexOf(' ', 1);
      const key = `${merge.slice(0, space)} ${merge.slice(space + 1)}`;
      if (!this.ranks.has(key)) this.ranks.set(key, rank);
    });
  }

  /** Splits raw text into pre-tokenizer words (exposed for tests). */
  preTokenize(text: string): string[] {
    return text.match(this.pattern) ?? [];
  }

  protected encodeRaw(raw: string, _afterSpecial: boolean, out: number[]): void {
    if (this.family === 'gemma4') {
      for (const word of this.preTokenize(raw.replaceAll(' ', '\u2581'))) {
        const whole = word.startsWith('\n') ? this.ids.get(word) : undefined; // a newline run the vocabulary has
        if (whole !== undefined) out.push(whole);
        else this.encodeWord(word, out);
      }
      return;
    }
    for (const word of this.preTokenize(raw)) {
      let mapped = '';
      for (const byte of UTF8.encode(word)) mapped += BYTE_TO_CHAR[byte];
      this.encodeWord(mapped, out);
    }
  }

  private encodeWord(word: string, out: number[]): void {
    if (this.ignoreMerges) {
      const whole = this.ids.get(word);
      if (whole !== undefined) {
        out.push(whole);
        return;
      }
    }
    const symbols = Array.from(word); // one per code point
    const count = symbols.length;
    const prev = Array.from({ length: count }, (_, i) => i - 1);
    const next = Array.from({ length: count }, (_, i) => (i + 1 < count ? i + 1 : -1));
    const queue = new Heap<Bigram>(bigramFirst);
    const tryAdd = (left: number, right: number): void => {
      if (left === -1 || right === -1) return;
      const l = symbols[left] as string;
      const r = symbols[right] as string;
      const rank = this.ranks.get(`${l} ${r}`);
      if (rank !== undefined) queue.push({ left, right, rank, text: l + r });
    };
    for (let i = 1; i < count; i++) tryAdd(i - 1, i);

    while (queue.size > 0) {
      const bigram = queue.pop() as Bigram;
      const l = symbols[bigram.left] as string;
      const r = symbols[bigram.right] as string;
      // stale: one side was merged since this pair was queued
      if (l === '' || r === '' || l + r !== bigram.text) continue;
      symbols[bigram.left] = bigram.text;
      symbols[bigram.right] = '';
      const after = next[bigram.right] as number;
      next[bigram.left] = after;
      if (after >= 0) prev[after] = bigram.left;
      tryAdd(prev[bigram.left] as number, bigram.left);
      tryAdd(bigram.left, after);
    }

    for (let i = 0; i !== -1 && count > 0; i = next[i] as number) {
      const piece = symbols[i] as string;
      const id = this.ids.get(piece);
      if (id !== undefined) {
        out.push(id);
        continue;
      }
      if (this.family === 'gemma4') {
        // a piece that is not a token: its UTF-8 bytes as <0xXX> tokens, those the vocabulary has
        for (const byte of UTF8.encode(piece)) {
          const byteId = this.ids.get(`<0x${byte.toString(16).toUpperCase().padStart(2, '0')}>`);
          if (byteId !== undefined) out.push(byteId);
        }
        continue;
      }
      // a piece that is not a token: its characters one by one, those the vocabulary has
      for (const char of piece) {
        const charId = this.ids.get(char);
        if (charId !== undefined) out.push(charId);
      }
    }
  }

  protected normalBytes(id: number): Uint8Array {
    const text = this.vocab.tokens[id] as string;
    if (this.vocab.types[id] === TOKEN_TYPE.byte) {
      const match = /^<0x([0-9A-Fa-f]{2})>$/.exec(text);
      if (match) return Uint8Array.of(parseInt(match[1] as string, 16));
    }
    if (this.family === 'gemma4') return UTF8.encode(text.replaceAll('\u2581', ' '));
    const bytes: number[] = [];
    for (const char of text) {
      const byte = CHAR_TO_BYTE.get(char);
      if (byte !== undefined) bytes.push(byte);
      else bytes.push(...UTF8.encode(char)); // not byte-level: keep the character
    }
    return Uint8Array.from(bytes);
  }
}
