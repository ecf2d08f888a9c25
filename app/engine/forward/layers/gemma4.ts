// Gemma 4 (GGUF `gemma4`, Hugging Face Gemma4ForCausalLM / Gemma4ForConditionalGeneration's text
// model), as the llama.cpp build node-llama-cpp 3.21.1 runs it (src/models/gemma4.cpp,
// src/llama-model.cpp, src/llama-hparams.cpp, conversion/gemma.py Gemma4Model). Read there; written here.
//
// Variants llama.cpp names by block count: 35 = E2B, 42 = E4B, 60 = 31B (dense); 30 = 26B-A4B
// (mixture of experts: refused here by name, issue 31).
//
// GGUF keys (prefix `gemma4.`)                       what they give
//   block_count, embedding_length (d)               L, d
//   attention.sliding_window_pattern  bool[L]       true: window layer, false: global layer
//   attention.sliding_window                         the window W (a key at p is seen from t iff t−W < p ≤ t)
//   attention.head_count            n | n[L]         query heads per layer
//   attention.head_count_kv         n | n[L]         KV heads per layer (the converter writes an array:
//                                                    num_key_value_heads on window layers,
//                                                    num_global_key_value_heads on global ones)
//   attention.key_length / value_length              head dim of the GLOBAL layers (global_head_dim)
//   attention.key_length_swa / value_length_swa      head dim of the WINDOW layers (head_dim); K = V dims required
//   rope.dimension_count                             rotated dims of global layers: the whole global head
//                                                    (partial rotation is done by rope_freqs, below)
//   rope.dimension_count_swa                         rotated dims of window layers (head_dim · partial_rotary_factor)
//   rope.freq_base / rope.freq_base_swa (10000)      θ of global / window layers
//   attention.shared_kv_layers        S (0)          the last S layers compute no K/V of their own
//   embedding_length_per_layer_input  P (0)          per-layer embeddings (E2B/E4B), below
//   feed_forward_length               n | n[L]       MLP width per layer (double-wide on shared layers
//                                                    when use_double_wide_mlp)
//   final_logit_softcapping           c (absent: 0)  logits become c·tanh(z/c)
//   attention.layer_norm_rms_epsilon                 ε of every RMSNorm
//   expert_count > 0, blk.N.ffn_gate_inp             mixture of experts (26B-A4B): not this family
//
// Per layer ℓ (window layers: sliding_window_pattern[ℓ] true):
//   heads        head_count[ℓ]
//   kvHeads      head_count_kv[ℓ]
//   headDim      key_length_swa on window layers, key_length on global ones (E2B: 256 / 512)
//   window       W on window layers, none on global ones
//   RoPE         NeoX pairs (i, i + dims/2); window layers: θ = freq_base_swa, dims = dimension_count_swa,
//                no factors; global layers: θ = freq_base, dims = dimension_count (= headDim), and the
//                frequency of pair i divided by rope_freqs[i] (one tensor `rope_freqs.weight` [headDim/2]
//                for every global layer). The converter writes 1 for the first
//                headDim·partial_rotary_factor/2 pairs and 1e30 for the rest: "proportional" RoPE,
//                which rotates a quarter of the head at θ^(−2i/headDim) and leaves the other pairs
//                (nearly exactly) unrotated, the pairs still spanning the whole head.
//   scale        1 (no 1/√headDim: q and k are RMS-normed per head instead)
//   q            q_norm(rms) · attn_q_norm, then RoPE
//   k, v         own K/V when ℓ < L − S: k = x·W_k, v = x·W_v, or v = k (before k's norm) when the layer
//                has no attn_v tensor (31B's global layers, "attention_k_eq_v"); k = rms(k) · attn_k_norm
//                then RoPE; v = rms(v) WITHOUT a weight (no tensor)
//   KV sharing   ℓ ≥ L − S has no attn_k/attn_v/attn_k_norm and attends the rows of layer
//                (L − S) − 2 when it is a window layer, (L − S) − 1 when global (llama-model.cpp's reuse
//                callback: the last window layer and the last global layer before the shared block)
//   softcap      none on attention scores
// Block (sandwich, every norm RMS with weight as stored — Gemma 4's converter adds no +1, unlike
// Gemma 2/3's):
//   a = h + post_attention_norm(attn(attn_norm(h)))
//   f = a + post_ffw_norm(down(gelu_tanh(gate(ffn_norm(a))) ⊙ up(ffn_norm(a))))      (GeGLU)
//   with per-layer embeddings (P > 0): f = f + post_norm(proj(gelu_tanh(inp_gate(f)) ⊙ e_ℓ))
//   h' = f · layer_output_scale[ℓ] when the file has blk.ℓ.layer_output_scale (a scalar), else f
// Embedding: h0 = token_embd[id] · √d. Per-layer inputs (P > 0), for every token, once:
//   e = (rms(per_layer_model_proj · h0 / √d, reshaped [L, P]) · per_layer_proj_norm
//        + per_layer_token_embd[id] · √P) / √2;   e_ℓ = e[ℓ]
// Head: logits = softcap_c(output_norm(h_L) · W_out), W_out = output.weight or token_embd (tied).
// Tokenizer: `tokenizer.ggml.model` "gemma4": BPE over raw UTF-8 (no byte-to-unicode map) after
// spaces become ▁, text split only at newline runs, BOS always added (llama-vocab.cpp).
//
// What Longhand runs of it (GEMMA4_FAMILY below): GGUF files and Hugging Face folders
// (Gemma4ForCausalLM, Gemma4ForConditionalGeneration's text model) with every feature above —
// per-layer head dims and KV heads (a layered KV pool, native/kv-pool-layers.js, whose window layers
// keep their window as rings, read by the KV-shared window layers too), proportional RoPE,
// v = k layers, KV-shared layers, layer output scales, per-layer embeddings (the per-layer token rows
// read per chunk like the token table, EmbeddingSpec.perLayerTable), the final soft-cap — on
// the native dense stages (gemma-native.ts with Gemma4Extras; the types with kernels) or
// onnxruntime's (gemma4-graph.ts), under every row
// policy (InfiniGen per layer's shape; the KV-shared layers attend densely under it), with the
// "gemma4" tokenizer (model/tokenizer/bpe.ts). Mixture of experts (26B-A4B): issue 31.
import type { Gemma4Config, ModelHyperparameters } from '../../model/types.ts';
import { GEMMA4_TENSORS, gemma4KvSource } from '../../model/arch/gemma4.ts';
import { LonghandError } from '../../../common/errors.ts';
import type { ModelFamily } from './family.ts';
import { gemma4StageGraph } from './gemma4-graph.ts';
import { createGemmaNativeStages, gemma4LinearNames, type Gemma4Extras } from './gemma-native.ts';
import type { LayerSpec, RopeSpec } from './layer-spec.ts';
import { checkLayerSpecs } from './layer-spec.ts';

