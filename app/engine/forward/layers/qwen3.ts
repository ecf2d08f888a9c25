// The Qwen3 dense family (GGUF `qwen3`, Hugging Face Qwen3ForCausalLM), as llama.cpp's
// src/models/qwen3.cpp computes it: every layer the same; RMSNorm before attention and before the
// MLP; q, k, v projections without bias; each head of q and of k RMSNormed on its own (its own
// [headDim] weights, the model's ε) and then rotated by NeoX RoPE; global attention (GQA) at scale
// 1/√headDim; a SwiGLU MLP. headDim is the file's (key_length / head_dim), independent of
// hidden / heads. The small sizes tie the LM head to the token embedding. Every row policy runs it
// (InfiniGen's speculative query carries the next layer's q norm); native stages where the weight
// types have kernels, onnxruntime's otherwise.
import { QWEN3_TENSORS } from '../../model/arch/qwen3.ts';
import type { ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { globalAttention, type LayerSpec } from './layer-spec.ts';
import { createQwen3NativeStages, qwen3LinearNames } from './qwen3-native.ts';
import { qwen3StageGraph } from './qwen3-graph.ts';

function qwen3Layers(hyper: ModelHyperparameters): LayerSpec[] {
  const rope = { base: hyper.ropeTheta ?? 1_000_000, dims: hyper.headDim, layout: hyper.ropeLayout ?? 'neox', scaling: hyper.ropeScaling } as const;
  // one object for every layer: they are the same, and shared code may compare them cheaply
  const layer: LayerSpec = {
    attention: { ...globalAttention(hyper, rope), qkNorm: true },
    ffn: { kind: 'dense', size: hyper.ffnSize, gated: true, activation: 'silu' },
    norm: { kind: 'rms', placement: 'pre', eps: hyper.normEps },
  };
  return Array.from({ length: hyper.layers }, () => layer);
}

export const QWEN3_FAMILY: ModelFamily = {
  architecture: 'qwen3',
  name: 'Qwen3',
  tensors: QWEN3_TENSORS,
  layers: qwen3Layers,
  embedding: () => ({ tokenTable: 'token_embd.weight', positions: undefined, scale: 1 }),
  contextLimit: () => undefined,
  policyRefusal: () => undefined,
  onnxStage: qwen3StageGraph,
  nativeStages: { kind: 'native', linearNames: qwen3LinearNames, create: createQwen3NativeStages },
};
