// config.json of Gemma2ForCausalLM / Gemma3ForCausalLM (text-only) → ModelHyperparameters with
// their GemmaHyperparameters, meaning what llama.cpp computes from the GGUF the converter writes
// from the same folder (model/gguf/gemma-keys.ts):
//   sliding_window, and which layers use it: layer_types ('sliding_attention' | 'full_attention')
//     where the config lists them, else sliding_window_pattern (Gemma 3, default 6) or every other
//     layer from layer 0 (Gemma 2)
//   rope_theta / rope_scaling for the global layers; rope_local_base_freq (Gemma 3, default
//     10 000, unscaled) for the local ones; newer configs nest both in rope_parameters
//     { full_attention, sliding_attention }
//   query_pre_attn_scalar → scale 1/√query_pre_attn_scalar
//   attn_logit_softcapping / final_logit_softcapping (null: none)
//   hidden_activation gelu_pytorch_tanh (the tanh GELU of GeGLU); Gemma 3 has q/k norms
import type { GemmaHyperparameters, ModelHyperparameters, RopeScaling } from '../types.ts';
import { slidingPattern } from '../gguf/gemma-keys.ts';
import { ConfigReader, ropeScaling } from './config.ts';

export function gemmaHfHyper(read: ConfigReader, family: 'gemma2' | 'gemma3'): ModelHyperparameters {
  const gemma2 = family === 'gemma2';
  const hiddenSize = read.positiveInt('hidden_size');
  const heads = read.positiveInt('num_attention_heads');
  const kvHeads = read.positiveInt('num_key_value_heads', heads);
  if (heads % kvHeads !== 0) throw read.bad('num_key_value_heads', `a divisor of num_attention_heads (${heads})`, kvHeads);
  const headDim = read.positiveInt('head_dim', 256);
  const layers = read.positiveInt('num_hidden_layers');
  const act = read.string('hidden_activation', read.string('hidden_act', 'gelu_pytorch_tanh'));
  if (act !== 'gelu_pytorch_tanh') read.unsupported(`hidden_activation '${act}' (Gemma's GeGLU is gelu_pytorch_tanh; llama.cpp computes that for every Gemma file)`);
  if (read.bool('attention_bias', false)) read.unsupported('attention_bias: true');

  // RoPE: the flat keys, or rope_parameters { full_attention, sliding_attention } of newer configs
  const nested = read.optional('rope_parameters');
  let globalTheta: number;
  let globalScaling: RopeScaling | undefined;
  let localTheta: number;
  let localScaling: RopeScaling | undefined;
  if (nested !== undefined && nested !== null && typeof nested === 'object' && 'full_attention' in nested) {
    const params = nested as Record<string, unknown>;
    const full = new ConfigReader({ rope_scaling: params.full_attention, ...(params.full_attention as object) }, read.file, 'rope_parameters.full_attention.');
    const sliding = new ConfigReader({ rope_scaling: params.sliding_attention ?? null, ...((params.sliding_attention as object | undefined) ?? {}) }, read.file, 'rope_parameters.sliding_attention.');
    globalTheta = full.positiveNumber('rope_theta', 1_000_000);
    globalScaling = ropeScaling(full);
    localTheta = sliding.positiveNumber('rope_theta', 10000);
    localScaling = ropeScaling(sliding);
  } else {
    globalTheta = read.positiveNumber('rope_theta', 10000);
    globalScaling = ropeScaling(read);
    localTheta = gemma2 ? globalTheta : read.positiveNumber('rope_local_base_freq', 10000);
    localScaling = gemma2 ? globalScaling : undefined;
  }

  const window = read.positiveInt('sliding_window', 4096);
  let slidingLayers: boolean[];
  const types = read.optional('layer_types');
  if (Array.isArray(types)) {
    if (types.length !== layers || !types.every((t) => t === 'sliding_attention' || t === 'full_attention')) throw read.bad('layer_types', `${layers} entries, each 'sliding_attention' or 'full_attention'`, types);
    slidingLayers = types.map((t) => t === 'sliding_attention');
  } else {
    slidingLayers = slidingPattern(layers, gemma2 ? 2 : read.positiveInt('sliding_window_pattern', 6));
  }
  const softcap = (key: string): number => (read.optional(key) === undefined || read.optional(key) === null ? 0 : read.positiveNumber(key));
  const gemma: GemmaHyperparameters = {
    window,
    slidingLayers,
    localRope: { theta: localTheta, scaling: localScaling },
    attentionScale: 1 / Math.sqrt(read.positiveNumber('query_pre_attn_scalar', headDim)),
    attnSoftcap: gemma2 ? softcap('attn_logit_softcapping') : 0,
    finalSoftcap: softcap('final_logit_softcapping'),
    qkNorm: !gemma2,
  };
  return {
    architecture: family,
    family,
    hiddenSize,
    layers,
    heads,
    kvHeads,
    headDim,
    ffnSize: read.positiveInt('intermediate_size'),
    vocabSize: read.positiveInt('vocab_size'),
    contextLength: read.positiveInt('max_position_embeddings'),
    normEps: read.positiveNumber('rms_norm_eps', 1e-6),
    ropeTheta: globalTheta,
    ropeLayout: 'neox',
    ...(globalScaling === undefined ? {} : { ropeScaling: globalScaling }),
    qkvBias: false,
    tiedEmbeddings: read.bool('tie_word_embeddings', true),
    gemma,
  };
}
