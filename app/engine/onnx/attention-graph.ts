// The offload path's attention (issue 14) as an onnxruntime graph over a device-side row buffer.
//
//   q      float32 [1, 1, heads·headDim]                 this step's query (from the dense stage)
//   k_rows float16|float32 [R, headDim]                  the row buffer's K rows (R = kvHeads · rowsPerHead)
//   v_rows float16|float32 [R, headDim]                  its V rows, row for row
//   idx    int32 [kvHeads, N]                            per KV head the buffer rows to attend
//                                                        (selected ∪ sinks ∪ recent ∪ current token)
//   attn   float32 [1, 1, heads·headDim]                 softmax(q·Kᵀ·scale)·V per query head
//
// What the layer's attention computes beyond q·kᵀ (native/src/attention_params.h, the shape's optional
// fields): `scale` (default 1/√headDim, the graph unchanged when left out), `softcap` (> 0: each scaled
// logit s becomes softcap·tanh(s / softcap) before the softmax) and `sinks` ([heads], one logit per
// query head joining the softmax denominator with no value row: a column appended to the logits before
// the Softmax and sliced off after). A sliding window is the caller's `idx` (which rows are gathered),
// not the graph's.
//
// Gather(k_rows, idx) is the only read of the buffer: the input that attention computes over holds
// the N gathered rows of each KV head and nothing else. Query head h belongs to KV head ⌊h / group⌋
// (group = heads / kvHeads), as in the native kernels. float16 rows are cast to float32 after the
// gather (exact), so an fp16 pool's rows cross as their own bits.
//
// Variant 'ragged' (a policy whose KV heads keep different counts, as Quest's pages do): 'gather' plus
// `lengths` int32 [kvHeads, 1, 1]; idx is padded to the longest list, and the scaled logits of entries
// at or past a head's length become −∞ before the softmax (exp(−∞) = 0: the padding weighs nothing).
//
// Variant 'prefix' (every KV head attends its buffer rows 0..N−1 in order, which is what 'full' and
// dense layers come to: the row buffer hands rows out lowest first and an appended slot takes the row
// its previous content freed): idx is replaced by `n` int64 [1], and the rows are a Slice of the buffer
// viewed as [kvHeads, R / kvHeads, headDim]. The same attention follows; the host binds 8 bytes instead
// of kvHeads · N · 4.
//
// What onnxruntime-node 1.30 offers for binding (measured and read from its binding, see
// AttentionSession): a CPU tensor fed to run() aliases the JS typed array (no copy: the run time does
// not grow with the input's size), so on the CPU provider the row buffer is a typed array kept
// between steps and only the rows written into it move; a non-null `fetches` entry is a preallocated
// output written in place; `preferredOutputLocation: 'gpu-buffer'` keeps outputs on the device for
// the WebGPU EP only (Tensor.gpuBuffer is an opaque External there; there is no upload into, or
// download from, part of one from JS); CUDA's provider library is not shipped in the npm package.
import * as ort from 'onnxruntime-node';

import { OnnxError } from './errors.ts';
import { GraphBuilder } from './graph-builder.ts';
import { sessionOptions, type EngineSessionOptions } from './session.ts';

export type RowElemType = 'float16' | 'float32';

export interface AttentionGraphShape {
  heads: number;
  kvHeads: number;
  headDim: number;
  rowType: RowElemType;
  /** multiplies q·k (default 1/sqrt(headDim)) */
  scale?: number;
  /** 0 or left out: off; > 0: s ← softcap·tanh(s / softcap) on the scaled logits */
  softcap?: number;
  /** [heads] one logit per query head in the softmax denominator (gpt-oss), fixed per layer */
  sinks?: Float32Array;
}

