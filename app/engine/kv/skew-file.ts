// The skew matrices on disk: one file per model file hash, so calibration runs once per model
// (ARCHITECTURE.md §4.1). "Recompute on request" means the caller ignores the cache and writes a
// new file over the old one.
//
// Format (all little-endian; payload 4-byte aligned):
//   offset size
//   0      8    magic "LHSKEW\0\0"
//   8      4    u32 version (1)
//   12     4    u32 layers L
//   16     4    u32 kvHeads K
//   20     4    u32 headDim d
//   24     32   SHA-256 of the model file (raw bytes)
//   56     4    u32 CRC-32 (IEEE) of the payload
//   60     4    u32 reserved, 0
//   64          payload: u32 samples [L]; f32 matrices [L, K, d, d]; f32 eigenvalues [L, K, d]
// Nothing after the payload.
//
// Version 2 is the file of a model whose layers differ in KV heads and head dim (Gemma 4's window
// and global layers, KV-shared layers with none): the same header (K and d the largest), then a
// payload that opens with each layer's shape — u32 K_ℓ [L]; u32 d_ℓ [L]; u32 samples [L]; f32
// matrices layer after layer [K_ℓ, d_ℓ, d_ℓ]; f32 eigenvalues [K_ℓ, d_ℓ] — checked against the
// model's, layer by layer. A model of one shape keeps writing and reading version 1.
//
// Every field is checked against what the caller expects; failures are ModelFileErrors with the
// shared codes: MODEL_TRUNCATED (shorter than the header or the declared payload), MODEL_BAD_MAGIC,
// MODEL_UNSUPPORTED_VERSION, MODEL_BAD_VALUE (other dims, other model hash, bad CRC, trailing bytes,
// non-finite numbers, non-zero reserved field).
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ModelFileError, UsageError, type ErrorCode } from '../../common/errors.ts';
import { skewLayerOffsets, type LayerHeads, type SkewMatrices } from './skew.ts';

export const SKEW_MAGIC = Uint8Array.from([0x4c, 0x48, 0x53, 0x4b, 0x45, 0x57, 0, 0]); // "LHSKEW\0\0"
export const SKEW_VERSION = 1;
/** The version of files with per-layer shapes (above). */
export const SKEW_VERSION_PER_LAYER = 2;
export const SKEW_HEADER_BYTES = 64;

export interface SkewMeta {
  /** SHA-256 of the model file, 64 hex digits. */
  readonly modelSha256: string;
  readonly layers: number;
  readonly kvHeads: number;
  readonly headDim: number;
  /** [layer] each layer's KV heads and head dim where layers differ (SkewMatrices.perLayer): a version 2 file */
  readonly perLayer?: readonly LayerHeads[];
}

/** The file version for a model of these shapes. */
export function skewFileVersion(meta: Pick<SkewMeta, 'perLayer'>): number {
  return meta.perLayer ? SKEW_VERSION_PER_LAYER : SKEW_VERSION;
}

/** Payload bytes for a shape (with perLayer: the version 2 payload, its shape table included). */
export function skewPayloadBytes(layers: number, kvHeads: number, headDim: number, perLayer?: readonly LayerHeads[]): number {
  if (perLayer === undefined) return 4 * (layers + layers * kvHeads * headDim * headDim + layers * kvHeads * headDim);
  const total = skewLayerOffsets({ kvHeads, headDim, perLayer }, layers);
  return 4 * (3 * layers + total.matrices + total.eigenvalues);
}

function sameLayerShapes(a: readonly LayerHeads[] | undefined, b: readonly LayerHeads[] | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.length === b.length && a.every((x, l) => x.kvHeads === b[l]!.kvHeads && x.headDim === b[l]!.headDim);
}

