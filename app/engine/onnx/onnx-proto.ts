// A minimal protobuf wire-format writer for ONNX ModelProto: only what the engine's graphs need.
// Field numbers follow onnx/onnx.proto (IR version 8+). Nothing here reads protobuf.
//
// Layout of the encoder: a Writer collects chunks (no copy of initializer bytes until the final
// concatenation); nested messages are encoded into their own Writer and appended with a length
// prefix. The model is materialised once, in `encodeModel`.

// ---------------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------------

/** Element types the engine's graphs use, named the way onnxruntime-node's Tensor names them. */
export type ElemType = 'float32' | 'float16' | 'uint8' | 'int8' | 'int32' | 'int64';

/** TensorProto.DataType values (onnx.proto). */
export const ONNX_DATA_TYPE: Readonly<Record<ElemType, number>> = {
  float32: 1, // FLOAT
  uint8: 2, // UINT8
  int8: 3, // INT8
  int32: 6, // INT32
  int64: 7, // INT64
  float16: 10, // FLOAT16
};

/** Bytes per element of each type. */
export const ELEM_BYTES: Readonly<Record<ElemType, number>> = {
  float32: 4,
  float16: 2,
  uint8: 1,
  int8: 1,
  int32: 4,
  int64: 8,
};

// ---------------------------------------------------------------------------------------------
// Plain descriptions of the messages we write
// ---------------------------------------------------------------------------------------------

/** A dimension: a fixed size or a symbolic name (dim_param), e.g. 'batch'. */
export type Dim = number | string;

export interface ValueInfoSpec {
  name: string;
  elemType: ElemType;
  /** undefined: rank unknown (no shape written). */
  dims?: readonly Dim[];
}

/** A TensorProto carried as raw_data (little-endian, row-major). */
export interface TensorSpec {
  name: string;
  elemType: ElemType;
  dims: readonly number[];
  rawData: Uint8Array;
}

export type AttributeSpec =
  | { name: string; type: 'INT'; value: number | bigint }
  | { name: string; type: 'FLOAT'; value: number }
  | { name: string; type: 'STRING'; value: string }
  | { name: string; type: 'INTS'; value: readonly (number | bigint)[] }
  | { name: string; type: 'FLOATS'; value: readonly number[] };

export interface NodeSpec {
  opType: string;
  /** '' (default ONNX domain) or e.g. 'com.microsoft'. */
  domain?: string;
  name?: string;
  /** '' marks an omitted optional input. */
  inputs: readonly string[];
  outputs: readonly string[];
  attributes?: readonly AttributeSpec[];
}

export interface GraphSpec {
  name: string;
  nodes: readonly NodeSpec[];
  initializers: readonly TensorSpec[];
  inputs: readonly ValueInfoSpec[];
  outputs: readonly ValueInfoSpec[];
}

export interface OpsetImport {
  domain: string;
  version: number;
}

export interface ModelSpec {
  irVersion: number;
  opsetImports: readonly OpsetImport[];
  producerName?: string;
  producerVersion?: string;
  graph: GraphSpec;
}

/** AttributeProto.AttributeType values (onnx.proto). */
const ATTRIBUTE_TYPE = { FLOAT: 1, INT: 2, STRING: 3, FLOATS: 6, INTS: 7 } as const;

// ---------------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------------

const WIRE_VARINT = 0;
const WIRE_LEN = 2;
const WIRE_FIXED32 = 5;

const utf8 = new TextEncoder();

/** Append-only byte sink made of chunks; `finish()` concatenates them once. */
export class ProtoWriter {
  private readonly chunks: Uint8Array[] = [];
  private scratch = new Uint8Array(256);
  private used = 0; // bytes used in scratch
  private flushedLength = 0;

  get length(): number {
    return this.flushedLength + this.used;
  }

  private ensure(bytes: number): void {
    if (this.used + bytes <= this.scratch.length) return;
    this.flushScratch();
    if (bytes > this.scratch.length) this.scratch = new Uint8Array(Math.max(bytes, 256));
  }

  private flushScratch(): void {
    if (this.used === 0) return;
    this.chunks.push(this.scratch.subarray(0, this.used));
    this.flushedLength += this.used;
    this.scratch = new Uint8Array(this.scratch.length);
    this.used = 0;
  }

