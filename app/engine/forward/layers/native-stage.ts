// What every family's native dense stages share (native-stages.ts says what they are): the
// interface a stage runs behind (the same as an onnxruntime session's), the weight types with
// kernels and the check that a model's linear weights all have them, and NativeStage, which puts a
// native DenseStage behind that interface. A family's own stages (llama-native.ts) say which
// tensors each stage reads.
import { denseKernel, type DenseStage } from '../../../../native/index.js';
import type { LoadProgress } from '../../../common/protocol.ts';
import type { LoadedModel, TensorDType } from '../../model/types.ts';
import type { TensorData } from '../../onnx/graph-builder.ts';
import type { StageValue } from '../../onnx/session.ts';
import type { ModelWeights } from '../weights.ts';
import type { StageGraph } from './stage-graph.ts';

/** What the runner needs of a stage: an onnxruntime session (EngineSession) or a native stage. */
export interface StageRunner {
  /** a StageValue on the device only where the stage is an onnxruntime session that keeps it there (EngineSessionOptions.keepOnDevice) */
  run(feeds: Readonly<Record<string, StageValue>>): Promise<Record<string, StageValue>>;
  release(): Promise<void>;
  /**
   * A native stage with a mixture-of-experts MLP: what its latest run read of expert weights (the
   * router and each routed expert's rows once) and which experts each token ran [T, k]; undefined
   * for every other stage.
   */
  lastExperts?(): { bytes: number; routed: Uint32Array } | undefined;
  /** Drops lastExperts' figures: a forward call that does not run this stage (a prompt chunk needing no logits skips the last layer's MLP) then reports none rather than an older call's. */
  forgetExperts?(): void;
}

/** GGML type ids of the weight types with dense kernels (native/src/quant_dot.h), and their block sizes. */
export const KERNEL_TYPES: Partial<Record<TensorDType, { id: number; block: number }>> = {
  F32: { id: 0, block: 1 },
  F16: { id: 1, block: 1 },
  Q4_0: { id: 2, block: 32 },
  Q4_1: { id: 3, block: 32 },
  Q5_0: { id: 6, block: 32 },
  Q5_1: { id: 7, block: 32 },
  Q8_0: { id: 8, block: 32 },
  Q4_K: { id: 12, block: 256 },
  Q5_K: { id: 13, block: 256 },
  Q6_K: { id: 14, block: 256 },
  MXFP4: { id: 39, block: 32 },
};

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

/** A family's native stage builder: L + 1 stages over `weights`' mapped file. */
export type NativeStageBuilder = (weights: ModelWeights, options: NativeStageOptions) => NativeStages;

/** Why the kernels cannot multiply by the tensors `names` (undefined: they can); options as nativeDenseUnsupported's. */
export function kernelsRefuse(model: LoadedModel, names: readonly string[], options: { accuracyLevel?: number }): string | undefined {
  for (const name of names) {
    const v = model.tensors.get(name);
    if (v === undefined) return `tensor ${name} is missing`;
    const t = KERNEL_TYPES[v.dtype];
    const kernel = t === undefined ? null : denseKernel(t.id);
    if (t === undefined || kernel === null) return `${name} is ${v.dtype}, which has no native dense kernels`;
    if (kernel === 'scalar') return `${name} is ${v.dtype}, which has only the scalar reference kernel on this CPU (no AVX2)`;
    if (options.accuracyLevel === 0 && t.block > 1) return `accuracy level 0 (fp32 activations) was asked for, and ${name} is ${v.dtype}: the native kernels quantize activations to int8`;
    // a 3-D tensor (a mixture of experts' stacked experts) is rows of its last dimension too
    if (v.shape.length < 2 || v.shape.length > 3 || v.shape.at(-1)! % t.block !== 0) return `${name} has shape [${v.shape.join(', ')}]: its rows are not whole ${v.dtype} blocks`;
  }
  return undefined;
}

const tensor = (dims: number[], data: Float32Array): TensorData => ({ elemType: 'float32', dims, data });

/** One native stage behind the session interface: feeds by graph input name, outputs by graph output name. */
export class NativeStage implements StageRunner {
  constructor(
    private readonly stage: DenseStage,
    private readonly index: number,
    private readonly qw: number,
    private readonly kvw: number,
    private readonly d: number,
    private readonly vocab: number,
    /** q_spec's width (layer stage + 1's heads·headDim) and stage 0's per-layer inputs' (layers·P), where they differ / exist */
    private readonly widths: { readonly spec?: number; readonly ple?: number } = {},
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
      ...(feeds.spec_rope_cos ? { specRopeCos: feeds.spec_rope_cos.data as Float32Array, specRopeSin: feeds.spec_rope_sin!.data as Float32Array } : {}),
      ...(rows ? { rows } : {}),
      ...(feeds.ple_tok ? { pleTok: feeds.ple_tok.data as Float32Array } : {}),
      ...(feeds.ple ? { ple: feeds.ple.data as Float32Array } : {}),
      ...(feeds.gate ? { gate: feeds.gate.data as Float32Array } : {}),
    });
    if (out.expertBytes !== undefined) this.experts = { bytes: out.expertBytes, routed: out.routed! };
    const result: Record<string, TensorData> = {};
    if (out.logits) result.logits = tensor([1, rows!.length, this.vocab], out.logits);
    if (out.q) result.q = tensor([1, T, this.qw], out.q);
    if (out.k) result.k = tensor([1, T, this.kvw], out.k);
    if (out.v) result.v = tensor([1, T, this.kvw], out.v);
    if (out.qSpec) result.q_spec = tensor([1, T, this.widths.spec ?? this.qw], out.qSpec);
    if (out.ple) result.ple = tensor([1, T, this.widths.ple!], out.ple);
    if (out.hNext) result.h_next = tensor([1, T, this.d], out.hNext);
    // Qwen3.5: a gated attention's gate, a linear-attention layer's recurrence inputs ([1, T, width] each)
    const perToken = (a: Float32Array): TensorData => tensor([1, T, a.length / T], a);
    if (out.gate) result.gate = perToken(out.gate);
    if (out.linQkv) result.lin_qkv = perToken(out.linQkv);
    if (out.linZ) result.lin_z = perToken(out.linZ);
    if (out.linBeta) result.lin_beta = perToken(out.linBeta);
    if (out.linDecay) result.lin_decay = perToken(out.linDecay);
    return result;
  }

  async release(): Promise<void> {
    this.stage.free();
  }

  /** The latest run's expert figures (a mixture-of-experts stage), else undefined. */
  private experts: { bytes: number; routed: Uint32Array } | undefined;

  lastExperts(): { bytes: number; routed: Uint32Array } | undefined {
    return this.experts;
  }

  forgetExperts(): void {
    this.experts = undefined;
  }

  toString(): string {
    return `native dense stage ${this.index}`;
  }
}
