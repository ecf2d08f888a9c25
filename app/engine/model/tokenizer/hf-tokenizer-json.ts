// A Hugging Face tokenizer.json (+ tokenizer_config.json) through @huggingface/tokenizers, behind
// our Tokenizer interface. Any file that does not parse or names a component the library does not
// know becomes LonghandError TOKENIZER_INVALID naming the file and the problem.
//
// The file is untrusted input parsed in the engine process. Seeded mutation fuzzing
// (hf-tokenizer-json.fuzz.test.ts, bench/fuzz-readers.mjs) found no hang in the library on
// malformed files; what is guarded here: a size limit checked before the file is read (parsing
// is linear, but a multi-GB file would take the process's memory), and every library call made
// while loading sits inside the typed error, since the library may throw anything (TypeError on
// a wrong-typed field, RangeError on deep nesting). Not guarded: a pre_tokenizer/normalizer
// regex that backtracks catastrophically on some input text would stall encode(); it runs in
// the engine process, which the app can restart.
import { readFileSync, statSync } from 'node:fs';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { LonghandError } from '../../../common/errors.ts';
import { END_OF_GENERATION_TEXTS, endOfGenerationExceptions } from './end-of-generation.ts';
import type { DecodeOptions, EncodeOptions, Tokenizer } from './tokenizer.ts';

const SUPPORTED_MODELS = ['BPE', 'WordPiece', 'Unigram'];

/** Larger than any real tokenizer.json (Gemma 3's is ~33 MB, the largest known to us). */
export const MAX_TOKENIZER_JSON_BYTES = 256 * 1024 * 1024;
/** Token ids at or above this are refused: the logits are vocabSize wide (real vocabularies ≤ 262,144). */
export const MAX_VOCAB_SIZE = 1 << 22;
/** Longest token text accepted (real ones are under a hundred characters). */
export const MAX_TOKEN_CHARS = 4096;

type Json = Record<string, unknown>;

function invalid(file: string, problem: string, cause?: unknown): LonghandError {
  return new LonghandError('TOKENIZER_INVALID', `${file}: ${problem}`, { file }, cause === undefined ? undefined : { cause });
}

function readJson(path: string): Json {
  let text: string;
  try {
    const size = statSync(path).size;
    if (size > MAX_TOKENIZER_JSON_BYTES) throw invalid(path, `is ${size} bytes, more than the ${MAX_TOKENIZER_JSON_BYTES} a tokenizer file can reasonably be`);
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if (error instanceof LonghandError) throw error;
    throw new LonghandError('MODEL_NOT_FOUND', `${path}: cannot read (${(error as Error).message})`, { file: path }, { cause: error });
  }
  return parseJson(text, path);
}

/**
 * The deepest bracket nesting in a JSON text, stopping once past `max`. Real tokenizer files nest
 * a dozen levels; a file of a million '[' takes JSON.parse seconds (found by fuzzing), so the
 * depth is checked first, in one linear pass.
 */
function nestingDepth(text: string, max: number): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > deepest && (deepest = depth) > max) return deepest;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return deepest;
}

/** Deeper than any real tokenizer.json or tokenizer_config.json. */
export const MAX_JSON_DEPTH = 256;

function parseJson(text: string, path: string): Json {
  if (nestingDepth(text, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) throw invalid(path, `nests JSON more than ${MAX_JSON_DEPTH} levels deep`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw invalid(path, `not valid JSON (${(error as Error).message})`, error);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalid(path, 'not a JSON object');
  return value as Json;
}

/** tokenizer_config.json writes special tokens as "text" or { content: "text", ... }. */
function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && value !== null && typeof (value as Json).content === 'string') return (value as Json).content as string;
  return undefined;
}

function checkId(id: unknown, what: string, file: string): void {
  if (!Number.isInteger(id) || (id as number) < 0 || (id as number) >= MAX_VOCAB_SIZE) {
    throw invalid(file, `${what} has id ${String(JSON.stringify(id)).slice(0, 40)}, not an integer in [0, ${MAX_VOCAB_SIZE})`);
  }
}

function checkPiece(piece: unknown, what: string, file: string): void {
  if (typeof piece === 'string' && piece.length > MAX_TOKEN_CHARS) throw invalid(file, `${what} is ${piece.length} characters long, more than ${MAX_TOKEN_CHARS}`);
}

/**
 * model.vocab ({piece: id}; Unigram's is a list, ids implicit) and added_tokens: ids in range,
 * pieces of a sane length (a 1M-character added token takes the library seconds to load).
 */
