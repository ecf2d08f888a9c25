import { describe, expect, it } from 'vitest';
import { h2o, oracle, pageCount, quest, questPageBounds, snapkv, softmaxRows, streaming } from './policies-reference.ts';
import { Gaussian, lists } from './test-helpers.ts';

const f32 = (rows: number[][]): Float32Array => Float32Array.from(rows.flat());

describe('streaming', () => {
  it('sinks + recent window, overlapping or not, masked slots dropped', () => {
    expect(Array.from(streaming(12, { window: 3 }))).toEqual([0, 1, 2, 3, 9, 10, 11]);
    expect(Array.from(streaming(12, { sinks: 1, window: 2 }))).toEqual([0, 10, 11]);
    expect(Array.from(streaming(5, { window: 3 }))).toEqual([0, 1, 2, 3, 4]); // overlap
    expect(Array.from(streaming(3, { sinks: 4, window: 8 }))).toEqual([0, 1, 2]);
    expect(Array.from(streaming(0, { window: 8 }))).toEqual([]);
    expect(Array.from(streaming(12, { sinks: 0, window: 0 }))).toEqual([]);
    expect(Array.from(streaming(8, { sinks: 2, window: 2 }, Uint8Array.of(1, 0, 1, 1, 1, 1, 0, 1)))).toEqual([0, 7]);
  });
});

describe('h2o', () => {
  // 2 KV heads, N = 8
  const acc = f32([
    [5, 0.1, 3, 0.2, 4, 0.3, 9, 9],
    [0, 7, 0, 6, 0, 1, 0, 0],
  ]);
  it('recent window + heavy hitters by accumulated mass, per KV head', () => {
    expect(lists(h2o(acc, 2, 8, { budget: 4, recent: 2 }))).toEqual([
      [0, 4, 6, 7], // recent 6, 7; heavy among 0..5: 5 (slot 0), 4 (slot 4)
      [1, 3, 6, 7],
    ]);
    expect(lists(h2o(acc, 2, 8, { budget: 2, recent: 0 }))).toEqual([
      [6, 7],
      [1, 3],
    ]);
  });
  it('ties → lower slot; budget ≥ N keeps all; evicted slots never kept', () => {
    expect(lists(h2o(f32([[1, 1, 1, 1, 1]]), 1, 5, { budget: 3, recent: 1 }))).toEqual([[0, 1, 4]]);
    expect(lists(h2o(acc, 2, 8, { budget: 20, recent: 2 }))[0]).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    const mask = Uint8Array.of(0, 1, 1, 1, 1, 1, 1, 0);
    expect(lists(h2o(acc, 2, 8, { budget: 4, recent: 2 }, mask))).toEqual([
      [2, 4, 5, 6], // recent: 6 (7 is evicted), so 3 heavy hitters: slots 4, 2, 5 (0 is evicted)
      [1, 3, 5, 6],
    ]);
  });
  it('rejects recent > budget', () => {
    expect(() => h2o(acc, 2, 8, { budget: 1, recent: 2 })).toThrow(/recent/);
  });
});

