// The tokenizer as the loop's TokenTextDecoder: one StreamDecoder per generation (generated
// tokens continue the prompt, so no leading space is dropped; control tokens render as nothing).
import { StreamDecoder, type Tokenizer } from '../model/tokenizer/tokenizer.ts';
import type { TokenTextDecoder } from './loop.ts';

export function tokenizerDecoder(tokenizer: Tokenizer, options: { skipSpecial?: boolean } = {}): TokenTextDecoder {
  return { createStreamDecoder: () => new StreamDecoder(tokenizer, { continuation: true, skipSpecial: options.skipSpecial ?? true }) };
}
