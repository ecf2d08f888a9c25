// gpt-oss (GGUF `gpt-oss`, llama.cpp's LLM_ARCH_OPENAI_MOE; Hugging Face GptOssForCausalLM), as
// llama_model_openai_moe loads it and the converter (conversion/gpt_oss.py) writes it:
//
//   token_embd.weight            [vocab, hidden]
//   blk.N.attn_norm.weight       [hidden]                       RMSNorm before attention
//   blk.N.attn_q.weight / .bias  [heads·headDim, hidden] / [heads·headDim]    headDim is the file's key_length
//   blk.N.attn_k.weight / .bias  [kvHeads·headDim, hidden]                    (64 at hidden 2880: not hidden/heads)
//   blk.N.attn_v.weight / .bias  [kvHeads·headDim, hidden]
//   blk.N.attn_output.weight / .bias [hidden, heads·headDim] / [hidden]
//   blk.N.attn_sinks.weight      [heads]                        one learned logit per query head (F32)
//   blk.N.post_attention_norm.weight [hidden]                   the RMSNorm before the MoE (llama's ffn_norm)
//   blk.N.ffn_gate_inp.weight / .bias [experts, hidden] / [experts]            the router
//   blk.N.ffn_gate_exps.weight / .bias [experts, expertFfn, hidden] / [experts, expertFfn]
//   blk.N.ffn_up_exps.weight / .bias   [experts, expertFfn, hidden] / [experts, expertFfn]
//   blk.N.ffn_down_exps.weight / .bias [experts, hidden, expertFfn] / [experts, hidden]
//   output_norm.weight [hidden], output.weight [vocab, hidden]  (never tied)
//
// Shapes outermost-first (ggml's ne reversed). Keys beyond the llama ones: expert_count,
// expert_used_count, expert_feed_forward_length (the converter writes intermediate_size there),
// attention.sliding_window (128), optional attention.sliding_window_pattern (period, default 2:
// layer l slides when l % 2 == 0, llama.cpp's set_swa_pattern(2)), optional rope.freq_base_swa,
// and YaRN: rope.scaling.type "yarn", rope.scaling.factor (32), rope.scaling.original_context_length
// (4096). The converter also writes rope.scaling.yarn_beta_fast/slow from the config (32 / 1);
// llama.cpp does not read those keys (its defaults are the same 32 / 1), so neither do we.
import type { GgufKeys } from '../gguf/gemma-keys.ts';
import type { GptOssHyperparameters, ModelHyperparameters, RopeScaling } from '../types.ts';
import type { ArchTensorTable, ExpectedTensor } from './base.ts';

export const GPT_OSS_TENSORS: ArchTensorTable = {
  architecture: 'gpt-oss',
  // a Hugging Face folder is not read for this family (its experts ship as MXFP4 blocks): GGUF only
  canonicalName: () => undefined,
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const moe = hyper.moe;
    if (moe === undefined) throw new Error('gpt-oss hyperparameters without their experts');
    const { hiddenSize: d, vocabSize: vocab } = hyper;
    const q = hyper.heads * hyper.headDim;
    const kv = hyper.kvHeads * hyper.headDim;
    const { experts: E, expertFfn: F } = moe;
    const out: ExpectedTensor[] = [{ name: 'token_embd.weight', shape: [vocab, d] }];
    for (let l = 0; l < hyper.layers; l++) {
      const b = `blk.${l}.`;
      out.push(
        { name: `${b}attn_norm.weight`, shape: [d] },
        { name: `${b}attn_q.weight`, shape: [q, d] },
        { name: `${b}attn_q.bias`, shape: [q] },
        { name: `${b}attn_k.weight`, shape: [kv, d] },
        { name: `${b}attn_k.bias`, shape: [kv] },
        { name: `${b}attn_v.weight`, shape: [kv, d] },
        { name: `${b}attn_v.bias`, shape: [kv] },
        { name: `${b}attn_output.weight`, shape: [d, q] },
        { name: `${b}attn_output.bias`, shape: [d] },
        { name: `${b}attn_sinks.weight`, shape: [hyper.heads] },
        { name: `${b}post_attention_norm.weight`, shape: [d] },
        { name: `${b}ffn_gate_inp.weight`, shape: [E, d] },
        { name: `${b}ffn_gate_inp.bias`, shape: [E] },
        { name: `${b}ffn_gate_exps.weight`, shape: [E, F, d] },
        { name: `${b}ffn_gate_exps.bias`, shape: [E, F] },
        { name: `${b}ffn_up_exps.weight`, shape: [E, F, d] },
        { name: `${b}ffn_up_exps.bias`, shape: [E, F] },
        { name: `${b}ffn_down_exps.weight`, shape: [E, d, F] },
        { name: `${b}ffn_down_exps.bias`, shape: [E, d] },
      );
    }
    out.push({ name: 'output_norm.weight', shape: [d] }, { name: 'output.weight', shape: [vocab, d] });
    return out;
  },
};

