// The Qwen3-MoE family (GGUF `qwen3moe`, Hugging Face Qwen3MoeForCausalLM), as llama.cpp's
// src/models/qwen3moe.cpp computes it: Qwen3's attention in every layer (qwen3.ts: per-head q/k
// RMSNorm, NeoX RoPE, GQA, the file's head size) and, in place of the dense MLP, a mixture of
// experts: softmax over the router's logits, the top expert_used_count experts, their weights
// renormalised to sum 1 (llama.cpp passes norm_w = true for this architecture), each a SwiGLU MLP of
// width expert_feed_forward_length, weighted and summed. No shared expert.
//
// Attention is unchanged, so every row policy runs it (InfiniGen's speculation reads only the next
// layer's attention). The experts run on the native dense stages only: their onnxruntime graphs are
// not built (a graph would hold every expert repacked, the whole file again, and compute all of
// them, or need a routing op onnxruntime's CPU provider lacks), so a model the native stages cannot
// run is refused with the reason.
import { isNativeAvailable } from '../../../../native/index.js';
import { LonghandError } from '../../../common/errors.ts';
import { QWEN3MOE_TENSORS } from '../../model/arch/qwen3moe.ts';
import type { ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { globalAttention, type LayerSpec } from './layer-spec.ts';
import { kernelsRefuse } from './native-stage.ts';
import { createQwen3moeNativeStages, qwen3moeLinearNames } from './qwen3moe-native.ts';

/** Why Qwen3-MoE has no onnxruntime stages (the message of the typed refusal). */
export const QWEN3MOE_ONNX_REFUSAL =
  'Qwen3-MoE runs on the native dense stages only: onnxruntime graphs of its mixture-of-experts layers are not built (each would hold every expert repacked and compute all of them)';

function qwen3moeLayers(hyper: ModelHyperparameters): LayerSpec[] {
  const moe = hyper.moe;
  if (moe === undefined) throw new LonghandError('MODEL_MISSING_METADATA', 'qwen3moe hyperparameters without their experts (expert_count, expert_used_count)');
  const rope = { base: hyper.ropeTheta ?? 1_000_000, dims: hyper.headDim, layout: hyper.ropeLayout ?? 'neox', scaling: hyper.ropeScaling } as const;
  const layer: LayerSpec = {
    attention: { ...globalAttention(hyper, rope), qkNorm: true },
    ffn: { kind: 'moe', experts: moe.experts, topK: moe.expertsUsed, expertSize: moe.expertFfn, gated: true, activation: 'silu', sharedExperts: 0 },
    norm: { kind: 'rms', placement: 'pre', eps: hyper.normEps },
  };
  return Array.from({ length: hyper.layers }, () => layer);
}

export const QWEN3MOE_FAMILY: ModelFamily = {
  architecture: 'qwen3moe',
  name: 'Qwen3-MoE',
  tensors: QWEN3MOE_TENSORS,
  layers: qwen3moeLayers,
  embedding: () => ({ tokenTable: 'token_embd.weight', positions: undefined, scale: 1 }),
  contextLimit: () => undefined,
  policyRefusal: () => undefined,
  onnxStage: (w) => {
    // and why the native stages do not run it here, when they do not (a weight type without kernels, no AVX2, no addon)
    const native = isNativeAvailable() ? kernelsRefuse(w.model, qwen3moeLinearNames(w.model), {}) : 'the native addon is not built';
    throw new LonghandError('MODEL_UNSUPPORTED_ARCHITECTURE', `${w.model.path}: ${QWEN3MOE_ONNX_REFUSAL}${native === undefined ? '' : `, and they cannot run this file: ${native}`}`, {
      architecture: 'qwen3moe',
      ...(native === undefined ? {} : { whyNotNative: native }),
    });
  },
  nativeStages: { kind: 'native', linearNames: qwen3moeLinearNames, create: createQwen3moeNativeStages },
};
