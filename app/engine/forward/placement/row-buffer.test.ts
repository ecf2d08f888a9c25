// The offload path's row buffer against a plain model of it, and its attention against the native
// kernel over the same rows.
//   - 1,000 decode steps on an evicting pool (capacity 96, sinks 4, recent 16): every step appends one
//     token (from step ~96 on into the victim's slot) and attends random per-KV-head lists, sometimes
//     every slot; hits and misses equal the plain model's (a Set per KV head: what the previous step
//     attended, minus slots the pool wrote since), every attended buffer row holds exactly the pool's
//     row, the bytes uploaded are misses · 2 · headDim · element bytes. fp32 and fp16 pools, GQA
//     shapes, a buffer that starts at 8 rows per head and grows.
//   - attention of the onnxruntime graph over the buffer == attendSlots (native, in place) over the
//     same slot lists within 2e-6, for GQA 1/2/4 and list lengths 1, 17, 300, with the buffer updated
//     from the host (rowUpdate host) or by the ScatterND graph (rowUpdate graph).
import { describe, expect, it } from 'vitest';
import { attend, attendSlots, createKvPool, type KvPool, type KvType } from '../../../../native/index.js';
import { toFloat16Array } from '../../onnx/float16.ts';
import { OffloadAttention } from './offload-attention.ts';
import { RowBuffer } from './row-buffer.ts';
import { Rng } from '../../generate/rng.ts';

/** uniform on [0, 1), the project's seeded generator */
function rng(seed: number): () => number {
  const g = new Rng(seed);
  return () => g.nextFloat();
}

/** The rule of row-buffer.ts, plainly: after a step a head holds what it attended; a write forgets the slot. */
class PlainRowBuffer {
  private held: Set<number>[];
  constructor(kvHeads: number) {
    this.held = Array.from({ length: kvHeads }, () => new Set<number>());
  }
  written(slot: number): void {
    for (const h of this.held) h.delete(slot);
  }
  step(lists: number[][]): { hits: number; misses: number } {
    let hits = 0;
    let misses = 0;
    lists.forEach((list, g) => {
      for (const s of list) {
        if (this.held[g]!.has(s)) hits++;
        else misses++;
      }
      this.held[g] = new Set(list);
    });
    return { hits, misses };
  }
}

/** n distinct slots of 0..len−1, ascending. */
function pick(r: () => number, len: number, n: number): number[] {
  const chosen = new Set<number>();
  while (chosen.size < n) chosen.add(Math.floor(r() * len));
  return [...chosen].sort((a, b) => a - b);
}

function randomRow(r: () => number, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => (r() - 0.5) * 4);
}

function expectRowsMatch(pool: KvPool, buffer: RowBuffer, layer: number, lists: number[][], idx: Int32Array, n: number): void {
  const d = pool.headDim;
  const { kData, vData } = buffer.bound(layer);
  for (let g = 0; g < pool.kvHeads; g++) {
    for (let i = 0; i < n; i++) {
      const row = idx[g * n + i]!;
      expect(row).toBeGreaterThanOrEqual(g * buffer.rowsPerHead(layer)); // inside head g's block
      expect(row).toBeLessThan((g + 1) * buffer.rowsPerHead(layer));
      const slot = lists[g]![i]!;
      const k = pool.readK(layer, g, slot);
      const v = pool.readV(layer, g, slot);
      const want = pool.kvType === 'fp16' ? [toFloat16Array(k), toFloat16Array(v)] : [k, v];
      expect(Array.from(kData.subarray(row * d, (row + 1) * d))).toEqual(Array.from(want[0]!));
      expect(Array.from(vData.subarray(row * d, (row + 1) * d))).toEqual(Array.from(want[1]!));
    }
  }
}

