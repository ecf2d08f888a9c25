import { describe, expect, it } from 'vitest';
import type { LonghandError } from '../../common/errors.ts';
import { partialScores, selectInfinigen, type InfinigenKnobs, type PartialScoreInput } from './select-reference.ts';
import { Gaussian, lists } from './test-helpers.ts';
import { topIndices } from './topk.ts';

/**
 * An input whose partial scores are exactly `scores` [heads][slots]: p = group size, q̃_h is the
 * one-hot e_{h mod group}, and k̃_{g,j}[i] is the score of query head g·group + i at slot j.
 */
function fromScores(scores: number[][], kvHeads: number, candidates?: number[]): PartialScoreInput {
  const heads = scores.length;
  const slots = scores[0]!.length;
  const group = heads / kvHeads;
  const p = group;
  const qPartial = new Float32Array(heads * p);
  for (let h = 0; h < heads; h++) qPartial[h * p + (h % group)] = 1;
  const kPartial = new Float32Array(kvHeads * slots * p);
  for (let h = 0; h < heads; h++) {
    const g = Math.floor(h / group);
    for (let j = 0; j < slots; j++) kPartial[(g * slots + j) * p + (h % group)] = scores[h]![j]!;
  }
  const mask = Uint8Array.from(candidates ?? new Array<number>(slots).fill(1));
  return { heads, kvHeads, p, slots, qPartial, kPartial, candidates: mask, scale: 1 };
}

const knobs = (alpha: number, cap = 1, denseLayers = 0): InfinigenKnobs => ({ alpha, cap, denseLayers });

describe('selectInfinigen (MHA)', () => {
  const scores = [
    [0, 10, 3, 9, 7.5, 1], // head 0: max 10; > 7 → slots 1, 3, 4 (c = 3)
    [8, 0, 0, 2, 4, 7], // head 1: max 8; > 5 → slots 0, 5 (c = 2)
  ];

  it('counts per head against its own max, n = ⌊mean c⌋, each head its own top-n', () => {
    const r = selectInfinigen(5, fromScores(scores, 2), knobs(3));
    expect(Array.from(r.counts)).toEqual([3, 2]);
    expect(r.n).toBe(2); // ⌊2.5⌋
    expect(r.candidateCount).toBe(6);
    expect(lists(r.selected)).toEqual([
      [1, 3],
      [0, 5],
    ]);
  });

  it('the scores are q̃·k̃ times scale', () => {
    const x = fromScores(scores, 2);
    expect(Array.from(partialScores({ ...x, scale: 0.5 }).subarray(0, 6))).toEqual(scores[0]!.map((v) => v / 2));
  });

  it('α large → every candidate, up to the cap; cap binds at ⌊cap·N⌋', () => {
    expect(lists(selectInfinigen(5, fromScores(scores, 2), knobs(1e9)).selected)).toEqual([
      [0, 1, 2, 3, 4, 5],
      [0, 1, 2, 3, 4, 5],
    ]);
    const capped = selectInfinigen(5, fromScores(scores, 2), knobs(1e9, 0.5));
    expect(capped.n).toBe(3);
    expect(lists(capped.selected)).toEqual([
      [1, 3, 4],
      [0, 4, 5],
    ]);
    // cap below one token still selects one
    expect(selectInfinigen(5, fromScores(scores, 2), knobs(1e9, 0.1)).n).toBe(1);
    // cap binding with the α count in between: α = 3 gives 2.5 → 2, cap 0.34·6 = 2.04 → 2, cap 0.3 → 1
    expect(selectInfinigen(5, fromScores(scores, 2), knobs(3, 0.3)).n).toBe(1);
  });

  it('α tiny → only the maximum', () => {
    const r = selectInfinigen(5, fromScores(scores, 2), knobs(1e-9));
    expect(Array.from(r.counts)).toEqual([1, 1]);
    expect(lists(r.selected)).toEqual([[1], [0]]);
  });

  it('ties: the lower slot wins', () => {
    const tied = [[5, 1, 5, 5, 0]];
    expect(lists(selectInfinigen(5, fromScores(tied, 1), knobs(0.5)).selected)).toEqual([[0, 2, 3]]);
    expect(lists(selectInfinigen(5, fromScores(tied, 1), knobs(0.5, 0.4)).selected)).toEqual([[0, 2]]);
    expect(lists(selectInfinigen(5, fromScores([[1, 1, 1, 1]], 1), knobs(1e-9)).selected)).toEqual([[0, 1, 2, 3]]); // c counts all ties
    expect(lists(selectInfinigen(5, fromScores([[1, 1, 1, 1]], 1), knobs(1e-9, 0.5)).selected)).toEqual([[0, 1]]);
  });

  it('evicted slots are never candidates: not selected, not in N, not in the max or the counts', () => {
    // slot 1 (head 0's max) is evicted: head 0's max becomes 9
    const r = selectInfinigen(5, fromScores(scores, 2, [1, 0, 1, 1, 1, 1]), knobs(3));
    expect(r.candidateCount).toBe(5);
    expect(Array.from(r.counts)).toEqual([2, 2]); // head 0: 9, 7.5 (> 6); head 1: 8, 7
    expect(lists(r.selected)).toEqual([
      [3, 4],
      [0, 5],
    ]);
    const all = selectInfinigen(5, fromScores(scores, 2, [1, 0, 1, 1, 1, 1]), knobs(1e9));
    for (const s of all.selected) expect(Array.from(s)).not.toContain(1);
    expect(all.n).toBe(5);
  });

  it('dense layers (below denseLayers) select every candidate', () => {
    const x = fromScores(scores, 2, [1, 1, 0, 1, 1, 1]);
    for (const layer of [0, 1]) {
      const r = selectInfinigen(layer, x, knobs(1e-9, 0.1, 2));
      expect(r.n).toBe(5);
      expect(lists(r.selected)).toEqual([
        [0, 1, 3, 4, 5],
        [0, 1, 3, 4, 5],
      ]);
    }
    expect(selectInfinigen(2, x, knobs(1e-9, 0.1, 2)).n).toBe(1);
  });

  it('an empty pool selects nothing', () => {
    const r = selectInfinigen(5, fromScores([[1, 2]], 1, [0, 0]), knobs(5));
    expect(r.n).toBe(0);
    expect(lists(r.selected)).toEqual([[]]);
  });
});

