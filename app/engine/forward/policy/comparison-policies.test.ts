// The comparison policies' selection in the decode path (policy/{streaming,h2o,quest,oracle,
// snapkv}.ts, native attendSlots / attentionScores) against the plain references of app/engine/kv/
// policies-reference.ts, on random pools: streaming, quest (page bounds kept incrementally,
// truncate), oracle (native logits), h2o (accumulated mass over the attended set, permanent
// evictions), snapkv (window queries kept from prompt chunks and decode, kept set once per prompt,
// recomputed after a second prompt or a truncate), GQA group 2; the step-trace figures of the
// shared list bookkeeping (selection-lists.ts).
import { afterEach, describe, expect, it } from 'vitest';
import { attendReference, attendSlots, attentionScores, createKvPool, type KvPool } from '../../../../native/index.js';
import { h2o, oracle, quest, questPageBounds, snapkv, softmaxRows, streaming } from '../../kv/policies-reference.ts';
import { Gaussian, lists } from '../../kv/test-helpers.ts';
import { packSlotLists } from './slot-lists.ts';
import { StepTrace } from '../step-trace.ts';
import { createComparisonPolicy, type ComparisonPolicy } from './comparison.ts';
import { H2oPolicy } from './h2o.ts';
import { QuestPolicy } from './quest.ts';
import type { SparsePolicyName, SparsePolicyOptions } from './selection-settings.ts';
import { SnapkvPolicy } from './snapkv.ts';
import { StreamingPolicy } from './streaming.ts';

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

const make = (name: SparsePolicyName, options: SparsePolicyOptions, pool: KvPool): ComparisonPolicy => createComparisonPolicy(name, options, { shape, pool });

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

describe('the row-policy surface of the comparison policies', () => {
  it('the factory makes each by name; dense layers below denseLayers; an unknown name is refused', () => {
    const pool = randomPool(10, 21);
    for (const [name, cls] of [
      ['streaming', StreamingPolicy],
      ['h2o', H2oPolicy],
      ['quest', QuestPolicy],
      ['snapkv', SnapkvPolicy],
    ] as const) {
      const p = make(name, { denseLayers: 1 }, pool);
      expect(p).toBeInstanceOf(cls);
      expect(p.name).toBe(name);
      expect(p.denseLayers).toBe(1);
      expect(p.sparseStep()).toBe(true);
      expect([0, 1, 2].map((l) => p.selects(l))).toEqual([false, true, true]);
      expect(p.selection(2)).toEqual([]);
      expect(p.selectMs).toBe(0);
    }
    expect(make('oracle', { denseLayers: 9 }, pool).denseLayers).toBe(3); // clipped to the layers
    expect(() => make('nope' as SparsePolicyName, {}, pool)).toThrow(/unknown sparse policy nope/);
    expect(() => make('h2o', { fetchCap: 0 }, pool)).toThrow(/fetchCap must be in \(0, 1\]/);
  });

  it('figures: mean list length, candidates, reuse hits and misses against the previous step, bytes of the misses', () => {
    const pool = randomPool(100, 23);
    const trace = new StepTrace(shape.layers);
    const s = make('streaming', { sinks: 2, window: 3 }, pool);
    const q = query(new Gaussian(24));
    // step 1: 0,1 + 7,8,9 per KV head, nothing before it → all misses
    expect(lists(s.select(2, q, 10))).toEqual([0, 1].map(() => [0, 1, 7, 8, 9]));
    s.figures(2, 10, trace);
    const rowBytes = 8 * 4; // fp32 rows of d = 8
    expect([trace.selected[2], trace.candidates[2], trace.hits[2], trace.misses[2], trace.bytes[2]]).toEqual([5, 10, 0, 10, 10 * 2 * rowBytes]);
    // step 2: 0,1 + 8,9,10: 0,1,8,9 were there (4 hits a KV head), 10 is new
    s.select(2, q, 11);
    s.figures(2, 11, trace);
    expect([trace.selected[2], trace.candidates[2], trace.hits[2], trace.misses[2], trace.bytes[2]]).toEqual([5, 11, 8, 2, 2 * 2 * rowBytes]);
    // another layer has its own previous lists; a truncate forgets every layer's
    s.select(1, q, 11);
    s.figures(1, 11, trace);
    expect(trace.hits[1]).toBe(0);
    s.truncate(11);
    expect(s.selection(2)).toEqual([]);
    s.select(2, q, 11);
    s.figures(2, 11, trace);
    expect([trace.hits[2], trace.misses[2]]).toEqual([0, 10]);
    expect(s.selectMs).toBeGreaterThan(0);
  });

  it('a prompt chunk of a layer below denseLayers leaves the state alone', () => {
    const pool = randomPool(40, 25);
    const g = new Gaussian(26);
    const prompt = Float32Array.from(g.fill(40 * 32, 2));
    const s = make('snapkv', { budget: 10, window: 4 }, pool) as SnapkvPolicy; // denseLayers 2
    s.observePrompt(1, prompt, 0, 40);
    expect(s.storedQueries(1, 36, 40)).toBeUndefined();
    s.observePrompt(2, prompt, 0, 40);
    expect(Array.from(s.storedQueries(2, 36, 40)!)).toEqual(Array.from(prompt.subarray(36 * 32)));
  });
});

