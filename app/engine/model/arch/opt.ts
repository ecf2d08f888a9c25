// OPT (pre-LayerNorm variants only): Hugging Face names → canonical names, and what must exist.
// Checkpoints of OPTForCausalLM store `model.decoder.*`; OPTModel stores `decoder.*`.
import type { ModelHyperparameters } from '../types.ts';
import { mapName, perLayer, type ArchTensorTable, type ExpectedTensor, type NameTables } from './base.ts';

export const OPT_NAMES: NameTables = {
  prefixes: ['model.', 'decoder.'],
  global: {
    'embed_tokens.weight': 'token_embd.weight',
    'embed_positions.weight': 'position_embd.weight',
    'final_layer_norm.weight': 'output_norm.weight',
    'final_layer_norm.bias': 'output_norm.bias',
    'lm_head.weight': 'output.weight',
  },
  layer: {
    'self_attn_layer_norm.weight': 'attn_norm.weight',
    'self_attn_layer_norm.bias': 'attn_norm.bias',
    'self_attn.q_proj.weight': 'attn_q.weight',
    'self_attn.q_proj.bias': 'attn_q.bias',
    'self_attn.k_proj.weight': 'attn_k.weight',
    'self_attn.k_proj.bias': 'attn_k.bias',
    'self_attn.v_proj.weight': 'attn_v.weight',
    'self_attn.v_proj.bias': 'attn_v.bias',
    'self_attn.out_proj.weight': 'attn_output.weight',
    'self_attn.out_proj.bias': 'attn_output.bias',
    'final_layer_norm.weight': 'ffn_norm.weight',
    'final_layer_norm.bias': 'ffn_norm.bias',
    'fc1.weight': 'ffn_up.weight',
    'fc1.bias': 'ffn_up.bias',
    'fc2.weight': 'ffn_down.weight',
    'fc2.bias': 'ffn_down.bias',
  },
};

export const OPT_TENSORS: ArchTensorTable = {
  architecture: 'opt',
  canonicalName: (hfName) => mapName(OPT_NAMES, hfName),
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const { hiddenSize: d, vocabSize: vocab, ffnSize: ffn } = hyper;
    // OPT has no q/k/v-only bias switch: config enable_bias covers every Linear (see hf/config.ts).
    const linear = (name: string, rows: number, cols: number): ExpectedTensor[] => [
      { name: `${name}.weight`, shape: [rows, cols] },
      ...(hyper.qkvBias ? [{ name: `${name}.bias`, shape: [rows] }] : []),
    ];
    const norm = (name: string): ExpectedTensor[] => [
      { name: `${name}.weight`, shape: [d] },
      { name: `${name}.bias`, shape: [d] },
    ];
    return [
      { name: 'token_embd.weight', shape: [vocab, d] },
      { name: 'position_embd.weight', shape: [hyper.contextLength + (hyper.positionOffset ?? 2), d] },
      ...perLayer(hyper.layers, (blk) => [
        ...norm(`${blk}attn_norm`),
        ...linear(`${blk}attn_q`, d, d),
        ...linear(`${blk}attn_k`, d, d),
        ...linear(`${blk}attn_v`, d, d),
        ...linear(`${blk}attn_output`, d, d),
        ...norm(`${blk}ffn_norm`),
        ...linear(`${blk}ffn_up`, ffn, d),
        ...linear(`${blk}ffn_down`, d, ffn),
      ]),
      ...norm('output_norm'),
      ...(hyper.tiedEmbeddings ? [] : [{ name: 'output.weight', shape: [vocab, d] }]),
    ];
  },
};
