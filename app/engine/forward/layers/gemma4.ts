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
import { ModelFileError } from '../../../common/errors.ts';
import type { LayerSpec, RopeSpec } from './layer-spec.ts';
import { checkLayerSpecs } from './layer-spec.ts';

/** What a Gemma 4 file says, per layer where the file can vary it (GGUF keys above). */
export interface Gemma4Config {
  readonly layers: number;
  readonly hiddenSize: number;
  /** [layer] true: a sliding-window layer */
  readonly windowLayers: readonly boolean[];
  readonly window: number;
  /** [layer] query heads */
  readonly heads: readonly number[];
  /** [layer] KV heads */
  readonly kvHeads: readonly number[];
  readonly headDimGlobal: number;
  readonly headDimWindow: number;
  readonly ropeBaseGlobal: number;
  readonly ropeBaseWindow: number;
  /** rotated dims of a global layer's head (the whole head: rope_freqs does the partial rotation) */
  readonly ropeDimsGlobal: number;
  readonly ropeDimsWindow: number;
  /** [ropeDimsGlobal/2] rope_freqs: the global layers' per-pair frequency divisors, or undefined (all 1) */
  readonly ropeFreqFactors: readonly number[] | undefined;
  /** S: the last S layers read an earlier layer's K/V */
  readonly sharedKvLayers: number;
  /** P: width of the per-layer embedding (0: none) */
  readonly perLayerInput: number;
  /** [layer] MLP width */
  readonly ffnSize: readonly number[];
  /** c of the final logit soft-cap (0: none) */
  readonly finalSoftcap: number;
  readonly normEps: number;
}

/**
 * The layer whose K/V a KV-shared layer ℓ reads (llama-model.cpp's reuse rule): the last window
 * layer before the shared block for a window layer (first − 2), the last global one for a global
 * layer (first − 1), first = L − S. Undefined for a layer with its own K/V.
 */
export function gemma4KvSource(config: Pick<Gemma4Config, 'layers' | 'sharedKvLayers' | 'windowLayers'>, layer: number): number | undefined {
  const first = config.layers - config.sharedKvLayers;
  if (layer < first) return undefined;
  return first - (config.windowLayers[layer] ? 2 : 1);
}

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

/** GGUF metadata as the reader gives it (numbers, typed arrays, boolean[]). */
export type Gemma4Metadata = ReadonlyMap<string, unknown>;

/**
 * Gemma4Config from a `gemma4` GGUF's metadata and its rope_freqs.weight values (undefined when the
 * file has none). ModelFileError naming the key for a value llama.cpp would refuse or that this
 * family does not run (mixture of experts: issue 31).
 */
