// What one decoder layer computes (ARCHITECTURE.md §3, issue 29): a `LayerSpec` per layer, declared
// by the model family (family.ts, llama.ts, opt.ts) and read by shared code, which then names no
// family. A model is a list of them, one per layer ℓ = 0..L−1:
//
//   LayerSpec ─ attention   { kind: 'attention', heads, kvHeads, headDim, scale, window, sinks,
//             │               rope | undefined, qkNorm, softcap }     ─► K and V rows in the pool
//             │             | { kind: 'linear', keyHeads, valueHeads, headDim, convKernel }
//             │                                                        ─► no KV rows: a recurrent state per sequence
//             │             | { kind: 'none' }                         ─► no KV rows, no mixing
//             ├ ffn         { kind: 'dense', size, gated, activation }
//             │             | { kind: 'moe', experts, topK, expertSize, gated, activation }
//             └ norm        { kind: 'rms' | 'layer', placement: 'pre' | 'sandwich', eps }
//
// Today every layer of a model is the same (Llama/Mistral/Qwen2 and OPT); the per-layer list is
// what lets Gemma's interleaved sliding-window layers, gpt-oss's sinks, or a hybrid model's
// linear-attention layers be declared without another branch in the loop. The helpers at the end
// are the questions the loop, the pool and InfiniGen ask of the list.
import type { ModelHyperparameters, RopeLayout, RopeScaling } from '../../model/types.ts';
import type { RopeFrequencies } from '../../onnx/ops.ts';

// ---------------------------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------------------------

/** RoPE as one layer applies it to q and k (a family may give layers different bases: Gemma 3). */
export interface RopeSpec {
  /** θ of the frequencies θ^(−2i/dims): the wavelengths the positions are encoded at. */
  readonly base: number;
  /** Dimensions rotated per head (== headDim: all of them; fewer for partial rotary models). */
  readonly dims: number;
  /** Which dimensions are paired: the layout the file's q/k weights were written for. */
  readonly layout: RopeLayout;
  /** Frequency scaling for long context (Llama 3, linear), or undefined: plain θ^(−2i/dims). */
  readonly scaling: RopeScaling | undefined;
  /**
   * Per-pair divisors of the frequencies, [dims/2] (llama.cpp's rope_freqs tensor): pair i turns at
   * θ^(−2i/dims) / freqFactors[i]. Gemma 4's global layers use it for "proportional" partial RoPE:
   * 1 on the rotated pairs, 1e30 (no rotation) on the rest, the pairs still (i, i + headDim/2).
   * Undefined: every factor 1.
   */
  readonly freqFactors?: readonly number[];
}

/** A layer whose tokens keep K and V rows in the pool and attend over them. */
export interface AttentionSpec {
  readonly kind: 'attention';
  /** Query heads: the rows of q per token, and how many softmaxes a token's attention runs. */
  readonly heads: number;
  /** Key/value heads (== heads for MHA, fewer for GQA): the rows the pool stores per token. */
  readonly kvHeads: number;
  /** Elements per head row of q, k and v: the pool's row width and the kernels' dot length. */
  readonly headDim: number;
  /**
   * Multiplies q·k before the softmax: 1/√headDim (defaultScale) unless the family says otherwise
   * (Gemma's query_pre_attn_scalar). A double; sites that compute the default in float today
   * (native attention: 1.0f/sqrtf(d)) keep their own rounding when isDefaultScale holds, since
   * the two differ in the last bit for some head dims (6, 7, 17, ... 96, 112; not 8, 64, 128).
   */
  readonly scale: number;
  /** Sliding window in tokens (the layer sees the last `window` positions), or undefined: global. */
  readonly window: number | undefined;
  /** Learned per-head attention sinks (gpt-oss): an extra logit in each softmax's denominator. */
  readonly sinks: boolean;
  /** RoPE of this layer's q and k, or undefined: no rotary positions (OPT's are learned, added to the embedding). */
  readonly rope: RopeSpec | undefined;
  /** RMSNorm of each q and k head before RoPE (Qwen3, Gemma 3): two more vectors per layer. */
  readonly qkNorm: boolean;
  /** Logit soft-cap c: scores become c·tanh(s/c) (Gemma 2); 0 = none. */
  readonly softcap: number;
  /**
   * The earlier layer whose K and V rows this layer attends (Gemma 3n / Gemma 4's KV-shared last
   * layers: they compute q only), or undefined: its own rows. A layer with a source keeps no rows in
   * the pool; the source has the same kvHeads, headDim and window (checkLayerSpecs).
   */
  readonly kvSource?: number;
}

