import { describe, expect, it } from 'vitest';
import { LonghandError } from '../../common/errors.ts';
import { symmetricEigen } from './eigen.ts';
import { Gaussian, identity, matmul, maxAbsDiff, randomSymmetric, transpose } from './test-helpers.ts';

/** ‖A·V − V·Λ‖_max / max|A| and ‖VᵀV − I‖_max. */
function residuals(a: Float64Array, d: number): { residual: number; orthogonality: number; values: Float64Array } {
  const { values, vectors } = symmetricEigen(a, d);
  const av = matmul(a, vectors, d, d, d);
  const vl = new Float64Array(d * d);
  for (let i = 0; i < d; i++) for (let j = 0; j < d; j++) vl[i * d + j] = vectors[i * d + j]! * values[j]!;
  const scale = Math.max(1, ...Array.from(a, Math.abs));
  const vtv = matmul(transpose(vectors, d, d), vectors, d, d, d);
  return { residual: maxAbsDiff(av, vl) / scale, orthogonality: maxAbsDiff(vtv, identity(d)), values };
}

describe('symmetricEigen', () => {
  for (const d of [1, 2, 3, 8, 64, 128]) {
    it(`random symmetric d=${d}: A·V = V·Λ, VᵀV = I, values descending`, () => {
      const a = randomSymmetric(d, 100 + d);
      const { residual, orthogonality, values } = residuals(a, d);
      expect(residual).toBeLessThan(1e-12);
      expect(orthogonality).toBeLessThan(1e-10);
      for (let j = 1; j < d; j++) expect(values[j]!).toBeLessThanOrEqual(values[j - 1]!);
      // trace is preserved
      let trace = 0;
      for (let i = 0; i < d; i++) trace += a[i * d + i]!;
      expect(values.reduce((s, x) => s + x, 0)).toBeCloseTo(trace, 9);
    });
  }

  it('a Gram matrix QᵀQ (positive semi-definite, rank-deficient) as the skew calibration builds it', () => {
    const d = 64;
    const t = 20; // fewer samples than dimensions: rank 20, 44 zero eigenvalues
    const q = new Gaussian(7).fill(t * d);
    const a = matmul(transpose(q, t, d), q, d, t, d);
    const { residual, orthogonality, values } = residuals(a, d);
    expect(residual).toBeLessThan(1e-12);
    expect(orthogonality).toBeLessThan(1e-10);
    expect(values[t - 1]!).toBeGreaterThan(1);
    for (let j = t; j < d; j++) expect(Math.abs(values[j]!)).toBeLessThan(1e-10 * values[0]!);
  });

  it('diagonal matrix: eigenvalues are the diagonal sorted, eigenvectors unit axes (positive)', () => {
    const diag = [3, -1, 7, 0, 2];
    const d = diag.length;
    const a = new Float64Array(d * d);
    diag.forEach((x, i) => (a[i * d + i] = x));
    const { values, vectors } = symmetricEigen(a, d);
    expect(Array.from(values)).toEqual([7, 3, 2, 0, -1]);
    const axisOf = [2, 0, 4, 3, 1]; // column j is unit axis axisOf[j]
    for (let j = 0; j < d; j++) for (let i = 0; i < d; i++) expect(vectors[i * d + j]).toBe(i === axisOf[j] ? 1 : 0);
  });

  it('2×2 closed form: R·diag(5, 2)·Rᵀ gives 5, 2 and the rotation columns', () => {
    const th = 0.3;
    const c = Math.cos(th);
    const s = Math.sin(th);
    // A = R diag(5,2) Rᵀ with R = [[c, −s], [s, c]]
    const a = Float64Array.from([5 * c * c + 2 * s * s, (5 - 2) * c * s, (5 - 2) * c * s, 5 * s * s + 2 * c * c]);
    const { values, vectors } = symmetricEigen(a, 2);
    expect(values[0]).toBeCloseTo(5, 14);
    expect(values[1]).toBeCloseTo(2, 14);
    // column 0 = (c, s); column 1 = ±(−s, c) and the sign rule (largest component positive) picks (−s, c)
    expect(vectors[0]).toBeCloseTo(c, 14);
    expect(vectors[2]).toBeCloseTo(s, 14);
    expect(vectors[3]).toBeCloseTo(c, 14);
    expect(vectors[1]).toBeCloseTo(-s, 14);
  });

  it('repeated eigenvalues: a basis of each eigenspace, still orthonormal', () => {
    // A = Q diag(4,4,4,1,1,−2,−2,−2) Qᵀ for a random orthogonal Q (from a previous decomposition)
    const d = 8;
    const q = symmetricEigen(randomSymmetric(d, 5), d).vectors;
    const lambda = [4, 4, 4, 1, 1, -2, -2, -2];
    const ql = new Float64Array(d * d);
    for (let i = 0; i < d; i++) for (let j = 0; j < d; j++) ql[i * d + j] = q[i * d + j]! * lambda[j]!;
    const a = matmul(ql, transpose(q, d, d), d, d, d);
    for (let i = 0; i < d; i++) for (let j = 0; j < i; j++) a[i * d + j] = a[j * d + i]!; // exact symmetry
    const { residual, orthogonality, values } = residuals(a, d);
    expect(residual).toBeLessThan(1e-12);
    expect(orthogonality).toBeLessThan(1e-10);
    lambda.forEach((x, j) => expect(values[j]).toBeCloseTo(x, 12));
    // identity matrix: everything repeated
    const eye = symmetricEigen(identity(d), d);
    expect(Array.from(eye.values)).toEqual(new Array(d).fill(1));
    expect(maxAbsDiff(eye.vectors, identity(d))).toBe(0);
  });

  it('zero matrix and Float32 input', () => {
    const z = symmetricEigen(new Float64Array(16), 4);
    expect(Array.from(z.values)).toEqual([0, 0, 0, 0]);
    const a32 = Float32Array.from(randomSymmetric(16, 9));
    const { residual, orthogonality } = residuals(Float64Array.from(a32), 16);
    expect(residual).toBeLessThan(1e-12);
    expect(orthogonality).toBeLessThan(1e-10);
    expect(symmetricEigen(a32, 16).values.length).toBe(16);
  });

  it('rejects wrong lengths, non-finite entries and asymmetric input with BAD_ARGUMENT', () => {
    const bad = (f: () => unknown): string => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(LonghandError);
        return (e as LonghandError).code;
      }
      return 'no error';
    };
    expect(bad(() => symmetricEigen(new Float64Array(5), 2))).toBe('BAD_ARGUMENT');
    expect(bad(() => symmetricEigen(Float64Array.from([1, NaN, NaN, 1]), 2))).toBe('BAD_ARGUMENT');
    expect(bad(() => symmetricEigen(Float64Array.from([1, 2, 3, 1]), 2))).toBe('BAD_ARGUMENT');
    expect(bad(() => symmetricEigen(new Float64Array(0), 0))).toBe('BAD_ARGUMENT');
  });

  it('d=128 takes well under 200 ms (d=64 and d=128 timings printed)', () => {
    const timing = (d: number): number => {
      const a = randomSymmetric(d, 77);
      symmetricEigen(a, d); // warm-up
      const reps = 5;
      const t0 = performance.now();
      for (let r = 0; r < reps; r++) symmetricEigen(a, d);
      return (performance.now() - t0) / reps;
    };
    const t64 = timing(64);
    const t128 = timing(128);
    console.log(`symmetricEigen: d=64 ${t64.toFixed(2)} ms, d=128 ${t128.toFixed(2)} ms`);
    expect(t128).toBeLessThan(200);
  });
});
