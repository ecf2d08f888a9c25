import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LonghandError, ModelFileError } from '../../common/errors.ts';
import { SkewCalibrator, skewLayerOffsets, type LayerHeads, type SkewMatrices } from './skew.ts';
import { SKEW_HEADER_BYTES, SKEW_VERSION_PER_LAYER, crc32, deserializeSkew, readSkewCache, serializeSkew, skewCachePath, writeSkewCache, type SkewMeta } from './skew-file.ts';
import { Gaussian } from './test-helpers.ts';

const SHA = 'ab'.repeat(32);
const OTHER_SHA = 'cd'.repeat(32);

function calibrated(layers = 2, kvHeads = 2, heads = 4, d = 8): SkewMatrices {
  const cal = new SkewCalibrator(layers, kvHeads, heads, d);
  const g = new Gaussian(1);
  for (let l = 0; l < layers; l++) cal.addQueries(l, Float32Array.from(g.fill(10 * heads * d)), 10);
  return cal.finish();
}

const skew = calibrated();
const meta: SkewMeta = { modelSha256: SHA, layers: 2, kvHeads: 2, headDim: 8 };
const good = serializeSkew(skew, meta);

function codeOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(LonghandError);
    return (e as LonghandError).code;
  }
  return 'no error';
}

describe('serializeSkew / deserializeSkew', () => {
  it('round-trips exactly, with the documented header', () => {
    expect(good.length).toBe(SKEW_HEADER_BYTES + 4 * (2 + 2 * 2 * 64 + 2 * 2 * 8));
    expect(new TextDecoder().decode(good.subarray(0, 6))).toBe('LHSKEW');
    const back = deserializeSkew(good, meta);
    expect(back.matrices).toEqual(skew.matrices);
    expect(back.eigenvalues).toEqual(skew.eigenvalues);
    expect(back.samples).toEqual(skew.samples);
    // upper-case hash is the same model; unaligned input buffers are fine
    const shifted = new Uint8Array(good.length + 1);
    shifted.set(good, 1);
    expect(deserializeSkew(shifted.subarray(1), { ...meta, modelSha256: SHA.toUpperCase() }).matrices).toEqual(skew.matrices);
  });

  it('crc32 is the IEEE one', () => {
    expect(crc32(new TextEncoder().encode('123456789'))).toBe(0xcbf43926);
  });

  const corrupt = (edit: (b: Uint8Array, v: DataView) => Uint8Array | void): Uint8Array => {
    const b = good.slice();
    return edit(b, new DataView(b.buffer)) ?? b;
  };
  const cases: [string, Uint8Array, SkewMeta, string][] = [
    ['empty', new Uint8Array(0), meta, 'MODEL_TRUNCATED'],
    ['header cut', good.subarray(0, 40), meta, 'MODEL_TRUNCATED'],
    ['payload cut', good.subarray(0, good.length - 1), meta, 'MODEL_TRUNCATED'],
    ['payload missing', good.subarray(0, SKEW_HEADER_BYTES), meta, 'MODEL_TRUNCATED'],
    ['bad magic', corrupt((b) => void (b[0] = 0x47)), meta, 'MODEL_BAD_MAGIC'],
    ['a GGUF file', corrupt((b) => b.set([0x47, 0x47, 0x55, 0x46], 0)), meta, 'MODEL_BAD_MAGIC'],
    ['version 2', corrupt((_, v) => v.setUint32(8, 2, true)), meta, 'MODEL_UNSUPPORTED_VERSION'],
    ['other layers', good, { ...meta, layers: 3 }, 'MODEL_BAD_VALUE'],
    ['other kvHeads', good, { ...meta, kvHeads: 1 }, 'MODEL_BAD_VALUE'],
    ['other headDim', good, { ...meta, headDim: 16 }, 'MODEL_BAD_VALUE'],
    ['absurd dims in the file', corrupt((_, v) => v.setUint32(20, 0xffffffff, true)), meta, 'MODEL_BAD_VALUE'],
    ['other model', good, { ...meta, modelSha256: OTHER_SHA }, 'MODEL_BAD_VALUE'],
    ['flipped payload bit', corrupt((b) => void (b[SKEW_HEADER_BYTES + 100]! ^= 0x10)), meta, 'MODEL_BAD_VALUE'],
    ['bad checksum field', corrupt((_, v) => v.setUint32(56, 1, true)), meta, 'MODEL_BAD_VALUE'],
    ['reserved field set', corrupt((_, v) => v.setUint32(60, 1, true)), meta, 'MODEL_BAD_VALUE'],
    ['trailing bytes', Uint8Array.from([...good, 0]), meta, 'MODEL_BAD_VALUE'],
    [
      'NaN with a matching checksum',
      corrupt((b, v) => {
        v.setFloat32(SKEW_HEADER_BYTES + 8, NaN, true);
        v.setUint32(56, crc32(b.subarray(SKEW_HEADER_BYTES)), true);
      }),
      meta,
      'MODEL_BAD_VALUE',
    ],
  ];
  for (const [name, bytes, expected, code] of cases) {
    it(`rejects: ${name} → ${code}`, () => {
      expect(codeOf(() => deserializeSkew(bytes, expected, 'x.lhskew'))).toBe(code);
      try {
        deserializeSkew(bytes, expected, 'x.lhskew');
      } catch (e) {
        expect(e).toBeInstanceOf(ModelFileError);
        expect((e as ModelFileError).file).toBe('x.lhskew');
      }
    });
  }

  it('random single-byte corruptions never pass silently', () => {
    const g = new Gaussian(5);
    for (let trial = 0; trial < 200; trial++) {
      const b = good.slice();
      const at = Math.floor(Math.abs(g.next() * 1e6)) % b.length;
      b[at] = (b[at]! + 1 + (trial % 255)) & 0xff;
      expect(codeOf(() => deserializeSkew(b, meta))).toMatch(/^MODEL_/);
    }
  });

  it('rejects bad metas and mismatched matrices on write with BAD_ARGUMENT', () => {
    expect(codeOf(() => serializeSkew(skew, { ...meta, modelSha256: 'xyz' }))).toBe('BAD_ARGUMENT');
    expect(codeOf(() => serializeSkew(skew, { ...meta, layers: 1 }))).toBe('BAD_ARGUMENT');
    expect(codeOf(() => skewCachePath('/tmp', '../'.repeat(21) + 'a'))).toBe('BAD_ARGUMENT');
  });
});

