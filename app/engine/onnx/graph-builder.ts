// A small typed builder for the engine's ONNX graphs. It checks names as the graph grows (every
// node input must already exist; no value is defined twice), so a mistake fails where it is made,
// not later inside onnxruntime with a less helpful message.
//
//   const g = new GraphBuilder('layer0.pre');
//   const x = g.input('x', 'float32', ['batch', 64]);
//   const w = g.initializer('w', { elemType: 'float32', dims: [64, 32], data: weights });
//   const [y] = g.node('MatMul', [x, w]);
//   g.output(y, 'float32', ['batch', 32]);
//   const bytes = g.toModel();

import { OnnxError } from './errors.ts';
import { toFloat16Array } from './float16.ts';
import {
  bytesOf,
  ELEM_BYTES,
  encodeModel,
  PROTOBUF_LIMIT_BYTES,
  type AttributeSpec,
  type Dim,
  type ElemType,
  type ModelSpec,
  type NodeSpec,
  type TensorSpec,
  type ValueInfoSpec,
} from './onnx-proto.ts';

export type { Dim, ElemType } from './onnx-proto.ts';

/** Typed-array storage of each element type (float16 as raw uint16 bits). */
export interface TensorArrays {
  float32: Float32Array;
  float16: Uint16Array;
  uint8: Uint8Array;
  int8: Int8Array;
  int32: Int32Array;
  int64: BigInt64Array;
}

/** A dense tensor in host memory, row-major. */
export type TensorData = {
  [K in ElemType]: { elemType: K; dims: readonly number[]; data: TensorArrays[K] };
}[ElemType];

// Attribute values: integers become INT, strings STRING, integer arrays INTS. Floats must be
// marked with float()/floats() so that `epsilon: float(1)` is never written as an INT.
export interface FloatAttr {
  readonly kind: 'float';
  readonly value: number;
}
export interface FloatsAttr {
  readonly kind: 'floats';
  readonly value: readonly number[];
}
export type AttrValue = number | bigint | string | readonly (number | bigint)[] | FloatAttr | FloatsAttr;
export type Attrs = Readonly<Record<string, AttrValue | undefined>>;

export const float = (value: number): FloatAttr => ({ kind: 'float', value });
export const floats = (value: readonly number[]): FloatsAttr => ({ kind: 'floats', value });

export const MS_DOMAIN = 'com.microsoft';

export interface GraphBuilderOptions {
  /** ONNX default-domain opset (LayerNormalization needs >= 17). */
  opset?: number;
  /** com.microsoft opset. */
  msOpset?: number;
  irVersion?: number;
  /** Element type of float weights and activations (ops read it). Default float32. */
  floatType?: FloatType;
  /** Refuse to encode above this many initializer bytes (default: protobuf's 2 GiB less 16 MiB of headroom). */
  maxModelBytes?: number;
}

export type FloatType = 'float32' | 'float16';

export interface NodeOptions {
  domain?: string;
  /** Number of outputs (default 1) or their names ('' omits an optional output). */
  outputs?: number | readonly string[];
  /** Node name; also the prefix of generated output names. */
  name?: string;
}

function toAttribute(name: string, v: AttrValue): AttributeSpec {
  if (typeof v === 'string') return { name, type: 'STRING', value: v };
  if (typeof v === 'bigint') return { name, type: 'INT', value: v };
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) throw new OnnxError('ONNX_BAD_GRAPH', `attribute ${name}=${v} is not an integer; wrap floats in float()`);
    return { name, type: 'INT', value: v };
  }
  if (Array.isArray(v)) {
    const ints = v as readonly (number | bigint)[];
    for (const x of ints) {
      if (typeof x === 'number' && !Number.isInteger(x)) throw new OnnxError('ONNX_BAD_GRAPH', `attribute ${name} has a non-integer; wrap float lists in floats()`);
    }
    return { name, type: 'INTS', value: ints };
  }
  const tagged = v as FloatAttr | FloatsAttr;
  return tagged.kind === 'float' ? { name, type: 'FLOAT', value: tagged.value } : { name, type: 'FLOATS', value: tagged.value };
}

export class GraphBuilder {
  readonly name: string;
  /** Element type the ops use for float weights and activations. */
  readonly floatType: FloatType;
  private readonly opset: number;
  private readonly msOpset: number;
  private readonly irVersion: number;
  private readonly nodes: NodeSpec[] = [];
  private readonly initializers: TensorSpec[] = [];
  private readonly inputs: ValueInfoSpec[] = [];
  private readonly outputs: ValueInfoSpec[] = [];
  /** Every value name defined so far (inputs, initializers, node outputs). */
  private readonly defined = new Set<string>();
  private readonly usedDomains = new Set<string>(['']);
  private counter = 0;
  private initializerBytes = 0;
  private readonly maxModelBytes: number;

  constructor(name: string, options: GraphBuilderOptions = {}) {
    this.name = name;
    this.opset = options.opset ?? 21;
    this.msOpset = options.msOpset ?? 1;
    this.irVersion = options.irVersion ?? 10;
    this.floatType = options.floatType ?? 'float32';
    this.maxModelBytes = options.maxModelBytes ?? PROTOBUF_LIMIT_BYTES - 16 * 1024 * 1024;
  }

  /** Bytes of initializer data added so far (what the model will weigh). */
  get weightBytes(): number {
    return this.initializerBytes;
  }

  has(name: string): boolean {
    return this.defined.has(name);
  }

  /** A name not used yet, derived from `prefix`. */
  fresh(prefix: string): string {
    let name = prefix;
    while (this.defined.has(name)) name = `${prefix}_${++this.counter}`;
    return name;
  }

