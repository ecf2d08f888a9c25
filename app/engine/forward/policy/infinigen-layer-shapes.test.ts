// InfiniGen over layers that differ in KV heads and head dim, with a KV-shared layer (Gemma 4's
// pattern): each layer's skew matrices, column energies, partial columns (⌊r·d_ℓ⌋ of its own head
// dim) and partial key rows are what the uniform code computes for a model of that one layer's
// shape, bit for bit where the uniform code is the reference; the shared layer has none of them;
// the speculator over a layered pool selects what a plain pool's selects.
import { describe, expect, it } from 'vitest';
import { createKvPool, createLayeredKvPool, createSpeculator, type KvPool } from '../../../../native/index.js';
import { choosePartialColumnsForLayer, partialCount } from '../../kv/partial-columns.ts';
import { applySkew, SkewCalibrator, skewLayerOffsets, skewMatrix, type LayerHeads, type SkewMatrices } from '../../kv/skew.ts';
import type { LoadedModel } from '../../model/types.ts';
import { infinigenSettings, InfinigenState, type InfinigenShape } from './infinigen-state.ts';

const HEADS = 4;
// window 2×16, global 1×32, window 2×16, then a layer reading layer 1's rows (kvHeads 0 here: nothing to speculate)
const perLayer: LayerHeads[] = [
  { kvHeads: 2, headDim: 16 },
  { kvHeads: 1, headDim: 32 },
  { kvHeads: 2, headDim: 16 },
  { kvHeads: 0, headDim: 32 },
];
const L = perLayer.length;
const shape: InfinigenShape = { layers: L, heads: HEADS, kvHeads: 2, headDim: 32, perLayer };
const R = 0.25;

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

/** Per layer: q [T, heads·d_ℓ] and k [T, kvHeads_ℓ·d_ℓ], column-scaled so the top columns are clear. */
function rows(T: number, seed: number): { q: Float32Array[]; k: Float32Array[] } {
  const r = rng(seed);
  const q = perLayer.map(({ headDim: d }) => Float32Array.from({ length: T * HEADS * d }, (_, i) => r() * (1 + ((i % d) * 7) % d)));
  const k = perLayer.map(({ kvHeads, headDim: d }) => Float32Array.from({ length: T * kvHeads * d }, (_, i) => r() * (1 + ((i % d) * 5) % d)));
  return { q, k };
}

/** Layer ℓ of a per-layer skew as a one-layer uniform skew (what the uniform code takes). */
function oneLayer(skew: SkewMatrices, l: number): SkewMatrices {
  const { kvHeads, headDim: d } = perLayer[l]!;
  const at = skewLayerOffsets(skew, l);
  return { layers: 1, kvHeads, headDim: d, matrices: skew.matrices.slice(at.matrices, at.matrices + kvHeads * d * d), eigenvalues: skew.eigenvalues.slice(at.eigenvalues, at.eigenvalues + kvHeads * d), samples: Uint32Array.of(skew.samples[l]!) };
}

