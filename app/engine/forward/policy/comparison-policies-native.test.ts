// The native selection of streaming, h2o, quest and snapkv (native/src/policy_select.h, called by
// policy/{streaming,h2o,quest,snapkv}.ts) against the plain TS references (app/engine/kv/
// policies-reference.ts), which stay the oracle: the same slots, and for H2O the same accumulated
// mass bit for bit.
//  - the native functions alone on random inputs with ties (a few distinct values), NaN, GQA 1/2/4,
//    fp16/fp32/int8 pools, lengths that are not a multiple of the page size;
//  - the real decode path on stories260K (GQA 8q/4kv) and kjv-llama-hd64 (4q/2kv): every step of
//    every sparse layer checked against the references applied to the policy state right before it.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  attentionScores,
  createKvPool,
  h2oAccumulate,
  questExtendBounds,
  selectH2o,
  selectQuest,
  selectStreaming,
  snapkvCompress,
  type KvPool,
  type KvType,
} from '../../../../native/index.js';
import { h2o, pageCount, quest, questPageBounds, snapkv, streaming } from '../../kv/policies-reference.ts';
import { Gaussian, lists } from '../../kv/test-helpers.ts';
import { loadGgufModel } from '../../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../../model/types.ts';
import { haveSharedModel, KJV_HD64, STORIES_260K } from '../../../../test/support/models.ts';
import { createModelRunner } from '../model-runner.ts';
import { packSlotLists } from './slot-lists.ts';
import type { ComparisonPolicy } from './comparison.ts';
import { H2oPolicy } from './h2o.ts';
import { ListPolicy } from './selection-lists.ts';
import type { SnapkvPolicy } from './snapkv.ts';

const pools: KvPool[] = [];
afterEach(() => {
  while (pools.length) pools.pop()!.free();
});

/** A pool whose key rows take only a few distinct values (ties everywhere) when `ties`. */
function pool(kvHeads: number, d: number, tokens: number, kvType: KvType, seed: number, ties = false): KvPool {
  const p = createKvPool({ budgetBytes: 1 << 22, layers: 2, kvHeads, headDim: d, kvType });
  pools.push(p);
  const g = new Gaussian(seed);
  const k = Float32Array.from(g.fill(tokens * kvHeads * d), (x) => (ties ? Math.round(x) : x));
  p.appendBatch(1, k, Float32Array.from(g.fill(tokens * kvHeads * d)), 0);
  return p;
}

/** Per KV head the lists written by a native selection. */
function split(slots: Int32Array, offsets: Int32Array): number[][] {
  return Array.from({ length: offsets.length - 1 }, (_, g) => Array.from(slots.subarray(offsets[g]!, offsets[g + 1]!)));
}

/** The TS accumulate rule (the comparison policies' before the native one): softmax over lists[g] (+ slot n−1) or all n, added to acc. */
function referenceAccumulate(acc: Float32Array, sc: Float32Array, heads: number, kvHeads: number, C: number, n: number, lists?: readonly ArrayLike<number>[]): void {
  const group = heads / kvHeads;
  for (let h = 0; h < heads; h++) {
    const g = Math.floor(h / group);
    const row = h * n;
    const slots = lists ? [...Array.from(lists[g]!), n - 1] : Array.from({ length: n }, (_, j) => j);
    let max = -Infinity;
    for (const j of slots) max = Math.max(max, sc[row + j]!);
    let sum = 0;
    for (const j of slots) sum += Math.exp(sc[row + j]! - max);
    for (const j of slots) acc[g * C + j] = acc[g * C + j]! + Math.exp(sc[row + j]! - max) / sum;
  }
}

const bits = (a: Float32Array): number[] => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));

