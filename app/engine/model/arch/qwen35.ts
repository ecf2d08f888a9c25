// Qwen3.5 (dense, GGUF `qwen35`): a hybrid of linear-attention (Gated DeltaNet) and gated
// full-attention layers, what llama.cpp's llama_model_qwen35 loads (src/models/qwen35.cpp):
//
//   every layer     attn_norm, post_attention_norm [d] (the FFN's norm), ffn_gate / ffn_up [ffn, d],
//                   ffn_down [d, ffn]
//   full attention  attn_q [2·heads·headDim, d] (each head's query rows, then its gate rows),
//                   attn_k / attn_v [kvHeads·headDim, d], attn_q_norm / attn_k_norm [headDim],
//                   attn_output [d, heads·headDim]
//   linear          attn_qkv [convDim, d], attn_gate [Hv·Dv, d] (z), ssm_beta / ssm_alpha [Hv, d],
//                   ssm_conv1d [convDim, convKernel], ssm_dt.bias [Hv], ssm_a [Hv] (−exp(A_log)),
//                   ssm_norm [Dv], ssm_out [d, Hv·Dv]      (convDim = (2·Hk + Hv)·D)
//
// Which layers are linear: attention.recurrent_layers when the file has it, else llama.cpp's default
// rule from full_attention_interval (default 4): layer ℓ is linear iff (ℓ + 1) mod interval ≠ 0.
// The converter appends the multi-token-prediction block by default (block_count = the model's
// layers + nextn_predict_layers, tensors blk.L.* and blk.L.nextn.*): as llama.cpp's main pass does,
// the model is the first block_count − nextn_predict_layers layers and the MTP block is not run
// (its tensors stay in the file, unread).
// Hugging Face folders (Qwen3_5ForCausalLM) are not read yet: the converter reorders the value heads
// (_LinearAttentionVReorderBase), which a folder reader would have to repeat.
import type { LinearAttentionConfig, ModelHyperparameters } from '../types.ts';
import type { GgufKeys } from '../gguf/gemma-keys.ts';
import type { ArchTensorTable, ExpectedTensor } from './base.ts';

export const QWEN35_TENSORS: ArchTensorTable = {
  architecture: 'qwen35',
  canonicalName: () => undefined,
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const lin = hyper.linearAttention;
    if (lin === undefined) throw new Error('qwen35 hyperparameters without linearAttention');
    const { hiddenSize: d, vocabSize: vocab, ffnSize: ffn, heads, kvHeads, headDim } = hyper;
    const keyDim = lin.keyHeads * lin.headDim;
    const valueDim = lin.valueHeads * lin.headDim;
    const convDim = 2 * keyDim + valueDim;
    const out: ExpectedTensor[] = [{ name: 'token_embd.weight', shape: [vocab, d] }];
    for (let l = 0; l < hyper.layers; l++) {
      const b = `blk.${l}.`;
      out.push({ name: `${b}attn_norm.weight`, shape: [d] }, { name: `${b}post_attention_norm.weight`, shape: [d] });
      if (lin.layers[l]) {
        out.push(
          { name: `${b}attn_qkv.weight`, shape: [convDim, d] },
          { name: `${b}attn_gate.weight`, shape: [valueDim, d] },
          { name: `${b}ssm_beta.weight`, shape: [lin.valueHeads, d] },
          { name: `${b}ssm_alpha.weight`, shape: [lin.valueHeads, d] },
          { name: `${b}ssm_conv1d.weight`, shape: [convDim, lin.convKernel] },
          { name: `${b}ssm_dt.bias`, shape: [lin.valueHeads] },
          { name: `${b}ssm_a`, shape: [lin.valueHeads] },
          { name: `${b}ssm_norm.weight`, shape: [lin.headDim] },
          { name: `${b}ssm_out.weight`, shape: [d, valueDim] },
        );
      } else {
        out.push(
          { name: `${b}attn_q.weight`, shape: [2 * heads * headDim, d] },
          { name: `${b}attn_k.weight`, shape: [kvHeads * headDim, d] },
          { name: `${b}attn_v.weight`, shape: [kvHeads * headDim, d] },
          { name: `${b}attn_q_norm.weight`, shape: [headDim] },
          { name: `${b}attn_k_norm.weight`, shape: [headDim] },
          { name: `${b}attn_output.weight`, shape: [d, heads * headDim] },
        );
      }
      out.push({ name: `${b}ffn_gate.weight`, shape: [ffn, d] }, { name: `${b}ffn_up.weight`, shape: [ffn, d] }, { name: `${b}ffn_down.weight`, shape: [d, ffn] });
    }
    out.push({ name: 'output_norm.weight', shape: [d] });
    if (!hyper.tiedEmbeddings) out.push({ name: 'output.weight', shape: [vocab, d] });
    return out;
  },
};

/**
 * The layers of a qwen35 GGUF the main pass runs (block_count less the MTP block) and its
 * linear-attention layers from the ssm.* keys (checked: typed MODEL_BAD_VALUE naming the key).
 */
export function qwen35Hyperparameters(keys: GgufKeys, arch: string, blockCount: number): { layers: number; linearAttention: LinearAttentionConfig } {
  const nextn = keys.int(`${arch}.nextn_predict_layers`, 0);
  if (nextn >= blockCount) keys.bad(`${arch}.nextn_predict_layers`, `below block_count ${blockCount}`);
  const layers = blockCount - nextn;
  return { layers, linearAttention: qwen35LinearAttention(keys, arch, layers) };
}

/** The linear-attention layers among the first `layers` of a qwen35 GGUF (typed MODEL_BAD_VALUE naming a bad key). */
export function qwen35LinearAttention(keys: GgufKeys, arch: string, layers: number): LinearAttentionConfig {
  const k = (suffix: string): string => `${arch}.${suffix}`;
  const positive = (suffix: string): number => {
    const n = keys.int(k(suffix), 0);
    if (!(n > 0)) keys.bad(k(suffix), 'a positive integer');
    return n;
  };
  const keyHeads = positive('ssm.group_count');
  const valueHeads = positive('ssm.time_step_rank');
  const headDim = positive('ssm.state_size');
  const convKernel = positive('ssm.conv_kernel');
  const inner = positive('ssm.inner_size');
  if (valueHeads % keyHeads !== 0) keys.bad(k('ssm.time_step_rank'), `a multiple of ssm.group_count ${keyHeads}`);
  // llama.cpp takes the value head size as inner_size / value heads and requires it to equal state_size
  if (inner !== valueHeads * headDim) keys.bad(k('ssm.inner_size'), `ssm.time_step_rank × ssm.state_size = ${valueHeads * headDim}`);
  const explicit = keys.raw(k('attention.recurrent_layers'));
  let linear: boolean[];
  if (explicit !== undefined) {
    const values = Array.from(explicit as ArrayLike<unknown>, (v) => v === true || v === 1 || v === 1n);
    if (values.length < layers) keys.bad(k('attention.recurrent_layers'), `an array of ${layers} flags`);
    linear = values.slice(0, layers);
  } else {
    const interval = keys.int(k('full_attention_interval'), 4);
    if (!(interval > 0)) keys.bad(k('full_attention_interval'), 'a positive integer');
    linear = Array.from({ length: layers }, (_, l) => (l + 1) % interval !== 0);
  }
  return { layers: linear, keyHeads, valueHeads, headDim, convKernel };
}
