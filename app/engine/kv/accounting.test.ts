import { describe, expect, it } from 'vitest';
import { fetchRatio, fullKvBytes, kvBytes, partialKeyBytes, rowBytes, selectedRows, speculationReadBytes, stepFetchRatio, stepKvBytes } from './accounting.ts';

describe('KV byte accounting', () => {
  it('row bytes per element type (int8 carries a float32 scale)', () => {
    expect(rowBytes(128, 'f16')).toBe(256);
    expect(rowBytes(128, 'f32')).toBe(512);
    expect(rowBytes(128, 'int8')).toBe(132);
  });

  it('K+V bytes = rows × headDim × 2 × element size', () => {
    expect(kvBytes(10, 64, 'f16')).toBe(10 * 64 * 2 * 2);
    expect(kvBytes(0, 64, 'f16')).toBe(0);
    expect(() => kvBytes(-1, 64, 'f16')).toThrow(/rows/);
    expect(() => kvBytes(1.5, 64, 'f16')).toThrow(/rows/);
  });

  it('per-step bytes sum per layer over KV heads', () => {
    const sel = [
      [Int32Array.of(0, 1, 2), Int32Array.of(4)], // layer 0: 4 rows
      [Int32Array.of(), Int32Array.of(1, 2)], // layer 1: 2 rows
    ];
    expect(selectedRows(sel[0]!)).toBe(4);
    const b = stepKvBytes(sel, 128, 'f16');
    expect(b.perLayer).toEqual([4 * 512, 2 * 512]);
    expect(b.total).toBe(6 * 512);
  });

  it('partial keys, speculation reads and the full pool (Llama-3-8B-like shapes)', () => {
    // 32 layers, 8 KV heads, d = 128, p = ⌊0.3·128⌋ = 38, 8192 tokens
    expect(partialKeyBytes(8192, 32, 8, 38)).toBe(8192 * 32 * 8 * 38 * 2);
    expect(speculationReadBytes(8192, 8, 38)).toBe(8192 * 8 * 38 * 2);
    expect(fullKvBytes(8192, 32, 8, 128, 'f16')).toBe(1024 ** 3); // 1 GiB
    expect(partialKeyBytes(8192, 32, 8, 38) / fullKvBytes(8192, 32, 8, 128, 'f16')).toBeCloseTo(38 / 256, 12);
  });

  it('fetch ratio n/N and its step mean', () => {
    expect(fetchRatio(25, 100)).toBe(0.25);
    expect(fetchRatio(0, 0)).toBe(0);
    expect(() => fetchRatio(-1, 4)).toThrow();
    const sel = [
      [Int32Array.of(0, 1), Int32Array.of(2, 3)], // 4 of 2·10
      [Int32Array.of(0, 1, 2, 3, 4, 5), Int32Array.of(1, 2, 3, 4, 5, 6)], // 12 of 2·10
    ];
    expect(stepFetchRatio(sel, [10, 10])).toBeCloseTo(16 / 40, 12);
    expect(() => stepFetchRatio(sel, [10])).toThrow();
  });
});