describe('selection == the TS references (random pools, GQA group 2)', () => {
  it('streaming: sinks + window, the same for each KV head; window ≥ N keeps all', () => {
    const pool = randomPool(100, 3);
    const s = make('streaming', { sinks: 3, window: 10 }, pool);
    const trace = new StepTrace(shape.layers);
    const q = query(new Gaussian(4));
    for (const N of [0, 5, 13, 99]) {
      const got = s.select(2, q, N);
      const want = Array.from(streaming(N, { sinks: 3, window: 10 }));
      expect(lists(got)).toEqual([want, want]);
      expect(lists(s.selection(2))).toEqual([want, want]);
      s.figures(2, N, trace);
      expect(trace.candidates[2]).toBe(N);
    }
    const wide = make('streaming', { window: 1000 }, pool);
    expect(lists(wide.select(2, q, 99))[1]).toEqual(Array.from({ length: 99 }, (_, j) => j));
  });

  it('quest: page bounds of the stored keys, extended as N grows and rebuilt after truncate', () => {
    const pool = randomPool(150, 5);
    const s = make('quest', { topPages: 3, pageSize: 16 }, pool);
    const g = new Gaussian(6);
    for (const N of [7, 40, 41, 100, 150, 60, 90]) {
      if (N === 60) s.truncate(60);
      const q = query(g);
      const { pageMin, pageMax } = questPageBounds(keysOf(pool, 1, N), 2, N, 8, 16);
      const want = quest(q, pageMin, pageMax, { heads: 4, kvHeads: 2, headDim: 8, N }, { pageSize: 16, topPages: 3 });
      expect(lists(s.select(1, q, N)), `N ${N}`).toEqual(lists(want));
    }
  });

  it('quest: bounds extended by prompt chunks and by rows appended without a forward pass == the stored keys', () => {
    const pool = randomPool(150, 17);
    const g = new Gaussian(18);
    const chunked = make('quest', { topPages: 2, pageSize: 16 }, pool);
    chunked.observePrompt!(2, new Float32Array(0), 0, 37);
    chunked.observePrompt!(2, new Float32Array(0), 37, 60);
    const appended = make('quest', { topPages: 2, pageSize: 16 }, pool);
    appended.appendedWithoutForward!(97);
    const q = query(g);
    const { pageMin, pageMax } = questPageBounds(keysOf(pool, 2, 97), 2, 97, 8, 16);
    const want = lists(quest(q, pageMin, pageMax, { heads: 4, kvHeads: 2, headDim: 8, N: 97 }, { pageSize: 16, topPages: 2 }));
    expect(lists(chunked.select(2, q, 97))).toEqual(want);
    expect(lists(appended.select(2, q, 97))).toEqual(want);
  });

  it('oracle: top true attention mass from the native logits', () => {
    const pool = randomPool(120, 7);
    const s = make('oracle', { fetchCap: 0.1 }, pool);
    const g = new Gaussian(8);
    for (const N of [1, 10, 64, 119]) {
      const q = query(g);
      const want = oracle(logitsOf(pool, 0, q, N), { heads: 4, kvHeads: 2, N }, { budget: Math.max(1, Math.floor(0.1 * N + 1e-9)) });
      expect(lists(s.select(0, q, N)), `N ${N}`).toEqual(lists(want));
    }
  });

  it('h2o: accumulated mass over the attended set (prompt: causal), evictions for good', () => {
    const P = 20;
    const pool = randomPool(120, 9);
    const s = make('h2o', { budget: 12, window: 4 }, pool);
    const g = new Gaussian(10);
    const { heads, kvHeads } = shape;
    const acc = new Float32Array(kvHeads * 120); // the test's own account [kvHeads, slots]
    const live = [new Uint8Array(120).fill(1), new Uint8Array(120).fill(1)];
    // prompt: query i attends 0..i
    const qp = Float32Array.from(g.fill(P * heads * 8, 2));
    s.observePrompt!(2, qp, 0, P);
    for (let i = 0; i < P; i++) {
      const p = softmaxRows(logitsOf(pool, 2, qp.subarray(i * 32, (i + 1) * 32), i + 1), heads, i + 1);
      for (let h = 0; h < heads; h++) for (let j = 0; j <= i; j++) acc[Math.floor(h / 2) * 120 + j]! += p[h * (i + 1) + j]!;
    }
    for (let N = P; N < 119; N++) {
      const q = query(g);
      const got = s.select(2, q, N);
      for (let kv = 0; kv < kvHeads; kv++) {
        const [want] = h2o(acc.subarray(kv * 120, kv * 120 + N), 1, N, { budget: 12, recent: 4 }, live[kv]!.subarray(0, N));
        expect(Array.from(got[kv]!), `N ${N}, KV head ${kv}`).toEqual(Array.from(want!));
        const keep = new Set(want);
        for (let j = 0; j < N - 4; j++) if (!keep.has(j)) live[kv]![j] = 0;
      }
      s.attended!(2, q, N);
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

  it('h2o: a truncate forgets the mass and the evictions of the slots from n on; n = 0 resets everything', () => {
    const pool = randomPool(120, 19);
    const g = new Gaussian(20);
    const s = make('h2o', { budget: 6, window: 2 }, pool) as H2oPolicy;
    const st = s as unknown as { acc: Float32Array[]; live: Uint8Array[] };
    s.observePrompt(2, Float32Array.from(g.fill(40 * 32, 2)), 0, 40);
    for (let N = 40; N < 60; N++) {
      const q = query(g);
      s.select(2, q, N);
      s.attended(2, q, N);
    }
    const C = shape.contextLength;
    const acc = st.acc[2]!.slice();
    const live = st.live[2]!.slice();
    expect(live.subarray(0, 50).includes(0)).toBe(true);
    s.truncate(50);
    for (let kv = 0; kv < 2; kv++) {
      expect(Array.from(st.acc[2]!.subarray(kv * C, kv * C + 50))).toEqual(Array.from(acc.subarray(kv * C, kv * C + 50)));
      expect(Array.from(st.live[2]!.subarray(kv * C, kv * C + 50))).toEqual(Array.from(live.subarray(kv * C, kv * C + 50)));
      expect(st.acc[2]!.subarray(kv * C + 50, (kv + 1) * C).every((x) => x === 0)).toBe(true);
      expect(st.live[2]!.subarray(kv * C + 50, (kv + 1) * C).every((x) => x === 1)).toBe(true);
    }
    s.truncate(0);
    expect(st.acc.every((a) => a.every((x) => x === 0))).toBe(true);
    expect(st.live.every((a) => a.every((x) => x === 1))).toBe(true);
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
  const snap = (options: SparsePolicyOptions, pool: KvPool): SnapkvPolicy => make('snapkv', options, pool) as SnapkvPolicy;

  it('kept prompt = reference at the first decode step; generated tokens all attended; a second prompt and a truncate recompute', () => {
    const pool = randomPool(150, 11);
    const g = new Gaussian(12);
    const s = snap({ budget: 20, window: 6, poolKernel: 5 }, pool);
    const trace = new StepTrace(shape.layers);
    // a 70-token prompt in two chunks (the window straddles nothing: it lies in the second)
    const prompt = Float32Array.from(g.fill(70 * 32, 2));
    s.observePrompt(2, prompt.subarray(0, 40 * 32), 0, 40);
    s.observePrompt(2, prompt.subarray(40 * 32), 40, 30);
    const want = expected(pool, 2, prompt.subarray(64 * 32), 70, 6, 20, 5);
    expect(want[0]!.length).toBe(20);
    expect(want[0]!.slice(-6)).toEqual([64, 65, 66, 67, 68, 69]); // the window is kept
    const decodeQ: Float32Array[] = [];
    for (let N = 70; N < 80; N++) {
      const q = query(g);
      decodeQ.push(q);
      const got = s.select(2, q, N);
      s.figures(2, N, trace);
      expect(lists(got), `N ${N}`).toEqual(want.map((k) => withTail(k, 70, N)));
      expect(trace.selected[2]).toBe(20 + N - 70);
      expect(trace.candidates[2]).toBe(N);
    }
    expect(lists(s.keptPrompt(2)!.kept)).toEqual(want);

    // a continued conversation: 3 more prompt tokens at 80; the window (6) reaches back over decoded
    // tokens 77..79, whose queries select() kept; the kept set is chosen again over 0..82
    const more = Float32Array.from(g.fill(3 * 32, 2));
    s.observePrompt(2, more, 80, 3);
    expect(s.keptPrompt(2)).toBeUndefined(); // stale until the next step
    const window2 = new Float32Array(6 * 32);
    window2.set(decodeQ[7]!, 0);
    window2.set(decodeQ[8]!, 32);
    window2.set(decodeQ[9]!, 64);
    window2.set(more, 96);
    const want2 = expected(pool, 2, window2, 83, 6, 20, 5);
    expect(lists(s.select(2, query(g), 83))).toEqual(want2);
    expect(want2).not.toEqual(want.map((k) => withTail(k, 70, 83).slice(0, 20)));

    // a truncate into the prompt: the prompt is now 0..59, whose last queries are gone → the newest
    // `budget` tokens (no query to score with), until a prompt brings queries again
    s.truncate(60);
    expect(lists(s.select(2, query(g), 60))).toEqual([0, 1].map(() => Array.from({ length: 20 }, (_, i) => 40 + i)));
    const again = Float32Array.from(g.fill(10 * 32, 2));
    s.observePrompt(2, again, 60, 10);
    expect(lists(s.select(2, query(g), 70))).toEqual(expected(pool, 2, again.subarray(4 * 32), 70, 6, 20, 5));
    // reset: nothing of the prompt is left; a fresh prompt within the budget keeps everything
    s.truncate(0);
    s.observePrompt(2, Float32Array.from(g.fill(15 * 32, 2)), 0, 15);
    expect(lists(s.select(2, query(g), 18))).toEqual([0, 1].map(() => Array.from({ length: 18 }, (_, j) => j)));
  });

  it('rows appended without a forward pass (the benchmark) are prompt without queries: the newest budget tokens are kept', () => {
    const pool = randomPool(150, 15);
    const g = new Gaussian(16);
    const s = snap({ fetchCap: 0.1, window: 8 }, pool);
    s.observePrompt(2, Float32Array.from(g.fill(40 * 32, 2)), 0, 40);
    s.appendedWithoutForward(130); // 90 random rows after a 40-token prompt
    const newest = Array.from({ length: 13 }, (_, i) => 117 + i); // ⌊0.1·130⌋ = 13
    expect(lists(s.select(2, query(g), 131))).toEqual([0, 1].map(() => [...newest, 130]));
    expect(s.keptPrompt(2)!.promptEnd).toBe(130);
    const streaming = make('streaming', { fetchCap: 0.1 }, pool);
    expect(streaming.appendedWithoutForward).toBeUndefined(); // other policies: nothing to do
    expect(lists(streaming.select(2, query(g), 130))[0]!.length).toBe(13);
  });

  it('budget parity: ⌊fetchCap·prompt⌋ tokens (window ≤ budget), default window 32 and kernel 7; bad knobs are refused', () => {
    const pool = randomPool(150, 13);
    const g = new Gaussian(14);
    // denseLayers 1: layer 1 selects, so its prompt chunks are observed
    const s = snap({ fetchCap: 0.1, denseLayers: 1 }, pool);
    const prompt = Float32Array.from(g.fill(140 * 32, 2));
    s.observePrompt(1, prompt, 0, 140);
    // budget ⌊0.1·140⌋ = 14 < the default window 32: the window shrinks to 14 and is all that is kept
    expect(lists(s.select(1, query(g), 140))).toEqual(expected(pool, 1, prompt.subarray(126 * 32), 140, 14, 14, 7));
    const wide = snap({ fetchCap: 0.5, denseLayers: 1 }, pool);
    wide.observePrompt(1, prompt, 0, 140);
    const got = lists(wide.select(1, query(g), 141));
    expect(got).toEqual(expected(pool, 1, prompt.subarray(108 * 32), 140, 32, 70, 7).map((k) => withTail(k, 140, 141)));
    expect(got[0]!.length).toBe(71);
    expect(() => snap({ poolKernel: 4 }, pool)).toThrow(/poolKernel must be odd/);
    expect(() => snap({ window: 0 }, pool)).toThrow(/window must be ≥ 1/);
  });
});