export function gemma4ConfigFromGguf(file: string, meta: Gemma4Metadata, ropeFreqs: Float32Array | undefined): Gemma4Config {
  const k = (suffix: string): string => `gemma4.${suffix}`;
  const bad = (key: string, message: string): never => {
    throw new ModelFileError('MODEL_BAD_VALUE', file, `metadata "${key}" ${message}`, { key });
  };
  const num = (key: string, fallback?: number): number => {
    const v = meta.get(key);
    if (v === undefined) {
      if (fallback !== undefined) return fallback;
      throw new ModelFileError('MODEL_MISSING_METADATA', file, `metadata key "${key}" is missing`, { key });
    }
    const n = typeof v === 'bigint' ? Number(v) : v;
    if (typeof n !== 'number' || !Number.isFinite(n) || n < 0) return bad(key, `should be a non-negative number, not ${String(v)}`);
    return n;
  };
  const int = (key: string, fallback?: number): number => {
    const n = num(key, fallback);
    if (!Number.isInteger(n)) bad(key, `should be an integer, not ${n}`);
    return n;
  };
  const layers = int(k('block_count'));
  const perLayer = (key: string, fallback?: number): number[] => {
    const v = meta.get(key);
    if (v !== undefined && typeof v !== 'number' && typeof v !== 'bigint') {
      const arr = Array.from(v as ArrayLike<number>, Number);
      if (arr.length !== layers) bad(key, `has ${arr.length} entries for ${layers} layers`);
      if (!arr.every((x) => Number.isInteger(x) && x > 0)) bad(key, 'should hold positive integers');
      return arr;
    }
    const n = int(key, fallback);
    if (n <= 0) bad(key, `is ${n}`);
    return new Array<number>(layers).fill(n);
  };

  const experts = int(k('expert_count'), 0);
  if (experts > 0) {
    throw new ModelFileError('MODEL_UNSUPPORTED_ARCHITECTURE', file, `Gemma 4 mixture-of-experts models (26B-A4B: ${experts} experts) are not supported yet; Longhand runs the dense Gemma 4 models (E2B, E4B, 31B)`, { key: k('expert_count'), experts });
  }
  const pattern = meta.get(k('attention.sliding_window_pattern'));
  if (!Array.isArray(pattern) || pattern.length !== layers || !pattern.every((b) => typeof b === 'boolean')) {
    bad(k('attention.sliding_window_pattern'), `should be ${layers} booleans (one per layer)`);
  }
  const windowLayers = pattern as boolean[];
  const headDimGlobal = int(k('attention.key_length'));
  const headDimWindow = int(k('attention.key_length_swa'));
  if (int(k('attention.value_length'), headDimGlobal) !== headDimGlobal) bad(k('attention.value_length'), `differs from key_length ${headDimGlobal} (llama.cpp: Gemma 4 requires n_embd_head_k == n_embd_head_v)`);
  if (int(k('attention.value_length_swa'), headDimWindow) !== headDimWindow) bad(k('attention.value_length_swa'), `differs from key_length_swa ${headDimWindow}`);
  const ropeDimsGlobal = int(k('rope.dimension_count'), headDimGlobal);
  const ropeDimsWindow = int(k('rope.dimension_count_swa'), ropeDimsGlobal);
  if (ropeDimsGlobal % 2 !== 0 || ropeDimsGlobal > headDimGlobal || ropeDimsGlobal === 0) bad(k('rope.dimension_count'), `is ${ropeDimsGlobal} for a head of ${headDimGlobal}`);
  if (ropeDimsWindow % 2 !== 0 || ropeDimsWindow > headDimWindow || ropeDimsWindow === 0) bad(k('rope.dimension_count_swa'), `is ${ropeDimsWindow} for a head of ${headDimWindow}`);
  const scaling = meta.get(k('rope.scaling.type'));
  if (scaling !== undefined && scaling !== 'none') bad(k('rope.scaling.type'), `is "${String(scaling)}": Gemma 4's RoPE scaling is its rope_freqs factors`);
  let ropeFreqFactors: number[] | undefined;
  if (ropeFreqs !== undefined) {
    if (ropeFreqs.length !== ropeDimsGlobal / 2) {
      throw new ModelFileError('MODEL_SHAPE_MISMATCH', file, `rope_freqs.weight has ${ropeFreqs.length} values for ${ropeDimsGlobal / 2} rotated pairs of the global layers`, { tensor: 'rope_freqs.weight' });
    }
    ropeFreqFactors = Array.from(ropeFreqs);
    if (!ropeFreqFactors.every((f) => f > 0)) throw new ModelFileError('MODEL_BAD_VALUE', file, 'rope_freqs.weight holds a factor <= 0 or NaN', { tensor: 'rope_freqs.weight' });
  }
  const sharedKvLayers = int(k('attention.shared_kv_layers'), 0);
  if (sharedKvLayers > 0 && layers - sharedKvLayers < 2) bad(k('attention.shared_kv_layers'), `is ${sharedKvLayers} of ${layers} layers: the shared layers need a window and a global layer before them`);
  const heads = perLayer(k('attention.head_count'));
  const config: Gemma4Config = {
    layers,
    hiddenSize: int(k('embedding_length')),
    windowLayers,
    window: int(k('attention.sliding_window')),
    heads,
    kvHeads: meta.has(k('attention.head_count_kv')) ? perLayer(k('attention.head_count_kv')) : heads,
    headDimGlobal,
    headDimWindow,
    ropeBaseGlobal: num(k('rope.freq_base'), 10000),
    ropeBaseWindow: num(k('rope.freq_base_swa'), 10000),
    ropeDimsGlobal,
    ropeDimsWindow,
    ropeFreqFactors,
    sharedKvLayers,
    perLayerInput: int(k('embedding_length_per_layer_input'), 0),
    ffnSize: perLayer(k('feed_forward_length')),
    finalSoftcap: num(k('final_logit_softcapping'), 0),
    normEps: num(k('attention.layer_norm_rms_epsilon')),
  };
  if (config.window === 0) bad(k('attention.sliding_window'), 'is 0');
  for (let l = 0; l < layers; l++) {
    if (config.heads[l]! % config.kvHeads[l]! !== 0) bad(k('attention.head_count_kv'), `layer ${l}: ${config.heads[l]} query heads cannot be grouped over ${config.kvHeads[l]} KV heads`);
  }
  // the shared layers read the last window / global layer before them: both must exist
  for (let l = layers - sharedKvLayers; l < layers; l++) {
    const src = gemma4KvSource(config, l)!;
    if (windowLayers[src] !== windowLayers[l]) bad(k('attention.sliding_window_pattern'), `layer ${l} would read the K/V of layer ${src}, which is a ${windowLayers[src] ? 'window' : 'global'} layer`);
  }
  return config;
}

