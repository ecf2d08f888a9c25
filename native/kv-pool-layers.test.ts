// A LayeredKvPool (kv-pool-layers.js): Gemma 4's layer list in miniature — window layers with 2 KV
// heads × 16, global layers with 1 × 48, and KV-shared last layers that keep no rows — held against
// plain native pools holding the same rows: every routed entry point gives the same bits, a shared
// layer attends its source's rows, the bytes are the groups' sum (a shared layer costs nothing), and
// what a caller must ask per layer is refused when asked of the whole pool; window layers keep rings
// (a shared window layer walks its source's).
import { describe, expect, it } from 'vitest';
import { NativeError } from '../app/common/errors.ts';
import { attend, attendCausal, attendSlots, attentionScores, createKvPool, createLayeredKvPool, createSpeculator, type KvPool, type LayeredKvPoolLayer } from './index.js';

const W = { kvHeads: 2, headDim: 16 };
const G = { kvHeads: 1, headDim: 48 };
// layers 0..3 own rows (window, window, global, window); 4 reads layer 3 (window), 5 reads layer 2 (global)
const layout: LayeredKvPoolLayer[] = [W, W, G, W, { kvSource: 3 }, { kvSource: 2 }];
const HEADS = 4;

function values(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = ((s >>> 0) / 2 ** 32 - 0.5) * 3;
  }
  return out;
}

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(NativeError);
    return (error as NativeError).code;
  }
  return 'nothing thrown';
}

/** The layered pool and, per owning layer, a plain pool of that layer's shape holding the same rows. */
function filled(T: number): { pool: KvPool; plain: Map<number, KvPool> } {
  const pool = createLayeredKvPool({ layerShapes: layout, tokens: 64, kvType: 'fp32' });
  const plain = new Map<number, KvPool>();
  for (let l = 0; l < 4; l++) {
    const s = layout[l] as { kvHeads: number; headDim: number };
    const one = createKvPool({ budgetBytes: 1 << 20, layers: 1, kvHeads: s.kvHeads, headDim: s.headDim, kvType: 'fp32' });
    const k = values(T * s.kvHeads * s.headDim, 10 + l);
    const v = values(T * s.kvHeads * s.headDim, 20 + l);
    pool.appendBatch(l, k, v, 0);
    one.appendBatch(0, k, v, 0);
    plain.set(l, one);
  }
  return { pool, plain };
}

