import { describe, expect, it } from 'vitest';
import { LonghandError } from '../../common/errors.ts';
import { symmetricEigen } from './eigen.ts';
import { choosePartialColumns, choosePartialColumnsForLayer, partialCount } from './partial-columns.ts';
import { SkewCalibrator, applySkew, skewMatrix } from './skew.ts';
import { Gaussian, identity, matmul, maxAbsDiff, transpose } from './test-helpers.ts';

const dot = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
};

/** [n, d] unit directions, random. */
function directions(n: number, d: number, gauss: Gaussian): Float64Array[] {
  return Array.from({ length: n }, () => {
    const u = gauss.fill(d);
    const norm = Math.sqrt(dot(u, u));
    return u.map((x) => x / norm);
  });
}

/**
 * [T, d] queries from a low-rank + noise distribution: Σ_k z_k·s_k·u_k + σ·ε, plus a constant
 * offset along u_0 (real queries have a non-zero mean on a few directions).
 */
function lowRankQueries(T: number, d: number, dirSeed: number, sampleSeed: number, scales = [12, 9, 7, 5], sigma = 0.4): Float32Array {
  const u = directions(scales.length, d, new Gaussian(dirSeed));
  const gauss = new Gaussian(sampleSeed);
  const q = new Float32Array(T * d);
  for (let t = 0; t < T; t++) {
    for (let k = 0; k < scales.length; k++) {
      const z = gauss.next() * scales[k]! + (k === 0 ? 6 : 0);
      for (let i = 0; i < d; i++) q[t * d + i]! += z * u[k]![i]!;
    }
    for (let i = 0; i < d; i++) q[t * d + i]! += sigma * gauss.next();
  }
  return q;
}

/** Share of Σ x² held by the p columns of largest Σ x² (x: [rows, d]). */
function topColumnShare(x: Float32Array, d: number, p: number): number {
  const e = new Float64Array(d);
  for (let at = 0; at < x.length; at += d) for (let j = 0; j < d; j++) e[j]! += x[at + j]! ** 2;
  const sorted = Array.from(e).sort((a, b) => b - a);
  const total = sorted.reduce((s, v) => s + v, 0);
  return sorted.slice(0, p).reduce((s, v) => s + v, 0) / total;
}

describe('SkewCalibrator (MHA)', () => {
  const d = 64;
  const T = 512;
  const q = lowRankQueries(T, d, 11, 12);
  const cal = new SkewCalibrator(1, 1, 1, d);
  cal.addQueries(0, q.subarray(0, 200 * d), 200); // in two pieces: the sum must not care
  cal.addQueries(0, q.subarray(200 * d), T - 200);
  const skew = cal.finish();
  const A = skewMatrix(skew, 0, 0);

  it('A is orthogonal (float32 storage) and equals the eigenvectors of QᵀQ', () => {
    const a64 = Float64Array.from(A);
    expect(maxAbsDiff(matmul(transpose(a64, d, d), a64, d, d, d), identity(d))).toBeLessThan(1e-6);
    const gram = matmul(transpose(q, T, d), q, d, T, d);
    for (let i = 0; i < d; i++) for (let j = 0; j < i; j++) gram[i * d + j] = gram[j * d + i]!;
    const ref = symmetricEigen(gram, d);
    expect(maxAbsDiff(ref.vectors, A)).toBeLessThan(1e-5);
    expect(skew.samples[0]).toBe(T);
    expect(skew.eigenvalues[0]! / (ref.values[0]! / T)).toBeCloseTo(1, 5);
  });

  it('(qA)·(kA) = q·k for random q, k (the rotation changes no attention score)', () => {
    const gauss = new Gaussian(3);
    for (let trial = 0; trial < 50; trial++) {
      const qv = Float32Array.from(gauss.fill(d, 2));
      const kv = Float32Array.from(gauss.fill(d, 2));
      const qa = applySkew(qv, A, d);
      const ka = applySkew(kv, A, d);
      const exact = dot(qv, kv);
      expect(Math.abs(dot(qa, ka) - exact)).toBeLessThan(1e-4 * (1 + Math.sqrt(dot(qv, qv) * dot(kv, kv))));
    }
  });

  it('energy concentrates: top ⌊0.3·d⌋ skewed columns hold ≥ 90% of Σ(qA)² of held-out queries, unskewed far less', () => {
    const fresh = lowRankQueries(256, d, 11, 13); // held out: same directions, other samples
    const p = partialCount(0.3, d);
    const skewed = topColumnShare(applySkew(fresh, A, d), d, p);
    const raw = topColumnShare(fresh, d, p);
    console.log(`energy in top ${p}/${d} columns: skewed ${(100 * skewed).toFixed(1)}%, unskewed ${(100 * raw).toFixed(1)}%`);
    expect(skewed).toBeGreaterThanOrEqual(0.9);
    expect(raw).toBeLessThan(0.75);
    expect(1 - skewed).toBeLessThan((1 - raw) / 10); // what the partial columns miss: ≥ 10× less
    // the eigenvalues say the same: they are the columns' mean energies
    const ev = Array.from(skew.eigenvalues.subarray(0, d));
    expect(ev.slice(0, p).reduce((s, x) => s + x, 0) / ev.reduce((s, x) => s + x, 0)).toBeGreaterThan(0.9);
  });

  it('partial columns of the skewed queries are the leading eigen-columns', () => {
    const cols = choosePartialColumns(applySkew(q, A, d), null, d, 0.3);
    expect(cols.length).toBe(19);
    // the 4 signal directions are eigen-columns 0..3 and must be among the chosen
    for (const c of [0, 1, 2, 3]) expect(Array.from(cols)).toContain(c);
  });
});

