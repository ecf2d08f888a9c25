import { describe, expect, it } from 'vitest';

import { float32ToFloat16Bits } from './float16.ts';
import { GraphBuilder } from './graph-builder.ts';
import { defaultZeroPoints, dequantizeNBits, fromQ4_0, fromQ8_0, packCodes, quantizeNBits, type NBits } from './matmul-nbits.ts';
import { linear } from './ops.ts';
import * as ref from './reference-ops.ts';
import { createSession } from './session.ts';
import { maxAbsDiff, randomArray } from './test-helpers.ts';

describe('packing', () => {
  it('puts element 2j in the low nibble and 2j+1 in the high nibble', () => {
    const codes = new Uint8Array(32).map((_, i) => i % 16);
    const p = packCodes(codes, new Float32Array([1]), 1, 32, 4);
    expect(p.b.length).toBe(16);
    expect(p.b[0]).toBe(0x10); // codes 0, 1
    expect(p.b[1]).toBe(0x32); // codes 2, 3
    expect(p.b[8]).toBe(0x10); // codes 16%16=0, 17%16=1
  });

  it('packs default zero points: 0x88 per pair of 4-bit blocks, 128 per 8-bit block', () => {
    expect([...defaultZeroPoints(2, 64, 4)]).toEqual([0x88, 0x88]); // 2 blocks per row -> 1 byte
    expect([...defaultZeroPoints(2, 96, 4)]).toEqual([0x88, 0x08, 0x88, 0x08]); // 3 blocks -> 2 bytes, padding nibble 0
    expect([...defaultZeroPoints(1, 64, 8)]).toEqual([128, 128]);
  });

  it('quantises symmetrically within half a step (4-bit: a full step where Q4_0 clamps code 16 to 15)', () => {
    const w = randomArray(4 * 64, 7);
    for (const bits of [4, 8] as const) {
      const p = quantizeNBits(w, 4, 64, bits);
      const dq = dequantizeNBits(p);
      for (let blk = 0; blk < 8; blk++) {
        const step = Math.abs(p.scales[blk]!);
        for (let i = 0; i < 32; i++) {
          const e = blk * 32 + i;
          const clamped = bits === 4 && Math.round(w[e]! / p.scales[blk]!) + 8 > 15;
          expect(Math.abs(dq[e]! - w[e]!)).toBeLessThanOrEqual((clamped ? step : step / 2) + 1e-7);
        }
      }
    }
  });

  it('repacks GGUF Q4_0 and Q8_0 blocks without loss', () => {
    // one row of K = 64: two blocks; scale 0.5 and -0.25 as fp16
    const n = 1;
    const k = 64;
    const q4 = new Uint8Array(2 * 18);
    const q8 = new Uint8Array(2 * 34);
    const expected4 = new Float32Array(k);
    const expected8 = new Float32Array(k);
    [0.5, -0.25].forEach((d, blk) => {
      const h = float32ToFloat16Bits(d);
      q4[blk * 18] = h & 0xff;
      q4[blk * 18 + 1] = h >> 8;
      q8[blk * 34] = h & 0xff;
      q8[blk * 34 + 1] = h >> 8;
      for (let j = 0; j < 16; j++) {
        const lo = (j * 3 + blk) % 16; // element j
        const hi = (j * 5 + 1) % 16; // element j + 16
        q4[blk * 18 + 2 + j] = lo | (hi << 4);
        expected4[blk * 32 + j] = (lo - 8) * d;
        expected4[blk * 32 + j + 16] = (hi - 8) * d;
      }
      for (let i = 0; i < 32; i++) {
        const q = ((i * 37 + blk * 11) % 256) - 128;
        q8[blk * 34 + 2 + i] = q & 0xff;
        expected8[blk * 32 + i] = q * d;
      }
    });
    expect([...dequantizeNBits(fromQ4_0(q4, n, k))]).toEqual([...expected4]);
    expect([...dequantizeNBits(fromQ8_0(q8, n, k))]).toEqual([...expected8]);
  });
});

describe('MatMulNBits in onnxruntime', () => {
  const K = 256;
  const N = 64;
  const M = 3;
  const x = randomArray(M * K, 1);
  const w = randomArray(N * K, 2, 0.1);
  const bias = randomArray(N, 3, 0.5);

  async function run(bits: NBits, accuracyLevel: 0 | 4, explicitZeroPoints: boolean): Promise<{ y: Float32Array; expected: Float32Array }> {
    const packed = quantizeNBits(w, N, K, bits);
    const g = new GraphBuilder(`nbits${bits}`);
    const xin = g.input('x', 'float32', ['rows', K]);
    g.output(linear(g, xin, { kind: 'nbits', packed, bias, accuracyLevel, explicitZeroPoints }, 'proj'), 'float32', ['rows', N]);
    const session = await createSession(g.toModel(), { intraOpThreads: 1, label: g.name });
    const out = await session.run({ x: { elemType: 'float32', dims: [M, K], data: x } });
    await session.release();
    // the yardstick: plain fp32 matmul of the dequantised weight, so only the op's arithmetic differs
    return { y: out.proj!.data as Float32Array, expected: ref.linear(x, dequantizeNBits(packed), N, K, bias) };
  }

  // Tolerances, stated: with accuracy_level 0 the op dequantises and accumulates in fp32
  // (measured max |Δ| 6e-7 on outputs up to 1.8; we allow 1e-5). With accuracy_level 4 it
  // quantises A to int8 per block (step max|a|/127), so each output carries an error of about
  // sqrt(K)·(step/√12)·|w| ≈ 16·0.0023·0.05 ≈ 2e-3 (measured max 5.4e-3 for both 4 and 8 bits);
  // we allow 1e-2 absolute, 0.6% of the largest output.
  for (const bits of [4, 8] as const) {
    it(`${bits}-bit, accuracy_level 0, matches the dequantised fp32 matmul within 1e-5`, async () => {
      const { y, expected } = await run(bits, 0, false);
      expect(maxAbsDiff(y, expected).maxAbs).toBeLessThan(1e-5);
    });
    it(`${bits}-bit, accuracy_level 4 (int8 activations), matches within 1e-2; explicit zero points change nothing`, async () => {
      const { y, expected } = await run(bits, 4, false);
      const d = maxAbsDiff(y, expected);
      expect(d.maxAbs).toBeLessThan(1e-2);
      const withZp = await run(bits, 4, true);
      expect(maxAbsDiff(withZp.y, y).maxAbs).toBe(0);
    });
  }
});
