// Llama family (Llama, Mistral, Qwen2): Hugging Face names → canonical names, and what must exist.
import type { ModelHyperparameters } from '../types.ts';
import { mapName, perLayer, type ArchTensorTable, type ExpectedTensor, type NameTables } from './base.ts';

export const LLAMA_NAMES: NameTables = {
  prefixes: ['model.'],
  global: {
    'embed_tokens.weight': 'token_embd.weight',
    'norm.weight': 'output_norm.weight',
    'lm_head.weight': 'output.weight',
  },
  layer: {
    'input_layernorm.weight': 'attn_norm.weight',
    'self_attn.q_proj.weight': 'attn_q.weight',
    'self_attn.q_proj.bias': 'attn_q.bias',
    'self_attn.k_proj.weight': 'attn_k.weight',
    'self_attn.k_proj.bias': 'attn_k.bias',
    'self_attn.v_proj.weight': 'attn_v.weight',
    'self_attn.v_proj.bias': 'attn_v.bias',
    'self_attn.o_proj.weight': 'attn_output.weight',
    'post_attention_layernorm.weight': 'ffn_norm.weight',
    'mlp.gate_proj.weight': 'ffn_gate.weight',
    'mlp.up_proj.weight': 'ffn_up.weight',
    'mlp.down_proj.weight': 'ffn_down.weight',
  },
};

export const LLAMA_TENSORS: ArchTensorTable = {
  architecture: 'llama',
  canonicalName: (hfName) => mapName(LLAMA_NAMES, hfName),
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const { hiddenSize: d, vocabSize: vocab, ffnSize: ffn } = hyper;
    const q = hyper.heads * hyper.headDim;
    const kv = hyper.kvHeads * hyper.headDim;
    const bias = (prefix: string, rows: number): ExpectedTensor[] => (hyper.qkvBias ? [{ name: `${prefix}.bias`, shape: [rows] }] : []);
    return [
      { name: 'token_embd.weight', shape: [vocab, d] },
      ...perLayer(hyper.layers, (blk) => [
        { name: `${blk}attn_norm.weight`, shape: [d] },
        { name: `${blk}attn_q.weight`, shape: [q, d] },
        ...bias(`${blk}attn_q`, q),
        { name: `${blk}attn_k.weight`, shape: [kv, d] },
        ...bias(`${blk}attn_k`, kv),
        { name: `${blk}attn_v.weight`, shape: [kv, d] },
        ...bias(`${blk}attn_v`, kv),
        { name: `${blk}attn_output.weight`, shape: [d, q] },
        { name: `${blk}ffn_norm.weight`, shape: [d] },
        { name: `${blk}ffn_gate.weight`, shape: [ffn, d] },
        { name: `${blk}ffn_up.weight`, shape: [ffn, d] },
        { name: `${blk}ffn_down.weight`, shape: [d, ffn] },
      ]),
      { name: 'output_norm.weight', shape: [d] },
      ...(hyper.tiedEmbeddings ? [] : [{ name: 'output.weight', shape: [vocab, d] }]),
    ];
  },
};
