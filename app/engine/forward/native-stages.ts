// The dense stages in C++ over the GGUF weights read in place from the mapped file
// (native/src/dense_stage.h), instead of onnxruntime graphs (graphs.ts, stage-sessions.ts):
//
//   per stage s:  the tensors graphs.ts llamaStage would read ──► createDenseStage({ views of the
//                 mapped bytes, fp32 norm vectors and biases }) ──► run(feeds) as a session would
//
// Nothing is repacked, so a load takes as long as building L + 1 small objects and giving the
// process its own copy of each weight's pages (model.ownTensors: read from the file into huge pages,
// the bytes and addresses unchanged), the process holds each weight once, and every type
// with kernels here (F32, F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K: the files users download) runs with
// int8 activations like llama.cpp's. Chosen for llama-family models on the CPU provider when every
// weight's type has kernels (nativeDenseUnsupported); OPT, other types, other providers and
// `dense: 'onnx'` keep onnxruntime. The runner sees the same interface (StageRunner) either way.
import { availableParallelism } from 'node:os';
import { createDenseStage, denseKernel, isNativeAvailable, type DenseStage, type DenseStageMatrix } from '../../../native/index.js';
import type { LoadProgress } from '../../common/protocol.ts';
import type { LoadedModel, TensorDType } from '../model/types.ts';
import type { TensorData } from '../onnx/graph-builder.ts';
import type { StageGraph, StageInput } from './graphs.ts';
import type { ModelWeights } from './weights.ts';

/** What the runner needs of a stage: an onnxruntime session (EngineSession) or a native stage. */
export interface StageRunner {
  run(feeds: Readonly<Record<string, TensorData>>): Promise<Record<string, TensorData>>;
  release(): Promise<void>;
}

/** GGML type ids of the weight types with dense kernels (native/src/quant_dot.h), and their block sizes. */
const KERNEL_TYPES: Partial<Record<TensorDType, { id: number; block: number }>> = {
  F32: { id: 0, block: 1 },
  F16: { id: 1, block: 1 },
  Q4_0: { id: 2, block: 32 },
  Q8_0: { id: 8, block: 32 },
  Q4_K: { id: 12, block: 256 },
  Q5_K: { id: 13, block: 256 },
  Q6_K: { id: 14, block: 256 },
};

const blk = (l: number, what: string): string => `blk.${l}.${what}`;

/** The matrices of one layer, the bytes its stages stream (owned together). */
const LAYER_MATRICES = ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];

