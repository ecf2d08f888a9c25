// Why a generation ended (the protocol's StopReason), and the per-generation limits.
import { UsageError } from '../../common/errors.ts';
import type { StopReason } from '../../common/protocol.ts';
import { resolveSamplingParams, validateSamplingParams, type SamplingParams } from './sampler.ts';
import { validateStopStrings } from './stop.ts';

/**
 * eos: the model produced an end-of-generation token (not shown as text).
 * stopString: a stop string appeared (the text before it was shown, the stop string not).
 * maxTokens: GenerationParams.maxTokens tokens were produced.
 * contextLimit: one more token would not fit in the context (prompt + completion ≤ context length).
 * cancelled: the caller's AbortSignal fired.
 * error: the runner (or sampler) failed after tokens were produced; see the done event's error.
 */
export type { StopReason };
export { STOP_REASONS } from '../../common/protocol.ts';

export interface GenerationParams {
  /** Most tokens to generate: a positive integer. Default 256. */
  maxTokens: number;
  /** Text that ends the generation (not shown). Default none. */
  stopStrings: readonly string[];
  /** End at the model's end-of-generation tokens. Default true; false treats them as text. */
  stopOnEos: boolean;
  sampling: SamplingParams;
}

export interface GenerationOptions {
  maxTokens?: number;
  stopStrings?: readonly string[];
  stopOnEos?: boolean;
  sampling?: Partial<SamplingParams>;
}

export const DEFAULT_MAX_TOKENS = 256;

/** Throws UsageError (code BAD_ARGUMENT, details.field) for the first bad field. */
export function validateGenerationParams(params: GenerationParams): void {
  const { maxTokens } = params;
  if (typeof maxTokens !== 'number' || !Number.isSafeInteger(maxTokens) || maxTokens <= 0) {
    throw new UsageError(`maxTokens must be a positive integer, got ${String(maxTokens)}`, { field: 'maxTokens', value: String(maxTokens) });
  }
  validateStopStrings(params.stopStrings);
  if (typeof params.stopOnEos !== 'boolean') {
    throw new UsageError(`stopOnEos must be true or false, got ${String(params.stopOnEos)}`, { field: 'stopOnEos' });
  }
  validateSamplingParams(params.sampling);
}

/** Defaults filled in (sampling: llama.cpp's), then validated. */
export function resolveGenerationParams(options: GenerationOptions = {}): GenerationParams {
  const params: GenerationParams = {
    maxTokens: options.maxTokens ?? DEFAULT_MAX_TOKENS,
    stopStrings: options.stopStrings ?? [],
    stopOnEos: options.stopOnEos ?? true,
    sampling: resolveSamplingParams(options.sampling),
  };
  validateGenerationParams(params);
  return params;
}
