// Test-only: writes small GGUF files in memory, valid or deliberately broken, and records where
// every field landed (the layout) so a test can corrupt exactly one field. Not used by the app.
import { ggmlTypeById, ggmlTypeOfDtype } from './ggml-types.ts';
import { GGUF_VALUE_TYPES, type GgufValueType } from './reader.ts';
import type { TensorDType } from '../types.ts';
import { mulberry32 } from '../../../../test/fixtures/rng.ts';

export type BValue =
  | { type: 'uint8' | 'int8' | 'uint16' | 'int16' | 'uint32' | 'int32' | 'float32' | 'float64'; value: number }
  | { type: 'uint64' | 'int64'; value: bigint }
  | { type: 'bool'; value: boolean | number }
  | { type: 'string'; value: string | Uint8Array }
  /** Items are written without their own tags; each must have type `itemType`. `length` may lie. */
  | { type: 'array'; itemType: GgufValueType; items: BValue[]; length?: bigint }
  /** Any tag followed by any bytes. */
  | { type: 'raw'; tag: number; bytes: Uint8Array };

export const bv = {
  u8: (value: number): BValue => ({ type: 'uint8', value }),
  i8: (value: number): BValue => ({ type: 'int8', value }),
  u16: (value: number): BValue => ({ type: 'uint16', value }),
  i16: (value: number): BValue => ({ type: 'int16', value }),
  u32: (value: number): BValue => ({ type: 'uint32', value }),
  i32: (value: number): BValue => ({ type: 'int32', value }),
  f32: (value: number): BValue => ({ type: 'float32', value }),
  f64: (value: number): BValue => ({ type: 'float64', value }),
  u64: (value: bigint): BValue => ({ type: 'uint64', value }),
  i64: (value: bigint): BValue => ({ type: 'int64', value }),
  bool: (value: boolean | number): BValue => ({ type: 'bool', value }),
  str: (value: string | Uint8Array): BValue => ({ type: 'string', value }),
  arr: (itemType: GgufValueType, items: BValue[], length?: bigint): BValue => ({ type: 'array', itemType, items, length }),
  raw: (tag: number, bytes: Uint8Array): BValue => ({ type: 'raw', tag, bytes }),
};

export interface BTensor {
  name: string | Uint8Array;
  /** ggml dimensions, innermost first. */
  ne: readonly (number | bigint)[];
  /** ggml type id. */
  type: number;
  /** Default: zeros of the right size (nothing for an unknown type). */
  data?: Uint8Array;
  /** Default: packed after the previous tensor. */
  offset?: bigint;
  /** Default: ne.length. */
  nDims?: number;
}

export interface BuildOptions {
  magic?: string;
  version?: number;
  /** Override the counts written in the header. */
  tensorCount?: bigint;
  kvCount?: bigint;
  /** Layout alignment when general.alignment is not a uint32 in the metadata (default 32). */
  alignment?: number;
}

export interface GgufLayout {
  versionAt: number;
  tensorCountAt: number;
  kvCountAt: number;
  kv: { key: string; keyAt: number; tagAt: number; valueAt: number }[];
  tensors: { name: string; infoAt: number; nDimsAt: number; neAt: number; typeAt: number; offsetAt: number; dataAt: number; size: number }[];
  dataOffset: number;
}

class Writer {
  private chunks: Uint8Array[] = [];
  length = 0;
  bytes(b: Uint8Array): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  private view(n: number, fill: (v: DataView) => void): void {
    const b = new Uint8Array(n);
    fill(new DataView(b.buffer));
    this.bytes(b);
  }
  u8(x: number): void { this.view(1, (v) => v.setUint8(0, x)); }
  i8(x: number): void { this.view(1, (v) => v.setInt8(0, x)); }
  u16(x: number): void { this.view(2, (v) => v.setUint16(0, x, true)); }
  i16(x: number): void { this.view(2, (v) => v.setInt16(0, x, true)); }
  u32(x: number): void { this.view(4, (v) => v.setUint32(0, x, true)); }
  i32(x: number): void { this.view(4, (v) => v.setInt32(0, x, true)); }
  f32(x: number): void { this.view(4, (v) => v.setFloat32(0, x, true)); }
  f64(x: number): void { this.view(8, (v) => v.setFloat64(0, x, true)); }
  u64(x: bigint): void { this.view(8, (v) => v.setBigUint64(0, BigInt.asUintN(64, x), true)); }
  i64(x: bigint): void { this.view(8, (v) => v.setBigInt64(0, x, true)); }
  str(s: string | Uint8Array): void {
    const b = typeof s === 'string' ? new TextEncoder().encode(s) : s;
    this.u64(BigInt(b.length));
    this.bytes(b);
  }
  pad(alignment: number): void {
    const rest = this.length % alignment;
    if (rest !== 0) this.bytes(new Uint8Array(alignment - rest));
  }
  finish(): Uint8Array {
    const out = new Uint8Array(this.length);
    let at = 0;
    for (const c of this.chunks) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  }
}

