// GGUF reader: header, metadata and tensor directory of a GGUF v2/v3 file held in memory (a read
// or mapped file), plus zero-copy tensor views. The file is untrusted input: every count and
// length is checked against the bytes that remain before anything is allocated, 64-bit values are
// checked before they become numbers, and every failure is a ModelFileError naming the file, the
// problem and the byte offset.
//
// Layout (all little-endian):
//   "GGUF" | version u32 | tensor_count u64 | kv_count u64
//   kv_count × ( key: string | value_type u32 | value )
//   tensor_count × ( name: string | n_dims u32 | ne u64[n_dims] | ggml_type u32 | offset u64 )
//   padding to `general.alignment` (default 32) | tensor data (offsets relative to here)
//   string = u64 byte length + UTF-8 bytes; array = item_type u32 + u64 count + items.
//
// Policies (stricter than the spec where a real model never needs the freedom):
//   - v2 and v3 only (v1 used 32-bit counts; v3 only added big-endian files, which we refuse).
//   - A count that the rest of the file cannot hold is MODEL_ABSURD_COUNT when its items would
//     need more than 256 MiB (no real header does), otherwise MODEL_TRUNCATED (the file was cut).
//   - Keys and tensor names must be non-empty and unique (MODEL_DUPLICATE_KEY).
//   - bool values must be 0 or 1; arrays nest at most MAX_ARRAY_DEPTH deep (MODEL_BAD_VALUE).
//   - general.alignment must be a uint32, non-zero power of two (else MODEL_MISALIGNED).
//   - n_dims must be 1..4 (MODEL_BAD_VALUE). A dimension of 0 is refused like an overflowing one
//     (MODEL_DIMENSION_OVERFLOW): models have no empty tensors, and a 0 is far likelier corruption.
//   - ne[0] must be a whole number of blocks of the tensor's type: otherwise rows would not start
//     on a block boundary, so it is MODEL_MISALIGNED.
//   - Tensor data must lie inside the file. When the tensors are packed the way ggml writes them
//     (each at the aligned end of the previous) and the file is simply too short, that is
//     MODEL_TRUNCATED; a tensor pointing elsewhere past the end is MODEL_TENSOR_OUT_OF_BOUNDS.
//     Overlapping tensors are not refused (reading them is harmless).
//   - Known ggml types that Longhand cannot dequantise (Q2_K, IQ*, ...) fail with
//     MODEL_UNKNOWN_TENSOR_TYPE naming the type, unless `allowUnsupportedTypes` (for inspection);
//     their views then refuse to open.
import { ModelFileError } from '../../../common/errors.ts';
import type { TensorDType, TensorView } from '../types.ts';
import { ByteCursor } from './byte-cursor.ts';
import { dequantize } from './dequant.ts';
import { ggmlTypeById } from './ggml-types.ts';

export const GGUF_MAGIC = 'GGUF';
export const GGUF_DEFAULT_ALIGNMENT = 32;
export const GGUF_MAX_DIMS = 4;
export const MAX_ARRAY_DEPTH = 16;

/** GGUF metadata value types, by their tag in the file. */
export const GGUF_VALUE_TYPES = ['uint8', 'int8', 'uint16', 'int16', 'uint32', 'int32', 'float32', 'bool', 'string', 'array', 'uint64', 'int64', 'float64'] as const;
export type GgufValueType = (typeof GGUF_VALUE_TYPES)[number];

/**
 * A metadata value. Scalars: 8-32-bit integers and floats are numbers, 64-bit integers are
 * bigints, bool is boolean, string is string. Arrays of numbers are typed arrays (copies, so they
 * outlive the file), arrays of 64-bit integers are BigInt64/BigUint64 arrays, arrays of bools,
 * strings and arrays are plain arrays.
 */
export type GgufValue = number | bigint | boolean | string | GgufArray;
export type GgufArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigUint64Array
  | BigInt64Array
  | boolean[]
  | string[]
  | GgufArray[];

/** The declared type of a metadata value: for arrays, also the item type. */
export interface GgufValueTag {
  type: GgufValueType;
  itemType?: GgufValueType;
}

export interface GgufTensorInfo {
  readonly name: string;
  /** ggml dimensions, innermost first. */
  readonly ne: readonly number[];
  /** Outermost first (reverse of ne). */
  readonly shape: readonly number[];
  readonly elements: number;
  readonly typeId: number;
  readonly typeName: string;
  /** Undefined for a known type Longhand cannot dequantise (only with allowUnsupportedTypes). */
  readonly dtype: TensorDType | undefined;
  /** Offset relative to the data section, as the file states it. */
  readonly offset: number;
  /** Offset from the start of the file. */
  readonly absoluteOffset: number;
  readonly byteSize: number;
  /** Where this tensor's entry in the tensor directory starts. */
  readonly infoOffset: number;
}