/** The serialised attention graph (see the header for its inputs and output). */
export function buildAttentionGraph(shape: AttentionGraphShape, variant: 'gather' | 'ragged' | 'prefix' = 'gather'): Uint8Array {
  const { heads, kvHeads, headDim: d, rowType } = shape;
  if (!Number.isInteger(heads) || !Number.isInteger(kvHeads) || heads < 1 || kvHeads < 1 || heads % kvHeads !== 0) {
    throw new OnnxError('ONNX_BAD_GRAPH', `attention graph: heads (${heads}) must be a positive multiple of kvHeads (${kvHeads})`);
  }
  const group = heads / kvHeads;
  const { scale: scaleArg, softcap = 0, sinks } = shape;
  if (scaleArg !== undefined && !(Number.isFinite(scaleArg) && scaleArg > 0)) {
    throw new OnnxError('ONNX_BAD_GRAPH', `attention graph: scale must be a finite number > 0, got ${scaleArg}`);
  }
  if (!(Number.isFinite(softcap) && softcap >= 0)) throw new OnnxError('ONNX_BAD_GRAPH', `attention graph: softcap must be a finite number >= 0, got ${softcap}`);
  if (sinks !== undefined && (sinks.length !== heads || !sinks.every(Number.isFinite))) {
    throw new OnnxError('ONNX_BAD_GRAPH', `attention graph: sinks must be ${heads} finite values, got ${sinks.length}`);
  }
  const g = new GraphBuilder(`offload.attention.${variant}.${heads}x${kvHeads}x${d}.${rowType}`);
  const q = g.input('q', 'float32', [1, 1, heads * d]);
  const kRows = g.input('k_rows', rowType, ['R', d]);
  const vRows = g.input('v_rows', rowType, ['R', d]);
  const shapeOf = (name: string, dims: number[]) => g.initializer(name, { elemType: 'int64', dims: [dims.length], data: BigInt64Array.from(dims, BigInt) });
  let k: string;
  let v: string;
  let idx: string | undefined;
  if (variant !== 'prefix') {
    idx = g.input('idx', 'int32', [kvHeads, 'N']);
    k = g.op('Gather', [kRows, idx], { axis: 0 }, { name: 'gather_k' }); // [kvHeads, N, d]
    v = g.op('Gather', [vRows, idx], { axis: 0 }, { name: 'gather_v' });
  } else {
    const n = g.input('n', 'int64', [1]);
    const heads3 = shapeOf('rows_shape', [kvHeads, -1, d]);
    const zero = shapeOf('slice_start', [0]);
    const axis = shapeOf('slice_axis', [1]);
    k = g.op('Slice', [g.op('Reshape', [kRows, heads3], {}, { name: 'k_heads' }), zero, n, axis], {}, { name: 'slice_k' }); // [kvHeads, N, d]
    v = g.op('Slice', [g.op('Reshape', [vRows, heads3], {}, { name: 'v_heads' }), zero, n, axis], {}, { name: 'slice_v' });
  }
  if (rowType === 'float16') {
    k = g.op('Cast', [k], { to: 1 }, { name: 'k_f32' });
    v = g.op('Cast', [v], { to: 1 }, { name: 'v_f32' });
  }
  const q3 = g.op('Reshape', [q, shapeOf('q_shape', [kvHeads, group, d])], {}, { name: 'q_heads' }); // [kvHeads, group, d]
  // scores as K·qᵀ: only the small q and p are transposed, never the N gathered rows
  const qt = g.op('Transpose', [q3], { perm: [0, 2, 1] }, { name: 'q_t' }); // [kvHeads, d, group]
  const scores = g.op('MatMul', [k, qt], {}, { name: 'scores' }); // [kvHeads, N, group]
  const scale = g.initializer('scale', { elemType: 'float32', dims: [], data: Float32Array.of(scaleArg ?? 1 / Math.sqrt(d)) });
  let scaled = g.op('Mul', [scores, scale], {}, { name: 'scaled' });
  if (softcap > 0) {
    const cap = g.initializer('softcap', { elemType: 'float32', dims: [], data: Float32Array.of(softcap) });
    const tanh = g.op('Tanh', [g.op('Div', [scaled, cap], {}, { name: 'capped_in' })], {}, { name: 'capped_tanh' });
    scaled = g.op('Mul', [tanh, cap], {}, { name: 'capped' });
  }
  if (variant === 'ragged') {
    // entry j of head g counts while j < lengths[g]: positions [kvHeads, N, 1] against lengths [kvHeads, 1, 1].
    // The positions are an exclusive CumSum of ones shaped like idx, all int32: WebGPU has no int64
    // kernels by default, so Shape/Range arithmetic on int64 would land on the CPU (refused: device
    // sessions run without the CPU fallback, session.ts)
    const lengths = g.input('lengths', 'int32', [kvHeads, 1, 1]);
    const int32 = (name: string, x: number) => g.initializer(name, { elemType: 'int32', dims: [], data: Int32Array.of(x) });
    const ones = g.op('Add', [g.op('Mul', [idx!, int32('zero_i32', 0)], {}, { name: 'idx_zeros' }), int32('one_i32', 1)], {}, { name: 'idx_ones' }); // [kvHeads, N]
    const entries = g.op('CumSum', [ones, int32('entries_axis', 1)], { exclusive: 1 }, { name: 'entries' }); // [kvHeads, N]: 0..N−1
    const column = g.op('Unsqueeze', [entries, g.initializer('entries_unsqueeze', { elemType: 'int64', dims: [1], data: BigInt64Array.of(2n) })], {}, { name: 'entries_column' }); // [kvHeads, N, 1]
    const counts = g.op('Less', [column, lengths], {}, { name: 'counts' }); // [kvHeads, N, 1]
    const minusInf = g.initializer('minus_inf', { elemType: 'float32', dims: [], data: Float32Array.of(-Infinity) });
    scaled = g.op('Where', [counts, scaled, minusInf], {}, { name: 'masked' }); // [kvHeads, N, group]
  }
  let p: string;
  if (sinks === undefined) {
    p = g.op('Softmax', [scaled], { axis: 1 }, { name: 'softmax' }); // over N
  } else {
    // the sink of query head g·group + j is column N of [g, ·, j]: it takes part in the normaliser, then is dropped
    const sinkColumn = g.initializer('sinks', { elemType: 'float32', dims: [kvHeads, 1, group], data: Float32Array.from(sinks) });
    const withSinks = g.op('Concat', [scaled, sinkColumn], { axis: 1 }, { name: 'with_sinks' }); // [kvHeads, N + 1, group]
    const all = g.op('Softmax', [withSinks], { axis: 1 }, { name: 'softmax' });
    p = g.op('Slice', [all, shapeOf('sink_start', [0]), shapeOf('sink_end', [-1]), shapeOf('sink_axis', [1])], {}, { name: 'drop_sinks' }); // [kvHeads, N, group]
  }
  const pt = g.op('Transpose', [p], { perm: [0, 2, 1] }, { name: 'p_t' }); // [kvHeads, group, N]
  const o = g.op('MatMul', [pt, v], {}, { name: 'weighted' }); // [kvHeads, group, d]
  g.op('Reshape', [o, shapeOf('out_shape', [1, 1, heads * d])], {}, { name: 'attn_reshape', output: 'attn' });
  g.output('attn', 'float32', [1, 1, heads * d]);
  return g.toModel();
}