describe('SkewCalibrator (GQA): one A per KV head from the group-averaged queries', () => {
  const d = 16;
  const heads = 4;
  const kvHeads = 2;
  const T = 400;
  // head h has its own dominant direction; heads 0,1 share KV head 0, heads 2,3 KV head 1
  const gauss = new Gaussian(21);
  const u = directions(heads, d, gauss);
  const scale = [10, 6, 8, 3];
  const q = new Float32Array(T * heads * d); // [T, heads·d]
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < heads; h++) {
      const z = gauss.next() * scale[h]!;
      for (let i = 0; i < d; i++) q[(t * heads + h) * d + i] = z * u[h]![i]! + 0.1 * gauss.next();
    }
  }
  const cal = new SkewCalibrator(1, kvHeads, heads, d);
  cal.addQueries(0, q, T);
  const skew = cal.finish();

  /** Eigenvectors of Σ_t x_t x_tᵀ for rows x_t = f(t). */
  const eigOf = (row: (t: number) => Float64Array): Float64Array => {
    const g = new Float64Array(d * d);
    for (let t = 0; t < T; t++) {
      const x = row(t);
      for (let i = 0; i < d; i++) for (let j = 0; j < d; j++) g[i * d + j]! += x[i]! * x[j]!;
    }
    return symmetricEigen(g, d).vectors;
  };
  const headRow = (t: number, h: number): Float64Array => Float64Array.from(q.subarray((t * heads + h) * d, (t * heads + h + 1) * d));
  const groupMean = (t: number, kv: number): Float64Array => {
    const a = headRow(t, 2 * kv);
    const b = headRow(t, 2 * kv + 1);
    return a.map((x, i) => (x + b[i]!) / 2);
  };

  it('has kvHeads matrices (not heads), each = eigenvectors of the averaged group queries', () => {
    expect(skew.matrices.length).toBe(kvHeads * d * d);
    for (let kv = 0; kv < kvHeads; kv++) {
      expect(maxAbsDiff(skewMatrix(skew, 0, kv), eigOf((t) => groupMean(t, kv)))).toBeLessThan(1e-4);
    }
  });

  it('differs from what per-query-head calibration would give (the artifact fault we avoid)', () => {
    for (let h = 0; h < heads; h++) {
      const perHead = eigOf((t) => headRow(t, h));
      const ours = skewMatrix(skew, 0, Math.floor(h / 2));
      expect(maxAbsDiff(perHead, ours)).toBeGreaterThan(0.3);
    }
    // the KV head's A keeps both group heads' directions in its leading columns: the energy of
    // each head's queries in the top 2 columns is high, though each head alone would need 1.
    for (let h = 0; h < heads; h++) {
      const rows = new Float32Array(T * d);
      for (let t = 0; t < T; t++) rows.set(headRow(t, h), t * d);
      const skewed = applySkew(rows, skewMatrix(skew, 0, Math.floor(h / 2)), d);
      let top2 = 0;
      let all = 0;
      for (let at = 0; at < skewed.length; at += d) {
        for (let j = 0; j < d; j++) {
          all += skewed[at + j]! ** 2;
          if (j < 2) top2 += skewed[at + j]! ** 2;
        }
      }
      expect(top2 / all).toBeGreaterThan(0.9);
    }
  });

  it('choosePartialColumnsForLayer sums |qA| over the group heads (not their average) plus |kA|', () => {
    // hand-made: A = identity, so skewed = raw. d = 16, r = 0.125 → p = 2.
    const eye = { layers: 1, kvHeads: 2, headDim: d, matrices: new Float32Array(2 * d * d), eigenvalues: new Float32Array(2 * d), samples: Uint32Array.of(1) };
    for (let g = 0; g < 2; g++) for (let i = 0; i < d; i++) eye.matrices[g * d * d + i * d + i] = 1;
    const qq = new Float32Array(heads * d); // one token
    // KV head 0: head 0 has +5 on col 3, head 1 has −5 on col 3 (average 0!) and 2 on col 7
    qq[0 * d + 3] = 5;
    qq[1 * d + 3] = -5;
    qq[1 * d + 7] = 2;
    // KV head 1: heads 2, 3 put 1 on col 9; the key puts 3 on col 12
    qq[2 * d + 9] = 1;
    qq[3 * d + 9] = 1;
    const kk = new Float32Array(kvHeads * d);
    kk[1 * d + 12] = 3;
    kk[0 * d + 0] = 0.5;
    const cols = choosePartialColumnsForLayer(eye, { layers: 1, heads, kvHeads, headDim: d }, 0, qq, kk, 1, 0.125);
    expect(Array.from(cols)).toEqual([3, 7, 9, 12]);
    const noKeys = choosePartialColumnsForLayer(eye, { layers: 1, heads, kvHeads, headDim: d }, 0, qq, null, 1, 0.125);
    expect(Array.from(noKeys)).toEqual([3, 7, 0, 9]); // KV head 1: col 9, then a tie at 0 → lowest index; row ascending
  });
});

