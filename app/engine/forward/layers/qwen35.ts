// The Qwen3.5 dense family (GGUF `qwen35`), as llama.cpp's src/models/qwen35.cpp computes it: a
// hybrid of linear-attention layers (Gated DeltaNet, LayerSpec kind 'linear': a recurrent state per
// sequence, no KV rows; forward/linear-attention.ts) and gated full-attention layers (every
// full_attention_interval-th layer: per-head q/k RMSNorm, partial NeoX RoPE, the output multiplied by
// σ(gate) from the query projection's second half per head; qwen35-graph.ts). Every layer: RMSNorm
// before the mixer and before the SwiGLU MLP (post_attention_norm), residual adds after each.
//
// Only the attention layers keep KV rows, so only they have row policies: every policy runs and
// selects on the attention layers (the step loop never asks a policy about a linear layer; the pool
// and InfiniGen's shape see a linear layer as 0 KV heads). InfiniGen's speculative query for an
// attention layer comes from the stage of the linear layer before it (its normed input through the
// attention layer's query half, q norm and RoPE, qwen35-graph.ts), as the paper's rule says: from
// the input of the layer before it. The dense stages run in C++ (qwen35-native.ts; the recurrence
// then native/src/gated_delta_net.h) wherever the kernels cover the weights, else onnxruntime's.
import { QWEN35_TENSORS } from '../../model/arch/qwen35.ts';
import type { ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { globalAttention, type FfnSpec, type LayerSpec } from './layer-spec.ts';
import { qwen35StageGraph } from './qwen35-graph.ts';
import { createQwen35NativeStages, qwen35LinearNames } from './qwen35-native.ts';

/** Qwen3.5's layers; `ffn`: every layer's feed-forward when it is not the dense SwiGLU one (Qwen3.5-MoE's experts). */
export function qwen35Layers(hyper: ModelHyperparameters, ffn: FfnSpec = { kind: 'dense', size: hyper.ffnSize, gated: true, activation: 'silu' }): LayerSpec[] {
  const lin = hyper.linearAttention;
  if (lin === undefined) throw new Error('qwen35 hyperparameters without linearAttention');
  const rope = { base: hyper.ropeTheta ?? 10_000_000, dims: hyper.ropeDims ?? hyper.headDim, layout: hyper.ropeLayout ?? 'neox', scaling: hyper.ropeScaling } as const;
  const norm = { kind: 'rms', placement: 'pre', eps: hyper.normEps } as const;
  // one object per kind: the layers of a kind are the same, and shared code may compare them cheaply
  const full: LayerSpec = { attention: { ...globalAttention(hyper, rope), qkNorm: true }, ffn, norm };
  const linear: LayerSpec = {
    attention: { kind: 'linear', keyHeads: lin.keyHeads, valueHeads: lin.valueHeads, headDim: lin.headDim, convKernel: lin.convKernel, eps: hyper.normEps },
    ffn,
    norm,
  };
  return lin.layers.map((isLinear) => (isLinear ? linear : full));
}

export const QWEN35_FAMILY: ModelFamily = {
  architecture: 'qwen35',
  name: 'Qwen3.5',
  tensors: QWEN35_TENSORS,
  layers: (hyper) => qwen35Layers(hyper),
  embedding: () => ({ tokenTable: 'token_embd.weight', positions: undefined, scale: 1 }),
  contextLimit: () => undefined,
  policyRefusal: () => undefined,
  onnxStage: qwen35StageGraph,
  nativeStages: { kind: 'native', linearNames: (model) => qwen35LinearNames(model), create: createQwen35NativeStages },
};
