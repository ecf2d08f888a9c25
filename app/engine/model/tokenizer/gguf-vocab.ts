// The vocabulary a GGUF file carries under tokenizer.ggml.*, read and checked once, and the parts
// both GGUF tokenizers share (special-token splitting, ids, decoding to bytes), following
// llama.cpp's llama-vocab.cpp so that our ids are its ids.
import { LonghandError } from '../../../common/errors.ts';
import type { DecodeOptions, EncodeOptions, Tokenizer } from './tokenizer.ts';
import { END_OF_GENERATION_TEXTS, endOfGenerationExceptions } from './end-of-generation.ts';

/** GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
export const TOKEN_TYPE = { undefined: 0, normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;

export interface GgufVocab {
  /** 'gemma4': BPE over ▁-escaped raw UTF-8 with <0xXX> byte fallback (bpe.ts) */
  model: 'llama' | 'gpt2' | 'gemma4';
  tokens: readonly string[];
  /** SentencePiece merge scores (0 for every token when the file has none and model is gpt2). */
  scores: Float32Array;
  /** TOKEN_TYPE per token (0 'undefined' is read as normal). */
  types: Uint8Array;
  /** BPE merges, "left right", in rank order (gpt2 and gemma4). */
  merges: readonly string[];
  bos: number | undefined;
  eos: number | undefined;
  unk: number | undefined;
  pad: number | undefined;
  eot: number | undefined;
  eom: number | undefined;
  addBos: boolean;
  addEos: boolean;
  addSpacePrefix: boolean;
  /** tokenizer.ggml.pre ('' when absent). */
  pre: string;
  /**
   * Special tokens that swallow the whitespace after them when found in text (llama.cpp's
   * LLAMA_TOKEN_ATTR_RSTRIP, which it sets by model name: rstripSpecials).
   */
  rstrip: ReadonlySet<string>;
}

const P = 'tokenizer.ggml.';
const UTF8 = new TextEncoder();

function invalid(message: string, key: string, details: Record<string, string | number> = {}): LonghandError {
  return new LonghandError('TOKENIZER_INVALID', `GGUF tokenizer metadata: ${message}`, { key, ...details });
}

/** Arrays may arrive as JS arrays or typed arrays; numbers as number or bigint. */
function asArray(value: unknown): ArrayLike<unknown> | undefined {
  if (Array.isArray(value)) return value;
  if (ArrayBuffer.isView(value) && !(value instanceof DataView)) return value as unknown as ArrayLike<unknown>;
  return undefined;
}

function asNumber(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  return undefined;
}

function optionalBool(metadata: ReadonlyMap<string, unknown>, key: string, fallback: boolean): boolean {
  const value = metadata.get(key);
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw invalid(`${key} must be a boolean`, key);
  return value;
}

/** A special-token id: absent, or the "none" markers -1 / 0xFFFFFFFF, mean undefined. */
function optionalId(metadata: ReadonlyMap<string, unknown>, key: string, vocabSize: number, fallback: number | undefined): number | undefined {
  const raw = metadata.get(key);
  if (raw === undefined) return fallback !== undefined && fallback < vocabSize ? fallback : undefined;
  const id = asNumber(raw);
  if (id === undefined || !Number.isInteger(id)) throw invalid(`${key} must be an integer`, key);
  if (id === -1 || id === 0xffffffff) return undefined;
  if (id < 0 || id >= vocabSize) throw invalid(`${key} = ${id} is outside the vocabulary of ${vocabSize} tokens`, key, { id, vocabSize });
  return id;
}