/**
 * The row-update graph (device-resident buffers, rowUpdate 'graph'): the misses' rows written into the
 * buffer on the device, k_out = ScatterND(k_buf, rows, k_new) and the same for V.
 *   k_buf, v_buf  [R, headDim]   the layer's buffer as the previous update left it (on the device)
 *   rows          int64 [M, 1]   buffer rows to overwrite
 *   k_new, v_new  [M, headDim]   the misses' rows (the only KV bytes that cross)
 */
export function buildRowUpdateGraph(shape: Pick<AttentionGraphShape, 'headDim' | 'rowType'>): Uint8Array {
  const { headDim: d, rowType } = shape;
  const g = new GraphBuilder(`offload.row_update.${d}.${rowType}`);
  const kBuf = g.input('k_buf', rowType, ['R', d]);
  const vBuf = g.input('v_buf', rowType, ['R', d]);
  const rows = g.input('rows', 'int64', ['M', 1]);
  const kNew = g.input('k_new', rowType, ['M', d]);
  const vNew = g.input('v_new', rowType, ['M', d]);
  g.op('ScatterND', [kBuf, rows, kNew], {}, { name: 'scatter_k', output: 'k_out' });
  g.op('ScatterND', [vBuf, rows, vNew], {}, { name: 'scatter_v', output: 'v_out' });
  g.output('k_out', rowType, ['R', d]);
  g.output('v_out', rowType, ['R', d]);
  return g.toModel();
}

