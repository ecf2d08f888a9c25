// A LayeredKvPool with layers that keep no rows at all ({ rows: 'none' }: a hybrid model's
// linear-attention layers, whose recurrent state the runner holds beside the pool): they cost no
// bytes, own nothing, have 0-byte snapshot sections and no ring, count no evictions; every other
// question about their rows is refused with NATIVE_BAD_ARGUMENT naming the layer; the attention
// layers around them keep and attend their rows as in a plain pool of those layers.
import { describe, expect, it } from 'vitest';
import { NativeError } from '../app/common/errors.ts';
import { attendCausal, createKvPool, createLayeredKvPool, type LayeredKvPoolLayer } from './index.js';

const A = { kvHeads: 2, headDim: 16 };
const NONE = { rows: 'none' } as const;
const layout: LayeredKvPoolLayer[] = [NONE, NONE, NONE, A, NONE, A];

function code(fn: () => unknown): string {
  try {
    fn();
    return 'no error';
  } catch (e) {
    return e instanceof NativeError ? e.code : String(e);
  }
}

describe('LayeredKvPool: layers without rows', () => {
  it('cost nothing and answer no row questions; the attention layers are a plain pool of two layers', () => {
    const pool = createLayeredKvPool({ layerShapes: layout, tokens: 16, kvType: 'fp32' });
    const plain = createKvPool({ layers: 2, kvHeads: 2, headDim: 16, kvType: 'fp32', budgetBytes: 1 << 20 });
    try {
      expect([0, 1, 2, 3, 4, 5].map((l) => pool.owns(l))).toEqual([false, false, false, true, false, true]);
      expect([0, 1, 2, 4].map((l) => [pool.isRing(l), pool.snapshotLayerBytes(5, l), pool.evictions(l)])).toEqual(Array.from({ length: 4 }, () => [false, 0, 0]));
      expect(pool.bytesPerToken).toBe(2 * 2 * (2 * 16 * 4 + 4));
      for (const ask of [() => pool.length(0), () => pool.layerKvHeads(1), () => pool.appendBatch(2, new Float32Array(32), new Float32Array(32), 0), () => pool.kvSource(4)]) {
        expect(code(ask)).toBe('NATIVE_BAD_ARGUMENT');
      }
      expect(() => pool.length(0)).toThrow(/layer 0 keeps no KV rows/);
      pool.exportLayer(0, 5, new Uint8Array(0)); // a 0-byte section is fine
      expect(code(() => pool.exportLayer(0, 5, new Uint8Array(4)))).toBe('NATIVE_BAD_ARGUMENT');
      // the attention layers hold and attend exactly what a plain pool of them does
      const k = Float32Array.from({ length: 3 * 32 }, (_, i) => Math.sin(i));
      const v = Float32Array.from({ length: 3 * 32 }, (_, i) => Math.cos(i));
      const q = Float32Array.from({ length: 3 * 64 }, (_, i) => Math.sin(i * 0.7));
      for (const [l, p] of [[3, 0], [5, 1]] as const) {
        pool.appendBatch(l, k, v, 0);
        plain.appendBatch(p, k, v, 0);
        const a = new Float32Array(3 * 64);
        const b = new Float32Array(3 * 64);
        attendCausal(pool, l, q, 4, a);
        attendCausal(plain, p, q, 4, b);
        expect(a).toEqual(b);
      }
      expect(code(() => createLayeredKvPool({ layerShapes: [NONE, NONE], tokens: 4 }))).toBe('NATIVE_BAD_ARGUMENT');
      expect(code(() => createLayeredKvPool({ layerShapes: [NONE, { kvSource: 0 }, A], tokens: 4 }))).toBe('NATIVE_BAD_ARGUMENT'); // a source without rows
    } finally {
      pool.free();
      plain.free();
    }
  });
});
