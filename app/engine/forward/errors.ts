// Errors of the forward pass that callers tell apart.
import { LonghandError } from '../../common/errors.ts';

/**
 * A prefill or decode stopped by its AbortSignal. `name` is 'AbortError' like the DOM's, so code
 * that checks `err.name === 'AbortError'` treats it as a cancellation. The runner's cache is left
 * as it was before the call (position unchanged).
 */
export class ForwardAbortedError extends LonghandError {
  /** Tokens in the cache after the abort (what was there before the call). */
  readonly position: number;

  constructor(position: number, options?: { cause?: unknown }) {
    super('ABORTED', `forward pass aborted (the cache keeps its ${position} tokens)`, { position }, options);
    this.name = 'AbortError';
    this.position = position;
  }
}

/** A prompt or a decode step that does not fit the runner's context. */
export function contextOverflow(position: number, adding: number, contextLength: number): LonghandError {
  return new LonghandError(
    'CONTEXT_OVERFLOW',
    `${adding} more token${adding === 1 ? '' : 's'} after ${position} do not fit the context of ${contextLength} tokens`,
    { position, adding, contextLength },
  );
}