/**
 * The zero buffer a layer's first row update starts from, made on the provider's device: Expand of a
 * zero scalar to `shape` int64 [2] = [R, headDim] for K and V (only the 16 shape bytes cross).
 */
export function buildZeroRowsGraph(shape: Pick<AttentionGraphShape, 'headDim' | 'rowType'>): Uint8Array {
  const { headDim: d, rowType } = shape;
  const g = new GraphBuilder(`offload.zero_rows.${d}.${rowType}`);
  const dims = g.input('shape', 'int64', [2]);
  const zero = g.initializer('zero', rowType === 'float16' ? { elemType: 'float16', dims: [1, 1], data: new Uint16Array(1) } : { elemType: 'float32', dims: [1, 1], data: new Float32Array(1) });
  g.op('Expand', [zero, dims], {}, { name: 'zeros_k', output: 'k_out' });
  g.op('Expand', [zero, dims], {}, { name: 'zeros_v', output: 'v_out' });
  g.output('k_out', rowType, ['R', d]);
  g.output('v_out', rowType, ['R', d]);
  return g.toModel();
}

/** One tensor given to a run: its bytes, and whether it lives on the device between steps (the row buffer). */
export interface BoundTensor {
  name: string;
  bytes: number;
  /** true: kept on the device between steps (not crossing); false: bound from the host this run */
  resident: boolean;
}

/** What the attention session reads as k_rows / v_rows. */
export interface RowTensors {
  readonly k: ort.Tensor;
  readonly v: ort.Tensor;
  readonly rows: number;
  /** bytes of K and V together */
  readonly byteLength: number;
  /** held by onnxruntime on the provider's device (an update graph's output), not a host array */
  readonly onDevice: boolean;
}

/** A row buffer's storage as host arrays bound to the session: the same tensors from step to step until it grows. */
export class BoundRows implements RowTensors {
  readonly onDevice = false;
  readonly k: ort.Tensor;
  readonly v: ort.Tensor;
  constructor(
    readonly kData: Uint16Array | Float32Array,
    readonly vData: Uint16Array | Float32Array,
    readonly rows: number,
    headDim: number,
    type: RowElemType,
  ) {
    this.k = new ort.Tensor(type, kData, [rows, headDim]);
    this.v = new ort.Tensor(type, vData, [rows, headDim]);
  }

  get byteLength(): number {
    return this.kData.byteLength + this.vData.byteLength;
  }
}

/** A layer's buffer as the update graph's outputs: device tensors on WebGPU ('gpu-buffer'), onnxruntime-owned CPU tensors on the CPU. */
class UpdatedRows implements RowTensors {
  constructor(
    readonly k: ort.Tensor,
    readonly v: ort.Tensor,
    readonly rows: number,
    readonly byteLength: number,
    readonly onDevice: boolean,
  ) {}
}

/**
 * The update graph's session: each run takes the layer's current rows (device tensors, or at first a
 * host zero buffer) and the misses, and returns the new rows, kept where the provider keeps outputs
 * (preferredOutputLocation 'gpu-buffer' on WebGPU; CPU memory otherwise). The previous device tensors
 * are disposed.
 */
