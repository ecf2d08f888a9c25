// config.json of a Hugging Face model folder → ModelHyperparameters.
// Supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (llama family, HF rotate_half
// RoPE → ropeLayout 'neox'), Qwen3ForCausalLM (the same keys, run as Architecture 'qwen3': per-head
// q/k norm, head_dim as stated) and OPTForCausalLM (pre-LayerNorm, ReLU, learned positions offset by 2).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ModelFileError } from '../../../common/errors.ts';
import type { ModelHyperparameters, RopeScaling } from '../types.ts';
import { gemma4HfHyperparameters } from '../arch/gemma4.ts';
import { gemmaHfHyper } from './gemma-config.ts';
import { qwen3moeHfExperts } from './qwen3moe-config.ts';

export const CONFIG_FILE = 'config.json';

/** HF architecture class → family name. */
export const SUPPORTED_ARCHITECTURES: Readonly<Record<string, string>> = {
  LlamaForCausalLM: 'llama',
  MistralForCausalLM: 'mistral',
  Qwen2ForCausalLM: 'qwen2',
  Qwen3ForCausalLM: 'qwen3',
  Qwen3MoeForCausalLM: 'qwen3moe',
  OPTForCausalLM: 'opt',
  Phi3ForCausalLM: 'phi3',
  Gemma2ForCausalLM: 'gemma2',
  Gemma3ForCausalLM: 'gemma3',
  Gemma4ForCausalLM: 'gemma4',
  Gemma4ForConditionalGeneration: 'gemma4',
};

type Config = Record<string, unknown>;

/**
 * Why a folder whose config.json names class `architecture` cannot run, naming it and what
 * Longhand runs (from SUPPORTED_ARCHITECTURES), or undefined when it can.
 */
export function hfArchitectureRefusal(architecture: string): string | undefined {
  if (Object.hasOwn(SUPPORTED_ARCHITECTURES, architecture)) return undefined;
  return `architecture ${architecture} is not supported (Longhand runs ${Object.keys(SUPPORTED_ARCHITECTURES).join(', ')})`;
}

