// Weight packing for com.microsoft MatMulNBits (block_size 32, 4 or 8 bits).
//
// The op computes Y = A · dequant(B)ᵀ, dequant(B)[n][k] = (code[n][k] − zp[n][k/32]) · scale[n][k/32]:
//   B           uint8 [N, K/32, blob]   blob = 32·bits/8 bytes; codes packed along K, low bits first
//                                       (4-bit: element 2j in the low nibble of byte j, 2j+1 in the high)
//   scales      float [N · K/32]        (same element type as A)
//   zero_points uint8 [N · ceil(K/32 · bits / 8)], packed like B; optional, default 2^(bits−1)
//                                       (8 for 4-bit, 128 for 8-bit)
// We produce symmetric blocks, so the zero points are the default and may be omitted.
//
// Two ways in: quantise an fp32 weight [N out, K in] (symmetric, round to nearest), or repack
// GGUF Q4_0 / Q8_0 blocks without loss (their layout is the same maths: Q4_0 is (q − 8)·d with
// q in 0..15; Q8_0 is q·d with q in −128..127, i.e. code q + 128 and zero point 128).

import { float16BitsToFloat32 } from './float16.ts';

export const NBITS_BLOCK = 32;

export type NBits = 4 | 8;

/** Block sizes the engine uses: 32 (most GGUF types), 16 (Q6_K's sub-blocks). */
export type NBitsBlockSize = 16 | 32;

export interface PackedNBits {
  bits: NBits;
  blockSize: NBitsBlockSize;
  /** Output features (rows of the PyTorch-order weight). */
  n: number;
  /** Input features. */
  k: number;
  /** uint8 [N, K/32, blob] */
  b: Uint8Array;
  /** float32 [N · K/32] */
  scales: Float32Array;
  /** uint8, packed like B: [N · ceil(K/blockSize · bits/8)]; the default 2^(bits−1) unless customZeroPoints. */
  zeroPoints: Uint8Array;
  /** The zero points differ from the default: the graph must feed them. */
  customZeroPoints?: boolean;
  /**
   * Per-32-element offsets subtracted after dequantisation (GGUF "min" terms that are not a whole
   * number of steps): W[n][k] = (code − zp)·scale − mins[n · K/32 + k/32]. float32 [N · K/32].
   */
  mins?: Float32Array;
}

export const blobBytes = (bits: NBits): number => (NBITS_BLOCK * bits) / 8;

function checkShape(n: number, k: number, bits: number): void {
  if (bits !== 4 && bits !== 8) throw new RangeError(`MatMulNBits: ${bits}-bit is not supported here (4 or 8)`);
  if (!Number.isInteger(n) || n <= 0 || !Number.isInteger(k) || k <= 0) throw new RangeError(`MatMulNBits: bad shape [${n}, ${k}]`);
  if (k % NBITS_BLOCK !== 0) throw new RangeError(`MatMulNBits: K = ${k} is not a multiple of ${NBITS_BLOCK}`);
}

/** The default (symmetric) zero points, packed as the op expects them. */
export function defaultZeroPoints(n: number, k: number, bits: NBits): Uint8Array {
  const blocks = k / NBITS_BLOCK;
  if (bits === 8) return new Uint8Array(n * blocks).fill(128);
  const perRow = Math.ceil(blocks / 2);
  const zp = new Uint8Array(n * perRow).fill(0x88);
  if (blocks % 2 === 1) for (let r = 0; r < n; r++) zp[r * perRow + perRow - 1] = 0x08; // padding nibble left 0
  return zp;
}

/**
 * Packs unsigned codes [N, K] (0..2^bits−1, row-major) and per-block scales [N · K/32] into B.
 * This is the one place that knows the nibble order.
 */