/** A layer without KV rows and without a token mixer of its own (no family declares one). */
export interface NoAttentionSpec {
  readonly kind: 'none';
}

/**
 * A linear-attention layer (Gated DeltaNet: Qwen3.5, Qwen3-Next): no KV rows; each sequence carries a
 * fixed-size state instead (forward/linear-attention.ts), per value head a [headDim × headDim] matrix
 * S and the last convKernel − 1 inputs of the short causal convolution. Per token t, value head h
 * (key head h mod keyHeads, llama.cpp's tiling of the key heads over the value heads):
 *
 *   x_t = silu(conv(qkv_t))           q, k: L2-normed per head; q·1/√headDim
 *   S ← e^{g_t}·S + k_t·(β_t·(v_t − Sᵀk_t))ᵀ        g_t = softplus(α_t + dt)·a,  β_t = σ(b_t)
 *   o_t = Sᵀq_t,  out = rmsnorm(o_t)·w ⊙ silu(z_t)   (per head), then the output projection.
 */
export interface LinearAttentionSpec {
  readonly kind: 'linear';
  /** Heads of q and k (llama.cpp's ssm.group_count). */
  readonly keyHeads: number;
  /** Heads of v, of the state and of the output (ssm.time_step_rank); a multiple of keyHeads. */
  readonly valueHeads: number;
  /** Elements per head of q, k and v (ssm.state_size): the state is headDim × headDim per value head. */
  readonly headDim: number;
  /** Taps of the causal convolution over the q/k/v projections (ssm.conv_kernel). */
  readonly convKernel: number;
  /** ε of the per-head L2 norms of q and k and of the gated RMSNorm of the output. */
  readonly eps: number;
}

/** Floats of one sequence's state in a linear-attention layer: the matrices, then the convolution's tail. */
export function linearStateFloats(a: LinearAttentionSpec): number {
  return a.valueHeads * a.headDim * a.headDim + (a.convKernel - 1) * linearConvChannels(a);
}

/** Channels of a linear-attention layer's convolution: q and k (keyHeads·headDim each), then v (valueHeads·headDim). */
export function linearConvChannels(a: LinearAttentionSpec): number {
  return (2 * a.keyHeads + a.valueHeads) * a.headDim;
}

// ---------------------------------------------------------------------------------------------
// Feed-forward and norms
// ---------------------------------------------------------------------------------------------

/**
 * The nonlinearity of a feed-forward (the gate's, when gated). 'gelu': x·Φ(x) with the exact erf;
 * 'gelu_tanh': 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the approximation Gemma's GeGLU uses
 * (gelu_pytorch_tanh; llama.cpp's ggml_gelu/ggml_geglu). 'swiglu_oai' (gpt-oss, gated only): with
 * g ← min(g, 7), u ← clamp(u, −7, 7): g·σ(1.702·g)·(u + 1) (ggml_swiglu_oai).
 */
export type Activation = 'silu' | 'relu' | 'gelu' | 'gelu_tanh' | 'swiglu_oai';

/** One MLP for every token. */
export interface DenseFfnSpec {
  readonly kind: 'dense';
  /** Hidden width of the MLP: the rows of its up (and gate) projection. */
  readonly size: number;
  /** act(x·W_gate) ⊙ (x·W_up) (SwiGLU, GeGLU), or act(x·W_up) without a gate (OPT's fc1). */
  readonly gated: boolean;
  readonly activation: Activation;
}

