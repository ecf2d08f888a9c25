// The offload path's attention (issue 14) as an onnxruntime graph over a device-side row buffer.
//
//   q      float32 [1, 1, heads·headDim]                 this step's query (from the dense stage)
//   k_rows float16|float32 [R, headDim]                  the row buffer's K rows (R = kvHeads · rowsPerHead)
//   v_rows float16|float32 [R, headDim]                  its V rows, row for row
//   idx    int32 [kvHeads, N]                            per KV head the buffer rows to attend
//                                                        (selected ∪ sinks ∪ recent ∪ current token)
//   attn   float32 [1, 1, heads·headDim]                 softmax(q·Kᵀ/√d)·V per query head
//
// Gather(k_rows, idx) is the only read of the buffer: the input that attention computes over holds
// the N gathered rows of each KV head and nothing else. Query head h belongs to KV head ⌊h / group⌋
// (group = heads / kvHeads), as in the native kernels. float16 rows are cast to float32 after the
// gather (exact), so an fp16 pool's rows cross as their own bits.
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
}

/** The serialised attention graph (see the header for its inputs and output). */
export function buildAttentionGraph(shape: AttentionGraphShape): Uint8Array {
  const { heads, kvHeads, headDim: d, rowType } = shape;
  if (!Number.isInteger(heads) || !Number.isInteger(kvHeads) || heads < 1 || kvHeads < 1 || heads % kvHeads !== 0) {
    throw new OnnxError('ONNX_BAD_GRAPH', `attention graph: heads (${heads}) must be a positive multiple of kvHeads (${kvHeads})`);
  }
  const group = heads / kvHeads;
  const g = new GraphBuilder(`offload.attention.${heads}x${kvHeads}x${d}.${rowType}`);
  const q = g.input('q', 'float32', [1, 1, heads * d]);
  const kRows = g.input('k_rows', rowType, ['R', d]);
  const vRows = g.input('v_rows', rowType, ['R', d]);
  const idx = g.input('idx', 'int32', [kvHeads, 'N']);
  const shapeOf = (name: string, dims: number[]) => g.initializer(name, { elemType: 'int64', dims: [dims.length], data: BigInt64Array.from(dims, BigInt) });
  let k = g.op('Gather', [kRows, idx], { axis: 0 }, { name: 'gather_k' }); // [kvHeads, N, d]
  let v = g.op('Gather', [vRows, idx], { axis: 0 }, { name: 'gather_v' });
  if (rowType === 'float16') {
    k = g.op('Cast', [k], { to: 1 }, { name: 'k_f32' });
    v = g.op('Cast', [v], { to: 1 }, { name: 'v_f32' });
  }
  const q3 = g.op('Reshape', [q, shapeOf('q_shape', [kvHeads, group, d])], {}, { name: 'q_heads' }); // [kvHeads, group, d]
  const kt = g.op('Transpose', [k], { perm: [0, 2, 1] }, { name: 'k_t' }); // [kvHeads, d, N]
  const scores = g.op('MatMul', [q3, kt], {}, { name: 'scores' }); // [kvHeads, group, N]
  const scale = g.initializer('scale', { elemType: 'float32', dims: [], data: Float32Array.of(1 / Math.sqrt(d)) });
  const scaled = g.op('Mul', [scores, scale], {}, { name: 'scaled' });
  const p = g.op('Softmax', [scaled], { axis: -1 }, { name: 'softmax' });
  const o = g.op('MatMul', [p, v], {}, { name: 'weighted' }); // [kvHeads, group, d]
  g.op('Reshape', [o, shapeOf('out_shape', [1, 1, heads * d])], {}, { name: 'attn_reshape', output: 'attn' });
  g.output('attn', 'float32', [1, 1, heads * d]);
  return g.toModel();
}

/** One tensor given to a run: its bytes, and whether it lives on the device between steps (the row buffer). */
export interface BoundTensor {
  name: string;
  bytes: number;
  /** true: kept on the device between steps (not crossing); false: bound from the host this run */
  resident: boolean;
}

/** A row buffer's storage as bound to the session: the same tensors from step to step until it grows. */
export class BoundRows {
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
}

/**
 * The attention session. run() binds q, the row buffer (resident), idx and a preallocated output
 * over the caller's array, and returns what it bound, tensor by tensor.
 */
export class AttentionSession {
  private session: ort.InferenceSession | undefined;
  private readonly out: ort.Tensor;
  private readonly q: ort.Tensor;

  private constructor(
    session: ort.InferenceSession,
    readonly shape: AttentionGraphShape,
    readonly providers: readonly string[],
    private readonly qData: Float32Array,
    private readonly outData: Float32Array,
  ) {
    this.session = session;
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
      const s = await ort.InferenceSession.create(buildAttentionGraph(shape), sessionOptions(options));
      return new AttentionSession(s, shape, providers, q, out);
    } catch (cause) {
      throw new OnnxError('ONNX_SESSION_FAILED', `offload attention: onnxruntime rejected the graph: ${(cause as Error).message}`, { providers: providers.join(',') }, { cause });
    }
  }

  /** Bytes run() binds from the host for `n` rows per KV head (idx only; q and out stay with the dense graphs). */
  static crossingBytes(kvHeads: number, n: number): number {
    return kvHeads * n * 4;
  }

  /** Attention over rows idx[g·n .. (g+1)·n) of each KV head g; the result lands in `out`. */
  async run(rows: BoundRows, idx: Int32Array, n: number): Promise<BoundTensor[]> {
    const s = this.session;
    if (!s) throw new OnnxError('ONNX_SESSION_FAILED', 'offload attention: session used after release()');
    const kvHeads = this.shape.kvHeads;
    const idxT = new ort.Tensor('int32', idx.subarray(0, kvHeads * n), [kvHeads, n]);
    try {
      await s.run({ q: this.q, k_rows: rows.k, v_rows: rows.v, idx: idxT }, { attn: this.out });
    } catch (cause) {
      throw new OnnxError('ONNX_SESSION_FAILED', `offload attention: run failed: ${(cause as Error).message}`, { rows: rows.rows, n }, { cause });
    }
    return [
      { name: 'q', bytes: this.qData.byteLength, resident: true },
      { name: 'k_rows', bytes: rows.kData.byteLength, resident: true },
      { name: 'v_rows', bytes: rows.vData.byteLength, resident: true },
      { name: 'idx', bytes: (idxT.data as Int32Array).byteLength, resident: false },
      { name: 'attn', bytes: this.outData.byteLength, resident: true },
    ];
  }

  async release(): Promise<void> {
    const s = this.session;
    this.session = undefined;
    if (s) await s.release();
  }
}