/** Reads and checks tokenizer.ggml.*; every problem is a TOKENIZER_INVALID naming the key. */
export function readGgufVocab(metadata: ReadonlyMap<string, unknown>): GgufVocab {
  const modelValue = metadata.get(`${P}model`);
  if (modelValue === undefined) {
    throw new LonghandError('MODEL_MISSING_METADATA', `GGUF tokenizer metadata: ${P}model is missing`, { key: `${P}model` });
  }
  if (modelValue !== 'llama' && modelValue !== 'gpt2' && modelValue !== 'gemma4') {
    throw invalid(`tokenizer model ${JSON.stringify(modelValue)} is not supported (llama, gpt2, gemma4)`, `${P}model`);
  }
  const model = modelValue;

  const tokensValue = asArray(metadata.get(`${P}tokens`));
  if (tokensValue === undefined) throw invalid(`${P}tokens is missing or not an array`, `${P}tokens`);
  if (tokensValue.length === 0) throw invalid(`${P}tokens is empty`, `${P}tokens`);
  const tokens: string[] = new Array<string>(tokensValue.length);
  for (let i = 0; i < tokensValue.length; i++) {
    const token = tokensValue[i];
    if (typeof token !== 'string') throw invalid(`${P}tokens[${i}] is not a string`, `${P}tokens`, { index: i });
    tokens[i] = token;
  }
  const n = tokens.length;

  const scores = new Float32Array(n);
  const scoresValue = metadata.get(`${P}scores`);
  if (scoresValue !== undefined) {
    const array = asArray(scoresValue);
    if (array === undefined) throw invalid(`${P}scores is not an array`, `${P}scores`);
    if (array.length !== n) throw invalid(`${P}scores has ${array.length} entries for ${n} tokens`, `${P}scores`, { scores: array.length, tokens: n });
    for (let i = 0; i < n; i++) {
      const score = asNumber(array[i]);
      if (score === undefined || Number.isNaN(score)) throw invalid(`${P}scores[${i}] is not a number`, `${P}scores`, { index: i });
      scores[i] = score;
    }
  } else if (model === 'llama') {
    throw invalid(`${P}scores is missing (a SentencePiece vocabulary needs its scores)`, `${P}scores`);
  }

  const types = new Uint8Array(n).fill(TOKEN_TYPE.normal);
  const typesValue = metadata.get(`${P}token_type`);
  if (typesValue !== undefined) {
    const array = asArray(typesValue);
    if (array === undefined) throw invalid(`${P}token_type is not an array`, `${P}token_type`);
    if (array.length !== n) throw invalid(`${P}token_type has ${array.length} entries for ${n} tokens`, `${P}token_type`, { types: array.length, tokens: n });
    for (let i = 0; i < n; i++) {
      const type = asNumber(array[i]);
      if (type === undefined || !Number.isInteger(type) || type < 0 || type > 6) {
        throw invalid(`${P}token_type[${i}] = ${String(array[i])} is not a token type (0..6)`, `${P}token_type`, { index: i });
      }
      types[i] = type === TOKEN_TYPE.undefined ? TOKEN_TYPE.normal : type;
    }
  }

  // llama.cpp makes every end-of-generation-looking token a control token (END_OF_GENERATION_TEXTS)
  for (let i = 0; i < n; i++) if (END_OF_GENERATION_TEXTS.has(tokens[i]!)) types[i] = TOKEN_TYPE.control;
  // ...and then retypes the ones it takes back out of that set (Gemma 4's </s>, gpt-oss's <|end|>)
  const exceptions = endOfGenerationExceptions((text) => tokens.includes(text));
  for (let i = 0; i < n; i++) {
    const retype = exceptions.get(tokens[i]!);
    if (retype !== undefined) types[i] = TOKEN_TYPE[retype];
  }

  let merges: string[] = [];
  if (model === 'gpt2' || model === 'gemma4') {
    const array = asArray(metadata.get(`${P}merges`));
    if (array === undefined) throw invalid(`${P}merges is missing or not an array (a BPE vocabulary needs its merges)`, `${P}merges`);
    merges = new Array<string>(array.length);
    for (let i = 0; i < array.length; i++) {
      const merge = array[i];
      // llama.cpp splits at the first space after the first character
      const space = typeof merge === 'string' ? merge.indexOf(' ', 1) : -1;
      if (typeof merge !== 'string' || space < 0 || space === merge.length - 1) {
        throw invalid(`${P}merges[${i}] = ${JSON.stringify(merge)} is not "left right"`, `${P}merges`, { index: i });
      }
      merges[i] = merge;
    }
  }

  const spm = model === 'llama';
  const vocab: GgufVocab = {
    model,
    tokens,
    scores,
    types,
    merges,
    bos: optionalId(metadata, `${P}bos_token_id`, n, spm ? 1 : undefined),
    eos: optionalId(metadata, `${P}eos_token_id`, n, spm ? 2 : undefined),
    unk: optionalId(metadata, `${P}unknown_token_id`, n, spm ? 0 : undefined),
    pad: optionalId(metadata, `${P}padding_token_id`, n, undefined),
    eot: optionalId(metadata, `${P}eot_token_id`, n, undefined),
    eom: optionalId(metadata, `${P}eom_token_id`, n, undefined),
    addBos: false,
    addEos: optionalBool(metadata, `${P}add_eos_token`, false),
    addSpacePrefix: optionalBool(metadata, `${P}add_space_prefix`, spm),
    pre: typeof metadata.get(`${P}pre`) === 'string' ? (metadata.get(`${P}pre`) as string) : '',
    rstrip: rstripSpecials(metadata, tokens, types),
  };
  // llama.cpp: SentencePiece adds BOS by default, and so does the llama3 family of BPE
  const bosByDefault = spm || ['llama3', 'llama-v3', 'llama-bpe', 'falcon3'].includes(vocab.pre);
  // llama.cpp sets add_bos for gemma4 whatever the file says (its "workaround for Gemma 4")
  vocab.addBos = model === 'gemma4' || optionalBool(metadata, `${P}add_bos_token`, bosByDefault);
  if (vocab.addBos && vocab.bos === undefined) throw invalid(`${P}add_bos_token is set but there is no BOS token`, `${P}bos_token_id`);
  if (vocab.addEos && vocab.eos === undefined) throw invalid(`${P}add_eos_token is set but there is no EOS token`, `${P}eos_token_id`);
  return vocab;
}

