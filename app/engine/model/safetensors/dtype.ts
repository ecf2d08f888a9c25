// Element types of safetensors files that Longhand reads, and their widening to fp32.
// Safetensors data is little-endian. Widening writes fp32 bit patterns through a Uint32Array
// view of the output, so it assumes a little-endian host (every platform Electron ships on);
// the assertion below makes a big-endian host fail loudly instead of reading garbage.

export type SafetensorsDType = 'F32' | 'F16' | 'BF16';

/** Bytes per element. */
export const DTYPE_BYTES: Readonly<Record<SafetensorsDType, number>> = { F32: 4, F16: 2, BF16: 2 };

export function isSafetensorsDType(value: string): value is SafetensorsDType {
  return value === 'F32' || value === 'F16' || value === 'BF16';
}

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function assertLittleEndianHost(): void {
  if (!LITTLE_ENDIAN_HOST) throw new Error('Longhand reads tensor data on little-endian hosts only');
}

/** fp32 bit pattern of an IEEE half (exact; NaN payloads kept). */
export function halfToFloatBits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >> 10) & 0x1f;
  let frac = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (frac << 13)) >>> 0; // Inf / NaN
  if (exp !== 0) return (sign | ((exp + 112) << 23) | (frac << 13)) >>> 0; // normal: rebias 15 → 127
  if (frac === 0) return sign >>> 0; // ±0
  // subnormal: value = frac · 2^-24; normalise so the leading 1 sits at bit 10
  let shifts = 0;
  while ((frac & 0x400) === 0) {
    frac <<= 1;
    shifts++;
  }
  return (sign | ((113 - shifts) << 23) | ((frac & 0x3ff) << 13)) >>> 0;
}

let halfTable: Uint32Array | undefined;

/** All 65536 half → fp32 bit patterns (256 KiB, built on first use). */
function halfToFloatTable(): Uint32Array {
  if (halfTable === undefined) {
    halfTable = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) halfTable[h] = halfToFloatBits(h);
  }
  return halfTable;
}

/** Reads `count` little-endian u16 values, aligned or not. */
function readU16(bytes: Uint8Array, count: number): Uint16Array {
  if (bytes.byteOffset % 2 === 0) return new Uint16Array(bytes.buffer, bytes.byteOffset, count);
  const copy = new Uint16Array(count);
  new Uint8Array(copy.buffer).set(bytes.subarray(0, count * 2));
  return copy;
}

/** Widens raw little-endian tensor bytes to a new Float32Array (always a fresh allocation). */
export function widenToFloat32(dtype: SafetensorsDType, bytes: Uint8Array, elements: number): Float32Array {
  assertLittleEndianHost();
  const out = new Float32Array(elements);
  if (dtype === 'F32') {
    new Uint8Array(out.buffer).set(bytes.subarray(0, elements * 4));
    return out;
  }
  const bits = new Uint32Array(out.buffer);
  const src = readU16(bytes, elements);
  if (dtype === 'F16') {
    const table = halfToFloatTable();
    for (let i = 0; i < elements; i++) bits[i] = table[src[i] as number] as number;
  } else {
    for (let i = 0; i < elements; i++) bits[i] = (src[i] as number) << 16;
  }
  return out;
}