export type { Gemma4Config } from '../../model/types.ts';
export { gemma4ConfigFromGguf, gemma4ConfigFromHf, gemma4KvSource } from '../../model/arch/gemma4.ts';

/** What each Gemma 4 layer computes (the header's table), checked for consistency. */
export function gemma4Layers(config: Gemma4Config): LayerSpec[] {
  const specs: LayerSpec[] = [];
  for (let l = 0; l < config.layers; l++) {
    const isWindow = config.windowLayers[l]!;
    const headDim = isWindow ? config.headDimWindow : config.headDimGlobal;
    const rope: RopeSpec = isWindow
      ? { base: config.ropeBaseWindow, dims: config.ropeDimsWindow, layout: 'neox', scaling: undefined }
      : { base: config.ropeBaseGlobal, dims: config.ropeDimsGlobal, layout: 'neox', scaling: undefined, ...(config.ropeFreqFactors ? { freqFactors: config.ropeFreqFactors } : {}) };
    const kvSource = gemma4KvSource(config, l);
    specs.push({
      attention: {
        kind: 'attention',
        heads: config.heads[l]!,
        kvHeads: config.kvHeads[l]!,
        headDim,
        scale: 1,
        window: isWindow ? config.window : undefined,
        sinks: false,
        rope,
        qkNorm: true,
        softcap: 0,
        ...(kvSource !== undefined ? { kvSource } : {}),
      },
      ffn: { kind: 'dense', size: config.ffnSize[l]!, gated: true, activation: 'gelu_tanh' },
      norm: { kind: 'rms', placement: 'sandwich', eps: config.normEps },
    });
  }
  checkLayerSpecs(specs);
  return specs;
}

/** What the native stages need beyond the layer specs. */
function gemma4Extras(c: Gemma4Config): Gemma4Extras {
  return { valueProjection: c.valueProjection, outputScale: c.outputScale, perLayerInput: c.perLayerInput };
}

/** hyper.gemma4, or a typed error for hyperparameters built without it. */
export function gemma4Hyper(hyper: ModelHyperparameters): Gemma4Config {
  if (hyper.gemma4 === undefined) throw new LonghandError('MODEL_BAD_VALUE', `${hyper.family}: the Gemma 4 hyperparameters (layer pattern, head dims, KV sharing) are missing`, { architecture: hyper.architecture });
  return hyper.gemma4;
}

export const GEMMA4_FAMILY: ModelFamily = {
  architecture: 'gemma4',
  name: 'Gemma 4',
  tensors: GEMMA4_TENSORS,
  layers: (hyper) => gemma4Layers(gemma4Hyper(hyper)),
  // llama.cpp: ggml_scale(inpL, sqrtf(n_embd)): the fp32 square root
  embedding: (hyper) => ({
    tokenTable: 'token_embd.weight',
    positions: undefined,
    scale: Math.fround(Math.sqrt(hyper.hiddenSize)),
    ...(gemma4Hyper(hyper).perLayerInput > 0 ? { perLayerTable: 'per_layer_token_embd.weight' } : {}),
  }),
  contextLimit: () => undefined,
  policyRefusal: () => undefined,
  onnxStage: (w, s, opts) => {
    const c = gemma4Hyper(w.model.hyper);
    return gemma4StageGraph(w, s, opts, gemma4Layers(c), c.valueProjection, c.outputScale, c.finalSoftcap, c.perLayerInput);
  },
  // Gemma's native stages with what Gemma 4 adds (gemma-native.ts Gemma4Extras; native/src/dense_stage.h)
  nativeStages: {
    kind: 'native',
    linearNames: (model) => {
      const c = gemma4Hyper(model.hyper);
      return gemma4LinearNames(model, gemma4Layers(c), gemma4Extras(c));
    },
    create: (weights, options) => {
      const c = gemma4Hyper(weights.model.hyper);
      return createGemmaNativeStages(weights, options, gemma4Layers(c), c.finalSoftcap, gemma4Extras(c));
    },
  },
};
