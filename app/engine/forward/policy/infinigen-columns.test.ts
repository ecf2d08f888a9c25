// InfiniGen's partial columns over a sequence (infinigen-state.ts InfinigenState): the columns chosen from
// the column energies, folded chunk by chunk with the native skewEnergy, equal the plain rule
// (choosePartialColumnsForLayer over all the rows at once); the energies are the same bits however the
// rows are chunked, and after cutting the sequence back to a checkpoint (or the tail before a prompt's
// last token) and folding the rest again; a cut elsewhere makes the state inexact (resumePoint 0).
// Also the native kernel against its scalar reference and a JS statement of the sum.
import { describe, expect, it } from 'vitest';
import { createKvPool, skewEnergy, type KvPool } from '../../../../native/index.js';
import { choosePartialColumnsForLayer } from '../../kv/partial-columns.ts';
import { applySkew, skewMatrix, type SkewMatrices } from '../../kv/skew.ts';
import type { LoadedModel } from '../../model/types.ts';
import { COLUMN_CHECKPOINT_EVERY, infinigenSettings, InfinigenState } from './infinigen-state.ts';

const shape = { layers: 4, heads: 4, kvHeads: 2, headDim: 16 };
const { layers, heads, kvHeads, headDim: d } = shape;

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32 - 0.5;
  };
}

/** Random orthogonal-ish skew (any matrix works for the sums; QR is not needed to test them). */
function randomSkew(seed: number): SkewMatrices {
  const r = rng(seed);
  return { layers, kvHeads, headDim: d, matrices: new Float32Array(layers * kvHeads * d * d).map(() => r()), eigenvalues: new Float32Array(layers * kvHeads * d), samples: new Uint32Array(layers) };
}

/** Per layer: q [T, heads·d] and k [T, kvHeads·d] with column scales so the top columns are clear. */
function rows(T: number, seed: number): { q: Float32Array[]; k: Float32Array[] } {
  const r = rng(seed);
  const scale = (j: number) => 1 + ((j * 7) % d) / 2;
  const q = Array.from({ length: layers }, () => Float32Array.from({ length: T * heads * d }, (_, i) => r() * scale(i % d)));
  const k = Array.from({ length: layers }, () => Float32Array.from({ length: T * kvHeads * d }, (_, i) => r() * scale(i % d)));
  return { q, k };
}

function state(skew: SkewMatrices): InfinigenState {
  const settings = infinigenSettings({ denseLayers: 1, partialRatio: 0.25, modelSha256: 'f'.repeat(64) }, d, layers);
  const s = new InfinigenState(settings, shape, {} as LoadedModel);
  s.skew = skew;
  return s;
}

/** Feeds positions [from, to) of `data` as prefill chunks of `chunk` tokens. */
function feed(s: InfinigenState, data: { q: Float32Array[]; k: Float32Array[] }, from: number, to: number, chunk: number): void {
  for (let p0 = from; p0 < to; p0 += chunk) {
    const T = Math.min(chunk, to - p0);
    s.startChunk(p0, T);
    for (let l = 0; l < layers; l++) s.observe(l, data.q[l]!.slice(p0 * heads * d, (p0 + T) * heads * d), data.k[l]!.slice(p0 * kvHeads * d, (p0 + T) * kvHeads * d), T);
    s.commitChunk();
  }
}

function pool(): KvPool {
  return createKvPool({ budgetBytes: 1 << 22, layers, kvHeads, headDim: d, partialDim: 4 });
}

describe('InfiniGen column energies over a sequence', () => {
  const skew = randomSkew(3);
  const T = 300;
  const data = rows(T, 11);

  it('choose the columns the plain rule chooses over all rows at once', () => {
    const s = state(skew);
    feed(s, data, 0, T, 64);
    const p = pool();
    s.choosePartialColumns(p);
    for (let l = 1; l < layers; l++) {
      const expected = choosePartialColumnsForLayer(skew, shape, l, data.q[l]!, data.k[l]!, T, 0.25);
      expect(Array.from(s.columnsOf(l)!)).toEqual(Array.from(expected));
    }
    expect(s.columnsOf(0)).toBeUndefined(); // dense layer
    p.free();
  });

  it('the same bits for any chunking, and after a cut back to a checkpoint or the tail and a refold', () => {
    const whole = state(skew);
    feed(whole, data, 0, T, T);
    const reference = whole.exportSequence(T).data;
    for (const chunk of [1, 7, 64, 100]) {
      const s = state(skew);
      feed(s, data, 0, T, chunk);
      expect(s.exportSequence(T).data, `chunk ${chunk}`).toEqual(reference);
    }
    const s = state(skew);
    feed(s, data, 0, T, 64);
    // the tail checkpoint sits before the last fed token; multiples of 64 below it are checkpoints too
    expect(s.resumePoint(T - 1)).toBe(T - 1);
    expect(s.resumePoint(200)).toBe(192);
    expect(s.resumePoint(T + 50)).toBe(T); // decoded tokens after the prompt are not in the energies
    s.truncate(192);
    feed(s, data, 192, T, 32);
    expect(s.exportSequence(T).data).toEqual(reference);
    s.truncate(T - 1);
    feed(s, data, T - 1, T, 64);
    expect(s.exportSequence(T).data).toEqual(reference);
    s.truncate(150); // not a checkpoint: the energies go back to 128 and the state is inexact
    expect(s.resumePoint(150)).toBe(0);
  });

  it('a snapshot of the state (exportSequence/importSequence) resumes with the same bits', () => {
    const a = state(skew);
    feed(a, data, 0, 2 * COLUMN_CHECKPOINT_EVERY + 10, 64);
    const saved = a.exportSequence(2 * COLUMN_CHECKPOINT_EVERY + 10);
    const b = state(skew);
    b.importSequence(saved);
    feed(a, data, 2 * COLUMN_CHECKPOINT_EVERY + 10, T, 64);
    feed(b, data, 2 * COLUMN_CHECKPOINT_EVERY + 10, T, 64);
    expect(b.exportSequence(T).data).toEqual(a.exportSequence(T).data);
    expect(b.resumePoint(COLUMN_CHECKPOINT_EVERY + 3)).toBe(COLUMN_CHECKPOINT_EVERY);
  });
});