describe('InfiniGen with per-layer head shapes', () => {
  const T = 96;
  const data = rows(T, 5);

  it("calibrates each layer's skew exactly as a model of that layer's shape alone, and none for the shared layer", () => {
    const mixed = new SkewCalibrator(L, 2, HEADS, 32, perLayer);
    for (let l = 0; l < 3; l++) mixed.addQueries(l, data.q[l]!, T);
    expect(() => mixed.addQueries(3, data.q[3]!, T)).toThrow(/layer 3 has no keys of its own/);
    const skew = mixed.finish();
    expect(skew.matrices.length).toBe(2 * 16 * 16 + 32 * 32 + 2 * 16 * 16);
    for (let l = 0; l < 3; l++) {
      const { kvHeads, headDim: d } = perLayer[l]!;
      const alone = new SkewCalibrator(1, kvHeads, HEADS, d);
      alone.addQueries(0, data.q[l]!, T);
      const ref = alone.finish();
      for (let g = 0; g < kvHeads; g++) expect(skewMatrix(skew, l, g)).toEqual(skewMatrix(ref, 0, g));
    }
  });

  it("chooses ⌊r·d_ℓ⌋ columns per layer from its own energies, sets its partial rows, and round-trips the energies", () => {
    const calib = new SkewCalibrator(L, 2, HEADS, 32, perLayer);
    for (let l = 0; l < 3; l++) calib.addQueries(l, data.q[l]!, T);
    const skew = calib.finish();
    const settings = infinigenSettings({ denseLayers: 1, partialRatio: R, modelSha256: 'f'.repeat(64) }, 32, L);
    const s = new InfinigenState(settings, shape, {} as LoadedModel);
    s.skew = skew;
    s.startChunk(0, T);
    for (let l = 0; l < L; l++) s.observe(l, data.q[l]!, data.k[l]!, T);
    s.commitChunk();
    const pool: KvPool = createLayeredKvPool({
      layerShapes: [...perLayer.slice(0, 3).map((x) => ({ ...x, partialDim: partialCount(R, x.headDim) })), { kvSource: 1 }],
      tokens: 128,
      kvType: 'fp32',
    });
    try {
      for (let l = 0; l < 3; l++) pool.appendBatch(l, data.k[l]!, data.k[l]!, 0);
      s.choosePartialColumns(pool);
      expect(s.columnsOf(0)).toBeUndefined(); // dense
      expect(s.columnsOf(3)).toBeUndefined(); // shared: no keys of its own
      for (const l of [1, 2]) {
        const { kvHeads, headDim: d } = perLayer[l]!;
        const expected = choosePartialColumnsForLayer(oneLayer(skew, l), { layers: 1, heads: HEADS, kvHeads, headDim: d }, 0, data.q[l]!, data.k[l]!, T, R);
        expect(Array.from(s.columnsOf(l)!)).toEqual(Array.from(expected));
        expect(expected.length).toBe(kvHeads * partialCount(R, d)); // 4 of 16, 8 of 32
        // the partial key of slot 7, KV head 0: (k·A)[C] of that layer's own A and columns
        const p = partialCount(R, d);
        const kA = applySkew(data.k[l]!.subarray(7 * kvHeads * d, 7 * kvHeads * d + d), skewMatrix(skew, l, 0), d);
        const want = Array.from(expected.subarray(0, p), (c) => kA[c]!);
        const got = pool.readPartialK(l, 0, 7);
        for (let i = 0; i < p; i++) expect(got[i]).toBeCloseTo(want[i]!, 2); // fp16 partial rows
      }
      const snap = s.exportSequence(T);
      expect(snap.data.length).toBe((1 + snap.checkpoints.length) * 2 * (32 + 2 * 16)); // q and k of layers 1 and 2; the shared layer has 0 entries
      const back = new InfinigenState(settings, shape, {} as LoadedModel);
      back.skew = skew;
      back.importSequence(snap);
      expect(back.exportSequence(T).data).toEqual(snap.data);
    } finally {
      pool.free();
    }
  });

  it('the speculator over a layered pool selects, for each layer, what a plain pool of its shape selects', () => {
    const N = 64;
    const layered = createLayeredKvPool({ layerShapes: [{ kvHeads: 2, headDim: 16, partialDim: 4 }, { kvHeads: 1, headDim: 32, partialDim: 8 }, { kvSource: 1 }], tokens: 128, kvType: 'fp32' });
    const plain = [createKvPool({ budgetBytes: 1 << 20, layers: 1, kvHeads: 2, headDim: 16, partialDim: 4, kvType: 'fp32' }), createKvPool({ budgetBytes: 1 << 20, layers: 1, kvHeads: 1, headDim: 32, partialDim: 8, kvType: 'fp32' })];
    const spec = createSpeculator(layered, { heads: HEADS, alpha: 1, cap: 0.25 });
    const specs = plain.map((p) => createSpeculator(p, { heads: HEADS, alpha: 1, cap: 0.25 }));
    try {
      const r = rng(9);
      for (let l = 0; l < 2; l++) {
        const { kvHeads, headDim: d } = l === 0 ? { kvHeads: 2, headDim: 16 } : { kvHeads: 1, headDim: 32 };
        const p = l === 0 ? 4 : 8;
        const proj = Float32Array.from({ length: kvHeads * d * p }, () => r());
        layered.setPartialProjection(l, proj);
        plain[l]!.setPartialProjection(0, proj);
        const k = Float32Array.from({ length: N * kvHeads * d }, () => r() * 4);
        const v = Float32Array.from({ length: N * kvHeads * d }, () => r());
        layered.appendBatch(l, k, v, 0);
        plain[l]!.appendBatch(0, k, v, 0);
        const q = Float32Array.from({ length: HEADS * d }, () => r() * 4);
        spec.begin(l, q);
        specs[l]!.begin(0, q);
        const one = Float32Array.from({ length: kvHeads * d }, () => r());
        layered.append(l, one, one, N);
        plain[l]!.append(0, one, one, N);
        const out = new Float32Array(HEADS * d);
        const outRef = new Float32Array(HEADS * d);
        spec.attend(l, q, out);
        specs[l]!.attend(0, q, outRef);
        expect(out).toEqual(outRef);
        for (let g = 0; g < kvHeads; g++) {
          expect(Array.from(spec.selected(l, g))).toEqual(Array.from(specs[l]!.selected(0, g)));
          expect(spec.selected(l, g).length).toBeGreaterThan(0);
        }
      }
      expect(() => spec.begin(2, new Float32Array(HEADS * 32))).toThrow(/reads layer 1's rows/);
    } finally {
      spec.free();
      for (const s of specs) s.free();
      layered.free();
      for (const p of plain) p.free();
    }
  });
});