export interface GgufFile {
  readonly fileName: string;
  readonly version: number;
  readonly alignment: number;
  readonly metadata: Map<string, GgufValue>;
  readonly metadataTypes: Map<string, GgufValueTag>;
  /** Byte offset of each metadata entry (its key), for error messages. */
  readonly metadataOffsets: Map<string, number>;
  readonly tensors: Map<string, GgufTensorInfo>;
  /** Start of the tensor data section (aligned). */
  readonly dataOffset: number;
  /** Size of the whole file. */
  readonly byteLength: number;
  /** A zero-copy view of a tensor. Unknown name → MODEL_MISSING_TENSOR. */
  tensorView(name: string): TensorView;
}

export interface ParseOptions {
  /** Accept tensors of known but unsupported ggml types (their views throw). For inspection tools. */
  allowUnsupportedTypes?: boolean;
}

/** Where a GgufFile's bytes come from; `bytes` becomes undefined when the file is closed. */
export interface GgufByteSource {
  bytes: Uint8Array | undefined;
}

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const INT64_NEGATIVE = 1n << 63n;

/** Parse a whole GGUF file held in `bytes`. `fileName` names it in errors. */
export function parseGguf(bytes: Uint8Array, fileName: string, options: ParseOptions = {}): GgufFile {
  return parseGgufSource({ bytes }, fileName, options);
}