/**
 * llama.cpp's token attributes by model name (llama_vocab::impl::load, "set attributes by
 * model/tokenizer/architecture name"): a file whose general.name contains "phi-3" or "phi3"
 * (case-insensitive) has every control, user-defined and unknown token strip the whitespace after
 * it, </s> included, except <unk>, <s> and <|endoftext|> — what Phi-3's tokenizer_config says of
 * its added tokens (rstrip: true). Other files: none. (Real Phi-3.5 files named "Phi 3.5 Mini
 * Instruct" do not match, and llama.cpp does not strip for them either.)
 */
function rstripSpecials(metadata: ReadonlyMap<string, unknown>, tokens: readonly string[], types: Uint8Array): ReadonlySet<string> {
  const name = metadata.get('general.name');
  const lower = typeof name === 'string' ? name.toLowerCase() : '';
  if (!lower.includes('phi-3') && !lower.includes('phi3')) return new Set();
  const out = new Set<string>();
  for (let id = 0; id < tokens.length; id++) {
    const t = types[id];
    if (t === TOKEN_TYPE.control || t === TOKEN_TYPE.userDefined || t === TOKEN_TYPE.unknown) out.add(tokens[id]!);
  }
  out.add('</s>');
  for (const kept of ['<unk>', '<s>', '<|endoftext|>']) out.delete(kept);
  return out;
}

/** C's isspace in the "C" locale: the whitespace llama.cpp's RSTRIP removes. */
const C_SPACE = new Set([' ', '\t', '\n', '\v', '\f', '\r']);

/** A piece of input text: raw text, or a special token already recognised. */
type Fragment = string | number;

/**
 * What SpmTokenizer and BpeTokenizer share: special-token splitting (llama.cpp's
 * tokenizer_st_partition), BOS/EOS, piece lookups and byte-level decoding. Subclasses turn raw
 * text into ids and a normal token into its bytes.
 */
export abstract class GgufTokenizerBase implements Tokenizer {
  abstract readonly kind: 'spm' | 'bpe';
  readonly vocabSize: number;
  readonly bos: number | undefined;
  readonly eos: number | undefined;
  readonly eosIds: readonly number[];
  readonly addBos: boolean;
  readonly addEos: boolean;
  protected readonly vocab: GgufVocab;
  /** text → id; for duplicate texts the last id wins, as in llama.cpp's token_to_id. */
  protected readonly ids = new Map<string, number>();
  /** Control, unknown and user-defined tokens, longest text first (llama.cpp's cache_special_tokens). */
  private readonly specials: { id: number; text: string; control: boolean; rstrip: boolean }[] = [];
  private readonly eogSet: Set<number>;
  private readonly byteCache: (Uint8Array | undefined)[];
  /** llama.cpp's clean_spaces (clean_up_tokenization_spaces) on decode: set by the tokenizers whose vocabulary has it */
  protected cleanSpaces = false;

