// The comparison policies' selection in the decode path (sparse-policies.ts, native attendSlots /
// attentionScores) against the plain references of app/engine/kv/policies-reference.ts, on random
// pools: streaming, quest (page bounds kept incrementally, truncate), oracle (native logits), h2o
// (accumulated mass over the attended set, permanent evictions), snapkv (window queries kept from
// prefill and decode, kept set once per prompt, recomputed after a second prefill or a truncate),
// GQA group 2.
import { afterEach, describe, expect, it } from 'vitest';
import { attendReference, attendSlots, attentionScores, createKvPool, type KvPool } from '../../../native/index.js';
import { h2o, oracle, quest, questPageBounds, snapkv, softmaxRows, streaming } from '../kv/policies-reference.ts';
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

describe('snapkv on the pool == the reference rule', () => {
  /** The reference's expectation: window queries `qs` ([w, heads·d], positions P−w..P−1) over slots 0..P−1. */
  function expected(pool: KvPool, layer: number, qs: Float32Array, P: number, w: number, budget: number, kernel: number): number[][] {
    const { heads } = shape;
    const obs = new Float32Array(heads * w * P); // [heads, w, P]
    for (let i = 0; i < w; i++) {
      const sc = logitsOf(pool, layer, qs.subarray(i * 32, (i + 1) * 32), P);
      for (let h = 0; h < heads; h++) obs.set(sc.subarray(h * P, (h + 1) * P), (h * w + i) * P);
    }
    return lists(snapkv(obs, { heads, kvHeads: 2, N: P }, { budget, window: w, kernel, pooling: 'max' }));
  }
  const withTail = (kept: number[], P: number, N: number): number[] => [...kept, ...Array.from({ length: N - P }, (_, i) => P + i)];

  it('kept prompt = reference at the first decode step; generated tokens all attended; a second prefill and a truncate recompute', () => {
    const pool = randomPool(150, 11);
    const g = new Gaussian(12);
    const s = new SparsePolicyState('snapkv', { budget: 20, window: 6, poolKernel: 5 }, shape, pool);
    // a 70-token prompt prefilled in two chunks (the window straddles nothing: it lies in the second)
    const prompt = Float32Array.from(g.fill(70 * 32, 2));
    s.observePrefill(2, prompt.subarray(0, 40 * 32), 0, 40);
    s.observePrefill(2, prompt.subarray(40 * 32), 40, 30);
    const want = expected(pool, 2, prompt.subarray(64 * 32), 70, 6, 20, 5);
    expect(want[0]!.length).toBe(20);
    expect(want[0]!.slice(-6)).toEqual([64, 65, 66, 67, 68, 69]); // the window is kept
    const decodeQ: Float32Array[] = [];
    for (let N = 70; N < 80; N++) {
      const q = query(g);
      decodeQ.push(q);
      const { lists: got, figures } = s.select(2, q, N);
      expect(lists(got), `N ${N}`).toEqual(want.map((k) => withTail(k, 70, N)));
      expect(figures.selected).toBe(20 + N - 70);
      expect(figures.candidates).toBe(N);
    }
    expect(lists(s.keptPrompt(2)!.kept)).toEqual(want);

    // a continued conversation: 3 more prompt tokens at 80; the window (6) reaches back over decoded
    // tokens 77..79, whose queries select() kept; the kept set is chosen again over 0..82
    const more = Float32Array.from(g.fill(3 * 32, 2));
    s.observePrefill(2, more, 80, 3);
    expect(s.keptPrompt(2)).toBeUndefined(); // stale until the next step
    const window2 = new Float32Array(6 * 32);
    window2.set(decodeQ[7]!, 0);
    window2.set(decodeQ[8]!, 32);
    window2.set(decodeQ[9]!, 64);
    window2.set(more, 96);
    const want2 = expected(pool, 2, window2, 83, 6, 20, 5);
    expect(lists(s.select(2, query(g), 83).lists)).toEqual(want2);
    expect(want2).not.toEqual(want.map((k) => withTail(k, 70, 83).slice(0, 20)));

    // a truncate into the prompt: the prompt is now 0..59, whose last queries are gone → the newest
    // `budget` tokens (no query to score with), until a prefill brings queries again
    s.truncate(60);
    expect(lists(s.select(2, query(g), 60).lists)).toEqual([0, 1].map(() => Array.from({ length: 20 }, (_, i) => 40 + i)));
    const again = Float32Array.from(g.fill(10 * 32, 2));
    s.observePrefill(2, again, 60, 10);
    expect(lists(s.select(2, query(g), 70).lists)).toEqual(expected(pool, 2, again.subarray(4 * 32), 70, 6, 20, 5));
    // reset: nothing of the prompt is left; a fresh prompt within the budget keeps everything
    s.truncate(0);
    s.observePrefill(2, Float32Array.from(g.fill(15 * 32, 2)), 0, 15);
    expect(lists(s.select(2, query(g), 18).lists)).toEqual([0, 1].map(() => Array.from({ length: 18 }, (_, j) => j)));
  });

  it('rows appended without a forward pass (the benchmark) are prompt without queries: the newest budget tokens are kept', () => {
    const pool = randomPool(150, 15);
    const g = new Gaussian(16);
    const s = new SparsePolicyState('snapkv', { fetchCap: 0.1, window: 8 }, shape, pool);
    s.observePrefill(2, Float32Array.from(g.fill(40 * 32, 2)), 0, 40);
    s.appendedForBenchmark(130); // 90 random rows after a 40-token prompt
    const newest = Array.from({ length: 13 }, (_, i) => 117 + i); // ⌊0.1·130⌋ = 13
    expect(lists(s.select(2, query(g), 131).lists)).toEqual([0, 1].map(() => [...newest, 130]));
    expect(s.keptPrompt(2)!.promptEnd).toBe(130);
    const streaming = new SparsePolicyState('streaming', { fetchCap: 0.1 }, shape, pool);
    streaming.appendedForBenchmark(130); // other policies: nothing to do
    expect(lists(streaming.select(2, query(g), 130).lists)[0]!.length).toBe(13);
  });

  it('budget parity: ⌊fetchCap·prompt⌋ tokens (window ≤ budget), default window 32 and kernel 7; bad knobs are refused', () => {
    const pool = randomPool(150, 13);
    const g = new Gaussian(14);
    const s = new SparsePolicyState('snapkv', { fetchCap: 0.1 }, shape, pool);
    const prompt = Float32Array.from(g.fill(140 * 32, 2));
    s.observePrefill(1, prompt, 0, 140);
    // budget ⌊0.1·140⌋ = 14 < the default window 32: the window shrinks to 14 and is all that is kept
    expect(lists(s.select(1, query(g), 140).lists)).toEqual(expected(pool, 1, prompt.subarray(126 * 32), 140, 14, 14, 7));
    const wide = new SparsePolicyState('snapkv', { fetchCap: 0.5 }, shape, pool);
    wide.observePrefill(1, prompt, 0, 140);
    const got = lists(wide.select(1, query(g), 141).lists);
    expect(got).toEqual(expected(pool, 1, prompt.subarray(108 * 32), 140, 32, 70, 7).map((k) => withTail(k, 140, 141)));
    expect(got[0]!.length).toBe(71);
    expect(() => new SparsePolicyState('snapkv', { poolKernel: 4 }, shape, pool)).toThrow(/poolKernel must be odd/);
    expect(() => new SparsePolicyState('snapkv', { window: 0 }, shape, pool)).toThrow(/window must be ≥ 1/);
  });
});