describe('RowBuffer == its plain model over 1,000 steps with eviction', () => {
  for (const [kvType, kvHeads] of [
    ['fp32', 2],
    ['fp16', 4],
    ['fp32', 1],
  ] as [KvType, number][]) {
    it(`${kvType}, ${kvHeads} KV head(s)`, () => {
      const d = 8;
      const layers = 2;
      const probe = createKvPool({ budgetBytes: 1 << 20, layers, kvHeads, headDim: d, kvType, eviction: { sinks: 4, recent: 16, ageEvery: 32 } });
      const perToken = probe.bytesPerToken;
      probe.free();
      const pool = createKvPool({ budgetBytes: 96 * perToken + 4096, layers, kvHeads, headDim: d, kvType, eviction: { sinks: 4, recent: 16, ageEvery: 32 } });
      const cap = pool.capacityTokens;
      expect(cap).toBeGreaterThan(80);
      expect(cap).toBeLessThan(140);
      const buffer = new RowBuffer(pool, [8, cap]);
      const plain = [new PlainRowBuffer(kvHeads), new PlainRowBuffer(kvHeads)];
      const r = rng(kvHeads * 7 + (kvType === 'fp16' ? 1 : 0));
      const elem = kvType === 'fp16' ? 2 : 4;
      let totals = { hits: 0, misses: 0, fulls: 0 };
      for (let t = 0; t < 1000; t++) {
        for (let l = 0; l < layers; l++) {
          const slot = pool.appendBatch(l, randomRow(r, kvHeads * d), randomRow(r, kvHeads * d), t);
          buffer.invalidate(l, slot, 1);
          plain[l]!.written(slot);
          const len = pool.length(l);
          const full = r() < 0.1;
          const n = full ? len : 1 + Math.floor(r() * Math.min(len, 40));
          const lists = full ? Array.from({ length: kvHeads }, () => [...Array(len).keys()]) : Array.from({ length: kvHeads }, () => pick(r, len, n));
          const plan = full ? buffer.step(l, n) : buffer.step(l, n, lists.map((x) => Int32Array.from(x)));
          const want = plain[l]!.step(lists);
          expect({ step: t, layer: l, hits: plan.hits, misses: plan.misses }).toEqual({ step: t, layer: l, ...want });
          expect(plan.uploadBytes).toBe(plan.misses * 2 * d * elem);
          if (t % 50 === 0 || t > 990) expectRowsMatch(pool, buffer, l, lists, plan.idx, n);
          totals = { hits: totals.hits + plan.hits, misses: totals.misses + plan.misses, fulls: totals.fulls + (full ? 1 : 0) };
        }
      }
      // the run exercised what it claims: evictions, hits, misses, full steps, growth of layer 0's buffer
      expect(pool.evictions(0)).toBeGreaterThan(800);
      expect(totals.hits).toBeGreaterThan(1000);
      expect(totals.misses).toBeGreaterThan(1000);
      expect(totals.fulls).toBeGreaterThan(100);
      expect(buffer.rowsPerHead(0)).toBeGreaterThan(8);
      // clear() forgets everything: the next step misses every row
      buffer.clear();
      expect(buffer.step(1, 5, Array.from({ length: kvHeads }, () => Int32Array.of(0, 1, 2, 3, 4))).misses).toBe(5 * kvHeads);
      pool.free();
    });
  }
});

