// The generation loop: prefill the prompt, then sample → emit → decode until a stop reason.
// Model-independent: it drives a TokenRunner (anything that turns ids into next-token logits)
// and a TokenTextDecoder (ids → text pieces; the tokenizer's StreamDecoder fits, see decoder.ts).
//
// Context rule: prompt + completion ≤ runner.contextLength, so the whole text always fits in the
// context. A prompt longer than the context throws before any work; generation stops with
// 'contextLimit' when one more token would not fit (the last emitted token is never decoded).
//
// Failures: validation errors, a prompt that does not fit, and any failure before the first token
// event (prefill, the first sample) are thrown from the iterator — the caller has nothing to
// show yet. After a token event, a failure of the runner or sampler ends the stream with a done
// event, stopReason 'error' and the error's code and message, and the iterator does not throw:
// the text already streamed stays valid and the consumer gets one uniform way to end.
import { LonghandError, isLonghandError, type ErrorCode, type ErrorDetails } from '../../common/errors.ts';
import { createSampler } from './sampler.ts';
import { StopMatcher } from './stop.ts';
import { resolveGenerationParams, type GenerationOptions, type GenerationParams, type StopReason } from './stop-reason.ts';

/** What the loop needs from a model. */
export interface TokenRunner {
  /** Most tokens (prompt + generated) the runner's context holds. */
  readonly contextLength: number;
  /** Ids that end generation (EOS, EOT, <|im_end|>...). */
  readonly eosIds: readonly number[];
  /** Runs the prompt; returns the logits of its last position, [vocabSize]. Should honour `signal`. */
  prefill(ids: readonly number[], signal?: AbortSignal): Promise<Float32Array>;
  /** Appends one id; returns the logits of its position, [vocabSize]. */
  decode(id: number): Promise<Float32Array>;
}

/** One stream of ids → text (the tokenizer's StreamDecoder has this shape). */
export interface TokenTextStream {
  /** The text that the id completes ('' while a character is incomplete). */
  push(id: number): string;
  /** End of stream: whatever is still held. */
  flush(): string;
}

export interface TokenTextDecoder {
  createStreamDecoder(): TokenTextStream;
}

export interface GenerationTimings {
  /** From the start of generate to the first token event (prefill + first sample). */
  ttftMs: number;
  /** Time inside runner.prefill. */
  prefillMs: number;
  /** Time inside runner.decode, all calls. */
  decodeMs: number;
  /** promptTokens / prefill seconds. */
  prefillTokensPerS: number;
  /** runner.decode calls / decode seconds (0 when there were none). */
  decodeTokensPerS: number;
  /** From the start of generate to the done event. */
  totalMs: number;
}

export interface TokenEvent {
  type: 'token';
  id: number;
  /** Text to append (may be '': an incomplete character, or text held back by the stop matcher). */
  text: string;
  /** 0-based position among the generated tokens. */
  index: number;
}

export interface DoneEvent {
  type: 'done';
  stopReason: StopReason;
  /**
   * Text still to append: what the stop matcher or the UTF-8 decoder held back until the end
   * (a possible stop-string start that never completed, an incomplete character as U+FFFD).
   * '' after a stop string.
   */
  text: string;
  promptTokens: number;
  /** Tokens in token events (an EOS that ended the generation is not counted). */
  completionTokens: number;
  /** The sampler's seed (given or drawn), to repeat the run. */
  seed: number | undefined;
  timings: GenerationTimings;
  /** With stopReason 'error'. */
  error?: { code: ErrorCode; message: string; details?: ErrorDetails };
}

export type GenerationEvent = TokenEvent | DoneEvent;

const now = (): number => performance.now();

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function isAbort(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}

/**
 * Streams a completion of promptIds. Validates params and the prompt eagerly (throws UsageError or
 * LonghandError before returning); see the file comment for the rules.
 * `params` may be partial: defaults as resolveGenerationParams.
 */
export function generate(
  runner: TokenRunner,
  decoder: TokenTextDecoder,
  promptIds: readonly number[],
  params: GenerationOptions | GenerationParams = {},
  signal?: AbortSignal,
): AsyncGenerator<GenerationEvent, void, undefined> {
  const resolved = resolveGenerationParams(params);
  const ctx = runner.contextLength;
  if (!Number.isSafeInteger(ctx) || ctx <= 0) {
    throw new LonghandError('BAD_ARGUMENT', `the runner's context length must be a positive integer, got ${String(ctx)}`, { contextLength: String(ctx) });
  }
  if (promptIds.length === 0) {
    throw new LonghandError('BAD_ARGUMENT', 'the prompt is empty: at least one token is needed', { promptTokens: 0 });
  }
  if (promptIds.length > ctx) {
    throw new LonghandError(
      'CONTEXT_OVERFLOW',
      `the prompt has ${promptIds.length} tokens, more than the context length ${ctx}`,
      { promptTokens: promptIds.length, contextLength: ctx },
    );
  }
  return run(runner, decoder, [...promptIds], resolved, signal);
}