function tagOf(value: BValue): number {
  return value.type === 'raw' ? value.tag : GGUF_VALUE_TYPES.indexOf(value.type);
}

function writeValue(w: Writer, value: BValue): void {
  switch (value.type) {
    case 'uint8': return w.u8(value.value);
    case 'int8': return w.i8(value.value);
    case 'uint16': return w.u16(value.value);
    case 'int16': return w.i16(value.value);
    case 'uint32': return w.u32(value.value);
    case 'int32': return w.i32(value.value);
    case 'float32': return w.f32(value.value);
    case 'float64': return w.f64(value.value);
    case 'uint64': return w.u64(value.value);
    case 'int64': return w.i64(value.value);
    case 'bool': return w.u8(typeof value.value === 'number' ? value.value : value.value ? 1 : 0);
    case 'string': return w.str(value.value);
    case 'raw': return w.bytes(value.bytes);
    case 'array': {
      w.u32(GGUF_VALUE_TYPES.indexOf(value.itemType));
      w.u64(value.length ?? BigInt(value.items.length));
      for (const item of value.items) {
        if (item.type === 'array') writeValue(w, item);
        else writeValue(w, item);
      }
    }
  }
}

/** Bytes a tensor of this type and shape occupies (0 for a type the table does not know). */
export function tensorBytes(type: number, ne: readonly (number | bigint)[]): number {
  const info = ggmlTypeById(type);
  if (info === undefined) return 0;
  const elements = ne.reduce<number>((a, b) => a * Number(b), 1);
  return Math.max(0, Math.floor(elements / info.blockSize) * info.typeSize);
}

/** Writes a GGUF file. */
export function buildGguf(kvs: readonly [string | Uint8Array, BValue][], tensors: readonly BTensor[] = [], options: BuildOptions = {}): { bytes: Uint8Array; layout: GgufLayout } {
  const w = new Writer();
  w.bytes(new TextEncoder().encode(options.magic ?? 'GGUF'));
  const versionAt = w.length;
  w.u32(options.version ?? 3);
  const tensorCountAt = w.length;
  w.u64(options.tensorCount ?? BigInt(tensors.length));
  const kvCountAt = w.length;
  w.u64(options.kvCount ?? BigInt(kvs.length));
  let alignment = options.alignment ?? 32;
  const layout: GgufLayout = { versionAt, tensorCountAt, kvCountAt, kv: [], tensors: [], dataOffset: 0 };
  for (const [key, value] of kvs) {
    const keyAt = w.length;
    w.str(key);
    const tagAt = w.length;
    w.u32(tagOf(value));
    const valueAt = w.length;
    writeValue(w, value);
    if (key === 'general.alignment' && value.type === 'uint32' && value.value > 0 && (value.value & (value.value - 1)) === 0) alignment = value.value;
    layout.kv.push({ key: typeof key === 'string' ? key : '<bytes>', keyAt, tagAt, valueAt });
  }
  const sizes = tensors.map((t) => t.data?.length ?? tensorBytes(t.type, t.ne));
  let next = 0;
  const offsets = tensors.map((t, i) => {
    const offset = t.offset ?? BigInt(next);
    next = Number(offset) + (sizes[i] as number);
    next += (alignment - (next % alignment)) % alignment;
    return offset;
  });
  tensors.forEach((t, i) => {
    const infoAt = w.length;
    w.str(t.name);
    const nDimsAt = w.length;
    w.u32(t.nDims ?? t.ne.length);
    const neAt = w.length;
    for (const d of t.ne) w.u64(BigInt(d));
    const typeAt = w.length;
    w.u32(t.type);
    const offsetAt = w.length;
    w.u64(offsets[i] as bigint);
    layout.tensors.push({ name: typeof t.name === 'string' ? t.name : '<bytes>', infoAt, nDimsAt, neAt, typeAt, offsetAt, dataAt: 0, size: sizes[i] as number });
  });
  if (tensors.length > 0) w.pad(alignment);
  layout.dataOffset = w.length;
  const header = w.finish();
  let end = header.length;
  tensors.forEach((_, i) => {
    const at = layout.dataOffset + Number(offsets[i]);
    (layout.tensors[i] as { dataAt: number }).dataAt = at;
    if (Number(offsets[i]) < 2 ** 40) end = Math.max(end, at + (sizes[i] as number));
  });
  const rest = end - layout.dataOffset;
  end = layout.dataOffset + rest + ((alignment - (rest % alignment)) % alignment);
  const out = new Uint8Array(tensors.length > 0 ? end : header.length);
  out.set(header);
  tensors.forEach((t, i) => {
    if (t.data !== undefined && Number(offsets[i]) < 2 ** 40) out.set(t.data, layout.dataOffset + Number(offsets[i]));
  });
  return { bytes: out, layout };
}