describe('quest', () => {
  // d = 2, pageSize 2, N = 6 → 3 pages; keys per KV head [N, d]
  const keys = f32([
    // KV head 0
    [1, 0], [2, 0], // page 0: x in [1, 2]
    [0, 3], [0, 1], // page 1: y in [1, 3]
    [-5, 0], [5, 0], // page 2: x in [−5, 5]
  ]);
  const { pageMin, pageMax } = questPageBounds(keys, 1, 6, 2, 2);

  it('page bounds are element-wise min/max; pages = ⌈N / pageSize⌉', () => {
    expect(pageCount(6, 2)).toBe(3);
    expect(pageCount(7, 2)).toBe(4);
    expect(Array.from(pageMin)).toEqual([1, 0, 0, 1, -5, 0]);
    expect(Array.from(pageMax)).toEqual([2, 0, 0, 3, 5, 0]);
  });

  it('upper bound Σ max(q·min, q·max) picks pages; all their tokens are kept', () => {
    const shape = { heads: 1, kvHeads: 1, headDim: 2, N: 6 };
    // q = (1, 0): bounds 2, 0, 5 → page 2 then page 0
    expect(lists(quest(Float32Array.of(1, 0), pageMin, pageMax, shape, { pageSize: 2, topPages: 1 }))).toEqual([[4, 5]]);
    expect(lists(quest(Float32Array.of(1, 0), pageMin, pageMax, shape, { pageSize: 2, topPages: 2 }))).toEqual([[0, 1, 4, 5]]);
    // q = (−1, 1): page 0 −1 + 0, page 1 0 + 3, page 2 5 + 0 → pages 2, 1
    expect(lists(quest(Float32Array.of(-1, 1), pageMin, pageMax, shape, { pageSize: 2, topPages: 2 }))).toEqual([[2, 3, 4, 5]]);
    // a partial last page (N = 5) is a page like the others
    const b5 = questPageBounds(keys.subarray(0, 10), 1, 5, 2, 2);
    expect(lists(quest(Float32Array.of(-1, 0), b5.pageMin, b5.pageMax, { ...shape, N: 5 }, { pageSize: 2, topPages: 1 }))).toEqual([[4]]);
  });

  it('GQA: pages combined by max over the group of (U − own max); KV heads differ; masked tokens dropped', () => {
    // 2 query heads on 1 KV head: head 0 q = (10, 0) → U = 20, 0, 50; head 1 q = (0, 1) → U = 0, 3, 0
    const shape = { heads: 2, kvHeads: 1, headDim: 2, N: 6 };
    const q = Float32Array.of(10, 0, 0, 1);
    // relative: head 0: −30, −50, 0; head 1: −3, 0, −3 → combined −3, 0, 0 → pages 1 and 2 (raw max would take 2, 0)
    expect(lists(quest(q, pageMin, pageMax, shape, { pageSize: 2, topPages: 2 }))).toEqual([[2, 3, 4, 5]]);
    // two KV heads with different keys choose different pages
    const keys2 = f32([[1, 0], [2, 0], [0, 3], [0, 1], [-5, 0], [5, 0], [9, 0], [9, 0], [0, 0], [0, 0], [0, 0], [0, 0]]);
    const b2 = questPageBounds(keys2, 2, 6, 2, 2);
    const sel = quest(Float32Array.of(1, 0, 1, 0), b2.pageMin, b2.pageMax, { heads: 2, kvHeads: 2, headDim: 2, N: 6 }, { pageSize: 2, topPages: 1 });
    expect(lists(sel)).toEqual([[4, 5], [0, 1]]);
    // masked: page 2 fully evicted → never chosen; a masked token in a chosen page is dropped
    const mask = Uint8Array.of(1, 0, 1, 1, 0, 0);
    const bm = questPageBounds(keys, 1, 6, 2, 2, mask);
    expect(lists(quest(Float32Array.of(1, 0), bm.pageMin, bm.pageMax, { heads: 1, kvHeads: 1, headDim: 2, N: 6 }, { pageSize: 2, topPages: 1 }, mask))).toEqual([[0]]);
  });

  it('default page size 16', () => {
    const N = 40;
    const k = new Float32Array(N * 2);
    k[35 * 2] = 100; // token 35 in page 2
    const b = questPageBounds(k, 1, N, 2);
    expect(lists(quest(Float32Array.of(1, 0), b.pageMin, b.pageMax, { heads: 1, kvHeads: 1, headDim: 2, N }, { topPages: 1 }))).toEqual([[32, 33, 34, 35, 36, 37, 38, 39]]);
  });
});

describe('oracle', () => {
  it('true top by attention mass, summed over the group (softmax per head)', () => {
    // heads 0, 1 on KV head 0; head 0 is sharp on slot 0, head 1 spread over 2, 3 with a tiny edge
    const scores = f32([
      [10, 0, 0, 0, 0],
      [0, 0, 3, 3, 2.9],
    ]);
    const p = softmaxRows(scores, 2, 5);
    expect(p[0]!).toBeGreaterThan(0.99);
    expect(lists(oracle(scores, { heads: 2, kvHeads: 1, N: 5 }, { budget: 2 }))).toEqual([[0, 2]]); // tie 2/3 → 2
    expect(lists(oracle(scores, { heads: 2, kvHeads: 1, N: 5 }, { budget: 3 }))).toEqual([[0, 2, 3]]);
    expect(lists(oracle(scores, { heads: 2, kvHeads: 2, N: 5 }, { budget: 1 }))).toEqual([[0], [2]]);
    // masked: the softmax runs over candidates only
    expect(lists(oracle(scores, { heads: 2, kvHeads: 1, N: 5 }, { budget: 2 }, Uint8Array.of(0, 1, 1, 0, 1)))).toEqual([[2, 4]]);
  });
});