describe('native skewEnergy', () => {
  it('matches its scalar reference and Σ|x·A| computed with applySkew, any GQA ratio, and splits into the same bits', () => {
    for (const [h, g, dim, tokens] of [
      [1, 1, 1, 1],
      [4, 2, 16, 9],
      [8, 1, 64, 5],
      [8, 8, 33, 3],
      [32, 8, 128, 2],
    ] as const) {
      const r = rng(h * 100 + dim);
      const q = Float32Array.from({ length: tokens * h * dim }, () => r());
      const k = Float32Array.from({ length: tokens * g * dim }, () => r());
      const a = Float32Array.from({ length: g * dim * dim }, () => r());
      const qe = new Float64Array(g * dim);
      const ke = new Float64Array(g * dim);
      skewEnergy(q, k, tokens, h, g, dim, a, qe, ke);
      const qr = new Float64Array(g * dim);
      const kr = new Float64Array(g * dim);
      skewEnergy(q, k, tokens, h, g, dim, a, qr, kr, true);
      // JS statement: the group's query rows and the key row, each rotated by its KV head's A
      const qj = new Float64Array(g * dim);
      const kj = new Float64Array(g * dim);
      const m: SkewMatrices = { layers: 1, kvHeads: g, headDim: dim, matrices: a, eigenvalues: new Float32Array(g * dim), samples: new Uint32Array(1) };
      for (let t = 0; t < tokens; t++) {
        for (let kv = 0; kv < g; kv++) {
          const A = skewMatrix(m, 0, kv);
          for (let qh = kv * (h / g); qh < (kv + 1) * (h / g); qh++) applySkew(q.subarray((t * h + qh) * dim, (t * h + qh + 1) * dim), A, dim).forEach((y, j) => (qj[kv * dim + j] = qj[kv * dim + j]! + Math.abs(y)));
          applySkew(k.subarray((t * g + kv) * dim, (t * g + kv + 1) * dim), A, dim).forEach((y, j) => (kj[kv * dim + j] = kj[kv * dim + j]! + Math.abs(y)));
        }
      }
      const tol = (x: number) => 1e-5 * (1 + Math.abs(x)) * Math.sqrt(dim);
      for (let i = 0; i < g * dim; i++) {
        expect(Math.abs(qe[i]! - qr[i]!)).toBeLessThan(tol(qr[i]!));
        expect(Math.abs(ke[i]! - kr[i]!)).toBeLessThan(tol(kr[i]!));
        expect(Math.abs(qj[i]! - qr[i]!)).toBeLessThan(tol(qr[i]!));
      }
      // token by token into the same sums: identical bits
      const qs = new Float64Array(g * dim);
      const ks = new Float64Array(g * dim);
      for (let t = 0; t < tokens; t++) skewEnergy(q.subarray(t * h * dim, (t + 1) * h * dim), k.subarray(t * g * dim, (t + 1) * g * dim), 1, h, g, dim, a, qs, ks);
      expect(qs).toEqual(qe);
      expect(ks).toEqual(ke);
    }
  });

  it('refuses bad arguments with NATIVE_BAD_ARGUMENT', () => {
    const q = new Float32Array(8);
    const k = new Float32Array(4);
    const a = new Float32Array(16);
    const e = () => new Float64Array(4);
    expect(() => skewEnergy(q, k, 1, 3, 2, 4, a, e(), e())).toThrow(/multiple of kvHeads/);
    expect(() => skewEnergy(q, k, 2, 2, 1, 4, a, e(), e())).toThrow(/q must have 16 elements/);
    expect(() => skewEnergy(q, k, 1, 2, 1, 4, a, new Float64Array(3), e())).toThrow(/qEnergy must have 4/);
    const shared = e();
    expect(() => skewEnergy(q, k, 1, 2, 1, 4, a, shared, shared)).toThrow(/share memory/);
    expect(() => skewEnergy(q, k, 1, 2, 1, 4, a, new Float32Array(4) as unknown as Float64Array, e())).toThrow(/Float64Array/);
  });
});
