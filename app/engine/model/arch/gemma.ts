// Gemma 2 and Gemma 3 (GGUF `gemma2`/`gemma3`, Hugging Face Gemma2ForCausalLM, Gemma3ForCausalLM
// text-only): Hugging Face names → canonical names, and what must exist. The llama family's
// tensors plus a norm after attention and after the MLP (sandwich norms) and, in Gemma 3, a
// per-head RMSNorm of q and k.
//
// Two names differ in meaning from the llama family's: Gemma's `post_attention_layernorm` is the
// norm of the attention's OUTPUT (GGUF post_attention_norm), and `pre_feedforward_layernorm` is the
// norm before the MLP (GGUF ffn_norm), which Llama calls post_attention_layernorm.
//
// Norm weights: Gemma's RMSNorm multiplies by (1 + w) and stores w; convert_hf_to_gguf.py writes
// w + 1 into the GGUF (every tensor named *norm.weight). The engine computes x/rms(x)·w' with the
// GGUF's w', so a Hugging Face folder's norm vectors are shifted by 1 when they are loaded
// (shiftedNorms below), and both formats hold the same numbers.
import type { ModelHyperparameters, TensorView } from '../types.ts';
import { mapName, perLayer, type ArchTensorTable, type ExpectedTensor, type NameTables } from './base.ts';

export const GEMMA_NAMES: NameTables = {
  prefixes: ['model.'],
  global: {
    'embed_tokens.weight': 'token_embd.weight',
    'norm.weight': 'output_norm.weight',
    'lm_head.weight': 'output.weight',
  },
  layer: {
    'input_layernorm.weight': 'attn_norm.weight',
    'self_attn.q_proj.weight': 'attn_q.weight',
    'self_attn.k_proj.weight': 'attn_k.weight',
    'self_attn.v_proj.weight': 'attn_v.weight',
    'self_attn.o_proj.weight': 'attn_output.weight',
    'self_attn.q_norm.weight': 'attn_q_norm.weight',
    'self_attn.k_norm.weight': 'attn_k_norm.weight',
    'post_attention_layernorm.weight': 'post_attention_norm.weight',
    'pre_feedforward_layernorm.weight': 'ffn_norm.weight',
    'post_feedforward_layernorm.weight': 'post_ffw_norm.weight',
    'mlp.gate_proj.weight': 'ffn_gate.weight',
    'mlp.up_proj.weight': 'ffn_up.weight',
    'mlp.down_proj.weight': 'ffn_down.weight',
  },
};

function gemmaExpected(hyper: ModelHyperparameters): ExpectedTensor[] {
  const { hiddenSize: d, vocabSize: vocab, ffnSize: ffn, headDim } = hyper;
  const q = hyper.heads * headDim;
  const kv = hyper.kvHeads * headDim;
  const qkNorm = hyper.gemma?.qkNorm === true;
  return [
    { name: 'token_embd.weight', shape: [vocab, d] },
    ...perLayer(hyper.layers, (blk) => [
      { name: `${blk}attn_norm.weight`, shape: [d] },
      { name: `${blk}attn_q.weight`, shape: [q, d] },
      { name: `${blk}attn_k.weight`, shape: [kv, d] },
      { name: `${blk}attn_v.weight`, shape: [kv, d] },
      ...(qkNorm ? [{ name: `${blk}attn_q_norm.weight`, shape: [headDim] }, { name: `${blk}attn_k_norm.weight`, shape: [headDim] }] : []),
      { name: `${blk}attn_output.weight`, shape: [d, q] },
      { name: `${blk}post_attention_norm.weight`, shape: [d] },
      { name: `${blk}ffn_norm.weight`, shape: [d] },
      { name: `${blk}ffn_gate.weight`, shape: [ffn, d] },
      { name: `${blk}ffn_up.weight`, shape: [ffn, d] },
      { name: `${blk}ffn_down.weight`, shape: [d, ffn] },
      { name: `${blk}post_ffw_norm.weight`, shape: [d] },
    ]),
    { name: 'output_norm.weight', shape: [d] },
    ...(hyper.tiedEmbeddings ? [] : [{ name: 'output.weight', shape: [vocab, d] }]),
  ];
}

export const GEMMA2_TENSORS: ArchTensorTable = {
  architecture: 'gemma2',
  canonicalName: (hfName) => mapName(GEMMA_NAMES, hfName),
  expectedTensors: gemmaExpected,
};

export const GEMMA3_TENSORS: ArchTensorTable = {
  architecture: 'gemma3',
  canonicalName: (hfName) => mapName(GEMMA_NAMES, hfName),
  expectedTensors: gemmaExpected,
};

/** A norm vector of a Hugging Face Gemma folder as the GGUF holds it: w + 1, in F32 (see the top). */
export function shiftedNorm(view: TensorView): TensorView {
  let cached: Float32Array | undefined;
  const values = (): Float32Array => {
    if (cached === undefined) {
      cached = view.toFloat32();
      for (let i = 0; i < cached.length; i++) cached[i] = cached[i]! + 1;
    }
    return cached;
  };
  return {
    name: view.name,
    dtype: 'F32',
    shape: view.shape,
    elements: view.elements,
    bytes: () => new Uint8Array(values().buffer.slice(0)),
    toFloat32: () => values().slice(),
  };
}

/** The tensors of a Hugging Face Gemma folder with every norm vector shifted (shiftedNorm). */
export function shiftedNorms(tensors: ReadonlyMap<string, TensorView>): Map<string, TensorView> {
  const out = new Map<string, TensorView>();
  for (const [name, view] of tensors) out.set(name, name.endsWith('norm.weight') ? shiftedNorm(view) : view);
  return out;
}
