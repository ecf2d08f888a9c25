import { describe, expect, it } from 'vitest';
import { stepMetrics } from '../../test/fake-api.ts';
import { bucketPositions, compareTokens, CSV_COLUMNS, heatColor, heatColumn, heatPixels, heatRows, layerRows, memoryStack, sparkSegments, toCsv, toJsonl, type Snapshot } from './data.ts';
import { RingBuffer } from './ring.ts';

const snap = (seq: number, fields = {}): Snapshot => ({ seq, requestId: 'gen-1', receivedAt: Date.UTC(2025, 0, 1, 0, 0, seq), metrics: stepMetrics({ step: seq, ...fields }) });

describe('RingBuffer', () => {
  it('keeps the newest items, oldest first', () => {
    const ring = new RingBuffer<number>(3);
    expect(ring.toArray()).toEqual([]);
    [1, 2].forEach((v) => ring.push(v));
    expect(ring.toArray()).toEqual([1, 2]);
    [3, 4, 5].forEach((v) => ring.push(v));
    expect(ring.length).toBe(3);
    expect(ring.toArray()).toEqual([3, 4, 5]);
    expect(ring.toArray(2)).toEqual([4, 5]);
    expect(ring.at(0)).toBe(3);
    expect(ring.at(-1)).toBe(5);
    expect(ring.at(3)).toBeUndefined();
    ring.clear();
    expect(ring.toArray()).toEqual([]);
    ring.push(9);
    expect(ring.toArray()).toEqual([9]);
  });

  it('holds at most its capacity over many pushes', () => {
    const ring = new RingBuffer<number>(600);
    for (let i = 0; i < 2000; i++) ring.push(i);
    const all = ring.toArray();
    expect(all).toHaveLength(600);
    expect(all[0]).toBe(1400);
    expect(all.at(-1)).toBe(1999);
    expect(() => new RingBuffer(0)).toThrow(RangeError);
  });
});

describe('heatmap data', () => {
  it('caps rows at 512 whatever the context', () => {
    expect(heatRows(50_000)).toBe(512);
    expect(heatRows(100)).toBe(100);
    expect(heatRows(0)).toBe(1);
  });

  it('buckets positions into the share of each bucket that was selected', () => {
    // 8 positions in 4 buckets of 2: {0,1} {2,3} {4,5} {6,7}
    expect([...bucketPositions([0, 1, 2, 7, 99, -1], 8, 4)]).toEqual([1, 0.5, 0, 0.5]);
    // 10 positions in 4 buckets: sizes 3,2,3,2 ([0,2] [3,4] [5,7] [8,9])
    const b = bucketPositions([0, 3, 4, 5, 9], 10, 4);
    expect([...b].map((v) => Math.round(v * 1000) / 1000)).toEqual([0.333, 1, 0.333, 0.5]);
  });

  it('buckets a 50k-token context into 512 rows quickly', () => {
    const positions = Array.from({ length: 5000 }, (_, i) => i * 10);
    const started = performance.now();
    const column = bucketPositions(positions, 50_000, 512);
    expect(performance.now() - started).toBeLessThan(50);
    expect(column).toHaveLength(512);
    expect(Math.max(...column)).toBeLessThanOrEqual(1);
    expect(column[0]).toBeCloseTo(0.1, 1);
  });

  it('draws one row per layer, or one layer`s positions, or its ratio when positions are absent', () => {
    const m = stepMetrics({ contextTokens: 50, contextLength: 100 }, [{ selected: 10, candidates: 40 }, { selected: 30, candidates: 30, positions: [0, 1, 50] }]);
    expect([...heatColumn(m, { kind: 'layers', layers: 2 })]).toEqual([0.25, 1]);
    const positions = heatColumn(m, { kind: 'positions', layer: 1, contextLength: 100 });
    expect(positions).toHaveLength(100);
    expect([positions[0], positions[1], positions[2], positions[50]]).toEqual([1, 1, 0, 1]);
    const ratio = heatColumn(m, { kind: 'positions', layer: 0, contextLength: 100 });
    expect(ratio[0]).toBe(0.25);
    expect(ratio[49]).toBe(0.25);
    expect(ratio[50]).toBe(0); // beyond the tokens in the cache
  });

  it('turns columns into RGBA pixels, newest on the right', () => {
    const pixels = heatPixels([new Float32Array([1, 0])], 3, 2);
    expect(pixels).toHaveLength(3 * 2 * 4);
    const at = (x: number, y: number) => [...pixels.slice((y * 3 + x) * 4, (y * 3 + x) * 4 + 4)];
    expect(at(2, 0)).toEqual([...heatColor(1), 255]);
    expect(at(2, 1)).toEqual([...heatColor(0), 255]);
    expect(at(0, 0)).toEqual([...heatColor(0), 255]);
    expect(heatColor(Number.NaN)).toEqual(heatColor(0));
  });
});

