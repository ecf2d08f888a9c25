// Test-only: a minimal safetensors writer (the full fixture writer lives in test/fixtures).
// Values are given as numbers and rounded to the stored type (round to nearest even).
import type { SafetensorsDType } from './dtype.ts';

export interface WriterTensor {
  name: string;
  dtype: SafetensorsDType;
  shape: number[];
  values: ArrayLike<number>;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function floatToHalfBits(value: number): number {
  f32[0] = value;
  const bits = u32[0] as number;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1) === 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) === 1)) h++; // may carry into the exponent: correct
  return sign | h;
}

export function floatToBf16Bits(value: number): number {
  f32[0] = value;
  const bits = u32[0] as number;
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x7fffff) !== 0) return (bits >>> 16) | 0x40;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

export function encodeValues(dtype: SafetensorsDType, values: ArrayLike<number>): Uint8Array {
  if (dtype === 'F32') return new Uint8Array(Float32Array.from(values).buffer);
  const out = new Uint16Array(values.length);
  const encode = dtype === 'F16' ? floatToHalfBits : floatToBf16Bits;
  for (let i = 0; i < values.length; i++) out[i] = encode(values[i] as number);
  return new Uint8Array(out.buffer);
}

/** Header length field + header text (space-padded to a multiple of 8) + data. */
export function assembleSafetensors(headerText: string, data: Uint8Array, headerLength?: bigint): Uint8Array {
  let header = new TextEncoder().encode(headerText);
  if (header.length % 8 !== 0) header = new TextEncoder().encode(headerText + ' '.repeat(8 - (header.length % 8)));
  const out = new Uint8Array(8 + header.length + data.length);
  new DataView(out.buffer).setBigUint64(0, headerLength ?? BigInt(header.length), true);
  out.set(header, 8);
  out.set(data, 8 + header.length);
  return out;
}

/** A valid safetensors file holding `tensors` in order, each tensor right after the previous. */
export function encodeSafetensors(tensors: WriterTensor[], metadata?: Record<string, string>): Uint8Array {
  const header: Record<string, unknown> = {};
  if (metadata !== undefined) header.__metadata__ = metadata;
  const chunks: Uint8Array[] = [];
  let offset = 0;
  for (const tensor of tensors) {
    const data = encodeValues(tensor.dtype, tensor.values);
    header[tensor.name] = { dtype: tensor.dtype, shape: tensor.shape, data_offsets: [offset, offset + data.length] };
    chunks.push(data);
    offset += data.length;
  }
  const data = new Uint8Array(offset);
  let at = 0;
  for (const chunk of chunks) {
    data.set(chunk, at);
    at += chunk.length;
  }
  return assembleSafetensors(JSON.stringify(header), data);
}

/** Deterministic PRNG (mulberry32) for seeded tests. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function randomValues(random: () => number, count: number, scale = 1): Float32Array {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = (random() * 2 - 1) * scale;
  return out;
}
