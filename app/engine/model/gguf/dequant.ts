// Dequantisation of ggml blocks to fp32, following ggml's reference (scalar) definitions.
// Arithmetic is rounded to fp32 wherever ggml multiplies two floats, so results match ggml's
// scalar path bit for bit (except where a C compiler fuses a multiply-add).
//
// Block layouts (little-endian, no padding):
//   Q4_0  32 el, 18 B: d f16 | qs[16]            x[j] = (lo(qs[j]) - 8)·d, x[j+16] = (hi(qs[j]) - 8)·d
//   Q4_1  32 el, 20 B: d f16 | m f16 | qs[16]    x = q·d + m
//   Q5_0  32 el, 22 B: d f16 | qh u32 | qs[16]   q = nibble | (bit j (or j+16) of qh) << 4; x = (q - 16)·d
//   Q5_1  32 el, 24 B: d f16 | m f16 | qh u32 | qs[16]   x = q·d + m
//   Q8_0  32 el, 34 B: d f16 | qs i8[32]         x = q·d
//   Q4_K 256 el, 144 B: d f16 | dmin f16 | scales[12] | qs[128]
//        8 sub-blocks of 32; 6-bit scale sc and min m per sub-block; x = d·sc·q - dmin·m
//   Q5_K 256 el, 176 B: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]   (5th bit from qh)
//   Q6_K 256 el, 210 B: ql[128] | qh[64] | scales i8[16] | d f16           x = d·sc·(q - 32)
//   MXFP4 32 el, 17 B: e u8 (E8M0) | qs[16]     x[j] = kv[lo(qs[j])]·2^(e-128), x[j+16] = kv[hi(qs[j])]·2^(e-128)
//        kv = E2M1 doubled: 0, 1, 2, 3, 4, 6, 8, 12, -0, -1, -2, -3, -4, -6, -8, -12 (ggml's kvalues_mxfp4);
//        2^(e-128) is ggml's GGML_E8M0_TO_FP32_HALF (subnormal for e < 2); every product exact in fp32
import type { TensorDType } from '../types.ts';
import { ggmlTypeOfDtype } from './ggml-types.ts';

// ---------------------------------------------------------------- fp16 / bf16

let halfTable: Float32Array | undefined;

function buildHalfTable(): Float32Array {
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exponent = (h >> 10) & 0x1f;
    const mantissa = h & 0x3ff;
    if (exponent === 0) table[h] = sign * mantissa * 2 ** -24; // zero and subnormals
    else if (exponent === 31) table[h] = mantissa === 0 ? sign * Infinity : NaN;
    else table[h] = sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
  }
  return table;
}

/** IEEE half-precision bits to a number (exact: every fp16 value is an fp32 value). */
export function halfToFloat(bits: number): number {
  halfTable ??= buildHalfTable();
  return halfTable[bits & 0xffff] as number;
}

const bf16Scratch = new DataView(new ArrayBuffer(4));

/** bfloat16 bits to a number: the top half of an fp32. */
export function bf16ToFloat(bits: number): number {
  bf16Scratch.setUint32(0, (bits & 0xffff) << 16, false);
  return bf16Scratch.getFloat32(0, false);
}

// ---------------------------------------------------------------- helpers

const f = Math.fround;

function u16(b: Uint8Array, o: number): number {
  return (b[o] as number) | ((b[o + 1] as number) << 8);
}

function u32(b: Uint8Array, o: number): number {
  return ((b[o] as number) | ((b[o + 1] as number) << 8) | ((b[o + 2] as number) << 16) | ((b[o + 3] as number) << 24)) >>> 0;
}

function half(b: Uint8Array, o: number): number {
  halfTable ??= buildHalfTable();
  return halfTable[u16(b, o)] as number;
}

/** Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes at `o`. */
function scaleMinK4(j: number, b: Uint8Array, o: number): [number, number] {
  if (j < 4) return [(b[o + j] as number) & 63, (b[o + j + 4] as number) & 63];
  const hi = b[o + j + 4] as number;
  const scale = (hi & 0x0f) | (((b[o + j - 4] as number) >> 6) << 4);
  const min = (hi >> 4) | (((b[o + j] as number) >> 6) << 4);
  return [scale, min];
}

// ---------------------------------------------------------------- block kernels

type BlockKernel = (src: Uint8Array, o: number, dst: Float32Array, y: number) => void;

