// Gemma-style dense stages in C++ (native-stages.ts says how they run): what gemma-graph.ts builds
// as onnxruntime graphs, over the mapped file's weights (native/src/dense_stage.h with its
// Gemma-style fields: sandwich norms, GeGLU with the tanh GELU, per-head q/k norms, the final
// soft-cap, and q_spec with layer s+1's q norm and RoPE). Built from the LayerSpecs, so a family
// with Gemma's layers passes its specs and reuses it: Gemma 2/3 (gemma.ts), and Gemma 4 (gemma4.ts)
// with Gemma4Extras — each layer's own head dim and KV heads (from its spec), KV-shared layers (no
// k/v), v = k layers, the weightless v norm, layer output scales and per-layer embeddings.
import { availableParallelism } from 'node:os';
import { createDenseStage, type DenseStageConfig, type DenseStageMatrix } from '../../../../native/index.js';
import { LonghandError } from '../../../common/errors.ts';
import type { LoadedModel } from '../../model/types.ts';
import type { ModelWeights } from '../weights.ts';
import { sameRope } from './gemma-graph.ts';
import { ownsKv, ropeFrequencies, type AttentionSpec, type LayerSpec } from './layer-spec.ts';
import { KERNEL_TYPES, NativeStage, type DenseKernelName, type NativeStageOptions, type NativeStages, type StageRunner } from './native-stage.ts';
import { blk, stageName, type StageGraph, type StageInput } from './stage-graph.ts';

/** The matrices of one layer, the bytes its stages stream (owned together). */
const LAYER_MATRICES = ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];