/** Like parseGguf, for a source that can be closed (see open-gguf.ts). */
export function parseGgufSource(source: GgufByteSource, fileName: string, options: ParseOptions = {}): GgufFile {
  if (!LITTLE_ENDIAN_HOST) throw new Error('the GGUF reader assumes a little-endian host');
  const given = source.bytes;
  if (given === undefined) throw new Error(`${fileName}: the file is closed`);
  // A plain Uint8Array view even when given a Node Buffer (whose slice() does not copy).
  const bytes = new Uint8Array(given.buffer, given.byteOffset, given.byteLength);
  source.bytes = bytes;
  const c: ByteCursor = new ByteCursor(bytes, fileName);

  // ---- header
  c.need(4, 'the magic number');
  const magic = String.fromCharCode(...bytes.subarray(0, 4));
  if (magic !== GGUF_MAGIC) {
    const hex = Array.from(bytes.subarray(0, 4), (b) => b.toString(16).padStart(2, '0')).join(' ');
    const legacy = ['lmgg', 'fmgg', 'tjgg', 'algg'].includes(magic) ? ` (an old ggml/ggjt file: convert it to GGUF)` : '';
    c.fail('MODEL_BAD_MAGIC', `not a GGUF file: it starts with ${hex}, not "GGUF"${legacy}`, 0, { magic: hex });
  }
  c.pos = 4;
  const version = c.u32('the version');
  if (version !== 2 && version !== 3) {
    const swapped = ((version & 0xff) << 24) | ((version & 0xff00) << 8) | ((version >>> 8) & 0xff00) | (version >>> 24);
    if ((version & 0xffff) === 0 && swapped >= 1 && swapped <= 3) {
      c.fail('MODEL_UNSUPPORTED_VERSION', `big-endian GGUF (version ${swapped} stored byte-swapped) is not supported: use a little-endian file`, 4, { version: swapped, bigEndian: true });
    }
    const why = version === 1 ? 'GGUF v1 is obsolete: re-convert the model' : version === 0 ? 'version 0 does not exist' : 'this reader knows versions 2 and 3';
    c.fail('MODEL_UNSUPPORTED_VERSION', `unsupported GGUF version ${version} (${why})`, 4, { version });
  }
  const tensorCountAt = c.pos;
  const tensorCountRaw = c.u64('the tensor count');
  const kvCountAt = c.pos;
  const kvCountRaw = c.u64('the metadata count');
  // smallest metadata entry: empty key (8) + type (4) + uint8 (1); smallest tensor entry:
  // empty name (8) + n_dims (4) + type (4) + offset (8). Both sections must fit what is left.
  const kvCount = c.count(kvCountRaw, 13, 'the metadata count', kvCountAt);
  const tensorCount = c.count(tensorCountRaw, 24, 'the tensor count', tensorCountAt);
  if (kvCountRaw * 13n + tensorCountRaw * 24n > BigInt(c.remaining)) {
    c.fail('MODEL_TRUNCATED', `file ends at byte ${c.length}: ${kvCount} metadata entries and ${tensorCount} tensors cannot fit in the ${c.remaining} bytes left`, c.pos);
  }

  // ---- metadata
  const metadata = new Map<string, GgufValue>();
  const metadataTypes = new Map<string, GgufValueTag>();
  const metadataOffsets = new Map<string, number>();
  for (let i = 0; i < kvCount; i++) {
    const keyAt = c.pos;
    const key = c.string(`metadata key #${i}`);
    if (key.length === 0) c.fail('MODEL_BAD_VALUE', `metadata key #${i} is empty`, keyAt);
    if (metadata.has(key)) c.fail('MODEL_DUPLICATE_KEY', `metadata key "${key}" appears twice`, keyAt, { key });
    const tagAt = c.pos;
    const type = valueType(c, c.u32(`the value type of "${key}"`), key, tagAt);
    const tag: GgufValueTag = { type };
    const value = readValue(c, type, key, 0, tag);
    metadata.set(key, value);
    metadataTypes.set(key, tag);
    metadataOffsets.set(key, keyAt);
  }

  // ---- alignment
  let alignment = GGUF_DEFAULT_ALIGNMENT;
  if (metadata.has('general.alignment')) {
    const value = metadata.get('general.alignment');
    const at = metadataOffsets.get('general.alignment');
    if (metadataTypes.get('general.alignment')?.type !== 'uint32' || typeof value !== 'number') {
      c.fail('MODEL_BAD_VALUE', `general.alignment must be a uint32, not ${describeTag(metadataTypes.get('general.alignment'))}`, at);
    }
    if (value === 0 || (value & (value - 1)) !== 0) {
      c.fail('MODEL_MISALIGNED', `general.alignment ${value} is not a non-zero power of two`, at, { alignment: value });
    }
    alignment = value;
  }

  // ---- tensor directory
  const entries: Omit<GgufTensorInfo, 'absoluteOffset'>[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const infoOffset = c.pos;
    const name = c.string(`the name of tensor #${i}`);
    if (name.length === 0) c.fail('MODEL_BAD_VALUE', `tensor #${i} has an empty name`, infoOffset);
    if (names.has(name)) c.fail('MODEL_DUPLICATE_KEY', `tensor "${name}" appears twice`, infoOffset, { tensor: name });
    names.add(name);
    const nDimsAt = c.pos;
    const nDims = c.u32(`the dimension count of tensor "${name}"`);
    if (nDims < 1 || nDims > GGUF_MAX_DIMS) {
      c.fail('MODEL_BAD_VALUE', `tensor "${name}" has ${nDims} dimensions (1 to ${GGUF_MAX_DIMS} allowed)`, nDimsAt, { tensor: name, nDims });
    }
    const ne: number[] = [];
    let product = 1n;
    for (let d = 0; d < nDims; d++) {
      const dimAt = c.pos;
      const dim = c.u64(`dimension ${d} of tensor "${name}"`);
      if (dim === 0n) c.fail('MODEL_DIMENSION_OVERFLOW', `tensor "${name}" has a zero-size dimension ${d} (empty tensors are refused)`, dimAt, { tensor: name });
      if (dim >= INT64_NEGATIVE) c.fail('MODEL_DIMENSION_OVERFLOW', `tensor "${name}" has a negative dimension ${d} (${BigInt.asIntN(64, dim)})`, dimAt, { tensor: name });
      product *= dim;
      if (product > MAX_SAFE) {
        c.fail('MODEL_DIMENSION_OVERFLOW', `tensor "${name}" has more than 2^53 elements (dimensions so far: ${[...ne, dim].join(' × ')})`, dimAt, { tensor: name });
      }
      ne.push(Number(dim));
    }
    const typeAt = c.pos;
    const typeId = c.u32(`the type of tensor "${name}"`);
    const info = ggmlTypeById(typeId);
    if (info === undefined) c.fail('MODEL_UNKNOWN_TENSOR_TYPE', `tensor "${name}" has unknown ggml type id ${typeId}`, typeAt, { tensor: name, typeId });
    if (info.dtype === undefined && options.allowUnsupportedTypes !== true) {
      c.fail('MODEL_UNKNOWN_TENSOR_TYPE', `tensor "${name}" has type ${info.name} (ggml type ${typeId}), which Longhand does not support`, typeAt, { tensor: name, typeId, type: info.name });
    }
    const ne0 = ne[0] as number;
    if (ne0 % info.blockSize !== 0) {
      c.fail('MODEL_MISALIGNED', `tensor "${name}" has rows of ${ne0} elements, not a whole number of ${info.name} blocks of ${info.blockSize}`, typeAt, { tensor: name, rowLength: ne0, blockSize: info.blockSize });
    }
    const byteSizeBig = (product / BigInt(info.blockSize)) * BigInt(info.typeSize);
    if (byteSizeBig > MAX_SAFE) c.fail('MODEL_DIMENSION_OVERFLOW', `tensor "${name}" would occupy ${byteSizeBig} bytes`, typeAt, { tensor: name });
    const offsetAt = c.pos;
    const offsetBig = c.u64(`the data offset of tensor "${name}"`);
    if (offsetBig > MAX_SAFE) c.fail('MODEL_TENSOR_OUT_OF_BOUNDS', `tensor "${name}" has data offset ${offsetBig}, far past the end of the file`, offsetAt, { tensor: name });
    const offset = Number(offsetBig);
    if (offset % alignment !== 0) {
      c.fail('MODEL_MISALIGNED', `tensor "${name}" has data offset ${offset}, not a multiple of the alignment ${alignment}`, offsetAt, { tensor: name, offset, alignment });
    }
    entries.push({
      name,
      ne,
      shape: [...ne].reverse(),
      elements: Number(product),
      typeId,
      typeName: info.name,
      dtype: info.dtype,
      offset,
      byteSize: Number(byteSizeBig),
      infoOffset,
    });
  }

  // ---- data section
  const dataOffset = alignUp(c.pos, alignment);
  const tensors = new Map<string, GgufTensorInfo>();
  if (entries.length > 0) {
    if (dataOffset > c.length) {
      c.fail('MODEL_TRUNCATED', `file ends at byte ${c.length}, before its tensor data section starts at byte ${dataOffset}`, c.length, { dataOffset });
    }
    checkDataBounds(c, entries, dataOffset, alignment);
    for (const entry of entries) tensors.set(entry.name, { ...entry, absoluteOffset: dataOffset + entry.offset });
  }

  const tensorView = (name: string): TensorView => {
    const tensor = tensors.get(name);
    if (tensor === undefined) throw new ModelFileError('MODEL_MISSING_TENSOR', fileName, `no tensor named "${name}"`, { tensor: name });
    return makeView(source, fileName, tensor);
  };

  return { fileName, version, alignment, metadata, metadataTypes, metadataOffsets, tensors, dataOffset, byteLength: bytes.length, tensorView };
}