/** The linear weights of a llama-family model (every tensor the stages multiply by). */
function linearNames(model: LoadedModel): string[] {
  const names: string[] = [];
  for (let l = 0; l < model.hyper.layers; l++) for (const m of LAYER_MATRICES) names.push(blk(l, m));
  names.push(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight');
  return names;
}

/**
 * Why the native dense stages cannot run this model (undefined: they can): not a llama-family
 * model, no addon, a weight whose type has no kernels, or only the scalar reference kernel on this
 * CPU (no AVX2: onnxruntime's MLAS is faster there), or accuracy level 0 asked for a quantized
 * model (fp32 activations: only onnxruntime's MatMulNBits computes that; the native kernels
 * quantize activations to int8 as llama.cpp does). The message names the tensor.
 */
export function nativeDenseUnsupported(model: LoadedModel, options: { accuracyLevel?: number } = {}): string | undefined {
  if (model.hyper.architecture !== 'llama') return `the ${model.hyper.architecture} architecture has no native dense stages`;
  if (!isNativeAvailable()) return 'the native addon is not built';
  for (const name of linearNames(model)) {
    const v = model.tensors.get(name);
    if (v === undefined) return `tensor ${name} is missing`;
    const t = KERNEL_TYPES[v.dtype];
    const kernel = t === undefined ? null : denseKernel(t.id);
    if (t === undefined || kernel === null) return `${name} is ${v.dtype}, which has no native dense kernels`;
    if (kernel === 'scalar') return `${name} is ${v.dtype}, which has only the scalar reference kernel on this CPU (no AVX2)`;
    if (options.accuracyLevel === 0 && t.block > 1) return `accuracy level 0 (fp32 activations) was asked for, and ${name} is ${v.dtype}: the native kernels quantize activations to int8`;
    if (v.shape.length !== 2 || v.shape[1]! % t.block !== 0) return `${name} has shape [${v.shape.join(', ')}]: its rows are not whole ${v.dtype} blocks`;
  }
  return undefined;
}

/** The kernels the stages run ('amx', 'avx512', 'avx2', 'scalar'): the least of their matrices'. */
export type DenseKernelName = DenseStage['impl'];

export interface NativeStages {
  sessions: StageRunner[];
  /** the inputs each stage reads and its weight bytes (model: empty, there is no graph) */
  graphs: StageGraph[];
  graphWeightBytes: number;
  kernel: DenseKernelName;
}

export interface NativeStageOptions {
  threads: number;
  /** per stage: does it output the next layer's speculative query (InfiniGen) */
  speculates: readonly boolean[];
  onProgress: ((progress: LoadProgress) => void) | undefined;
  /** the kernels to run (default 'auto': the best the CPU has per type; tests compare them) */
  impl?: 'auto' | 'scalar' | 'avx2' | 'avx512' | 'amx';
}

const NO_BYTES = new Uint8Array(0);


/** L + 1 native stages over `weights`' mapped file. The file must stay open while they live (runs check). */
export function createNativeStages(weights: ModelWeights, options: NativeStageOptions): NativeStages {
  const model = weights.model;
  const hyper = model.hyper;
  const L = hyper.layers;
  // Every step streams these bytes: make them the process's own pages on huge pages, not the page
  // cache's (LoadedModel.ownTensors says why); a layer's matrices at once, so the pages between
  // them are huge too. ~1 GB/s per thread, the load's only real work, so it runs on every core the
  // process may use, whatever the decode's thread count: on this project's VMs a fresh 2 MiB page
  // costs the host ~5 ms on first touch (2.5-2.9 s per GiB on one thread; 4 KiB pages 0.4), and
  // two threads fault them in faster.
  const loadThreads = Math.max(options.threads, availableParallelism());
  const ownedLayers = new Set<number>();  // a speculating stage reads layer s+1's W_q before stage s+1 does
  const ownLayer = (l: number): void => {
    if (ownedLayers.has(l)) return;
    ownedLayers.add(l);
    model.ownTensors?.(LAYER_MATRICES.map((m) => blk(l, m)), loadThreads);
  };
  /** A weight matrix's view; `layer`: the layer it belongs to (owned as a whole), else owned alone (the LM head). */
  const matrix = (name: string, biasName: string | undefined, layer?: number): DenseStageMatrix => {
    if (layer !== undefined) ownLayer(layer);
    else model.ownTensors?.([name], loadThreads);
    const v = weights.view(name);
    const t = KERNEL_TYPES[v.dtype]!;
    const bias = biasName === undefined ? undefined : weights.optionalVector(biasName);
    return { data: v.bytes(), type: t.id, rows: v.shape[0]!, cols: v.shape[1]!, ...(bias ? { bias } : {}) };
  };
  const sessions: StageRunner[] = [];
  const graphs: StageGraph[] = [];
  let graphWeightBytes = 0;
  let kernel: DenseKernelName = 'amx';
  const rank = { scalar: 0, avx2: 1, avx512: 2, amx: 3, auto: 4 } as const;
  try {
    for (let s = 0; s <= L; s++) {
      const config: Parameters<typeof createDenseStage>[0] = {
        stage: s,
        layers: L,
        hidden: hyper.hiddenSize,
        heads: hyper.heads,
        kvHeads: hyper.kvHeads,
        headDim: hyper.headDim,
        ffn: hyper.ffnSize,
        vocab: hyper.vocabSize,
        eps: hyper.normEps,
        ropeLayout: (hyper.ropeLayout ?? 'neox') === 'interleaved' ? 1 : 0,
        threads: options.threads,
        impl: options.impl ?? 'auto',
        norm: weights.vector(s === L ? 'output_norm.weight' : blk(s, 'attn_norm.weight')),
      };
      const inputs: StageInput[] = ['h'];
      if (s > 0) {
        const p = s - 1;
        inputs.push('attn');
        Object.assign(config, {
          ffnNorm: weights.vector(blk(p, 'ffn_norm.weight')),
          attnOutput: matrix(blk(p, 'attn_output.weight'), blk(p, 'attn_output.bias'), p),
          ffnGate: matrix(blk(p, 'ffn_gate.weight'), undefined, p),
          ffnUp: matrix(blk(p, 'ffn_up.weight'), undefined, p),
          ffnDown: matrix(blk(p, 'ffn_down.weight'), undefined, p),
        });
      }
      if (s < L) {
        inputs.push('rope_cos', 'rope_sin');
        Object.assign(config, {
          q: matrix(blk(s, 'attn_q.weight'), blk(s, 'attn_q.bias'), s),
          k: matrix(blk(s, 'attn_k.weight'), blk(s, 'attn_k.bias'), s),
          v: matrix(blk(s, 'attn_v.weight'), blk(s, 'attn_v.bias'), s),
          ...(options.speculates[s] === true && s + 1 < L ? { qSpec: matrix(blk(s + 1, 'attn_q.weight'), blk(s + 1, 'attn_q.bias'), s + 1) } : {}),
        });
      } else {
        inputs.push('rows');
        config.lmHead = matrix(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight', undefined);
      }
      const stage = createDenseStage(config);
      sessions.push(new NativeStage(stage, s, hyper.heads * hyper.headDim, hyper.kvHeads * hyper.headDim, hyper.hiddenSize, hyper.vocabSize));
      if (rank[stage.impl] < rank[kernel]) kernel = stage.impl;
      // the weights this stage reads (a speculating stage reads layer s+1's W_q twice: once here)
      const own = [config.attnOutput, config.ffnGate, config.ffnUp, config.ffnDown, config.q, config.k, config.v, config.lmHead];
      const weightBytes = own.reduce((n, m) => n + (m?.data.byteLength ?? 0), 0);
      graphs.push({ name: s === 0 ? 'native.stage0.pre0' : s === L ? `native.stage${s}.post${s - 1}.head` : `native.stage${s}.post${s - 1}.pre${s}`, model: NO_BYTES, weightBytes, inputs });
      graphWeightBytes += weightBytes;
      options.onProgress?.({ done: s + 1, total: L + 1 });
    }
  } catch (error) {
    for (const x of sessions) void x.release();
    throw error;
  }
  return { sessions, graphs, graphWeightBytes, kernel };
}

const tensor = (dims: number[], data: Float32Array): TensorData => ({ elemType: 'float32', dims, data });

/** One native stage behind the session interface: feeds by graph input name, outputs by graph output name. */
class NativeStage implements StageRunner {
  constructor(
    private readonly stage: DenseStage,
    private readonly index: number,
    private readonly qw: number,
    private readonly kvw: number,
    private readonly d: number,
    private readonly vocab: number,
  ) {}

  async run(feeds: Readonly<Record<string, TensorData>>): Promise<Record<string, TensorData>> {
    const h = feeds.h!;
    const T = h.dims[1]!;
    const rows = feeds.rows === undefined ? undefined : Uint32Array.from(feeds.rows.data as BigInt64Array, (r) => Number(r));
    const out = this.stage.run({
      tokens: T,
      h: h.data as Float32Array,
      ...(feeds.attn ? { attn: feeds.attn.data as Float32Array } : {}),
      ...(feeds.rope_cos ? { ropeCos: feeds.rope_cos.data as Float32Array, ropeSin: feeds.rope_sin!.data as Float32Array } : {}),
      ...(rows ? { rows } : {}),
    });
    const result: Record<string, TensorData> = {};
    if (out.logits) result.logits = tensor([1, rows!.length, this.vocab], out.logits);
    if (out.q) result.q = tensor([1, T, this.qw], out.q);
    if (out.k) result.k = tensor([1, T, this.kvw], out.k);
    if (out.v) result.v = tensor([1, T, this.kvw], out.v);
    if (out.qSpec) result.q_spec = tensor([1, T, this.qw], out.qSpec);
    if (out.hNext) result.h_next = tensor([1, T, this.d], out.hNext);
    return result;
  }

  async release(): Promise<void> {
    this.stage.free();
  }

  toString(): string {
    return `native dense stage ${this.index}`;
  }
}
