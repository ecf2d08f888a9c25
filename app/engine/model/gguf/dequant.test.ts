// Dequantisation against blocks built byte by byte, with the expected floats worked out by hand
// from ggml's block definitions (see the comments in dequant.ts).
import { describe, expect, it } from 'vitest';
import { bf16ToFloat, dequantize, halfToFloat } from './dequant.ts';

/** fp16 bits used below: 0x3C00 = 1, 0x3800 = 0.5, 0x3400 = 0.25, 0xBC00 = -1. */
const le16 = (bits: number): number[] => [bits & 0xff, bits >> 8];
const range = (n: number, f: (i: number) => number): number[] => Array.from({ length: n }, (_, i) => f(i));

describe('fp16 and bf16', () => {
  it('converts fp16 edge cases', () => {
    const cases: [number, number][] = [
      [0x0000, 0],
      [0x8000, -0],
      [0x0001, 5.960464477539063e-8], // smallest subnormal, 2^-24
      [0x03ff, 6.097555160522461e-5], // largest subnormal, 1023 * 2^-24
      [0x0400, 6.103515625e-5], // smallest normal, 2^-14
      [0x8001, -5.960464477539063e-8],
      [0x3c00, 1],
      [0xc000, -2],
      [0x3555, 0.333251953125],
      [0x7bff, 65504],
      [0x7c00, Infinity],
      [0xfc00, -Infinity],
    ];
    for (const [bits, value] of cases) expect(Object.is(halfToFloat(bits), value), `0x${bits.toString(16)}`).toBe(true);
    expect(halfToFloat(0x7e00)).toBeNaN();
    expect(halfToFloat(0x7c01)).toBeNaN();
    expect(halfToFloat(0xfe00)).toBeNaN();
  });

  it('dequantises F16 and BF16 tensors, -0 and NaN included', () => {
    const f16 = new Uint8Array([...le16(0x3c00), ...le16(0x8000), ...le16(0x0001), ...le16(0x7c00), ...le16(0x7e00), ...le16(0xc000)]);
    const y = dequantize('F16', f16, 6);
    expect(Array.from(y.subarray(0, 4))).toEqual([1, -0, 5.960464477539063e-8, Infinity]);
    expect(Object.is(y[1], -0)).toBe(true);
    expect(y[4]).toBeNaN();
    expect(y[5]).toBe(-2);

    const bf = new Uint8Array([...le16(0x3f80), ...le16(0xc040), ...le16(0x7f80), ...le16(0x0001), ...le16(0x8000), ...le16(0x7fc0)]);
    const z = dequantize('BF16', bf, 6);
    expect(Array.from(z.subarray(0, 4))).toEqual([1, -3, Infinity, 9.183549615799121e-41]);
    expect(Object.is(z[4], -0)).toBe(true);
    expect(z[5]).toBeNaN();
    expect(bf16ToFloat(0x4049)).toBe(3.140625);
  });

  it('copies F32 from an unaligned offset', () => {
    const buffer = new Uint8Array(1 + 12);
    new DataView(buffer.buffer).setFloat32(1, 1.5, true);
    new DataView(buffer.buffer).setFloat32(5, -0.125, true);
    new DataView(buffer.buffer).setFloat32(9, 3e38, true);
    const y = dequantize('F32', buffer.subarray(1), 3);
    expect(Array.from(y)).toEqual([1.5, -0.125, Math.fround(3e38)]);
  });
});

describe('32-element blocks', () => {
  it('Q4_0: d = 0.5, low nibbles 0..15, high nibbles 15..0 → (q - 8)·0.5', () => {
    const block = new Uint8Array([...le16(0x3800), ...range(16, (j) => j | ((15 - j) << 4))]);
    expect(Array.from(dequantize('Q4_0', block, 32))).toEqual([
      -4, -3.5, -3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5,
      3.5, 3, 2.5, 2, 1.5, 1, 0.5, 0, -0.5, -1, -1.5, -2, -2.5, -3, -3.5, -4,
    ]);
  });

  it('Q4_0: two blocks, the second with d = -1', () => {
    const one = [...le16(0x3c00), ...range(16, () => 0x98)]; // lo 8 → 0, hi 9 → 1
    const two = [...le16(0xbc00), ...range(16, () => 0x0f)]; // lo 15 → -7, hi 0 → 8
    const y = Array.from(dequantize('Q4_0', new Uint8Array([...one, ...two]), 64));
    expect(y.slice(0, 16)).toEqual(range(16, () => 0));
    expect(y.slice(16, 32)).toEqual(range(16, () => 1));
    expect(y.slice(32, 48)).toEqual(range(16, () => -7));
    expect(y.slice(48, 64)).toEqual(range(16, () => 8));
  });

  it('Q4_1: d = 0.25, m = -1 → q·0.25 - 1', () => {
    const block = new Uint8Array([...le16(0x3400), ...le16(0xbc00), ...range(16, (j) => j | (j << 4))]);
    const half = [-1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75];
    expect(Array.from(dequantize('Q4_1', block, 32))).toEqual([...half, ...half]);
  });

  it('Q5_0: d = 1, qh = 0xFFFF0000 sets the 5th bit of the second half only', () => {
    const block = new Uint8Array([...le16(0x3c00), 0x00, 0x00, 0xff, 0xff, ...range(16, (j) => j | (j << 4))]);
    expect(Array.from(dequantize('Q5_0', block, 32))).toEqual([
      -16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1,
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    ]);
  });

  it('Q5_1: d = 0.5, m = 1, qh = 0x0000FFFF sets the 5th bit of the first half only', () => {
    const block = new Uint8Array([...le16(0x3800), ...le16(0x3c00), 0xff, 0xff, 0x00, 0x00, ...range(16, (j) => 15 - j)]);
    expect(Array.from(dequantize('Q5_1', block, 32))).toEqual([
      16.5, 16, 15.5, 15, 14.5, 14, 13.5, 13, 12.5, 12, 11.5, 11, 10.5, 10, 9.5, 9,
      1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    ]);
  });

  it('Q8_0: d = 0.25, q = -128, -120, ..., 120', () => {
    const block = new Uint8Array([...le16(0x3400), ...range(32, (j) => (j * 8 - 128) & 0xff)]);
    expect(Array.from(dequantize('Q8_0', block, 32))).toEqual([
      -32, -30, -28, -26, -24, -22, -20, -18, -16, -14, -12, -10, -8, -6, -4, -2,
      0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
    ]);
  });
});