function alignUp(value: number, alignment: number): number {
  const rest = value % alignment;
  return rest === 0 ? value : value + alignment - rest;
}

function valueType(c: ByteCursor, tag: number, key: string, at: number): GgufValueType {
  const type = GGUF_VALUE_TYPES[tag];
  if (type === undefined) c.fail('MODEL_BAD_VALUE', `metadata "${key}" has unknown value type tag ${tag}`, at, { key, tag });
  return type;
}

function describeTag(tag: GgufValueTag | undefined): string {
  if (tag === undefined) return 'missing';
  return tag.itemType === undefined ? tag.type : `array of ${tag.itemType}`;
}

/** Bytes per item of fixed-size types; strings and arrays give their smallest size (empty). */
const MIN_ITEM_BYTES: Record<GgufValueType, number> = {
  uint8: 1, int8: 1, uint16: 2, int16: 2, uint32: 4, int32: 4, float32: 4, bool: 1, string: 8, array: 12, uint64: 8, int64: 8, float64: 8,
};

function readValue(c: ByteCursor, type: GgufValueType, key: string, depth: number, tag?: GgufValueTag): GgufValue {
  const what = `the value of "${key}"`;
  switch (type) {
    case 'uint8': return c.u8(what);
    case 'int8': return c.i8(what);
    case 'uint16': return c.u16(what);
    case 'int16': return c.i16(what);
    case 'uint32': return c.u32(what);
    case 'int32': return c.i32(what);
    case 'float32': return c.f32(what);
    case 'float64': return c.f64(what);
    case 'uint64': return c.u64(what);
    case 'int64': return c.i64(what);
    case 'bool': return readBool(c, what);
    case 'string': return c.string(what);
    case 'array': {
      if (depth >= MAX_ARRAY_DEPTH) c.fail('MODEL_BAD_VALUE', `metadata "${key}" nests arrays deeper than ${MAX_ARRAY_DEPTH} levels`, c.pos, { key });
      const itemTagAt = c.pos;
      const itemType = valueType(c, c.u32(`the item type of array "${key}"`), key, itemTagAt);
      if (tag !== undefined) tag.itemType = itemType;
      const countAt = c.pos;
      const count = c.count(c.u64(`the length of array "${key}"`), MIN_ITEM_BYTES[itemType], `the length of array "${key}"`, countAt);
      return readArray(c, itemType, count, key, depth + 1);
    }
  }
}