export function serializeSkew(m: SkewMatrices, meta: SkewMeta): Uint8Array {
  const hash = hashBytes(meta.modelSha256);
  const { layers, kvHeads, headDim: d } = m;
  if (!sameLayerShapes(m.perLayer, meta.perLayer)) throw new UsageError('serializeSkew: the matrices\' per-layer shapes differ from the meta\'s', {});
  if (layers !== meta.layers || kvHeads !== meta.kvHeads || d !== meta.headDim) {
    throw new UsageError(`serializeSkew: matrices are ${layers}×${kvHeads}×${d}, meta says ${meta.layers}×${meta.kvHeads}×${meta.headDim}`, {});
  }
  const total = skewLayerOffsets(m, layers); // elements of every layer's matrices and eigenvalues
  if (m.matrices.length !== total.matrices || m.eigenvalues.length !== total.eigenvalues || m.samples.length !== layers) {
    throw new UsageError('serializeSkew: array lengths do not match the dimensions', {});
  }
  const bytes = new Uint8Array(SKEW_HEADER_BYTES + skewPayloadBytes(layers, kvHeads, d, m.perLayer));
  const view = new DataView(bytes.buffer);
  bytes.set(SKEW_MAGIC, 0);
  view.setUint32(8, skewFileVersion(m), true);
  view.setUint32(12, layers, true);
  view.setUint32(16, kvHeads, true);
  view.setUint32(20, d, true);
  bytes.set(hash, 24);
  let at = SKEW_HEADER_BYTES;
  if (m.perLayer) {
    for (let i = 0; i < layers; i++, at += 4) view.setUint32(at, m.perLayer[i]!.kvHeads, true);
    for (let i = 0; i < layers; i++, at += 4) view.setUint32(at, m.perLayer[i]!.headDim, true);
  }
  for (let i = 0; i < layers; i++, at += 4) view.setUint32(at, m.samples[i]!, true);
  for (const arr of [m.matrices, m.eigenvalues]) {
    for (let i = 0; i < arr.length; i++, at += 4) view.setFloat32(at, arr[i]!, true);
  }
  view.setUint32(56, crc32(bytes.subarray(SKEW_HEADER_BYTES)), true);
  return bytes;
}

/** Parses and validates a skew file against what the caller expects. `source` names it in errors. */
export function deserializeSkew(bytes: Uint8Array, expected: SkewMeta, source = '<skew cache>'): SkewMatrices {
  const fail = (code: ErrorCode, message: string, offset?: number): never => {
    throw new ModelFileError(code, source, `skew file: ${message}`, {}, offset);
  };
  const hash = hashBytes(expected.modelSha256);
  if (bytes.length < SKEW_HEADER_BYTES) fail('MODEL_TRUNCATED', `${bytes.length} bytes is shorter than the ${SKEW_HEADER_BYTES}-byte header`, bytes.length);
  for (let i = 0; i < SKEW_MAGIC.length; i++) if (bytes[i] !== SKEW_MAGIC[i]) fail('MODEL_BAD_MAGIC', 'not a Longhand skew file', i);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = view.getUint32(8, true);
  const want = skewFileVersion(expected);
  if (version !== want) fail('MODEL_UNSUPPORTED_VERSION', `version ${version}, this build reads ${want}${expected.perLayer ? ' (per-layer shapes)' : ''} for this model`, 8);
  const dims = [
    ['layers', view.getUint32(12, true), expected.layers, 12],
    ['kvHeads', view.getUint32(16, true), expected.kvHeads, 16],
    ['headDim', view.getUint32(20, true), expected.headDim, 20],
  ] as const;
  for (const [name, got, want, offset] of dims) if (got !== want) fail('MODEL_BAD_VALUE', `${name} is ${got}, the model has ${want}`, offset);
  for (let i = 0; i < 32; i++) if (bytes[24 + i] !== hash[i]) fail('MODEL_BAD_VALUE', 'made for a different model file (SHA-256 differs)', 24);
  if (view.getUint32(60, true) !== 0) fail('MODEL_BAD_VALUE', 'reserved header field is not zero', 60);

  const { layers, kvHeads, headDim: d, perLayer } = expected;
  const total = SKEW_HEADER_BYTES + skewPayloadBytes(layers, kvHeads, d, perLayer);
  let at = SKEW_HEADER_BYTES;
  if (perLayer) {
    // the shape table, before the length: a file of other shapes says so rather than "truncated"
    if (bytes.length < at + 8 * layers) fail('MODEL_TRUNCATED', `${bytes.length} bytes is shorter than the per-layer shape table`, bytes.length);
    for (let l = 0; l < layers; l++) {
      const g = view.getUint32(at + 4 * l, true);
      const hd = view.getUint32(at + 4 * (layers + l), true);
      if (g !== perLayer[l]!.kvHeads || hd !== perLayer[l]!.headDim) fail('MODEL_BAD_VALUE', `layer ${l} is ${g} KV heads × ${hd}, the model has ${perLayer[l]!.kvHeads} × ${perLayer[l]!.headDim}`, at + 4 * l);
    }
    at += 8 * layers;
  }
  if (bytes.length < total) fail('MODEL_TRUNCATED', `${bytes.length} bytes, the header declares ${total}`, bytes.length);
  if (bytes.length > total) fail('MODEL_BAD_VALUE', `${bytes.length - total} bytes after the payload`, total);
  if (crc32(bytes.subarray(SKEW_HEADER_BYTES, total)) !== view.getUint32(56, true)) fail('MODEL_BAD_VALUE', 'payload checksum mismatch (corrupt file)', 56);

  const samples = new Uint32Array(layers); // [L]
  for (let i = 0; i < layers; i++, at += 4) samples[i] = view.getUint32(at, true);
  const sizes = skewLayerOffsets({ kvHeads, headDim: d, perLayer }, layers);
  const matrices = new Float32Array(sizes.matrices); // [L, K, d, d] (layer after layer at its own K_ℓ, d_ℓ with perLayer)
  const eigenvalues = new Float32Array(sizes.eigenvalues); // [L, K, d] (likewise)
  for (const arr of [matrices, eigenvalues]) {
    for (let i = 0; i < arr.length; i++, at += 4) {
      const x = view.getFloat32(at, true);
      if (!Number.isFinite(x)) fail('MODEL_BAD_VALUE', 'non-finite value', at);
      arr[i] = x;
    }
  }
  return { layers, kvHeads, headDim: d, matrices, eigenvalues, samples, ...(perLayer ? { perLayer } : {}) };
}

