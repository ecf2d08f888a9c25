// Qwen3.5's dense stages in C++ (native-stages.ts says how they run): what qwen35-graph.ts builds as
// onnxruntime graphs, over the mapped file's weights (native/src/dense_stage.h with its Qwen3.5
// fields). Stage s = post(s−1) fused with pre(s), as every family's:
//
//   pre(s), full attention   q and gate from the gated W_q (qGated: per head its query rows, then its
//                            gate rows), q/k per-head RMSNorm, partial NeoX RoPE, v          → q, k, v, gate
//   pre(s), linear           linQkv, linZ, linBeta (σ), linDecay (softplus(α + dt)·a)      → what the
//                            recurrence reads (linear-attention.ts, native/src/gated_delta_net.h)
//   post(p), full attention  (attn ⊙ σ(gate))·W_o                                      (attnGated)
//   post(p), linear          attn·W_ssm_out                                            (attnCols = Hv·D)
//   both                     residual, RMSNorm by post_attention_norm, SwiGLU MLP, residual
//
// InfiniGen: a stage whose next layer is an attention layer may output q_spec, that layer's query
// (its W_q's query halves, its q norm, its RoPE rows: spec_rope_cos/sin on a linear stage, which has
// no RoPE of its own), from this layer's normed input; as the onnx graphs do.
import { availableParallelism } from 'node:os';
import { createDenseStage, type DenseStageConfig, type DenseStageMatrix } from '../../../../native/index.js';
import type { LoadedModel } from '../../model/types.ts';
import type { ModelWeights } from '../weights.ts';
import { KERNEL_TYPES, NativeStage, type DenseKernelName, type NativeStageOptions, type NativeStages, type StageRunner } from './native-stage.ts';
import { blk, stageName, type StageGraph, type StageInput } from './stage-graph.ts';

