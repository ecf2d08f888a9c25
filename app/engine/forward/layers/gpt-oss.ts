// The gpt-oss family (GGUF `gpt-oss`, llama.cpp's LLM_ARCH_OPENAI_MOE), as src/models/openai-moe.cpp
// computes it. Per layer ℓ (model/arch/gpt-oss.ts has the tensors):
//
//   x = rmsnorm(h)·attn_norm
//   q = x·W_qᵀ + b_q, k = x·W_kᵀ + b_k, v = x·W_vᵀ + b_v        heads × headDim (the file's key_length)
//   q, k ← NeoX RoPE with YaRN (rope.scaling: gpt-oss.ts yarnScaling), base per layer kind
//   attn = softmax over [q·kⱼ/√headDim ..., sink_h] of v (the sink joins the denominator, no value row)
//          sliding layers (ℓ % period < period − 1: even layers at the default period 2) see the
//          last `sliding_window` positions (128), the others every position
//   h ← h + attn·W_oᵀ + b_o
//   x = rmsnorm(h)·post_attention_norm
//   logits = x·W_routerᵀ + b_router; E = the 4 largest; w = softmax(logits[E])   (SOFTMAX_WEIGHT)
//   h ← h + Σ_i w_i·(swiglu_oai(x·W_gate[e]ᵀ + b_gate[e], x·W_up[e]ᵀ + b_up[e])·W_down[e]ᵀ + b_down[e])
//   logits = rmsnorm(h_L)·output_norm · W_outᵀ
//
// Attention runs through the shared placements and row policies with the sink logits in every
// kernel call (attention-args.ts); the experts on the native stages only (qwen3moe.ts says why
// onnxruntime's are not built), so a model the native stages cannot run is refused with the reason.
import { isNativeAvailable } from '../../../../native/index.js';
import { LonghandError } from '../../../common/errors.ts';
import { slidingPattern } from '../../model/gguf/gemma-keys.ts';
import { GPT_OSS_TENSORS } from '../../model/arch/gpt-oss.ts';
import type { LoadedModel, ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { createGptOssNativeStages, gptOssLinearNames } from './gpt-oss-native.ts';
import { defaultScale, type LayerSpec } from './layer-spec.ts';
import { kernelsRefuse } from './native-stage.ts';
import { blk } from './stage-graph.ts';

/** Why gpt-oss has no onnxruntime stages (the message of the typed refusal). */
export const GPT_OSS_ONNX_REFUSAL =
  'gpt-oss runs on the native dense stages only: onnxruntime graphs of its mixture-of-experts layers are not built (each would hold every expert repacked and compute all of them)';

function gptOssLayers(hyper: ModelHyperparameters): LayerSpec[] {
  const moe = hyper.moe;
  const g = hyper.gptOss;
  if (moe === undefined || g === undefined) throw new LonghandError('MODEL_MISSING_METADATA', 'gpt-oss hyperparameters without their experts or sliding window');
  const sliding = slidingPattern(hyper.layers, g.swaPeriod);
  return sliding.map((slides) => ({
    attention: {
      kind: 'attention',
      heads: hyper.heads,
      kvHeads: hyper.kvHeads,
      headDim: hyper.headDim,
      scale: defaultScale(hyper.headDim), // llama.cpp: 1.0f/sqrtf(n_rot), the kernels' own default
      window: slides ? g.slidingWindow : undefined,
      sinks: true,
      rope: { base: slides ? g.swaRopeTheta : (hyper.ropeTheta ?? 10000), dims: hyper.headDim, layout: 'neox', scaling: hyper.ropeScaling },
      qkNorm: false,
      softcap: 0,
    },
    ffn: { kind: 'moe', experts: moe.experts, topK: moe.expertsUsed, expertSize: moe.expertFfn, gated: true, activation: 'swiglu_oai', sharedExperts: 0, gating: 'softmax_weight' },
    norm: { kind: 'rms', placement: 'pre', eps: hyper.normEps },
  }));
}

/** Layer ℓ's sink logits [heads] as float32 (the converter writes them F32). */
function gptOssSinks(model: LoadedModel, layer: number): Float32Array {
  const name = blk(layer, 'attn_sinks.weight');
  const view = model.tensors.get(name);
  if (view === undefined) throw new LonghandError('MODEL_MISSING_TENSOR', `${model.path}: tensor ${name} is missing`, { tensor: name });
  const sinks = view.toFloat32();
  if (sinks.length !== model.hyper.heads || !sinks.every(Number.isFinite)) {
    throw new LonghandError('MODEL_BAD_VALUE', `${model.path}: ${name} must hold ${model.hyper.heads} finite values`, { tensor: name });
  }
  return Float32Array.from(sinks);
}

export const GPT_OSS_FAMILY: ModelFamily = {
  architecture: 'gpt-oss',
  name: 'gpt-oss',
  tensors: GPT_OSS_TENSORS,
  layers: gptOssLayers,
  embedding: () => ({ tokenTable: 'token_embd.weight', positions: undefined, scale: 1 }),
  contextLimit: () => undefined,
  policyRefusal: () => undefined,
  onnxStage: (w) => {
    const native = isNativeAvailable() ? kernelsRefuse(w.model, gptOssLinearNames(w.model), {}) : 'the native addon is not built';
    throw new LonghandError('MODEL_UNSUPPORTED_ARCHITECTURE', `${w.model.path}: ${GPT_OSS_ONNX_REFUSAL}${native === undefined ? '' : `, and they cannot run this file: ${native}`}`, {
      architecture: 'gpt-oss',
      ...(native === undefined ? {} : { whyNotNative: native }),
    });
  },
  nativeStages: { kind: 'native', linearNames: gptOssLinearNames, create: createGptOssNativeStages },
  attentionSinks: gptOssSinks,
};
