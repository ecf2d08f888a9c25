// Reader for one .safetensors file: an 8-byte little-endian header length, a JSON header, then the
// data section. Every number in the header is checked against the file before any tensor view is
// made, so a TensorView handed out from here can always be read without going out of bounds.
//
// Which code for which fault (see app/common/errors.ts):
//   file shorter than 8 bytes, or tensor data cut short          MODEL_TRUNCATED
//   header length larger than the file                           MODEL_ABSURD_COUNT
//   header over 100 MB (a file that big may exist, a header no)  MODEL_BAD_HEADER
//   header not UTF-8 / not JSON / not an object / malformed entry / sizes that disagree /
//   begin > end / overlapping tensors / negative or fractional dims     MODEL_BAD_HEADER
//   the same key twice in one JSON object                        MODEL_DUPLICATE_KEY
//   dtype other than F32, F16, BF16                               MODEL_UNKNOWN_TENSOR_TYPE
//   dims whose product (in bytes) passes 2^53                     MODEL_DIMENSION_OVERFLOW
//   a tensor lying outside the data section                       MODEL_TENSOR_OUT_OF_BOUNDS
// "Cut short" versus "out of bounds": the format forbids holes, so when the tensors tile the data
// section from 0 without gaps and only the file is too short, the file was truncated; a tensor
// that points past the end of an otherwise consistent layout is out of bounds.
import { ModelFileError, type ErrorCode } from '../../../common/errors.ts';
import type { TensorView } from '../types.ts';
import { DTYPE_BYTES, isSafetensorsDType, widenToFloat32, type SafetensorsDType } from './dtype.ts';
import { findDuplicateKey } from './json-keys.ts';

/** Largest header we accept (the reference implementation's limit). */
export const MAX_HEADER_BYTES = 100_000_000;

const HEADER_START = 8;

/** One tensor as the header declares it; offsets are relative to the data section. */
export interface SafetensorsEntry {
  readonly name: string;
  readonly dtype: SafetensorsDType;
  readonly shape: readonly number[];
  readonly elements: number;
  readonly begin: number;
  readonly end: number;
}

export interface SafetensorsFile {
  readonly fileName: string;
  /** Length of the JSON header in bytes. */
  readonly headerLength: number;
  /** Where the data section starts in the file (8 + headerLength). */
  readonly dataOffset: number;
  /** The header's `__metadata__` string map (empty when absent). */
  readonly metadata: ReadonlyMap<string, string>;
  /** Entries in header order. */
  readonly entries: readonly SafetensorsEntry[];
  /** Tensor views by name (header order), pointing into the bytes given to the parser. */
  readonly tensors: ReadonlyMap<string, TensorView>;
  /** Sum of all tensors' byte sizes. */
  readonly dataBytes: number;
}

export interface ParseOptions {
  /** Called before every read of a view; throws when the bytes behind it are gone (unmapped). */
  assertOpen?: () => void;
}