/** The linear weights of a Gemma-style model (every tensor the stages multiply by). */
export function gemmaLinearNames(model: LoadedModel): string[] {
  const names: string[] = [];
  for (let l = 0; l < model.hyper.layers; l++) for (const m of LAYER_MATRICES) names.push(blk(l, m));
  names.push(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight');
  return names;
}

const NO_BYTES = new Uint8Array(0);

/** What Gemma 4's layers add to Gemma's (gemma4.ts's header; its Gemma4Config fields). */
export interface Gemma4Extras {
  /** [layer] false: v is k's projection (no attn_v) */
  readonly valueProjection: readonly boolean[];
  /** every layer ends in blk.ℓ.layer_output_scale */
  readonly outputScale: boolean;
  /** P of the per-layer embeddings (0: none) */
  readonly perLayerInput: number;
}

/** The linear weights of a Gemma 4 model: a KV-shared layer has no attn_k / attn_v, a v = k layer no attn_v; the per-layer embeddings' matrices. */
export function gemma4LinearNames(model: LoadedModel, specs: readonly LayerSpec[], extras: Gemma4Extras): string[] {
  const names: string[] = [];
  for (let l = 0; l < model.hyper.layers; l++) {
    names.push(blk(l, 'attn_q.weight'), blk(l, 'attn_output.weight'), blk(l, 'ffn_gate.weight'), blk(l, 'ffn_up.weight'), blk(l, 'ffn_down.weight'));
    if (ownsKv(specs[l]!)) names.push(blk(l, 'attn_k.weight'), ...(extras.valueProjection[l] ? [blk(l, 'attn_v.weight')] : []));
    if (extras.perLayerInput > 0) names.push(blk(l, 'inp_gate.weight'), blk(l, 'proj.weight'));
  }
  if (extras.perLayerInput > 0) names.push('per_layer_model_proj.weight');
  names.push(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight');
  return names;
}

/**
 * L + 1 native stages of the layers `specs` over `weights`' mapped file, the logits capped at
 * `finalSoftcap` (0: not); `gemma4`: Gemma 4's layers (each layer's widths from its spec).
 */
export function createGemmaNativeStages(weights: ModelWeights, options: NativeStageOptions, specs: readonly LayerSpec[], finalSoftcap: number, gemma4?: Gemma4Extras): NativeStages {
  const model = weights.model;
  const hyper = model.hyper;
  const L = hyper.layers;
  const P = gemma4?.perLayerInput ?? 0;
  const attention = (l: number): AttentionSpec => {
    const a = specs[l]!.attention;
    if (a.kind !== 'attention') throw new LonghandError('MODEL_UNSUPPORTED_ARCHITECTURE', `layer ${l} has no attention: the Gemma stages run attention layers only`, { layer: l });
    return a;
  };
  const activationOf = (l: number): 'silu' | 'gelu_tanh' => {
    const ffn = specs[l]!.ffn;
    if (ffn.kind !== 'dense' || !ffn.gated || (ffn.activation !== 'gelu_tanh' && ffn.activation !== 'silu')) throw new LonghandError('MODEL_UNSUPPORTED_ARCHITECTURE', `layer ${l}: the native stages run gated dense MLPs with SiLU or tanh-GELU`, { layer: l });
    return ffn.activation;
  };
  // the pages of every weight a step streams become the process's own (llama-native.ts says why)
  const loadThreads = Math.max(options.threads, availableParallelism());
  const ownedLayers = new Set<number>();
  const ownLayer = (l: number): void => {
    if (ownedLayers.has(l)) return;
    ownedLayers.add(l);
    model.ownTensors?.([...LAYER_MATRICES, ...(P > 0 ? ['inp_gate.weight', 'proj.weight'] : [])].map((m) => blk(l, m)), loadThreads);
  };
  const matrix = (name: string, layer?: number): DenseStageMatrix => {
    if (layer !== undefined) ownLayer(layer);
    else model.ownTensors?.([name], loadThreads);
    const v = weights.view(name);
    return { data: v.bytes(), type: KERNEL_TYPES[v.dtype]!.id, rows: v.shape[0]!, cols: v.shape[1]! };
  };
  const sessions: StageRunner[] = [];
  const graphs: StageGraph[] = [];
  let graphWeightBytes = 0;
  let kernel: DenseKernelName = 'amx';
  const rank = { scalar: 0, avx2: 1, avx512: 2, amx: 3, auto: 4 } as const;
  try {
    for (let s = 0; s <= L; s++) {
      // the widths of layer s (stage L: layer L − 1's, unused there but for attn's)
      const own = attention(Math.min(s, L - 1));
      const freq = ropeFrequencies(own)!;
      const ffnOf = (l: number): number => (specs[l]!.ffn.kind === 'dense' ? (specs[l]!.ffn as { size: number }).size : hyper.ffnSize);
      const config: DenseStageConfig = {
        stage: s,
        layers: L,
        hidden: hyper.hiddenSize,
        heads: hyper.heads,
        kvHeads: own.kvHeads,
        headDim: own.headDim,
        ...(freq.rotaryDim !== undefined && freq.rotaryDim !== own.headDim ? { rotaryDim: freq.rotaryDim } : {}),
        ffn: s > 0 ? ffnOf(s - 1) : hyper.ffnSize,
        vocab: hyper.vocabSize,
        eps: hyper.normEps,
        ropeLayout: (own.rope?.layout ?? 'neox') === 'interleaved' ? 1 : 0,
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
          attnPostNorm: weights.vector(blk(p, 'post_attention_norm.weight')),
          ffnPostNorm: weights.vector(blk(p, 'post_ffw_norm.weight')),
          activation: activationOf(p),
          attnOutput: matrix(blk(p, 'attn_output.weight'), p),
          ffnGate: matrix(blk(p, 'ffn_gate.weight'), p),
          ffnUp: matrix(blk(p, 'ffn_up.weight'), p),
          ffnDown: matrix(blk(p, 'ffn_down.weight'), p),
        });
        if (attention(p).headDim !== own.headDim) config.attnHeadDim = attention(p).headDim;
        if (gemma4?.outputScale) config.outputScale = weights.vector(blk(p, 'layer_output_scale.weight'))[0]!;
        if (P > 0) {
          inputs.push('ple');
          Object.assign(config, { pleDim: P, pleInpGate: matrix(blk(p, 'inp_gate.weight'), p), pleProj: matrix(blk(p, 'proj.weight'), p), plePostNorm: weights.vector(blk(p, 'post_norm.weight')) });
        }
      } else if (P > 0) {
        inputs.push('ple_tok');
        Object.assign(config, { pleDim: P, pleModelProj: matrix('per_layer_model_proj.weight'), pleProjNorm: weights.vector('per_layer_proj_norm.weight') });
      }
      if (s < L) {
        inputs.push('rope_cos', 'rope_sin');
        const a = attention(s);
        const owns = ownsKv(specs[s]!);
        // Gemma 4: a KV-shared layer projects q only; a v = k layer has no attn_v; v is normed without a weight
        const ownV = gemma4 === undefined || gemma4.valueProjection[s] === true;
        Object.assign(config, {
          q: matrix(blk(s, 'attn_q.weight'), s),
          ...(owns ? { k: matrix(blk(s, 'attn_k.weight'), s) } : { kvShared: true }),
          ...(owns && ownV ? { v: matrix(blk(s, 'attn_v.weight'), s) } : {}),
          ...(owns && !ownV ? { valueFromKey: true } : {}),
          ...(owns && gemma4 ? { vNorm: new Float32Array(a.headDim).fill(1) } : {}),
          ...(a.qkNorm ? { qNorm: weights.vector(blk(s, 'attn_q_norm.weight')), ...(owns ? { kNorm: weights.vector(blk(s, 'attn_k_norm.weight')) } : {}) } : {}),
        });
        if (options.speculates[s] === true && s + 1 < L) {
          const next = attention(s + 1);
          const nextFreq = ropeFrequencies(next)!;
          config.qSpec = matrix(blk(s + 1, 'attn_q.weight'), s + 1);
          if (next.qkNorm) config.qSpecNorm = weights.vector(blk(s + 1, 'attn_q_norm.weight'));
          if (next.headDim !== a.headDim) config.specHeadDim = next.headDim;
          const nextRotary = nextFreq.rotaryDim ?? next.headDim;
          if (nextRotary !== (freq.rotaryDim ?? a.headDim) || next.headDim !== a.headDim) config.specRotaryDim = nextRotary;
          if (!sameRope(ropeFrequencies(a), nextFreq)) inputs.push('spec_rope_cos', 'spec_rope_sin');
        }
      } else {
        inputs.push('rows');
        config.lmHead = matrix(model.tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight');
        if (finalSoftcap > 0) config.finalSoftcap = finalSoftcap;
      }
      const stage = createDenseStage(config);
      const specW = config.qSpec ? hyper.heads * (config.specHeadDim ?? own.headDim) : undefined;
      sessions.push(new NativeStage(stage, s, hyper.heads * own.headDim, own.kvHeads * own.headDim, hyper.hiddenSize, hyper.vocabSize, { ...(specW ? { spec: specW } : {}), ...(P > 0 && s === 0 ? { ple: L * P } : {}) }));
      if (rank[stage.impl] < rank[kernel]) kernel = stage.impl;
      const owned = [config.attnOutput, config.ffnGate, config.ffnUp, config.ffnDown, config.q, config.k, config.v, config.lmHead, config.pleModelProj, config.pleInpGate, config.pleProj];
      const weightBytes = owned.reduce((n, m) => n + (m?.data.byteLength ?? 0), 0);
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
