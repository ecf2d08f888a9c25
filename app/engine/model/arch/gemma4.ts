// Gemma 4 (GGUF `gemma4`, Hugging Face Gemma4ForCausalLM / Gemma4ForConditionalGeneration's text
// model): its hyperparameters from the GGUF keys (and rope_freqs) or config.json, and its tensors.
// What they mean per layer: forward/layers/gemma4.ts's header (llama.cpp's gemma4 written down).
import { ModelFileError } from '../../../common/errors.ts';
import type { Gemma4Config, ModelHyperparameters, TensorView } from '../types.ts';
import { mapName, type ArchTensorTable, type ExpectedTensor, type NameTables } from './base.ts';

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
    // the loader sets these from the tensors the file has (gemma4WithTensors)
    valueProjection: Array.from({ length: layers }, (_, l) => l < layers - sharedKvLayers),
    outputScale: false,
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
    valueProjection: Array.from({ length: layers }, (_, l) => l < layers - shared),
    outputScale: false,
  };
  if (heads % kvWindow !== 0 || heads % kvGlobal !== 0) bad('num_key_value_heads', `${heads} query heads cannot be grouped over ${kvWindow} / ${kvGlobal} KV heads`);
  return config;
}

/**
 * The config with what the file's tensors say: which layers have their own attn_v (31B's global
 * layers have none: v = k), and whether every layer has layer_output_scale. A file where only some
 * layers have it is refused (llama.cpp would scale those only; no converter writes that).
 */
export function gemma4WithTensors(file: string, config: Gemma4Config, has: (tensor: string) => boolean): Gemma4Config {
  const owners = config.layers - config.sharedKvLayers;
  const scales = Array.from({ length: config.layers }, (_, l) => has(`blk.${l}.layer_output_scale.weight`));
  if (scales.some((x) => x !== scales[0])) throw new ModelFileError('MODEL_UNSUPPORTED_ARCHITECTURE', file, 'blk.N.layer_output_scale.weight is in some layers only', { tensor: 'layer_output_scale.weight' });
  return { ...config, valueProjection: Array.from({ length: config.layers }, (_, l) => l < owners && has(`blk.${l}.attn_v.weight`)), outputScale: scales[0] === true };
}

/** Every tensor a Gemma 4 model needs, at each layer's own shape (with per-layer embeddings when P > 0). */
function gemma4Expected(hyper: ModelHyperparameters): ExpectedTensor[] {
  const c = hyper.gemma4;
  if (c === undefined) throw new ModelFileError('MODEL_BAD_VALUE', hyper.family, 'the Gemma 4 hyperparameters are missing', {});
  const { hiddenSize: d, vocabSize: vocab } = hyper;
  const out: ExpectedTensor[] = [{ name: 'token_embd.weight', shape: [vocab, d] }];
  if (c.ropeFreqFactors !== undefined) out.push({ name: 'rope_freqs.weight', shape: [c.ropeDimsGlobal / 2] });
  const P = c.perLayerInput;
  if (P > 0) {
    out.push(
      { name: 'per_layer_token_embd.weight', shape: [vocab, c.layers * P] },
      { name: 'per_layer_model_proj.weight', shape: [c.layers * P, d] },
      { name: 'per_layer_proj_norm.weight', shape: [P] },
    );
  }
  for (let l = 0; l < c.layers; l++) {
    const blk = `blk.${l}.`;
    const hd = c.windowLayers[l] ? c.headDimWindow : c.headDimGlobal;
    const q = c.heads[l]! * hd;
    const kv = c.kvHeads[l]! * hd;
    const own = gemma4KvSource(c, l) === undefined;
    const ffn = c.ffnSize[l]!;
    out.push(
      { name: `${blk}attn_norm.weight`, shape: [d] },
      { name: `${blk}attn_q.weight`, shape: [q, d] },
      { name: `${blk}attn_q_norm.weight`, shape: [hd] },
      ...(own ? [{ name: `${blk}attn_k.weight`, shape: [kv, d] }, { name: `${blk}attn_k_norm.weight`, shape: [hd] }] : []),
      ...(c.valueProjection[l] ? [{ name: `${blk}attn_v.weight`, shape: [kv, d] }] : []),
      { name: `${blk}attn_output.weight`, shape: [d, q] },
      { name: `${blk}post_attention_norm.weight`, shape: [d] },
      { name: `${blk}ffn_norm.weight`, shape: [d] },
      { name: `${blk}ffn_gate.weight`, shape: [ffn, d] },
      { name: `${blk}ffn_up.weight`, shape: [ffn, d] },
      { name: `${blk}ffn_down.weight`, shape: [d, ffn] },
      { name: `${blk}post_ffw_norm.weight`, shape: [d] },
      ...(c.outputScale ? [{ name: `${blk}layer_output_scale.weight`, shape: [1] }] : []),
      ...(P > 0 ? [{ name: `${blk}inp_gate.weight`, shape: [P, d] }, { name: `${blk}proj.weight`, shape: [d, P] }, { name: `${blk}post_norm.weight`, shape: [d] }] : []),
    );
  }
  out.push({ name: 'output_norm.weight', shape: [d] });
  if (!hyper.tiedEmbeddings) out.push({ name: 'output.weight', shape: [vocab, d] });
  return out;
}

