// GGUF block types -> MatMulNBits, without requantising: every ggml block format is some
// (code − zero point)·scale (− min) over blocks of 16 or 32 elements, which MatMulNBits holds
// exactly (the "min" through a small correction matmul, see PackedNBits.mins):
//
//   Q8_0  32 el: q·d,  q int8                  8-bit, code q+128, zp 128 (default)
//   Q4_0  32 el: (q − 8)·d, q 0..15            4-bit, zp 8 (default)
//   Q4_1  32 el: q·d + m                       4-bit, zp 8, mins = −m − 8·d
//   Q5_0  32 el: (q − 16)·d, q 0..31           8-bit, code q, zp 16
//   Q5_1  32 el: q·d + m                       8-bit, code q, zp 16, mins = −m − 16·d
//   Q4_K 256 el: 8 × 32: (d·sc)·q − dmin·m     4-bit, scale s = fround(d·sc), zp 8, mins = fround(dmin·m) − 8·s
//   Q5_K 256 el: same with 5-bit q             8-bit, code q, zp 16, mins = fround(dmin·m) − 16·s
//   Q6_K 256 el: 16 × 16: (d·sc)·(q − 32)      8-bit, block 16, code q, zp 32
//   MXFP4 32 el: kv[q]·2^(e−128), kv ∈ −12..12  8-bit, code kv+128, zp 128 (default), scale 2^(e−128)
// The scale products are rounded to float32 exactly where ggml's reference rounds them. Types
// without a min term repack bit for bit. With one, the zero point sits mid-range (s·(q − zp) −
// (min − zp·s)): the same weight in exact arithmetic, and it keeps the op's int8-activation path
// (accuracy_level 4) from summing large same-signed terms that the min then cancels (measured:
// 3x lower logit error on Q4_K). The price is one float32 rounding of (min − zp·s).
import type { TensorDType } from '../model/types.ts';
import { e8m0Half, MXFP4_VALUES } from '../model/gguf/dequant.ts';
import { float16BitsToFloat32 } from './float16.ts';
import { defaultZeroPoints, fromQ4_0, fromQ8_0, NBITS_BLOCK, packWithZeroPoints, type PackedNBits } from './matmul-nbits.ts';

const f = Math.fround;

/** The GGUF types repackGguf takes. */
export const REPACKABLE_TYPES: readonly TensorDType[] = ['Q8_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q4_K', 'Q5_K', 'Q6_K', 'MXFP4'];

const half = (b: Uint8Array, o: number): number => float16BitsToFloat32(b[o]! | (b[o + 1]! << 8));
const u32 = (b: Uint8Array, o: number): number => (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24)) >>> 0;

/** Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes at o. */
function scaleMinK4(j: number, b: Uint8Array, o: number): [number, number] {
  if (j < 4) return [b[o + j]! & 63, b[o + j + 4]! & 63];
  const hi = b[o + j + 4]!;
  return [(hi & 0x0f) | ((b[o + j - 4]! >> 6) << 4), (hi >> 4) | ((b[o + j]! >> 6) << 4)];
}

interface Unpacked {
  codes: Uint8Array; // [N·K]
  scales: Float32Array; // [N·K/blockSize]
  zp: Uint8Array; // [N·K/blockSize]
  mins?: Float32Array; // [N·K/32]
}

function blockCount(raw: Uint8Array, elements: number, blockElements: number, blockBytes: number, dtype: string): number {
  if (elements % blockElements !== 0) throw new RangeError(`${dtype}: ${elements} elements are not whole blocks of ${blockElements}`);
  const blocks = elements / blockElements;
  if (raw.length !== blocks * blockBytes) throw new RangeError(`${dtype}: ${raw.length} bytes for ${blocks} blocks of ${blockBytes}`);
  return blocks;
}

