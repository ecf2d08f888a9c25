import { describe, expect, it } from 'vitest';
import { LonghandError, UsageError } from '../../common/errors.ts';
import { Rng } from './rng.ts';
import {
  DEFAULT_SAMPLING_PARAMS,
  SamplingError,
  createSampler,
  penalizedLogits,
  resolveSamplingParams,
  validateSamplingParams,
  type SamplingParams,
} from './sampler.ts';

/** Plain sampling: every filter off, temperature 1. */
const PLAIN: SamplingParams = { ...DEFAULT_SAMPLING_PARAMS, temperature: 1, topK: 0, topP: 1, minP: 0, seed: 1 };
const GREEDY: SamplingParams = { ...PLAIN, temperature: 0 };

const f32 = (values: number[]): Float32Array => Float32Array.from(values);
/** Logits whose softmax is `probs` (log of each). */
const fromProbs = (probs: number[]): Float32Array => f32(probs.map(Math.log));
const keptIds = (params: SamplingParams, logits: Float32Array, history: number[] = []): number[] =>
  createSampler(params, logits.length).candidates(logits, history).map((c) => c.id);

function randomLogits(n: number, seed: number, scale = 3): Float32Array {
  const rng = new Rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    // sum of 4 uniforms: roughly normal, mean 0
    out[i] = (rng.nextFloat() + rng.nextFloat() + rng.nextFloat() + rng.nextFloat() - 2) * scale;
  }
  return out;
}

/** The kept set the definitions ask for, by sorting everything (slow reference). */
function referenceKept(logits: Float32Array, p: SamplingParams): number[] {
  let c = Array.from(logits, (x, id) => ({ id, x: Number.isNaN(x) ? -Infinity : x })).filter((e) => e.x > -Infinity);
  c.sort((a, b) => b.x - a.x || a.id - b.id);
  if (p.topK > 0) c = c.slice(0, p.topK);
  const max = c[0]!.x;
  if (p.topP < 1) {
    const w = c.map((e) => Math.exp(e.x - max));
    const sum = w.reduce((a, b) => a + b, 0);
    let cum = 0;
    let m = c.length;
    for (let i = 0; i < c.length; i++) {
      cum += w[i]! / sum;
      if (cum >= p.topP) {
        m = i + 1;
        break;
      }
    }
    c = c.slice(0, m);
  }
  if (p.minP > 0) c = c.filter((e) => e.x >= max + Math.log(p.minP));
  return c.map((e) => e.id).sort((a, b) => a - b);
}

function frequencies(params: SamplingParams, logits: Float32Array, draws: number): number[] {
  const sampler = createSampler(params, logits.length);
  const counts = new Array<number>(logits.length).fill(0);
  for (let i = 0; i < draws; i++) counts[sampler.sample(logits, [])]!++;
  return counts.map((c) => c / draws);
}