/** Parses and validates a whole safetensors file held in `bytes` (usually a mapped file). */
export function parseSafetensors(bytes: Uint8Array, fileName: string, options: ParseOptions = {}): SafetensorsFile {
  const fail: Fail = (code, message, details = {}, offset) => {
    throw new ModelFileError(code, fileName, message, details, offset);
  };

  if (bytes.length < HEADER_START) {
    fail('MODEL_TRUNCATED', `file is ${bytes.length} bytes, too short for the 8-byte safetensors header length`, { fileSize: bytes.length }, 0);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength64 = view.getBigUint64(0, true);
  const available = bytes.length - HEADER_START;
  if (headerLength64 > BigInt(available)) {
    fail(
      'MODEL_ABSURD_COUNT',
      `header length ${headerLength64} is larger than the ${bytes.length}-byte file can hold (truncated or not a safetensors file)`,
      { headerLength: headerLength64.toString(), fileSize: bytes.length },
      0,
    );
  }
  const headerLength = Number(headerLength64);
  if (headerLength > MAX_HEADER_BYTES) {
    fail('MODEL_BAD_HEADER', `header length ${headerLength} exceeds the ${MAX_HEADER_BYTES}-byte limit`, { headerLength, limit: MAX_HEADER_BYTES }, 0);
  }
  const dataOffset = HEADER_START + headerLength;

  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(HEADER_START, dataOffset));
  } catch {
    return fail('MODEL_BAD_HEADER', 'header is not valid UTF-8', { headerLength }, HEADER_START);
  }
  let header: unknown;
  try {
    header = JSON.parse(text);
  } catch (error) {
    return fail('MODEL_BAD_HEADER', `header is not valid JSON: ${(error as Error).message}`, { headerLength }, HEADER_START);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    fail('MODEL_BAD_HEADER', `header must be a JSON object, found ${describe(header)}`, { headerLength }, HEADER_START);
  }
  const duplicate = findDuplicateKey(text);
  if (duplicate !== undefined) {
    const where = duplicate.path.length > 0 ? ` inside '${duplicate.path.join('.')}'` : '';
    fail('MODEL_DUPLICATE_KEY', `header names '${duplicate.key}' twice${where}`, { key: duplicate.key }, HEADER_START);
  }

  const dataLength = bytes.length - dataOffset;
  const metadata = new Map<string, string>();
  const entries: SafetensorsEntry[] = [];
  for (const [name, value] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        fail('MODEL_BAD_HEADER', `__metadata__ must be an object of strings, found ${describe(value)}`);
      }
      for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
        if (typeof item !== 'string') fail('MODEL_BAD_HEADER', `__metadata__.${key} must be a string, found ${describe(item)}`, { key });
        metadata.set(key, item as string);
      }
      continue;
    }
    entries.push(readEntry(name, value, fail));
  }

  // Overlaps: sort by position; zero-sized tensors occupy nothing and cannot overlap.
  const placed = entries.filter((entry) => entry.end > entry.begin).sort((a, b) => a.begin - b.begin || a.end - b.end);
  let dataBytes = 0;
  let contiguous = true;
  let previous: SafetensorsEntry | undefined;
  for (const entry of placed) {
    if (previous !== undefined && entry.begin < previous.end) {
      fail(
        'MODEL_BAD_HEADER',
        `tensors '${previous.name}' [${previous.begin}, ${previous.end}) and '${entry.name}' [${entry.begin}, ${entry.end}) overlap`,
        { first: previous.name, second: entry.name },
      );
    }
    if (entry.begin !== (previous?.end ?? 0)) contiguous = false;
    dataBytes += entry.end - entry.begin;
    previous = entry;
  }

  // Bounds.
  const declaredEnd = previous?.end ?? 0;
  if (declaredEnd > dataLength) {
    if (contiguous) {
      fail(
        'MODEL_TRUNCATED',
        `file ends ${declaredEnd - dataLength} bytes early: the header declares ${declaredEnd} bytes of tensor data, the file holds ${dataLength}`,
        { declared: declaredEnd, available: dataLength },
        bytes.length,
      );
    }
    const outside = placed.find((entry) => entry.end > dataLength) as SafetensorsEntry;
    fail(
      'MODEL_TENSOR_OUT_OF_BOUNDS',
      `tensor '${outside.name}' occupies data bytes [${outside.begin}, ${outside.end}) but the data section is ${dataLength} bytes`,
      { tensor: outside.name, begin: outside.begin, end: outside.end, dataLength },
      dataOffset + outside.begin,
    );
  }
  for (const entry of entries) {
    // Zero-sized tensors were not placed; their offsets must still lie in the section.
    if (entry.begin > dataLength) {
      fail(
        'MODEL_TENSOR_OUT_OF_BOUNDS',
        `tensor '${entry.name}' starts at data byte ${entry.begin} but the data section is ${dataLength} bytes`,
        { tensor: entry.name, begin: entry.begin, dataLength },
      );
    }
  }

  const tensors = new Map<string, TensorView>();
  for (const entry of entries) {
    tensors.set(entry.name, makeView(entry, bytes, dataOffset, options.assertOpen));
  }
  return { fileName, headerLength, dataOffset, metadata, entries, tensors, dataBytes };
}

type Fail = (code: ErrorCode, message: string, details?: Record<string, string | number>, offset?: number) => never;