describe('native selection == the TS references (random inputs)', () => {
  it('streaming: every N, sinks and window', () => {
    const out = new Int32Array(300);
    for (const N of [0, 1, 7, 64, 65, 299])
      for (const sinks of [0, 4, 400])
        for (const window of [0, 1, 30, 1000]) {
          const n = selectStreaming(N, sinks, window, out);
          expect(Array.from(out.subarray(0, n)), `N ${N} sinks ${sinks} window ${window}`).toEqual(Array.from(streaming(N, { sinks, window })));
        }
    expect(() => selectStreaming(10, 1, 1, new Int32Array(9))).toThrow(/at least 10/);
  });

  it('h2o: recent + heavy hitters with ties and NaN, live masks, permanent evictions (GQA kvHeads 1..3)', () => {
    const g = new Gaussian(31);
    for (let c = 0; c < 40; c++) {
      const kvHeads = 1 + (c % 3);
      const C = 97;
      const N = c === 0 ? 0 : 1 + Math.floor(Math.abs(g.next()) * 30) % C;
      const budget = Math.min(N, Math.floor(Math.abs(g.next()) * 20));
      const recent = Math.min(budget, Math.floor(Math.abs(g.next()) * 6));
      const acc = Float32Array.from({ length: kvHeads * C }, () => {
        const r = Math.floor(Math.abs(g.next()) * 7);
        return r === 0 ? NaN : r === 1 ? -Infinity : r * 0.5; // few values: ties
      });
      const live = Uint8Array.from({ length: kvHeads * C }, () => (g.next() > -1.2 ? 1 : 0));
      const wantLive = live.slice();
      const want: number[][] = [];
      for (let kv = 0; kv < kvHeads; kv++) {
        const mask = wantLive.subarray(kv * C, kv * C + N);
        const [one] = h2o(acc.subarray(kv * C, kv * C + N), 1, N, { budget, recent }, mask);
        want.push(Array.from(one!));
        const keep = new Set(one);
        for (let j = 0; j < N - recent; j++) if (!keep.has(j)) mask[j] = 0;
      }
      const slots = new Int32Array(kvHeads * budget);
      const offsets = new Int32Array(kvHeads + 1);
      selectH2o(acc, live, kvHeads, C, N, budget, recent, slots, offsets);
      expect(split(slots, offsets), `case ${c}`).toEqual(want);
      expect(Array.from(live)).toEqual(Array.from(wantLive));
    }
    expect(() => selectH2o(new Float32Array(10), new Uint8Array(10), 1, 10, 10, 3, 4, new Int32Array(3), new Int32Array(2))).toThrow(/recent/);
  });

  for (const kvType of ['fp16', 'fp32', 'int8'] as const)
    for (const group of [1, 2, 4])
      it(`h2o mass, quest, snapkv on a ${kvType} pool, GQA group ${group}, tied keys`, () => {
        const kvHeads = 2;
        const heads = kvHeads * group;
        const d = 16;
        const T = 90; // not a multiple of the page size 16
        const C = 96;
        const p = pool(kvHeads, d, T, kvType, 40 + group, true);
        const g = new Gaussian(50 + group);
        const q = Float32Array.from(g.fill(heads * d));
        const sc = new Float32Array(heads * T);
        attentionScores(p, 1, q, heads, sc, T);

        // h2o mass: over lists (current token last), then over every slot < n (prefill)
        const acc = Float32Array.from({ length: kvHeads * C }, () => Math.round(Math.abs(g.next()) * 4) / 8);
        const want = acc.slice();
        const ls = [Int32Array.from([0, 3, 4, 40, 88]), Int32Array.from([1, 2, 60])];
        const { slots, offsets } = packSlotLists(ls, T - 1);
        h2oAccumulate(p, 1, q, heads, acc, C, T, slots, offsets);
        referenceAccumulate(want, sc, heads, kvHeads, C, T, ls);
        expect(bits(acc)).toEqual(bits(want));
        const sc57 = new Float32Array(heads * 57);
        attentionScores(p, 1, q, heads, sc57, 57);
        h2oAccumulate(p, 1, q, heads, acc, C, 57);
        referenceAccumulate(want, sc57, heads, kvHeads, C, 57);
        expect(bits(acc)).toEqual(bits(want));

        // quest: bounds extended in two calls == bounds of the stored keys; pages == the reference
        const pageSize = 16;
        const maxPages = pageCount(C, pageSize);
        const mn = new Float32Array(kvHeads * maxPages * d).fill(Infinity);
        const mx = new Float32Array(kvHeads * maxPages * d).fill(-Infinity);
        questExtendBounds(p, 1, mn, mx, maxPages, pageSize, 0, 33);
        questExtendBounds(p, 1, mn, mx, maxPages, pageSize, 33, T);
        const keys = new Float32Array(kvHeads * T * d);
        for (let kv = 0; kv < kvHeads; kv++) for (let j = 0; j < T; j++) keys.set(p.readK(1, kv, j), (kv * T + j) * d);
        for (const N of [1, 15, 16, 17, 50, T]) {
          const { pageMin, pageMax } = questPageBounds(keys.subarray(0, kvHeads * T * d), kvHeads, T, d, pageSize);
          const pages = pageCount(N, pageSize);
          // the reference takes [kvHeads, pages, d] bounds of slots < N: recompute over the first N keys
          const sub = new Float32Array(kvHeads * N * d);
          for (let kv = 0; kv < kvHeads; kv++) sub.set(keys.subarray(kv * T * d, (kv * T + N) * d), kv * N * d);
          const b = questPageBounds(sub, kvHeads, N, d, pageSize);
          if (N === T) {
            for (let kv = 0; kv < kvHeads; kv++) {
              expect(Array.from(mn.subarray(kv * maxPages * d, (kv * maxPages + pages) * d))).toEqual(Array.from(pageMin.subarray(kv * pages * d, (kv + 1) * pages * d)));
              expect(Array.from(mx.subarray(kv * maxPages * d, (kv * maxPages + pages) * d))).toEqual(Array.from(pageMax.subarray(kv * pages * d, (kv + 1) * pages * d)));
            }
          }
          for (const topPages of [1, 2, 4, pages + 1]) {
            const wantQ = lists(quest(q, b.pageMin, b.pageMax, { heads, kvHeads, headDim: d, N }, { pageSize, topPages }));
            // native bounds of slots < N: a fresh extension up to N
            const mnN = new Float32Array(mn.length).fill(Infinity);
            const mxN = new Float32Array(mx.length).fill(-Infinity);
            questExtendBounds(p, 1, mnN, mxN, maxPages, pageSize, 0, N);
            const out = new Int32Array(kvHeads * Math.min(N, topPages * pageSize));
            const off = new Int32Array(kvHeads + 1);
            selectQuest(q, heads, kvHeads, d, mnN, mxN, maxPages, N, pageSize, topPages, out, off);
            expect(split(out, off), `quest N ${N} topPages ${topPages}`).toEqual(wantQ);
          }
        }

        // snapkv: a window of 5 queries over a prompt of T slots, kernel 7 and 1
        for (const kernel of [1, 7]) {
          const w = 5;
          const budget = 23;
          const obsQ = Float32Array.from(g.fill(w * heads * d));
          const obs = new Float32Array(heads * w * T);
          const row = new Float32Array(heads * T);
          for (let i = 0; i < w; i++) {
            attentionScores(p, 1, obsQ.subarray(i * heads * d, (i + 1) * heads * d), heads, row, T);
            for (let h = 0; h < heads; h++) obs.set(row.subarray(h * T, (h + 1) * T), (h * w + i) * T);
          }
          const wantS = lists(snapkv(obs, { heads, kvHeads, N: T }, { budget, window: w, kernel, pooling: 'max' }));
          const out = new Int32Array(kvHeads * budget);
          const off = new Int32Array(kvHeads + 1);
          snapkvCompress(p, 1, obsQ, heads, T, w, budget, kernel, out, off);
          expect(split(out, off), `snapkv kernel ${kernel}`).toEqual(wantS);
        }
        expect(() => snapkvCompress(p, 1, new Float32Array(5 * heads * d), heads, T, 5, T, 7, new Int32Array(kvHeads * T), new Int32Array(kvHeads + 1))).toThrow(/budget/);
      });
});