const q4_0: BlockKernel = (b, o, y, i) => {
  const d = half(b, o);
  for (let j = 0; j < 16; j++) {
    const q = b[o + 2 + j] as number;
    y[i + j] = ((q & 0x0f) - 8) * d;
    y[i + j + 16] = ((q >> 4) - 8) * d;
  }
};

const q4_1: BlockKernel = (b, o, y, i) => {
  const d = half(b, o);
  const m = half(b, o + 2);
  for (let j = 0; j < 16; j++) {
    const q = b[o + 4 + j] as number;
    y[i + j] = f((q & 0x0f) * d) + m;
    y[i + j + 16] = f((q >> 4) * d) + m;
  }
};

const q5_0: BlockKernel = (b, o, y, i) => {
  const d = half(b, o);
  const qh = u32(b, o + 2);
  for (let j = 0; j < 16; j++) {
    const q = b[o + 6 + j] as number;
    const h0 = ((qh >>> j) << 4) & 0x10;
    const h1 = (qh >>> (j + 12)) & 0x10;
    y[i + j] = (((q & 0x0f) | h0) - 16) * d;
    y[i + j + 16] = (((q >> 4) | h1) - 16) * d;
  }
};

const q5_1: BlockKernel = (b, o, y, i) => {
  const d = half(b, o);
  const m = half(b, o + 2);
  const qh = u32(b, o + 4);
  for (let j = 0; j < 16; j++) {
    const q = b[o + 8 + j] as number;
    const h0 = ((qh >>> j) << 4) & 0x10;
    const h1 = (qh >>> (j + 12)) & 0x10;
    y[i + j] = f(((q & 0x0f) | h0) * d) + m;
    y[i + j + 16] = f(((q >> 4) | h1) * d) + m;
  }
};

const q8_0: BlockKernel = (b, o, y, i) => {
  const d = half(b, o);
  for (let j = 0; j < 32; j++) {
    const q = b[o + 2 + j] as number;
    y[i + j] = (q > 127 ? q - 256 : q) * d;
  }
};

/** ggml's kvalues_mxfp4 (E2M1 values doubled; code 8, negative zero, stored as an integer 0). */
export const MXFP4_VALUES: readonly number[] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/** ggml_e8m0_to_fp32_half: 2^(e - 128) (e = 0, 1 give fp32's subnormals 2^-128, 2^-127). */
export function e8m0Half(e: number): number {
  return 2 ** (e - 128);
}

const mxfp4: BlockKernel = (b, o, y, i) => {
  const d = e8m0Half(b[o] as number);
  for (let j = 0; j < 16; j++) {
    const q = b[o + 1 + j] as number;
    y[i + j] = (MXFP4_VALUES[q & 0x0f] as number) * d;
    y[i + j + 16] = (MXFP4_VALUES[q >> 4] as number) * d;
  }
};

const q4_K: BlockKernel = (b, o, y, i) => {
  const d = half(b, o);
  const dmin = half(b, o + 2);
  const scales = o + 4;
  let qs = o + 16;
  let out = i;
  for (let sub = 0; sub < 8; sub += 2) {
    const [sc1, m1] = scaleMinK4(sub, b, scales);
    const [sc2, m2] = scaleMinK4(sub + 1, b, scales);
    const d1 = f(d * sc1), min1 = f(dmin * m1);
    const d2 = f(d * sc2), min2 = f(dmin * m2);
    for (let l = 0; l < 32; l++) y[out + l] = f(d1 * ((b[qs + l] as number) & 0x0f)) - min1;
    for (let l = 0; l < 32; l++) y[out + 32 + l] = f(d2 * ((b[qs + l] as number) >> 4)) - min2;
    qs += 32;
    out += 64;
  }
};

const q5_K: BlockKernel = (b, o, y, i) => {
  const d = half(b, o);
  const dmin = half(b, o + 2);
  const scales = o + 4;
  const qh = o + 16;
  let ql = o + 48;
  let out = i;
  let u1 = 1, u2 = 2;
  for (let sub = 0; sub < 8; sub += 2) {
    const [sc1, m1] = scaleMinK4(sub, b, scales);
    const [sc2, m2] = scaleMinK4(sub + 1, b, scales);
    const d1 = f(d * sc1), min1 = f(dmin * m1);
    const d2 = f(d * sc2), min2 = f(dmin * m2);
    for (let l = 0; l < 32; l++) {
      const high = (b[qh + l] as number) & u1 ? 16 : 0;
      y[out + l] = f(d1 * (((b[ql + l] as number) & 0x0f) + high)) - min1;
    }
    for (let l = 0; l < 32; l++) {
      const high = (b[qh + l] as number) & u2 ? 16 : 0;
      y[out + 32 + l] = f(d2 * (((b[ql + l] as number) >> 4) + high)) - min2;
    }
    ql += 32;
    out += 64;
    u1 <<= 2;
    u2 <<= 2;
  }
};

