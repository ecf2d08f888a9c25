// A GGUF file as a LoadedModel: hyperparameters from `<arch>.*` metadata, tensors under their GGUF
// names (already canonical), tokenizer metadata and chat template passed through.
//
// Families: 'llama' (which Mistral, SmolLM, TinyLlama... files also say) with interleaved RoPE,
// and 'qwen2' with NeoX RoPE and q/k/v biases. Both run as our 'llama' Architecture; 'phi3'
// (Phi-3, Phi-4: fused q/k/v and gate/up, NeoX, partial rotary, LongRoPE) as our 'phi3'
// (arch/phi3.ts); 'qwen3' (NeoX, per-head q/k RMSNorm, its own head size) as our 'qwen3'
// (arch/qwen3.ts); 'qwen3moe' (Qwen3's attention, a mixture-of-experts MLP) as our 'qwen3moe'
// (arch/qwen3moe.ts); 'gpt-oss' (biases, sinks, window/full layers, YaRN, a mixture of experts) as
// our 'gpt-oss' (arch/gpt-oss.ts); 'gemma2' and 'gemma3' as theirs (gemma-keys.ts). Mixture of experts
// in other families, partial rotary elsewhere and YaRN scaling outside gpt-oss are refused
// (MODEL_UNSUPPORTED_ARCHITECTURE).
// Llama 3.x files carry their RoPE scaling as a `rope_freqs.weight` tensor of per-pair divisors;
// it is accepted when it matches Llama 3 scaling with the usual parameters (low 1, high 4,
// original context 8192) and reported as such.
import { ModelFileError, type ErrorCode } from '../../../common/errors.ts';
import { checkTensors, type ArchTensorTable } from '../arch/base.ts';
import { GEMMA2_TENSORS, GEMMA3_TENSORS } from '../arch/gemma.ts';
import { GEMMA4_TENSORS, gemma4Hyperparameters } from '../arch/gemma4.ts';
import { LLAMA_TENSORS } from '../arch/llama.ts';
import { PHI3_TENSORS, phi3Views, ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT } from '../arch/phi3.ts';
import { QWEN3_TENSORS } from '../arch/qwen3.ts';
import { QWEN3MOE_TENSORS } from '../arch/qwen3moe.ts';
import { GPT_OSS_TENSORS, gptOssGgufHyper, yarnScaling } from '../arch/gpt-oss.ts';
import { QWEN35MOE_TENSORS } from '../arch/qwen35moe.ts';
import { QWEN35_TENSORS, qwen35Hyperparameters } from '../arch/qwen35.ts';
import type { Architecture, LoadedModel, ModelHyperparameters, RopeLayout, RopeScaling, TensorView } from '../types.ts';
import { gemmaGgufHyper, type GgufKeys } from './gemma-keys.ts';
import { joinNearRanges, type ByteRange } from './byte-ranges.ts';
import { openGguf } from './open-gguf.ts';
import type { GgufFile, GgufValue, ParseOptions } from './reader.ts';

interface Family {
  ropeLayout: RopeLayout;
  /** The Architecture it runs as (default 'llama') and its tensor table (default LLAMA_TENSORS). */
  architecture?: Architecture;
  tensors?: ArchTensorTable;
  /** Phi-3: rope.dimension_count may be below the head size, and LongRoPE factors come as tensors. */
  longRope?: boolean;
  /** rope.dimension_count may be below the head size (partial rotary without LongRoPE: Qwen3.5). */
  partialRotary?: boolean;
  /** The tensors as the family's stages read them (phi3: views of the fused tensors' row blocks). */
  views?: (model: LoadedModel) => LoadedModel;
  /** What the family's own keys add (gemma-keys.ts). */
  extra?: (keys: GgufKeys, base: ModelHyperparameters) => Partial<ModelHyperparameters>;
  /** The whole hyperparameters, for a family whose layers differ in shape (Gemma 4: the shared reader refuses per-layer KV heads). */
  whole?: (file: GgufFile) => ModelHyperparameters;
  /** Mixture of experts: the family runs files with expert_count > 0 (the others refuse them). */
  moe?: boolean;
  /** YaRN RoPE scaling (rope.scaling.type "yarn") is read (gpt-oss: arch/gpt-oss.ts yarnScaling); the others refuse it. */
  yarn?: boolean;
}