function checkIds(json: Json, model: Json, file: string): void {
  const vocab = model.vocab;
  if (Array.isArray(vocab)) {
    if (vocab.length > MAX_VOCAB_SIZE) throw invalid(file, `the vocabulary has ${vocab.length} entries, more than ${MAX_VOCAB_SIZE}`);
    for (const entry of vocab) checkPiece(Array.isArray(entry) ? entry[0] : undefined, 'a vocabulary piece', file);
  } else if (typeof vocab === 'object' && vocab !== null) {
    for (const [piece, id] of Object.entries(vocab)) {
      checkPiece(piece, 'a vocabulary piece', file);
      checkId(id, `token ${JSON.stringify(piece).slice(0, 40)}`, file);
    }
  }
  for (const token of json.added_tokens as unknown[]) {
    const { id, content } = (token ?? {}) as { id?: unknown; content?: unknown };
    checkPiece(content, 'an added token', file);
    if (id !== undefined) checkId(id, `added token ${JSON.stringify(content ?? null).slice(0, 40)}`, file);
  }
}

/** Reads the files and builds the tokenizer. */
export function loadHfTokenizer(path: string, configPath?: string): HfJsonTokenizer {
  const json = readJson(path);
  const config = configPath === undefined ? {} : readJson(configPath);
  return new HfJsonTokenizer(json, config, path);
}

/** The same from the files' texts (tests, fuzzing); `file` names the tokenizer.json in errors. */
export function parseHfTokenizer(text: string, configText?: string, file = 'tokenizer.json'): HfJsonTokenizer {
  if (text.length > MAX_TOKENIZER_JSON_BYTES) throw invalid(file, `is ${text.length} characters, more than the ${MAX_TOKENIZER_JSON_BYTES} a tokenizer file can reasonably be`);
  const json = parseJson(text, file);
  const config = configText === undefined ? {} : parseJson(configText, 'tokenizer_config.json');
  return new HfJsonTokenizer(json, config, file);
}

interface AddedTokenJson {
  id: number;
  content: string;
  special?: boolean;
}

export class HfJsonTokenizer implements Tokenizer {
  readonly kind = 'hf' as const;
  readonly vocabSize: number;
  readonly bos: number | undefined;
  readonly eos: number | undefined;
  readonly eosIds: readonly number[];
  readonly addBos: boolean;
  readonly addEos: boolean;
  /** Special-token strings for chat templates (bos_token, eos_token...). */
  readonly specialTexts: { bos?: string; eos?: string; unk?: string; pad?: string };
  private readonly hf: HfTokenizer;
  private readonly specialIds = new Set<number>();
  /** Non-special added tokens: always matched in text, as the library does. */
  private readonly plainAdded: { id: number; content: string }[] = [];
  private readonly eogSet: Set<number>;

