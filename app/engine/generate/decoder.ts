// The tokenizer as the loop's TokenTextDecoder: one StreamDecoder per generation. Generated
// tokens that continue a prompt keep their leading space; when the prompt holds no text (only
// BOS or other special tokens) the first piece starts the document, and SentencePiece's
// word-boundary space is dropped there, as llama.cpp does. Control tokens render as nothing.
import { StreamDecoder, type Tokenizer } from '../model/tokenizer/tokenizer.ts';
import type { TokenTextDecoder } from './loop.ts';

export function tokenizerDecoder(tokenizer: Tokenizer, options: { skipSpecial?: boolean; continuation?: boolean } = {}): TokenTextDecoder {
  const continuation = options.continuation ?? true;
  return { createStreamDecoder: () => new StreamDecoder(tokenizer, { continuation, skipSpecial: options.skipSpecial ?? true }) };
}