/** general.architecture values we run, and how they differ. */
const FAMILIES: Readonly<Record<string, Family>> = {
  llama: { ropeLayout: 'interleaved' },
  qwen2: { ropeLayout: 'neox' },
  phi3: { ropeLayout: 'neox', architecture: 'phi3', tensors: PHI3_TENSORS, longRope: true, views: phi3Views },
  gemma2: { ropeLayout: 'neox', architecture: 'gemma2', tensors: GEMMA2_TENSORS, extra: (keys, base) => ({ gemma: gemmaGgufHyper(keys, 'gemma2', base) }) },
  gemma3: { ropeLayout: 'neox', architecture: 'gemma3', tensors: GEMMA3_TENSORS, extra: (keys, base) => ({ gemma: gemmaGgufHyper(keys, 'gemma3', base) }) },
  gemma4: { ropeLayout: 'neox', architecture: 'gemma4', tensors: GEMMA4_TENSORS, whole: gemma4GgufHyper },
  qwen3: { ropeLayout: 'neox', architecture: 'qwen3', tensors: QWEN3_TENSORS },
  qwen3moe: { ropeLayout: 'neox', architecture: 'qwen3moe', tensors: QWEN3MOE_TENSORS, moe: true, extra: (keys, base) => ({ moe: moeGgufHyper(keys, 'qwen3moe', base) }) },
  'gpt-oss': {
    ropeLayout: 'neox', architecture: 'gpt-oss', tensors: GPT_OSS_TENSORS, moe: true, yarn: true,
    // llama.cpp's openai_moe: top-k of the logits then a softmax over the k (SOFTMAX_WEIGHT), no renormalisation
    extra: (keys, base) => ({ moe: { ...moeGgufHyper(keys, 'gpt-oss', base), normTopK: false, gating: 'softmax_weight' }, gptOss: gptOssGgufHyper(keys, base) }),
  },
  qwen35: { ropeLayout: 'neox', architecture: 'qwen35', tensors: QWEN35_TENSORS, partialRotary: true, extra: (keys, base) => qwen35Hyperparameters(keys, 'qwen35', base.layers) },
  qwen35moe: { ropeLayout: 'neox', architecture: 'qwen35moe', tensors: QWEN35MOE_TENSORS, partialRotary: true, moe: true, extra: (keys, base) => ({ ...qwen35Hyperparameters(keys, 'qwen35moe', base.layers), moe: qwen35moeGgufHyper(keys, base) }) },
};

export const SUPPORTED_GGUF_ARCHITECTURES: readonly string[] = Object.keys(FAMILIES);

/**
 * Why a GGUF whose general.architecture is `architecture` cannot run, naming it and what Longhand
 * runs (from the table above, so a family registered there is listed), or undefined when it can.
 */
export function ggufArchitectureRefusal(architecture: string): string | undefined {
  if (Object.hasOwn(FAMILIES, architecture)) return undefined;
  return `architecture "${architecture}" is not supported (Longhand runs ${SUPPORTED_GGUF_ARCHITECTURES.join(', ')})`;
}

/** Tensors owned together are joined across gaps up to this (a layer's norm vectors between its matrices). */
const OWN_JOIN_GAP = 1 << 20;

/** Opens, parses and checks a GGUF model. Closing the model releases the file. */
export function loadGgufModel(path: string, options: ParseOptions = {}): LoadedModel {
  const file = openGguf(path, options);
  try {
    const model = ggufToLoadedModel(file, path, () => file.close(), false);
    const releaseTensor = (name: string): number => {
      const info = file.tensors.get(name);
      return info === undefined ? 0 : file.release(info.absoluteOffset, info.byteSize);
    };
    const ownTensors = (names: readonly string[], threads?: number): number => {
      const ranges: ByteRange[] = [];
      for (const name of names) {
        const info = file.tensors.get(name);
        if (info !== undefined) ranges.push([info.absoluteOffset, info.absoluteOffset + info.byteSize]);
      }
      // neighbours are owned as one range: the 2 MiB pages between them are huge pages too
      return joinNearRanges(ranges, OWN_JOIN_GAP).reduce((n, [a, b]) => n + file.own(a, b - a, threads), 0);
    };
    const full: LoadedModel = { ...model, releaseTensor, ownTensors };
    return FAMILIES[model.hyper.family]?.views?.(full) ?? full;
  } catch (error) {
    file.close();
    throw error;
  }
}