function readEntry(name: string, value: unknown, fail: Fail): SafetensorsEntry {
  if (name.length === 0) fail('MODEL_BAD_HEADER', 'a tensor has an empty name');
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return fail('MODEL_BAD_HEADER', `tensor '${name}' must be an object with dtype, shape and data_offsets, found ${describe(value)}`, { tensor: name });
  }
  const record = value as Record<string, unknown>;
  const { dtype, shape, data_offsets: offsets } = record;
  if (typeof dtype !== 'string') return fail('MODEL_BAD_HEADER', `tensor '${name}' has no dtype string (found ${describe(dtype)})`, { tensor: name });
  if (!isSafetensorsDType(dtype)) {
    return fail('MODEL_UNKNOWN_TENSOR_TYPE', `tensor '${name}' has element type '${dtype}'; Longhand reads F32, F16 and BF16`, { tensor: name, dtype });
  }
  if (!Array.isArray(shape)) return fail('MODEL_BAD_HEADER', `tensor '${name}' has no shape array (found ${describe(shape)})`, { tensor: name });
  let elements = 1n;
  for (const [axis, dim] of shape.entries()) {
    if (typeof dim !== 'number' || !Number.isInteger(dim) || dim < 0) {
      fail('MODEL_BAD_HEADER', `tensor '${name}' dimension ${axis} is ${describe(dim)}, not a non-negative integer`, { tensor: name, axis });
    }
    if (!Number.isSafeInteger(dim)) {
      fail('MODEL_DIMENSION_OVERFLOW', `tensor '${name}' dimension ${axis} is ${dim}, past 2^53`, { tensor: name, axis });
    }
    elements *= BigInt(dim as number);
  }
  const byteSize = elements * BigInt(DTYPE_BYTES[dtype]);
  if (byteSize > BigInt(Number.MAX_SAFE_INTEGER)) {
    fail('MODEL_DIMENSION_OVERFLOW', `tensor '${name}' shape [${shape.join(', ')}] holds ${byteSize} bytes, past 2^53`, { tensor: name });
  }
  if (!Array.isArray(offsets) || offsets.length !== 2) {
    return fail('MODEL_BAD_HEADER', `tensor '${name}' data_offsets must be [begin, end], found ${describe(offsets)}`, { tensor: name });
  }
  const [begin, end] = offsets as unknown[];
  for (const [label, offset] of [['begin', begin], ['end', end]] as const) {
    if (typeof offset !== 'number' || !Number.isInteger(offset) || offset < 0) {
      fail('MODEL_BAD_HEADER', `tensor '${name}' data_offsets ${label} is ${describe(offset)}, not a non-negative integer`, { tensor: name });
    }
    if (!Number.isSafeInteger(offset)) {
      fail('MODEL_TENSOR_OUT_OF_BOUNDS', `tensor '${name}' data_offsets ${label} ${offset} lies past 2^53`, { tensor: name });
    }
  }
  const first = begin as number;
  const last = end as number;
  if (first > last) fail('MODEL_BAD_HEADER', `tensor '${name}' data_offsets begin ${first} is after end ${last}`, { tensor: name, begin: first, end: last });
  const size = Number(byteSize);
  if (last - first !== size) {
    fail(
      'MODEL_BAD_HEADER',
      `tensor '${name}' ${dtype}[${shape.join(', ')}] needs ${size} bytes but data_offsets [${first}, ${last}) span ${last - first}`,
      { tensor: name, expected: size, actual: last - first },
    );
  }
  return { name, dtype, shape: Object.freeze([...(shape as number[])]), elements: Number(elements), begin: first, end: last };
}

function makeView(entry: SafetensorsEntry, bytes: Uint8Array, dataOffset: number, assertOpen: (() => void) | undefined): TensorView {
  const start = dataOffset + entry.begin;
  const stop = dataOffset + entry.end;
  const raw = (): Uint8Array => {
    assertOpen?.();
    return bytes.subarray(start, stop);
  };
  return {
    name: entry.name,
    dtype: entry.dtype,
    shape: entry.shape,
    elements: entry.elements,
    bytes: raw,
    toFloat32: () => widenToFloat32(entry.dtype, raw(), entry.elements),
  };
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (typeof value === 'number') return String(value);
  return typeof value === 'undefined' ? 'nothing' : `a ${typeof value}`;
}
