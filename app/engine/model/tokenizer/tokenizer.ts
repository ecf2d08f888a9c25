// The tokenizer as the engine sees it, whatever it was built from: GGUF metadata (SentencePiece
// "llama" or byte-level BPE "gpt2", both written here to match llama.cpp id for id) or a Hugging
// Face tokenizer.json (through @huggingface/tokenizers). Also the streaming decoder that turns
// generated ids into text without ever emitting half a UTF-8 character.
import type { TokenizerSource } from '../types.ts';
import { BpeTokenizer } from './bpe.ts';
import { readGgufVocab } from './gguf-vocab.ts';
import { loadHfTokenizer } from './hf-tokenizer-json.ts';
import { SpmTokenizer } from './spm.ts';

export interface EncodeOptions {
  /** Add the model's BOS (and EOS, when the model asks for it). Default true. */
  addSpecial?: boolean;
  /**
   * Recognise control tokens written in the text (`<s>`, `<|im_end|>`...) as those tokens.
   * Default false: user text is text. Set it for prompts rendered by a chat template.
   * User-defined tokens (GGUF token_type 4) are always recognised, as in llama.cpp.
   */
  parseSpecial?: boolean;
}

export interface DecodeOptions {
  /** Render control tokens (BOS, EOS, <|im_end|>...) as nothing. Default true. */
  skipSpecial?: boolean;
  /**
   * The ids continue text that was already shown (the tokens generated after a prompt):
   * never drop a leading space. Default false, which is llama.cpp's llama_detokenize: with a
   * SentencePiece vocabulary that adds a space prefix, the leading space of the first piece is
   * dropped unless the sequence starts with BOS. So decode(promptIds + generatedIds) keeps
   * " Once upon..." (BOS first) and decode(generatedIds) gives "Once upon..." like llama.cpp;
   * decode(generatedIds, { continuation: true }) gives the text to append after the prompt.
   */
  continuation?: boolean;
}

export interface Tokenizer {
  /** 'spm' and 'bpe' come from GGUF metadata, 'hf' from tokenizer.json. */
  readonly kind: 'spm' | 'bpe' | 'hf';
  readonly vocabSize: number;
  readonly bos: number | undefined;
  readonly eos: number | undefined;
  /** Every id that ends generation (EOS, EOT, <|im_end|>, <|eot_id|>...), EOS first. */
  readonly eosIds: readonly number[];
  /** encode(text) with addSpecial puts BOS first. */
  readonly addBos: boolean;
  /** encode(text) with addSpecial puts EOS last. */
  readonly addEos: boolean;
  encode(text: string, options?: EncodeOptions): number[];
  decode(ids: readonly number[], options?: DecodeOptions): string;
  /** The raw vocabulary entry (SentencePiece pieces keep U+2581, byte-level BPE keeps Ġ). */
  tokenPiece(id: number): string;
  /** The id of a raw vocabulary entry, if there is one. */
  tokenId(piece: string): number | undefined;
  /** Control/unknown tokens: the ones skipSpecial hides. */
  isSpecial(id: number): boolean;
  isEndOfGeneration(id: number): boolean;
  /**
   * The bytes one token adds to the text (undefined when the tokenizer cannot say per token,
   * as for tokenizer.json decoders). `first` applies the leading-space rule of decode().
   */
  tokenBytes?(id: number, options?: { skipSpecial?: boolean; first?: boolean }): Uint8Array;
}

/**
 * Turns ids, one at a time, into text; never emits part of a multi-byte character. Joined, the
 * pieces it returns (push... then flush) equal decode(ids, { continuation, skipSpecial }).
 * Default continuation: true, since generated tokens follow a prompt.
 */
export class StreamDecoder {
  private readonly tokenizer: Tokenizer;
  private readonly skipSpecial: boolean;
  private readonly continuation: boolean;
  // byte path (GGUF tokenizers)
  private readonly utf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true }); // a U+FEFF the model wrote is text (llama.cpp keeps it)
  private count = 0;
  // text-diff path (tokenizer.json): the offsets scheme of text-generation-inference
  private readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;

  constructor(tokenizer: Tokenizer, options: { skipSpecial?: boolean; continuation?: boolean } = {}) {
    this.tokenizer = tokenizer;
    this.skipSpecial = options.skipSpecial ?? true;
    this.continuation = options.continuation ?? true;
  }

  /** Adds one id; returns the characters that are now complete (often '', never half a char). */
  push(id: number): string {
    const first = this.count === 0 && !this.continuation;
    this.count++;
    if (this.tokenizer.tokenBytes) {
      const bytes = this.tokenizer.tokenBytes(id, { skipSpecial: this.skipSpecial, first });
      return this.utf8.decode(bytes, { stream: true });
    }
    this.ids.push(id);
    const options = { skipSpecial: this.skipSpecial, continuation: this.continuation };
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset), options);
    const full = this.tokenizer.decode(this.ids.slice(this.prefixOffset), options);
    if (full.length > prefix.length && !full.endsWith('\uFFFD') && full.startsWith(prefix)) {
      this.prefixOffset = this.readOffset;
      this.readOffset = this.ids.length;
      // keep the prefix window small: the next call decodes from prefixOffset only
      return full.slice(prefix.length);
    }
    return '';
  }

  /** End of the stream: whatever is still held (an incomplete character becomes U+FFFD). */
  flush(): string {
    if (this.tokenizer.tokenBytes) return this.utf8.decode();
    const options = { skipSpecial: this.skipSpecial, continuation: this.continuation };
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset), options);
    const full = this.tokenizer.decode(this.ids.slice(this.prefixOffset), options);
    this.prefixOffset = this.readOffset = this.ids.length;
    return full.startsWith(prefix) ? full.slice(prefix.length) : '';
  }
}

/**
 * The tokenizer a GGUF file describes ('llama' → SentencePiece, 'gpt2' → byte-level BPE).
 * Throws LonghandError TOKENIZER_INVALID for a vocabulary that cannot work and
 * MODEL_MISSING_METADATA when tokenizer.ggml.model is absent.
 */
export function createGgufTokenizer(metadata: ReadonlyMap<string, unknown>): Tokenizer {
  const vocab = readGgufVocab(metadata);
  return vocab.model === 'llama' ? new SpmTokenizer(vocab) : new BpeTokenizer(vocab);
}

/**
 * Builds the tokenizer a model names: from GGUF metadata (synchronous work) or from a
 * tokenizer.json (+ tokenizer_config.json) read from disk.
 */
export async function createTokenizer(source: TokenizerSource): Promise<Tokenizer> {
  if (source.kind === 'gguf') return createGgufTokenizer(source.metadata);
  return loadHfTokenizer(source.path, source.configPath);
}