/**
 * A parsed GGUF file as a LoadedModel (checks hyperparameters and every required tensor). `views`
 * false: the file's own tensors, for a caller that adds file-backed methods before the family's
 * views (loadGgufModel).
 */
export function ggufToLoadedModel(file: GgufFile, path: string = file.fileName, close: () => void = () => undefined, views = true): LoadedModel {
  const hyper = ggufHyperparameters(file);
  const tensors = new Map<string, TensorView>();
  let weightBytes = 0;
  for (const info of file.tensors.values()) {
    tensors.set(info.name, file.tensorView(info.name));
    weightBytes += info.byteSize;
  }
  const spec = FAMILIES[hyper.family];
  checkTensors(spec?.tensors ?? LLAMA_TENSORS, hyper, tensors, file.fileName);
  const chatTemplate = optionalString(file, 'tokenizer.chat_template');
  const model: LoadedModel = {
    format: 'gguf',
    path,
    hyper,
    tensors,
    tokenizer: { kind: 'gguf', metadata: file.metadata },
    chatTemplate,
    weightBytes,
    close,
  };
  return views && spec?.views ? spec.views(model) : model;
}

/** Hyperparameters from the metadata (and the shapes of token_embd / rope_freqs). */
export function ggufHyperparameters(file: GgufFile): ModelHyperparameters {
  const family = requiredString(file, 'general.architecture');
  const spec = Object.hasOwn(FAMILIES, family) ? FAMILIES[family] : undefined;
  if (spec === undefined) fail(file, 'MODEL_UNSUPPORTED_ARCHITECTURE', ggufArchitectureRefusal(family)!, 'general.architecture', { architecture: family });
  if (spec.whole) return spec.whole(file);
  const k = (suffix: string): string => `${family}.${suffix}`;

  const experts = optionalInt(file, k('expert_count'), 0);
  if (experts > 0 && spec.moe !== true) fail(file, 'MODEL_UNSUPPORTED_ARCHITECTURE', `mixture-of-experts models (${experts} experts) are not supported`, k('expert_count'));

  const hiddenSize = requiredInt(file, k('embedding_length'));
  const layers = requiredInt(file, k('block_count'));
  const heads = perLayerInt(file, k('attention.head_count'), true) as number;
  const kvHeads = perLayerInt(file, k('attention.head_count_kv'), false) ?? heads;
  const ffnSize = perLayerInt(file, k('feed_forward_length'), true) as number;
  const contextLength = requiredInt(file, k('context_length'));
  const normEps = requiredFloat(file, k('attention.layer_norm_rms_epsilon'));
  if (!(normEps > 0 && normEps < 1)) fail(file, 'MODEL_BAD_VALUE', `${k('attention.layer_norm_rms_epsilon')} is ${normEps}, not in (0, 1)`, k('attention.layer_norm_rms_epsilon'));
  const ropeTheta = optionalFloat(file, k('rope.freq_base'), 10000);
  if (!(ropeTheta > 0 && Number.isFinite(ropeTheta))) fail(file, 'MODEL_BAD_VALUE', `${k('rope.freq_base')} is ${ropeTheta}`, k('rope.freq_base'));

  if (heads % kvHeads !== 0) fail(file, 'MODEL_BAD_VALUE', `${heads} query heads cannot be grouped over ${kvHeads} KV heads`, k('attention.head_count_kv'), { heads, kvHeads });
  const keyLength = optionalInt(file, k('attention.key_length'), 0);
  const valueLength = optionalInt(file, k('attention.value_length'), 0);
  if (keyLength === 0 && hiddenSize % heads !== 0) {
    fail(file, 'MODEL_SHAPE_MISMATCH', `embedding length ${hiddenSize} is not divisible by ${heads} heads`, k('attention.head_count'), { hiddenSize, heads });
  }
  const headDim = keyLength || hiddenSize / heads;
  if (valueLength !== 0 && valueLength !== headDim) {
    fail(file, 'MODEL_UNSUPPORTED_ARCHITECTURE', `key length ${headDim} differs from value length ${valueLength}`, k('attention.value_length'));
  }
  const ropeDims = optionalInt(file, k('rope.dimension_count'), headDim);
  if ((spec.longRope === true || spec.partialRotary === true) && !(ropeDims > 0 && ropeDims <= headDim && ropeDims % 2 === 0)) {
    fail(file, 'MODEL_BAD_VALUE', `${k('rope.dimension_count')} is ${ropeDims}: not an even count of at most ${headDim} head dimensions`, k('rope.dimension_count'), { ropeDims, headDim });
  }
  // Phi-3's sliding_window key (Phi-3-mini: 2047) is not run: llama.cpp disables Phi SWA (its
  // phi3 loader sets swa_type NONE, llama.cpp PR 13676), and every layer attends globally there.
  if (ropeDims !== headDim && spec.longRope !== true && spec.partialRotary !== true) {
    fail(file, 'MODEL_UNSUPPORTED_ARCHITECTURE', `partial rotary embeddings (${ropeDims} of ${headDim} head dimensions) are not supported`, k('rope.dimension_count'), { ropeDims, headDim });
  }

  const embedding = file.tensors.get('token_embd.weight');
  if (embedding === undefined) throw new ModelFileError('MODEL_MISSING_TENSOR', file.fileName, 'tensor token_embd.weight is missing', { tensor: 'token_embd.weight' });
  const tokens = file.metadata.get('tokenizer.ggml.tokens');
  const vocabSize = Array.isArray(tokens) ? tokens.length : (embedding.shape[0] as number);

  const base: ModelHyperparameters = {
    architecture: spec.architecture ?? 'llama',
    family,
    hiddenSize,
    layers,
    heads,
    kvHeads,
    headDim,
    ffnSize,
    vocabSize,
    contextLength,
    normEps,
    ropeTheta,
    ropeLayout: spec.ropeLayout,
    ropeScaling: spec.longRope === true ? longRopeScaling(file, family, ropeDims) : ropeScaling(file, family, headDim, ropeTheta, spec.yarn === true, contextLength),
    ...(ropeDims !== headDim ? { ropeDims } : {}),
    qkvBias: file.tensors.has('blk.0.attn_q.bias'),
    tiedEmbeddings: !file.tensors.has('output.weight'),
  };
  return spec.extra ? { ...base, ...spec.extra(ggufKeys(file), base) } : base;
}

