// KvPool snapshot sections through the JS facade: snapshotLayerBytes / exportLayer / importLayer
// (native/src/kv_pool.h "snapshots"). Round trips for every KV type with partial rows, the byte
// layout read back from JS, every argument check, and a size that shows the copy is memcpy-fast.
// Needs the addon built (`npm run build:native`).
import { describe, expect, it } from 'vitest';
import { NativeError as CommonNativeError } from '../app/common/errors.ts';
import type { KvPool, KvType } from './index.js';
import { createKvPool } from './index.js';

function expectBadArgument(fn: () => unknown, message: RegExp): CommonNativeError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(CommonNativeError);
    expect((error as CommonNativeError).code).toBe('NATIVE_BAD_ARGUMENT');
    expect((error as CommonNativeError).message).toMatch(message);
    return error as CommonNativeError;
  }
  throw new Error('expected NATIVE_BAD_ARGUMENT, nothing was thrown');
}

/** Deterministic values in about [-3.4, 3.4]. */
function values(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = ((s >>> 0) / 2 ** 32 - 0.5) * 6.8;
  }
  return out;
}

const L = 2;
const H = 2;
const D = 12;
const P = 4;
const T = 19;

function filledPool(kvType: KvType, budgetTokens: number): KvPool {
  const perToken = L * H * (2 * (D * (kvType === 'fp32' ? 4 : kvType === 'int8' ? 1 : 2) + (kvType === 'int8' ? 4 : 0)) + 4 + 2 * P);
  return createKvPool({ budgetBytes: perToken * budgetTokens + 4096 + L * H * D * P * 4, layers: L, kvHeads: H, headDim: D, kvType, partialDim: P });
}

const proj = values(H * D * P, 77); // [kvHeads, headDim, partialDim]