export function packCodes(codes: Uint8Array, scales: Float32Array, n: number, k: number, bits: NBits): PackedNBits {
  checkShape(n, k, bits);
  const blocks = k / NBITS_BLOCK;
  if (codes.length !== n * k) throw new RangeError(`packCodes: ${codes.length} codes for [${n}, ${k}]`);
  if (scales.length !== n * blocks) throw new RangeError(`packCodes: ${scales.length} scales for ${n} x ${blocks} blocks`);
  let b: Uint8Array;
  if (bits === 8) {
    b = codes.slice();
  } else {
    b = new Uint8Array((n * k) / 2);
    for (let i = 0, j = 0; i < n * k; i += 2, j++) {
      const lo = codes[i]!;
      const hi = codes[i + 1]!;
      if (lo > 15 || hi > 15) throw new RangeError(`packCodes: 4-bit code out of range at ${lo > 15 ? i : i + 1}`);
      b[j] = lo | (hi << 4);
    }
  }
  return { bits, blockSize: NBITS_BLOCK, n, k, b, scales, zeroPoints: defaultZeroPoints(n, k, bits) };
}

/**
 * Symmetric block quantisation of an fp32 weight [N out, K in].
 * 4-bit: like GGUF Q4_0, d = (value of largest magnitude) / −8, code = clamp(round(x/d) + 8, 0, 15).
 * 8-bit: d = max|x| / 127, code = round(x/d) + 128 (1..255).
 */
export function quantizeNBits(weight: Float32Array, n: number, k: number, bits: NBits): PackedNBits {
  checkShape(n, k, bits);
  if (weight.length !== n * k) throw new RangeError(`quantizeNBits: ${weight.length} values for [${n}, ${k}]`);
  const blocks = k / NBITS_BLOCK;
  const codes = new Uint8Array(n * k);
  const scales = new Float32Array(n * blocks);
  const zp = 1 << (bits - 1);
  const maxCode = (1 << bits) - 1;
  for (let blk = 0; blk < n * blocks; blk++) {
    const base = blk * NBITS_BLOCK;
    let amax = 0;
    let signedMax = 0;
    for (let i = 0; i < NBITS_BLOCK; i++) {
      const v = weight[base + i]!;
      if (Math.abs(v) > amax) {
        amax = Math.abs(v);
        signedMax = v;
      }
    }
    // Math.fround: the scale the op will read is a float32; quantise against exactly that value.
    const d = Math.fround(bits === 4 ? signedMax / -8 : amax / 127);
    scales[blk] = d;
    const inv = d === 0 ? 0 : 1 / d;
    for (let i = 0; i < NBITS_BLOCK; i++) {
      const q = Math.round(weight[base + i]! * inv) + zp;
      codes[base + i] = Math.min(maxCode, Math.max(0, q));
    }
  }
  return packCodes(codes, scales, n, k, bits);
}

/** The weight [N, K] that MatMulNBits (and the mins correction) computes with, as float32. */
export function dequantizeNBits(p: PackedNBits): Float32Array {
  const { n, k, bits, blockSize } = p;
  const blocks = k / blockSize;
  const zpPerRow = Math.ceil((blocks * bits) / 8);
  const out = new Float32Array(n * k);
  for (let i = 0; i < n * k; i++) {
    const code = bits === 8 ? p.b[i]! : (p.b[i >> 1]! >> ((i & 1) * 4)) & 0x0f;
    const row = Math.floor(i / k);
    const inRow = Math.floor((i % k) / blockSize);
    const blk = row * blocks + inRow;
    const zp = bits === 8 ? p.zeroPoints[row * zpPerRow + inRow]! : (p.zeroPoints[row * zpPerRow + (inRow >> 1)]! >> ((inRow & 1) * 4)) & 0x0f;
    let v = Math.fround((code - zp) * p.scales[blk]!);
    if (p.mins) v = Math.fround(v - p.mins[row * (k / 32) + Math.floor((i % k) / 32)]!);
    out[i] = v;
  }
  return out;
}

/**
 * Packs unsigned codes [N, K], scales [N · K/blockSize] and unpacked zero points (one per block,
 * [N · K/blockSize]) into the op's layout, with optional per-32 mins.
 */
