// The JS facade of the native addon: loading, mapFile, KvPool lifecycle, argument checks,
// attend vs the scalar reference. Needs the addon built (`npm run build:native`).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NativeError as CommonNativeError } from '../app/common/errors.ts';
import type { KvPool } from './index.js';
import type { AttentionArgs } from './index.js';
import { ADDON_PATH, NativeError, attend, attendCausal, attendCausalReference, attendReference, attendSlots, attentionKernel, attentionScores, createKvPool, createSpeculator, h2oAccumulate, loadAddon, mapFile, mallocTrim, measureReadBandwidth, setMallocMmapThreshold, snapkvCompress } from './index.js';

const dir = mkdtempSync(join(tmpdir(), 'longhand-native-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs fn, which must throw a NativeError with `code`; returns it. */
function expectNativeError(fn: () => unknown, code: string): CommonNativeError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(CommonNativeError);
    expect((error as CommonNativeError).code).toBe(code);
    return error as CommonNativeError;
  }
  throw new Error(`expected a NativeError ${code}, nothing was thrown`);
}

/** Deterministic normal-ish values. */
function randomArray(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    let acc = 0;
    for (let j = 0; j < 4; j++) {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      acc += (s >>> 0) / 2 ** 32;
    }
    out[i] = (acc - 2) * 1.7;
  }
  return out;
}

describe('loadAddon', () => {
  it('loads the built addon and exports the ABI it was built for', () => {
    const binding = loadAddon();
    expect(binding.abiVersion).toBe(20);
    expect(ADDON_PATH).toMatch(/native[/\\]build[/\\]Release[/\\]longhand\.node$/);
    expect(['avx512', 'avx2-fma-f16c', 'portable']).toContain(attentionKernel());
    expect(NativeError).toBe(CommonNativeError); // under a TypeScript loader the facade throws app/common's class
  });

  it('a missing binary throws NATIVE_NOT_BUILT naming the path and the rebuild command', () => {
    const missing = join(dir, 'no-such', 'longhand.node');
    const error = expectNativeError(() => loadAddon(missing), 'NATIVE_NOT_BUILT');
    expect(error.message).toContain(missing);
    expect(error.message).toContain('npm run build:native');
    expect(error.message).toContain('python3, make and g++');
    expect(error.details.path).toBe(missing);
  });

  it('a file that is not an addon throws NATIVE_NOT_BUILT too', () => {
    const bogus = join(dir, 'bogus.node');
    writeFileSync(bogus, 'not an ELF file');
    expectNativeError(() => loadAddon(bogus), 'NATIVE_NOT_BUILT');
  });
});

describe('mapFile', () => {
  const bytes = new Uint8Array(100_003).map((_, i) => (i * 31 + 7) & 0xff);
  const file = join(dir, 'model.bin');
  writeFileSync(file, bytes);

  for (const copy of [false, true]) {
    it(`returns the file's bytes and detaches on close (${copy ? 'copied' : 'external'} buffer)`, () => {
      const mapped = copy ? mapFile(file, { copy: true }) : mapFile(file);
      expect(mapped.external).toBe(!copy);
      expect(mapped.byteLength).toBe(bytes.length);
      expect(mapped.buffer.byteLength).toBe(bytes.length);
      expect(Buffer.compare(Buffer.from(mapped.buffer), Buffer.from(bytes))).toBe(0);
      const view = new Uint8Array(mapped.buffer);
      view[0] = (view[0]! + 1) & 0xff; // copy-on-write: the file does not change
      mapped.close();
      expect(mapped.closed).toBe(true);
      expect(mapped.buffer.byteLength).toBe(0);
      expect(view.length).toBe(0); // views of a detached buffer are empty: no access to unmapped memory
      expect(mapped.byteLength).toBe(0);
      mapped.close(); // idempotent
      const again = mapFile(file);
      expect(new Uint8Array(again.buffer)[0]).toBe(bytes[0]);
      again.close();
    });
  }

  it('release() drops resident pages of a range and the bytes read back the same', () => {
    const big = new Uint8Array(8 * 2 ** 20).map((_, i) => (i * 131 + 3) & 0xff);
    const bigFile = join(dir, 'release.bin');
    writeFileSync(bigFile, big);
    const mapped = mapFile(bigFile);
    const view = new Uint8Array(mapped.buffer);
    let sum = 0;
    for (let i = 0; i < view.length; i += 4096) sum += view[i]!; // fault every page in
    expect(sum).toBeGreaterThan(0);
    const rssFile = (): number => Number(/RssFile:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0) * 1024;
    const before = process.platform === 'linux' ? rssFile() : 0;
    // whole pages covering the range, clipped to the file
    expect(mapped.release(4096 + 10, 100)).toBe(4096);
    expect(mapped.release(0, 0)).toBe(0);
    expect(mapped.release(0, view.length)).toBe(view.length);
    if (process.platform === 'linux') expect(before - rssFile()).toBeGreaterThan(6 * 2 ** 20);
    expect(Buffer.compare(Buffer.from(mapped.buffer), Buffer.from(big))).toBe(0); // faulted in again from the file
    expectNativeError(() => mapped.release(view.length, 1), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => mapped.release(-1, 1), 'NATIVE_BAD_ARGUMENT');
    mapped.close();
    expectNativeError(() => mapped.release(0, 1), 'NATIVE_BAD_ARGUMENT');
    const copied = mapFile(bigFile, { copy: true });
    expect(copied.release(0, 4096)).toBe(0); // a copy has no pages to give back
    copied.close();
  });

  it('own() makes a range the process\'s anonymous pages: same bytes, and release() still gives the file\'s back', () => {
    const big = new Uint8Array(8 * 2 ** 20).map((_, i) => (i * 37 + 11) & 0xff);
    const bigFile = join(dir, 'own.bin');
    writeFileSync(bigFile, big);
    const mapped = mapFile(bigFile);
    const rssAnon = (): number => Number(/RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0) * 1024;
    const before = process.platform === 'linux' ? rssAnon() : 0;
    expect(mapped.own(10, 100)).toBe(4096); // whole pages covering the range
    expect(mapped.own(0, 0, 2)).toBe(0);
    expect(mapped.own(0, big.length, 2)).toBe(big.length);
    if (process.platform === 'linux') expect(rssAnon() - before).toBeGreaterThan(7 * 2 ** 20);
    expect(Buffer.compare(Buffer.from(mapped.buffer), Buffer.from(big))).toBe(0);
    expect(mapped.release(0, big.length)).toBe(big.length);
    expect(Buffer.compare(Buffer.from(mapped.buffer), Buffer.from(big))).toBe(0);
    expectNativeError(() => mapped.own(big.length, 1), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => mapped.own(0, 1, 0), 'NATIVE_BAD_ARGUMENT');
    mapped.close();
    expectNativeError(() => mapped.own(0, 1), 'NATIVE_BAD_ARGUMENT');
    const copied = mapFile(bigFile, { copy: true });
    expect(copied.own(0, 4096)).toBe(0); // a copy is V8's memory already
    copied.close();
  });

  it('maps an empty file to an empty buffer', () => {
    const empty = join(dir, 'empty.bin');
    writeFileSync(empty, '');
    const mapped = mapFile(empty);
    expect(mapped.byteLength).toBe(0);
    expect(mapped.buffer.byteLength).toBe(0);
    mapped.close();
  });

  it('reports missing files and directories as NATIVE_IO, bad paths as NATIVE_BAD_ARGUMENT', () => {
    const error = expectNativeError(() => mapFile(join(dir, 'missing.gguf')), 'NATIVE_IO');
    expect(error.message).toContain('missing.gguf');
    expect(error.details.errno).toBe(2);
    expectNativeError(() => mapFile(dir), 'NATIVE_IO');
    expectNativeError(() => mapFile(''), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => mapFile(42 as unknown as string), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => mapFile('a\0b'), 'NATIVE_BAD_ARGUMENT');
  });
});