/**
 * A mixture-of-experts family's experts (Qwen3-MoE as llama_model_qwen3moe reads them): expert_count
 * and expert_used_count required (it throws without them), expert_feed_forward_length or else
 * feed_forward_length / expert_used_count (its fallback). llama.cpp renormalises the top-k weights
 * for qwen3moe whatever the file says (build_moe_ffn with norm_w true; the converter writes no key for it).
 */
/** Qwen3.5-MoE's experts (llama_model_qwen35moe): Qwen3-MoE's keys and its shared expert's width (expert_shared_feed_forward_length, else feed_forward_length as llama.cpp falls back). */
function qwen35moeGgufHyper(keys: GgufKeys, base: ModelHyperparameters): NonNullable<ModelHyperparameters['moe']> {
  const sharedFfn = keys.int('qwen35moe.expert_shared_feed_forward_length', base.ffnSize);
  if (!(sharedFfn > 0)) keys.bad('qwen35moe.expert_shared_feed_forward_length', 'a positive integer');
  return { ...moeGgufHyper(keys, 'qwen35moe', base), sharedFfn };
}

function moeGgufHyper(keys: GgufKeys, family: string, base: ModelHyperparameters): NonNullable<ModelHyperparameters['moe']> {
  const k = (suffix: string): string => `${family}.${suffix}`;
  const experts = keys.int(k('expert_count'), 0);
  const expertsUsed = keys.int(k('expert_used_count'), 0);
  if (experts === 0) keys.bad(k('expert_count'), 'a positive integer (a mixture-of-experts model needs its expert count)');
  if (!(expertsUsed > 0 && expertsUsed <= experts)) keys.bad(k('expert_used_count'), `an integer in 1..${experts} (the experts each token runs)`);
  const expertFfn = keys.int(k('expert_feed_forward_length'), Math.floor(base.ffnSize / expertsUsed));
  if (expertFfn === 0) keys.bad(k('expert_feed_forward_length'), 'a positive integer');
  return { experts, expertsUsed, expertFfn, normTopK: true };
}

