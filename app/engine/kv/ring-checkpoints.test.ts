// The ring rule (ring-checkpoints.ts) on a real native pool: sizes, how many checkpoints, where a
// cut can resume, thinning that keeps them spread, and a restore that gives the rows back.
import { describe, expect, it } from 'vitest';
import { createKvPool, type KvPool } from '../../../native/index.js';
import { RingCheckpoints, ringCheckpointCount, ringKeepRows, ringSlots } from './ring-checkpoints.ts';

const W = 8;
const KVH = 2;
const D = 4;

/** layer 0 global (256 slots), layer 1 a ring of window W with chunk 4 (W − 1 + 8 slots); rows hold their position. */
function pool(): KvPool {
  return createKvPool({ budgetBytes: 1 << 20, layers: 2, kvHeads: KVH, headDim: D, kvType: 'fp32', layerCapacity: [256, ringSlots(W, 4, 256)], ringLayers: [false, true] });
}

function feed(p: KvPool, from: number, to: number): void {
  const k = new Float32Array((to - from) * KVH * D).map((_, i) => from + Math.floor(i / (KVH * D)));
  for (const l of [0, 1]) p.appendBatch(l, k, k, from);
}

describe('ring checkpoints', () => {
  it('sizes: a ring of w − 1 + 2 chunks (at most the context); checkpoints at most a quarter of every row, 8 at most', () => {
    expect(ringSlots(1024, 128, 32768)).toBe(1279);
    expect(ringSlots(1024, 128, 1000)).toBe(1000);
    expect([32768, 16384, 4096, 2048, 131072].map((c) => ringCheckpointCount(c, 1024))).toEqual([8, 4, 1, 0, 8]);
    expect(ringKeepRows(16, 5)).toBe(5);
    expect(ringKeepRows(16, 500)).toBe(15);
  });

  it('resumes where the ring holds the window, else at the newest checkpoint; thinning keeps them spread; a restore gives the rows back', () => {
    const p = pool();
    const rc = new RingCheckpoints(p, [{ layer: 1, window: W }], 256, { every: 16, max: 3 });
    expect(rc.bytes).toBe(3 * p.snapshotLayerBytes(W - 1));
    for (let t = 0; t < 120; t += 4) {
      feed(p, t, t + 4);
      rc.noteEnd(t + 4);
    }
    // taken at 16, 32, …, 112; thinned to three that stay spread over the text, the newest kept
    expect(rc.positions()).toEqual([32, 96, 112]);
    // the ring (15 slots) holds positions 105..119: cuts at 112.. are exact; 100 needs a checkpoint
    expect(rc.covers(113)).toBe(true);
    expect(rc.covers(112)).toBe(true);
    expect(rc.covers(111)).toBe(false);
    expect(rc.resumePoint(111)).toBe(96);
    expect(rc.resumePoint(70)).toBe(32);
    expect(rc.resumePoint(20)).toBe(0);
    // cut at 96: the ring is emptied and gets positions 89..95 back
    const covered = rc.covers(96);
    p.truncate(96);
    rc.cutTo(96, covered);
    expect(rc.positions()).toEqual([32, 96]);
    expect(p.length(1)).toBe(W - 1);
    const slots = Array.from({ length: W - 1 }, (_, r) => (p.ringStart(1) + r) % p.layerCapacityTokens(1));
    expect(slots.map((s) => p.position(1, s))).toEqual([89, 90, 91, 92, 93, 94, 95]);
    expect(slots.map((s) => p.readK(1, 1, s)[0])).toEqual([89, 90, 91, 92, 93, 94, 95]);
    // a cut at a point that is neither covered nor a checkpoint is refused
    expect(() => rc.cutTo(80, false)).toThrow(/no checkpoint at 80/);
    rc.reset();
    expect(rc.positions()).toEqual([]);
    p.free();
  });

  it('no window layers: no buffers, every cut exact', () => {
    const p = pool();
    const rc = new RingCheckpoints(p, [], 256);
    expect(rc.bytes).toBe(0);
    expect(rc.resumePoint(0)).toBe(0);
    p.free();
  });
});