describe('selectInfinigen (GQA: per query head, combined per KV head)', () => {
  // 4 query heads, 2 KV heads. Group 0 = heads 0, 1; group 1 = heads 2, 3.
  const scores = [
    [10, 9, 0, 0, 0, 0], // h0: big logits, max 10 at slot 0
    [0, 0, 0, 2, 1.5, 0], // h1: small logits, max 2 at slot 3
    [0, 0, 6, 0, 0, 5.5], // h2: max 6 at slot 2
    [0, 0, 0, 0, 0, 0.1], // h3: max 0.1 at slot 5 (flat otherwise)
  ];

  it('combines max over the group of (s − own max): each head keeps its own top token', () => {
    const r = selectInfinigen(5, fromScores(scores, 2), knobs(1.2));
    // c: h0 {0, 1} = 2; h1 {3, 4} = 2; h2 {2, 5} = 2; h3 every slot (> −1.1) = 6 → mean 3 → n = 3
    expect(Array.from(r.counts)).toEqual([2, 2, 2, 6]);
    expect(r.n).toBe(3);
    // group 0 combined: slot0 0, slot1 −1, slot3 0, slot4 −0.5 → {0, 3, 4}
    // group 1 combined: slot 2 → 0 (h2), slot 5 → 0 (h3), every other slot −0.1 (h3 is flat) → lowest: slot 0
    expect(lists(r.selected)).toEqual([
      [0, 3, 4],
      [0, 2, 5],
    ]);
  });

  it('differs from raw-score max (the head with big logits would decide) and from head 0 max for all', () => {
    // raw max over the group would pick group 0: slots 0 (10), 1 (9), 3 (2) — head 1's second token lost
    const raw = new Float64Array(6);
    for (let j = 0; j < 6; j++) raw[j] = Math.max(scores[0]![j]!, scores[1]![j]!);
    expect(Array.from(topIndices(raw, 3))).toEqual([0, 1, 3]);
    // head 0's max (10) for head 1 too would give head 1 no token above 10 − α at all
    expect(scores[1]!.filter((s) => s > 10 - 1.2).length).toBe(0);
    const r = selectInfinigen(5, fromScores(scores, 2), knobs(1.2));
    expect(Array.from(r.selected[0]!)).not.toEqual([0, 1, 3]);
  });

  it('KV heads select differently; n is the same for all', () => {
    const r = selectInfinigen(5, fromScores(scores, 2), knobs(1e-9));
    expect(r.n).toBe(1);
    // group 0: slot 0 (h0) and slot 3 (h1) tie at 0 → lower slot; group 1: slots 2 (h2) and 5 (h3) → 2
    expect(lists(r.selected)).toEqual([[0], [2]]);
  });
});