function readBool(c: ByteCursor, what: string): boolean {
  const at = c.pos;
  const byte = c.u8(what);
  if (byte > 1) c.fail('MODEL_BAD_VALUE', `${what} is a bool stored as ${byte} (must be 0 or 1)`, at);
  return byte === 1;
}

function readArray(c: ByteCursor, itemType: GgufValueType, count: number, key: string, depth: number): GgufArray {
  const size = MIN_ITEM_BYTES[itemType];
  switch (itemType) {
    case 'uint8': return new Uint8Array(c.take(count * size));
    case 'int8': return new Int8Array(c.take(count * size));
    case 'uint16': return new Uint16Array(c.take(count * size));
    case 'int16': return new Int16Array(c.take(count * size));
    case 'uint32': return new Uint32Array(c.take(count * size));
    case 'int32': return new Int32Array(c.take(count * size));
    case 'float32': return new Float32Array(c.take(count * size));
    case 'float64': return new Float64Array(c.take(count * size));
    case 'uint64': return new BigUint64Array(c.take(count * size));
    case 'int64': return new BigInt64Array(c.take(count * size));
    case 'bool': {
      const out: boolean[] = new Array<boolean>(count);
      for (let i = 0; i < count; i++) out[i] = readBool(c, `item ${i} of "${key}"`);
      return out;
    }
    case 'string': {
      const out: string[] = new Array<string>(count);
      for (let i = 0; i < count; i++) out[i] = c.string(`item ${i} of "${key}"`);
      return out;
    }
    case 'array': {
      const out: GgufArray[] = new Array<GgufArray>(count);
      for (let i = 0; i < count; i++) out[i] = readValue(c, 'array', `${key}[${i}]`, depth) as GgufArray;
      return out;
    }
  }
}

function checkDataBounds(c: ByteCursor, entries: readonly Omit<GgufTensorInfo, 'absoluteOffset'>[], dataOffset: number, alignment: number): void {
  const available = c.length - dataOffset;
  // Packed the way ggml writes them? Then data past the end means the file was cut short.
  const byOffset = [...entries].sort((a, b) => a.offset - b.offset);
  let expected = 0;
  let packed = true;
  for (const entry of byOffset) {
    if (entry.offset !== expected) {
      packed = false;
      break;
    }
    expected = alignUp(entry.offset + entry.byteSize, alignment);
  }
  const last = byOffset[byOffset.length - 1];
  const declaredEnd = last === undefined ? 0 : last.offset + last.byteSize;
  if (packed && declaredEnd > available) {
    c.fail('MODEL_TRUNCATED', `file ends at byte ${c.length}, but its tensor data runs to byte ${dataOffset + declaredEnd} (last tensor "${last?.name}")`, c.length, { dataEnd: dataOffset + declaredEnd });
  }
  for (const entry of entries) {
    if (entry.offset + entry.byteSize > available) {
      c.fail(
        'MODEL_TENSOR_OUT_OF_BOUNDS',
        `tensor "${entry.name}" (${entry.byteSize} bytes at data offset ${entry.offset}) ends past the end of the data section (${available} bytes from byte ${dataOffset})`,
        entry.infoOffset,
        { tensor: entry.name, offset: entry.offset, byteSize: entry.byteSize, dataSize: available },
      );
    }
  }
}

function makeView(source: GgufByteSource, fileName: string, tensor: GgufTensorInfo): TensorView {
  const dtype = tensor.dtype;
  if (dtype === undefined) {
    throw new ModelFileError('MODEL_UNKNOWN_TENSOR_TYPE', fileName, `tensor "${tensor.name}" has type ${tensor.typeName}, which Longhand does not support`, { tensor: tensor.name, type: tensor.typeName }, tensor.infoOffset);
  }
  const bytes = (): Uint8Array => {
    const all = source.bytes;
    if (all === undefined) throw new Error(`${fileName}: tensor "${tensor.name}" used after the model was closed`);
    return all.subarray(tensor.absoluteOffset, tensor.absoluteOffset + tensor.byteSize);
  };
  return {
    name: tensor.name,
    dtype,
    shape: tensor.shape,
    elements: tensor.elements,
    bytes,
    toFloat32: () => dequantize(dtype, bytes(), tensor.elements),
  };
}
