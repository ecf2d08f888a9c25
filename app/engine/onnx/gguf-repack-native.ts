// The load path's GGUF -> MatMulNBits repack: native (native/src/gguf_repack.cc, one thread per
// core) where the addon is built, the TypeScript reference (gguf-repack.ts) otherwise. Both give
// the same PackedNBits, bit for bit (gguf-repack-native.test.ts checks every type); the reference
// also decides the errors: a tensor the native side refuses is handed to it, which throws its
// RangeError (or, for a shape only it takes, repacks it).
import { availableParallelism } from 'node:os';
import { isNativeAvailable, repackGguf as nativeRepack } from '../../../native/index.js';
import type { TensorDType } from '../model/types.ts';
import { ggmlTypeOfDtype } from '../model/gguf/ggml-types.ts';
import { repackGguf, REPACKABLE_TYPES } from './gguf-repack.ts';
import { defaultZeroPoints, type PackedNBits } from './matmul-nbits.ts';

/** ggml type ids (ggml.h) of the types repackGguf takes: what the native side is told. */
const GGML_IDS: Partial<Record<TensorDType, number>> = Object.fromEntries(REPACKABLE_TYPES.map((t) => [t, ggmlTypeOfDtype(t).id]));

/** Threads for a repack: every core the process may use (at most the native limit, 64). */
export function defaultRepackThreads(): number {
  return Math.max(1, Math.min(64, availableParallelism()));
}

/** repackGguf (same arguments, same result), natively on `threads` threads when the addon is built. */
export function repackGgufFast(dtype: TensorDType, raw: Uint8Array, n: number, k: number, threads: number = defaultRepackThreads()): PackedNBits {
  if (GGML_IDS[dtype] === undefined || !isNativeAvailable()) return repackGguf(dtype, raw, n, k);
  try {
    return repackGgufNative(dtype, raw, n, k, threads);
  } catch (error) {
    if ((error as { code?: unknown }).code === 'NATIVE_BAD_ARGUMENT') return repackGguf(dtype, raw, n, k);
    throw error;
  }
}

/** The native repack alone (no fallback): NativeError NATIVE_BAD_ARGUMENT for what it does not take, NATIVE_NOT_BUILT without the addon. */
export function repackGgufNative(dtype: TensorDType, raw: Uint8Array, n: number, k: number, threads: number): PackedNBits {
  const r = nativeRepack(GGML_IDS[dtype] ?? -1, raw, n, k, threads);
  // Q8_0 / Q4_0 repack to the op's default zero points (fromQ8_0 / fromQ4_0), the rest feed theirs.
  if (r.zeroPoints === null) return { bits: r.bits, blockSize: r.blockSize, n, k, b: r.b, scales: r.scales, zeroPoints: defaultZeroPoints(n, k, r.bits) };
  const packed: PackedNBits = { bits: r.bits, blockSize: r.blockSize, n, k, b: r.b, scales: r.scales, zeroPoints: r.zeroPoints, customZeroPoints: true };
  if (r.mins !== null) packed.mins = r.mins;
  return packed;
}