describe('validateSamplingParams', () => {
  it('accepts the defaults and fills them in', () => {
    expect(() => validateSamplingParams({ ...DEFAULT_SAMPLING_PARAMS })).not.toThrow();
    expect(resolveSamplingParams({ temperature: 0, seed: 5 })).toEqual({ ...DEFAULT_SAMPLING_PARAMS, temperature: 0, seed: 5 });
    expect(resolveSamplingParams()).toEqual(DEFAULT_SAMPLING_PARAMS);
  });

  const bad: Array<[keyof SamplingParams, unknown]> = [
    ['temperature', -0.1],
    ['temperature', Number.NaN],
    ['temperature', Infinity],
    ['temperature', '1'],
    ['topK', -1],
    ['topK', 2.5],
    ['topP', 0],
    ['topP', 1.01],
    ['topP', Number.NaN],
    ['minP', -0.01],
    ['minP', 1.5],
    ['repetitionPenalty', 0],
    ['repetitionPenalty', -1],
    ['repetitionPenalty', Infinity],
    ['presencePenalty', Number.NaN],
    ['frequencyPenalty', -Infinity],
    ['penaltyLastN', -2],
    ['penaltyLastN', 3.5],
    ['seed', -1],
    ['seed', 0.5],
    ['seed', 2 ** 53],
  ];
  it.each(bad)('rejects %s = %s with a UsageError naming the field', (field, value) => {
    const params = { ...DEFAULT_SAMPLING_PARAMS, [field]: value } as SamplingParams;
    let caught: unknown;
    try {
      validateSamplingParams(params);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(UsageError);
    expect((caught as UsageError).code).toBe('BAD_ARGUMENT');
    expect((caught as UsageError).details.field).toBe(field);
    expect((caught as UsageError).message).toContain(`sampling.${field}`);
    expect(() => createSampler(params, 4)).toThrow(UsageError);
  });

  it('rejects a vocabulary size that is not a positive integer', () => {
    expect(() => createSampler(PLAIN, 0)).toThrow(UsageError);
    expect(() => createSampler(PLAIN, 2.5)).toThrow(UsageError);
  });
});

describe('greedy (temperature 0)', () => {
  it('takes the argmax, ties to the lowest id', () => {
    const s = createSampler(GREEDY, 5);
    expect(s.sample(f32([1, 3, 3, 2, 3]), [])).toBe(1);
    expect(s.sample(f32([-5, -5, -5, -5, -5]), [])).toBe(0);
    expect(s.sample(f32([0, 0, 0, 0, 0.001]), [])).toBe(4);
  });

  it('does not touch the RNG (same answer whatever the seed)', () => {
    const logits = randomLogits(100, 3);
    const a = createSampler({ ...GREEDY, seed: 1 }, 100);
    const b = createSampler({ ...GREEDY, seed: 2 }, 100);
    for (let i = 0; i < 10; i++) expect(a.sample(logits, [])).toBe(b.sample(logits, []));
  });

  it('is the limit of temperature → 0', () => {
    const logits = f32([0.1, 0.5, 0.4, -1]);
    const cold = createSampler({ ...PLAIN, temperature: 1e-3 }, 4);
    for (let i = 0; i < 1000; i++) expect(cold.sample(logits, [])).toBe(1);
    // at 0.05 the runner-up keeps exp(-0.1 / 0.05) / (1 + exp(-2)) ≈ 12% of the mass
    const cool = frequencies({ ...PLAIN, temperature: 0.05 }, logits, 20_000);
    expect(cool[1]).toBeCloseTo(1 / (1 + Math.exp(-2) + Math.exp(-10) + Math.exp(-30)), 1);
  });

  it('top-k = 1 is greedy, ties included', () => {
    const logits = randomLogits(500, 11);
    const greedy = createSampler(GREEDY, 500).sample(logits, []);
    const topOne = createSampler({ ...PLAIN, temperature: 1.5, topK: 1 }, 500);
    for (let i = 0; i < 50; i++) expect(topOne.sample(logits, [])).toBe(greedy);
    expect(createSampler({ ...PLAIN, topK: 1 }, 4).sample(f32([2, 5, 5, 1]), [])).toBe(1);
    expect(keptIds({ ...PLAIN, topK: 1 }, f32([2, 5, 5, 1]))).toEqual([1]);
  });
});

describe('top-k, top-p, min-p', () => {
  // ids 0..4 hold probabilities 0.25, 0.4, 0.08, 0.15, 0.12 (sorted: 1, 0, 3, 4, 2)
  const five = fromProbs([0.25, 0.4, 0.08, 0.15, 0.12]);

  it('top-k keeps the k largest', () => {
    expect(keptIds({ ...PLAIN, topK: 2 }, five)).toEqual([0, 1]);
    expect(keptIds({ ...PLAIN, topK: 4 }, five)).toEqual([0, 1, 3, 4]);
    expect(keptIds({ ...PLAIN, topK: 5 }, five)).toEqual([0, 1, 2, 3, 4]);
    expect(keptIds({ ...PLAIN, topK: 50 }, five)).toEqual([0, 1, 2, 3, 4]);
    // a tie at the boundary keeps the lowest ids
    expect(keptIds({ ...PLAIN, topK: 2 }, f32([1, 2, 1, 1, 0]))).toEqual([0, 1]);
    expect(keptIds({ ...PLAIN, topK: 3 }, f32([1, 2, 1, 1, 0]))).toEqual([0, 1, 2]);
  });

  it('top-p keeps the smallest set whose mass reaches p', () => {
    // cumulative in order 1, 0, 3, 4, 2: 0.40, 0.65, 0.80, 0.92, 1.00
    expect(keptIds({ ...PLAIN, topP: 0.3 }, five)).toEqual([1]);
    expect(keptIds({ ...PLAIN, topP: 0.5 }, five)).toEqual([0, 1]);
    expect(keptIds({ ...PLAIN, topP: 0.7 }, five)).toEqual([0, 1, 3]);
    expect(keptIds({ ...PLAIN, topP: 0.85 }, five)).toEqual([0, 1, 3, 4]);
    expect(keptIds({ ...PLAIN, topP: 0.95 }, five)).toEqual([0, 1, 2, 3, 4]);
    // probabilities renormalised over the kept set
    const c = createSampler({ ...PLAIN, topP: 0.7 }, 5).candidates(five, []);
    expect(c.map((e) => e.p)).toEqual([0.25 / 0.8, 0.4 / 0.8, 0.15 / 0.8].map((x) => expect.closeTo(x, 6)) /* float32 logits */);
  });

  it('top-p: an exact boundary counts as reached; ties keep the lowest ids', () => {
    const flat = f32([0, 0, 0, 0]); // 0.25 each, exactly
    expect(keptIds({ ...PLAIN, topP: 0.5 }, flat)).toEqual([0, 1]);
    expect(keptIds({ ...PLAIN, topP: 0.51 }, flat)).toEqual([0, 1, 2]);
    expect(keptIds({ ...PLAIN, topP: 0.25 }, flat)).toEqual([0]);
  });

  it('top-p sees the temperature-1 distribution (temperature comes last, as in llama.cpp)', () => {
    expect(keptIds({ ...PLAIN, topP: 0.5, temperature: 5 }, five)).toEqual([0, 1]);
    expect(keptIds({ ...PLAIN, topP: 0.5, temperature: 0.2 }, five)).toEqual([0, 1]);
  });

  it('min-p keeps tokens at least minP times as likely as the best', () => {
    // best 0.4: minP 0.25 → ≥ 0.1 keeps 0.4, 0.25, 0.15, 0.12; minP 0.5 → ≥ 0.2
    expect(keptIds({ ...PLAIN, minP: 0.25 }, five)).toEqual([0, 1, 3, 4]);
    expect(keptIds({ ...PLAIN, minP: 0.5 }, five)).toEqual([0, 1]);
    expect(keptIds({ ...PLAIN, minP: 0.7 }, five)).toEqual([1]);
    expect(keptIds({ ...PLAIN, minP: 1 }, f32([3, 1, 3]))).toEqual([0, 2]);
  });

  it('chains top-k → top-p → min-p', () => {
    // top-k 4 drops id 2; renormalised, ids 1, 0, 3, 4 have cumulative 0.435, 0.707, 0.870, 1.0,
    // so top-p 0.8 keeps 1, 0, 3; min-p 0.5 (≥ 0.2 of 0.4) then keeps 1 and 0
    expect(keptIds({ ...PLAIN, topK: 4, topP: 0.8 }, five)).toEqual([0, 1, 3]);
    expect(keptIds({ ...PLAIN, topK: 4, topP: 0.8, minP: 0.5 }, five)).toEqual([0, 1]);
  });

  it('matches a sort-everything reference on random vocabularies', () => {
    const cases: Array<Partial<SamplingParams>> = [
      { topK: 40 },
      { topP: 0.9 },
      { topP: 0.5 },
      { minP: 0.05 },
      { topK: 40, topP: 0.95, minP: 0.05 },
      { topK: 1000, topP: 0.99 },
      { topK: 7 },
    ];
    for (let seed = 0; seed < 8; seed++) {
      // coarse values (rounded to 0.5) make many ties
      const logits = seed % 2 === 0 ? randomLogits(2000, seed) : randomLogits(2000, seed).map((x) => Math.round(x * 2) / 2);
      for (const c of cases) {
        const params = { ...PLAIN, ...c };
        expect(keptIds(params, logits), JSON.stringify(c)).toEqual(referenceKept(logits, params));
      }
    }
  });
});

describe('penalties', () => {
  const logits = f32([2, -1, 0.5, 3, -2]);
  const history = [0, 1, 1, 3, 0, 0];
  const params = { ...PLAIN, repetitionPenalty: 2, presencePenalty: 0.5, frequencyPenalty: 0.25, penaltyLastN: 4 };

  it('repeat (llama.cpp) then frequency and presence (OpenAI) over the last N ids', () => {
    // window [1, 3, 0, 0]: id 0 twice, ids 1 and 3 once
    // id 0: 2 / 2 = 1, minus 2·0.25 + 0.5 → 0;  id 1: -1 · 2 = -2, minus 0.75 → -2.75
    // id 3: 3 / 2 = 1.5, minus 0.75 → 0.75;  ids 2 and 4 untouched
    expect(Array.from(penalizedLogits(logits, history, params))).toEqual([0, -2.75, 0.5, 0.75, -2]);
  });

  it('penaltyLastN -1 is the whole history, 0 is off', () => {
    // counts: id 0 ×3, id 1 ×2, id 3 ×1
    expect(Array.from(penalizedLogits(logits, history, { ...params, penaltyLastN: -1 }))).toEqual([1 - 1.25, -2 - 1, 0.5, 0.75, -2]);
    expect(Array.from(penalizedLogits(logits, history, { ...params, penaltyLastN: 0 }))).toEqual([2, -1, 0.5, 3, -2]);
    expect(Array.from(penalizedLogits(logits, history, { ...params, penaltyLastN: 100 }))).toEqual([1 - 1.25, -2 - 1, 0.5, 0.75, -2]);
  });

  it('each penalty alone', () => {
    const only = (p: Partial<SamplingParams>): number[] =>
      Array.from(penalizedLogits(logits, history, { ...PLAIN, penaltyLastN: 4, ...p }));
    expect(only({ repetitionPenalty: 2 })).toEqual([1, -2, 0.5, 1.5, -2]);
    expect(only({ presencePenalty: 0.5 })).toEqual([1.5, -1.5, 0.5, 2.5, -2]);
    expect(only({ frequencyPenalty: 0.25 })).toEqual([1.5, -1.25, 0.5, 2.75, -2]);
    expect(only({ frequencyPenalty: -1 })).toEqual([4, 0, 0.5, 4, -2]);
  });

  it('the sampler applies them before choosing (greedy included)', () => {
    const g = createSampler({ ...GREEDY, repetitionPenalty: 1.1 }, 2);
    expect(g.sample(f32([3, 2.9]), [])).toBe(0);
    expect(g.sample(f32([3, 2.9]), [0])).toBe(1); // 3 / 1.1 < 2.9
    const s = createSampler(params, 5);
    expect(s.candidates(logits, history).map((c) => c.p)).toEqual(
      [0, -2.75, 0.5, 0.75, -2].map((x, _, a) => expect.closeTo(Math.exp(x) / a.reduce((t, y) => t + Math.exp(y), 0), 12)),
    );
    // and leave no state behind: the next call without history sees the raw logits
    expect(createSampler({ ...GREEDY, repetitionPenalty: 1.1 }, 2).sample(f32([3, 2.9]), [])).toBe(0);
    expect(g.sample(f32([3, 2.9]), [])).toBe(0);
  });

  it('rejects history ids outside the vocabulary', () => {
    const s = createSampler(params, 5);
    expect(() => s.sample(logits, [0, 5])).toThrow(UsageError);
    expect(() => s.sample(logits, [0, -1])).toThrow(UsageError);
    expect(() => s.sample(logits, [0, 1.5])).toThrow(UsageError);
    // the failed call left the counts clean
    expect(s.candidates(logits, [3]).length).toBe(5);
    expect(Array.from(penalizedLogits(logits, [3], params))).toEqual([2, -1, 0.5, 0.75, -2]);
  });
});

describe('seeded sampling', () => {
  it('the same seed gives the same draws', () => {
    const logits = randomLogits(1000, 5);
    const params = { ...DEFAULT_SAMPLING_PARAMS, seed: 1234 };
    const a = createSampler(params, 1000);
    const b = createSampler(params, 1000);
    const drawsA = Array.from({ length: 200 }, () => a.sample(logits, []));
    expect(Array.from({ length: 200 }, () => b.sample(logits, []))).toEqual(drawsA);
    expect(new Set(drawsA).size).toBeGreaterThan(1);
    expect(a.seed).toBe(1234);
  });

  it('without a seed one is drawn and reported', () => {
    const s = createSampler({ ...PLAIN, seed: undefined }, 3);
    expect(Number.isSafeInteger(s.seed)).toBe(true);
    const again = createSampler({ ...PLAIN, seed: s.seed }, 3);
    const logits = f32([0, 1, 2]);
    const draws = Array.from({ length: 50 }, () => s.sample(logits, []));
    expect(Array.from({ length: 50 }, () => again.sample(logits, []))).toEqual(draws);
  });

  it('20k draws from a 3-token softmax match it within ±1.5%', () => {
    const logits = f32([0, 1, 2]);
    const z = 1 + Math.E + Math.E ** 2;
    const expected = [1 / z, Math.E / z, Math.E ** 2 / z]; // 0.090, 0.245, 0.665
    const got = frequencies(PLAIN, logits, 20_000);
    got.forEach((p, i) => expect(Math.abs(p - expected[i]!)).toBeLessThan(0.015));
    // temperature 0.5 doubles the logits: softmax([0, 2, 4])
    const z2 = 1 + Math.E ** 2 + Math.E ** 4;
    const hot = frequencies({ ...PLAIN, temperature: 0.5, seed: 9 }, logits, 20_000);
    [1 / z2, Math.E ** 2 / z2, Math.E ** 4 / z2].forEach((p, i) => expect(Math.abs(hot[i]! - p)).toBeLessThan(0.015));
  });
});

describe('non-finite logits', () => {
  it('NaN counts as -Infinity', () => {
    const logits = f32([Number.NaN, 1, Number.NaN, 0.5]);
    expect(createSampler(GREEDY, 4).sample(logits, [])).toBe(1);
    expect(createSampler(GREEDY, 3).sample(f32([Number.NaN, Number.NaN, -3]), [])).toBe(2);
    expect(keptIds(PLAIN, logits)).toEqual([1, 3]);
    const freq = frequencies(PLAIN, logits, 2000);
    expect(freq[0]! + freq[2]!).toBe(0);
  });

  it('+Infinity counts as the largest float: several share the mass, greedy takes the lowest', () => {
    const logits = f32([Infinity, 0, Infinity, -Infinity]);
    expect(createSampler(GREEDY, 4).sample(logits, [])).toBe(0);
    const c = createSampler(PLAIN, 4).candidates(logits, []);
    expect(c).toEqual([
      { id: 0, p: 0.5 },
      { id: 1, p: 0 },
      { id: 2, p: 0.5 },
    ]);
    const freq = frequencies(PLAIN, logits, 2000);
    expect(freq[1]! + freq[3]!).toBe(0);
  });

  it('nothing finite → SamplingError (a LonghandError), greedy or not', () => {
    const dead = f32([Number.NaN, -Infinity, Number.NaN]);
    expect(() => createSampler(GREEDY, 3).sample(dead, [])).toThrow(SamplingError);
    expect(() => createSampler(PLAIN, 3).sample(dead, [])).toThrow(SamplingError);
    expect(() => createSampler(DEFAULT_SAMPLING_PARAMS, 3).sample(dead, [])).toThrow(LonghandError);
  });

  it('logits of the wrong length → SamplingError', () => {
    expect(() => createSampler(PLAIN, 3).sample(f32([1, 2]), [])).toThrow(SamplingError);
  });
});