const q6_K: BlockKernel = (b, o, y, i) => {
  const d = half(b, o + 208);
  let ql = o, qh = o + 128, sc = o + 192, out = i;
  const scale = (k: number): number => {
    const s = b[sc + k] as number;
    return s > 127 ? s - 256 : s;
  };
  for (let half128 = 0; half128 < 2; half128++) {
    for (let l = 0; l < 32; l++) {
      const is = l >> 4;
      const h = b[qh + l] as number;
      const lo = b[ql + l] as number;
      const lo32 = b[ql + l + 32] as number;
      const q1 = ((lo & 0x0f) | ((h & 3) << 4)) - 32;
      const q2 = ((lo32 & 0x0f) | (((h >> 2) & 3) << 4)) - 32;
      const q3 = ((lo >> 4) | (((h >> 4) & 3) << 4)) - 32;
      const q4 = ((lo32 >> 4) | (((h >> 6) & 3) << 4)) - 32;
      y[out + l] = f(d * scale(is)) * q1;
      y[out + l + 32] = f(d * scale(is + 2)) * q2;
      y[out + l + 64] = f(d * scale(is + 4)) * q3;
      y[out + l + 96] = f(d * scale(is + 6)) * q4;
    }
    out += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
};

const KERNELS: Partial<Record<TensorDType, BlockKernel>> = {
  Q4_0: q4_0,
  Q4_1: q4_1,
  Q5_0: q5_0,
  Q5_1: q5_1,
  Q8_0: q8_0,
  Q4_K: q4_K,
  Q5_K: q5_K,
  Q6_K: q6_K,
  MXFP4: mxfp4,
};

// ---------------------------------------------------------------- entry point

/** Bytes that `elements` values of `dtype` occupy (elements must be a whole number of blocks). */
export function byteSizeOf(dtype: TensorDType, elements: number): number {
  const info = ggmlTypeOfDtype(dtype);
  if (elements % info.blockSize !== 0) throw new RangeError(`${elements} elements are not a whole number of ${dtype} blocks of ${info.blockSize}`);
  return (elements / info.blockSize) * info.typeSize;
}

/**
 * Widen or dequantise `elements` values of `dtype` stored in `src` to a new Float32Array.
 * `src` must hold exactly the bytes of those elements (the GGUF reader guarantees it).
 */
export function dequantize(dtype: TensorDType, src: Uint8Array, elements: number): Float32Array {
  const expected = byteSizeOf(dtype, elements);
  if (src.length !== expected) throw new RangeError(`${dtype}: ${elements} elements need ${expected} bytes, got ${src.length}`);
  switch (dtype) {
    case 'F32': {
      // Copy into a fresh, aligned buffer (the source may sit at any offset; never use
      // src.slice(): on a Node Buffer it is a view, not a copy).
      const out = new Float32Array(elements);
      new Uint8Array(out.buffer).set(src);
      return out;
    }
    case 'F16': {
      halfTable ??= buildHalfTable();
      const out = new Float32Array(elements);
      for (let i = 0; i < elements; i++) out[i] = halfTable[u16(src, 2 * i)] as number;
      return out;
    }
    case 'BF16': {
      const bits = new Uint32Array(elements);
      for (let i = 0; i < elements; i++) bits[i] = u16(src, 2 * i) << 16;
      return new Float32Array(bits.buffer);
    }
    default: {
      const kernel = KERNELS[dtype];
      if (kernel === undefined) throw new RangeError(`no dequantiser for ${dtype}`);
      const info = ggmlTypeOfDtype(dtype);
      const out = new Float32Array(elements);
      const blocks = elements / info.blockSize;
      for (let k = 0; k < blocks; k++) kernel(src, k * info.typeSize, out, k * info.blockSize);
      return out;
    }
  }
}