export class RowUpdateSession {
  private session: ort.InferenceSession | undefined;
  private zeroSession: ort.InferenceSession | undefined;
  private constructor(
    session: ort.InferenceSession,
    /** WebGPU: makes a layer's first buffer on the device (undefined: host zeros, the CPU provider) */
    zeroSession: ort.InferenceSession | undefined,
    readonly shape: Pick<AttentionGraphShape, 'headDim' | 'rowType'>,
    readonly providers: readonly string[],
  ) {
    this.session = session;
    this.zeroSession = zeroSession;
  }

  static async create(shape: Pick<AttentionGraphShape, 'headDim' | 'rowType'>, options: EngineSessionOptions = {}): Promise<RowUpdateSession> {
    const providers = options.executionProviders ?? ['cpu'];
    const opts = sessionOptions(options);
    const onDevice = providers[0] === 'webgpu';
    if (onDevice) opts.preferredOutputLocation = 'gpu-buffer';
    let s: ort.InferenceSession | undefined;
    try {
      s = await ort.InferenceSession.create(buildRowUpdateGraph(shape), opts);
      const z = onDevice ? await ort.InferenceSession.create(buildZeroRowsGraph(shape), opts) : undefined;
      return new RowUpdateSession(s, z, shape, providers);
    } catch (cause) {
      await s?.release();
      throw new OnnxError('ONNX_SESSION_FAILED', `offload row update: onnxruntime rejected the graph: ${(cause as Error).message}`, { providers: providers.join(',') }, { cause });
    }
  }

  /**
   * An all-zero layer buffer of `rows` rows (what the first update starts from): made on the device
   * where outputs stay there (WebGPU: only its shape crosses), else host arrays (the CPU provider's memory).
   */
  async zeros(rows: number): Promise<{ rows: RowTensors; bound: BoundTensor[] }> {
    const { headDim: d, rowType } = this.shape;
    const byteLength = 2 * rows * d * (rowType === 'float16' ? 2 : 4);
    if (this.zeroSession) {
      const dims = BigInt64Array.of(BigInt(rows), BigInt(d));
      let out: ort.InferenceSession.ReturnType;
      try {
        out = await this.zeroSession.run({ shape: new ort.Tensor('int64', dims, [2]) });
      } catch (cause) {
        throw new OnnxError('ONNX_SESSION_FAILED', `offload zero rows: run failed: ${(cause as Error).message}`, { rows }, { cause });
      }
      const k = out.k_out as ort.Tensor;
      const v = out.v_out as ort.Tensor;
      return { rows: new UpdatedRows(k, v, rows, byteLength, k.location === 'gpu-buffer'), bound: [{ name: 'shape', bytes: dims.byteLength, resident: false }] };
    }
    const Arr = rowType === 'float16' ? Uint16Array : Float32Array;
    return { rows: new BoundRows(new Arr(rows * d), new Arr(rows * d), rows, d, rowType), bound: [] };
  }

