// Builds KV snapshot files in memory for the tests (snapshot-file, corrupt and mutation tests):
// the same framing as writeSnapshotFile, but with a hook to edit the header JSON after the table
// is laid out, and the header re-sealed (its length and sha256 recomputed), so a test can reach
// every check behind the header checksum. Not used by the app.
import { createHash } from 'node:crypto';
import { SNAPSHOT_ALIGN, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_MAGIC, type SnapshotMeta } from './snapshot-file.ts';

export interface BuiltSection {
  name: string;
  data: Uint8Array;
}

export interface BuiltSnapshot {
  bytes: Uint8Array;
  /** Where the header JSON starts and ends (bytes 16 .. 16 + length). */
  headerStart: number;
  headerEnd: number;
  /** The table as written: absolute offsets. */
  sections: { name: string; offset: number; bytes: number }[];
}

export interface BuildOptions {
  /** Edits the header object ({ meta, sections }) after offsets and hashes are in it. */
  edit?: (header: { meta: Record<string, unknown>; sections: Record<string, unknown>[] }) => void;
  /** Replaces the header text entirely (after `edit`). */
  rawHeader?: (text: string) => string;
  /** Format version written in the prefix. */
  version?: number;
  /** Bytes reserved after the header before the first section, so an edit that grows the header does not run into the data. */
  slack?: number;
}

const sha256hex = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
const alignUp = (n: number): number => Math.ceil(n / SNAPSHOT_ALIGN) * SNAPSHOT_ALIGN;

export function buildSnapshot(meta: SnapshotMeta, sections: readonly BuiltSection[], options: BuildOptions = {}): BuiltSnapshot {
  const slack = options.slack ?? 4096;
  const table = sections.map((s) => ({ name: s.name, offset: 0, bytes: s.data.byteLength, sha256: sha256hex(s.data) }));
  // offsets: after the unedited header plus the slack
  const plainLength = new TextEncoder().encode(JSON.stringify({ meta, sections: table })).length + 16 * sections.length; // digits of offsets
  let at = alignUp(16 + plainLength + 32 + slack);
  for (const e of table) {
    e.offset = at;
    at = alignUp(at + e.bytes);
  }
  const header = { meta: { ...meta } as Record<string, unknown>, sections: table.map((e) => ({ ...e })) as Record<string, unknown>[] };
  options.edit?.(header);
  let text = JSON.stringify(header);
  if (options.rawHeader) text = options.rawHeader(text);
  const headerBytes = new TextEncoder().encode(text);
  const last = table[table.length - 1];
  const headerEnd = 16 + headerBytes.length + 32;
  const dataEnd = last === undefined ? 0 : last.offset + last.bytes;
  const bytes = new Uint8Array(Math.max(headerEnd, dataEnd));
  bytes.set(new TextEncoder().encode(SNAPSHOT_MAGIC), 0);
  const dv = new DataView(bytes.buffer);
  dv.setUint32(8, options.version ?? SNAPSHOT_FORMAT_VERSION, true);
  dv.setUint32(12, headerBytes.length, true);
  bytes.set(headerBytes, 16);
  bytes.set(createHash('sha256').update(headerBytes).digest(), 16 + headerBytes.length);
  sections.forEach((s, i) => {
    if (table[i]!.offset >= headerEnd) bytes.set(s.data, table[i]!.offset);
  });
  return { bytes, headerStart: 16, headerEnd: 16 + headerBytes.length, sections: table.map(({ name, offset, bytes: n }) => ({ name, offset, bytes: n })) };
}

/** Re-seals a file whose header JSON text was changed: new length field and sha256, data kept at its absolute offsets. */
export function resealHeader(file: Uint8Array, text: string): Uint8Array {
  const dv = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const oldLength = dv.getUint32(12, true);
  const dataStart = alignUp(16 + oldLength + 32);
  const header = new TextEncoder().encode(text);
  const headEnd = 16 + header.length + 32;
  const out = new Uint8Array(Math.max(headEnd, file.byteLength));
  if (dataStart < file.byteLength) out.set(file.subarray(dataStart), dataStart); // sections where they were (a longer header may overwrite the first)
  out.set(file.subarray(0, 12), 0);
  new DataView(out.buffer).setUint32(12, header.length, true);
  out.set(header, 16);
  out.set(createHash('sha256').update(header).digest(), 16 + header.length);
  return out;
}

export function headerText(file: Uint8Array): string {
  const length = new DataView(file.buffer, file.byteOffset, file.byteLength).getUint32(12, true);
  return new TextDecoder().decode(file.subarray(16, 16 + length));
}

export function sampleMeta(overrides: Partial<SnapshotMeta> = {}): SnapshotMeta {
  return {
    modelSha256: 'ab'.repeat(32),
    architecture: 'llama',
    layers: 3,
    heads: 8,
    kvHeads: 4,
    headDim: 16,
    vocabSize: 512,
    kvType: 'fp16',
    policy: 'infinigen',
    knobs: { alpha: 5, cap: 0.2, denseLayers: 2, partialRatio: 0.3 },
    skew: 'cd'.repeat(32),
    tokens: 57,
    createdAt: '2026-12-03T07:30:00.000Z',
    ...overrides,
  };
}

/** Deterministic bytes. */
export function bytesOf(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = s & 0xff;
  }
  return out;
}

/** A snapshot's usual sections: token ids, then one per layer (sizes not multiples of 64). */
export function sampleSections(meta: SnapshotMeta, seed: number): BuiltSection[] {
  const tokens = new Int32Array(meta.tokens).map((_, i) => (i * 7919 + seed) % meta.vocabSize);
  const out: BuiltSection[] = [{ name: 'tokens', data: new Uint8Array(tokens.buffer) }];
  for (let l = 0; l < meta.layers; l++) out.push({ name: `layer.${l}`, data: bytesOf(2 * meta.kvHeads * meta.tokens * meta.headDim * 2 + 4 * meta.tokens, seed * 31 + l) });
  return out;
}
