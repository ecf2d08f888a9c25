// KV snapshot files (issue 10 part 3): a document's cached sequence saved to disk, so a later
// session restores the rows straight into the pool instead of prefilling them again.
//
// Format v2, little-endian (v2: the same framing as v1; a model with linear-attention layers adds
// sections 'recurrent.<ℓ>', its recurrent state, which v1 files never had: a v1 file is refused
// with SNAPSHOT_VERSION, whatever the model, and written again by the next save):
//   offset 0   8 bytes   magic "LHKVSNAP"
//          8   u32       format version (SNAPSHOT_FORMAT_VERSION)
//          12  u32       header length N (1 .. 1 MiB)
//          16  N bytes   header JSON, UTF-8: { "meta": SnapshotMeta, "sections": [{ name, offset, bytes, sha256 }] }
//          16+N 32 bytes sha256 of the N header bytes
//   then the sections, each at an absolute file offset that is a multiple of 64, in table order,
//   not overlapping; the gaps are zero; the file ends where the last section ends.
// What the sections hold is the caller's business (the engine writes token ids and one section per
// pool layer, native/index.d.ts snapshotLayerBytes); this module only frames, checks and checksums.
//
// Reading trusts nothing: the path is stat'ed before it is opened (a FIFO, a socket or a directory
// is never opened, so nothing blocks), opened O_NONBLOCK and fstat'ed again (a path swapped between
// the two), and every length and offset is checked against the file size before it is used. Every
// failure is a LonghandError with code SNAPSHOT_UNREADABLE | SNAPSHOT_CORRUPT | SNAPSHOT_VERSION |
// SNAPSHOT_MISMATCH, details.reason saying which check failed and details.file naming the file.
// A write that fails is SNAPSHOT_UNWRITABLE (reason permission | missing | no-space | io).
//
// Writing is atomic: a temporary file beside the target (so rename() stays on one file system)
// filled section by section (never the whole file in memory), fsync'ed, renamed over the target,
// then the folder fsync'ed so the rename itself survives a power cut. On any failure the temporary
// file is removed and an existing target is untouched.
import { createHash, randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { open, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { LonghandError, UsageError, type ErrorCode } from '../../common/errors.ts';

export const SNAPSHOT_FORMAT_VERSION = 2;

/** The file's first 8 bytes. */
export const SNAPSHOT_MAGIC = 'LHKVSNAP';
/** Suffix of the temporary files writeSnapshotFile() makes beside the target (".<name>.<pid>.<hex>.lhkv-tmp"). */
export const SNAPSHOT_TEMP_SUFFIX = '.lhkv-tmp';

/** Limits that keep a hostile file from making the reader allocate or loop absurdly. */
export const SNAPSHOT_LIMITS = {
  headerBytes: 1 << 20, // header JSON
  jsonDepth: 16, // nesting of the header JSON (meta.knobs included)
  sections: 4096,
  nameChars: 128, // section names
  stringChars: 256, // meta strings (architecture, policy, skew, createdAt)
  tokens: 2 ** 31 - 1, // positions are int32 in the pool
  layers: 1024, // native LH_MAX_LAYERS
  heads: 1024, // native LH_MAX_KV_HEADS (query heads too)
  headDim: 1024, // native LH_MAX_HEAD_DIM
  vocabSize: 1 << 24,
  sectionBytes: Number.MAX_SAFE_INTEGER,
} as const;

/** Sections start on this boundary (a cache line; lets a reader hand a section to native code aligned). */
export const SNAPSHOT_ALIGN = 64;

const PREFIX_BYTES = 16; // magic + version + header length
const HASH_BYTES = 32;
/** Reads and writes move at most this much per call: large enough to run at disk speed, small enough to overlap hashing with I/O. */
const CHUNK_BYTES = 16 << 20;

export interface SnapshotMeta {
  modelSha256: string;
  architecture: string;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocabSize: number;
  kvType: 'fp16' | 'fp32' | 'int8';
  policy: string;
  knobs: Record<string, unknown>; // JSON-able
  skew: string | null; // identity of the InfiniGen skew (e.g. sha256 of the skew file), null when none
  tokens: number;
  createdAt: string;
}

/** One section to write: `read()` is called once, in table order, while writing; it may return a reused buffer. */
export interface SectionSource {
  name: string;
  bytes: number;
  read(): Uint8Array | Promise<Uint8Array>;
}

export interface SnapshotReader {
  readonly path: string;
  readonly meta: SnapshotMeta;
  readonly fileBytes: number;
  readonly sections: readonly { name: string; bytes: number }[];
  /** Reads and checks one section (sha256) into `into` (exactly its size) or a new buffer. */
  readSection(name: string, into?: Uint8Array): Promise<Uint8Array>;
  close(): Promise<void>;
}

export type SnapshotUnreadableReason = 'missing' | 'not-a-file' | 'permission' | 'io';
export type SnapshotCorruptReason = 'empty' | 'truncated' | 'magic' | 'header' | 'counts' | 'checksum' | 'layout';
export type SnapshotMismatchReason = 'model' | 'shape' | 'kvType' | 'policy' | 'skew' | 'vocab';

interface TableEntry {
  name: string;
  offset: number;
  bytes: number;
  sha256: string;
}

// ---------------------------------------------------------------------------------------------
// errors
// ---------------------------------------------------------------------------------------------

function snapshotError(code: ErrorCode, file: string, reason: string, message: string, details: Record<string, string | number | boolean | null> = {}, cause?: unknown): LonghandError {
  return new LonghandError(code, `KV snapshot ${file}: ${message}`, { ...details, file, reason }, cause === undefined ? undefined : { cause });
}

const corrupt = (file: string, reason: SnapshotCorruptReason, message: string, details: Record<string, string | number | boolean | null> = {}): LonghandError =>
  snapshotError('SNAPSHOT_CORRUPT', file, reason, message, details);

/** Maps a file-system error to SNAPSHOT_UNREADABLE with the reason a user can act on. */
function unreadable(file: string, error: unknown, doing: string): LonghandError {
  const code = (error as NodeJS.ErrnoException | undefined)?.code ?? '';
  const reason: SnapshotUnreadableReason =
    code === 'ENOENT' || code === 'ENOTDIR' ? 'missing' : code === 'EACCES' || code === 'EPERM' ? 'permission' : code === 'EISDIR' || code === 'ENXIO' ? 'not-a-file' : 'io';
  const why = reason === 'missing' ? 'no such file' : reason === 'permission' ? 'permission denied' : reason === 'not-a-file' ? 'not a regular file' : 'I/O error';
  return snapshotError('SNAPSHOT_UNREADABLE', file, reason, `cannot ${doing}: ${why}${code ? ` (${code})` : ''}`, { errno: code || null }, error);
}

// ---------------------------------------------------------------------------------------------
// meta and table validation (shared by the reader, which reports SNAPSHOT_CORRUPT, and the
// writer, which reports the caller's mistake as a UsageError)
// ---------------------------------------------------------------------------------------------

type Problem = { reason: 'header' | 'counts' | 'layout'; message: string };

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const SHA256_HEX = /^[0-9a-f]{64}$/;
const KV_TYPES = ['fp16', 'fp32', 'int8'] as const;

function checkString(o: Record<string, unknown>, key: string, max: number, nullable = false): Problem | null {
  const v = o[key];
  if (nullable && v === null) return null;
  if (typeof v !== 'string') return { reason: 'header', message: `meta.${key} must be a string${nullable ? ' or null' : ''}, got ${describe(v)}` };
  if (v.length === 0 || v.length > max) return { reason: 'header', message: `meta.${key} must have 1..${max} characters, has ${v.length}` };
  return null;
}

function checkCount(o: Record<string, unknown>, key: string, min: number, max: number): Problem | null {
  const v = o[key];
  if (typeof v !== 'number' || !Number.isInteger(v)) return { reason: 'header', message: `meta.${key} must be an integer, got ${describe(v)}` };
  if (v < min || v > max) return { reason: 'counts', message: `meta.${key} is ${v}, outside ${min}..${max}` };
  return null;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'string') return `a string of ${v.length} characters`;
  if (typeof v === 'number') return String(v);
  return typeof v;
}

/** The first thing wrong with a meta object, or null. */
function metaProblem(meta: unknown): Problem | null {
  if (!isPlainObject(meta)) return { reason: 'header', message: `meta must be an object, got ${describe(meta)}` };
  const m = meta;
  if (typeof m.modelSha256 !== 'string' || !SHA256_HEX.test(m.modelSha256)) return { reason: 'header', message: 'meta.modelSha256 must be 64 lowercase hex digits' };
  const problem =
    checkString(m, 'architecture', SNAPSHOT_LIMITS.stringChars) ??
    checkCount(m, 'layers', 1, SNAPSHOT_LIMITS.layers) ??
    checkCount(m, 'heads', 1, SNAPSHOT_LIMITS.heads) ??
    checkCount(m, 'kvHeads', 1, SNAPSHOT_LIMITS.heads) ??
    checkCount(m, 'headDim', 1, SNAPSHOT_LIMITS.headDim) ??
    checkCount(m, 'vocabSize', 1, SNAPSHOT_LIMITS.vocabSize) ??
    checkString(m, 'policy', SNAPSHOT_LIMITS.stringChars) ??
    checkString(m, 'skew', SNAPSHOT_LIMITS.stringChars, true) ??
    checkCount(m, 'tokens', 0, SNAPSHOT_LIMITS.tokens) ??
    checkString(m, 'createdAt', SNAPSHOT_LIMITS.stringChars);
  if (problem !== null) return problem;
  if ((m.heads as number) % (m.kvHeads as number) !== 0) return { reason: 'counts', message: `meta.heads (${String(m.heads)}) is not a multiple of meta.kvHeads (${String(m.kvHeads)})` };
  if (!KV_TYPES.includes(m.kvType as (typeof KV_TYPES)[number])) return { reason: 'header', message: `meta.kvType must be 'fp16', 'fp32' or 'int8', got ${describe(m.kvType)}` };
  if (!isPlainObject(m.knobs)) return { reason: 'header', message: `meta.knobs must be an object, got ${describe(m.knobs)}` };
  return null;
}

/** The meta with exactly the documented keys (a file may carry others; they are dropped). */
function pickMeta(m: SnapshotMeta): SnapshotMeta {
  return {
    modelSha256: m.modelSha256, architecture: m.architecture, layers: m.layers, heads: m.heads, kvHeads: m.kvHeads, headDim: m.headDim,
    vocabSize: m.vocabSize, kvType: m.kvType, policy: m.policy, knobs: m.knobs, skew: m.skew, tokens: m.tokens, createdAt: m.createdAt,
  };
}

function nameProblem(name: unknown, i: number): Problem | null {
  if (typeof name !== 'string') return { reason: 'header', message: `section #${i} name must be a string, got ${describe(name)}` };
  if (name.length === 0 || name.length > SNAPSHOT_LIMITS.nameChars) return { reason: 'header', message: `section #${i} name must have 1..${SNAPSHOT_LIMITS.nameChars} characters, has ${name.length}` };
  return null;
}

/** Deepest nesting of arrays/objects in JSON text (strings skipped), without parsing it: bounds the parse and the walk after it. */
function jsonDepth(text: string, limit: number): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      depth++;
      if (depth > deepest) deepest = depth;
      if (deepest > limit) return deepest; // no need to look further
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return deepest;
}