describe('LayeredKvPool', () => {
  it('routes every layer to rows of its own shape; a shared layer reads its source, bit for bit', () => {
    const T = 9;
    const { pool, plain } = filled(T);
    try {
      expect([0, 1, 2, 3, 4, 5].map((l) => [pool.layerKvHeads(l), pool.layerHeadDim(l), pool.owns(l), pool.kvSource(l)])).toEqual([
        [2, 16, true, 0],
        [2, 16, true, 1],
        [1, 48, true, 2],
        [2, 16, true, 3],
        [2, 16, false, 3],
        [1, 48, false, 2],
      ]);
      for (let l = 0; l < 6; l++) {
        const src = pool.kvSource(l);
        const ref = plain.get(src)!;
        const d = pool.layerHeadDim(l);
        expect(pool.length(l)).toBe(T);
        expect(Array.from(pool.readK(l, 0, 3))).toEqual(Array.from(ref.readK(0, 0, 3)));
        const q = values(HEADS * d, 100 + l);
        const got = new Float32Array(HEADS * d);
        const want = new Float32Array(HEADS * d);
        attend(pool, l, q, HEADS, got);
        attend(ref, 0, q, HEADS, want);
        expect(got).toEqual(want);
        const qT = values(T * HEADS * d, 200 + l);
        const gotT = new Float32Array(T * HEADS * d);
        const wantT = new Float32Array(T * HEADS * d);
        attendCausal(pool, l, qT, HEADS, gotT, 1, { window: 4 });
        attendCausal(ref, 0, qT, HEADS, wantT, 1, { window: 4 });
        expect(gotT).toEqual(wantT);
        const scores = new Float32Array(HEADS * T);
        const scoresRef = new Float32Array(HEADS * T);
        attentionScores(pool, l, q, HEADS, scores);
        attentionScores(ref, 0, q, HEADS, scoresRef);
        expect(scores).toEqual(scoresRef);
        const kvh = pool.layerKvHeads(l);
        const slots = Int32Array.from({ length: kvh * 2 }, (_, i) => (i % 2 === 0 ? 1 : 5));
        const offsets = Int32Array.from({ length: kvh + 1 }, (_, g) => 2 * g);
        attendSlots(pool, l, q, HEADS, slots, offsets, got);
        attendSlots(ref, 0, q, HEADS, slots, offsets, want);
        expect(got).toEqual(want);
      }
    } finally {
      pool.free();
      for (const p of plain.values()) p.free();
    }
  });

  it('costs the sum of its groups, nothing for a shared layer; truncate and reset reach every group', () => {
    const pool = createLayeredKvPool({ layerShapes: layout, tokens: 64, kvType: 'fp16' });
    const owning = createLayeredKvPool({ layerShapes: layout.slice(0, 4), tokens: 64, kvType: 'fp16' });
    try {
      expect(pool.byteLength).toBe(owning.byteLength);
      // per token: 3 window layers × 2 heads × (2·16·2 + 4) + 1 global layer × 1 head × (2·48·2 + 4)
      expect(pool.bytesPerToken).toBe(3 * 2 * (64 + 4) + 1 * (192 + 4));
      expect(pool.capacityTokens).toBe(64);
      expect(pool.layerCapacityTokens(5)).toBe(64);
      for (let l = 0; l < 4; l++) pool.appendBatch(l, values(5 * pool.layerKvHeads(l) * pool.layerHeadDim(l), l), values(5 * pool.layerKvHeads(l) * pool.layerHeadDim(l), l + 9), 0);
      pool.truncate(3);
      expect([0, 1, 2, 3, 4, 5].map((l) => pool.length(l))).toEqual([3, 3, 3, 3, 3, 3]);
      pool.reset();
      expect(pool.length(5)).toBe(0);
    } finally {
      pool.free();
      owning.free();
    }
  });

  it('refuses appends to a shared layer, whole-pool shape questions it cannot answer, and an inconsistent list', () => {
    const pool = createLayeredKvPool({ layerShapes: layout, tokens: 16 });
    try {
      expect(code(() => pool.appendBatch(4, new Float32Array(32), new Float32Array(32), 0))).toBe('NATIVE_BAD_ARGUMENT');
      expect(() => pool.headDim).toThrow(/differ in headDim: ask layerHeadDim\(layer\)/);
      expect(() => pool.kvHeads).toThrow(/layerKvHeads\(layer\)/);
      expect(() => pool.snapshotLayerBytes(4)).toThrow(/snapshotLayerBytes\(tokens, layer\)/);
      expect(pool.partialDim).toBe(0); // the groups agree there
      expect(code(() => pool.length(6))).toBe('NATIVE_BAD_ARGUMENT');
    } finally {
      pool.free();
    }
    expect(code(() => createLayeredKvPool({ layerShapes: [W, { kvSource: 1 }, W], tokens: 8 }))).toBe('NATIVE_BAD_ARGUMENT'); // a later source
    expect(code(() => createLayeredKvPool({ layerShapes: [W, { kvSource: 0 }, { kvSource: 1 }], tokens: 8 }))).toBe('NATIVE_BAD_ARGUMENT'); // a shared source
    expect(code(() => createLayeredKvPool({ layerShapes: [W], tokens: 8, budgetBytes: 1 << 20 }))).toBe('NATIVE_BAD_ARGUMENT');
  });

  it('snapshots per layer: a shared layer is a 0-byte section, the others round-trip', () => {
    const T = 7;
    const { pool, plain } = filled(T);
    const copy = createLayeredKvPool({ layerShapes: layout, tokens: 64, kvType: 'fp32' });
    try {
      for (let l = 0; l < 6; l++) {
        const bytes = pool.snapshotLayerBytes(T, l);
        expect(bytes).toBe(l >= 4 ? 0 : plain.get(l)!.snapshotLayerBytes(T));
        const section = new Uint8Array(bytes);
        pool.exportLayer(l, T, section);
        copy.importLayer(l, T, section);
      }
      for (let l = 0; l < 6; l++) expect(Array.from(copy.readV(l, 0, T - 1))).toEqual(Array.from(pool.readV(l, 0, T - 1)));
    } finally {
      pool.free();
      copy.free();
      for (const p of plain.values()) p.free();
    }
  });

  it('splits a byte budget over the groups in proportion to a token of each, and evicts per group', () => {
    const eviction = { sinks: 2, recent: 4, ageEvery: 32 };
    const pool = createLayeredKvPool({ layerShapes: layout, budgetBytes: 64 * 1024, kvType: 'fp16', eviction });
    try {
      expect(pool.byteLength).toBeLessThanOrEqual(64 * 1024);
      const caps = [0, 1, 2, 3].map((l) => pool.layerCapacityTokens(l));
      // both groups hold about the same tokens: their budgets follow what a token costs them
      expect(Math.abs(caps[2]! - caps[0]!)).toBeLessThanOrEqual(16);
      expect(pool.evicting).toBe(true);
    } finally {
      pool.free();
    }
  });

  it('gives window layers rings per group (layerCapacity, ringLayers by model layer); a shared layer walks its source ring, bit for bit as a plain ring pool', () => {
    // layers 0, 1, 3 rings of 12 slots (window 6 + a chunk of 6), layer 2 global; 4 reads 3's ring, 5 reads 2
    const WINDOW = 6;
    const CAP = 12;
    const ringLayers = [true, true, false, true, true, false];
    const layerCapacity = ringLayers.map((r) => (r ? CAP : 0));
    const pool = createLayeredKvPool({ layerShapes: layout, tokens: 40, kvType: 'fp32', layerCapacity, ringLayers });
    const plainRing = createKvPool({ budgetBytes: 1 << 20, layers: 1, kvHeads: W.kvHeads, headDim: W.headDim, kvType: 'fp32', layerCapacity: [CAP], ringLayers: [true] });
    const everyRow = createLayeredKvPool({ layerShapes: layout, tokens: 40, kvType: 'fp32' });
    try {
      expect([0, 1, 2, 3, 4, 5].map((l) => [pool.isRing(l), pool.layerCapacityTokens(l)])).toEqual([
        [true, CAP],
        [true, CAP],
        [false, 40],
        [true, CAP],
        [true, CAP],
        [false, 40],
      ]);
      // the window group holds 3 rings of 12 slots instead of 3 layers of 40: 3 · 28 rows fewer
      const rowW = W.kvHeads * (2 * W.headDim * 4 + 4);
      // (within the few 64-byte lines of alignment padding the region boundaries cost)
      expect(Math.abs(everyRow.byteLength - pool.byteLength - 3 * 28 * rowW)).toBeLessThanOrEqual(8 * 64);
      // 30 tokens in chunks of 6 (the ring wraps twice); after each, the shared layer 4 attends as layer 3 does in a plain ring
      const d = W.headDim;
      for (let t0 = 0; t0 < 30; t0 += 6) {
        for (let l = 0; l < 4; l++) {
          const w = pool.layerKvHeads(l) * pool.layerHeadDim(l);
          const k = values(6 * w, 1000 + t0 * 7 + l);
          const v = values(6 * w, 2000 + t0 * 7 + l);
          pool.appendBatch(l, k, v, t0);
          everyRow.appendBatch(l, k, v, t0);
          if (l === 3) plainRing.appendBatch(0, k, v, t0);
        }
        expect(pool.ringStart(4)).toBe(plainRing.ringStart(0));
        expect(pool.lastSlot(4)).toBe(plainRing.lastSlot(0));
        expect(pool.position(4, pool.lastSlot(4))).toBe(t0 + 5);
        const qT = values(6 * HEADS * d, 300 + t0);
        const got = new Float32Array(6 * HEADS * d);
        const want = new Float32Array(6 * HEADS * d);
        const all = new Float32Array(6 * HEADS * d);
        attendCausal(pool, 4, qT, HEADS, got, 1, { window: WINDOW });
        attendCausal(plainRing, 0, qT, HEADS, want, 1, { window: WINDOW });
        attendCausal(everyRow, 4, qT, HEADS, all, 1, { window: WINDOW });
        expect(got).toEqual(want);
        expect(got).toEqual(all); // a ring reads its window's rows in position order: the bits of every row
      }
      expect(pool.length(4)).toBe(CAP);
      expect(code(() => pool.clearLayer(4))).toBe('NATIVE_BAD_ARGUMENT'); // a shared layer's ring is its source's
      // a ring does not evict, as in a plain pool
      expect(code(() => createLayeredKvPool({ layerShapes: layout, budgetBytes: 1 << 20, eviction: { sinks: 2, recent: 4, ageEvery: 32 }, layerCapacity, ringLayers }))).toBe('NATIVE_BAD_ARGUMENT');
    } finally {
      pool.free();
      plainRing.free();
      everyRow.free();
    }
  });

  it("routes InfiniGen's speculator per group and refuses a shared layer, which has no partial keys", () => {
    const pool = createLayeredKvPool({ layerShapes: [{ ...W, partialDim: 4 }, { ...G, partialDim: 8 }, { kvSource: 0 }], tokens: 32 });
    const spec = createSpeculator(pool, { heads: HEADS, alpha: 4, cap: 1 });
    try {
      expect(pool.layerPartialDim(1)).toBe(8);
      expect(code(() => spec.begin(2, new Float32Array(HEADS * 16)))).toBe('NATIVE_BAD_ARGUMENT');
    } finally {
      spec.free();
      pool.free();
    }
  });
});
