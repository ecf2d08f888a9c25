// The llama family: Llama, Mistral, Qwen2 (GGUF `llama`/`qwen2`, Hugging Face LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM). Every layer the same: global attention over every
// position (GQA where kvHeads < heads) with RoPE from the hyperparameters, scale 1/√headDim; a SwiGLU
// MLP; RMSNorm before attention and before the MLP. Qwen2's q/k/v bias is in the tensor table (the
// stages add a bias wherever the file has one). Every row policy runs it; native stages where the
// weight types have kernels.
import { LLAMA_TENSORS } from '../../model/arch/llama.ts';
import type { ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { llamaStageGraph } from './llama-graph.ts';
import { createLlamaNativeStages, llamaLinearNames } from './llama-native.ts';
import { globalAttention, type LayerSpec } from './layer-spec.ts';

function llamaLayers(hyper: ModelHyperparameters): LayerSpec[] {
  // one object for every layer: they are the same, and shared code may compare them cheaply
  const layer: LayerSpec = {
    // the RoPE defaults the stages have always taken (graphs.ts stageRope): θ 10000, neox pairs
    attention: globalAttention(hyper, { base: hyper.ropeTheta ?? 10000, dims: hyper.headDim, layout: hyper.ropeLayout ?? 'neox', scaling: hyper.ropeScaling }),
    ffn: { kind: 'dense', size: hyper.ffnSize, gated: true, activation: 'silu' },
    norm: { kind: 'rms', placement: 'pre', eps: hyper.normEps },
  };
  return Array.from({ length: hyper.layers }, () => layer);
}

export const LLAMA_FAMILY: ModelFamily = {
  architecture: 'llama',
  name: 'llama family',
  tensors: LLAMA_TENSORS,
  layers: llamaLayers,
  embedding: () => ({ tokenTable: 'token_embd.weight', positions: undefined, scale: 1 }),
  contextLimit: () => undefined,
  policyRefusal: () => undefined,
  onnxStage: llamaStageGraph,
  nativeStages: { kind: 'native', linearNames: llamaLinearNames, create: createLlamaNativeStages },
};