/** The checked readers a family's own keys go through (gemma-keys.ts). */
function ggufKeys(file: GgufFile): GgufKeys {
  return {
    float: (key, fallback) => {
      const value = file.metadata.get(key);
      return typeof value === 'bigint' ? Number(value) : value === undefined || typeof value !== 'number' ? optionalFloat(file, key, fallback) : value;
    },
    int: (key, fallback) => optionalInt(file, key, fallback),
    raw: (key) => file.metadata.get(key),
    bad: (key, message) => fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" should be ${message}`, key),
  };
}

// ---------------------------------------------------------------- RoPE scaling

function ropeScaling(file: GgufFile, family: string, headDim: number, theta: number, yarn = false, contextLength = 0): RopeScaling | undefined {
  const k = (suffix: string): string => `${family}.${suffix}`;
  const type = optionalString(file, k('rope.scaling.type'));
  const legacyLinear = optionalFloat(file, k('rope.scale_linear'), 0);
  const factor = optionalFloat(file, k('rope.scaling.factor'), legacyLinear || 1);
  const original = optionalInt(file, k('rope.scaling.original_context_length'), 0);
  let scaling: RopeScaling | undefined;
  if (type === 'linear' || (type === undefined && legacyLinear > 0 && legacyLinear !== 1)) {
    if (!(factor > 0 && Number.isFinite(factor))) fail(file, 'MODEL_BAD_VALUE', `rope scaling factor ${factor} is not positive`, k('rope.scaling.factor'));
    scaling = { kind: 'linear', factor };
  } else if (type === 'yarn' && yarn) {
    if (!(factor > 0 && Number.isFinite(factor))) fail(file, 'MODEL_BAD_VALUE', `rope scaling factor ${factor} is not positive`, k('rope.scaling.factor'));
    // llama.cpp: n_ctx_orig_yarn is the trained context when the key is absent
    scaling = yarnScaling(factor, original || contextLength, optionalFloat(file, k('rope.scaling.attn_factor'), 1));
  } else if (type !== undefined && type !== 'none') {
    fail(file, 'MODEL_UNSUPPORTED_ARCHITECTURE', `RoPE scaling "${type}" is not supported`, k('rope.scaling.type'), { type });
  }
  const freqs = file.tensors.get('rope_freqs.weight');
  if (freqs === undefined) return scaling;
  if (scaling !== undefined) fail(file, 'MODEL_UNSUPPORTED_ARCHITECTURE', 'both a rope_freqs tensor and rope.scaling metadata', k('rope.scaling.type'));
  if (freqs.elements !== headDim / 2) {
    throw new ModelFileError('MODEL_SHAPE_MISMATCH', file.fileName, `rope_freqs.weight has ${freqs.elements} values, expected ${headDim / 2}`, { tensor: 'rope_freqs.weight' }, freqs.infoOffset);
  }
  const divisors = file.tensorView('rope_freqs.weight').toFloat32();
  let max = 1;
  for (const value of divisors) max = Math.max(max, value);
  const candidate: RopeScaling = { kind: 'llama3', factor: max, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: original || 8192 };
  const expected = llama3Divisors(candidate, headDim, theta);
  const matches = divisors.every((value, i) => Math.abs(value - (expected[i] as number)) <= 1e-3 * Math.max(1, Math.abs(value)));
  if (!matches) {
    throw new ModelFileError('MODEL_UNSUPPORTED_ARCHITECTURE', file.fileName, 'rope_freqs.weight holds frequency factors that are not Llama 3 scaling (low 1, high 4)', { tensor: 'rope_freqs.weight' }, freqs.infoOffset);
  }
  return max === 1 ? undefined : candidate;
}