describe('selectInfinigen properties on random inputs', () => {
  it('n entries per KV head, candidates only, ascending, and nothing unselected outranks a selected slot', () => {
    const g = new Gaussian(9);
    for (let trial = 0; trial < 30; trial++) {
      const kvHeads = [1, 2, 4][trial % 3]!;
      const heads = kvHeads * [1, 2, 4][(trial >> 1) % 3]!;
      const slots = 5 + (trial * 7) % 60;
      const p = 4;
      const mask = Uint8Array.from({ length: slots }, () => (g.next() > -1 ? 1 : 0));
      const x: PartialScoreInput = {
        heads, kvHeads, p, slots, candidates: mask, scale: 0.5,
        qPartial: Float32Array.from(g.fill(heads * p, 2)),
        kPartial: Float32Array.from(g.fill(kvHeads * slots * p, 2)),
      };
      const r = selectInfinigen(3, x, knobs(2, 0.5));
      const s = partialScores(x);
      const group = heads / kvHeads;
      r.selected.forEach((sel, kv) => {
        expect(sel.length).toBe(Math.min(r.n, r.candidateCount));
        for (let i = 1; i < sel.length; i++) expect(sel[i]!).toBeGreaterThan(sel[i - 1]!);
        const comb = (j: number): number => {
          let m = -Infinity;
          for (let h = kv * group; h < (kv + 1) * group; h++) {
            let mh = -Infinity;
            for (let t = 0; t < slots; t++) mh = Math.max(mh, s[h * slots + t]!);
            m = Math.max(m, s[h * slots + j]! - mh);
          }
          return m;
        };
        const worst = Math.min(...Array.from(sel, comb));
        for (const j of sel) expect(mask[j]).toBe(1);
        for (let j = 0; j < slots; j++) if (mask[j] && !sel.includes(j)) expect(comb(j)).toBeLessThanOrEqual(worst);
      });
    }
  });
});

describe('selectInfinigen arguments', () => {
  it('rejects bad knobs and shapes with BAD_ARGUMENT', () => {
    const x = fromScores([[1, 2, 3]], 1);
    const code = (f: () => unknown): string => {
      try {
        f();
        return 'none';
      } catch (e) {
        return (e as LonghandError).code;
      }
    };
    expect(code(() => selectInfinigen(3, x, knobs(0)))).toBe('BAD_ARGUMENT');
    expect(code(() => selectInfinigen(3, x, knobs(1, 0)))).toBe('BAD_ARGUMENT');
    expect(code(() => selectInfinigen(3, x, knobs(1, 1.5)))).toBe('BAD_ARGUMENT');
    expect(code(() => selectInfinigen(3, { ...x, candidates: new Uint8Array(2) }, knobs(1)))).toBe('BAD_ARGUMENT');
    expect(code(() => selectInfinigen(3, { ...x, heads: 3 }, knobs(1)))).toBe('BAD_ARGUMENT');
    expect(code(() => selectInfinigen(3, { ...x, kPartial: Float32Array.of(1, NaN, 3) }, knobs(1)))).toBe('BAD_ARGUMENT');
    // a NaN in an evicted slot is never read
    expect(code(() => selectInfinigen(3, { ...x, kPartial: Float32Array.of(1, NaN, 3), candidates: Uint8Array.of(1, 0, 1) }, knobs(1)))).toBe('none');
  });
});
