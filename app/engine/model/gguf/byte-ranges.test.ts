import { describe, expect, it } from 'vitest';
import { joinNearRanges } from './byte-ranges.ts';

describe('joinNearRanges', () => {
  it('sorts, joins ranges whose gap is at most maxGap (and overlapping ones), keeps the rest apart', () => {
    const ranges = [[500, 600], [0, 100], [150, 200], [100, 120], [700, 710], [590, 650]] as const;
    expect(joinNearRanges(ranges, 50)).toEqual([[0, 200], [500, 710]]);
    expect(joinNearRanges(ranges, 49)).toEqual([[0, 200], [500, 650], [700, 710]]);
    expect(joinNearRanges(ranges, 29)).toEqual([[0, 120], [150, 200], [500, 650], [700, 710]]);
    expect(joinNearRanges(ranges, 0)).toEqual([[0, 120], [150, 200], [500, 650], [700, 710]]);
  });

  it('drops empty ranges and keeps a range inside another once', () => {
    expect(joinNearRanges([[10, 10], [5, 50], [20, 30]], 0)).toEqual([[5, 50]]);
    expect(joinNearRanges([], 4096)).toEqual([]);
  });

  it('refuses a negative or NaN gap', () => {
    expect(() => joinNearRanges([[0, 1]], -1)).toThrow(RangeError);
    expect(() => joinNearRanges([[0, 1]], Number.NaN)).toThrow(/maxGap/);
  });
});