/**
 * Phi-3's LongRoPE, as convert_hf_to_gguf.py writes it for the 128k models: the short and long
 * factor tensors [ropeDims/2], `rope.scaling.attn_factor` and the trained context
 * `rope.scaling.original_context_length`. A file without the tensors (Phi-3-mini-4k) has plain RoPE.
 */
function longRopeScaling(file: GgufFile, family: string, ropeDims: number): RopeScaling | undefined {
  const k = (suffix: string): string => `${family}.${suffix}`;
  const type = optionalString(file, k('rope.scaling.type'));
  if (type !== undefined && type !== 'none') fail(file, 'MODEL_UNSUPPORTED_ARCHITECTURE', `RoPE scaling "${type}" is not supported for ${family}`, k('rope.scaling.type'), { type });
  const short = file.tensors.get(ROPE_FACTORS_SHORT);
  const long = file.tensors.get(ROPE_FACTORS_LONG);
  if (short === undefined && long === undefined) return undefined;
  const factors = (name: string, info: typeof short): number[] => {
    if (info === undefined) throw new ModelFileError('MODEL_MISSING_TENSOR', file.fileName, `tensor ${name} is missing (LongRoPE needs both factor sets)`, { tensor: name });
    if (info.elements !== ropeDims / 2) throw new ModelFileError('MODEL_SHAPE_MISMATCH', file.fileName, `${name} has ${info.elements} values, expected ${ropeDims / 2} (one per rotated pair)`, { tensor: name }, info.infoOffset);
    const values = [...file.tensorView(name).toFloat32()];
    if (!values.every((v) => v > 0 && Number.isFinite(v))) throw new ModelFileError('MODEL_BAD_VALUE', file.fileName, `${name} holds a factor that is not a positive number`, { tensor: name }, info.infoOffset);
    return values;
  };
  const shortFactors = factors(ROPE_FACTORS_SHORT, short);
  const longFactors = factors(ROPE_FACTORS_LONG, long);
  const original = optionalInt(file, k('rope.scaling.original_context_length'), 0);
  if (original === 0) missing(file, k('rope.scaling.original_context_length'));
  const attnFactor = optionalFloat(file, k('rope.scaling.attn_factor'), 1);
  if (!(attnFactor > 0 && Number.isFinite(attnFactor))) fail(file, 'MODEL_BAD_VALUE', `${k('rope.scaling.attn_factor')} is ${attnFactor}`, k('rope.scaling.attn_factor'));
  const contextLength = requiredInt(file, k('context_length'));
  return { kind: 'longrope', factor: contextLength / original, originalContextLength: original, shortFactors, longFactors, attnFactor };
}

/** The per-pair frequency divisors that Llama 3 scaling implies (what convert_hf_to_gguf stores). */
export function llama3Divisors(scaling: RopeScaling, headDim: number, theta: number): number[] {
  const low = scaling.lowFreqFactor ?? 1;
  const high = scaling.highFreqFactor ?? 4;
  const original = scaling.originalContextLength ?? 8192;
  const out: number[] = [];
  for (let i = 0; i < headDim; i += 2) {
    const wavelength = 2 * Math.PI * theta ** (i / headDim);
    if (wavelength < original / high) out.push(1);
    else if (wavelength > original / low) out.push(scaling.factor);
    else {
      const smooth = (original / wavelength - low) / (high - low);
      out.push(1 / ((1 - smooth) / scaling.factor + smooth));
    }
  }
  return out;
}

// ---------------------------------------------------------------- metadata access

function fail(file: GgufFile, code: ErrorCode, message: string, key: string, details: Record<string, string | number> = {}): never {
  throw new ModelFileError(code, file.fileName, message, { key, ...details }, file.metadataOffsets.get(key));
}

