// The token texts that end generation, whichever file format the vocabulary came from: llama.cpp's
// list (llama_vocab::impl::load, special_eog_ids, in the build node-llama-cpp 3.21.1 ships), so a
// GGUF file and the Hugging Face folder it was converted from stop on the same tokens. Among them
// Gemma 4's <turn|> and <eos>, gpt-oss's <|return|> and <|call|>, Phi's <|end|>, ChatML's <|im_end|>.
export const END_OF_GENERATION_TEXTS: ReadonlySet<string> = new Set([
  '<|eot_id|>', '<|im_end|>', '<|end|>', '<|return|>', '<|call|>', '<|flush|>', '<|calls|>', '<end_of_turn>', '<|endoftext|>', '</s>',
  '<|eom_id|>', '<EOT>', '_<EOT>', '[EOT]', '[EOS]', '<|end_of_text|>', '<end_of_utterance>', '<eos>', '<turn|>', '<|tool_response>',
  '<｜end▁of▁sentence｜>', '[e~[',
]);

/** How llama.cpp retypes a token it takes back out of the end-of-generation set. */
export type EogExceptionType = 'userDefined' | 'normal';

/**
 * The texts llama.cpp takes back out of the end-of-generation set once it has collected it
 * (llama_vocab::impl::load's two workarounds), with the type each then gets:
 *   - o200k_harmony (gpt-oss) and solar-open: with <|return|> and <|call|>, or <|call(s)|> and
 *     <|flush|>, <|end|> only closes a message: USER_DEFINED, generation goes on;
 *   - Gemma 4 (and paddleocr): with <|tool_response>, </s> is HTML's strike-through end tag, a
 *     NORMAL token: a Gemma 4 model that writes it keeps writing, and text containing it is text.
 * `hasText`: whether the vocabulary has a token with this text.
 */
export function endOfGenerationExceptions(hasText: (text: string) => boolean): ReadonlyMap<string, EogExceptionType> {
  const exceptions = new Map<string, EogExceptionType>();
  const call = hasText('<|call|>') || hasText('<|calls|>');
  if (hasText('<|end|>') && ((hasText('<|return|>') && call) || (call && hasText('<|flush|>')))) exceptions.set('<|end|>', 'userDefined');
  if (hasText('<|tool_response>') && hasText('</s>')) exceptions.set('</s>', 'normal');
  return exceptions;
}
