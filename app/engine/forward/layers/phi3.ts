// The Phi-3 / Phi-4 family (GGUF `phi3`, Hugging Face Phi3ForCausalLM; llama.cpp's
// src/models/phi3.cpp). A Llama layer with three differences, all settled before the stages run:
//   - fused q/k/v and gate/up tensors: the loader hands the stages views of their row blocks under
//     the llama names (model/arch/phi3.ts phi3Views), so both dense engines run the llama family's
//     stages over the file's own bytes;
//   - partial rotary (Phi-4-mini: 96 of 128 head dimensions): the layer's RoPE rotates
//     `hyper.ropeDims`, the stages leave the rest of each head as it is;
//   - LongRoPE (the 128k models): per-pair frequency divisors, short or long by the session's
//     context length, and an attention factor on cos/sin (layer-spec.ts ropeForContext).
// Every layer attends globally: the sliding window some Phi-3 files state is off in llama.cpp
// (gguf-model.ts says why), and we compute what it computes. NeoX RoPE, scale 1/√headDim, RMSNorm
// before attention and before the MLP, SwiGLU. Every row policy runs it; the speculative query of
// InfiniGen gets the same cos/sin rows as the layer's own query (one RoPE for every layer).
import { PHI3_TENSORS } from '../../model/arch/phi3.ts';
import type { ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { globalAttention, type LayerSpec } from './layer-spec.ts';
import { llamaStageGraph } from './llama-graph.ts';
import { createLlamaNativeStages, llamaLinearNames } from './llama-native.ts';

function phi3Layers(hyper: ModelHyperparameters): LayerSpec[] {
  const layer: LayerSpec = {
    attention: globalAttention(hyper, { base: hyper.ropeTheta ?? 10000, dims: hyper.ropeDims ?? hyper.headDim, layout: 'neox', scaling: hyper.ropeScaling }),
    ffn: { kind: 'dense', size: hyper.ffnSize, gated: true, activation: 'silu' },
    norm: { kind: 'rms', placement: 'pre', eps: hyper.normEps },
  };
  return Array.from({ length: hyper.layers }, () => layer);
}

export const PHI3_FAMILY: ModelFamily = {
  architecture: 'phi3',
  name: 'Phi-3/Phi-4',
  tensors: PHI3_TENSORS,
  layers: phi3Layers,
  embedding: () => ({ tokenTable: 'token_embd.weight', positions: undefined, scale: 1 }),
  contextLimit: () => undefined,
  policyRefusal: () => undefined,
  onnxStage: llamaStageGraph,
  nativeStages: { kind: 'native', linearNames: llamaLinearNames, create: createLlamaNativeStages },
};