  private define(name: string, what: string): void {
    if (name === '') throw new OnnxError('ONNX_BAD_GRAPH', `${this.name}: ${what} needs a name`);
    if (this.defined.has(name)) throw new OnnxError('ONNX_BAD_GRAPH', `${this.name}: ${what} ${name} is already defined`, { graph: this.name, value: name });
    this.defined.add(name);
  }

  input(name: string, elemType: ElemType, dims: readonly Dim[]): string {
    this.define(name, 'input');
    this.inputs.push({ name, elemType, dims: [...dims] });
    return name;
  }

  initializer(name: string, tensor: TensorData): string {
    const elements = tensor.dims.reduce((a, b) => a * b, 1);
    if (tensor.data.length !== elements) {
      throw new OnnxError('ONNX_BAD_GRAPH', `${this.name}: initializer ${name} has ${tensor.data.length} elements for dims [${tensor.dims.join(', ')}]`, {
        graph: this.name,
        value: name,
        elements: tensor.data.length,
        expected: elements,
      });
    }
    this.define(name, 'initializer');
    this.initializers.push({ name, elemType: tensor.elemType, dims: [...tensor.dims], rawData: bytesOf(tensor.data) });
    this.initializerBytes += elements * ELEM_BYTES[tensor.elemType];
    return name;
  }

  /** A float initializer given in fp32, stored in the graph's float type. */
  floatInitializer(name: string, dims: readonly number[], data: Float32Array): string {
    if (this.floatType === 'float16') return this.initializer(name, { elemType: 'float16', dims, data: toFloat16Array(data) });
    return this.initializer(name, { elemType: 'float32', dims, data });
  }

  /**
   * Adds a node; returns its output names. An input of '' or undefined is an omitted optional
   * input (trailing ones are dropped).
   */
  node(opType: string, inputs: readonly (string | undefined)[], attrs: Attrs = {}, options: NodeOptions = {}): string[] {
    const domain = options.domain ?? '';
    const nodeName = options.name ?? this.freshNodeName(opType);
    const names = inputs.map((i) => i ?? '');
    while (names.length > 0 && names[names.length - 1] === '') names.pop();
    for (const input of names) {
      if (input !== '' && !this.defined.has(input)) {
        throw new OnnxError('ONNX_BAD_GRAPH', `${this.name}: node ${nodeName} (${opType}) reads ${input}, which is not defined yet`, { graph: this.name, node: nodeName, value: input });
      }
    }
    const wanted = options.outputs ?? 1;
    const outputs = typeof wanted === 'number' ? Array.from({ length: wanted }, (_, i) => this.fresh(wanted === 1 ? nodeName : `${nodeName}_${i}`)) : [...wanted];
    for (const o of outputs) if (o !== '') this.define(o, `output of ${nodeName}`);
    const attributes: AttributeSpec[] = [];
    for (const [key, value] of Object.entries(attrs)) if (value !== undefined) attributes.push(toAttribute(key, value));
    this.nodes.push({ opType, domain, name: nodeName, inputs: names, outputs, attributes });
    this.usedDomains.add(domain);
    return outputs;
  }

  /** `node` for the common case of one output. */
  op(opType: string, inputs: readonly (string | undefined)[], attrs: Attrs = {}, options: Omit<NodeOptions, 'outputs'> & { output?: string } = {}): string {
    const outputs = options.output === undefined ? 1 : [options.output];
    const { output: _ignored, ...rest } = options;
    return this.node(opType, inputs, attrs, { ...rest, outputs })[0]!;
  }

  private freshNodeName(opType: string): string {
    return this.fresh(`${opType.toLowerCase()}_${this.nodes.length}`);
  }

  /** Marks an existing value as a graph output. */
  output(name: string, elemType: ElemType, dims?: readonly Dim[]): string {
    if (!this.defined.has(name)) throw new OnnxError('ONNX_BAD_GRAPH', `${this.name}: output ${name} is not defined`, { graph: this.name, value: name });
    if (this.outputs.some((o) => o.name === name)) throw new OnnxError('ONNX_BAD_GRAPH', `${this.name}: ${name} is already an output`, { graph: this.name, value: name });
    this.outputs.push(dims === undefined ? { name, elemType } : { name, elemType, dims: [...dims] });
    return name;
  }

  /** Gives a value a chosen name (an Identity node), e.g. to expose it as an output `q`. */
  rename(value: string, name: string): string {
    return this.op('Identity', [value], {}, { output: name, name: `${name}_identity` });
  }

  toModelSpec(): ModelSpec {
    const opsetImports = [{ domain: '', version: this.opset }];
    for (const d of this.usedDomains) if (d !== '') opsetImports.push({ domain: d, version: d === MS_DOMAIN ? this.msOpset : 1 });
    return {
      irVersion: this.irVersion,
      opsetImports,
      producerName: 'longhand',
      graph: { name: this.name, nodes: this.nodes, initializers: this.initializers, inputs: this.inputs, outputs: this.outputs },
    };
  }

  /** The serialised ModelProto, ready for InferenceSession.create(bytes). */
  toModel(): Uint8Array {
    if (this.outputs.length === 0) throw new OnnxError('ONNX_BAD_GRAPH', `${this.name}: the graph has no outputs`, { graph: this.name });
    // The weights alone must leave headroom under protobuf's limit for names and structure.
    if (this.initializerBytes > this.maxModelBytes) {
      throw new OnnxError('ONNX_MODEL_TOO_LARGE', `${this.name}: ${this.initializerBytes} bytes of weights do not fit one in-memory ONNX model (limit ${this.maxModelBytes}); split the graph`, {
        graph: this.name,
        bytes: this.initializerBytes,
        limit: this.maxModelBytes,
      });
    }
    return encodeModel(this.toModelSpec());
  }
}
