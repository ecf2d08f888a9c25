// Qwen3 (dense): the llama family's tensors plus a per-head RMSNorm weight for q and for k in every
// layer (attn_q_norm / attn_k_norm, [headDim], what llama.cpp's llama_model_qwen3 loads). The head
// size is the file's own (Qwen3-0.6B: hidden 1024, 16 heads of 128, so attn_q has 2048 rows and
// attn_output 2048 columns), never hidden / heads. q/k/v biases are not part of Qwen3; a file that
// has them is read like Qwen2's (the stages add a bias wherever the file has one).
import type { ModelHyperparameters } from '../types.ts';
import { mapName, type ArchTensorTable, type ExpectedTensor, type NameTables } from './base.ts';
import { LLAMA_NAMES, LLAMA_TENSORS } from './llama.ts';

export const QWEN3_NAMES: NameTables = {
  prefixes: LLAMA_NAMES.prefixes,
  global: LLAMA_NAMES.global,
  layer: {
    ...LLAMA_NAMES.layer,
    'self_attn.q_norm.weight': 'attn_q_norm.weight',
    'self_attn.k_norm.weight': 'attn_k_norm.weight',
  },
};

export const QWEN3_TENSORS: ArchTensorTable = {
  architecture: 'qwen3',
  canonicalName: (hfName) => mapName(QWEN3_NAMES, hfName),
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const out = LLAMA_TENSORS.expectedTensors(hyper);
    for (let l = 0; l < hyper.layers; l++) {
      out.push({ name: `blk.${l}.attn_q_norm.weight`, shape: [hyper.headDim] }, { name: `blk.${l}.attn_k_norm.weight`, shape: [hyper.headDim] });
    }
    return out;
  },
};
