import { describe, expect, it } from 'vitest';
import { LonghandError } from '../../common/errors.ts';
import { Rng, randomSeed } from './rng.ts';

// Expected values from the xoshiro authors' C reference (xoshiro128starstar.c) seeded with
// splitmix64.c (state = seed; s[0..1] = low/high half of the first output, s[2..3] of the
// second), compiled with gcc; splitmix64(0)'s first output is the well-known 0xe220a8397b1dcdaf.
const EXPECTED: ReadonlyArray<[number, number[]]> = [
  [0, [3737715805, 2584255861, 2876756834, 3286328325, 1553311962, 1625202774]],
  [42, [1776835114, 4165204688, 17111135, 2317295270, 2792088233, 2554630222]],
  [4294967295, [331202089, 2303545133, 2732085799, 1755962312, 20464611, 435992899]],
  [Number.MAX_SAFE_INTEGER, [1233166643, 1287031142, 661813442, 2960669951, 2601079046, 1036114921]],
];

describe('Rng (xoshiro128** seeded by splitmix64)', () => {
  it.each(EXPECTED)('seed %d gives the C reference sequence', (seed, values) => {
    const rng = new Rng(seed);
    expect(values.map(() => rng.nextUint32())).toEqual(values);
  });

  it('nextFloat is the 32-bit output over 2^32', () => {
    const rng = new Rng(42);
    expect(rng.nextFloat()).toBe(1776835114 / 2 ** 32);
    expect(rng.nextFloat()).toBe(4165204688 / 2 ** 32);
  });

  it('floats stay in [0, 1) and average one half', () => {
    const rng = new Rng(7);
    let sum = 0;
    for (let i = 0; i < 10_000; i++) {
      const x = rng.nextFloat();
      expect(x >= 0 && x < 1).toBe(true);
      sum += x;
    }
    expect(Math.abs(sum / 10_000 - 0.5)).toBeLessThan(0.01);
  });

  it('same seed, same sequence; different seeds differ', () => {
    const a = new Rng(123);
    const b = new Rng(123);
    const c = new Rng(124);
    const xs = Array.from({ length: 100 }, () => a.nextUint32());
    expect(Array.from({ length: 100 }, () => b.nextUint32())).toEqual(xs);
    expect(Array.from({ length: 100 }, () => c.nextUint32())).not.toEqual(xs);
  });

  it.each([-1, 1.5, Number.NaN, Infinity, 2 ** 53])('rejects seed %s with a UsageError naming the field', (seed) => {
    expect(() => new Rng(seed)).toThrow(LonghandError);
    try {
      new Rng(seed);
    } catch (error) {
      expect((error as LonghandError).code).toBe('BAD_ARGUMENT');
      expect((error as LonghandError).details.field).toBe('seed');
    }
  });

  it('randomSeed gives a usable 32-bit seed', () => {
    const seed = randomSeed();
    expect(Number.isInteger(seed) && seed >= 0 && seed < 2 ** 32).toBe(true);
    expect(new Rng(seed).seed).toBe(seed);
  });
});
