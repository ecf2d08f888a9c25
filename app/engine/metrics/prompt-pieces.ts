// The prompt's text token by token (the 'prompt' event's pieces), so the inspector can draw the
// context as the tokens the engine holds: special tokens as their own text (<s> is where the
// attention sink usually is), a character split over several tokens on the last of them.
import { StreamDecoder, type Tokenizer } from '../model/tokenizer/tokenizer.ts';

export function promptPieces(tokenizer: Tokenizer, ids: readonly number[]): string[] {
  const decoder = new StreamDecoder(tokenizer, { continuation: false, skipSpecial: false });
  const pieces = ids.map((id) => decoder.push(id));
  if (pieces.length > 0) pieces[pieces.length - 1] += decoder.flush();
  return pieces;
}