describe('skew cache on disk', () => {
  let dir = '';
  afterAll(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('miss → write → hit; a corrupt file reads as invalid (recalibrate), an overwrite fixes it', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'longhand-skew-'));
    const file = skewCachePath(dir, SHA);
    expect(file).toBe(path.join(dir, 'skew', `${SHA}.v1.lhskew`));
    expect((await readSkewCache(dir, meta)).status).toBe('miss');
    expect(await writeSkewCache(dir, skew, meta)).toBe(file);
    const hit = await readSkewCache(dir, meta);
    expect(hit.status).toBe('hit');
    if (hit.status === 'hit') expect(hit.skew.matrices).toEqual(skew.matrices);
    // another model's hash: another file, a miss
    expect((await readSkewCache(dir, { ...meta, modelSha256: OTHER_SHA })).status).toBe('miss');
    // same hash, different shape expectations: invalid
    const wrong = await readSkewCache(dir, { ...meta, headDim: 16 });
    expect(wrong.status).toBe('invalid');
    await writeFile(file, (await readFile(file)).subarray(0, 100));
    const bad = await readSkewCache(dir, meta);
    expect(bad.status).toBe('invalid');
    if (bad.status === 'invalid') expect(bad.error.code).toBe('MODEL_TRUNCATED');
    await writeSkewCache(dir, skew, meta);
    expect((await readSkewCache(dir, meta)).status).toBe('hit');
  });
});

