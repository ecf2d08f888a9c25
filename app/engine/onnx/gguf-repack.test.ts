// GGUF block types repacked for MatMulNBits: the weight the op computes with equals ggml's own
// dequantisation (model/gguf/dequant.ts), and the op's output matches a plain linear layer.
import { describe, expect, it } from 'vitest';

import { dequantize } from '../model/gguf/dequant.ts';
import type { TensorDType } from '../model/types.ts';
import { float32ToFloat16Bits } from './float16.ts';
import { GraphBuilder } from './graph-builder.ts';
import { repackGguf, REPACKABLE_TYPES } from './gguf-repack.ts';
import { dequantizeNBits } from './matmul-nbits.ts';
import { linear } from './ops.ts';
import * as ref from './reference-ops.ts';
import { createSession } from './session.ts';
import { maxAbsDiff, randomArray, rng } from './test-helpers.ts';

// halves: fp16 fields set to small finite numbers; e8m0: an E8M0 exponent byte set to 2^-10 .. 2^-3
const LAYOUT: Record<string, { elements: number; bytes: number; halves: number[]; e8m0?: number }> = {
  Q8_0: { elements: 32, bytes: 34, halves: [0] },
  Q4_0: { elements: 32, bytes: 18, halves: [0] },
  Q4_1: { elements: 32, bytes: 20, halves: [0, 2] },
  Q5_0: { elements: 32, bytes: 22, halves: [0] },
  Q5_1: { elements: 32, bytes: 24, halves: [0, 2] },
  Q4_K: { elements: 256, bytes: 144, halves: [0, 2] },
  Q5_K: { elements: 256, bytes: 176, halves: [0, 2] },
  Q6_K: { elements: 256, bytes: 210, halves: [208] },
  MXFP4: { elements: 32, bytes: 17, halves: [], e8m0: 0 },
};

/** Random blocks of `dtype` whose fp16 fields are small finite numbers. */
function randomBlocks(dtype: string, elements: number, seed: number): Uint8Array {
  const l = LAYOUT[dtype]!;
  const r = rng(seed);
  const raw = new Uint8Array((elements / l.elements) * l.bytes).map(() => Math.floor(r() * 256));
  for (let o = 0; o < raw.length; o += l.bytes) {
    for (const at of l.halves) {
      const h = float32ToFloat16Bits((r() * 2 - 0.5) * 0.01);
      raw[o + at] = h & 0xff;
      raw[o + at + 1] = h >> 8;
    }
    if (l.e8m0 !== undefined) raw[o + l.e8m0] = 118 + Math.floor(r() * 8);
  }
  return raw;
}

describe('repackGguf', () => {
  const n = 24;
  const k = 512;
  for (const dtype of REPACKABLE_TYPES) {
    it(`${dtype}: the op's weight equals ggml's dequantisation`, () => {
      const raw = randomBlocks(dtype, n * k, 11);
      const mine = dequantizeNBits(repackGguf(dtype, raw, n, k));
      const ggml = dequantize(dtype, raw, n * k);
      const d = maxAbsDiff(mine, ggml);
      // bit for bit without a min term; with one, one fp32 rounding of (min − zp·scale)
      const withMin = ['Q4_1', 'Q5_1', 'Q4_K', 'Q5_K'].includes(dtype);
      expect(d.maxAbs).toBeLessThanOrEqual(withMin ? 4e-7 * d.maxRef : 0);
    });

    it(`${dtype}: MatMulNBits output matches a plain linear layer (accuracy 0 and 4)`, async () => {
      const raw = randomBlocks(dtype, n * k, 12);
      const packed = repackGguf(dtype, raw, n, k);
      const w = dequantize(dtype, raw, n * k);
      const rows = 3;
      const x = randomArray(rows * k, 13);
      const expected = ref.linear(x, w, n, k);
      for (const accuracyLevel of [0, 4] as const) {
        const g = new GraphBuilder(`repack-${dtype}`);
        const xin = g.input('x', 'float32', [1, rows, k]);
        g.output(linear(g, xin, { kind: 'nbits', packed, accuracyLevel }, 'proj'), 'float32', [1, rows, n]);
        const s = await createSession(g.toModel(), { intraOpThreads: 1 });
        const y = (await s.run({ x: { elemType: 'float32', dims: [1, rows, k], data: x } })).proj!.data as Float32Array;
        await s.release();
        const d = maxAbsDiff(y, expected);
        // accuracy 4 rounds x to int8 per block: relative error of the order of 1/127 of the block max
        expect(d.maxAbs, `${dtype} accuracy ${accuracyLevel}`).toBeLessThanOrEqual(accuracyLevel === 0 ? 1e-4 * d.maxRef + 1e-6 : 2e-2 * d.maxRef + 1e-5);
      }
    });
  }

  it('refuses float types', () => {
    expect(() => repackGguf('F16' as TensorDType, new Uint8Array(64), 1, 32)).toThrow(RangeError);
  });
});
