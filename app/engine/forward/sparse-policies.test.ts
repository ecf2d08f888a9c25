// The comparison policies' selection in the decode path (sparse-policies.ts, native attendSlots /
// attentionScores) against the plain references of app/engine/kv/policies-reference.ts, on random
// pools: streaming, quest (page bounds kept incrementally, truncate), oracle (native logits), h2o
// (accumulated mass over the attended set, permanent evictions), GQA group 2.
import { afterEach, describe, expect, it } from 'vitest';
import { attendReference, attendSlots, attentionScores, createKvPool, type KvPool } from '../../../native/index.js';
import { h2o, oracle, quest, questPageBounds, softmaxRows, streaming } from '../kv/policies-reference.ts';
import { Gaussian, lists } from '../kv/test-helpers.ts';
import { packSlotLists, SparsePolicyState } from './sparse-policies.ts';

const shape = { layers: 3, heads: 4, kvHeads: 2, headDim: 8, contextLength: 160 };
const pools: KvPool[] = [];

function randomPool(tokens: number, seed: number): KvPool {
  const { layers, kvHeads, headDim: d } = shape;
  const pool = createKvPool({ budgetBytes: 1 << 20, layers, kvHeads, headDim: d, kvType: 'fp32' });
  pools.push(pool);
  const g = new Gaussian(seed);
  for (let l = 0; l < layers; l++) {
    pool.appendBatch(l, Float32Array.from(g.fill(tokens * kvHeads * d)), Float32Array.from(g.fill(tokens * kvHeads * d)), 0);
  }
  return pool;
}

/** [kvHeads, N, d] stored keys of a layer. */
function keysOf(pool: KvPool, layer: number, N: number): Float32Array {
  const { kvHeads, headDim: d } = shape;
  const out = new Float32Array(kvHeads * N * d);
  for (let g = 0; g < kvHeads; g++) for (let j = 0; j < N; j++) out.set(pool.readK(layer, g, j), (g * N + j) * d);
  return out;
}

/** [heads, N] scaled logits computed in JS from the stored keys. */
function logitsOf(pool: KvPool, layer: number, q: Float32Array, N: number): Float32Array {
  const { heads, kvHeads, headDim: d } = shape;
  const out = new Float32Array(heads * N);
  for (let h = 0; h < heads; h++) {
    const g = Math.floor(h / (heads / kvHeads));
    for (let j = 0; j < N; j++) {
      const k = pool.readK(layer, g, j);
      let s = 0;
      for (let i = 0; i < d; i++) s += q[h * d + i]! * k[i]!;
      out[h * N + j] = s / Math.sqrt(d);
    }
  }
  return out;
}

const query = (g: Gaussian): Float32Array => Float32Array.from(g.fill(shape.heads * shape.headDim, 2));

afterEach(() => {
  while (pools.length) pools.pop()!.free();
});

describe('native attendSlots / attentionScores', () => {
  it('every slot == attend() reference; logits == JS dot products; bad lists are refused', () => {
    const pool = randomPool(37, 1);
    const q = query(new Gaussian(2));
    const out = new Float32Array(q.length);
    const ref = new Float32Array(q.length);
    const all = Int32Array.from({ length: 37 }, (_, j) => j);
    const { slots, offsets } = packSlotLists([all.subarray(0, 36), all.subarray(0, 36)], 36);
    attendSlots(pool, 1, q, 4, slots, offsets, out);
    attendReference(pool, 1, q, 4, ref);
    for (let i = 0; i < q.length; i++) expect(out[i]).toBeCloseTo(ref[i]!, 5);
    const sc = new Float32Array(4 * 37);
    attentionScores(pool, 1, q, 4, sc);
    const js = logitsOf(pool, 1, q, 37);
    for (let i = 0; i < sc.length; i++) expect(sc[i]).toBeCloseTo(js[i]!, 4);
    expect(() => attendSlots(pool, 1, q, 4, Int32Array.of(0, 37), Int32Array.of(0, 1, 2), out)).toThrow(/slot/);
    expect(() => attendSlots(pool, 1, q, 4, Int32Array.of(0, 1), Int32Array.of(0, 0, 2), out)).toThrow(/offsets/);
    expect(() => attentionScores(pool, 1, q, 4, new Float32Array(4 * 38), 38)).toThrow();
  });
});

