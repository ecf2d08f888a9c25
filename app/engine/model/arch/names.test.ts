import { describe, expect, it } from 'vitest';
import type { ModelHyperparameters } from '../types.ts';
import { LLAMA_TENSORS } from './llama.ts';
import { OPT_TENSORS } from './opt.ts';

describe('llama name table', () => {
  it.each([
    ['model.embed_tokens.weight', 'token_embd.weight'],
    ['embed_tokens.weight', 'token_embd.weight'],
    ['lm_head.weight', 'output.weight'],
    ['model.norm.weight', 'output_norm.weight'],
    ['model.layers.0.self_attn.q_proj.weight', 'blk.0.attn_q.weight'],
    ['layers.31.self_attn.q_proj.bias', 'blk.31.attn_q.bias'],
    ['model.layers.7.self_attn.k_proj.bias', 'blk.7.attn_k.bias'],
    ['model.layers.7.self_attn.v_proj.weight', 'blk.7.attn_v.weight'],
    ['model.layers.7.self_attn.o_proj.weight', 'blk.7.attn_output.weight'],
    ['model.layers.2.mlp.gate_proj.weight', 'blk.2.ffn_gate.weight'],
    ['model.layers.2.mlp.up_proj.weight', 'blk.2.ffn_up.weight'],
    ['model.layers.2.mlp.down_proj.weight', 'blk.2.ffn_down.weight'],
    ['model.layers.2.input_layernorm.weight', 'blk.2.attn_norm.weight'],
    ['model.layers.2.post_attention_layernorm.weight', 'blk.2.ffn_norm.weight'],
  ])('%s → %s', (hf, canonical) => expect(LLAMA_TENSORS.canonicalName(hf)).toBe(canonical));

  it.each(['model.layers.0.self_attn.rotary_emb.inv_freq', 'model.layers.01.mlp.up_proj.weight', 'model.layers.x.mlp.up_proj.weight', 'model.norm.bias', 'constructor', 'model.layers.0.toString'])(
    'ignores %s',
    (hf) => expect(LLAMA_TENSORS.canonicalName(hf)).toBeUndefined(),
  );
});

describe('opt name table', () => {
  it.each([
    ['model.decoder.embed_tokens.weight', 'token_embd.weight'],
    ['decoder.embed_positions.weight', 'position_embd.weight'],
    ['model.decoder.final_layer_norm.bias', 'output_norm.bias'],
    ['model.decoder.layers.3.final_layer_norm.weight', 'blk.3.ffn_norm.weight'],
    ['model.decoder.layers.3.self_attn_layer_norm.bias', 'blk.3.attn_norm.bias'],
    ['model.decoder.layers.3.self_attn.out_proj.weight', 'blk.3.attn_output.weight'],
    ['decoder.layers.0.fc1.bias', 'blk.0.ffn_up.bias'],
    ['decoder.layers.0.fc2.weight', 'blk.0.ffn_down.weight'],
    ['lm_head.weight', 'output.weight'],
  ])('%s → %s', (hf, canonical) => expect(OPT_TENSORS.canonicalName(hf)).toBe(canonical));
});

describe('expected tensors', () => {
  const hyper: ModelHyperparameters = {
    architecture: 'llama', family: 'qwen2', hiddenSize: 8, layers: 2, heads: 4, kvHeads: 2, headDim: 2, ffnSize: 12, vocabSize: 10, contextLength: 32, normEps: 1e-6, qkvBias: true, tiedEmbeddings: true,
  };
  it('llama: GQA shapes, biases when qkvBias, no output.weight when tied', () => {
    const byName = new Map(LLAMA_TENSORS.expectedTensors(hyper).map((t) => [t.name, t.shape]));
    expect(byName.get('blk.1.attn_q.weight')).toEqual([8, 8]);
    expect(byName.get('blk.1.attn_k.weight')).toEqual([4, 8]);
    expect(byName.get('blk.1.attn_v.bias')).toEqual([4]);
    expect(byName.get('blk.0.ffn_down.weight')).toEqual([8, 12]);
    expect(byName.has('output.weight')).toBe(false);
    expect(byName.size).toBe(1 + 2 * 12 + 1);
  });
  it('opt: positions offset by 2, LayerNorm biases', () => {
    const byName = new Map(OPT_TENSORS.expectedTensors({ ...hyper, architecture: 'opt', kvHeads: 4, positionOffset: 2, tiedEmbeddings: false }).map((t) => [t.name, t.shape]));
    expect(byName.get('position_embd.weight')).toEqual([34, 8]);
    expect(byName.get('blk.0.ffn_norm.bias')).toEqual([8]);
    expect(byName.get('output.weight')).toEqual([10, 8]);
    expect(byName.size).toBe(2 + 2 * 16 + 2 + 1);
  });
});
