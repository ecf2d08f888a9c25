// InfiniGen natively vs the TypeScript references: the selection rule (random inputs and hand-made
// patterns, GQA 1/2/4) slot for slot against selectInfinigen; partial key rows against
// (K·A)[C] computed here; attention over gathered rows against the scalar reference and, when
// every token is selected, bit for bit against full attention; reuse-cache hit counting.
import { describe, expect, it } from 'vitest';
import { selectInfinigen, type PartialScoreInput } from '../app/engine/kv/select-reference.ts';
import { Gaussian, lists } from '../app/engine/kv/test-helpers.ts';
import { attend, createKvPool, createSpeculator, isNativeAvailable, selectInfinigenNative, type KvPool } from './index.js';

const have = isNativeAvailable();

function randomInput(g: Gaussian, heads: number, kvHeads: number, p: number, slots: number, ties: boolean): PartialScoreInput {
  const qPartial = Float32Array.from(g.fill(heads * p, 2));
  const kPartial = Float32Array.from(g.fill(kvHeads * slots * p), (x) => (ties ? Math.round(2 * x) : x));
  const candidates = Uint8Array.from({ length: slots }, () => (g.next() > -0.8 ? 1 : 0));
  return { heads, kvHeads, p, slots, qPartial, kPartial, candidates, scale: 1 / Math.sqrt(8) };
}

describe.skipIf(!have)('native InfiniGen selection == selectInfinigen', () => {
  it('random inputs, GQA ratios 1/2/4, ties, masks, dense layers, cap 0.2 and 1', () => {
    const g = new Gaussian(11);
    let runs = 0;
    for (const ratio of [1, 2, 4]) {
      for (let t = 0; t < 40; t++) {
        const kvHeads = 1 + (t % 3);
        const x = randomInput(g, kvHeads * ratio, kvHeads, 1 + (t % 6), t % 9 === 0 ? 0 : 1 + Math.floor(Math.abs(g.next()) * 200), t % 2 === 1);
        const knobs = { alpha: 0.5 + (t % 8), cap: t % 4 === 0 ? 1 : 0.2, denseLayers: t % 5 === 0 ? 3 : 2 };
        const layer = t % 6;
        const ref = selectInfinigen(layer, x, knobs);
        const nat = selectInfinigenNative(layer, x, knobs);
        expect(nat.n).toBe(ref.n);
        expect(nat.candidateCount).toBe(ref.candidateCount);
        expect(Array.from(nat.counts)).toEqual(Array.from(ref.counts));
        expect(lists(nat.selected)).toEqual(lists(ref.selected));
        runs++;
      }
    }
    expect(runs).toBe(120);
  });

  it('hand-made pattern: own max per head, GQA max over the group, ties to the lower slot', () => {
    // 4 query heads, 2 KV heads, p 2 (one-hot per head of the group): scores given directly
    const scores = [
      [0, 10, 3, 9, 7.5, 1],
      [8, 0, 0, 2, 4, 7],
      [1, 1, 1, 1, 1, 1],
      [5, 5, 0, 0, 5, 0],
    ];
    const heads = 4, kvHeads = 2, p = 2, slots = 6;
    const qPartial = new Float32Array(heads * p);
    for (let h = 0; h < heads; h++) qPartial[h * p + (h % 2)] = 1;
    const kPartial = new Float32Array(kvHeads * slots * p);
    for (let h = 0; h < heads; h++) for (let j = 0; j < slots; j++) kPartial[(Math.floor(h / 2) * slots + j) * p + (h % 2)] = scores[h]![j]!;
    const x = { heads, kvHeads, p, slots, qPartial, kPartial, candidates: Uint8Array.of(1, 1, 1, 1, 0, 1), scale: 1 };
    const knobs = { alpha: 3, cap: 1, denseLayers: 0 };
    const ref = selectInfinigen(1, x, knobs);
    const nat = selectInfinigenNative(1, x, knobs);
    expect(lists(nat.selected)).toEqual(lists(ref.selected));
    expect(nat.n).toBe(ref.n);
    expect(lists(nat.selected)[1]).toEqual(ref.n === 3 ? [0, 1, 2] : lists(ref.selected)[1]); // flat head: lowest slots win ties
  });
});

