// Graph helpers for the dense parts of a decoder layer (ARCHITECTURE.md §3): norms, linear
// layers (fp32 or MatMulNBits), MLPs and RoPE. Each takes the builder and value names and
// returns the name of its result; weights arrive as fp32 host arrays in PyTorch order and become
// initializers named after `name`, stored in the builder's float type (float32 or float16, which
// is then also the type of the activations). Activations are shaped [..., features].

import type { RopeLayout, RopeScaling } from '../model/types.ts';
import { float, MS_DOMAIN, type GraphBuilder } from './graph-builder.ts';
import type { PackedNBits } from './matmul-nbits.ts';

// ---------------------------------------------------------------------------------------------
// Norms
// ---------------------------------------------------------------------------------------------

/** RMSNorm over the last axis: x / sqrt(mean(x²) + eps) · weight (SimplifiedLayerNormalization). */
export function rmsNorm(g: GraphBuilder, x: string, weight: Float32Array, eps: number, name: string): string {
  const w = g.floatInitializer(`${name}.weight`, [weight.length], weight);
  return g.op('SimplifiedLayerNormalization', [x, w], { axis: -1, epsilon: float(eps), stash_type: 1 }, { name });
}

/**
 * Residual add and RMSNorm in one op (com.microsoft SkipSimplifiedLayerNormalization):
 * sum = x + skip; normed = rmsnorm(sum) · weight. Returns both (sum is the new residual stream).
 */
export function skipRmsNorm(g: GraphBuilder, x: string, skip: string, weight: Float32Array, eps: number, name: string): { normed: string; sum: string } {
  const w = g.floatInitializer(`${name}.weight`, [weight.length], weight);
  const normed = g.fresh(name);
  const sum = g.fresh(`${name}.sum`);
  // outputs: output, mean, inv_std_var, input_skip_bias_sum
  g.node('SkipSimplifiedLayerNormalization', [x, skip, w], { epsilon: float(eps) }, { name, domain: MS_DOMAIN, outputs: [normed, '', '', sum] });
  return { normed, sum };
}

/** LayerNorm over the last axis with weight and bias (opset 17 LayerNormalization). */
export function layerNorm(g: GraphBuilder, x: string, weight: Float32Array, bias: Float32Array, eps: number, name: string): string {
  const w = g.floatInitializer(`${name}.weight`, [weight.length], weight);
  const b = g.floatInitializer(`${name}.bias`, [bias.length], bias);
  return g.op('LayerNormalization', [x, w, b], { axis: -1, epsilon: float(eps), stash_type: 1 }, { name });
}

// ---------------------------------------------------------------------------------------------
// Linear layers
// ---------------------------------------------------------------------------------------------

/** A Linear(in, out) with an fp32 weight in PyTorch order [out, in]. */
export interface LinearF32 {
  kind: 'f32';
  outFeatures: number;
  inFeatures: number;
  /** [out, in] row-major */
  weight: Float32Array;
  bias?: Float32Array;
}

/** A Linear(in, out) through com.microsoft MatMulNBits. */
export interface LinearNBits {
  kind: 'nbits';
  packed: PackedNBits;
  bias?: Float32Array;
  /** 4 (int8 compute) is what makes it fast on CPU; 0 computes in fp32. Default 4. */
  accuracyLevel?: 0 | 1 | 2 | 3 | 4;
  /** Pass the (default-valued) zero points explicitly instead of relying on the op's default. */
  explicitZeroPoints?: boolean;
}

export type LinearWeights = LinearF32 | LinearNBits;

export function outFeatures(w: LinearWeights): number {
  return w.kind === 'f32' ? w.outFeatures : w.packed.n;
}

/** [out, in] -> [in, out], the layout MatMul wants for x · Wᵀ. */
export function transpose(weight: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = weight[r * cols + c]!;
  return out;
}