function describe(file: GgufFile, key: string): string {
  const tag = file.metadataTypes.get(key);
  return tag === undefined ? 'absent' : tag.itemType === undefined ? tag.type : `an array of ${tag.itemType}`;
}

function missing(file: GgufFile, key: string): never {
  throw new ModelFileError('MODEL_MISSING_METADATA', file.fileName, `metadata key "${key}" is missing`, { key });
}

function requiredString(file: GgufFile, key: string): string {
  return optionalString(file, key) ?? missing(file, key);
}

function optionalString(file: GgufFile, key: string): string | undefined {
  const value = file.metadata.get(key);
  if (value === undefined) return undefined;
  if (typeof value !== 'string') fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" should be a string, not ${describe(file, key)}`, key);
  return value;
}

/** A positive integer stored as any integer type. */
function toCount(file: GgufFile, key: string, value: GgufValue | undefined): number | undefined {
  if (value === undefined) return undefined;
  const tag = file.metadataTypes.get(key)?.type;
  const integer = tag !== 'float32' && tag !== 'float64' && (typeof value === 'number' || typeof value === 'bigint');
  if (!integer) fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" should be an integer, not ${describe(file, key)}`, key);
  if (typeof value === 'bigint' && (value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER))) fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" is ${value}, out of range`, key);
  const n = Number(value);
  if (n < 0) fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" is negative (${n})`, key);
  return n;
}

function requiredInt(file: GgufFile, key: string): number {
  const n = toCount(file, key, file.metadata.get(key)) ?? missing(file, key);
  if (n === 0) fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" is 0`, key);
  return n;
}

function optionalInt(file: GgufFile, key: string, fallback: number): number {
  return toCount(file, key, file.metadata.get(key)) ?? fallback;
}

/** An integer that some files store per layer (an array): all layers must agree. */
function perLayerInt(file: GgufFile, key: string, required: boolean): number | undefined {
  const value = file.metadata.get(key);
  if (value === undefined) return required ? missing(file, key) : undefined;
  if (typeof value === 'number' || typeof value === 'bigint') return requiredInt(file, key);
  const integers = value instanceof Uint8Array || value instanceof Uint16Array || value instanceof Uint32Array || value instanceof Int8Array || value instanceof Int16Array || value instanceof Int32Array;
  if (!integers || value.length === 0) fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" should be an integer, not ${describe(file, key)}`, key);
  const first = value[0] as number;
  if (!value.every((v: number) => v === first)) fail(file, 'MODEL_UNSUPPORTED_ARCHITECTURE', `metadata "${key}" differs between layers`, key);
  if (first <= 0) fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" is ${first}`, key);
  return first;
}

function requiredFloat(file: GgufFile, key: string): number {
  const value = file.metadata.get(key);
  if (value === undefined) missing(file, key);
  return optionalFloat(file, key, 0);
}

function optionalFloat(file: GgufFile, key: string, fallback: number): number {
  const value = file.metadata.get(key);
  if (value === undefined) return fallback;
  if (typeof value !== 'number') fail(file, 'MODEL_BAD_VALUE', `metadata "${key}" should be a number, not ${describe(file, key)}`, key);
  return value;
}

/** Gemma 4's hyperparameters (model/arch/gemma4.ts), with the rope_freqs values and the tensors present. */
function gemma4GgufHyper(file: GgufFile): ModelHyperparameters {
  const freqs = file.tensors.has('rope_freqs.weight') ? file.tensorView('rope_freqs.weight').toFloat32() : undefined;
  const embedding = file.tensors.get('token_embd.weight');
  if (embedding === undefined) throw new ModelFileError('MODEL_MISSING_TENSOR', file.fileName, 'tensor token_embd.weight is missing', { tensor: 'token_embd.weight' });
  const tokens = file.metadata.get('tokenizer.ggml.tokens');
  const vocabSize = Array.isArray(tokens) ? tokens.length : (embedding.shape[0] as number);
  return gemma4Hyperparameters(file.fileName, file.metadata, freqs, (t) => file.tensors.has(t), { contextLength: requiredInt(file, 'gemma4.context_length'), vocabSize });
}