/** A router picks `topK` of `experts` MLPs per token (Mixtral, Qwen3-MoE, gpt-oss). */
export interface MoeFfnSpec {
  readonly kind: 'moe';
  /** MLPs the layer holds (their weights are the bulk of the file). */
  readonly experts: number;
  /** MLPs each token runs, weighted by the router's probabilities. */
  readonly topK: number;
  /** Hidden width of one expert. */
  readonly expertSize: number;
  readonly gated: boolean;
  readonly activation: Activation;
  /** Experts every token runs besides the routed ones (DeepSeek, Qwen2-MoE's shared expert); 0 = none. */
  readonly sharedExperts: number;
  /** 'softmax' (absent): softmax over every expert, top-k of the probabilities; 'softmax_weight' (gpt-oss): top-k of the logits, softmax over those k. */
  readonly gating?: 'softmax' | 'softmax_weight';
}

export type FfnSpec = DenseFfnSpec | MoeFfnSpec;

/** Where the layer normalises and with what. */
export interface NormSpec {
  /** 'rms': x/rms(x)·w (Llama); 'layer': (x−mean)/std·w + b (OPT): different vectors and op. */
  readonly kind: 'rms' | 'layer';
  /**
   * 'pre': norm before attention and before the MLP, residual added after each (Llama, OPT with
   * do_layer_norm_before); 'sandwich': also a norm on each sub-block's output before the residual
   * add (Gemma 2/3): two more vectors per layer.
   */
  readonly placement: 'pre' | 'sandwich';
  /** ε inside the norm's square root: a model's outputs depend on it at small activations. */
  readonly eps: number;
}

/** What layer ℓ computes. */
export interface LayerSpec {
  readonly attention: AttentionSpec | LinearAttentionSpec | NoAttentionSpec;
  readonly ffn: FfnSpec;
  readonly norm: NormSpec;
}

// ---------------------------------------------------------------------------------------------
// Questions asked of a model's list
// ---------------------------------------------------------------------------------------------

/** The scale of a layer that does not set its own: 1/√headDim. */
export function defaultScale(headDim: number): number {
  return 1 / Math.sqrt(headDim);
}

/**
 * Global attention over every position with the hyperparameters' heads, scale 1/√headDim, no
 * window, sinks, q/k norm or soft-cap: what Llama and OPT layers compute (with or without RoPE).
 */
export function globalAttention(hyper: Pick<ModelHyperparameters, 'heads' | 'kvHeads' | 'headDim'>, rope: RopeSpec | undefined): AttentionSpec {
  return { kind: 'attention', heads: hyper.heads, kvHeads: hyper.kvHeads, headDim: hyper.headDim, scale: defaultScale(hyper.headDim), window: undefined, sinks: false, rope, qkNorm: false, softcap: 0 };
}

/** Whether an attention's scale is the default one (kernels may then keep their own rounding of it). */
export function isDefaultScale(attention: AttentionSpec): boolean {
  return attention.scale === defaultScale(attention.headDim);
}

/** Whether layer `spec` is a linear-attention layer (a recurrent state, no rows). */
export function isLinear(spec: LayerSpec): spec is LayerSpec & { readonly attention: LinearAttentionSpec } {
  return spec.attention.kind === 'linear';
}

/** Whether layer `spec` keeps K and V rows in the pool. */
export function hasKv(spec: LayerSpec): spec is LayerSpec & { readonly attention: AttentionSpec } {
  return spec.attention.kind === 'attention';
}

/** The layers that keep KV rows, ascending. */
export function kvLayers(specs: readonly LayerSpec[]): number[] {
  const out: number[] = [];
  for (let l = 0; l < specs.length; l++) if (hasKv(specs[l]!)) out.push(l);
  return out;
}

/**
 * The first layer after ℓ that keeps KV rows, or undefined when none does: the layer InfiniGen's
 * speculation from layer ℓ's input prepares (ARCHITECTURE.md §3), which is not ℓ+1 when ℓ+1 has
 * no KV.
 */