/** y = x · Wᵀ (+ bias). */
export function linear(g: GraphBuilder, x: string, w: LinearWeights, name: string): string {
  if (w.kind === 'f32') {
    if (w.weight.length !== w.outFeatures * w.inFeatures) throw new RangeError(`${name}: weight has ${w.weight.length} values for [${w.outFeatures}, ${w.inFeatures}]`);
    const wt = g.floatInitializer(`${name}.weight`, [w.inFeatures, w.outFeatures], transpose(w.weight, w.outFeatures, w.inFeatures));
    const y = g.op('MatMul', [x, wt], {}, { name: w.bias ? `${name}.matmul` : name });
    if (!w.bias) return y;
    const b = g.floatInitializer(`${name}.bias`, [w.bias.length], w.bias);
    return g.op('Add', [y, b], {}, { name });
  }
  const p = w.packed;
  const blocks = p.k / p.blockSize;
  const bInit = g.initializer(`${name}.qweight`, { elemType: 'uint8', dims: [p.n, blocks, (p.blockSize * p.bits) / 8], data: p.b });
  const scales = g.floatInitializer(`${name}.scales`, [p.n * blocks], p.scales); // same type as A
  const zp = w.explicitZeroPoints || p.customZeroPoints ? g.initializer(`${name}.zero_points`, { elemType: 'uint8', dims: [p.zeroPoints.length], data: p.zeroPoints }) : undefined;
  const bias = w.bias ? g.floatInitializer(`${name}.bias`, [w.bias.length], w.bias) : undefined;
  const attrs = { K: p.k, N: p.n, bits: p.bits, block_size: p.blockSize, accuracy_level: w.accuracyLevel ?? 4 };
  // inputs: A, B, scales, zero_points, g_idx, bias
  if (!p.mins) return g.op('MatMulNBits', [x, bInit, scales, zp, undefined, bias], attrs, { name, domain: MS_DOMAIN });
  // y = x·(scaled codes)ᵀ − (Σ of x over each 32-block)·minsᵀ: the GGUF min terms, exactly.
  const y = g.op('MatMulNBits', [x, bInit, scales, zp, undefined, bias], attrs, { name: `${name}.nbits`, domain: MS_DOMAIN });
  const groups = p.k / 32;
  const shape = g.initializer(`${name}.groups_shape`, { elemType: 'int64', dims: [3], data: new BigInt64Array([-1n, BigInt(groups), 32n]) });
  const axes = g.initializer(`${name}.groups_axes`, { elemType: 'int64', dims: [1], data: new BigInt64Array([-1n]) });
  const grouped = g.op('Reshape', [x, shape], {}, { name: `${name}.groups` });
  const sums = g.op('ReduceSum', [grouped, axes], { keepdims: 0 }, { name: `${name}.group_sums` }); // [rows, K/32]
  const minsT = g.floatInitializer(`${name}.mins`, [groups, p.n], transpose(p.mins, p.n, groups));
  const correction = g.op('MatMul', [sums, minsT], {}, { name: `${name}.min_term` }); // [rows, N]
  return g.op('Sub', [y, correction], {}, { name });
}

// ---------------------------------------------------------------------------------------------
// MLPs
// ---------------------------------------------------------------------------------------------

/** Llama MLP: down(silu(gate(x)) ⊙ up(x)). */
export function swigluMlp(g: GraphBuilder, x: string, w: { gate: LinearWeights; up: LinearWeights; down: LinearWeights }, name: string): string {
  const gate = linear(g, x, w.gate, `${name}.gate`);
  const up = linear(g, x, w.up, `${name}.up`);
  const sig = g.op('Sigmoid', [gate], {}, { name: `${name}.sigmoid` });
  const silu = g.op('Mul', [gate, sig], {}, { name: `${name}.silu` });
  const h = g.op('Mul', [silu, up], {}, { name: `${name}.glu` });
  return linear(g, h, w.down, `${name}.down`);
}

/** OPT MLP: fc2(relu(fc1(x))). */
export function reluMlp(g: GraphBuilder, x: string, w: { fc1: LinearWeights; fc2: LinearWeights }, name: string): string {
  const h = linear(g, x, w.fc1, `${name}.fc1`);
  const r = g.op('Relu', [h], {}, { name: `${name}.relu` });
  return linear(g, r, w.fc2, `${name}.fc2`);
}