describe('skew files of models whose layers differ (version 2: Gemma 4)', () => {
  // window layers 2 KV heads × 8, a global layer 1 × 16, a KV-shared layer with none
  const shapes: LayerHeads[] = [
    { kvHeads: 2, headDim: 8 },
    { kvHeads: 1, headDim: 16 },
    { kvHeads: 2, headDim: 8 },
    { kvHeads: 0, headDim: 16 },
  ];
  const cal = new SkewCalibrator(4, 2, 4, 16, shapes);
  const g = new Gaussian(2);
  for (let l = 0; l < 3; l++) cal.addQueries(l, Float32Array.from(g.fill(10 * 4 * shapes[l]!.headDim)), 10);
  const layered = cal.finish();
  const lmeta: SkewMeta = { modelSha256: SHA, layers: 4, kvHeads: 2, headDim: 16, perLayer: shapes };
  const bytes = serializeSkew(layered, lmeta);

  it('round-trips with the per-layer shape table, at each layer\'s size', () => {
    const total = skewLayerOffsets(layered, 4);
    expect(total).toEqual({ matrices: 2 * 64 + 256 + 2 * 64, eigenvalues: 2 * 8 + 16 + 2 * 8 });
    expect(bytes.length).toBe(SKEW_HEADER_BYTES + 4 * (3 * 4 + total.matrices + total.eigenvalues));
    expect(new DataView(bytes.buffer).getUint32(8, true)).toBe(SKEW_VERSION_PER_LAYER);
    const back = deserializeSkew(bytes, lmeta);
    expect(back.perLayer).toEqual(shapes);
    expect(back.matrices).toEqual(layered.matrices);
    expect(back.eigenvalues).toEqual(layered.eigenvalues);
    expect(back.samples).toEqual(layered.samples);
  });

  it('refuses a file of other layer shapes, a version 1 file for such a model and the other way round, and a damaged table', () => {
    const otherShapes = shapes.map((x, l) => (l === 1 ? { kvHeads: 1, headDim: 8 } : x));
    expect(() => deserializeSkew(bytes, { ...lmeta, perLayer: otherShapes })).toThrow(/layer 1 is 1 KV heads × 16, the model has 1 × 8/);
    expect(codeOf(() => deserializeSkew(good, { ...meta, perLayer: [{ kvHeads: 2, headDim: 8 }, { kvHeads: 2, headDim: 8 }] }))).toBe('MODEL_UNSUPPORTED_VERSION');
    expect(codeOf(() => deserializeSkew(bytes, { ...lmeta, perLayer: undefined }))).toBe('MODEL_UNSUPPORTED_VERSION');
    const damaged = bytes.slice();
    new DataView(damaged.buffer).setUint32(SKEW_HEADER_BYTES + 4 * 4 + 4 * 3, 9, true); // headDim of the shared layer
    expect(codeOf(() => deserializeSkew(damaged, lmeta))).toBe('MODEL_BAD_VALUE');
    expect(codeOf(() => deserializeSkew(bytes.subarray(0, SKEW_HEADER_BYTES + 20), lmeta))).toBe('MODEL_TRUNCATED');
    expect(codeOf(() => deserializeSkew(bytes.subarray(0, bytes.length - 4), lmeta))).toBe('MODEL_TRUNCATED');
    // the matrices and the meta must agree on the shapes
    expect(codeOf(() => serializeSkew(layered, { ...lmeta, perLayer: otherShapes }))).toBe('BAD_ARGUMENT');
    expect(codeOf(() => serializeSkew(skew, { ...meta, perLayer: [{ kvHeads: 2, headDim: 8 }, { kvHeads: 2, headDim: 8 }] }))).toBe('BAD_ARGUMENT');
  });

  it('is cached beside the version 1 file of the same model, as <sha>.v2.lhskew', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'longhand-skew2-'));
    try {
      expect((await readSkewCache(dir, lmeta)).status).toBe('miss');
      expect(await writeSkewCache(dir, layered, lmeta)).toBe(path.join(dir, 'skew', `${SHA}.v2.lhskew`));
      const hit = await readSkewCache(dir, lmeta);
      expect(hit.status).toBe('hit');
      if (hit.status === 'hit') expect(hit.skew.matrices).toEqual(layered.matrices);
      expect((await readSkewCache(dir, { ...lmeta, perLayer: shapes.map((x) => ({ ...x, kvHeads: x.kvHeads === 1 ? 2 : x.kvHeads })) })).status).toBe('invalid');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