  /** Writes rows[i] (buffer rows) := kNew/vNew row i for i < m; returns the new rows and what was bound. */
  async run(prev: RowTensors, rows: BigInt64Array, m: number, kNew: Uint16Array | Float32Array, vNew: Uint16Array | Float32Array): Promise<{ rows: RowTensors; bound: BoundTensor[] }> {
    const s = this.session;
    if (!s) throw new OnnxError('ONNX_SESSION_FAILED', 'offload row update: session used after release()');
    const { headDim: d, rowType } = this.shape;
    const r = new ort.Tensor('int64', rows.subarray(0, m), [m, 1]);
    const k = new ort.Tensor(rowType, kNew.subarray(0, m * d), [m, d]);
    const v = new ort.Tensor(rowType, vNew.subarray(0, m * d), [m, d]);
    let out: ort.InferenceSession.ReturnType;
    try {
      out = await s.run({ k_buf: prev.k, v_buf: prev.v, rows: r, k_new: k, v_new: v });
    } catch (cause) {
      throw new OnnxError('ONNX_SESSION_FAILED', `offload row update: run failed: ${(cause as Error).message}`, { rows: prev.rows, m }, { cause });
    }
    const onHost = this.providers.every((p) => p === 'cpu');
    const kOut = out.k_out as ort.Tensor;
    const vOut = out.v_out as ort.Tensor;
    const onDevice = kOut.location === 'gpu-buffer';
    if (prev instanceof UpdatedRows && prev.onDevice) {
      prev.k.dispose();
      prev.v.dispose();
    }
    const bound: BoundTensor[] = [
      { name: 'k_buf', bytes: prev.byteLength / 2, resident: onHost || prev.onDevice },
      { name: 'v_buf', bytes: prev.byteLength / 2, resident: onHost || prev.onDevice },
      { name: 'rows', bytes: (r.data as BigInt64Array).byteLength, resident: false },
      { name: 'k_new', bytes: (k.data as Uint16Array | Float32Array).byteLength, resident: false },
      { name: 'v_new', bytes: (v.data as Uint16Array | Float32Array).byteLength, resident: false },
    ];
    return { rows: new UpdatedRows(kOut, vOut, prev.rows, prev.byteLength, onDevice), bound };
  }

  async release(): Promise<void> {
    const s = this.session;
    const z = this.zeroSession;
    this.session = undefined;
    this.zeroSession = undefined;
    if (s) await s.release();
    if (z) await z.release();
  }
}

/**
 * The attention session. run() binds q, the row buffer (resident), idx and a preallocated output
 * over the caller's array, and returns what it bound, tensor by tensor.
 */
export class AttentionSession {
  private session: ort.InferenceSession | undefined;
  private prefix: ort.InferenceSession | undefined;
  /** the 'ragged' variant, built at the first step whose KV heads list different counts */
  private ragged: Promise<ort.InferenceSession> | undefined;
  private released = false;
  private lengthsData = new Int32Array(0);
  private readonly nData = new BigInt64Array(1);
  private readonly nT: ort.Tensor;
  private readonly out: ort.Tensor;
  private readonly q: ort.Tensor;

  private constructor(
    session: ort.InferenceSession,
    prefix: ort.InferenceSession,
    readonly shape: AttentionGraphShape,
    readonly providers: readonly string[],
    private readonly qData: Float32Array,
    private readonly outData: Float32Array,
    private readonly options: EngineSessionOptions,
  ) {
    this.session = session;
    this.prefix = prefix;
    this.nT = new ort.Tensor('int64', this.nData, [1]);
    const w = shape.heads * shape.headDim;
    this.q = new ort.Tensor('float32', qData, [1, 1, w]);
    this.out = new ort.Tensor('float32', outData, [1, 1, w]);
  }

  /** Compiles the graph; `q` and `out` ([heads·headDim]) are bound for every run (the caller fills q, reads out). */
  static async create(shape: AttentionGraphShape, q: Float32Array, out: Float32Array, options: EngineSessionOptions = {}): Promise<AttentionSession> {
    const w = shape.heads * shape.headDim;
    if (q.length !== w || out.length !== w) throw new RangeError(`attention session: q and out must have ${w} elements`);
    const providers = options.executionProviders ?? ['cpu'];
    try {
      const s = await ort.InferenceSession.create(buildAttentionGraph(shape, 'gather'), sessionOptions(options));
      const p = await ort.InferenceSession.create(buildAttentionGraph(shape, 'prefix'), sessionOptions(options));
      return new AttentionSession(s, p, shape, providers, q, out, options);
    } catch (cause) {
      throw new OnnxError('ONNX_SESSION_FAILED', `offload attention: onnxruntime rejected the graph: ${(cause as Error).message}`, { providers: providers.join(',') }, { cause });
    }
  }