/** Where the skew file of a model lives: `<cacheDir>/skew/<sha256>.v1.lhskew` (`.v2.` with per-layer shapes). */
export function skewCachePath(cacheDir: string, modelSha256: string, version: number = SKEW_VERSION): string {
  hashBytes(modelSha256); // validates: 64 hex digits, so the name cannot escape the folder
  return path.join(cacheDir, 'skew', `${modelSha256.toLowerCase()}.v${version}.lhskew`);
}

export type SkewCacheRead =
  | { readonly status: 'hit'; readonly skew: SkewMatrices; readonly path: string }
  | { readonly status: 'miss'; readonly path: string }
  /** The file exists but cannot be used: recalibrate and overwrite it. */
  | { readonly status: 'invalid'; readonly path: string; readonly error: ModelFileError };

/** Reads the cached matrices of a model. Never throws for a missing or bad file (see the status). */
export async function readSkewCache(cacheDir: string, meta: SkewMeta): Promise<SkewCacheRead> {
  const file = skewCachePath(cacheDir, meta.modelSha256, skewFileVersion(meta));
  let bytes: Uint8Array;
  try {
    bytes = await readFile(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { status: 'miss', path: file };
    throw e;
  }
  try {
    return { status: 'hit', skew: deserializeSkew(bytes, meta, file), path: file };
  } catch (e) {
    if (e instanceof ModelFileError) return { status: 'invalid', path: file, error: e };
    throw e;
  }
}

/** Writes the matrices atomically (temporary file + rename), replacing any previous file. */
export async function writeSkewCache(cacheDir: string, skew: SkewMatrices, meta: SkewMeta): Promise<string> {
  const file = skewCachePath(cacheDir, meta.modelSha256, skewFileVersion(meta));
  const bytes = serializeSkew(skew, meta);
  await mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  try {
    await writeFile(tmp, bytes);
    await rename(tmp, file);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  return file;
}

function hashBytes(hex: string): Uint8Array {
  if (typeof hex !== 'string' || !/^[0-9a-fA-F]{64}$/.test(hex)) {
    throw new UsageError('model SHA-256 must be 64 hex digits', { value: String(hex).slice(0, 80) });
  }
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

let crcTable: Uint32Array | undefined;

/** CRC-32 (IEEE 802.3, the zlib/PNG one). */
export function crc32(bytes: Uint8Array): number {
  if (crcTable === undefined) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = crcTable[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