/** Reads and maps `<folder>/config.json`. */
export function readHfConfig(folder: string): ModelHyperparameters {
  let text: string;
  try {
    text = readFileSync(join(folder, CONFIG_FILE), 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unknown';
    throw new ModelFileError('MODEL_NOT_FOUND', CONFIG_FILE, code === 'ENOENT' ? `is missing from ${folder}` : `cannot be read (${code})`, { folder });
  }
  return parseHfConfig(text);
}

/** Maps the text of a config.json; `file` names it in errors. */
export function parseHfConfig(text: string, file: string = CONFIG_FILE): ModelHyperparameters {
  let config: unknown;
  try {
    config = JSON.parse(text);
  } catch (error) {
    throw new ModelFileError('MODEL_BAD_HEADER', file, `is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new ModelFileError('MODEL_BAD_HEADER', file, 'must be a JSON object');
  }
  const read = new ConfigReader(config as Config, file);
  const architectures = read.required('architectures');
  const architecture = Array.isArray(architectures) && typeof architectures[0] === 'string' ? architectures[0] : undefined;
  if (architecture === undefined) throw read.bad('architectures', 'a list of class names');
  const family = Object.hasOwn(SUPPORTED_ARCHITECTURES, architecture) ? SUPPORTED_ARCHITECTURES[architecture] : undefined;
  if (family === undefined) throw new ModelFileError('MODEL_UNSUPPORTED_ARCHITECTURE', file, hfArchitectureRefusal(architecture)!, { architecture });
  if (family === 'gemma2' || family === 'gemma3') return gemmaHfHyper(read, family);
  if (family === 'gemma4') return gemma4HfHyperparameters(file, config as Config);
  return family === 'opt' ? optHyper(read) : family === 'phi3' ? phi3Hyper(read) : llamaHyper(read, family);
}

function llamaHyper(read: ConfigReader, family: string): ModelHyperparameters {
  const hiddenSize = read.positiveInt('hidden_size');
  const heads = read.positiveInt('num_attention_heads');
  const kvHeads = read.positiveInt('num_key_value_heads', heads);
  if (heads % kvHeads !== 0) throw read.bad('num_key_value_heads', `a divisor of num_attention_heads (${heads})`, kvHeads);
  const headDim = read.optional('head_dim') === undefined ? read.divide('hidden_size', hiddenSize, heads) : read.positiveInt('head_dim');
  const act = read.string('hidden_act', 'silu');
  if (act !== 'silu' && act !== 'swish') read.unsupported(`hidden_act '${act}' (the llama family uses silu)`);
  if (read.bool('attention_bias', false) && family !== 'qwen2') read.unsupported('attention_bias: true (bias on every attention projection)');
  if (read.bool('mlp_bias', false)) read.unsupported('mlp_bias: true');
  const scaling = ropeScaling(read);
  return {
    architecture: family === 'qwen3' || family === 'qwen3moe' ? family : 'llama',
    family,
    hiddenSize,
    layers: read.positiveInt('num_hidden_layers'),
    heads,
    kvHeads,
    headDim,
    ffnSize: read.positiveInt('intermediate_size'),
    vocabSize: read.positiveInt('vocab_size'),
    contextLength: read.positiveInt('max_position_embeddings'),
    normEps: read.positiveNumber('rms_norm_eps', 1e-5),
    ropeTheta: read.positiveNumber('rope_theta', 10000),
    ropeLayout: 'neox',
    ...(scaling === undefined ? {} : { ropeScaling: scaling }),
    qkvBias: family === 'qwen2',
    tiedEmbeddings: read.bool('tie_word_embeddings', false),
    ...(family === 'qwen3moe' ? { moe: qwen3moeHfExperts(read) } : {}),
  };
}

export function ropeScaling(read: ConfigReader): RopeScaling | undefined {
  const value = read.optional('rope_scaling');
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object' || Array.isArray(value)) throw read.bad('rope_scaling', 'an object or null', value);
  const scaling = new ConfigReader(value as Config, read.file, 'rope_scaling.');
  const kind = scaling.optional('rope_type') ?? scaling.optional('type');
  if (kind === 'default') return undefined;
  if (kind !== 'llama3' && kind !== 'linear') return read.unsupported(`rope_scaling type ${JSON.stringify(kind)} (Longhand supports llama3 and linear)`);
  const factor = scaling.positiveNumber('factor');
  if (kind === 'linear') return { kind, factor };
  return {
    kind,
    factor,
    lowFreqFactor: scaling.positiveNumber('low_freq_factor'),
    highFreqFactor: scaling.positiveNumber('high_freq_factor'),
    originalContextLength: scaling.positiveInt('original_max_position_embeddings'),
  };
}

/**
 * Phi-3 / Phi-4 (Phi3ForCausalLM), read as convert_hf_to_gguf.py reads it: rotated dimensions
 * int(partial_rotary_factor · hidden_size) // heads; LongRoPE from rope_scaling (type 'longrope'
 * or its old name 'su') with the converter's attention factor √(1 + ln(s)/ln(original)), s =
 * max_position_embeddings / original_max_position_embeddings (1 when s ≤ 1). sliding_window is not
 * run (llama.cpp disables it for phi3, arch/phi3.ts).
 */
function phi3Hyper(read: ConfigReader): ModelHyperparameters {
  const hiddenSize = read.positiveInt('hidden_size');
  const heads = read.positiveInt('num_attention_heads');
  const kvHeads = read.positiveInt('num_key_value_heads', heads);
  if (heads % kvHeads !== 0) throw read.bad('num_key_value_heads', `a divisor of num_attention_heads (${heads})`, kvHeads);
  const headDim = read.divide('hidden_size', hiddenSize, heads);
  const act = read.string('hidden_act', 'silu');
  if (act !== 'silu') read.unsupported(`hidden_act '${act}' (Phi-3 uses silu)`);
  const rotaryFraction = read.positiveNumber('partial_rotary_factor', 1);
  const ropeDims = Math.floor((rotaryFraction * hiddenSize) / heads);
  if (ropeDims % 2 !== 0 || ropeDims > headDim) throw read.bad('partial_rotary_factor', `a fraction giving an even count of at most ${headDim} rotated dimensions`, rotaryFraction);
  const contextLength = read.positiveInt('max_position_embeddings');
  const original = read.positiveInt('original_max_position_embeddings', contextLength);
  const scaling = phi3LongRope(read, contextLength, original, ropeDims);
  return {
    architecture: 'phi3',
    family: 'phi3',
    hiddenSize,
    layers: read.positiveInt('num_hidden_layers'),
    heads,
    kvHeads,
    headDim,
    ffnSize: read.positiveInt('intermediate_size'),
    vocabSize: read.positiveInt('vocab_size'),
    contextLength,
    normEps: read.positiveNumber('rms_norm_eps', 1e-5),
    ropeTheta: read.positiveNumber('rope_theta', 10000),
    ropeLayout: 'neox',
    ...(scaling === undefined ? {} : { ropeScaling: scaling }),
    ...(ropeDims !== headDim ? { ropeDims } : {}),
    qkvBias: false,
    tiedEmbeddings: read.bool('tie_word_embeddings', false),
  };
}

function phi3LongRope(read: ConfigReader, contextLength: number, original: number, ropeDims: number): RopeScaling | undefined {
  const value = read.optional('rope_scaling');
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object' || Array.isArray(value)) throw read.bad('rope_scaling', 'an object or null', value);
  const scaling = new ConfigReader(value as Config, read.file, 'rope_scaling.');
  const kind = scaling.optional('rope_type') ?? scaling.optional('type');
  if (kind === 'default') return undefined;
  if (kind !== 'longrope' && kind !== 'su') return read.unsupported(`rope_scaling type ${JSON.stringify(kind)} for Phi-3 (Longhand supports longrope)`);
  // factors and attention factor rounded to float32: what the model computes with (float32 tensors)
  // and what its GGUF conversion stores, so a folder and its conversion rotate by the same bits
  const factors = (key: string): number[] => {
    const list = scaling.required(key);
    if (!Array.isArray(list) || list.length !== ropeDims / 2 || !list.every((v) => typeof v === 'number' && v > 0 && Number.isFinite(v))) {
      throw scaling.bad(key, `a list of ${ropeDims / 2} positive numbers (one per rotated pair)`);
    }
    return (list as number[]).map(Math.fround);
  };
  const factor = contextLength / original;
  const attnFactor = Math.fround(factor > 1 ? Math.sqrt(1 + Math.log(factor) / Math.log(original)) : 1);
  return { kind: 'longrope', factor, originalContextLength: original, shortFactors: factors('short_factor'), longFactors: factors('long_factor'), attnFactor };
}

function optHyper(read: ConfigReader): ModelHyperparameters {
  const hiddenSize = read.positiveInt('hidden_size');
  const heads = read.positiveInt('num_attention_heads');
  if (!read.bool('do_layer_norm_before', true)) read.unsupported('do_layer_norm_before: false (post-LayerNorm OPT, e.g. opt-350m)');
  const projDim = read.positiveInt('word_embed_proj_dim', hiddenSize);
  if (projDim !== hiddenSize) read.unsupported(`word_embed_proj_dim ${projDim} differs from hidden_size ${hiddenSize} (project_in/project_out)`);
  const act = read.string('activation_function', 'relu');
  if (act !== 'relu') read.unsupported(`activation_function '${act}' (OPT uses relu)`);
  if (!read.bool('layer_norm_elementwise_affine', true)) read.unsupported('layer_norm_elementwise_affine: false');
  return {
    architecture: 'opt',
    family: 'opt',
    hiddenSize,
    layers: read.positiveInt('num_hidden_layers'),
    heads,
    kvHeads: heads,
    headDim: read.divide('hidden_size', hiddenSize, heads),
    ffnSize: read.positiveInt('ffn_dim'),
    vocabSize: read.positiveInt('vocab_size'),
    contextLength: read.positiveInt('max_position_embeddings'),
    normEps: 1e-5, // nn.LayerNorm's default; OPT configs carry no epsilon
    // OPT has one switch for the bias of every Linear layer; qkvBias carries it (see report).
    qkvBias: read.bool('enable_bias', true),
    // Decided by the weights: no lm_head.weight means the embedding is reused (hf/load.ts).
    tiedEmbeddings: read.bool('tie_word_embeddings', true),
    positionOffset: 2,
  };
}

/** Typed access to config keys with errors that name the key. */
export class ConfigReader {
  constructor(
    private readonly config: Config,
    readonly file: string,
    private readonly prefix = '',
  ) {}

  optional(key: string): unknown {
    return Object.hasOwn(this.config, key) ? this.config[key] : undefined;
  }

  required(key: string): unknown {
    const value = this.optional(key);
    if (value === undefined || value === null) {
      throw new ModelFileError('MODEL_MISSING_METADATA', this.file, `has no ${this.prefix}${key}`, { key: this.prefix + key });
    }
    return value;
  }

  positiveInt(key: string, fallback?: number): number {
    const value = fallback !== undefined && this.isAbsent(key) ? fallback : this.required(key);
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) throw this.bad(key, 'a positive integer', value);
    return value;
  }

  positiveNumber(key: string, fallback?: number): number {
    const value = fallback !== undefined && this.isAbsent(key) ? fallback : this.required(key);
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) throw this.bad(key, 'a positive number', value);
    return value;
  }

  bool(key: string, fallback: boolean): boolean {
    if (this.isAbsent(key)) return fallback;
    const value = this.optional(key);
    if (typeof value !== 'boolean') throw this.bad(key, 'true or false', value);
    return value;
  }

  string(key: string, fallback: string): string {
    if (this.isAbsent(key)) return fallback;
    const value = this.optional(key);
    if (typeof value !== 'string') throw this.bad(key, 'a string', value);
    return value;
  }

  divide(key: string, total: number, parts: number): number {
    if (total % parts !== 0) throw this.bad(key, `a multiple of num_attention_heads (${parts}) when head_dim is absent`, total);
    return total / parts;
  }

  bad(key: string, wanted: string, value?: unknown): ModelFileError {
    const found = value === undefined ? '' : `, found ${JSON.stringify(value)}`;
    return new ModelFileError('MODEL_BAD_VALUE', this.file, `${this.prefix}${key} must be ${wanted}${found}`, { key: this.prefix + key });
  }

  unsupported(what: string): never {
    throw new ModelFileError('MODEL_UNSUPPORTED_ARCHITECTURE', this.file, `unsupported configuration: ${what}`, { reason: what });
  }

  private isAbsent(key: string): boolean {
    const value = this.optional(key);
    return value === undefined || value === null;
  }
}