function unpackQ4_1(raw: Uint8Array, elements: number): Unpacked {
  const blocks = blockCount(raw, elements, 32, 20, 'Q4_1');
  const u: Unpacked = { codes: new Uint8Array(elements), scales: new Float32Array(blocks), zp: new Uint8Array(blocks).fill(8), mins: new Float32Array(blocks) };
  for (let blk = 0; blk < blocks; blk++) {
    const o = blk * 20;
    u.scales[blk] = half(raw, o);
    u.mins![blk] = -half(raw, o + 2) - 8 * u.scales[blk]!;
    for (let j = 0; j < 16; j++) {
      u.codes[blk * 32 + j] = raw[o + 4 + j]! & 0x0f;
      u.codes[blk * 32 + j + 16] = raw[o + 4 + j]! >> 4;
    }
  }
  return u;
}

function unpackQ5(raw: Uint8Array, elements: number, withMin: boolean): Unpacked {
  const bytes = withMin ? 24 : 22;
  const blocks = blockCount(raw, elements, 32, bytes, withMin ? 'Q5_1' : 'Q5_0');
  const u: Unpacked = { codes: new Uint8Array(elements), scales: new Float32Array(blocks), zp: new Uint8Array(blocks).fill(16) };
  if (withMin) u.mins = new Float32Array(blocks);
  for (let blk = 0; blk < blocks; blk++) {
    const o = blk * bytes;
    u.scales[blk] = half(raw, o);
    if (withMin) u.mins![blk] = -half(raw, o + 2) - 16 * u.scales[blk]!;
    const qhAt = withMin ? o + 4 : o + 2;
    const qh = u32(raw, qhAt);
    for (let j = 0; j < 16; j++) {
      const q = raw[qhAt + 4 + j]!;
      u.codes[blk * 32 + j] = (q & 0x0f) | (((qh >>> j) << 4) & 0x10);
      u.codes[blk * 32 + j + 16] = (q >> 4) | ((qh >>> (j + 12)) & 0x10);
    }
  }
  return u;
}

function unpackK(raw: Uint8Array, elements: number, five: boolean): Unpacked {
  const bytes = five ? 176 : 144;
  const blocks = blockCount(raw, elements, 256, bytes, five ? 'Q5_K' : 'Q4_K');
  const subs = blocks * 8;
  const mid = five ? 16 : 8;
  const u: Unpacked = { codes: new Uint8Array(elements), scales: new Float32Array(subs), zp: new Uint8Array(subs).fill(mid), mins: new Float32Array(subs) };
  for (let blk = 0; blk < blocks; blk++) {
    const o = blk * bytes;
    const d = half(raw, o);
    const dmin = half(raw, o + 2);
    const qh = o + 16;
    let qs = five ? o + 48 : o + 16;
    for (let sub = 0; sub < 8; sub += 2) {
      for (const j of [sub, sub + 1]) {
        const [sc, m] = scaleMinK4(j, raw, o + 4);
        u.scales[blk * 8 + j] = f(d * sc);
        u.mins![blk * 8 + j] = f(dmin * m) - mid * u.scales[blk * 8 + j]!;
      }
      const base = blk * 256 + sub * 32;
      for (let l = 0; l < 32; l++) {
        const byte = raw[qs + l]!;
        let lo = byte & 0x0f;
        let hi = byte >> 4;
        if (five) {
          if (raw[qh + l]! & (1 << sub)) lo += 16;
          if (raw[qh + l]! & (2 << sub)) hi += 16;
        }
        u.codes[base + l] = lo;
        u.codes[base + 32 + l] = hi;
      }
      qs += 32;
    }
  }
  return u;
}