describe('choosePartialColumns', () => {
  it('picks the largest Σ|q| + Σ|k| columns, ascending; ties → lower index', () => {
    const d = 8;
    const q = Float32Array.from([0, -4, 0, 1, 0, 0, 3, 0, 0, 1, 0, 0, 0, 0, -1, 0]); // 2 rows
    const k = Float32Array.from([0, 0, 0, 0, 6, 0, 0, 0]);
    // energies: col1 5, col3 1, col4 6, col6 4 (3+1), rest 0
    expect(Array.from(choosePartialColumns(q, k, d, 0.375))).toEqual([1, 4, 6]); // p = 3
    expect(Array.from(choosePartialColumns(q, null, d, 0.25))).toEqual([1, 6]);
    // all equal: the lowest indices
    expect(Array.from(choosePartialColumns(new Float32Array(8).fill(1), null, d, 0.5))).toEqual([0, 1, 2, 3]);
  });

  it('p = ⌊r·d⌋ with rounding slack, at least 1; r outside (0, 1] is rejected', () => {
    expect(partialCount(0.3, 64)).toBe(19);
    expect(partialCount(0.3, 128)).toBe(38);
    expect(partialCount(0.2, 128)).toBe(25);
    expect(partialCount(0.29, 100)).toBe(29);
    expect(partialCount(0.01, 8)).toBe(1);
    expect(partialCount(1, 8)).toBe(8);
    expect(() => partialCount(0, 8)).toThrow(LonghandError);
    expect(() => partialCount(1.5, 8)).toThrow(LonghandError);
  });
});

describe('SkewCalibrator arguments', () => {
  it('rejects bad shapes, layers, lengths, non-finite queries and empty layers', () => {
    expect(() => new SkewCalibrator(1, 3, 4, 8)).toThrow(/multiple/);
    expect(() => new SkewCalibrator(0, 1, 1, 8)).toThrow(LonghandError);
    const cal = new SkewCalibrator(2, 1, 2, 4);
    expect(() => cal.addQueries(2, new Float32Array(8), 1)).toThrow(/layer/);
    expect(() => cal.addQueries(0, new Float32Array(7), 1)).toThrow(/expected/);
    expect(() => cal.addQueries(0, Float32Array.of(1, 0, 0, 0, NaN, 0, 0, 0), 1)).toThrow(/non-finite/);
    cal.addQueries(0, new Float32Array(8).fill(1), 1);
    expect(() => cal.finish()).toThrow(/layer 1/);
    expect(() => applySkew(new Float32Array(5), new Float32Array(16), 4)).toThrow(LonghandError);
  });
});