  /** `file` names the tokenizer.json in error messages. */
  constructor(json: Json, config: Json, file = 'tokenizer.json') {
    // Everything here touches the untrusted file through the library: whatever it throws becomes
    // TOKENIZER_INVALID naming the file.
    try {
      const model = json.model as Json | undefined;
      if (typeof model !== 'object' || model === null) throw invalid(file, 'has no "model" object');
      // the library would guess a "legacy" model for a type it does not know; refuse instead
      if (model.type !== undefined && !SUPPORTED_MODELS.includes(model.type as string)) {
        throw invalid(file, `model type ${JSON.stringify(model.type)} is not supported (${SUPPORTED_MODELS.join(', ')})`);
      }
      if (!Array.isArray(json.added_tokens)) json = { ...json, added_tokens: [] };
      // The library sizes its id → token table by the largest id: check the ids before it sees them.
      checkIds(json, model, file);
      for (const key of ['normalizer', 'pre_tokenizer', 'post_processor', 'decoder']) {
        if (!(key in json)) json = { ...json, [key]: null };
      }
      try {
        this.hf = new HfTokenizer(json, config);
      } catch (error) {
        throw invalid(file, `unsupported or malformed tokenizer (model type ${JSON.stringify(model.type)}): ${(error as Error).message}`, error);
      }
      const added = json.added_tokens as AddedTokenJson[];
      for (const token of added) {
        if (typeof token?.id !== 'number' || typeof token.content !== 'string') throw invalid(file, `added_tokens entry ${JSON.stringify(token)} has no id/content`);
        if (token.special) this.specialIds.add(token.id);
        else this.plainAdded.push({ id: token.id, content: token.content });
      }
      this.plainAdded.sort((a, b) => b.content.length - a.content.length);
      let size = 0;
      for (const [piece, id] of this.hf.get_vocab(true)) {
        if (!Number.isInteger(id) || id < 0 || id >= MAX_VOCAB_SIZE) throw invalid(file, `token ${JSON.stringify(piece).slice(0, 40)} has id ${String(id).slice(0, 40)}, not an integer in [0, ${MAX_VOCAB_SIZE})`);
        size = Math.max(size, id + 1);
      }
      if (size === 0) throw invalid(file, 'the vocabulary is empty');
      this.vocabSize = size;

      const idOf = (value: unknown): number | undefined => {
        const text = tokenText(value);
        return text === undefined ? undefined : this.hf.token_to_id(text);
      };
      this.specialTexts = {
        bos: tokenText(config.bos_token),
        eos: tokenText(config.eos_token),
        unk: tokenText(config.unk_token),
        pad: tokenText(config.pad_token),
      };
      this.bos = idOf(config.bos_token);
      this.eos = idOf(config.eos_token);
      // what the post-processor really does decides addBos/addEos
      const plain = this.hf.encode('a', { add_special_tokens: false }).ids;
      const special = this.hf.encode('a', { add_special_tokens: true }).ids;
      this.addBos = this.bos !== undefined && special[0] === this.bos && plain[0] !== this.bos;
      this.addEos = this.eos !== undefined && special[special.length - 1] === this.eos && plain[plain.length - 1] !== this.eos;
      const eog: number[] = this.eos === undefined ? [] : [this.eos];
      for (const text of END_OF_GENERATION_TEXTS) {
        const id = this.hf.token_to_id(text);
        if (id !== undefined && this.specialIds.has(id) && !eog.includes(id)) eog.push(id);
      }
      const exceptions = endOfGenerationExceptions((text) => this.hf.token_to_id(text) !== undefined);
      this.eosIds = eog.filter((id) => !exceptions.has(this.hf.id_to_token(id) ?? ''));
      this.eogSet = new Set(this.eosIds);
    } catch (error) {
      if (error instanceof LonghandError) throw error;
      throw invalid(file, `malformed tokenizer: ${error instanceof Error ? error.message : String(error)}`, error);
    }
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const ids = this.encodeUnchecked(text, options);
    // A piece the vocabulary lacks, in a tokenizer whose unk token is missing too, comes back
    // without an id (found by fuzzing); never hand that to the model.
    const bad = ids.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= this.vocabSize);
    if (bad !== -1) throw new LonghandError('TOKENIZER_INVALID', `the tokenizer gave no valid id for piece ${bad} of the text (${String(ids[bad])}): its vocabulary lacks the piece and an unknown-token id`, { index: bad, vocabSize: this.vocabSize });
    return ids;
  }

  private encodeUnchecked(text: string, options: EncodeOptions): number[] {
    const addSpecial = options.addSpecial ?? true;
    if (options.parseSpecial) return this.hf.encode(text, { add_special_tokens: addSpecial }).ids;
    // The library always matches added tokens in the text. To keep special tokens as plain text,
    // run its own pipeline (normalizer → pre-tokenizer → model) on the stretches between the
    // non-special added tokens, then its post-processor for BOS/EOS.
    const hf = this.hf;
    const pieces: string[] = [];
    for (const fragment of this.splitPlainAdded(text)) {
      if (typeof fragment === 'number') {
        pieces.push(hf.id_to_token(fragment) as string);
        continue;
      }
      const normalized = hf.normalizer ? hf.normalizer(fragment) : fragment;
      if (normalized === '') continue;
      const words = hf.pre_tokenizer ? hf.pre_tokenizer(normalized, { section_index: 0 }) : [normalized];
      pieces.push(...(hf.model as unknown as (words: string[]) => string[])(words));
    }
    const processed = hf.post_processor ? hf.post_processor(pieces, null, addSpecial).tokens : pieces;
    const unk = (hf.model as unknown as { unk_token_id?: number }).unk_token_id;
    return processed.map((piece: string) => hf.token_to_id(piece) ?? (unk as number));
  }

  private splitPlainAdded(text: string): (string | number)[] {
    let fragments: (string | number)[] = text === '' ? [] : [text];
    for (const token of this.plainAdded) {
      if (token.content === '' || !text.includes(token.content)) continue;
      fragments = fragments.flatMap((fragment) => {
        if (typeof fragment === 'number') return [fragment];
        const out: (string | number)[] = [];
        fragment.split(token.content).forEach((part, i) => {
          if (i > 0) out.push(token.id);
          if (part !== '') out.push(part);
        });
        return out;
      });
    }
    return fragments;
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    if (ids.length === 0) return '';
    for (const id of ids) this.checkId(id);
    const skip = options.skipSpecial ?? true;
    return this.hf.decode([...ids], { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
  }

  tokenPiece(id: number): string {
    this.checkId(id);
    return this.hf.id_to_token(id) ?? '';
  }

  tokenId(piece: string): number | undefined {
    return this.hf.token_to_id(piece);
  }

  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }

  isEndOfGeneration(id: number): boolean {
    return this.eogSet.has(id);
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new LonghandError('TOKENIZER_INVALID', `token id ${id} is outside the vocabulary of ${this.vocabSize} tokens`, { id, vocabSize: this.vocabSize });
    }
  }
}