describe('selection == the TS references (random pools, GQA group 2)', () => {
  it('streaming: sinks + window, the same for each KV head; window ≥ N keeps all', () => {
    const pool = randomPool(100, 3);
    const s = new SparsePolicyState('streaming', { sinks: 3, window: 10 }, shape, pool);
    const q = query(new Gaussian(4));
    for (const N of [0, 5, 13, 99]) {
      const { lists: got, figures } = s.select(2, q, N);
      const want = Array.from(streaming(N, { sinks: 3, window: 10 }));
      expect(lists(got)).toEqual([want, want]);
      expect(figures.candidates).toBe(N);
    }
    const wide = new SparsePolicyState('streaming', { window: 1000 }, shape, pool);
    expect(lists(wide.select(2, q, 99).lists)[1]).toEqual(Array.from({ length: 99 }, (_, j) => j));
  });

  it('quest: page bounds of the stored keys, extended as N grows and rebuilt after truncate', () => {
    const pool = randomPool(150, 5);
    const s = new SparsePolicyState('quest', { topPages: 3, pageSize: 16 }, shape, pool);
    const g = new Gaussian(6);
    for (const N of [7, 40, 41, 100, 150, 60, 90]) {
      if (N === 60) s.truncate(60);
      const q = query(g);
      const { pageMin, pageMax } = questPageBounds(keysOf(pool, 1, N), 2, N, 8, 16);
      const want = quest(q, pageMin, pageMax, { heads: 4, kvHeads: 2, headDim: 8, N }, { pageSize: 16, topPages: 3 });
      expect(lists(s.select(1, q, N).lists), `N ${N}`).toEqual(lists(want));
    }
  });

  it('oracle: top true attention mass from the native logits', () => {
    const pool = randomPool(120, 7);
    const s = new SparsePolicyState('oracle', { fetchCap: 0.1 }, shape, pool);
    const g = new Gaussian(8);
    for (const N of [1, 10, 64, 119]) {
      const q = query(g);
      const want = oracle(logitsOf(pool, 0, q, N), { heads: 4, kvHeads: 2, N }, { budget: Math.max(1, Math.floor(0.1 * N + 1e-9)) });
      expect(lists(s.select(0, q, N).lists), `N ${N}`).toEqual(lists(want));
    }
  });

  it('h2o: accumulated mass over the attended set (prefill: causal), evictions for good', () => {
    const P = 20;
    const pool = randomPool(120, 9);
    const s = new SparsePolicyState('h2o', { budget: 12, window: 4 }, shape, pool);
    const g = new Gaussian(10);
    const { heads, kvHeads } = shape;
    const acc = new Float32Array(kvHeads * 120); // the test's own account [kvHeads, slots]
    const live = [new Uint8Array(120).fill(1), new Uint8Array(120).fill(1)];
    // prefill: query i attends 0..i
    const qp = Float32Array.from(g.fill(P * heads * 8, 2));
    s.observePrefill(2, qp, 0, P);
    for (let i = 0; i < P; i++) {
      const p = softmaxRows(logitsOf(pool, 2, qp.subarray(i * 32, (i + 1) * 32), i + 1), heads, i + 1);
      for (let h = 0; h < heads; h++) for (let j = 0; j <= i; j++) acc[Math.floor(h / 2) * 120 + j]! += p[h * (i + 1) + j]!;
    }
    for (let N = P; N < 119; N++) {
      const q = query(g);
      const got = s.select(2, q, N).lists;
      for (let kv = 0; kv < kvHeads; kv++) {
        const [want] = h2o(acc.subarray(kv * 120, kv * 120 + N), 1, N, { budget: 12, recent: 4 }, live[kv]!.subarray(0, N));
        expect(Array.from(got[kv]!), `N ${N}, KV head ${kv}`).toEqual(Array.from(want!));
        const keep = new Set(want);
        for (let j = 0; j < N - 4; j++) if (!keep.has(j)) live[kv]![j] = 0;
      }
      s.afterAttend(2, q, N);
      const sc = logitsOf(pool, 2, q, N + 1);
      for (let h = 0; h < heads; h++) {
        const kv = Math.floor(h / 2);
        const mask = new Uint8Array(N + 1);
        for (const j of got[kv]!) mask[j] = 1;
        mask[N] = 1;
        const p = softmaxRows(sc.subarray(h * (N + 1), (h + 1) * (N + 1)), 1, N + 1, mask);
        for (let j = 0; j <= N; j++) acc[kv * 120 + j]! += p[j]!;
      }
    }
    // an evicted slot never comes back
    expect(live[0]!.subarray(0, 100).includes(0)).toBe(true);
  });
});