describe('snapkv', () => {
  it('window votes over the prefix (causal softmax), pooled, top + window kept', () => {
    // N = 8, window 2: prefix 0..5, window slots 6, 7; one head
    const N = 8;
    const obs = new Float32Array(2 * N).fill(0);
    // both window rows look hard at slot 1 and a bit at slot 4
    for (const i of [0, 1]) {
      obs[i * N + 1] = 8;
      obs[i * N + 4] = 6;
    }
    obs[0 * N + 7] = 100; // row 0 is position 6: slot 7 is in its future and must be ignored
    const noPool = snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 4, window: 2, kernel: 1 });
    expect(lists(noPool)).toEqual([[1, 4, 6, 7]]);
    // avg pooling with kernel 5 smears slot 1 over 0..3 and slot 4 over 2..5: slot 2 gets both
    const pooled = snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 3, window: 2, kernel: 5, pooling: 'avg' });
    expect(lists(pooled)).toEqual([[2, 6, 7]]);
    const maxPooled = snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 5, window: 2, pooling: 'max', kernel: 3 });
    expect(lists(maxPooled)).toEqual([[0, 1, 2, 6, 7]]); // slot 1's vote spreads to 0, 2 (ties → lower)
  });

  it('GQA: votes add over the group; short prompts keep everything', () => {
    const N = 6;
    const obs = new Float32Array(2 * 1 * N); // heads 2, window 1
    obs[0 * N + 0] = 9; // head 0 → slot 0
    obs[1 * N + 3] = 9; // head 1 → slot 3
    expect(lists(snapkv(obs, { heads: 2, kvHeads: 1, N }, { budget: 3, window: 1, kernel: 1 }))).toEqual([[0, 3, 5]]);
    expect(lists(snapkv(obs, { heads: 2, kvHeads: 2, N }, { budget: 2, window: 1, kernel: 1 }))).toEqual([[0, 5], [3, 5]]);
    expect(lists(snapkv(obs, { heads: 2, kvHeads: 1, N }, { budget: 6, window: 1 }))).toEqual([[0, 1, 2, 3, 4, 5]]);
    expect(() => snapkv(obs, { heads: 2, kvHeads: 1, N }, { budget: 3, window: 1, kernel: 4 })).toThrow(/odd/);
  });

  it('the window is always kept, even when it receives no vote and the prefix all the mass', () => {
    // N = 10, window 3 (slots 7, 8, 9): every window query puts all its mass on slots 0..6
    const N = 10;
    const W = 3;
    const obs = new Float32Array(W * N).fill(-1e4);
    for (let i = 0; i < W; i++) for (let j = 0; j < 7; j++) obs[i * N + j] = j; // rising towards 6
    expect(lists(snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 5, window: W, kernel: 1 }))).toEqual([[5, 6, 7, 8, 9]]);
    // budget == window: only the window
    expect(lists(snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 3, window: W, kernel: 1 }))).toEqual([[7, 8, 9]]);
    expect(() => snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 2, window: W })).toThrow(/budget.*window/);
  });

  it('default max-pool (kernel 7) spreads a spike to its 3 neighbours on each side, ties → lower slot', () => {
    // N = 21, window 1 (slot 20); one spike at slot 10, everything else far below
    const N = 21;
    const obs = new Float32Array(N).fill(0);
    obs[10] = 20;
    // after max-pooling slots 7..13 all carry the spike's vote: budget 5 = the window + the lowest 4 of those 7 ties
    expect(lists(snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 5, window: 1 }))).toEqual([[7, 8, 9, 10, 20]]);
    expect(lists(snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 8, window: 1 }))).toEqual([[7, 8, 9, 10, 11, 12, 13, 20]]);
    // without pooling the spike stands alone and the rest tie at the same tiny mass: lowest slots win
    expect(lists(snapkv(obs, { heads: 1, kvHeads: 1, N }, { budget: 4, window: 1, kernel: 1 }))).toEqual([[0, 1, 10, 20]]);
    // a flat pattern: every prefix slot ties → the lowest slots
    expect(lists(snapkv(new Float32Array(N), { heads: 1, kvHeads: 1, N }, { budget: 4, window: 1 }))).toEqual([[0, 1, 2, 20]]);
  });

  it('GQA: 4 query heads on 2 KV heads, each KV head chooses from its own group', () => {
    // heads 0, 1 → KV head 0; heads 2, 3 → KV head 1; window 1, N = 30 (slot 29 is the window)
    const N = 30;
    const obs = new Float32Array(4 * N);
    obs[0 * N + 3] = 10; // head 0: slot 3
    obs[1 * N + 20] = 10; // head 1: slot 20
    obs[2 * N + 12] = 10; // head 2: slot 12 (KV head 1 only)
    obs[3 * N + 12] = 9; // head 3 agrees with head 2
    const got = lists(snapkv(obs, { heads: 4, kvHeads: 2, N }, { budget: 3, window: 1, kernel: 1 }));
    expect(got).toEqual([
      [3, 20, 29],
      [0, 12, 29], // slot 12 wins by two votes; the second place ties over the rest → lowest slot 0
    ]);
  });
});

describe('all policies: shape of the answer on random inputs', () => {
  it('ascending, in range, within budget', () => {
    const g = new Gaussian(4);
    const N = 50;
    const shape = { heads: 4, kvHeads: 2, N };
    const sels = [
      ...h2o(Float32Array.from(g.fill(2 * N)), 2, N, { budget: 10, recent: 4 }),
      ...oracle(Float32Array.from(g.fill(4 * N)), shape, { budget: 10 }),
      ...snapkv(Float32Array.from(g.fill(4 * 5 * N)), shape, { budget: 10, window: 5 }),
    ];
    for (const s of sels) {
      expect(s.length).toBe(10);
      for (let i = 1; i < s.length; i++) expect(s[i]!).toBeGreaterThan(s[i - 1]!);
      expect(s[s.length - 1]!).toBeLessThan(N);
    }
  });
});