/**
 * Hugging Face names of the text model (Gemma4ForCausalLM: model.layers.N.…; Gemma4ForConditionalGeneration:
 * model.language_model.layers.N.…; the vision and audio towers map to nothing and are left out).
 * Norm weights are stored as the GGUF holds them (Gemma 4's RMSNorm multiplies by w, not 1 + w:
 * the converter's norm_shift is 0); v's norm has no weight; layer_scalar is the layer output scale;
 * the per-layer embeddings (E2B/E4B) are tensor_mapping.py's gemma3n names, converted unchanged.
 */
const GEMMA4_NAMES: NameTables = {
  prefixes: ['model.', 'language_model.'],
  global: {
    'embed_tokens.weight': 'token_embd.weight',
    'norm.weight': 'output_norm.weight',
    'lm_head.weight': 'output.weight',
    'embed_tokens_per_layer.weight': 'per_layer_token_embd.weight',
    'per_layer_model_projection.weight': 'per_layer_model_proj.weight',
    'per_layer_projection_norm.weight': 'per_layer_proj_norm.weight',
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
    layer_scalar: 'layer_output_scale.weight',
    'per_layer_input_gate.weight': 'inp_gate.weight',
    'per_layer_projection.weight': 'proj.weight',
    'post_per_layer_input_norm.weight': 'post_norm.weight',
  },
};

export const GEMMA4_TENSORS: ArchTensorTable = {
  architecture: 'gemma4',
  canonicalName: (hfName) => mapName(GEMMA4_NAMES, hfName),
  expectedTensors: gemma4Expected,
};

/**
 * ModelHyperparameters of a Gemma 4 GGUF: the shared fields (query heads, the largest KV-head count,
 * the global head dim, the widest MLP) for code that asks the model as a whole, and `gemma4` with
 * every layer's own, per-layer embeddings (E2B/E4B) included.
 */
export function gemma4Hyperparameters(file: string, meta: Gemma4Metadata, ropeFreqs: Float32Array | undefined, has: (tensor: string) => boolean, base: { contextLength: number; vocabSize: number }): ModelHyperparameters {
  const c = gemma4WithTensors(file, gemma4ConfigFromGguf(file, meta, ropeFreqs), has);
  return gemma4Hyper(file, c, { ...base, tiedEmbeddings: !has('output.weight') }, { heads: 'gemma4.attention.head_count' });
}

/**
 * The hyperparameters around a Gemma4Config, refusing what the engine does not run yet (`keys`: how
 * the file names those values; `perLayerInput`: the key of per-layer embeddings where that format's
 * are not read yet).
 */