// Q4_K / Q5_K scales: sub-block scales sc = [1, 2, 3, 4, 17, 18, 33, 49] and mins
// m = [0, 1, 2, 3, 16, 0, 2, 48], packed by hand into 12 bytes (sub-blocks 4..7 take their low
// four bits from bytes 8..11 and their top two bits from the top of bytes 0..7):
const K_SCALES = [0x41, 0x42, 0x83, 0xc4, 0x40, 0x01, 0x02, 0xc3, 0x01, 0x02, 0x21, 0x01];
const SC = [1, 2, 3, 4, 17, 18, 33, 49];
const MIN = [0, 1, 2, 3, 16, 0, 2, 48];

describe('256-element super-blocks', () => {
  // qs byte l of each 32-byte chunk: low nibble l % 16 (first sub-block), high 15 - l % 16 (second).
  const qs = range(128, (i) => (i % 16) | ((15 - (i % 16)) << 4));

  it('Q4_K: d = 1, dmin = 0.5 → sc·q - 0.5·m', () => {
    const block = new Uint8Array([...le16(0x3c00), ...le16(0x3800), ...K_SCALES, ...qs]);
    const y = dequantize('Q4_K', block, 256);
    // worked by hand:
    expect(y[0]).toBe(0); //            sub 0: 1·0 - 0
    expect(y[1]).toBe(1); //            sub 0: 1·1 - 0
    expect(y[32]).toBe(29.5); //        sub 1: 2·15 - 0.5·1
    expect(y[69]).toBe(14); //          sub 2: 3·5 - 0.5·2
    expect(y[131]).toBe(43); //         sub 4: 17·3 - 0.5·16
    expect(y[160]).toBe(270); //        sub 5: 18·15 - 0
    expect(y[209]).toBe(32); //         sub 6: 33·1 - 0.5·2
    expect(y[255]).toBe(-24); //        sub 7: 49·0 - 0.5·48
    for (let i = 0; i < 256; i++) {
      const sub = i >> 5, l = i % 32;
      const q = sub % 2 === 0 ? l % 16 : 15 - (l % 16);
      expect(y[i], `element ${i}`).toBe((SC[sub] as number) * q - 0.5 * (MIN[sub] as number));
    }
  });

  it('Q5_K: as Q4_K plus a 5th bit: qh = 0x55 for l < 16 (even sub-blocks), 0xAA after (odd)', () => {
    const qh = range(32, (l) => (l < 16 ? 0x55 : 0xaa));
    const block = new Uint8Array([...le16(0x3c00), ...le16(0x3800), ...K_SCALES, ...qh, ...qs]);
    const y = dequantize('Q5_K', block, 256);
    expect(y[0]).toBe(16); //           sub 0: 1·(0 + 16) - 0
    expect(y[32]).toBe(29.5); //        sub 1, l 0: 2·15 - 0.5
    expect(y[48]).toBe(61.5); //        sub 1, l 16: 2·(15 + 16) - 0.5
    expect(y[255]).toBe(760); //        sub 7, l 31: 49·(0 + 16) - 24
    for (let i = 0; i < 256; i++) {
      const sub = i >> 5, l = i % 32;
      const even = sub % 2 === 0;
      const q = (even ? l % 16 : 15 - (l % 16)) + ((even ? l < 16 : l >= 16) ? 16 : 0);
      expect(y[i], `element ${i}`).toBe((SC[sub] as number) * q - 0.5 * (MIN[sub] as number));
    }
  });

  it('Q6_K: d = 0.5, scales -8..7, every ql 0x21 and qh 0xE4 → q = -31, -15, 2, 18 by quarter', () => {
    const block = new Uint8Array([...range(128, () => 0x21), ...range(64, () => 0xe4), ...range(16, (k) => (k - 8) & 0xff), ...le16(0x3800)]);
    const y = Array.from(dequantize('Q6_K', block, 256));
    // 16 runs of 16 equal values: 0.5 · scale · q
    const runs = [124, 108.5, 45, 37.5, -4, -3, -18, -9, -0, -15.5, -15, -22.5, 4, 5, 54, 63];
    runs.forEach((value, run) => {
      for (let i = 0; i < 16; i++) expect(Object.is(y[run * 16 + i], value), `element ${run * 16 + i}: ${y[run * 16 + i]} vs ${value}`).toBe(true);
    });
  });
});

describe('size checks', () => {
  it('refuses a byte count that does not match the elements', () => {
    expect(() => dequantize('Q4_0', new Uint8Array(17), 32)).toThrow(RangeError);
    expect(() => dequantize('Q4_K', new Uint8Array(144), 255)).toThrow(RangeError);
  });
});