describe('offload attention (onnxruntime graph over the row buffer) == attendSlots over the same rows', () => {
  for (const [heads, kvHeads] of [
    [4, 4],
    [4, 2],
    [8, 2],
  ] as const) {
    for (const [kvType, rowUpdate] of [
      ['fp32', 'host'],
      ['fp16', 'host'],
      ['fp16', 'graph'],
    ] as const) {
      it(`${heads} heads / ${kvHeads} KV heads, ${kvType}, rowUpdate ${rowUpdate}`, async () => {
        const d = 16;
        const pool = createKvPool({ budgetBytes: 1 << 22, layers: 1, kvHeads, headDim: d, kvType });
        const r = rng(heads * 31 + kvHeads);
        for (let t = 0; t < 400; t++) pool.append(0, randomRow(r, kvHeads * d), randomRow(r, kvHeads * d), t);
        const off = await OffloadAttention.create(pool, { heads, threads: 1, initialRowsPerHead: [4], rowUpdate });
        try {
          for (const n of [1, 17, 300, 17]) {
            const selected = Array.from({ length: kvHeads }, () => Int32Array.from(pick(r, 399, n - 1)));
            const q = randomRow(r, heads * d);
            const got = new Float32Array(heads * d);
            await off.attendSelected(0, selected, 399, q, got);
            const slots = new Int32Array(kvHeads * n);
            const offsets = new Int32Array(kvHeads + 1);
            selected.forEach((s, g) => {
              slots.set(s, g * n);
              slots[g * n + n - 1] = 399;
              offsets[g + 1] = (g + 1) * n;
            });
            const want = new Float32Array(heads * d);
            attendSlots(pool, 0, q, heads, slots, offsets, want);
            let worst = 0;
            for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
            expect(worst).toBeLessThan(2e-6);
          }
          const step = off.endStep(399);
          expect(step.layers.map((l) => l.rows)).toEqual([1, 17, 300, 17]);
          expect(step.crossedBytes).toBe(off.boundBytesTotal);
          expect(off.runs).toBe(4);
          // every slot: a fresh buffer takes the rows in order, so the prefix variant runs (8 bytes of n, no idx) == attend()
          const all = await OffloadAttention.create(pool, { heads, threads: 1, rowUpdate });
          try {
            const q = randomRow(r, heads * d);
            const got = new Float32Array(heads * d);
            const want = new Float32Array(heads * d);
            for (let round = 0; round < 2; round++) {
              await all.attendAll(0, q, got);
              expect(all.lastLayer()!.hostTensorBytes).toBe(8 + (rowUpdate === 'graph' && round === 0 ? 8 * 400 * kvHeads : 0));
              expect(all.lastLayer()!.misses).toBe(round === 0 ? 400 * kvHeads : 0);
              attend(pool, 0, q, heads, want);
              let worst = 0;
              for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
              expect(worst).toBeLessThan(2e-6);
            }
          } finally {
            await all.dispose();
          }
        } finally {
          await off.dispose();
          pool.free();
        }
      });
    }
  }
});

describe('offload attention over lists of different lengths per KV head (Quest pages, H2O live counts)', () => {
  for (const rowUpdate of ['host', 'graph'] as const) {
    it(`== attendSlots over the same ragged lists; padding counts neither as a hit nor as a miss (rowUpdate ${rowUpdate})`, async () => {
      const [heads, kvHeads, d] = [8, 4, 16];
      const pool = createKvPool({ budgetBytes: 1 << 22, layers: 1, kvHeads, headDim: d, kvType: 'fp16' });
      const r = rng(77);
      for (let t = 0; t < 300; t++) pool.append(0, randomRow(r, kvHeads * d), randomRow(r, kvHeads * d), t);
      const off = await OffloadAttention.create(pool, { heads, threads: 1, initialRowsPerHead: [8], rowUpdate });
      try {
        for (const sizes of [[40, 3, 17, 0], [40, 40, 40, 40], [5, 60, 1, 33]]) {
          const selected = sizes.map((n) => Int32Array.from(pick(r, 299, n)));
          const q = randomRow(r, heads * d);
          const got = new Float32Array(heads * d);
          await off.attendSelected(0, selected, 299, q, got);
          const offsets = new Int32Array(kvHeads + 1);
          sizes.forEach((n, g) => (offsets[g + 1] = offsets[g]! + n + 1));
          const slots = new Int32Array(offsets[kvHeads]!);
          selected.forEach((list, g) => {
            slots.set(list, offsets[g]!);
            slots[offsets[g + 1]! - 1] = 299;
          });
          const want = new Float32Array(heads * d);
          attendSlots(pool, 0, q, heads, slots, offsets, want);
          let worst = 0;
          for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
          expect(worst, `sizes ${sizes.join(',')}`).toBeLessThan(2e-6);
          const layer = off.lastLayer()!;
          const longest = Math.max(...sizes) + 1;
          expect(layer.rows).toBe(longest);
          expect(layer.hits + layer.misses).toBe(offsets[kvHeads]);
          // idx (int32, padded to the longest list) and, when ragged, the lengths (int32 per KV head:
          // the ragged graph runs in int32 so that WebGPU, which has no int64 Shape/Range, runs all of it)
          const ragged = sizes.some((n) => n !== sizes[0]);
          const updateRows = rowUpdate === 'graph' ? layer.misses * 8 : 0;
          expect(layer.hostTensorBytes).toBe(kvHeads * longest * 4 + (ragged ? kvHeads * 4 : 0) + updateRows);
        }
      } finally {
        await off.dispose();
        pool.free();
      }
    });
  }
});