describe('KvPool snapshot sections', () => {
  for (const kvType of ['fp16', 'fp32', 'int8'] as const) {
    it(`${kvType}: exportLayer -> importLayer into a pool of another capacity gives the same rows, positions and partial rows`, () => {
      const src = filledPool(kvType, 40);
      const dst = filledPool(kvType, 64);
      expect(dst.capacityTokens).not.toBe(src.capacityTokens);
      src.setPartialProjection(1, proj);
      for (let l = 0; l < L; l++) src.appendBatch(l, values(T * H * D, 10 + l), values(T * H * D, 20 + l), 5); // positions 5..23
      const eb = kvType === 'fp32' ? 4 : kvType === 'int8' ? 1 : 2;
      const bytes = src.snapshotLayerBytes(T);
      expect(bytes).toBe(2 * H * T * D * eb + (kvType === 'int8' ? 2 * H * T * 4 : 0) + 4 * T);
      expect(dst.snapshotLayerBytes(T)).toBe(bytes); // the section does not depend on capacity
      // an unaligned view into a bigger buffer: importLayer copies bytewise
      const backing = new Uint8Array(bytes + 7);
      const section = backing.subarray(3, 3 + bytes);
      src.exportLayer(1, T, section);
      const view = new DataView(section.buffer, section.byteOffset, section.byteLength);
      for (let t = 0; t < T; t++) expect(view.getInt32(bytes - 4 * T + 4 * t, true)).toBe(5 + t); // positions last
      if (kvType === 'fp32') expect(view.getFloat32((1 * T + 2) * D * 4 + 3 * 4, true)).toBe(src.readK(1, 1, 2)[3]); // K[head 1, slot 2, 3]
      dst.setPartialProjection(1, proj); // set before import: import rebuilds the partial rows
      dst.importLayer(1, T, section);
      expect(dst.length(1)).toBe(T);
      expect(dst.length(0)).toBe(0);
      for (let g = 0; g < H; g++)
        for (let s = 0; s < T; s++) {
          expect(dst.readK(1, g, s)).toEqual(src.readK(1, g, s));
          expect(dst.readV(1, g, s)).toEqual(src.readV(1, g, s));
          expect(dst.readPartialK(1, g, s)).toEqual(src.readPartialK(1, g, s));
          expect(dst.position(1, s)).toBe(5 + s);
        }
      // the next token continues at slot T, as in the source
      const k = values(H * D, 99);
      expect(dst.append(1, k, k, 5 + T)).toBe(T);
      src.free();
      dst.free();
    });
  }

  it('refuses every bad argument with NATIVE_BAD_ARGUMENT naming the problem, and changes nothing', () => {
    const src = filledPool('fp16', 40);
    src.appendBatch(0, values(T * H * D, 1), values(T * H * D, 2), 0);
    const bytes = src.snapshotLayerBytes(T);
    const section = new Uint8Array(bytes);
    src.exportLayer(0, T, section);
    expectBadArgument(() => src.snapshotLayerBytes(src.capacityTokens + 1), /tokens must be an integer in \[0, \d+\]/);
    expectBadArgument(() => src.exportLayer(0, T + 1, new Uint8Array(src.snapshotLayerBytes(T + 1))), /more than layer 0 holds \(19\)/);
    expectBadArgument(() => src.exportLayer(2, T, section), /layer must be an integer in \[0, 1\]/);
    expectBadArgument(() => src.exportLayer(0, T, new Uint8Array(bytes - 1)), /exactly snapshotLayerBytes\(19\) = \d+ bytes, has \d+/);
    expectBadArgument(() => src.exportLayer(0, T, new Float32Array(bytes / 4) as unknown as Uint8Array), /out must be a Uint8Array/);
    expectBadArgument(() => src.importLayer(0, T, section), /layer 0 holds 19 tokens; import needs an empty layer/);
    expectBadArgument(() => src.importLayer(1, T, new Uint8Array(bytes + 1)), /data must be exactly/);
    expectBadArgument(() => src.importLayer(1, src.capacityTokens + 1, section), /more than the pool's capacity/);
    expectBadArgument(() => src.importLayer(1, 1.5, section), /tokens must be an integer/);
    const repeat = section.slice();
    new DataView(repeat.buffer).setInt32(bytes - 4 * T + 4 * 7, 6, true); // slot 7 repeats slot 6's position
    expectBadArgument(() => src.importLayer(1, T, repeat), /position 6 of slot 7 does not increase/);
    const negative = section.slice();
    new DataView(negative.buffer).setInt32(bytes - 4 * T, -3, true);
    expectBadArgument(() => src.importLayer(1, T, negative), /position -3 of slot 0 is negative/);
    expect(src.length(1)).toBe(0); // nothing was imported by any refused call
    src.importLayer(1, T, section);
    expect(src.readK(1, 1, 18)).toEqual(src.readK(0, 1, 18));

    const evicting = createKvPool({ budgetBytes: 1 << 16, layers: 1, kvHeads: 1, headDim: 8, eviction: { sinks: 1, recent: 2, ageEvery: 4 } });
    expectBadArgument(() => evicting.exportLayer(0, 0, new Uint8Array(0)), /exportLayer: this KV pool evicts/);
    expectBadArgument(() => evicting.importLayer(0, 0, new Uint8Array(0)), /importLayer: this KV pool evicts/);
    evicting.free();
    src.free();
    expectBadArgument(() => src.exportLayer(0, 0, new Uint8Array(0)), /freed/);
    expectBadArgument(() => src.importLayer(0, 0, new Uint8Array(0)), /freed/);
    expectBadArgument(() => src.snapshotLayerBytes(0), /freed/);
  });

  it('copies a 32 MiB layer section at memcpy speed (export + import well under a second)', () => {
    // 4 KV heads x 64 dims x 32,768 tokens fp16: K and V 16 MiB each, positions 128 KiB
    const pool = createKvPool({ budgetBytes: 2 * 4 * (2 * 64 * 2 + 4) * 32_768 + (1 << 16), layers: 2, kvHeads: 4, headDim: 64 });
    const tokens = pool.capacityTokens;
    expect(tokens).toBeGreaterThanOrEqual(32_768);
    const chunk = 1024;
    for (let t = 0; t < tokens; t += chunk) {
      const n = Math.min(chunk, tokens - t);
      const kv = values(n * 4 * 64, t + 1);
      pool.appendBatch(0, kv, kv, t);
    }
    const section = new Uint8Array(pool.snapshotLayerBytes(tokens));
    const t0 = performance.now();
    pool.exportLayer(0, tokens, section);
    pool.importLayer(1, tokens, section);
    const ms = performance.now() - t0;
    expect(pool.readV(1, 3, tokens - 1)).toEqual(pool.readV(0, 3, tokens - 1));
    expect(pool.position(1, tokens - 1)).toBe(tokens - 1);
    // 2 x 32 MiB moved; even a slow memcpy (0.5 GB/s, first-touch page faults included) takes ~140 ms
    expect(ms).toBeLessThan(1500);
    pool.free();
  });
});