/** gpt-oss's window layers and their RoPE base from its keys (llama_model_openai_moe::load_arch_hparams). */
export function gptOssGgufHyper(keys: GgufKeys, base: Pick<ModelHyperparameters, 'ropeTheta' | 'layers'>): GptOssHyperparameters {
  const k = (suffix: string): string => `gpt-oss.${suffix}`;
  const slidingWindow = keys.int(k('attention.sliding_window'), 0);
  if (slidingWindow === 0) keys.bad(k('attention.sliding_window'), 'a positive integer (llama.cpp requires it for gpt-oss)');
  const pattern = keys.raw(k('attention.sliding_window_pattern'));
  if (pattern !== undefined && typeof pattern !== 'number' && typeof pattern !== 'bigint') {
    keys.bad(k('attention.sliding_window_pattern'), 'one period (an array of per-layer flags is not read for gpt-oss)');
  }
  const swaPeriod = keys.int(k('attention.sliding_window_pattern'), 2);
  const swaRopeTheta = keys.float(k('rope.freq_base_swa'), base.ropeTheta ?? 10000);
  if (!(swaRopeTheta > 0 && Number.isFinite(swaRopeTheta))) keys.bad(k('rope.freq_base_swa'), 'a positive number');
  return { slidingWindow, swaPeriod, swaRopeTheta };
}

/**
 * YaRN as llama.cpp runs it (llama_context's cparams, ggml's rope_yarn), from rope.scaling.factor s
 * and rope.scaling.original_context_length n₀ (n₀ absent: the trained context):
 *
 *   freq_scale = 1/s; ext_factor = 1 (yarn_ext_factor unset → 1 for YaRN); beta_fast 32, beta_slow 1
 *   attn_factor = get_mscale(s) · 1/(1 + 0.1·ln s) · rope.scaling.attn_factor (float: ≈ 1), then
 *   rope_yarn multiplies it by 1 + 0.1·ln(1/freq_scale) again: mscale = attn_factor·(1 + 0.1·ln s)
 *   per pair i of d rotated dims: θ_i = base^(−2i/d); the ramp between the pairs where the original
 *   context turns β_fast and β_slow times, corr(β) = d·ln(n₀/(2πβ)) / (2·ln base),
 *   low = max(0, ⌊corr(β_fast)⌋), high = min(d − 1, ⌈corr(β_slow)⌉),
 *   ramp_i = (1 − clamp((i − low) / max(0.001, high − low), 0, 1))·ext_factor
 *   f_i = θ_i·(freq_scale·(1 − ramp_i) + ramp_i)      (high frequencies kept, low ones interpolated)
 *   cos, sin of p·f_i, times mscale (so q·k on the rotated dims scales by mscale²)
 *
 * Returned with the mscale in attnFactor (float32 as llama.cpp computes it); onnx/ops.ts yarnInvFreq
 * computes f_i from the rest.
 */
export function yarnScaling(factor: number, originalContext: number, ropeAttnFactor: number): RopeScaling {
  const f = Math.fround;
  const lnS = f(Math.log(f(factor)));
  const getMscale = f(f(f(0.1) * lnS) + 1); // get_mscale(factor, 1)
  let attn = f(getMscale * f(1 / f(f(1) + f(f(0.1) * lnS))));
  attn = f(attn * f(ropeAttnFactor));
  const freqScale = f(1 / f(factor));
  const mscale = f(attn * f(1 + f(f(0.1) * f(Math.log(f(1 / freqScale))))));
  return { kind: 'yarn', factor, originalContextLength: originalContext, attnFactor: mscale, betaFast: 32, betaSlow: 1, extFactor: 1 };
}