  constructor(vocab: GgufVocab) {
    this.vocab = vocab;
    this.vocabSize = vocab.tokens.length;
    this.bos = vocab.bos;
    this.eos = vocab.eos;
    this.addBos = vocab.addBos;
    this.addEos = vocab.addEos;
    vocab.tokens.forEach((text, id) => this.ids.set(text, id));
    for (let id = 0; id < vocab.tokens.length; id++) {
      const type = vocab.types[id];
      const text = vocab.tokens[id] ?? '';
      if (text !== '' && (type === TOKEN_TYPE.control || type === TOKEN_TYPE.userDefined || type === TOKEN_TYPE.unknown)) {
        this.specials.push({ id, text, control: type !== TOKEN_TYPE.userDefined, rstrip: vocab.rstrip.has(text) });
      }
    }
    this.specials.sort((a, b) => b.text.length - a.text.length || a.id - b.id);
    const eog: number[] = [];
    for (const id of [vocab.eos, vocab.eot, vocab.eom]) if (id !== undefined && !eog.includes(id)) eog.push(id);
    for (const special of this.specials) if (END_OF_GENERATION_TEXTS.has(special.text) && !eog.includes(special.id)) eog.push(special.id);
    const exceptions = endOfGenerationExceptions((text) => this.ids.has(text));
    this.eosIds = eog.filter((id) => !exceptions.has(vocab.tokens[id]!));
    this.eogSet = new Set(this.eosIds);
    this.byteCache = new Array<Uint8Array | undefined>(vocab.tokens.length);
  }

  /** Token ids for one stretch of raw text (no special tokens in it). */
  protected abstract encodeRaw(text: string, afterSpecial: boolean, out: number[]): void;
  /** The bytes a normal (or byte) token stands for. */
  protected abstract normalBytes(id: number): Uint8Array;

  encode(text: string, options: EncodeOptions = {}): number[] {
    const addSpecial = options.addSpecial ?? true;
    const out: number[] = [];
    if (addSpecial && this.addBos && this.bos !== undefined) out.push(this.bos);
    let afterSpecial = true;
    for (const fragment of this.partition(text, options.parseSpecial ?? false)) {
      if (typeof fragment === 'number') {
        out.push(fragment);
        afterSpecial = true;
      } else {
        this.encodeRaw(fragment, afterSpecial, out);
        afterSpecial = false;
      }
    }
    if (addSpecial && this.addEos && this.eos !== undefined) out.push(this.eos);
    return out;
  }

  /** Splits out special tokens, longest first; control/unknown ones only when parseSpecial. */
  private partition(text: string, parseSpecial: boolean): Fragment[] {
    let fragments: Fragment[] = text === '' ? [] : [text];
    for (const special of this.specials) {
      if (special.control && !parseSpecial) continue;
      if (!text.includes(special.text)) continue;
      const next: Fragment[] = [];
      for (const fragment of fragments) {
        if (typeof fragment === 'number') {
          next.push(fragment);
          continue;
        }
        let start = 0;
        for (let at = fragment.indexOf(special.text); at >= 0; at = fragment.indexOf(special.text, start)) {
          if (at > start) next.push(fragment.slice(start, at));
          next.push(special.id);
          start = at + special.text.length;
          // RSTRIP: the whitespace after it goes with it (llama.cpp strips the right remainder)
          if (special.rstrip) while (start < fragment.length && C_SPACE.has(fragment[start]!)) start++;
        }
        if (start < fragment.length) next.push(fragment.slice(start));
      }
      fragments = next;
    }
    return fragments;
  }