// ---------------------------------------------------------------------------------------------
// RoPE
// ---------------------------------------------------------------------------------------------

export interface RopeOptions {
  headDim: number;
  /** Dimensions rotated per head (default headDim; smaller for partial rotary). */
  rotaryDim?: number;
  theta: number;
  layout: RopeLayout;
  /** Rows of the cos/sin tables: positions 0..maxPositions−1 can be used. */
  maxPositions: number;
  scaling?: RopeScaling;
  /**
   * Per rotated pair, a divisor of its frequency (LongRoPE's short or long factors, [rotaryDim/2]):
   * what llama.cpp's ggml_rope_ext takes as freq_factors.
   */
  freqFactors?: readonly number[];
  /** Multiplies every cos and sin (LongRoPE's attention factor; llama.cpp's attn_factor). Default 1. */
  attnFactor?: number;
}

/** Inverse frequencies θ^(−2i/d), i < d/2, with Llama 3 or linear scaling applied, then divided by freqFactors. */
export function ropeInvFreq(opts: Pick<RopeOptions, 'headDim' | 'rotaryDim' | 'theta' | 'scaling' | 'freqFactors'>): Float64Array {
  const d = opts.rotaryDim ?? opts.headDim;
  const inv = opts.scaling?.kind === 'yarn' ? yarnInvFreq(opts.scaling, d, opts.theta) : new Float64Array(d / 2);
  if (opts.scaling?.kind !== 'yarn') for (let i = 0; i < d / 2; i++) inv[i] = 1 / opts.theta ** ((2 * i) / d);
  const factors = opts.freqFactors;
  if (factors !== undefined) {
    if (factors.length !== d / 2) throw new RangeError(`${factors.length} RoPE frequency factors for ${d / 2} pairs`);
    for (let i = 0; i < d / 2; i++) inv[i]! /= factors[i]!;
  }
  const s = opts.scaling;
  if (!s || s.kind === 'yarn') return inv;
  // LongRoPE's factors reach here as freqFactors (layer-spec.ts ropeFrequencies picks the set)
  if (s.kind === 'longrope') throw new Error('LongRoPE scaling must be resolved to frequency factors for a context length first (ropeFrequencies)');
  if (s.kind === 'linear') return inv.map((f) => f / s.factor);
  // Llama 3: keep high frequencies, divide low ones by factor, blend in between.
  const low = s.lowFreqFactor ?? 1;
  const high = s.highFreqFactor ?? 4;
  const original = s.originalContextLength ?? 8192;
  const lowWavelen = original / low;
  const highWavelen = original / high;
  return inv.map((f) => {
    const wavelen = (2 * Math.PI) / f;
    if (wavelen < highWavelen) return f;
    if (wavelen > lowWavelen) return f / s.factor;
    const smooth = (original / wavelen - low) / (high - low);
    return (1 - smooth) * (f / s.factor) + smooth * f;
  });
}

/** YaRN's per-pair frequencies for d rotated dims at `base` (model/arch/gpt-oss.ts yarnScaling has the formulas; float64 like the other scalings). */
export function yarnInvFreq(scaling: RopeScaling, dims: number, base: number): Float64Array {
  const half = dims / 2;
  const freqScale = 1 / scaling.factor;
  const n0 = scaling.originalContextLength ?? 0;
  const ext = scaling.extFactor ?? 1;
  const corr = (beta: number): number => (dims * Math.log(n0 / (beta * 2 * Math.PI))) / (2 * Math.log(base));
  const low = Math.max(0, Math.floor(corr(scaling.betaFast ?? 32)));
  const high = Math.min(dims - 1, Math.ceil(corr(scaling.betaSlow ?? 1)));
  const inv = new Float64Array(half);
  for (let i = 0; i < half; i++) {
    const theta = base ** ((-2 * i) / dims);
    const y = (i - low) / Math.max(0.001, high - low);
    const ramp = (1 - Math.min(1, Math.max(0, y))) * ext;
    inv[i] = theta * (freqScale * (1 - ramp) + ramp);
  }
  return inv;
}