export function nextKvLayer(specs: readonly LayerSpec[], layer: number): number | undefined {
  for (let l = layer + 1; l < specs.length; l++) if (hasKv(specs[l]!)) return l;
  return undefined;
}

/** Whether layer `spec` attends and keeps rows of its own in the pool (not a KV-shared layer). */
export function ownsKv(spec: LayerSpec): spec is LayerSpec & { readonly attention: AttentionSpec } {
  return hasKv(spec) && spec.attention.kvSource === undefined;
}

/**
 * The layer whose pool rows layer ℓ attends: ℓ itself, its kvSource, or undefined when ℓ has no
 * attention. Appends go to owners only; attention, selection and scores of ℓ read this layer's rows.
 */
export function kvOwner(specs: readonly LayerSpec[], layer: number): number | undefined {
  const a = specs[layer]?.attention;
  if (a === undefined || a.kind !== 'attention') return undefined;
  return a.kvSource ?? layer;
}

/** The row shape of a pool layer: what one token costs it per K or V, per KV head. */
export interface KvRowShape {
  readonly kvHeads: number;
  readonly headDim: number;
}

/**
 * [layer] each layer's row shape in the pool, or undefined where the layer keeps no rows (no
 * attention, or a KV-shared layer reading another's). What the pool is made from and every memory
 * figure sums over.
 */
export function kvRowShapes(specs: readonly LayerSpec[]): (KvRowShape | undefined)[] {
  return specs.map((spec) => (ownsKv(spec) ? { kvHeads: spec.attention.kvHeads, headDim: spec.attention.headDim } : undefined));
}

/**
 * Throws a RangeError naming the layer when a list is inconsistent: a kvSource that is not an
 * earlier layer with rows of its own, or whose kvHeads, headDim or window differ (the shared layer
 * would read rows of another shape or another span); heads not a multiple of kvHeads.
 */
export function checkLayerSpecs(specs: readonly LayerSpec[]): void {
  for (let l = 0; l < specs.length; l++) {
    const a = specs[l]!.attention;
    if (a.kind !== 'attention') continue;
    if (!(a.kvHeads > 0 && a.heads % a.kvHeads === 0)) throw new RangeError(`layer ${l}: ${a.heads} query heads cannot be grouped over ${a.kvHeads} KV heads`);
    if (a.rope?.freqFactors !== undefined && a.rope.freqFactors.length !== a.rope.dims / 2) throw new RangeError(`layer ${l}: ${a.rope.freqFactors.length} RoPE frequency factors for ${a.rope.dims / 2} pairs`);
    const src = a.kvSource;
    if (src === undefined) continue;
    if (!Number.isInteger(src) || src < 0 || src >= l) throw new RangeError(`layer ${l}: kvSource ${src} is not an earlier layer`);
    const s = specs[src]!.attention;
    if (s.kind !== 'attention' || s.kvSource !== undefined) throw new RangeError(`layer ${l}: kvSource ${src} keeps no rows of its own`);
    for (const field of ['kvHeads', 'headDim', 'window'] as const) {
      if (s[field] !== a[field]) throw new RangeError(`layer ${l}: ${field} ${show(a[field])}, its kvSource ${src} has ${show(s[field])}`);
    }
  }
}

/** The fields of an attention that uniformAttention compares (all of them by default). */
export type AttentionField = Exclude<keyof AttentionSpec, 'kind'>;
export const ATTENTION_FIELDS: readonly AttentionField[] = ['heads', 'kvHeads', 'headDim', 'scale', 'window', 'sinks', 'rope', 'qkNorm', 'softcap', 'kvSource'];

/** The attention every layer shares, or why there is none. */
export type UniformAttention = { readonly shape: AttentionSpec; readonly reason?: undefined } | { readonly shape?: undefined; readonly reason: string };

/**
 * The first attention layer's attention when every other layer is a linear-attention layer or has
 * attention agreeing with it on `fields` (default: all),
 * else a reason naming the first layer that differs and how. For code that still assumes one shape
 * for the whole model (one pool row width, one RoPE table per chunk, one scale in a kernel): it
 * refuses a model it would run wrongly, with a message a user can read.
 */
