// Shared helpers of the kv tests: seeded normal samples and small dense matrix products.
// Not imported by production code.
import { Rng } from '../generate/rng.ts';

/** Seeded standard-normal samples (Box–Muller on the project's xoshiro generator). */
export class Gaussian {
  private readonly rng: Rng;
  private spare: number | undefined;

  constructor(seed: number) {
    this.rng = new Rng(seed);
  }

  next(): number {
    if (this.spare !== undefined) {
      const s = this.spare;
      this.spare = undefined;
      return s;
    }
    const u = 1 - this.rng.nextFloat(); // (0, 1]
    const v = this.rng.nextFloat();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** [n] samples. */
  fill(n: number, scale = 1): Float64Array {
    const out = new Float64Array(n);
    for (let i = 0; i < n; i++) out[i] = this.next() * scale;
    return out;
  }
}

/** [d, d] random symmetric matrix (B + Bᵀ)/2 with normal entries. */
export function randomSymmetric(d: number, seed: number): Float64Array {
  const b = new Gaussian(seed).fill(d * d);
  const a = new Float64Array(d * d);
  for (let i = 0; i < d; i++) for (let j = 0; j < d; j++) a[i * d + j] = (b[i * d + j]! + b[j * d + i]!) / 2;
  return a;
}

/** Row-major product: [m, k] · [k, n] → [m, n]. */
export function matmul(a: ArrayLike<number>, b: ArrayLike<number>, m: number, k: number, n: number): Float64Array {
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let p = 0; p < k; p++) {
      const x = a[i * k + p]!;
      if (x === 0) continue;
      for (let j = 0; j < n; j++) out[i * n + j] = out[i * n + j]! + x * b[p * n + j]!;
    }
  }
  return out;
}

/** [n, m] transpose of row-major [m, n]. */
export function transpose(a: ArrayLike<number>, m: number, n: number): Float64Array {
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) out[j * m + i] = a[i * n + j]!;
  return out;
}

/** max |a_i − b_i|. */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

/** [d, d] identity. */
export function identity(d: number): Float64Array {
  const out = new Float64Array(d * d);
  for (let i = 0; i < d; i++) out[i * d + i] = 1;
  return out;
}

/** Plain arrays of the selection, for toEqual. */
export const lists = (sel: readonly Int32Array[]): number[][] => sel.map((s) => Array.from(s));