// ---------------------------------------------------------------- a tiny llama

/** A small deterministic PRNG for test data and mutations (the fixtures' mulberry32). */
export const rng = mulberry32;

export interface TinyLlamaOptions {
  family?: string;
  hidden?: number;
  layers?: number;
  heads?: number;
  kvHeads?: number;
  ffn?: number;
  vocab?: number;
  qkvBias?: boolean;
  tied?: boolean;
  seed?: number;
  /** Element type per tensor name suffix (e.g. { 'ffn_up.weight': 'Q8_0' }); default F32. Data is random bytes of the right size. */
  types?: Record<string, TensorDType>;
}

/** Metadata and tensors of a valid miniature llama-family model, to build or to break. */
export function tinyLlama(options: TinyLlamaOptions = {}): { kvs: [string, BValue][]; tensors: BTensor[] } {
  const family = options.family ?? 'llama';
  const d = options.hidden ?? 32;
  const layers = options.layers ?? 2;
  const heads = options.heads ?? 4;
  const kvHeads = options.kvHeads ?? 2;
  const ffn = options.ffn ?? 64;
  const vocab = options.vocab ?? 16;
  const headDim = d / heads;
  const random = rng(options.seed ?? 1);
  const kvs: [string, BValue][] = [
    ['general.architecture', bv.str(family)],
    ['general.name', bv.str('tiny')],
    [`${family}.context_length`, bv.u32(256)],
    [`${family}.embedding_length`, bv.u32(d)],
    [`${family}.block_count`, bv.u32(layers)],
    [`${family}.feed_forward_length`, bv.u32(ffn)],
    [`${family}.attention.head_count`, bv.u32(heads)],
    [`${family}.attention.head_count_kv`, bv.u32(kvHeads)],
    [`${family}.rope.dimension_count`, bv.u32(headDim)],
    [`${family}.attention.layer_norm_rms_epsilon`, bv.f32(1e-5)],
    ['tokenizer.ggml.model', bv.str('llama')],
    ['tokenizer.ggml.tokens', bv.arr('string', Array.from({ length: vocab }, (_, i) => bv.str(`t${i}`)))],
    ['tokenizer.ggml.scores', bv.arr('float32', Array.from({ length: vocab }, (_, i) => bv.f32(-i)))],
    ['tokenizer.chat_template', bv.str('{{ messages }}')],
  ];
  const tensors: BTensor[] = [];
  const add = (name: string, shape: number[]): void => {
    const suffix = name.replace(/^blk\.\d+\./, '');
    const dtype = options.types?.[suffix] ?? 'F32';
    const info = ggmlTypeOfDtype(dtype);
    const ne = [...shape].reverse();
    const size = tensorBytes(info.id, ne);
    let data: Uint8Array;
    if (dtype === 'F32') {
      const f = new Float32Array(size / 4).map(() => random() * 2 - 1);
      data = new Uint8Array(f.buffer);
    } else {
      data = new Uint8Array(size).map(() => Math.floor(random() * 256));
      // keep fp16 scales finite-ish: clear the exponent's top bit of every byte pair start
      for (let i = 1; i < data.length; i += 2) data[i] = (data[i] as number) & 0x3b;
    }
    tensors.push({ name, ne, type: info.id, data });
  };
  const q = heads * headDim;
  const kv = kvHeads * headDim;
  add('token_embd.weight', [vocab, d]);
  for (let l = 0; l < layers; l++) {
    const b = `blk.${l}.`;
    add(`${b}attn_norm.weight`, [d]);
    add(`${b}attn_q.weight`, [q, d]);
    add(`${b}attn_k.weight`, [kv, d]);
    add(`${b}attn_v.weight`, [kv, d]);
    if (options.qkvBias) {
      add(`${b}attn_q.bias`, [q]);
      add(`${b}attn_k.bias`, [kv]);
      add(`${b}attn_v.bias`, [kv]);
    }
    add(`${b}attn_output.weight`, [d, q]);
    add(`${b}ffn_norm.weight`, [d]);
    add(`${b}ffn_gate.weight`, [ffn, d]);
    add(`${b}ffn_up.weight`, [ffn, d]);
    add(`${b}ffn_down.weight`, [d, ffn]);
  }
  add('output_norm.weight', [d]);
  if (!options.tied) add('output.weight', [vocab, d]);
  return { kvs, tensors };
}