async function* run(
  runner: TokenRunner,
  decoder: TokenTextDecoder,
  prompt: number[],
  params: GenerationParams,
  signal: AbortSignal | undefined,
): AsyncGenerator<GenerationEvent, void, undefined> {
  const t0 = now();
  const ctx = runner.contextLength;
  const eos = new Set(params.stopOnEos ? runner.eosIds : []);
  const stream = decoder.createStreamDecoder();
  const matcher = new StopMatcher(params.stopStrings);
  const promptTokens = prompt.length;
  const history = prompt; // grows: prompt + generated ids (the penalty window reads its tail)
  let completion = 0;
  let prefillMs = 0;
  let decodeMs = 0;
  let decodeCalls = 0;
  let ttftMs = 0;
  let seed = params.sampling.seed; // the sampler's once it exists (a drawn seed when none was given)

  const done = (stopReason: StopReason, error?: unknown): DoneEvent => {
    let reason = stopReason;
    let text = '';
    if (reason !== 'stopString') {
      // release what the decoder and the matcher still hold; a stop string may complete here
      const step = matcher.push(stream.flush());
      text = step.emit + matcher.flush();
      if (step.stopped) reason = 'stopString';
    }
    const totalMs = now() - t0;
    const event: DoneEvent = {
      type: 'done',
      stopReason: reason,
      text,
      promptTokens,
      completionTokens: completion,
      seed,
      timings: {
        ttftMs,
        prefillMs,
        decodeMs,
        prefillTokensPerS: prefillMs > 0 ? (promptTokens * 1000) / prefillMs : 0,
        decodeTokensPerS: decodeMs > 0 ? (decodeCalls * 1000) / decodeMs : 0,
        totalMs,
      },
    };
    if (error !== undefined) {
      event.error = isLonghandError(error)
        ? { code: error.code, message: error.message, details: error.details }
        : { code: 'INTERNAL', message: error instanceof Error ? error.message : String(error) };
    }
    return event;
  };

  if (isAbort(signal)) {
    yield done('cancelled');
    return;
  }
  if (promptTokens >= ctx) {
    // the prompt fills the context: not one token fits
    yield done('contextLimit');
    return;
  }

  let logits: Float32Array;
  const tPrefill = now();
  try {
    logits = await runner.prefill(prompt.slice(), signal);
  } catch (error) {
    prefillMs = now() - tPrefill;
    if (isAbort(signal)) {
      yield done('cancelled');
      return;
    }
    throw error;
  }
  prefillMs = now() - tPrefill;
  if (isAbort(signal)) {
    yield done('cancelled');
    return;
  }

  const sampler = createSampler(params.sampling, logits.length); // before the first token: throws
  seed = sampler.seed;
  for (;;) {
    let id: number;
    try {
      id = sampler.sample(logits, history);
    } catch (error) {
      if (completion === 0) throw error;
      yield done('error', error);
      return;
    }
    if (eos.has(id)) {
      yield done('eos');
      return;
    }
    const piece = stream.push(id);
    const step = matcher.push(piece);
    history.push(id);
    const index = completion++;
    if (index === 0) ttftMs = now() - t0;
    yield { type: 'token', id, text: step.emit, index };
    if (step.stopped) {
      yield done('stopString');
      return;
    }
    if (completion >= params.maxTokens) {
      yield done('maxTokens');
      return;
    }
    if (promptTokens + completion >= ctx) {
      // the next token would not fit
      yield done('contextLimit');
      return;
    }
    // A runner whose decode never waits on I/O (the native dense stages run on this thread) would
    // hold the event loop for the whole generation: a cancel, a metrics request or the transport's
    // sends of the tokens yielded above would get through only at the end. One turn per token.
    await yieldToEventLoop();
    if (isAbort(signal)) {
      yield done('cancelled');
      return;
    }
    const tDecode = now();
    try {
      logits = await runner.decode(id);
    } catch (error) {
      decodeMs += now() - tDecode;
      yield done(isAbort(signal) ? 'cancelled' : 'error', isAbort(signal) ? undefined : error);
      return;
    }
    decodeMs += now() - tDecode;
    decodeCalls++;
  }
}