const alignUp = (n: number): number => Math.ceil(n / SNAPSHOT_ALIGN) * SNAPSHOT_ALIGN;

// ---------------------------------------------------------------------------------------------
// reading
// ---------------------------------------------------------------------------------------------

async function readExactly(fh: FileHandle, file: string, into: Uint8Array, position: number, what: string): Promise<void> {
  let done = 0;
  while (done < into.byteLength) {
    let n: number;
    try {
      ({ bytesRead: n } = await fh.read(into, done, Math.min(into.byteLength - done, CHUNK_BYTES), position + done));
    } catch (error) {
      throw unreadable(file, error, `read ${what}`);
    }
    if (n === 0) throw corrupt(file, 'truncated', `the file ends at byte ${position + done} inside ${what} (${into.byteLength} bytes from byte ${position})`);
    done += n;
  }
}

export async function openSnapshotFile(path: string): Promise<SnapshotReader> {
  if (typeof path !== 'string' || path.length === 0 || path.includes('\0')) throw new UsageError(`openSnapshotFile: path must be a non-empty string without NUL, got ${describe(path)}`);
  // stat first: a FIFO or socket is never opened (opening a FIFO for reading can block)
  let st;
  try {
    st = await stat(path);
  } catch (error) {
    throw unreadable(path, error, 'stat the file');
  }
  if (!st.isFile()) throw snapshotError('SNAPSHOT_UNREADABLE', path, 'not-a-file', `not a regular file (${kindOf(st)})`);
  let fh: FileHandle;
  try {
    fh = await open(path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  } catch (error) {
    throw unreadable(path, error, 'open the file');
  }
  try {
    const reader = await readHeader(fh, path);
    return reader;
  } catch (error) {
    await fh.close().catch(() => undefined);
    throw error;
  }
}

function kindOf(st: { isDirectory(): boolean; isFIFO(): boolean; isSocket(): boolean; isCharacterDevice(): boolean; isBlockDevice(): boolean }): string {
  return st.isDirectory() ? 'a directory' : st.isFIFO() ? 'a FIFO' : st.isSocket() ? 'a socket' : st.isCharacterDevice() ? 'a character device' : st.isBlockDevice() ? 'a block device' : 'not a file';
}

async function readHeader(fh: FileHandle, path: string): Promise<SnapshotReader> {
  let st;
  try {
    st = await fh.stat();
  } catch (error) {
    throw unreadable(path, error, 'fstat the file');
  }
  // the path may have been replaced between stat() and open(): judge what was opened
  if (!st.isFile()) throw snapshotError('SNAPSHOT_UNREADABLE', path, 'not-a-file', `not a regular file (${kindOf(st)})`);
  const fileBytes = st.size;
  if (fileBytes === 0) throw corrupt(path, 'empty', 'the file is empty (0 bytes)');
  const prefix = new Uint8Array(Math.min(PREFIX_BYTES, fileBytes));
  await readExactly(fh, path, prefix, 0, 'the file prefix');
  const magic = new TextEncoder().encode(SNAPSHOT_MAGIC);
  for (let i = 0; i < Math.min(magic.length, prefix.length); i++)
    if (prefix[i] !== magic[i]) throw corrupt(path, 'magic', `not a Longhand KV snapshot (the first bytes are not "${SNAPSHOT_MAGIC}")`);
  if (fileBytes < PREFIX_BYTES) throw corrupt(path, 'truncated', `the file is ${fileBytes} bytes, shorter than the ${PREFIX_BYTES}-byte prefix`);
  const view = new DataView(prefix.buffer, prefix.byteOffset, prefix.byteLength);
  const version = view.getUint32(8, true);
  if (version !== SNAPSHOT_FORMAT_VERSION)
    throw snapshotError('SNAPSHOT_VERSION', path, 'version', `written by snapshot format version ${version}; this Longhand reads version ${SNAPSHOT_FORMAT_VERSION}`, { found: version, expected: SNAPSHOT_FORMAT_VERSION });
  const headerBytes = view.getUint32(12, true);
  if (headerBytes === 0) throw corrupt(path, 'header', 'the header length is 0');
  if (headerBytes > SNAPSHOT_LIMITS.headerBytes) throw corrupt(path, 'counts', `the header length is ${headerBytes} bytes, more than the ${SNAPSHOT_LIMITS.headerBytes} allowed`, { headerBytes });
  const headerEnd = PREFIX_BYTES + headerBytes + HASH_BYTES;
  if (headerEnd > fileBytes) throw corrupt(path, 'truncated', `the file is ${fileBytes} bytes, but its ${headerBytes}-byte header and checksum end at byte ${headerEnd}`, { headerBytes });
  const headerAndHash = new Uint8Array(headerBytes + HASH_BYTES);
  await readExactly(fh, path, headerAndHash, PREFIX_BYTES, 'the header');
  const headerRaw = headerAndHash.subarray(0, headerBytes);
  const digest = createHash('sha256').update(headerRaw).digest();
  if (!digest.equals(headerAndHash.subarray(headerBytes))) throw corrupt(path, 'checksum', 'the header checksum (sha256) does not match: the header is damaged');
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(headerRaw);
  } catch {
    throw corrupt(path, 'header', 'the header is not valid UTF-8');
  }
  const depth = jsonDepth(text, SNAPSHOT_LIMITS.jsonDepth);
  if (depth > SNAPSHOT_LIMITS.jsonDepth) throw corrupt(path, 'counts', `the header JSON nests deeper than ${SNAPSHOT_LIMITS.jsonDepth} levels`);
  let header: unknown;
  try {
    header = JSON.parse(text);
  } catch (error) {
    throw corrupt(path, 'header', `the header is not valid JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  if (!isPlainObject(header)) throw corrupt(path, 'header', `the header must be a JSON object, got ${describe(header)}`);
  const mp = metaProblem(header.meta);
  if (mp !== null) throw corrupt(path, mp.reason, mp.message);
  const meta = pickMeta(header.meta as SnapshotMeta);
  const table = tableFrom(header.sections, path, headerEnd, fileBytes);
  return new FileSnapshotReader(fh, path, meta, fileBytes, table);
}

/** Checks the section table: types, counts, alignment, order, overlap, names, bounds, and that the file ends with the last section. */
function tableFrom(raw: unknown, path: string, headerEnd: number, fileBytes: number): TableEntry[] {
  if (!Array.isArray(raw)) throw corrupt(path, 'header', `the header's sections must be an array, got ${describe(raw)}`);
  if (raw.length > SNAPSHOT_LIMITS.sections) throw corrupt(path, 'counts', `the header lists ${raw.length} sections, more than the ${SNAPSHOT_LIMITS.sections} allowed`, { sections: raw.length });
  const out: TableEntry[] = [];
  const names = new Set<string>();
  let end = headerEnd; // where the previous section (or the header) ends
  for (let i = 0; i < raw.length; i++) {
    const e: unknown = raw[i];
    if (!isPlainObject(e)) throw corrupt(path, 'header', `section #${i} must be an object, got ${describe(e)}`);
    const np = nameProblem(e.name, i);
    if (np !== null) throw corrupt(path, np.reason, np.message);
    const name = e.name as string;
    for (const key of ['offset', 'bytes'] as const) {
      const v = e[key];
      if (typeof v !== 'number' || !Number.isInteger(v)) throw corrupt(path, 'header', `section "${name}" ${key} must be an integer, got ${describe(v)}`);
      if (v < 0 || v > SNAPSHOT_LIMITS.sectionBytes) throw corrupt(path, 'counts', `section "${name}" ${key} is ${v}, outside 0..2^53-1`);
    }
    if (typeof e.sha256 !== 'string' || !SHA256_HEX.test(e.sha256)) throw corrupt(path, 'header', `section "${name}" sha256 must be 64 lowercase hex digits`);
    const offset = e.offset as number;
    const bytes = e.bytes as number;
    if (names.has(name)) throw corrupt(path, 'layout', `section "${name}" appears twice in the table`);
    names.add(name);
    if (offset % SNAPSHOT_ALIGN !== 0) throw corrupt(path, 'layout', `section "${name}" starts at byte ${offset}, not a multiple of ${SNAPSHOT_ALIGN}`, { offset });
    if (offset < end) throw corrupt(path, 'layout', `section "${name}" starts at byte ${offset}, inside the header or the section before it (which ends at byte ${end})`, { offset });
    if (offset + bytes > fileBytes) throw corrupt(path, 'truncated', `the file is ${fileBytes} bytes, but section "${name}" needs bytes ${offset}..${offset + bytes}`, { offset, bytes });
    end = offset + bytes;
    out.push({ name, offset, bytes, sha256: e.sha256 });
  }
  const expectedEnd = end; // the last section's end, or the header's without sections
  if (fileBytes !== expectedEnd)
    throw corrupt(path, 'layout', `the file is ${fileBytes} bytes, but its last section ends at byte ${expectedEnd}: ${fileBytes - expectedEnd} bytes more than the table describes`);
  return out;
}

class FileSnapshotReader implements SnapshotReader {
  readonly sections: readonly { name: string; bytes: number }[];
  private readonly byName: Map<string, TableEntry>;
  private closed = false;

  constructor(
    private readonly fh: FileHandle,
    readonly path: string,
    readonly meta: SnapshotMeta,
    readonly fileBytes: number,
    table: TableEntry[],
  ) {
    this.sections = table.map((e) => ({ name: e.name, bytes: e.bytes }));
    this.byName = new Map(table.map((e) => [e.name, e]));
  }

  async readSection(name: string, into?: Uint8Array): Promise<Uint8Array> {
    if (this.closed) throw new UsageError(`readSection("${name}"): the snapshot reader of ${this.path} is closed`);
    const entry = this.byName.get(name);
    if (entry === undefined) throw new UsageError(`readSection: ${this.path} has no section "${name}" (it has ${this.sections.length}: ${this.sections.slice(0, 8).map((s) => s.name).join(', ')}${this.sections.length > 8 ? ', ...' : ''})`);
    if (into !== undefined && (!(into instanceof Uint8Array) || into.byteLength !== entry.bytes))
      throw new UsageError(`readSection("${name}"): into must be a Uint8Array of exactly ${entry.bytes} bytes, has ${into instanceof Uint8Array ? into.byteLength : describe(into)}`);
    const out = into ?? new Uint8Array(entry.bytes);
    // Read in chunks straight into `out`, and hash chunk i while chunk i+1 is being read (the
    // read runs on libuv's thread pool), so a restore runs at max(disk, sha256) speed, not their sum.
    const hash = createHash('sha256');
    let pending: Promise<void> | null = null;
    let hashed = 0;
    for (let at = 0; at < entry.bytes || pending !== null; ) {
      const next: Promise<void> | null =
        at < entry.bytes ? readExactly(this.fh, this.path, out.subarray(at, Math.min(entry.bytes, at + CHUNK_BYTES)), entry.offset + at, `section "${name}"`) : null;
      if (pending !== null) {
        try {
          await pending;
        } catch (error) {
          await next?.catch(() => undefined); // settle the read in flight before reporting
          throw error;
        }
        const upto = Math.min(entry.bytes, hashed + CHUNK_BYTES);
        hash.update(out.subarray(hashed, upto));
        hashed = upto;
      }
      pending = next;
      at = Math.min(entry.bytes, at + CHUNK_BYTES);
      if (next === null) break;
    }
    if (pending !== null) {
      await pending;
      hash.update(out.subarray(hashed, entry.bytes));
    }
    const digest = hash.digest('hex');
    if (digest !== entry.sha256) throw corrupt(this.path, 'checksum', `section "${name}" (${entry.bytes} bytes at byte ${entry.offset}) fails its sha256 check: the file is damaged`, { section: name });
    return out;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.fh.close();
  }
}

// ---------------------------------------------------------------------------------------------
// fit
// ---------------------------------------------------------------------------------------------

/**
 * JSON with object keys sorted, so two knob objects compare by content, not key order. Keys whose
 * value is undefined are left out, as JSON.stringify leaves them out of the file: the engine's
 * knobs object and the same knobs read back from a snapshot must compare equal.
 */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (isPlainObject(v))
    return `{${Object.keys(v).filter((k) => v[k] !== undefined).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

/** Throws SNAPSHOT_MISMATCH (details.reason 'model' | 'shape' | 'kvType' | 'policy' | 'skew' | 'vocab') when the meta does not fit. */
export function checkSnapshotFits(meta: SnapshotMeta, expected: Omit<SnapshotMeta, 'tokens' | 'createdAt'>): void {
  const mismatch = (reason: SnapshotMismatchReason, what: string, found: string, want: string): LonghandError =>
    new LonghandError('SNAPSHOT_MISMATCH', `KV snapshot does not fit the loaded model: ${what} is ${found} in the snapshot, ${want} here`, { reason, found, expected: want });
  if (meta.modelSha256 !== expected.modelSha256) throw mismatch('model', 'the model file (sha256)', meta.modelSha256, expected.modelSha256);
  const shape = (m: Omit<SnapshotMeta, 'tokens' | 'createdAt'>): string => `${m.architecture} ${m.layers} layers x ${m.heads} heads (${m.kvHeads} KV) x ${m.headDim}`;
  if (shape(meta) !== shape(expected)) throw mismatch('shape', 'the shape', shape(meta), shape(expected));
  if (meta.vocabSize !== expected.vocabSize) throw mismatch('vocab', 'the vocabulary size', String(meta.vocabSize), String(expected.vocabSize));
  if (meta.kvType !== expected.kvType) throw mismatch('kvType', 'the KV type', meta.kvType, expected.kvType);
  const policy = (m: Omit<SnapshotMeta, 'tokens' | 'createdAt'>): string => `${m.policy} ${canonical(m.knobs)}`;
  if (policy(meta) !== policy(expected)) throw mismatch('policy', 'the policy and its knobs', policy(meta), policy(expected));
  if (meta.skew !== expected.skew) throw mismatch('skew', 'the InfiniGen skew', String(meta.skew), String(expected.skew));
}

// ---------------------------------------------------------------------------------------------
// writing
// ---------------------------------------------------------------------------------------------

/** The header text and section offsets for a table; offsets depend on the header's length, which depends on their digits: iterate to the fixed point. */
function planLayout(meta: SnapshotMeta, sections: readonly SectionSource[]): { table: TableEntry[]; total: number; render: (t: TableEntry[]) => string } {
  const render = (table: TableEntry[]): string => JSON.stringify({ meta: pickMeta(meta), sections: table });
  const zero = '0'.repeat(64); // a sha256 in hex always has 64 characters, so the final header has the same length
  let table: TableEntry[] = sections.map((s) => ({ name: s.name, offset: 0, bytes: s.bytes, sha256: zero }));
  for (let round = 0; round < 8; round++) {
    const headerEnd = PREFIX_BYTES + new TextEncoder().encode(render(table)).length + HASH_BYTES;
    let at = alignUp(headerEnd);
    const next = table.map((e) => {
      const placed = { ...e, offset: at };
      at = alignUp(at + e.bytes);
      return placed;
    });
    const same = next.every((e, i) => e.offset === table[i]!.offset);
    table = next;
    if (same) {
      const last = table[table.length - 1];
      return { table, total: last === undefined ? headerEnd : last.offset + last.bytes, render };
    }
  }
  throw new LonghandError('INTERNAL', 'snapshot layout did not converge'); // each round only grows offsets' digit counts: unreachable
}

async function writeAll(fh: FileHandle, data: Uint8Array, position: number): Promise<void> {
  for (let done = 0; done < data.byteLength; ) {
    const { bytesWritten } = await fh.write(data, done, Math.min(data.byteLength - done, 1 << 30), position + done);
    done += bytesWritten;
  }
}

export async function writeSnapshotFile(path: string, meta: SnapshotMeta, sections: readonly SectionSource[]): Promise<{ bytes: number }> {
  if (typeof path !== 'string' || path.length === 0 || path.includes('\0')) throw new UsageError(`writeSnapshotFile: path must be a non-empty string without NUL, got ${describe(path)}`);
  const mp = metaProblem(meta);
  if (mp !== null) throw new UsageError(`writeSnapshotFile(${path}): ${mp.message}`);
  let knobsText: string;
  try {
    knobsText = JSON.stringify(meta.knobs);
  } catch (error) {
    throw new UsageError(`writeSnapshotFile(${path}): meta.knobs is not JSON-able (${error instanceof Error ? error.message : String(error)})`);
  }
  if (jsonDepth(knobsText, SNAPSHOT_LIMITS.jsonDepth) > SNAPSHOT_LIMITS.jsonDepth - 2) throw new UsageError(`writeSnapshotFile(${path}): meta.knobs nests too deeply`);
  if (!Array.isArray(sections) || sections.length > SNAPSHOT_LIMITS.sections) throw new UsageError(`writeSnapshotFile(${path}): sections must be an array of at most ${SNAPSHOT_LIMITS.sections}`);
  const names = new Set<string>();
  sections.forEach((s, i) => {
    const np = nameProblem(s?.name, i);
    if (np !== null) throw new UsageError(`writeSnapshotFile(${path}): ${np.message}`);
    if (names.has(s.name)) throw new UsageError(`writeSnapshotFile(${path}): section "${s.name}" appears twice`);
    names.add(s.name);
    if (!Number.isSafeInteger(s.bytes) || s.bytes < 0) throw new UsageError(`writeSnapshotFile(${path}): section "${s.name}" bytes must be a non-negative safe integer, got ${describe(s.bytes)}`);
    if (typeof s.read !== 'function') throw new UsageError(`writeSnapshotFile(${path}): section "${s.name}" has no read()`);
  });
  const { table, total, render } = planLayout(meta, sections);
  const header = new TextEncoder().encode(render(table));
  if (header.length > SNAPSHOT_LIMITS.headerBytes) throw new UsageError(`writeSnapshotFile(${path}): the header would be ${header.length} bytes, more than ${SNAPSHOT_LIMITS.headerBytes}`);

  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}${SNAPSHOT_TEMP_SUFFIX}`);
  let fh: FileHandle | null = null;
  try {
    try {
      fh = await open(tmp, 'wx', 0o600);
    } catch (error) {
      throw unwritable(path, error, 'create a temporary file beside it');
    }
    for (let i = 0; i < sections.length; i++) {
      const s = sections[i]!;
      const data = await s.read();
      if (!(data instanceof Uint8Array) || data.byteLength !== s.bytes)
        throw new UsageError(`writeSnapshotFile(${path}): section "${s.name}" read() gave ${data instanceof Uint8Array ? `${data.byteLength} bytes` : describe(data)}, ${s.bytes} declared`);
      const hash = createHash('sha256');
      for (let at = 0; at < data.byteLength; at += CHUNK_BYTES) hash.update(data.subarray(at, Math.min(data.byteLength, at + CHUNK_BYTES)));
      table[i]!.sha256 = hash.digest('hex');
      try {
        await writeAll(fh, data, table[i]!.offset); // before the next read(): it may reuse this buffer
      } catch (error) {
        throw unwritable(path, error, `write section "${s.name}"`);
      }
    }
    const finalHeader = new TextEncoder().encode(render(table));
    if (finalHeader.length !== header.length) throw new LonghandError('INTERNAL', `snapshot header changed length (${header.length} -> ${finalHeader.length})`);
    const head = new Uint8Array(PREFIX_BYTES + finalHeader.length + HASH_BYTES);
    head.set(new TextEncoder().encode(SNAPSHOT_MAGIC), 0);
    const dv = new DataView(head.buffer);
    dv.setUint32(8, SNAPSHOT_FORMAT_VERSION, true);
    dv.setUint32(12, finalHeader.length, true);
    head.set(finalHeader, PREFIX_BYTES);
    head.set(createHash('sha256').update(finalHeader).digest(), PREFIX_BYTES + finalHeader.length);
    try {
      await writeAll(fh, head, 0);
      await fh.truncate(total); // the gaps are holes (zeros); the file ends exactly where the table says
      await fh.sync();
      await fh.close();
      fh = null;
      await rename(tmp, path);
    } catch (error) {
      throw unwritable(path, error, 'write and rename the snapshot');
    }
  } catch (error) {
    if (fh !== null) await fh.close().catch(() => undefined);
    await rm(tmp, { force: true }).catch(() => undefined);
    throw error;
  }
  await syncFolder(dir);
  return { bytes: total };
}

function unwritable(file: string, error: unknown, doing: string): LonghandError {
  if (error instanceof LonghandError) return error;
  const code = (error as NodeJS.ErrnoException | undefined)?.code ?? '';
  const reason = code === 'EACCES' || code === 'EPERM' || code === 'EROFS' ? 'permission' : code === 'ENOENT' || code === 'ENOTDIR' ? 'missing' : code === 'ENOSPC' || code === 'EDQUOT' ? 'no-space' : 'io';
  const why = reason === 'permission' ? 'permission denied' : reason === 'missing' ? 'the folder does not exist' : reason === 'no-space' ? 'no space left on the disk' : 'I/O error';
  return snapshotError('SNAPSHOT_UNWRITABLE', file, reason, `cannot ${doing}: ${why}${code ? ` (${code})` : ''}`, { errno: code || null }, error);
}

/** fsync of the folder, so the rename is durable. Some file systems refuse fsync on a folder: the rename already happened, so that is not an error. */
async function syncFolder(dir: string): Promise<void> {
  let fh: FileHandle | null = null;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch {
    // EISDIR/EINVAL/EPERM on some platforms: best effort
  } finally {
    await fh?.close().catch(() => undefined);
  }
}
