import { describe, expect, it } from 'vitest';
import { UsageError } from '../../common/errors.ts';
import { DEFAULT_SAMPLING_PARAMS } from './sampler.ts';
import { DEFAULT_MAX_TOKENS, STOP_REASONS, resolveGenerationParams } from './stop-reason.ts';

describe('GenerationParams', () => {
  it('fills in defaults', () => {
    expect(resolveGenerationParams()).toEqual({ maxTokens: DEFAULT_MAX_TOKENS, stopStrings: [], stopOnEos: true, sampling: DEFAULT_SAMPLING_PARAMS });
    expect(resolveGenerationParams({ maxTokens: 5, stopOnEos: false, sampling: { temperature: 0 } })).toMatchObject({
      maxTokens: 5,
      stopOnEos: false,
      sampling: { ...DEFAULT_SAMPLING_PARAMS, temperature: 0 },
    });
  });

  it.each([
    [{ maxTokens: 0 }, 'maxTokens'],
    [{ maxTokens: -3 }, 'maxTokens'],
    [{ maxTokens: 1.5 }, 'maxTokens'],
    [{ maxTokens: Number.NaN }, 'maxTokens'],
    [{ stopStrings: [''] }, 'stopStrings'],
    [{ stopOnEos: 'yes' as unknown as boolean }, 'stopOnEos'],
    [{ sampling: { topP: 2 } }, 'topP'],
  ])('rejects %j naming %s', (options, field) => {
    let caught: unknown;
    try {
      resolveGenerationParams(options);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(UsageError);
    expect((caught as UsageError).details.field).toBe(field);
  });

  it('lists every stop reason', () => {
    expect(STOP_REASONS).toEqual(['eos', 'stopString', 'maxTokens', 'contextLimit', 'cancelled', 'error']);
  });
});
