// SentencePiece ("llama") tokenizer from GGUF metadata, as llama.cpp's llm_tokenizer_spm does it:
// a space prefix, ' ' → U+2581, one symbol per code point, then repeatedly merge the adjacent pair
// whose concatenation is the vocabulary entry with the highest score (ties: leftmost pair first);
// what never became a token falls back to byte tokens <0xXX>.
import { LonghandError } from '../../../common/errors.ts';
import { GgufTokenizerBase, Heap } from './gguf-vocab.ts';
import type { GgufVocab } from './gguf-vocab.ts';

const SPACE_MARK = '\u2581';
const UTF8 = new TextEncoder();
const HEX = '0123456789ABCDEF';

interface Bigram {
  left: number;
  right: number;
  score: number;
  /** length (UTF-16 units) of the merged text when queued; a stale entry no longer matches */
  size: number;
}

/** Bigger score first; equal scores: leftmost first (llama.cpp's llm_bigram_spm::comparator). */
const bigramFirst = (a: Bigram, b: Bigram): boolean => a.score > b.score || (a.score === b.score && a.left < b.left);

export class SpmTokenizer extends GgufTokenizerBase {
  override readonly kind = 'spm' as const;
  private readonly byteIds: (number | undefined)[] = new Array<number | undefined>(256);

  constructor(vocab: GgufVocab) {
    super(vocab);
    for (let b = 0; b < 256; b++) {
      // llama.cpp byte_to_token: <0xXX>, else the byte as a one-character token
      this.byteIds[b] = this.ids.get(`<0x${HEX[b >> 4]}${HEX[b & 15]}>`) ?? (b < 0x80 ? this.ids.get(String.fromCharCode(b)) : undefined);
    }
  }

  protected encodeRaw(raw: string, afterSpecial: boolean, out: number[]): void {
    const text = (this.vocab.addSpacePrefix && afterSpecial ? ' ' : '') + raw;
    const escaped = text.replaceAll(' ', SPACE_MARK);
    if (escaped === '') return;

    // symbols: one per code point, as a doubly linked list over [start, start+length)
    const start: number[] = [];
    const length: number[] = [];
    for (let i = 0; i < escaped.length; ) {
      const unit = escaped.charCodeAt(i);
      const n = unit >= 0xd800 && unit <= 0xdbff && i + 1 < escaped.length ? 2 : 1;
      start.push(i);
      length.push(n);
      i += n;
    }
    const count = start.length;
    const prev = Array.from({ length: count }, (_, i) => i - 1);
    const next = Array.from({ length: count }, (_, i) => (i + 1 < count ? i + 1 : -1));

    const queue = new Heap<Bigram>(bigramFirst);
    const tryAdd = (left: number, right: number): void => {
      if (left === -1 || right === -1) return;
      const size = (length[left] as number) + (length[right] as number);
      const id = this.ids.get(escaped.substr(start[left] as number, size));
      if (id === undefined) return;
      queue.push({ left, right, score: this.vocab.scores[id] as number, size });
    };
    for (let i = 1; i < count; i++) tryAdd(i - 1, i);

    while (queue.size > 0) {
      const bigram = queue.pop() as Bigram;
      const { left, right } = bigram;
      const leftLength = length[left] as number;
      const rightLength = length[right] as number;
      // one side already merged into something else: skip
      if (leftLength === 0 || rightLength === 0 || leftLength + rightLength !== bigram.size) continue;
      length[left] = leftLength + rightLength;
      length[right] = 0;
      const after = next[right] as number;
      next[left] = after;
      if (after >= 0) prev[after] = left;
      tryAdd(prev[left] as number, left);
      tryAdd(left, after);
    }

    for (let i = 0; i !== -1; i = next[i] as number) {
      const piece = escaped.substr(start[i] as number, length[i] as number);
      const id = this.ids.get(piece);
      if (id !== undefined) {
        out.push(id);
        continue;
      }
      for (const byte of UTF8.encode(piece)) {
        const byteId = this.byteIds[byte] ?? this.vocab.unk;
        if (byteId === undefined) {
          throw new LonghandError('TOKENIZER_INVALID', `SentencePiece vocabulary has no byte token <0x${HEX[byte >> 4]}${HEX[byte & 15]}> and no unknown token`, { byte });
        }
        out.push(byteId);
      }
    }
  }

  protected normalBytes(id: number): Uint8Array {
    const text = this.vocab.tokens[id] as string;
    if (this.vocab.types[id] === 6) {
      const match = /^<0x([0-9A-Fa-f]{2})>$/.exec(text);
      if (match) return Uint8Array.of(parseInt(match[1] as string, 16));
    }
    return UTF8.encode(text.replaceAll(SPACE_MARK, ' '));
  }
}