describe('KvPool', () => {
  const shape = { layers: 2, kvHeads: 2, headDim: 8 };

  it('sizes its capacity from the byte budget', () => {
    const pool = createKvPool({ budgetBytes: 1 << 20, ...shape });
    expect(pool.bytesPerToken).toBe(2 * 2 * (8 * 2 * 2 + 4));
    expect(pool.byteLength).toBeLessThanOrEqual(1 << 20);
    const ideal = Math.floor((1 << 20) / pool.bytesPerToken);
    expect(pool.capacityTokens).toBeLessThanOrEqual(ideal);
    expect(pool.capacityTokens).toBeGreaterThanOrEqual(ideal - 2); // 64-byte region padding costs at most a few tokens
    expect(pool.capacityTokens * pool.bytesPerToken).toBeLessThanOrEqual(pool.byteLength);
    pool.free();
  });

  it('appends rows (fp32 in, fp16 stored) and reads them back', () => {
    const pool = createKvPool({ budgetBytes: 1 << 16, ...shape });
    const k = Float32Array.from({ length: 16 }, (_, i) => i - 8.5); // exact in fp16
    const v = Float32Array.from({ length: 16 }, (_, i) => 0.1 * i); // rounded to fp16
    expect(pool.append(1, k, v, 40)).toBe(0);
    expect(pool.append(1, v, k, 41)).toBe(1);
    expect(pool.length(1)).toBe(2);
    expect(pool.length(0)).toBe(0);
    expect(Array.from(pool.readK(1, 1, 0))).toEqual(Array.from(k.subarray(8)));
    const v0 = pool.readV(1, 0, 0);
    for (let i = 0; i < 8; i++) expect(Math.abs(v0[i]! - v[i]!)).toBeLessThanOrEqual(Math.abs(v[i]!) * 2 ** -11);
    expect(pool.position(1, 1)).toBe(41);
    pool.reset();
    expect(pool.length(1)).toBe(0);
    pool.free();
  });

  it('a full pool throws NATIVE_OUT_OF_MEMORY and keeps its tokens', () => {
    const pool = createKvPool({ budgetBytes: 1000, ...shape });
    const capacity = pool.capacityTokens;
    expect(capacity).toBeGreaterThanOrEqual(1);
    expect(capacity).toBeLessThanOrEqual(Math.floor(1000 / pool.bytesPerToken));
    const row = new Float32Array(16);
    for (let i = 0; i < capacity; i++) pool.append(0, row, row, i);
    const error = expectNativeError(() => pool.append(0, row, row, capacity), 'NATIVE_OUT_OF_MEMORY');
    expect(error.message).toContain('full');
    expect(pool.length(0)).toBe(capacity);
    pool.append(1, row, row, 0); // other layers still have room
    pool.free();
  });

  it('free() is idempotent; any use after free is NATIVE_BAD_ARGUMENT, not a crash', () => {
    const pool = createKvPool({ budgetBytes: 1 << 16, ...shape });
    pool.append(0, new Float32Array(16), new Float32Array(16), 0);
    pool.free();
    pool.free();
    pool.dispose();
    expect(pool.freed).toBe(true);
    expectNativeError(() => pool.length(0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => pool.append(0, new Float32Array(16), new Float32Array(16), 1), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => pool.readK(0, 0, 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => attend(pool, 0, new Float32Array(16), 2, new Float32Array(16)), 'NATIVE_BAD_ARGUMENT');
  });

  it('rejects bad options', () => {
    const bad: unknown[] = [
      undefined,
      null,
      42,
      [],
      { ...shape },
      { budgetBytes: -1, ...shape },
      { budgetBytes: 1.5, ...shape },
      { budgetBytes: Number.NaN, ...shape },
      { budgetBytes: '1000000', ...shape },
      { budgetBytes: 1 << 20, ...shape, layers: 0 },
      { budgetBytes: 1 << 20, ...shape, kvHeads: -2 },
      { budgetBytes: 1 << 20, ...shape, headDim: 1 << 20 },
      { budgetBytes: 10, ...shape }, // less than one token
      { budgetBytes: 2 ** 60, ...shape }, // more than 2^31 tokens
    ];
    for (const options of bad) expectNativeError(() => createKvPool(options as never), 'NATIVE_BAD_ARGUMENT');
  });

  it('a budget beyond physical memory is NATIVE_OUT_OF_MEMORY', () => {
    const error = expectNativeError(() => createKvPool({ budgetBytes: 2 ** 46, layers: 64, kvHeads: 8, headDim: 128 }), 'NATIVE_OUT_OF_MEMORY');
    expect(error.message).toContain(String(2 ** 46));
  });

  it('rejects bad append and read arguments', () => {
    const pool = createKvPool({ budgetBytes: 1 << 16, ...shape });
    const row = new Float32Array(16);
    expectNativeError(() => pool.append(2, row, row, 0), 'NATIVE_BAD_ARGUMENT'); // layer out of range
    expectNativeError(() => pool.append(-1, row, row, 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => pool.append(0, new Float32Array(15), row, 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => pool.append(0, new Float64Array(16) as unknown as Float32Array, row, 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => pool.append(0, Array.from(row) as unknown as Float32Array, row, 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => pool.append(0, row, row, -5), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => pool.readK(0, 0, 0), 'NATIVE_BAD_ARGUMENT'); // empty layer
    pool.append(0, row, row, 0);
    expectNativeError(() => pool.readV(0, 2, 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => pool.readV(0, 0, 1), 'NATIVE_BAD_ARGUMENT');
    expect(pool.length(0)).toBe(1);
    pool.free();
  });
});

describe('attend', () => {
  function filledPool(layers: number, kvHeads: number, headDim: number, tokens: number): KvPool {
    const pool = createKvPool({ budgetBytes: 1 << 24, layers, kvHeads, headDim });
    for (let t = 0; t < tokens; t++) {
      pool.append(layers - 1, randomArray(kvHeads * headDim, 2 * t + 1), randomArray(kvHeads * headDim, 2 * t + 2), t);
    }
    return pool;
  }

  for (const [kvHeads, ratio, headDim, tokens] of [
    [1, 1, 8, 1],
    [2, 4, 64, 33],
    [4, 2, 128, 257],
    [1, 8, 12, 100],
  ] as const) {
    it(`matches the scalar reference (kvHeads ${kvHeads}, GQA ${ratio}, headDim ${headDim}, ${tokens} tokens)`, () => {
      const pool = filledPool(2, kvHeads, headDim, tokens);
      const heads = kvHeads * ratio;
      const q = randomArray(heads * headDim, 99);
      const out = new Float32Array(heads * headDim);
      const ref = new Float32Array(heads * headDim);
      attend(pool, 1, q, heads, out);
      attendReference(pool, 1, q, heads, ref);
      let num = 0;
      let den = 0;
      for (let i = 0; i < out.length; i++) {
        num += (out[i]! - ref[i]!) ** 2;
        den += ref[i]! ** 2;
        expect(Number.isFinite(out[i])).toBe(true);
      }
      expect(num / den).toBeLessThan(1e-10);
      pool.free();
    });
  }

  it('a single token returns its value row exactly (softmax of one is 1)', () => {
    const pool = filledPool(1, 1, 8, 1);
    const out = new Float32Array(16);
    attend(pool, 0, randomArray(16, 5), 2, out);
    expect(Array.from(out.subarray(0, 8))).toEqual(Array.from(pool.readV(0, 0, 0)));
    expect(Array.from(out.subarray(8))).toEqual(Array.from(pool.readV(0, 0, 0)));
    pool.free();
  });

  it('rejects bad arguments without writing', () => {
    const pool = filledPool(2, 2, 8, 5);
    const q = new Float32Array(32);
    const out = new Float32Array(32).fill(7);
    expectNativeError(() => attend({} as KvPool, 1, q, 4, out), 'NATIVE_BAD_ARGUMENT'); // not a pool
    expectNativeError(() => attend(mapFile(join(dir, 'model.bin')) as unknown as KvPool, 1, q, 4, out), 'NATIVE_BAD_ARGUMENT'); // wrong tag
    expectNativeError(() => attend(pool, 0, q, 4, out), 'NATIVE_BAD_ARGUMENT'); // layer 0 is empty
    expectNativeError(() => attend(pool, 2, q, 4, out), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => attend(pool, 1, q, 3, out), 'NATIVE_BAD_ARGUMENT'); // not a multiple of kvHeads
    expectNativeError(() => attend(pool, 1, q, 2, out), 'NATIVE_BAD_ARGUMENT'); // q length mismatch
    expectNativeError(() => attend(pool, 1, q, 4, new Float32Array(31)), 'NATIVE_BAD_ARGUMENT');
    const shared = new Float32Array(64);
    expectNativeError(() => attend(pool, 1, shared.subarray(0, 32), 4, shared.subarray(16, 48)), 'NATIVE_BAD_ARGUMENT'); // overlap
    expectNativeError(() => attendReference(pool, 1, q, 4, q), 'NATIVE_BAD_ARGUMENT'); // in place
    expect(Array.from(out).every((x) => x === 7)).toBe(true);
    pool.free();
  });
});

describe('fp32 rows, batch append, truncate, causal attention', () => {
  it('kvType fp32 keeps rows exactly and doubles the row bytes', () => {
    const p16 = createKvPool({ budgetBytes: 1 << 20, layers: 2, kvHeads: 2, headDim: 8 });
    const p32 = createKvPool({ budgetBytes: 1 << 20, layers: 2, kvHeads: 2, headDim: 8, kvType: 'fp32' });
    expect(p16.kvType).toBe('fp16');
    expect(p32.kvType).toBe('fp32');
    expect(p32.bytesPerToken).toBe(2 * 2 * (2 * 8 * 4 + 4));
    const k = randomArray(16, 3).map((x) => x + 1e-6);
    p32.append(1, k, k, 0);
    expect(Array.from(p32.readK(1, 1, 0))).toEqual(Array.from(k.subarray(8)));
    const bad = expectNativeError(() => createKvPool({ budgetBytes: 1 << 20, layers: 1, kvHeads: 1, headDim: 8, kvType: 'int4' as 'fp16' }), 'NATIVE_BAD_ARGUMENT');
    expect(bad.message).toContain("'int4'");
    p16.free();
    p32.free();
  });

  it('appendBatch equals T appends, is all or nothing, and truncate keeps a prefix', () => {
    const opts = { budgetBytes: 0, layers: 2, kvHeads: 2, headDim: 4, kvType: 'fp32' as const };
    opts.budgetBytes = 10 * 2 * 2 * (2 * 4 * 4 + 4) + 4 * 64;
    const a = createKvPool(opts);
    const b = createKvPool(opts);
    const cap = a.capacityTokens;
    expect(cap).toBeGreaterThanOrEqual(10);
    const k = randomArray(6 * 8, 5);
    const v = randomArray(6 * 8, 6);
    expect(a.appendBatch(0, k, v, 100)).toBe(0);
    for (let t = 0; t < 6; t++) b.append(0, k.subarray(t * 8, t * 8 + 8), v.subarray(t * 8, t * 8 + 8), 100 + t);
    for (let t = 0; t < 6; t++) {
      expect(a.readK(0, 1, t)).toEqual(b.readK(0, 1, t));
      expect(a.readV(0, 0, t)).toEqual(b.readV(0, 0, t));
      expect(a.position(0, t)).toBe(100 + t);
    }
    const tooMany = randomArray((cap - 6 + 1) * 8, 9);
    expectNativeError(() => a.appendBatch(0, tooMany, tooMany, 0), 'NATIVE_OUT_OF_MEMORY'); // one more than the free slots
    expect(a.length(0)).toBe(6);
    expectNativeError(() => a.appendBatch(0, k.subarray(0, 7), v.subarray(0, 7), 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => a.appendBatch(0, k.subarray(0, 8), v.subarray(0, 16), 0), 'NATIVE_BAD_ARGUMENT');
    a.truncate(2);
    expect(a.length(0)).toBe(2);
    expect(a.appendBatch(0, k.subarray(0, 8), v.subarray(0, 8), 2)).toBe(2);
    a.free();
    b.free();
  });

  it('kvType int8: one byte per element plus a 4-byte scale per row; rows read back dequantised within scale/2', () => {
    const headDim = 16;
    const kvHeads = 2;
    const pool = createKvPool({ budgetBytes: 1 << 20, layers: 2, kvHeads, headDim, kvType: 'int8' });
    expect(pool.kvType).toBe('int8');
    expect(pool.bytesPerToken).toBe(2 * kvHeads * (2 * (headDim * 1 + 4) + 4));
    const tokens = 12;
    const k = randomArray(tokens * kvHeads * headDim, 21).map((x, i) => x * (1 + (i % 7))); // rows of different sizes
    const v = randomArray(tokens * kvHeads * headDim, 22);
    pool.appendBatch(1, k.subarray(0, 6 * kvHeads * headDim), v.subarray(0, 6 * kvHeads * headDim), 0);
    for (let t = 6; t < tokens; t++) pool.append(1, k.subarray(t * kvHeads * headDim, (t + 1) * kvHeads * headDim), v.subarray(t * kvHeads * headDim, (t + 1) * kvHeads * headDim), t);
    let worst = 0; // |x - deq| / scale
    for (let t = 0; t < tokens; t++) {
      for (let g = 0; g < kvHeads; g++) {
        for (const [src, read] of [[k, pool.readK(1, g, t)], [v, pool.readV(1, g, t)]] as const) {
          const row = src.subarray((t * kvHeads + g) * headDim, (t * kvHeads + g + 1) * headDim);
          const scale = Math.max(...Array.from(row, Math.abs)) / 127;
          for (let i = 0; i < headDim; i++) worst = Math.max(worst, Math.abs(read[i]! - row[i]!) / scale);
          // the row's largest element comes back as +-127 steps: exactly max|x| up to fp32 rounding
          const peak = Math.max(...Array.from(read, Math.abs));
          expect(Math.abs(peak - scale * 127)).toBeLessThanOrEqual(scale * 1e-5);
        }
      }
    }
    expect(worst).toBeLessThanOrEqual(0.5 * (1 + 1e-5));
    expect(worst).toBeGreaterThan(0.1); // int8 really rounds: not an fp16/fp32 row
    // a zero row reads back as zeros; a row with NaN reads back as NaN in every element
    const zero = new Float32Array(kvHeads * headDim);
    const poisoned = randomArray(kvHeads * headDim, 23);
    poisoned[headDim + 2] = Number.NaN; // KV head 1 only
    pool.append(0, zero, poisoned, 0);
    expect(Array.from(pool.readK(0, 1, 0))).toEqual(new Array(headDim).fill(0));
    expect(Array.from(pool.readV(0, 1, 0)).every(Number.isNaN)).toBe(true);
    expect(Array.from(pool.readV(0, 0, 0)).every(Number.isFinite)).toBe(true);
    pool.free();
  });

  for (const kvType of ['fp16', 'fp32', 'int8'] as const) {
    it(`attendCausal matches the reference and per-token attend (${kvType}, GQA 4)`, () => {
      const heads = 8;
      const kvHeads = 2;
      const headDim = 16;
      const pool = createKvPool({ budgetBytes: 1 << 22, layers: 1, kvHeads, headDim, kvType });
      const before = 11;
      const T = 9;
      pool.appendBatch(0, randomArray(before * kvHeads * headDim, 7), randomArray(before * kvHeads * headDim, 8), 0);
      pool.appendBatch(0, randomArray(T * kvHeads * headDim, 9), randomArray(T * kvHeads * headDim, 10), before);
      const q = randomArray(T * heads * headDim, 11);
      const out = new Float32Array(q.length);
      const ref = new Float32Array(q.length);
      attendCausal(pool, 0, q, heads, out);
      attendCausalReference(pool, 0, q, heads, ref);
      for (let i = 0; i < q.length; i++) expect(Math.abs(out[i]! - ref[i]!)).toBeLessThan(1e-5 + 1e-4 * Math.abs(ref[i]!));
      // the last query sees every token: the same as a decode step
      const last = new Float32Array(heads * headDim);
      attend(pool, 0, q.subarray((T - 1) * heads * headDim), heads, last);
      expect(Array.from(out.subarray((T - 1) * heads * headDim))).toEqual(Array.from(last));
      // over 2 and 4 threads: the same floats bit for bit
      for (const threads of [2, 4]) {
        const spread = new Float32Array(q.length);
        attendCausal(pool, 0, q, heads, spread, threads);
        expect(Buffer.from(spread.buffer).equals(Buffer.from(out.buffer))).toBe(true);
      }
      expectNativeError(() => attendCausal(pool, 0, q, heads, out, 0), 'NATIVE_BAD_ARGUMENT');
      expectNativeError(() => attendCausal(pool, 0, q, heads, out, 65), 'NATIVE_BAD_ARGUMENT');
      expectNativeError(() => attendCausal(pool, 0, randomArray(21 * heads * headDim, 1), heads, new Float32Array(21 * heads * headDim)), 'NATIVE_BAD_ARGUMENT');
      expectNativeError(() => attendCausal(pool, 0, q, heads, new Float32Array(q.length - 1)), 'NATIVE_BAD_ARGUMENT');
      pool.free();
    });
  }
});

describe('decode attention over threads', () => {
  it('attendCausal of one query and attendSlots split the KV heads over threads with the same bits (8,000 tokens x 20 heads: big enough to split)', () => {
    const heads = 20;
    const kvHeads = 5;
    const headDim = 32;
    const T = 8000;
    const pool = createKvPool({ budgetBytes: 1 << 25, layers: 1, kvHeads, headDim });
    pool.appendBatch(0, randomArray(T * kvHeads * headDim, 31), randomArray(T * kvHeads * headDim, 32), 0);
    const q = randomArray(heads * headDim, 33);
    const one = new Float32Array(q.length);
    attend(pool, 0, q, heads, one);
    // every KV head lists a different subset, the last slot always
    const lists: number[] = [];
    const offsets = new Int32Array(kvHeads + 1);
    for (let g = 0; g < kvHeads; g++) {
      for (let t = 0; t < T; t++) if (t === T - 1 || (t * 7 + g * 13) % (g + 2) !== 0) lists.push(t);
      offsets[g + 1] = lists.length;
    }
    const slots = Int32Array.from(lists);
    const slotsOne = new Float32Array(q.length);
    attendSlots(pool, 0, q, heads, slots, offsets, slotsOne);
    for (const threads of [2, 3, 7]) {
      const spread = new Float32Array(q.length);
      attendCausal(pool, 0, q, heads, spread, threads);
      expect(Buffer.from(spread.buffer).equals(Buffer.from(one.buffer))).toBe(true);
      const slotsSpread = new Float32Array(q.length);
      attendSlots(pool, 0, q, heads, slots, offsets, slotsSpread, threads);
      expect(Buffer.from(slotsSpread.buffer).equals(Buffer.from(slotsOne.buffer))).toBe(true);
    }
    expect(Buffer.from(slotsOne.buffer).equals(Buffer.from(one.buffer))).toBe(false); // the lists really are subsets
    expectNativeError(() => attendSlots(pool, 0, q, heads, slots, offsets, slotsOne, 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => attendSlots(pool, 0, q, heads, slots, offsets, slotsOne, 65), 'NATIVE_BAD_ARGUMENT');
    pool.free();
  });
});

describe('setMallocMmapThreshold', () => {
  it('sets the threshold on glibc and checks its argument', () => {
    const glibc = process.platform === 'linux' && (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header?.glibcVersionRuntime !== undefined;
    expect(setMallocMmapThreshold(1 << 20)).toBe(glibc);
    expectNativeError(() => setMallocMmapThreshold(100), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => setMallocMmapThreshold(64 * 2 ** 20), 'NATIVE_BAD_ARGUMENT');
  });
});

describe('mallocTrim', () => {
  it('answers whether glibc released memory: a boolean, false off glibc (the RSS effect: native_tests heap trim)', () => {
    const glibc = process.platform === 'linux' && (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header?.glibcVersionRuntime !== undefined;
    const released = mallocTrim();
    expect(typeof released).toBe('boolean');
    if (!glibc) expect(released).toBe(false);
  });
});

describe('measureReadBandwidth', () => {
  it('returns a finite positive GB/s, on one thread and on two; rejects bad sizes', () => {
    for (const threads of [undefined, 2]) {
      const gbs = measureReadBandwidth(8 << 20, 2, threads);
      expect(Number.isFinite(gbs)).toBe(true);
      expect(gbs).toBeGreaterThan(0);
    }
    expectNativeError(() => measureReadBandwidth(1024, 1), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => measureReadBandwidth(8 << 20, 0), 'NATIVE_BAD_ARGUMENT');
    expectNativeError(() => measureReadBandwidth(8 << 20, 1, 0), 'NATIVE_BAD_ARGUMENT');
  });
});

describe('attention arguments (scale, window, sinks, softcap)', () => {
  const kvHeads = 2;
  const heads = 8;
  const headDim = 16;
  const tokens = 60;
  function pool(partialDim = 0): KvPool {
    const p = createKvPool({ budgetBytes: 1 << 22, layers: 2, kvHeads, headDim, partialDim });
    // positions 0, 2, 4, ...: a window counts positions, not slots
    for (let t = 0; t < tokens; t++) p.append(1, randomArray(kvHeads * headDim, 7 * t + 1), randomArray(kvHeads * headDim, 7 * t + 2), 2 * t);
    return p;
  }
  const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
  function close(a: Float32Array, b: Float32Array) {
    for (let i = 0; i < a.length; i++) expect(Math.abs(a[i]! - b[i]!)).toBeLessThanOrEqual(1e-5 + 1e-4 * Math.abs(b[i]!));
  }
  // the plain-JS attention of one query head over the layer's slots, with the features
  function plain(p: KvPool, q: Float32Array, h: number, args: AttentionArgs): Float64Array {
    const g = Math.floor(h / (heads / kvHeads));
    const scale = args.scale ?? 1 / Math.sqrt(headDim);
    const t = p.position(1, p.length(1) - 1);
    const s: number[] = [];
    const rows: number[] = [];
    for (let slot = 0; slot < p.length(1); slot++) {
      const pos = p.position(1, slot);
      if (args.window && !(pos > t - args.window && pos <= t)) continue;
      const k = p.readK(1, g, slot);
      let dot = 0;
      for (let i = 0; i < headDim; i++) dot += q[h * headDim + i]! * k[i]!;
      let x = dot * scale;
      if (args.softcap) x = args.softcap * Math.tanh(x / args.softcap);
      s.push(x);
      rows.push(slot);
    }
    const m = Math.max(...s);
    let z = args.sinks ? Math.exp(args.sinks[h]! - m) : 0;
    for (const x of s) z += Math.exp(x - m);
    const out = new Float64Array(headDim);
    rows.forEach((slot, j) => {
      const v = p.readV(1, g, slot);
      for (let i = 0; i < headDim; i++) out[i] = out[i]! + (Math.exp(s[j]! - m) / z) * v[i]!;
    });
    return out;
  }

  it('left out, {} or the explicit defaults: the same bits as today (attend, attendCausal, attendSlots, attentionScores)', () => {
    const p = pool();
    const q = randomArray(heads * headDim, 11);
    const base = new Float32Array(heads * headDim);
    attend(p, 1, q, heads, base);
    for (const args of [undefined, {}, { scale: 0.25, window: 0, softcap: 0 }, { sinks: new Float32Array(heads).fill(-1e30) }] as (AttentionArgs | undefined)[]) {
      const out = new Float32Array(heads * headDim);
      attend(p, 1, q, heads, out, args);
      expect(same(out, base)).toBe(true);
      attendCausal(p, 1, q, heads, out, 2, args);
      expect(same(out, base)).toBe(true);
    }
    const slots = new Int32Array(kvHeads * tokens).map((_, i) => i % tokens);
    const offsets = Int32Array.from({ length: kvHeads + 1 }, (_, g) => g * tokens);
    const viaSlots = new Float32Array(heads * headDim);
    attendSlots(p, 1, q, heads, slots, offsets, viaSlots, 1, { scale: 0.25 });
    expect(same(viaSlots, base)).toBe(true);
    const s1 = new Float32Array(heads * tokens);
    const s2 = new Float32Array(heads * tokens);
    attentionScores(p, 1, q, heads, s1);
    attentionScores(p, 1, q, heads, s2, undefined, { scale: 0.25 });
    expect(same(s1, s2)).toBe(true);
    p.free();
  });

  for (const [label, args] of [
    ['scale', { scale: 0.6 }],
    ['window 1 (only the current token)', { window: 1 }],
    ['window 9 (positions 0, 2, 4, ...: five tokens)', { window: 9 }],
    ['window >= context', { window: 1000 }],
    ['sinks', { sinks: randomArray(heads, 3) }],
    ['softcap', { softcap: 1.2, scale: 0.5 }],
    ['everything', { scale: 0.3, window: 21, sinks: randomArray(heads, 4), softcap: 2 }],
  ] as [string, AttentionArgs][]) {
    it(`${label}: attend == attendReference == plain JS; attendSlots over every slot == attend`, () => {
      const p = pool();
      const q = randomArray(heads * headDim, 12);
      const out = new Float32Array(heads * headDim);
      const ref = new Float32Array(heads * headDim);
      attend(p, 1, q, heads, out, args);
      attendReference(p, 1, q, heads, ref, args);
      close(out, ref);
      for (let h = 0; h < heads; h++) {
        const want = plain(p, q, h, args);
        for (let i = 0; i < headDim; i++) expect(Math.abs(ref[h * headDim + i]! - want[i]!)).toBeLessThan(1e-5);
      }
      const slots = new Int32Array(kvHeads * tokens).map((_, i) => i % tokens);
      const offsets = Int32Array.from({ length: kvHeads + 1 }, (_, g) => g * tokens);
      const viaSlots = new Float32Array(heads * headDim);
      attendSlots(p, 1, q, heads, slots, offsets, viaSlots, 1, args);
      close(viaSlots, ref);
      p.free();
    });
  }

  it('attendCausal with a window and soft-cap matches attendCausalReference, and its last query matches attend', () => {
    const p = pool();
    const T = 5;
    const q = randomArray(T * heads * headDim, 13);
    const args: AttentionArgs = { window: 7, softcap: 1.5, sinks: randomArray(heads, 5) };
    const out = new Float32Array(q.length);
    const ref = new Float32Array(q.length);
    attendCausal(p, 1, q, heads, out, 2, args);
    attendCausalReference(p, 1, q, heads, ref, args);
    close(out, ref);
    const last = new Float32Array(heads * headDim);
    attend(p, 1, q.subarray((T - 1) * heads * headDim), heads, last, args);
    expect(same(last, out.subarray((T - 1) * heads * headDim))).toBe(true);
    p.free();
  });

  it('h2oAccumulate, snapkvCompress and the speculator take the block too', () => {
    const p = pool(4);
    const q = randomArray(heads * headDim, 14);
    const C = 64;
    const a1 = new Float32Array(kvHeads * C);
    const a2 = new Float32Array(kvHeads * C);
    h2oAccumulate(p, 1, q, heads, a1, C, tokens);
    h2oAccumulate(p, 1, q, heads, a2, C, tokens, undefined, undefined, 1, { sinks: randomArray(heads, 6).map((x) => x + 3) });
    // a sink takes part of every head's mass: less is left for the slots
    const sum = (a: Float32Array) => a.reduce((x, y) => x + y, 0);
    expect(sum(a1)).toBeCloseTo(heads, 4);
    expect(sum(a2)).toBeLessThan(sum(a1));
    const obs = randomArray(4 * heads * headDim, 15);
    const slots = new Int32Array(kvHeads * 20);
    const offsets = new Int32Array(kvHeads + 1);
    expect(snapkvCompress(p, 1, obs, heads, tokens, 4, 20, 5, slots, offsets, { softcap: 1 })).toBe(kvHeads * 20);
    p.setPartialProjection(1, randomArray(kvHeads * headDim * 4, 16));
    const layerAttention: (AttentionArgs | undefined)[] = [undefined, { window: 11, sinks: randomArray(heads, 17), softcap: 3 }];
    const sp = createSpeculator(p, { heads, alpha: 5, cap: 0.5, denseLayers: 1, layerAttention });
    const qs = randomArray(heads * headDim, 18);
    sp.begin(1, qs);
    p.append(1, randomArray(kvHeads * headDim, 19), randomArray(kvHeads * headDim, 20), 2 * tokens);
    const out = new Float32Array(heads * headDim);
    const ref = new Float32Array(heads * headDim);
    sp.attend(1, qs, out);
    sp.attendReference(1, qs, ref);
    close(out, ref);
    const recall = sp.recall(1, qs);
    expect(recall).toBeGreaterThan(0);
    expect(recall).toBeLessThanOrEqual(1 + 1e-9);
    sp.free();
    p.free();
  });

  it('a bad block is a NativeError naming the field, with nothing written', () => {
    const p = pool(4);
    const q = randomArray(heads * headDim, 21);
    const out = new Float32Array(heads * headDim).fill(7);
    const bad: [AttentionArgs, RegExp][] = [
      [{ sinks: new Float32Array(heads - 1) }, /attention\.sinks must have 8 elements/],
      [{ sinks: new Float64Array(heads) as unknown as Float32Array }, /attention\.sinks must be a Float32Array/],
      [{ sinks: new Float32Array(heads).fill(Number.NaN) }, /attention\.sinks\[0\] must be finite/],
      [{ window: -1 }, /attention\.window must be an integer/],
      [{ window: 1.5 }, /attention\.window must be an integer/],
      [{ scale: Number.NaN }, /attention\.scale must be a finite number > 0/],
      [{ scale: Number.POSITIVE_INFINITY }, /attention\.scale must be a finite number > 0/],
      [{ scale: 0 }, /attention\.scale/],
      [{ scale: '0.5' as unknown as number }, /attention\.scale/],
      [{ softcap: -1 }, /attention\.softcap must be a finite number >= 0/],
      [{ softcap: Number.NaN }, /attention\.softcap/],
    ];
    for (const [args, message] of bad) {
      expect(expectNativeError(() => attend(p, 1, q, heads, out, args), 'NATIVE_BAD_ARGUMENT').message).toMatch(message);
      expectNativeError(() => attendCausal(p, 1, q, heads, out, 1, args), 'NATIVE_BAD_ARGUMENT');
      expectNativeError(() => attentionScores(p, 1, q, heads, new Float32Array(heads * tokens), undefined, args), 'NATIVE_BAD_ARGUMENT');
    }
    expect(expectNativeError(() => attend(p, 1, q, heads, out, 5 as unknown as AttentionArgs), 'NATIVE_BAD_ARGUMENT').message).toMatch(/attention must be an object/);
    expect(Array.from(out).every((x) => x === 7)).toBe(true);
    expect(
      expectNativeError(() => createSpeculator(p, { heads, alpha: 5, cap: 0.5, denseLayers: 1, layerAttention: [undefined] }), 'NATIVE_BAD_ARGUMENT').message,
    ).toMatch(/one entry per layer/);
    expect(
      expectNativeError(() => createSpeculator(p, { heads, alpha: 5, cap: 0.5, denseLayers: 1, layerAttention: [undefined, { window: -2 }] }), 'NATIVE_BAD_ARGUMENT').message,
    ).toMatch(/layerAttention\[1\]\.window/);
    p.free();
  });
});

describe('KvPool layerCapacity', () => {
  const shape = { layers: 4, kvHeads: 2, headDim: 16 };
  it('without it (or with every layer the uniform capacity) the pool is exactly what it was', () => {
    const plain = createKvPool({ budgetBytes: 1 << 20, ...shape });
    const same = createKvPool({ budgetBytes: 1 << 20, ...shape, layerCapacity: [0, 0, 0, 0] });
    const fixed = createKvPool({ budgetBytes: 1 << 20, ...shape, layerCapacity: Array(4).fill(plain.capacityTokens) });
    for (const p of [same, fixed]) {
      expect([p.capacityTokens, p.byteLength, p.bytesPerToken, p.snapshotLayerBytes(7)]).toEqual([plain.capacityTokens, plain.byteLength, plain.bytesPerToken, plain.snapshotLayerBytes(7)]);
      for (let l = 0; l < 4; l++) expect(p.layerCapacityTokens(l)).toBe(plain.capacityTokens);
    }
    for (const p of [plain, same, fixed]) p.free();
  });

  it('window layers get their own capacity in one allocation; each layer is full at its own, the rest share the budget', () => {
    const pool = createKvPool({ budgetBytes: 1 << 20, ...shape, layerCapacity: [0, 6, 0, 6] });
    const shared = pool.layerCapacityTokens(0);
    expect(pool.layerCapacityTokens(1)).toBe(6);
    expect(pool.layerCapacityTokens(2)).toBe(shared);
    expect(pool.capacityTokens).toBe(shared);
    expect(pool.byteLength).toBeLessThanOrEqual(1 << 20);
    // the shared layers got more than a uniform pool's layers: the window layers left them room
    const plain = createKvPool({ budgetBytes: 1 << 20, ...shape });
    expect(shared).toBeGreaterThan(plain.capacityTokens);
    plain.free();
    const row = (x: number) => new Float32Array(2 * 16).fill(x);
    for (let t = 0; t < 6; t++) for (let l = 0; l < 4; l++) pool.append(l, row(10 * l + t), row(-t), t);
    expect(expectNativeError(() => pool.append(1, row(1), row(1), 6), 'NATIVE_OUT_OF_MEMORY').message).toMatch(/layer 1 holds 6 of 6 tokens/);
    expectNativeError(() => pool.appendBatch(3, row(1), row(1), 6), 'NATIVE_OUT_OF_MEMORY');
    pool.append(0, row(7), row(7), 6); // a shared layer has room
    for (let l = 0; l < 4; l++) for (let t = 0; t < 6; t++) expect(pool.readK(l, 1, t)[0]).toBe(10 * l + t); // no layer overwrote another
    // attention over a small layer == the reference
    const q = randomArray(8 * 16, 3);
    const out = new Float32Array(8 * 16);
    const ref = new Float32Array(8 * 16);
    attend(pool, 3, q, 8, out, { window: 4 });
    attendReference(pool, 3, q, 8, ref, { window: 4 });
    for (let i = 0; i < out.length; i++) expect(Math.abs(out[i]! - ref[i]!)).toBeLessThan(1e-5);
    // snapshots: a small layer imports up to its own capacity only
    const section = new Uint8Array(pool.snapshotLayerBytes(6));
    pool.exportLayer(1, 6, section);
    pool.truncate(0);
    expect(expectNativeError(() => pool.importLayer(1, 7, new Uint8Array(pool.snapshotLayerBytes(7))), 'NATIVE_BAD_ARGUMENT').message).toMatch(/capacity \(6 tokens in layer 1\)/);
    pool.importLayer(1, 6, section);
    expect(pool.readK(1, 0, 5)[0]).toBe(15);
    pool.free();
  });

  it('with eviction each layer evicts at its own capacity', () => {
    const pool = createKvPool({ budgetBytes: 1 << 20, ...shape, layerCapacity: [12, 0, 0, 0], eviction: { sinks: 2, recent: 4, ageEvery: 4 } });
    const row = new Float32Array(32).fill(0.5);
    for (let t = 0; t < 20; t++) for (let l = 0; l < 4; l++) pool.append(l, row, row, t);
    expect([pool.length(0), pool.evictions(0), pool.length(1), pool.evictions(1)]).toEqual([12, 8, 20, 0]);
    pool.free();
  });

  it('rejects bad layerCapacity', () => {
    const bad: [unknown, RegExp][] = [
      [5, /layerCapacity must be an array/],
      [[1, 2, 3], /one entry per layer \(4\), has 3/],
      [[1, -1, 3, 4], /layerCapacity\[1\] must be an integer/],
      [[1, 2.5, 3, 4], /layerCapacity\[1\]/],
      [[1e9, 1e9, 1e9, 1e9], /does not hold layerCapacity/],
    ];
    for (const [layerCapacity, message] of bad)
      expect(expectNativeError(() => createKvPool({ budgetBytes: 1 << 20, ...shape, layerCapacity: layerCapacity as number[] }), 'NATIVE_BAD_ARGUMENT').message).toMatch(message);
    expectNativeError(() => createKvPool({ budgetBytes: 1 << 20, ...shape, layerCapacity: [5, 0, 0, 0], eviction: { sinks: 2, recent: 4, ageEvery: 4 } }), 'NATIVE_BAD_ARGUMENT');
    const pool = createKvPool({ budgetBytes: 1 << 20, ...shape });
    expectNativeError(() => pool.layerCapacityTokens(4), 'NATIVE_BAD_ARGUMENT');
    pool.free();
  });
});

describe('KvPool ringLayers (sliding-window layers, native/src/kv_pool.h "Rings")', () => {
  const shape = { layers: 2, kvHeads: 1, headDim: 4, kvType: 'fp32' as const };
  it('a ring wraps, keeps positions, exports its newest rows and empties alone; bad options are refused with the field', () => {
    const p = createKvPool({ budgetBytes: 1 << 16, ...shape, layerCapacity: [32, 5], ringLayers: [false, true] });
    expect([p.isRing(0), p.isRing(1)]).toEqual([false, true]);
    const rows = (n: number, from: number) => new Float32Array(n * 4).map((_, i) => from + Math.floor(i / 4));
    p.appendBatch(1, rows(7, 0), rows(7, 0), 0); // 7 tokens into 5 slots: positions 2..6 stay
    expect(p.length(1)).toBe(5);
    expect(p.ringStart(1)).toBe(2);
    expect(Array.from({ length: 5 }, (_, r) => p.position(1, (p.ringStart(1) + r) % 5))).toEqual([2, 3, 4, 5, 6]);
    const out = new Uint8Array(p.snapshotLayerBytes(3));
    p.exportRows(1, 2, 3, out); // rows 2..4: positions 4, 5, 6
    expect(Array.from(new Int32Array(out.slice(out.length - 12).buffer))).toEqual([4, 5, 6]);
    expectNativeError(() => p.exportRows(1, 3, 3, out), 'NATIVE_BAD_ARGUMENT');
    p.clearLayer(1);
    expect([p.length(1), p.ringStart(1)]).toEqual([0, 0]);
    p.free();
    const bad: [object, RegExp][] = [
      [{ layerCapacity: [32, 5], ringLayers: [true] }, /ringLayers must have one entry per layer/],
      [{ layerCapacity: [32, 5], ringLayers: [false, 1] }, /ringLayers\[1\] must be a boolean/],
      [{ ringLayers: [false, true] }, /ringLayers\[1\]: a ring needs its own layerCapacity entry/],
      [{ layerCapacity: [32, 0], ringLayers: [false, true] }, /ringLayers\[1\]: a ring needs/],
      [{ layerCapacity: [32, 16], ringLayers: [false, true], eviction: { sinks: 1, recent: 2, ageEvery: 4 } }, /a pool without eviction/],
    ];
    for (const [o, message] of bad) expect(() => createKvPool({ budgetBytes: 1 << 16, ...shape, ...o })).toThrow(message);
  });
});