/**
 * Gemma4Config from a Hugging Face config.json (its `text_config` for Gemma4ForConditionalGeneration),
 * as conversion/gemma.py reads it: layer_types, head_dim / global_head_dim, num_key_value_heads /
 * num_global_key_value_heads, rope_parameters.{sliding_attention, full_attention} (the latter
 * "proportional" with partial_rotary_factor, from which the rope_freqs factors are derived exactly as
 * the converter writes them), num_kv_shared_layers, hidden_size_per_layer_input, use_double_wide_mlp.
 */
export function gemma4ConfigFromHf(file: string, json: Record<string, unknown>): Gemma4Config {
  const c = (typeof json.text_config === 'object' && json.text_config !== null ? json.text_config : json) as Record<string, unknown>;
  const bad = (key: string, message: string): never => {
    throw new ModelFileError('MODEL_BAD_VALUE', file, `config "${key}" ${message}`, { key });
  };
  const int = (key: string, fallback?: number): number => {
    const v = c[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) return v === undefined ? bad(key, 'is missing') : bad(key, `should be a non-negative integer, not ${JSON.stringify(v)}`);
    return v;
  };
  const num = (obj: Record<string, unknown>, key: string, fallback: number): number => {
    const v = obj[key] ?? fallback;
    if (typeof v !== 'number' || !(v >= 0)) return bad(key, `should be a number, not ${JSON.stringify(v)}`);
    return v;
  };
  if (c.enable_moe_block === true || int('num_experts', 0) > 0) {
    throw new ModelFileError('MODEL_UNSUPPORTED_ARCHITECTURE', file, 'Gemma 4 mixture-of-experts models (26B-A4B) are not supported yet; Longhand runs the dense Gemma 4 models (E2B, E4B, 31B)', { key: 'num_experts' });
  }
  const layers = int('num_hidden_layers');
  const types = c.layer_types;
  if (!Array.isArray(types) || types.length !== layers || !types.every((t) => t === 'sliding_attention' || t === 'full_attention')) {
    return bad('layer_types', `should list ${layers} of "sliding_attention" / "full_attention"`);
  }
  const windowLayers = types.map((t) => t === 'sliding_attention');
  const headDimWindow = int('head_dim');
  const headDimGlobal = int('global_head_dim', headDimWindow);
  const heads = int('num_attention_heads');
  const kvWindow = int('num_key_value_heads', heads);
  const kvGlobal = int('num_global_key_value_heads', kvWindow);
  const rp = (typeof c.rope_parameters === 'object' && c.rope_parameters !== null ? c.rope_parameters : {}) as Record<string, Record<string, unknown> | undefined>;
  const full = rp.full_attention ?? {};
  const sliding = rp.sliding_attention ?? {};
  let ropeFreqFactors: number[] | undefined;
  if (full.rope_type === 'proportional') {
    // conversion/gemma.py generate_extra_tensors: 1 on the rotated pairs, 1e30 on the rest, as the
    // float32 tensor it writes holds them (1e30 rounds to 1.0000000150474662e30)
    const rotated = Math.trunc((headDimGlobal * num(full, 'partial_rotary_factor', 1)) / 2);
    ropeFreqFactors = Array.from({ length: headDimGlobal / 2 }, (_, i) => (i < rotated ? 1 : Math.fround(1e30)));
  } else if (full.rope_type !== undefined && full.rope_type !== 'default') {
    bad('rope_parameters.full_attention.rope_type', `is "${String(full.rope_type)}" (Gemma 4 uses "proportional")`);
  }
  const shared = int('num_kv_shared_layers', 0);
  const ffn = int('intermediate_size');
  const doubleWide = c.use_double_wide_mlp === true;
  const softcap = c.final_logit_softcapping;
  const config: Gemma4Config = {
    layers,
    hiddenSize: int('hidden_size'),
    windowLayers,
    window: int('sliding_window'),
    heads: new Array<number>(layers).fill(heads),
    kvHeads: windowLayers.map((w) => (w ? kvWindow : kvGlobal)),
    headDimGlobal,
    headDimWindow,
    ropeBaseGlobal: num(full, 'rope_theta', 1_000_000),
    ropeBaseWindow: num(sliding, 'rope_theta', 10000),
    ropeDimsGlobal: headDimGlobal,
    ropeDimsWindow: Math.trunc(headDimWindow * num(sliding, 'partial_rotary_factor', 1)),
    ropeFreqFactors,
    sharedKvLayers: shared,
    perLayerInput: int('hidden_size_per_layer_input', 0),
    ffnSize: Array.from({ length: layers }, (_, l) => (doubleWide && l >= layers - shared ? 2 * ffn : ffn)),
    finalSoftcap: typeof softcap === 'number' ? softcap : 0,
    normEps: num(c, 'rms_norm_eps', 1e-6),
  };
  if (heads % kvWindow !== 0 || heads % kvGlobal !== 0) bad('num_key_value_heads', `${heads} query heads cannot be grouped over ${kvWindow} / ${kvGlobal} KV heads`);
  return config;
}