/** What the cos/sin values depend on (every RopeOptions field but the table length). */
export type RopeFrequencies = Omit<RopeOptions, 'maxPositions'>;

/**
 * cos/sin rows of positions p0 .. p0+count−1, each [count, rotaryDim/2]: row r holds
 * cos((p0 + r)·f_i) and sin((p0 + r)·f_i), the angle in float64, then rounded to float32 — the
 * values of ropeTables' rows p0.., bit for bit (ropeTables is this with p0 = 0).
 */
export function ropeRows(opts: RopeFrequencies, p0: number, count: number): { cos: Float32Array; sin: Float32Array } {
  const inv = ropeInvFreq(opts);
  const half = inv.length;
  const m = opts.attnFactor ?? 1;
  const cos = new Float32Array(count * half);
  const sin = new Float32Array(count * half);
  for (let r = 0; r < count; r++) {
    const p = p0 + r;
    for (let i = 0; i < half; i++) {
      const angle = p * inv[i]!;
      cos[r * half + i] = Math.cos(angle) * m;
      sin[r * half + i] = Math.sin(angle) * m;
    }
  }
  return { cos, sin };
}

/** cos/sin tables [maxPositions, rotaryDim/2] as the RotaryEmbedding op reads them. */
export function ropeTables(opts: RopeOptions): { cos: Float32Array; sin: Float32Array } {
  return ropeRows(opts, 0, opts.maxPositions);
}

export interface RopeCaches {
  cos: string;
  sin: string;
  options: RopeFrequencies;
}

/** Adds the cos/sin tables once per graph, as initializers [maxPositions, rotaryDim/2]; q and k share them. */
export function addRopeCaches(g: GraphBuilder, opts: RopeOptions, prefix = 'rope'): RopeCaches {
  const { cos, sin } = ropeTables(opts);
  const half = cos.length / opts.maxPositions;
  return {
    cos: g.floatInitializer(`${prefix}.cos`, [opts.maxPositions, half], cos),
    sin: g.floatInitializer(`${prefix}.sin`, [opts.maxPositions, half], sin),
    options: opts,
  };
}

/** Graph inputs ROPE_INPUTS.cos / .sin: float32 [T, rotaryDim/2] each, the rows of the chunk's own positions (ropeRows(opts, p0, T)). */
export const ROPE_INPUTS = { cos: 'rope_cos', sin: 'rope_sin' } as const;

/**
 * The cos/sin tables as graph inputs holding only the chunk's T rows (ropeRows), read with
 * position ids 0..T−1. A graph with tables as initializers holds maxPositions rows of both per
 * graph (16 stages of a 64-dim model at a 32K context: 134 MB, and the time to compute them at
 * load); fed per run they cost T·rotaryDim values and keep the graph independent of the context.
 */
export function addRopeInputs(g: GraphBuilder, opts: RopeFrequencies): RopeCaches {
  const half = (opts.rotaryDim ?? opts.headDim) / 2;
  return {
    cos: g.input(ROPE_INPUTS.cos, 'float32', ['T', half]),
    sin: g.input(ROPE_INPUTS.sin, 'float32', ['T', half]),
    options: opts,
  };
}

/**
 * RoPE on x [batch, seq, heads·headDim] at positions `positionIds` (int64 [batch, seq]) with
 * com.microsoft RotaryEmbedding. 'interleaved' rotates pairs (2i, 2i+1); 'neox' pairs (i, i + d/2).
 */
export function rope(g: GraphBuilder, x: string, positionIds: string, caches: RopeCaches, heads: number, name: string): string {
  const o = caches.options;
  const rotaryDim = o.rotaryDim ?? o.headDim;
  const partial = rotaryDim !== o.headDim ? { rotary_embedding_dim: rotaryDim, num_heads: heads } : {};
  return g.op('RotaryEmbedding', [x, positionIds, caches.cos, caches.sin], { interleaved: o.layout === 'interleaved' ? 1 : 0, ...partial }, { name, domain: MS_DOMAIN });
}