export function uniformAttention(specs: readonly LayerSpec[], fields: readonly AttentionField[] = ATTENTION_FIELDS): UniformAttention {
  if (specs.length === 0) return { reason: 'the model has no layers' };
  // linear-attention layers have no attention shape to agree on: the attention layers between them must
  const l0 = specs.findIndex((spec) => spec.attention.kind !== 'linear');
  if (l0 < 0) return { reason: 'the model has no attention layer' };
  const first = specs[l0]!.attention;
  if (first.kind !== 'attention') return { reason: `layer ${l0} has no attention (no KV rows)` };
  for (let l = l0 + 1; l < specs.length; l++) {
    const a = specs[l]!.attention;
    if (a.kind === 'linear') continue;
    if (a.kind !== 'attention') return { reason: `layer ${l} has no attention (no KV rows), layer ${l0} has` };
    for (const field of fields) {
      if (!sameValue(a[field], first[field])) return { reason: `layer ${l} has ${field} ${show(a[field])}, layer ${l0} ${show(first[field])}` };
    }
  }
  return { shape: first };
}

/**
 * The frequencies onnx/ops.ts's ropeRows and the stage graphs take for a layer's RoPE, or
 * undefined when the layer has none. For the llama family it is what graphs.ts stageRope(hyper)
 * gives (the same fields, so the same cos/sin bits). `contextLength`: the session's, which picks
 * LongRoPE's factor set (ropeForContext); without it a LongRoPE layer takes its short factors.
 */
export function ropeFrequencies(attention: AttentionSpec, contextLength?: number): RopeFrequencies | undefined {
  const rope = attention.rope;
  if (rope === undefined) return undefined;
  const base: RopeFrequencies = {
    headDim: attention.headDim,
    theta: rope.base,
    layout: rope.layout,
    ...(rope.dims !== attention.headDim ? { rotaryDim: rope.dims } : {}),
    ...(rope.freqFactors ? { freqFactors: rope.freqFactors } : {}),
  };
  const scaling = rope.scaling;
  if (scaling === undefined) return base;
  // YaRN's mscale multiplies cos and sin (its frequencies: ropeInvFreq)
  if (scaling.kind === 'yarn') return { ...base, scaling, ...(scaling.attnFactor !== undefined && scaling.attnFactor !== 1 ? { attnFactor: scaling.attnFactor } : {}) };
  if (scaling.kind !== 'longrope') return { ...base, scaling };
  return { ...base, ...ropeForContext(scaling, contextLength ?? 0) };
}

/**
 * LongRoPE's frequency divisors and attention factor for a session of `contextLength` positions:
 * the long factors when the context exceeds the trained original (originalContextLength), else the
 * short ones — llama.cpp's rule (llama_model::get_rope_factors compares its context size n_ctx_seq
 * with n_ctx_orig_yarn), so both engines rotate the same for the same context. (Hugging Face
 * switches per call on the sequence length instead; a context chosen once keeps every cached key
 * rotated one way.) The attention factor applies whichever set is picked, as in both.
 */
export function ropeForContext(scaling: RopeScaling, contextLength: number): { freqFactors: readonly number[]; attnFactor?: number } {
  const original = scaling.originalContextLength ?? 0;
  const factors = contextLength > original ? scaling.longFactors : scaling.shortFactors;
  if (factors === undefined) throw new Error('LongRoPE scaling without its short and long factors');
  const attn = scaling.attnFactor ?? 1;
  return { freqFactors: factors, ...(attn !== 1 ? { attnFactor: attn } : {}) };
}

function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  // keys holding undefined count as absent ({ scaling: undefined } is { })
  const ka = Object.keys(a).filter((k) => (a as Record<string, unknown>)[k] !== undefined);
  const kb = Object.keys(b).filter((k) => (b as Record<string, unknown>)[k] !== undefined);
  return ka.length === kb.length && ka.every((k) => sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

function show(value: unknown): string {
  if (value === undefined) return 'none';
  return typeof value === 'object' ? JSON.stringify(value) : String(value);
}