function gemma4Hyper(file: string, c: Gemma4Config, base: { contextLength: number; vocabSize: number; tiedEmbeddings: boolean }, keys: { perLayerInput?: string; heads: string }): ModelHyperparameters {
  if (c.perLayerInput > 0 && keys.perLayerInput !== undefined) {
    throw new ModelFileError('MODEL_UNSUPPORTED_ARCHITECTURE', file, `Gemma 4 folders with per-layer embeddings (E2B, E4B: ${keys.perLayerInput} ${c.perLayerInput}) are not read yet; convert them to GGUF, or use a Gemma 4 folder without them (31B)`, { key: keys.perLayerInput });
  }
  if (!c.heads.every((h) => h === c.heads[0])) throw new ModelFileError('MODEL_UNSUPPORTED_ARCHITECTURE', file, `${keys.heads} differs between layers`, { key: keys.heads });
  return {
    architecture: 'gemma4',
    family: 'gemma4',
    hiddenSize: c.hiddenSize,
    layers: c.layers,
    heads: c.heads[0]!,
    kvHeads: Math.max(...c.kvHeads),
    headDim: c.headDimGlobal,
    ffnSize: Math.max(...c.ffnSize),
    vocabSize: base.vocabSize,
    contextLength: base.contextLength,
    normEps: c.normEps,
    ropeTheta: c.ropeBaseGlobal,
    ropeLayout: 'neox',
    qkvBias: false,
    tiedEmbeddings: base.tiedEmbeddings,
    gemma4: c,
  };
}

/**
 * ModelHyperparameters of a Hugging Face Gemma 4 config.json (Gemma4ForCausalLM, or the text_config
 * of Gemma4ForConditionalGeneration). Which layers have v_proj and layer_scalar is settled from
 * the checkpoint's tensors (gemma4HfTensors).
 */
export function gemma4HfHyperparameters(file: string, json: Record<string, unknown>): ModelHyperparameters {
  const c = (typeof json.text_config === 'object' && json.text_config !== null ? json.text_config : json) as Record<string, unknown>;
  const positive = (key: string): number => {
    const v = c[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) throw new ModelFileError('MODEL_BAD_VALUE', file, `config "${key}" should be a positive integer, not ${JSON.stringify(v)}`, { key });
    return v;
  };
  const config = gemma4ConfigFromHf(file, json);
  return gemma4Hyper(file, config, { contextLength: positive('max_position_embeddings'), vocabSize: positive('vocab_size'), tiedEmbeddings: c.tie_word_embeddings !== false }, { heads: 'num_attention_heads' });
}

/**
 * A Hugging Face Gemma 4 checkpoint's canonical tensors as the converter turns them into a GGUF:
 * rope_freqs.weight added from the config (generate_extra_tensors: 1 on the rotated pairs of a
 * global head, 1e30 on the rest), and the hyperparameters settled by the tensors present (v_proj
 * per layer, layer_scalar, lm_head).
 */
export function gemma4HfTensors(file: string, hyper: ModelHyperparameters, tensors: Map<string, TensorView>): { hyper: ModelHyperparameters; tensors: Map<string, TensorView> } {
  const c = gemma4WithTensors(file, hyper.gemma4!, (t) => tensors.has(t));
  const out = new Map(tensors);
  if (c.ropeFreqFactors !== undefined && !out.has('rope_freqs.weight')) {
    const values = Float32Array.from(c.ropeFreqFactors); // [headDimGlobal/2]
    out.set('rope_freqs.weight', {
      name: 'rope_freqs.weight',
      dtype: 'F32',
      shape: [values.length],
      elements: values.length,
      bytes: () => new Uint8Array(values.buffer.slice(0)),
      toFloat32: () => values.slice(),
    });
  }
  return { hyper: { ...hyper, tiedEmbeddings: !out.has('output.weight'), gemma4: c }, tensors: out };
}