  /** Unsigned varint for 0 <= value < 2^53, or any bigint (negative bigints: two's complement, 10 bytes). */
  varint(value: number | bigint): void {
    if (typeof value === 'number') {
      if (!Number.isSafeInteger(value)) throw new RangeError(`varint: ${value} is not a safe integer`);
      if (value < 0) {
        this.varint(BigInt(value));
        return;
      }
      this.ensure(10);
      let v = value;
      while (v >= 0x80) {
        this.scratch[this.used++] = (v % 0x80) | 0x80;
        v = Math.floor(v / 0x80);
      }
      this.scratch[this.used++] = v;
      return;
    }
    let v = BigInt.asUintN(64, value);
    this.ensure(10);
    while (v >= 0x80n) {
      this.scratch[this.used++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.scratch[this.used++] = Number(v);
  }

  tag(field: number, wire: number): void {
    this.varint(field * 8 + wire);
  }

  /** Raw bytes appended as they are (large arrays are referenced, not copied). */
  raw(bytes: Uint8Array): void {
    if (bytes.length <= 64) {
      this.ensure(bytes.length);
      this.scratch.set(bytes, this.used);
      this.used += bytes.length;
      return;
    }
    this.flushScratch();
    this.chunks.push(bytes);
    this.flushedLength += bytes.length;
  }

  /** Varint field (int32/int64/enum). proto3: callers skip default zeros where that matters. */
  intField(field: number, value: number | bigint): void {
    this.tag(field, WIRE_VARINT);
    this.varint(value);
  }

  floatField(field: number, value: number): void {
    this.tag(field, WIRE_FIXED32);
    this.ensure(4);
    new DataView(this.scratch.buffer, this.scratch.byteOffset + this.used, 4).setFloat32(0, value, true);
    this.used += 4;
  }

  bytesField(field: number, bytes: Uint8Array): void {
    this.tag(field, WIRE_LEN);
    this.varint(bytes.length);
    this.raw(bytes);
  }

  stringField(field: number, value: string): void {
    this.bytesField(field, utf8.encode(value));
  }

  /** A nested message: encoded into its own writer, then length-prefixed. */
  messageField(field: number, encode: (w: ProtoWriter) => void): void {
    const inner = new ProtoWriter();
    encode(inner);
    this.tag(field, WIRE_LEN);
    this.varint(inner.length);
    inner.flushScratch();
    for (const chunk of inner.chunks) this.raw(chunk);
  }

  /** Packed repeated varints (int64 dims, ints). */
  packedVarints(field: number, values: readonly (number | bigint)[]): void {
    const inner = new ProtoWriter();
    for (const v of values) inner.varint(v);
    this.tag(field, WIRE_LEN);
    this.varint(inner.length);
    inner.flushScratch();
    for (const chunk of inner.chunks) this.raw(chunk);
  }

  /** Packed repeated float32. */
  packedFloats(field: number, values: readonly number[]): void {
    const bytes = new Uint8Array(values.length * 4);
    const view = new DataView(bytes.buffer);
    values.forEach((v, i) => view.setFloat32(i * 4, v, true));
    this.bytesField(field, bytes);
  }

  finish(): Uint8Array {
    this.flushScratch();
    const out = new Uint8Array(this.flushedLength);
    let offset = 0;
    for (const chunk of this.chunks) {
      out.set(chunk, offset);
      offset += chunk.length;
    }
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// ONNX messages (field numbers from onnx.proto)
// ---------------------------------------------------------------------------------------------

// TensorProto: dims=1 (repeated int64), data_type=2, name=8, raw_data=9
function writeTensor(w: ProtoWriter, t: TensorSpec): void {
  const expected = t.dims.reduce((a, b) => a * b, 1) * ELEM_BYTES[t.elemType];
  if (t.rawData.length !== expected) {
    throw new RangeError(`initializer ${t.name}: ${t.rawData.length} bytes for dims [${t.dims.join(', ')}] of ${t.elemType} (expected ${expected})`);
  }
  for (const d of t.dims) w.intField(1, d); // unpacked repeated int64: parsers accept both forms
  w.intField(2, ONNX_DATA_TYPE[t.elemType]);
  w.stringField(8, t.name);
  w.bytesField(9, t.rawData);
}

// AttributeProto: name=1, f=2, i=3, s=4, floats=7, ints=8, type=20
function writeAttribute(w: ProtoWriter, a: AttributeSpec): void {
  w.stringField(1, a.name);
  switch (a.type) {
    case 'FLOAT':
      w.floatField(2, a.value);
      break;
    case 'INT':
      w.intField(3, a.value);
      break;
    case 'STRING':
      w.stringField(4, a.value);
      break;
    case 'FLOATS':
      w.packedFloats(7, a.value);
      break;
    case 'INTS':
      w.packedVarints(8, a.value);
      break;
  }
  w.intField(20, ATTRIBUTE_TYPE[a.type]);
}

// NodeProto: input=1, output=2, name=3, op_type=4, attribute=5, domain=7
function writeNode(w: ProtoWriter, n: NodeSpec): void {
  for (const input of n.inputs) w.stringField(1, input);
  for (const output of n.outputs) w.stringField(2, output);
  if (n.name) w.stringField(3, n.name);
  w.stringField(4, n.opType);
  for (const a of n.attributes ?? []) w.messageField(5, (aw) => writeAttribute(aw, a));
  if (n.domain) w.stringField(7, n.domain);
}

// ValueInfoProto: name=1, type=2 → TypeProto: tensor_type=1 → Tensor: elem_type=1, shape=2
// → TensorShapeProto: dim=1 → Dimension: dim_value=1, dim_param=2
function writeValueInfo(w: ProtoWriter, v: ValueInfoSpec): void {
  w.stringField(1, v.name);
  w.messageField(2, (typeW) =>
    typeW.messageField(1, (tensorW) => {
      tensorW.intField(1, ONNX_DATA_TYPE[v.elemType]);
      const dims = v.dims;
      if (dims === undefined) return;
      tensorW.messageField(2, (shapeW) => {
        for (const d of dims) {
          shapeW.messageField(1, (dimW) => {
            if (typeof d === 'number') dimW.intField(1, d);
            else dimW.stringField(2, d);
          });
        }
      });
    }),
  );
}

// GraphProto: node=1, name=2, initializer=5, input=11, output=12
function writeGraph(w: ProtoWriter, g: GraphSpec): void {
  for (const n of g.nodes) w.messageField(1, (nw) => writeNode(nw, n));
  w.stringField(2, g.name);
  for (const t of g.initializers) w.messageField(5, (tw) => writeTensor(tw, t));
  for (const v of g.inputs) w.messageField(11, (vw) => writeValueInfo(vw, v));
  for (const v of g.outputs) w.messageField(12, (vw) => writeValueInfo(vw, v));
}

/**
 * ModelProto: ir_version=1, producer_name=2, producer_version=3, graph=7, opset_import=8
 * (OperatorSetIdProto: domain=1, version=2).
 */
export function encodeModel(model: ModelSpec): Uint8Array {
  const w = new ProtoWriter();
  w.intField(1, model.irVersion);
  if (model.producerName) w.stringField(2, model.producerName);
  if (model.producerVersion) w.stringField(3, model.producerVersion);
  w.messageField(7, (gw) => writeGraph(gw, model.graph));
  for (const op of model.opsetImports) {
    w.messageField(8, (ow) => {
      if (op.domain) ow.stringField(1, op.domain);
      ow.intField(2, op.version);
    });
  }
  if (w.length >= PROTOBUF_LIMIT_BYTES) {
    throw new RangeError(`model is ${w.length} bytes; protobuf cannot hold 2 GiB or more in memory (use external data)`);
  }
  return w.finish();
}

/** protobuf's hard limit on one serialised message (2 GiB - 1). */
export const PROTOBUF_LIMIT_BYTES = 2 ** 31 - 1;

// ---------------------------------------------------------------------------------------------
// Helpers to turn typed arrays into raw_data
// ---------------------------------------------------------------------------------------------

/** The bytes of a typed array (a view, no copy). Assumes a little-endian host (x64, arm64). */
export function bytesOf(data: ArrayBufferView): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}