/** The matrices of a linear-attention layer and of a full-attention layer (the MLP's are every layer's). */
const LINEAR_MATRICES = ['attn_qkv.weight', 'attn_gate.weight', 'ssm_beta.weight', 'ssm_alpha.weight', 'ssm_out.weight'];
const ATTENTION_MATRICES = ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight'];
const MLP_MATRICES = ['ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];

function linearLayers(model: LoadedModel): readonly boolean[] {
  const lin = model.hyper.linearAttention;
  if (lin === undefined) throw new Error('qwen35 hyperparameters without linearAttention');
  return lin.layers;
}

/** The matrices of layer l (mixer and, unless `mlp` is false, the dense MLP). */
function layerMatrices(linear: boolean, mlp: boolean): string[] {
  return [...(linear ? LINEAR_MATRICES : ATTENTION_MATRICES), ...(mlp ? MLP_MATRICES : [])];
}

/** The linear weights of a Qwen3.5 model (every tensor the stages multiply by); `mlp` false: without the dense MLP's (a mixture-of-experts variant adds its own). */
export function qwen35LinearNames(model: LoadedModel, mlp = true): string[] {
  const layers = linearLayers(model);
  const names: string[] = [];
  for (let l = 0; l < model.hyper.layers; l++) for (const m of layerMatrices(layers[l]!, mlp)) names.push(blk(l, m));
  names.push(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight');
  return names;
}

const NO_BYTES = new Uint8Array(0);

/** The MLP of layer p as a variant other than the dense SwiGLU one gives it to stage p + 1 (in place of ffnGate / ffnUp / ffnDown). */
export type Qwen35StageMlp = (p: number) => Partial<DenseStageConfig>;

/** L + 1 native Qwen3.5 stages over `weights`' mapped file. The file must stay open while they live (runs check). */
export function createQwen35NativeStages(weights: ModelWeights, options: NativeStageOptions, mlp?: Qwen35StageMlp): NativeStages {
  const model = weights.model;
  const hyper = model.hyper;
  const L = hyper.layers;
  const lin = hyper.linearAttention!;
  const linear = linearLayers(model);
  // the pages of every weight a step streams become the process's own (llama-native.ts says why)
  const loadThreads = Math.max(options.threads, availableParallelism());
  const ownedLayers = new Set<number>();
  const ownLayer = (l: number): void => {
    if (ownedLayers.has(l)) return;
    ownedLayers.add(l);
    model.ownTensors?.(layerMatrices(linear[l]!, mlp === undefined).map((m) => blk(l, m)), loadThreads);
  };
  const matrix = (name: string, layer?: number): DenseStageMatrix => {
    if (layer !== undefined) ownLayer(layer);
    else model.ownTensors?.([name], loadThreads);
    const v = weights.view(name);
    return { data: v.bytes(), type: KERNEL_TYPES[v.dtype]!.id, rows: v.shape[0]!, cols: v.shape[1]! };
  };
  const qw = hyper.heads * hyper.headDim;
  const valueDim = lin.valueHeads * lin.headDim;
  const sessions: StageRunner[] = [];
  const graphs: StageGraph[] = [];
  let graphWeightBytes = 0;
  let kernel: DenseKernelName = 'amx';
  const rank = { scalar: 0, avx2: 1, avx512: 2, amx: 3, auto: 4 } as const;
  try {
    for (let s = 0; s <= L; s++) {
      const config: DenseStageConfig = {
        stage: s,
        layers: L,
        hidden: hyper.hiddenSize,
        heads: hyper.heads,
        kvHeads: hyper.kvHeads,
        headDim: hyper.headDim,
        rotaryDim: hyper.ropeDims ?? hyper.headDim,
        ffn: hyper.ffnSize,
        vocab: hyper.vocabSize,
        eps: hyper.normEps,
        ropeLayout: (hyper.ropeLayout ?? 'neox') === 'interleaved' ? 1 : 0,
        threads: options.threads,
        impl: options.impl ?? 'auto',
        norm: weights.vector(s === L ? 'output_norm.weight' : blk(s, 'attn_norm.weight')),
        qGated: true,
      };
      const inputs: StageInput[] = ['h'];
      if (s > 0) {
        const p = s - 1;
        inputs.push('attn');
        if (!linear[p]) inputs.push('gate');
        Object.assign(config, {
          ffnNorm: weights.vector(blk(p, 'post_attention_norm.weight')),
          ...(linear[p] ? { attnOutput: matrix(blk(p, 'ssm_out.weight'), p), attnCols: valueDim } : { attnOutput: matrix(blk(p, 'attn_output.weight'), p), attnGated: true }),
          ...(mlp ? mlp(p) : { ffnGate: matrix(blk(p, 'ffn_gate.weight'), p), ffnUp: matrix(blk(p, 'ffn_up.weight'), p), ffnDown: matrix(blk(p, 'ffn_down.weight'), p) }),
        });
      }
      const speculates = options.speculates[s] === true && s + 1 < L && !linear[s + 1]!;
      if (s < L && linear[s]) {
        if (speculates) inputs.push('spec_rope_cos', 'spec_rope_sin');
        Object.assign(config, {
          linKeyHeads: lin.keyHeads,
          linValueHeads: lin.valueHeads,
          linHeadDim: lin.headDim,
          linQkv: matrix(blk(s, 'attn_qkv.weight'), s),
          linZ: matrix(blk(s, 'attn_gate.weight'), s),
          linBeta: matrix(blk(s, 'ssm_beta.weight'), s),
          linAlpha: matrix(blk(s, 'ssm_alpha.weight'), s),
          linDt: weights.vector(blk(s, 'ssm_dt.bias')),
          linA: weights.vector(blk(s, 'ssm_a')),
        });
      } else if (s < L) {
        inputs.push('rope_cos', 'rope_sin');
        Object.assign(config, {
          q: matrix(blk(s, 'attn_q.weight'), s),
          k: matrix(blk(s, 'attn_k.weight'), s),
          v: matrix(blk(s, 'attn_v.weight'), s),
          qNorm: weights.vector(blk(s, 'attn_q_norm.weight')),
          kNorm: weights.vector(blk(s, 'attn_k_norm.weight')),
        });
      } else {
        inputs.push('rows');
        config.lmHead = matrix(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight');
      }
      if (speculates) Object.assign(config, { qSpec: matrix(blk(s + 1, 'attn_q.weight'), s + 1), qSpecNorm: weights.vector(blk(s + 1, 'attn_q_norm.weight')) });
      const stage = createDenseStage(config);
      sessions.push(new NativeStage(stage, s, qw, hyper.kvHeads * hyper.headDim, hyper.hiddenSize, hyper.vocabSize));
      if (rank[stage.impl] < rank[kernel]) kernel = stage.impl;
      const own = [
        config.attnOutput, config.ffnGate, config.ffnUp, config.ffnDown, config.q, config.k, config.v, config.lmHead,
        config.linQkv, config.linZ, config.linBeta, config.linAlpha, config.router, config.gateExps, config.upExps, config.downExps,
        config.shexpGate, config.shexpUp, config.shexpDown,
      ].flat();
      const weightBytes = own.reduce((n, m) => n + (m?.data.byteLength ?? 0), 0);
      graphs.push({ name: `native.${stageName(s, L)}`, model: NO_BYTES, weightBytes, inputs });
      graphWeightBytes += weightBytes;
      options.onProgress?.({ done: s + 1, total: L + 1 });
    }
  } catch (error) {
    for (const x of sessions) void x.release();
    throw error;
  }
  return { sessions, graphs, graphWeightBytes, kernel };
}