// ─── the real decode path ───────────────────────────────────────────────────────────────────────

/** The references applied to the state right before each native step; throws on the first difference. */
function verifyAgainstReferences(policy: ComparisonPolicy): { steps: number; compressed: number; accumulated: number } {
  expect(policy).toBeInstanceOf(ListPolicy);
  const state = policy as ListPolicy;
  const st = state as unknown as {
    acc: Float32Array[];
    live: Uint8Array[];
    promptEnd: number[];
    keptFor: number[];
    obsWindow: number;
  };
  const snap = state as SnapkvPolicy;
  const { heads, kvHeads, headDim: d, contextLength: C } = state.shape;
  const s = state.settings;
  const pool = state.pool;
  const counts = { steps: 0, compressed: 0, accumulated: 0 };
  const select = state.select.bind(state);
  const observePrompt = state.observePrompt.bind(state);
  state.select = (layer, q, N) => {
    const budget = state.budgetFor(N);
    let want: number[][] | undefined;
    let snapWindow: Float32Array | undefined;
    let snapP = 0;
    let w = 0;
    if (state.name === 'streaming') {
      const window = s.window ?? Math.max(0, budget - Math.min(s.sinks, budget));
      const one = Array.from(streaming(N, { sinks: s.sinks, window }));
      want = Array.from({ length: kvHeads }, () => one);
    } else if (state.name === 'quest') {
      const keys = new Float32Array(kvHeads * N * d);
      for (let g = 0; g < kvHeads; g++) for (let j = 0; j < N; j++) keys.set(pool.readK(layer, g, j), (g * N + j) * d);
      const { pageMin, pageMax } = questPageBounds(keys, kvHeads, N, d, s.pageSize);
      const pages = pageCount(N, s.pageSize);
      const topPages = s.topPages ?? (budget >= N ? pages : Math.max(1, Math.round(budget / s.pageSize)));
      want = lists(quest(q, pageMin, pageMax, { heads, kvHeads, headDim: d, N }, { pageSize: s.pageSize, topPages }));
    } else if (state.name === 'h2o') {
      const recent = Math.min(budget, s.window ?? Math.floor(budget / 2));
      want = [];
      for (let g = 0; g < kvHeads; g++) {
        const [one] = h2o(st.acc[layer]!.slice(g * C, g * C + N), 1, N, { budget, recent }, st.live[layer]!.slice(g * C, g * C + N));
        want.push(Array.from(one!));
      }
    } else if (state.name === 'snapkv' && st.keptFor[layer] !== st.promptEnd[layer]) {
      snapP = st.promptEnd[layer]!;
      const pb = Math.min(snapP, s.budget ?? Math.max(1, Math.floor(s.fetchCap * snapP + 1e-9)));
      while (w < Math.min(st.obsWindow, pb) && snap.storedQueries(layer, snapP - 1 - w, snapP - w) !== undefined) w++;
      if (pb < snapP && w > 0) snapWindow = snap.storedQueries(layer, snapP - w, snapP);
    }
    const got = select(layer, q, N);
    if (want) expect(lists(got), `${state.name} layer ${layer} N ${N}`).toEqual(want);
    if (snapWindow) {
      const pb = Math.min(snapP, s.budget ?? Math.max(1, Math.floor(s.fetchCap * snapP + 1e-9)));
      const obs = new Float32Array(heads * w * snapP);
      const row = new Float32Array(heads * snapP);
      for (let i = 0; i < w; i++) {
        attentionScores(pool, layer, snapWindow.subarray(i * heads * d, (i + 1) * heads * d), heads, row, snapP);
        for (let h = 0; h < heads; h++) obs.set(row.subarray(h * snapP, (h + 1) * snapP), (h * w + i) * snapP);
      }
      const wantKept = lists(snapkv(obs, { heads, kvHeads, N: snapP }, { budget: pb, window: w, kernel: s.poolKernel, pooling: 'max' }));
      expect(lists(snap.keptPrompt(layer)!.kept), `snapkv layer ${layer} P ${snapP}`).toEqual(wantKept);
      counts.compressed++;
    }
    counts.steps++;
    return got;
  };
  if (state instanceof H2oPolicy) {
    const attended = state.attended.bind(state);
    state.attended = (layer, q, N) => {
      const want = st.acc[layer]!.slice();
      const sc = new Float32Array(heads * (N + 1));
      attentionScores(pool, layer, q, heads, sc, N + 1);
      referenceAccumulate(want, sc, heads, kvHeads, C, N + 1, state.selection(layer));
      attended(layer, q, N);
      expect(bits(st.acc[layer]!), `h2o mass layer ${layer} N ${N}`).toEqual(bits(want));
      counts.accumulated++;
    };
  }
  state.observePrompt = (layer, q, p0, T) => {
    // the loop shows every layer's prompt chunk; the dense ones leave the mass alone
    if (state.name !== 'h2o' || layer < state.denseLayers) return observePrompt(layer, q, p0, T);
    const want = st.acc[layer]!.slice();
    const w = heads * d;
    for (let i = 0; i < T; i++) {
      const n = p0 + i + 1;
      const sc = new Float32Array(heads * n);
      attentionScores(pool, layer, q.subarray(i * w, (i + 1) * w), heads, sc, n);
      referenceAccumulate(want, sc, heads, kvHeads, C, n);
    }
    observePrompt(layer, q, p0, T);
    expect(bits(st.acc[layer]!), `h2o prompt mass layer ${layer}`).toEqual(bits(want));
    counts.accumulated++;
  };
  return counts;
}

