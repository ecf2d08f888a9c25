// Shared by this folder's tests: a seeded generator and comparisons that say where they fail.
import { mulberry32 } from '../../../test/fixtures/rng.ts';

/** The fixtures' mulberry32: small, fast, seeded; uniform in [0, 1). */
export const rng = mulberry32;

/** n values uniform in [−scale, scale). */
export function randomArray(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (r() * 2 - 1) * scale;
  return out;
}

export interface Diff {
  maxAbs: number;
  at: number;
  maxRef: number;
}

export function maxAbsDiff(actual: ArrayLike<number>, expected: ArrayLike<number>): Diff {
  if (actual.length !== expected.length) throw new Error(`length ${actual.length} vs ${expected.length}`);
  let maxAbs = 0;
  let at = -1;
  let maxRef = 0;
  for (let i = 0; i < actual.length; i++) {
    const d = Math.abs(actual[i]! - expected[i]!);
    if (!(d <= maxAbs)) {
      maxAbs = d;
      at = i;
    }
    maxRef = Math.max(maxRef, Math.abs(expected[i]!));
  }
  return { maxAbs, at, maxRef };
}
