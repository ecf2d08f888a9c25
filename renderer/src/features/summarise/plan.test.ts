import { describe, expect, it } from 'vitest';
import { documentBudget, groupToFit, joinIds, planSummary, splitEven, truncateMiddle } from './plan.ts';

const range = (length: number, from = 0): number[] => Array.from({ length }, (_, i) => from + i);

describe('documentBudget', () => {
  it('leaves room for the instruction and the summary', () => {
    expect(documentBudget({ contextLength: 100, overheadTokens: 12, maxSummaryTokens: 30 })).toBe(58);
    expect(documentBudget({ contextLength: 40, overheadTokens: 12, maxSummaryTokens: 30 })).toBe(-2);
  });
});

describe('splitEven', () => {
  it('makes the fewest parts, as even as possible, in order', () => {
    expect(splitEven(range(10), 4)).toEqual([
      [0, 1, 2, 3],
      [4, 5, 6],
      [7, 8, 9],
    ]);
    expect(splitEven(range(8), 4)).toEqual([
      [0, 1, 2, 3],
      [4, 5, 6, 7],
    ]);
    expect(splitEven(range(9), 3)).toEqual([
      [0, 1, 2],
      [3, 4, 5],
      [6, 7, 8],
    ]);
    expect(splitEven([7, 8, 9], 5)).toEqual([[7, 8, 9]]);
    expect(splitEven([], 5)).toEqual([]);
  });

  it('never exceeds the budget and loses no token', () => {
    for (const length of [1, 5, 17, 100, 1001]) {
      for (const budget of [1, 2, 3, 7, 64]) {
        const parts = splitEven(range(length), budget);
        expect(parts.flat()).toEqual(range(length));
        expect(Math.max(...parts.map((p) => p.length))).toBeLessThanOrEqual(budget);
        expect(parts.length).toBe(Math.ceil(length / budget));
      }
    }
  });

  it('refuses a budget of zero', () => {
    expect(() => splitEven([1], 0)).toThrow(RangeError);
  });
});

describe('truncateMiddle', () => {
  it('keeps the head and the tail and counts what it dropped', () => {
    expect(truncateMiddle(range(10), 5)).toEqual({ kind: 'truncate', head: [0, 1, 2], tail: [8, 9], dropped: 5 });
    expect(truncateMiddle(range(10), 4)).toEqual({ kind: 'truncate', head: [0, 1], tail: [8, 9], dropped: 6 });
    expect(truncateMiddle(range(10), 1)).toEqual({ kind: 'truncate', head: [0], tail: [], dropped: 9 });
  });
});

describe('planSummary', () => {
  const doc = range(20, 100);

  it('sends a document that fits as it is, whatever the policy', () => {
    for (const policy of ['stop', 'truncate-middle', 'split'] as const) expect(planSummary(doc, 20, policy)).toEqual({ kind: 'fits', ids: doc });
  });

  it('stop: refuses an overflow with the numbers in the message', () => {
    const plan = planSummary(doc, 8, 'stop');
    expect(plan.kind).toBe('refuse');
    if (plan.kind !== 'refuse') return;
    expect(plan.message).toContain('20 tokens');
    expect(plan.message).toContain('only 8 fit');
  });

  it('truncate-middle: the marker comes out of the budget', () => {
    expect(planSummary(doc, 8, 'truncate-middle', { markerTokens: 2 })).toEqual({ kind: 'truncate', head: [100, 101, 102], tail: [117, 118, 119], dropped: 14 });
  });

  it('split: parts that fit, in order', () => {
    expect(planSummary(doc, 8, 'split', { maxSummaryTokens: 4 })).toEqual({
      kind: 'split',
      parts: [range(7, 100), range(7, 107), range(6, 114)],
    });
  });

  it('split: refuses when two summaries would not fit in one prompt', () => {
    expect(planSummary(doc, 8, 'split', { maxSummaryTokens: 5 }).kind).toBe('refuse');
  });

  it('refuses when nothing fits beside the instruction and the summary', () => {
    const plan = planSummary(doc, 0, 'split');
    expect(plan.kind).toBe('refuse');
  });
});

describe('groupToFit and joinIds', () => {
  it('groups consecutive summaries so each group fits with its separators', () => {
    expect(groupToFit([3, 3, 3, 3], 7, 1)).toEqual([[0, 1], [2, 3]]);
    expect(groupToFit([3, 3, 3, 3], 11, 1)).toEqual([[0, 1, 2], [3]]);
    expect(groupToFit([9, 2], 5, 0)).toEqual([[0], [1]]);
    expect(groupToFit([], 5)).toEqual([]);
  });

  it('joins runs with the separator between them only', () => {
    expect(joinIds([[1, 2], [3], [4]], [0])).toEqual([1, 2, 0, 3, 0, 4]);
    expect(joinIds([], [0])).toEqual([]);
  });
});