  tokenBytes(id: number, options: { skipSpecial?: boolean; first?: boolean } = {}): Uint8Array {
    this.checkId(id);
    const type = this.vocab.types[id];
    let bytes: Uint8Array;
    if (type === TOKEN_TYPE.control || type === TOKEN_TYPE.unknown) {
      bytes = options.skipSpecial ?? true ? new Uint8Array(0) : UTF8.encode(this.vocab.tokens[id]);
    } else if (type === TOKEN_TYPE.userDefined) {
      bytes = UTF8.encode(this.vocab.tokens[id]);
    } else if (type === TOKEN_TYPE.unused) {
      bytes = new Uint8Array(0);
    } else {
      bytes = this.byteCache[id] ??= this.normalBytes(id);
    }
    // llama.cpp's lstrip of the first piece when the vocabulary adds a space prefix
    if (options.first && this.vocab.addSpacePrefix && bytes[0] === 0x20) return bytes.subarray(1);
    return bytes;
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    const parts: Uint8Array[] = [];
    let length = 0;
    const skipSpecial = options.skipSpecial ?? true;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i] as number;
      // llama_detokenize: with remove_special, a leading BOS is dropped and keeps the next space
      const first = i === 0 && !options.continuation && !(skipSpecial && id === this.bos && this.addBos);
      const bytes = this.tokenBytes(id, { skipSpecial, first });
      parts.push(bytes);
      length += bytes.length;
    }
    const all = new Uint8Array(length);
    let offset = 0;
    for (const part of parts) {
      all.set(part, offset);
      offset += part.length;
    }
    return new TextDecoder('utf-8', { fatal: false, ignoreBOM: true }).decode(this.cleanSpaces ? cleanUpTokenizationSpaces(all) : all);
  }

  tokenPiece(id: number): string {
    this.checkId(id);
    return this.vocab.tokens[id] as string;
  }

  tokenId(piece: string): number | undefined {
    return this.ids.get(piece);
  }

  isSpecial(id: number): boolean {
    const type = this.vocab.types[id];
    return type === TOKEN_TYPE.control || type === TOKEN_TYPE.unknown;
  }

  isEndOfGeneration(id: number): boolean {
    return this.eogSet.has(id);
  }

  /** The token type of an id (TOKEN_TYPE). */
  tokenType(id: number): number {
    this.checkId(id);
    return this.vocab.types[id] as number;
  }

  protected checkId(id: number): asserts id is number {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new LonghandError('TOKENIZER_INVALID', `token id ${id} is outside the vocabulary of ${this.vocabSize} tokens`, { id, vocabSize: this.vocabSize });
    }
  }
}

/**
 * A binary heap (no dependency, no allocation per pop beyond the items): `before(a, b)` is true
 * when a must come out first.
 */
export class Heap<T> {
  private readonly items: T[] = [];
  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  push(item: T): void {
    const items = this.items;
    items.push(item);
    // sift up: move parents down until the item's place is found
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const above = items[parent] as T;
      if (!this.before(item, above)) break;
      items[i] = above;
      i = parent;
    }
    items[i] = item;
  }

  pop(): T | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length === 0 || last === undefined) return top;
    // sift down: move the smaller child up until `last` fits
    const n = items.length;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const child = r < n && this.before(items[r] as T, items[l] as T) ? r : l;
      if (!this.before(items[child] as T, last)) break;
      items[i] = items[child] as T;
      i = child;
    }
    items[i] = last;
    return top;
  }
}

/**
 * llama_detokenize's clean_spaces, pass for pass over the bytes (ASCII only, so UTF-8 sequences are
 * never split): a space before ? ! . , is dropped; a lone apostrophe between spaces loses both
 * spaces; a space before 's 'm 're 've is dropped (not before 't 'd 'll). In place, as llama.cpp.
 */
export function cleanUpTokenizationSpaces(bytes: Uint8Array): Uint8Array {
  const SPACE = 0x20;
  const QUOTE = 0x27;
  const t = bytes.slice();
  const at = (i: number): number => t[i] as number;
  // first pass: " ?", " !", " .", " ,"
  let n = t.length;
  let total = n ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = at(i);
    if (at(i - 1) === SPACE && (x === 0x3f || x === 0x21 || x === 0x2e || x === 0x2c)) total--;
    t[total++] = x;
  }
  // second pass: " ' " → "'"
  n = total;
  total = n ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = at(i);
    if (x === QUOTE && i + 1 < n && at(i - 1) === SPACE && at(i + 1) === SPACE) {
      total--;
      t[++i] = 0;
    }
    t[total++] = x;
  }
  // third pass: " 's", " 'm", " 're", " 've"
  n = total;
  total = n ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = at(i);
    if (at(i - 1) === SPACE && x === QUOTE && i + 1 < n) {
      const x1 = at(i + 1);
      if (x1 === 0x73 || x1 === 0x6d) total--;
      else if (i + 2 < n && ((x1 === 0x72 && at(i + 2) === 0x65) || (x1 === 0x76 && at(i + 2) === 0x65))) total--;
    }
    t[total++] = x;
  }
  return t.subarray(0, total);
}