describe('sparklines, memory, layers', () => {
  it('scales values into the box and breaks the line at nulls', () => {
    expect(sparkSegments([0, 5, 10], 100, 10)).toEqual(['0,10 50,5 100,0']);
    expect(sparkSegments([0.5, null, 1, 1], 30, 10, 1)).toEqual(['0,5', '20,0 30,0']);
    expect(sparkSegments([], 100, 10)).toEqual([]);
  });

  it('stacks weights, KV, staged, partial keys and the rest of RSS (never below 0)', () => {
    const m = stepMetrics().memory;
    const { segments, total } = memoryStack(m);
    expect(segments.map((s) => [s.key, s.bytes])).toEqual([['weights', 1000], ['kv', 600], ['staged', 50], ['partial', 100], ['other', 250]]);
    expect(total).toBe(2000);
    expect(memoryStack({ ...m, rssBytes: 10 }).segments.at(-1)?.bytes).toBe(0);
  });

  it('a hybrid model: the linear layers\' recurrent state and its checkpoints as their own parts, out of "other"', () => {
    const m = { ...stepMetrics().memory, recurrent: { stateBytes: 120, checkpointBytes: 80 } };
    const { segments, total } = memoryStack(m);
    expect(segments.map((s) => [s.key, s.bytes])).toEqual([['weights', 1000], ['kv', 600], ['state', 120], ['state-checkpoints', 80], ['staged', 50], ['partial', 100], ['other', 50]]);
    expect(total).toBe(2000);
  });

  it('derives per-layer fetch and hit rates', () => {
    const rows = layerRows(stepMetrics({}, [{ selected: 5, candidates: 20, reuseHits: 3, reuseMisses: 1 }, { candidates: 0, reuseHits: 0, reuseMisses: 0, recall: null }]));
    expect(rows[0]).toMatchObject({ layer: 0, fetchRatio: 0.25, hitRate: 0.75 });
    expect(rows[1]).toMatchObject({ layer: 1, fetchRatio: 0, hitRate: null, recall: null });
  });
});

describe('export', () => {
  it('CSV: a header and one row per snapshot', () => {
    const csv = toCsv([snap(1), snap(2, { policy: 'in"fini,gen', recall: null })]);
    const lines = csv.trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[0]).toBe(CSV_COLUMNS.join(','));
    expect(lines[1]?.startsWith('2025-01-01T00:00:01.000Z,gen-1,1,100,2048,infinigen,20,0.25,4096,0.5,0.9,0,')).toBe(true);
    expect(lines[1]?.endsWith(',2')).toBe(true); // two layers
    expect(lines[2]).toContain('"in""fini,gen"');
    expect(lines[2]).toContain(',0.5,,0,'); // null recall is an empty field
    expect(toCsv([]).trimEnd()).toBe(CSV_COLUMNS.join(','));
  });

  it('CSV: a policy that looks like a formula is defused', () => {
    expect(toCsv([snap(1, { policy: '=HYPERLINK("x")' })])).toContain(`"'=HYPERLINK(""x"")"`);
  });

  it('JSON lines: one parseable object per snapshot with the layers', () => {
    const lines = toJsonl([snap(1), snap(2)]).trimEnd().split('\n');
    expect(lines).toHaveLength(2);
    const first = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(first).toMatchObject({ requestId: 'gen-1', step: 1, policy: 'infinigen', receivedAt: '2025-01-01T00:00:01.000Z' });
    expect((first.layers as unknown[]).length).toBe(2);
    expect(toJsonl([])).toBe('');
  });
});

describe('compareTokens', () => {
  it('identical streams agree fully and never diverge', () => {
    expect(compareTokens([1, 2, 3], [1, 2, 3])).toEqual({ agreement: 1, matching: 3, lengthA: 3, lengthB: 3, firstDivergence: null });
    expect(compareTokens([], [])).toMatchObject({ agreement: 1, firstDivergence: null });
  });

  it('counts matching positions and finds the first divergence', () => {
    expect(compareTokens([1, 2, 3, 4], [1, 2, 9, 4])).toEqual({ agreement: 0.75, matching: 3, lengthA: 4, lengthB: 4, firstDivergence: 2 });
    expect(compareTokens([5, 2], [1, 2])).toMatchObject({ agreement: 0.5, firstDivergence: 0 });
  });

  it('a shorter stream diverges where it ends', () => {
    expect(compareTokens([1, 2], [1, 2, 3, 4])).toEqual({ agreement: 0.5, matching: 2, lengthA: 2, lengthB: 4, firstDivergence: 2 });
  });
});