function argmax(x: Float32Array): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

for (const [name, path] of [
  ['stories260K', STORIES_260K],
  ['kjv-llama-hd64', KJV_HD64],
] as const) {
  describe.skipIf(!haveSharedModel(path))(`native selection in the decode path on ${name}`, () => {
    let model: LoadedModel | undefined;
    afterAll(() => model?.close());

    for (const policy of ['streaming', 'h2o', 'quest', 'snapkv'] as const)
      it(`${policy}: every step of every sparse layer == the references on the same state (fp16 and int8; prompt 301 = not a page multiple)`, async () => {
        model ??= loadGgufModel(path);
        const V = model.hyper.vocabSize;
        let seed = 7;
        const ids = [1];
        while (ids.length < 301) {
          seed = (seed * 1103515245 + 12345) >>> 0;
          ids.push(3 + (seed % (V - 3)));
        }
        for (const kvType of ['fp16', 'int8'] as const) {
          const r = await createModelRunner(model, { policy, kvType, contextLength: 360, prefillChunk: 64, sparse: { fetchCap: 0.2 } });
          try {
            const rows = r.rowPolicy as ComparisonPolicy;
            const counts = verifyAgainstReferences(rows);
            let logits = await r.prefill(ids.slice(0, 200));
            logits = await r.prefill(ids.slice(200)); // a second prefill: snapkv recomputes, h2o accounts both
            for (let i = 0; i < 24; i++) logits = await r.decode(argmax(logits));
            const sparseLayers = model.hyper.layers - rows.settings.denseLayers;
            expect(counts.steps).toBe(24 * sparseLayers);
            if (policy === 'h2o') expect(counts.accumulated).toBeGreaterThanOrEqual(24 * sparseLayers);
            if (policy === 'snapkv') expect(counts.compressed).toBe(sparseLayers);
          } finally {
            await r.dispose();
          }
        }
      });
  });
}