  /** Bytes run() binds from the host for `n` rows per KV head (idx only; q and out stay with the dense graphs). */
  static crossingBytes(kvHeads: number, n: number): number {
    return kvHeads * n * 4;
  }

  /**
   * Attention over rows idx[g·n .. (g+1)·n) of each KV head g; the result lands in `out`. `prefix`: the
   * caller knows those rows are g·(R/kvHeads) + 0..n−1 (idx is then not read, and not bound).
   * `lengths` [kvHeads]: only the first lengths[g] entries of head g count (a ragged step; the rest pad).
   */
  async run(rows: RowTensors, idx: Int32Array, n: number, prefix = false, lengths?: Int32Array): Promise<BoundTensor[]> {
    if (this.released) throw new OnnxError('ONNX_SESSION_FAILED', 'offload attention: session used after release()');
    const s = prefix ? this.prefix : lengths ? await this.raggedSession() : this.session;
    if (!s) throw new OnnxError('ONNX_SESSION_FAILED', 'offload attention: session used after release()');
    const kvHeads = this.shape.kvHeads;
    const idxT = prefix ? this.nT : new ort.Tensor('int32', idx.subarray(0, kvHeads * n), [kvHeads, n]);
    if (prefix) this.nData[0] = BigInt(n);
    let lengthsT: ort.Tensor | undefined;
    if (lengths) {
      if (this.lengthsData.length !== kvHeads) this.lengthsData = new Int32Array(kvHeads);
      this.lengthsData.set(lengths.subarray(0, kvHeads));
      lengthsT = new ort.Tensor('int32', this.lengthsData, [kvHeads, 1, 1]);
    }
    try {
      await s.run({ q: this.q, k_rows: rows.k, v_rows: rows.v, ...(prefix ? { n: this.nT } : { idx: idxT }), ...(lengthsT ? { lengths: lengthsT } : {}) }, { attn: this.out });
    } catch (cause) {
      throw new OnnxError('ONNX_SESSION_FAILED', `offload attention: run failed: ${(cause as Error).message}`, { rows: rows.rows, n }, { cause });
    }
    // On the CPU provider the bound arrays are the provider's memory. On any other provider these are
    // host tensors that onnxruntime copies to the device at every run (and the output back): counted so.
    const onHost = this.providers.every((p) => p === 'cpu');
    return [
      { name: 'q', bytes: this.qData.byteLength, resident: onHost },
      { name: 'k_rows', bytes: rows.byteLength / 2, resident: onHost || rows.onDevice },
      { name: 'v_rows', bytes: rows.byteLength / 2, resident: onHost || rows.onDevice },
      { name: prefix ? 'n' : 'idx', bytes: (idxT.data as Int32Array | BigInt64Array).byteLength, resident: false },
      ...(lengthsT ? [{ name: 'lengths', bytes: this.lengthsData.byteLength, resident: false }] : []),
      { name: 'attn', bytes: this.outData.byteLength, resident: onHost },
    ];
  }

  private raggedSession(): Promise<ort.InferenceSession> {
    this.ragged ??= ort.InferenceSession.create(buildAttentionGraph(this.shape, 'ragged'), sessionOptions(this.options)).catch((cause: unknown) => {
      this.ragged = undefined;
      throw new OnnxError('ONNX_SESSION_FAILED', `offload attention: onnxruntime rejected the ragged graph: ${(cause as Error).message}`, { providers: this.providers.join(',') }, { cause });
    });
    return this.ragged;
  }

  async release(): Promise<void> {
    const s = this.session;
    const p = this.prefix;
    const r = this.ragged;
    this.session = undefined;
    this.prefix = undefined;
    this.ragged = undefined;
    this.released = true;
    if (s) await s.release();
    if (p) await p.release();
    if (r) await (await r.catch(() => undefined))?.release();
  }
}