export function packWithZeroPoints(codes: Uint8Array, scales: Float32Array, zeroPoints: Uint8Array, n: number, k: number, bits: NBits, blockSize: NBitsBlockSize, mins?: Float32Array): PackedNBits {
  if (k % blockSize !== 0 || k % NBITS_BLOCK !== 0) throw new RangeError(`MatMulNBits: K = ${k} is not a multiple of ${NBITS_BLOCK}`);
  const blocks = k / blockSize;
  if (codes.length !== n * k || scales.length !== n * blocks || zeroPoints.length !== n * blocks) throw new RangeError(`packWithZeroPoints: sizes do not match [${n}, ${k}] / ${blockSize}`);
  if (mins && mins.length !== (n * k) / 32) throw new RangeError(`packWithZeroPoints: ${mins.length} mins for [${n}, ${k}]`);
  let b: Uint8Array;
  let zp: Uint8Array;
  if (bits === 8) {
    b = codes;
    zp = zeroPoints;
  } else {
    b = new Uint8Array((n * k) / 2);
    for (let i = 0, j = 0; i < n * k; i += 2, j++) b[j] = (codes[i]! & 0x0f) | ((codes[i + 1]! & 0x0f) << 4);
    const perRow = Math.ceil(blocks / 2);
    zp = new Uint8Array(n * perRow);
    for (let r = 0; r < n; r++) {
      for (let q = 0; q < blocks; q++) {
        const at = r * perRow + (q >> 1);
        zp[at] = zp[at]! | ((zeroPoints[r * blocks + q]! & 0x0f) << ((q & 1) * 4));
      }
    }
  }
  const packed: PackedNBits = { bits, blockSize, n, k, b, scales, zeroPoints: zp, customZeroPoints: true };
  if (mins) packed.mins = mins;
  return packed;
}

// GGUF blocks ------------------------------------------------------------------------------------

/** GGUF Q4_0 block: fp16 d, then 16 bytes; byte j holds element j (low nibble) and j+16 (high). */
const Q4_0_BYTES = 18;
/** GGUF Q8_0 block: fp16 d, then 32 int8. */
const Q8_0_BYTES = 34;

/** Repacks a GGUF Q4_0 tensor [N, K] (raw bytes) into MatMulNBits 4-bit, bit for bit. */
export function fromQ4_0(raw: Uint8Array, n: number, k: number): PackedNBits {
  checkShape(n, k, 4);
  const blocks = (n * k) / NBITS_BLOCK;
  if (raw.length !== blocks * Q4_0_BYTES) throw new RangeError(`fromQ4_0: ${raw.length} bytes for ${blocks} blocks`);
  const b = new Uint8Array((n * k) / 2);
  const scales = new Float32Array(blocks);
  for (let blk = 0; blk < blocks; blk++) {
    const src = blk * Q4_0_BYTES;
    scales[blk] = float16BitsToFloat32(raw[src]! | (raw[src + 1]! << 8));
    const dst = blk * 16;
    for (let j = 0; j < 16; j++) {
      // element e = 2j' + h of the block lives in GGUF byte (e mod 16), nibble (e >= 16)
      const e0 = 2 * j;
      const e1 = 2 * j + 1;
      const c0 = (raw[src + 2 + (e0 % 16)]! >> (e0 >= 16 ? 4 : 0)) & 0x0f;
      const c1 = (raw[src + 2 + (e1 % 16)]! >> (e1 >= 16 ? 4 : 0)) & 0x0f;
      b[dst + j] = c0 | (c1 << 4);
    }
  }
  return { bits: 4, blockSize: NBITS_BLOCK, n, k, b, scales, zeroPoints: defaultZeroPoints(n, k, 4) };
}

/** Repacks a GGUF Q8_0 tensor [N, K] (raw bytes) into MatMulNBits 8-bit, bit for bit. */
export function fromQ8_0(raw: Uint8Array, n: number, k: number): PackedNBits {
  checkShape(n, k, 8);
  const blocks = (n * k) / NBITS_BLOCK;
  if (raw.length !== blocks * Q8_0_BYTES) throw new RangeError(`fromQ8_0: ${raw.length} bytes for ${blocks} blocks`);
  const b = new Uint8Array(n * k);
  const scales = new Float32Array(blocks);
  for (let blk = 0; blk < blocks; blk++) {
    const src = blk * Q8_0_BYTES;
    scales[blk] = float16BitsToFloat32(raw[src]! | (raw[src + 1]! << 8));
    for (let i = 0; i < NBITS_BLOCK; i++) b[blk * NBITS_BLOCK + i] = (raw[src + 2 + i]! + 128) & 0xff; // int8 q -> q + 128
  }
  return { bits: 8, blockSize: NBITS_BLOCK, n, k, b, scales, zeroPoints: defaultZeroPoints(n, k, 8) };
}