/** A pool with partial rows; `tokens` random tokens in every layer. */
function makePool(g: Gaussian, layers: number, kvHeads: number, d: number, p: number, tokens: number, kvType: 'fp16' | 'fp32' = 'fp16'): KvPool {
  const perToken = layers * kvHeads * (2 * d * (kvType === 'fp16' ? 2 : 4) + 4 + 2 * p);
  const pool = createKvPool({ budgetBytes: perToken * (tokens + 16) + layers * kvHeads * d * p * 4 + 4096, layers, kvHeads, headDim: d, kvType, partialDim: p });
  for (let l = 0; l < layers; l++) {
    for (let t = 0; t < tokens; t++) pool.append(l, Float32Array.from(g.fill(kvHeads * d)), Float32Array.from(g.fill(kvHeads * d)), t);
  }
  return pool;
}

describe.skipIf(!have)('partial key rows and the speculator', () => {
  it('partial rows in the pool == fp16((stored K)·A[:, C]) computed in TS (rebuilt and appended)', () => {
    const g = new Gaussian(3);
    const [L, H, d, p] = [2, 2, 16, 5];
    const pool = makePool(g, L, H, d, p, 30);
    const proj = Float32Array.from(g.fill(L * H * d * p, 0.3));
    for (let l = 0; l < L; l++) pool.setPartialProjection(l, proj.subarray(l * H * d * p, (l + 1) * H * d * p));
    for (let t = 0; t < 10; t++) pool.append(1, Float32Array.from(g.fill(H * d)), Float32Array.from(g.fill(H * d)), 30 + t);
    let worst = 0;
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        for (let t = 0; t < pool.length(l); t++) {
          const k = pool.readK(l, h, t);
          const got = pool.readPartialK(l, h, t);
          for (let i = 0; i < p; i++) {
            let acc = 0;
            for (let j = 0; j < d; j++) acc += k[j]! * proj[((l * H + h) * d + j) * p + i]!;
            worst = Math.max(worst, Math.abs(got[i]! - acc) / (1e-3 + Math.abs(acc)));
          }
        }
      }
    }
    expect(worst).toBeLessThan(1e-3); // fp16 rounding of the product
    pool.free();
  });

  for (const ratio of [1, 2, 4]) {
    it(`GQA ${ratio}: all selected == full attention bit for bit; alpha 2/cap 0.2 == scalar reference over the same rows (1e-5 + 1e-4·|ref|)`, () => {
      const g = new Gaussian(20 + ratio);
      const [L, H, d, p] = [3, 2, 32, 9];
      const heads = H * ratio;
      const pool = makePool(g, L, H, d, p, 200);
      pool.setPartialProjection(2, Float32Array.from(g.fill(H * d * p, 0.3)));
      const all = createSpeculator(pool, { heads, alpha: 1e30, cap: 1, denseLayers: 2 });
      const out = new Float32Array(heads * d), full = new Float32Array(heads * d), ref = new Float32Array(heads * d);
      for (let step = 0; step < 3; step++) {
        const q = Float32Array.from(g.fill(heads * d));
        all.begin(2, Float32Array.from(g.fill(heads * d)));
        pool.append(2, Float32Array.from(g.fill(H * d)), Float32Array.from(g.fill(H * d)), 200 + step);
        all.attend(2, q, out);
        attend(pool, 2, q, heads, full);
        expect(Buffer.from(out.buffer).equals(Buffer.from(full.buffer))).toBe(true);
      }
      expect(all.stats(2).n).toBe(202);
      all.free();
      const some = createSpeculator(pool, { heads, alpha: 2, cap: 0.2, denseLayers: 2 });
      for (let step = 0; step < 4; step++) {
        const q = Float32Array.from(g.fill(heads * d));
        some.begin(2, q);
        pool.append(2, Float32Array.from(g.fill(H * d)), Float32Array.from(g.fill(H * d)), 203 + step);
        some.attend(2, q, out);
        some.attendReference(2, q, ref);
        for (let i = 0; i < out.length; i++) expect(Math.abs(out[i]! - ref[i]!)).toBeLessThanOrEqual(1e-5 + 1e-4 * Math.abs(ref[i]!));
        const s = some.stats(2);
        expect(s.n).toBeLessThanOrEqual(Math.floor(0.2 * s.candidates));
        expect(s.hits + s.misses).toBe(H * s.n);
        expect(s.bytes).toBe(s.misses * 2 * d * 2);
        expect(some.selected(2, 0).length).toBe(s.n);
        const r = some.recall(2, q);
        expect(r).toBeGreaterThan(0);
        expect(r).toBeLessThanOrEqual(1 + 1e-9);
      }
      expect(() => some.begin(1, new Float32Array(heads * d))).toThrow(/dense layer/);
      some.free();
      pool.free();
    });
  }

  it('the speculator picks exactly the slots selectInfinigen picks (tile scoring, histogram top-n; GQA 1/2/4; a partial last tile; quantised ties)', () => {
    for (const ratio of [1, 2, 4]) {
      const g = new Gaussian(40 + ratio);
      const [L, H, d, p] = [3, 2, 16, 5];
      const heads = H * ratio;
      for (const [tokens, ties] of [[203, false], [517, true]] as const) {
        const pool = makePool(g, L, H, d, p, tokens);
        // rounded projection + rounded keys give many exactly equal partial scores (ties -> lower slot)
        const proj = Float32Array.from(g.fill(H * d * p, 0.3), (x) => (ties ? Math.round(4 * x) / 4 : x));
        pool.setPartialProjection(2, proj);
        for (const [alpha, cap] of [[2, 0.2], [6, 0.1], [0.5, 1]] as const) {
          const sp = createSpeculator(pool, { heads, alpha, cap, denseLayers: 2 });
          const N = pool.length(2);
          const qSpec = Float32Array.from(g.fill(heads * d), (x) => (ties ? Math.round(2 * x) : x));
          sp.begin(2, qSpec);
          pool.append(2, Float32Array.from(g.fill(H * d)), Float32Array.from(g.fill(H * d)), N);
          sp.attend(2, Float32Array.from(g.fill(heads * d)), new Float32Array(heads * d));
          // q̃ the way the worker computes it: fp32, q̃[i] += x[j]·proj[j, i] in j order
          const qPartial = new Float32Array(heads * p);
          for (let h = 0; h < heads; h++) {
            const kv = Math.floor(h / ratio);
            for (let j = 0; j < d; j++) {
              const x = qSpec[h * d + j]!;
              for (let i = 0; i < p; i++) qPartial[h * p + i] = Math.fround(qPartial[h * p + i]! + Math.fround(x * proj[(kv * d + j) * p + i]!));
            }
          }
          const kPartial = new Float32Array(H * N * p);
          for (let kv = 0; kv < H; kv++) for (let t = 0; t < N; t++) kPartial.set(pool.readPartialK(2, kv, t), (kv * N + t) * p);
          const ref = selectInfinigen(2, { heads, kvHeads: H, p, slots: N, qPartial, kPartial, candidates: new Uint8Array(N).fill(1), scale: 1 / Math.sqrt(d) }, { alpha, cap, denseLayers: 2 });
          expect(sp.stats(2).n).toBe(ref.n);
          for (let kv = 0; kv < H; kv++) expect(Array.from(sp.selected(2, kv))).toEqual(Array.from(ref.selected[kv]!));
          sp.free();
        }
        pool.free();
      }
    }
  });

  it('reuse cache on a hand-made sequence: hits = selected ∩ previously staged (the current token stays staged)', () => {
    const pool = createKvPool({ budgetBytes: 1 << 16, layers: 1, kvHeads: 1, headDim: 4, kvType: 'fp32', partialDim: 4 });
    const eye = new Float32Array(16);
    for (let i = 0; i < 4; i++) eye[i * 4 + i] = 1;
    pool.setPartialProjection(0, eye);
    const put = (x: number, pos: number): number => pool.append(0, Float32Array.of(x, 0, 0, 0), Float32Array.of(1, 2, 3, 4), pos);
    for (let j = 0; j < 20; j++) put(j, j);
    const sp = createSpeculator(pool, { heads: 1, alpha: 100, cap: 0.25, denseLayers: 0, scale: 1 });
    const up = Float32Array.of(1, 0, 0, 0), down = Float32Array.of(-1, 0, 0, 0), out = new Float32Array(4);
    const seen: [number, number, number][] = [];
    for (const [step, q] of [up, up, down].entries()) {
      sp.begin(0, q);
      put(0.5, 20 + step);
      sp.attend(0, up, out);
      const s = sp.stats(0);
      seen.push([s.n, s.hits, s.misses]);
    }
    // step 0: top 5 = 15..19, all misses; step 1: same rows, 5 hits; step 2 (query reversed): {0, 1, 2, 20, 21}, of which
    // only 21 (the current token of step 1) is staged
    expect(seen).toEqual([
      [5, 0, 5],
      [5, 5, 0],
      [5, 1, 4],
    ]);
    expect(Array.from(sp.selected(0, 0))).toEqual([0, 1, 2, 20, 21]);
    sp.free();
    pool.free();
  });
});