function unpackQ6_K(raw: Uint8Array, elements: number): Unpacked {
  const blocks = blockCount(raw, elements, 256, 210, 'Q6_K');
  const u: Unpacked = { codes: new Uint8Array(elements), scales: new Float32Array(blocks * 16), zp: new Uint8Array(blocks * 16).fill(32) };
  for (let blk = 0; blk < blocks; blk++) {
    const o = blk * 210;
    const d = half(raw, o + 208);
    for (let s = 0; s < 16; s++) {
      const sc = raw[o + 192 + s]!;
      u.scales[blk * 16 + s] = f(d * (sc > 127 ? sc - 256 : sc));
    }
    for (let h = 0; h < 2; h++) {
      const ql = o + h * 64;
      const qh = o + 128 + h * 32;
      const out = blk * 256 + h * 128;
      for (let l = 0; l < 32; l++) {
        const hb = raw[qh + l]!;
        const lo = raw[ql + l]!;
        const lo32 = raw[ql + l + 32]!;
        u.codes[out + l] = (lo & 0x0f) | ((hb & 3) << 4);
        u.codes[out + l + 32] = (lo32 & 0x0f) | (((hb >> 2) & 3) << 4);
        u.codes[out + l + 64] = (lo >> 4) | (((hb >> 4) & 3) << 4);
        u.codes[out + l + 96] = (lo32 >> 4) | (((hb >> 6) & 3) << 4);
      }
    }
  }
  return u;
}

/** MXFP4 as Q8_0 is repacked: the doubled E2M1 value kv (an integer in −12..12) + 128 under the op's default zero point, and the E8M0 scale as fp32. */
function fromMXFP4(raw: Uint8Array, n: number, k: number): PackedNBits {
  if (k % NBITS_BLOCK !== 0) throw new RangeError(`MXFP4: K = ${k} is not a multiple of ${NBITS_BLOCK}`);
  const blocks = blockCount(raw, n * k, 32, 17, 'MXFP4');
  const b = new Uint8Array(n * k);
  const scales = new Float32Array(blocks);
  for (let blk = 0; blk < blocks; blk++) {
    const o = blk * 17;
    scales[blk] = e8m0Half(raw[o]!);
    for (let j = 0; j < 16; j++) {
      b[blk * 32 + j] = MXFP4_VALUES[raw[o + 1 + j]! & 0x0f]! + 128;
      b[blk * 32 + j + 16] = MXFP4_VALUES[raw[o + 1 + j]! >> 4]! + 128;
    }
  }
  return { bits: 8, blockSize: NBITS_BLOCK, n, k, b, scales, zeroPoints: defaultZeroPoints(n, k, 8) };
}

/**
 * Repacks a GGUF tensor [N out, K in] (its raw bytes, rows of whole blocks) for MatMulNBits.
 * Throws RangeError for types it does not take (float types go through fp32 MatMul instead).
 */
export function repackGguf(dtype: TensorDType, raw: Uint8Array, n: number, k: number): PackedNBits {
  switch (dtype) {
    case 'Q8_0':
      return fromQ8_0(raw, n, k);
    case 'Q4_0':
      return fromQ4_0(raw, n, k);
    case 'Q4_1': {
      const u = unpackQ4_1(raw, n * k);
      return packWithZeroPoints(u.codes, u.scales, u.zp, n, k, 4, 32, u.mins);
    }
    case 'Q5_0':
    case 'Q5_1': {
      const u = unpackQ5(raw, n * k, dtype === 'Q5_1');
      return packWithZeroPoints(u.codes, u.scales, u.zp, n, k, 8, 32, u.mins);
    }
    case 'Q4_K':
    case 'Q5_K': {
      const u = unpackK(raw, n * k, dtype === 'Q5_K');
      return packWithZeroPoints(u.codes, u.scales, u.zp, n, k, dtype === 'Q4_K' ? 4 : 8, 32, u.mins);
    }
    case 'Q6_K': {
      const u = unpackQ6_K(raw, n * k);
      return packWithZeroPoints(u.codes, u.scales, u.zp, n, k, 8, 16);
    }
    case 'MXFP4':
      return fromMXFP4(raw, n, k);
    default:
      throw new RangeError(`repackGguf: ${dtype} is not a block-quantised type`);
  }
}
