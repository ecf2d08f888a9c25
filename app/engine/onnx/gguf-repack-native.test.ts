// The native GGUF repack (native/src/gguf_repack.cc via gguf-repack-native.ts) against the
// TypeScript reference (gguf-repack.ts): the same PackedNBits, every byte and every float's bits,
// on every type, for random bytes (NaN / Inf / subnormal fp16 fields included), shapes with an odd
// number of blocks per row (the 4-bit zero points' padding nibble) and tensors big enough to be
// split over several threads.
import { describe, expect, it } from 'vitest';

import type { TensorDType } from '../model/types.ts';
import { ggmlTypeOfDtype } from '../model/gguf/ggml-types.ts';
import { repackGguf, REPACKABLE_TYPES } from './gguf-repack.ts';
import { repackGgufFast, repackGgufNative } from './gguf-repack-native.ts';
import type { PackedNBits } from './matmul-nbits.ts';
import { rng } from './test-helpers.ts';
import { isNativeAvailable } from '../../../native/index.js';

function randomRaw(dtype: TensorDType, elements: number, seed: number): Uint8Array {
  const b = ggmlTypeOfDtype(dtype);
  const r = rng(seed);
  return new Uint8Array((elements / b.blockSize) * b.typeSize).map(() => Math.floor(r() * 256));
}

const bits32 = (a: Float32Array | undefined): Uint32Array | undefined => (a === undefined ? undefined : new Uint32Array(a.buffer, a.byteOffset, a.length));

/** Same fields, same bytes, floats compared by their bits. */
function expectSameBits(mine: PackedNBits, ref: PackedNBits): void {
  expect(Object.keys(mine).sort()).toEqual(Object.keys(ref).sort());
  expect({ ...mine, b: undefined, scales: undefined, zeroPoints: undefined, mins: undefined }).toEqual({ ...ref, b: undefined, scales: undefined, zeroPoints: undefined, mins: undefined });
  expect(Buffer.compare(Buffer.from(mine.b.buffer, mine.b.byteOffset, mine.b.length), Buffer.from(ref.b.buffer, ref.b.byteOffset, ref.b.length))).toBe(0);
  expect(Buffer.compare(Buffer.from(mine.zeroPoints), Buffer.from(ref.zeroPoints))).toBe(0);
  // first differing index, so a failure says where
  const firstDiff = (x: Uint32Array | undefined, y: Uint32Array | undefined): number => {
    if (x === undefined || y === undefined) return x === y ? -1 : 0;
    if (x.length !== y.length) return 0;
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
    return -1;
  };
  expect(firstDiff(bits32(mine.scales), bits32(ref.scales))).toBe(-1);
  expect(firstDiff(bits32(mine.mins), bits32(ref.mins))).toBe(-1);
}

describe.skipIf(!isNativeAvailable())('native repackGguf == the TypeScript reference', () => {
  // [n, k]: k = 96 gives 3 blocks of 32 per row (odd: the padding nibble), n·k still whole 256-blocks
  const small: [number, number][] = [
    [8, 96],
    [3, 256],
    [5, 512],
  ];
  for (const dtype of REPACKABLE_TYPES) {
    it(`${dtype}: small shapes, 1 and 3 threads`, () => {
      for (const [n, k] of small) {
        if (dtype === 'Q6_K' && k % 16 !== 0) continue;
        const raw = randomRaw(dtype, n * k, n * 1000 + k);
        const ref = repackGguf(dtype, raw, n, k);
        for (const threads of [1, 3]) expectSameBits(repackGgufNative(dtype, raw, n, k, threads), ref);
      }
    });

    it(`${dtype}: a tensor split over 1, 2, 3 and 7 threads`, () => {
      const n = 640;
      const k = 4096 + 32 * 3; // 131 blocks of 32 per row; n·k is whole 256-blocks
      const raw = randomRaw(dtype, n * k, 77);
      const ref = repackGguf(dtype, raw, n, k);
      for (const threads of [1, 2, 3, 7]) expectSameBits(repackGgufNative(dtype, raw, n, k, threads), ref);
      expectSameBits(repackGgufFast(dtype, raw, n, k), ref);
    });
  }

  it('a subarray of a bigger buffer (as tensor views of a mapped file are)', () => {
    const n = 16;
    const k = 512;
    const raw = randomRaw('Q4_K', n * k, 5);
    const file = new Uint8Array(raw.length + 100);
    file.set(raw, 37);
    expectSameBits(repackGgufNative('Q4_K', file.subarray(37, 37 + raw.length), n, k, 2), repackGguf('Q4_K', raw, n, k));
  });

  it('refuses what the reference refuses, with the reference error', () => {
    expect(() => repackGgufNative('Q8_0', new Uint8Array(34 * 3), 1, 97, 1)).toThrow(expect.objectContaining({ code: 'NATIVE_BAD_ARGUMENT' }));
    expect(() => repackGgufNative('Q8_0', new Uint8Array(34), 1, 64, 1)).toThrow(expect.objectContaining({ code: 'NATIVE_BAD_ARGUMENT' }));
    expect(() => repackGgufFast('Q8_0', new Uint8Array(34 * 3), 1, 96 + 1)).toThrow(RangeError);
    expect(() => repackGgufFast('Q4_0', new Uint8Array(10), 1, 32)).toThrow(/bytes for/);
    expect(() => repackGgufFast('F16', new Uint8Array(64), 1, 32)).toThrow(/not a block-quantised type/);
  });
});
