// A plain reference forward pass, in float64, for tests that check the real engine.
//
// It reads the weights of a LoadedModel (any format, canonical GGUF-style names), widens them to
// float64 once, and runs the model token by token with a full causal attention over every past
// position. Nothing is fused, tiled, reordered or approximated: clarity over speed. It is meant
// for tiny models and contexts of about a hundred tokens.
//
// Families:
//   llama  token embedding → per block: RMSNorm, q/k/v (+bias when the file has one), RoPE
//          (interleaved or neox pairs, Llama 3 / linear frequency scaling), GQA attention, output
//          projection, residual, RMSNorm, SwiGLU MLP, residual → RMSNorm → LM head
//   opt    token embedding + learned position (row position + offset) → per block: LayerNorm,
//          multi-head attention with biases, residual, LayerNorm, ReLU MLP with biases, residual
//          → LayerNorm → LM head (tied)
// The LM head is output.weight when the file has one, else token_embd.weight.
import type { LoadedModel, ModelHyperparameters, RopeScaling } from '../../app/engine/model/types.ts';

export interface ReferenceForward {
  readonly hyper: ModelHyperparameters;
  /**
   * Teacher-forced next-token logits: element t is the logits (vocabSize) after reading
   * tokenIds[0..t] at positions 0..t. Computed from scratch on every call.
   */
  logits(tokenIds: readonly number[]): Float64Array[];
}

// ─── weights ────────────────────────────────────────────────────────────────────────────────

/** A weight widened to float64, row-major in PyTorch order ([out, in] for a Linear). */
interface Matrix {
  readonly rows: number;
  readonly cols: number;
  readonly data: Float64Array; // (rows, cols)
}

class Weights {
  constructor(private readonly model: LoadedModel) {}

  has(name: string): boolean {
    return this.model.tensors.has(name);
  }

  /** A 2-D weight [rows, cols]. */
  matrix(name: string): Matrix {
    const view = this.model.tensors.get(name);
    if (view === undefined) throw new Error(`reference forward: tensor ${name} is missing`);
    if (view.shape.length !== 2) throw new Error(`reference forward: ${name} has shape [${view.shape.join(', ')}], expected 2 dimensions`);
    return { rows: view.shape[0] as number, cols: view.shape[1] as number, data: Float64Array.from(view.toFloat32()) };
  }

  /** A 1-D weight of `length` elements. */
  vector(name: string, length: number): Float64Array {
    const view = this.model.tensors.get(name);
    if (view === undefined) throw new Error(`reference forward: tensor ${name} is missing`);
    if (view.elements !== length) throw new Error(`reference forward: ${name} has ${view.elements} elements, expected ${length}`);
    return Float64Array.from(view.toFloat32());
  }

  /** A 1-D weight when the file has it. */
  optionalVector(name: string, length: number): Float64Array | undefined {
    return this.has(name) ? this.vector(name, length) : undefined;
  }
}

// ─── basic operations (all float64) ─────────────────────────────────────────────────────────

/** y = W·x (+ b): W is [out, in], x has `in` elements. */
function linear(w: Matrix, x: Float64Array, bias?: Float64Array): Float64Array {
  if (x.length !== w.cols) throw new Error(`reference forward: ${x.length} inputs for a [${w.rows}, ${w.cols}] weight`);
  const y = new Float64Array(w.rows);
  for (let r = 0; r < w.rows; r++) {
    let sum = 0;
    for (let c = 0; c < w.cols; c++) sum += (w.data[r * w.cols + c] as number) * (x[c] as number);
    y[r] = sum + (bias === undefined ? 0 : (bias[r] as number));
  }
  return y;
}

/** x / sqrt(mean(x²) + eps) · w */
function rmsNorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  let squares = 0;
  for (const v of x) squares += v * v;
  const scale = 1 / Math.sqrt(squares / x.length + eps);
  return x.map((v, i) => v * scale * (w[i] as number));
}

/** (x − mean) / sqrt(var + eps) · w + b, with the biased variance (nn.LayerNorm). */
function layerNorm(x: Float64Array, w: Float64Array, b: Float64Array, eps: number): Float64Array {
  let mean = 0;
  for (const v of x) mean += v;
  mean /= x.length;
  let variance = 0;
  for (const v of x) variance += (v - mean) * (v - mean);
  variance /= x.length;
  const scale = 1 / Math.sqrt(variance + eps);
  return x.map((v, i) => (v - mean) * scale * (w[i] as number) + (b[i] as number));
}

function addInPlace(x: Float64Array, y: Float64Array): void {
  for (let i = 0; i < x.length; i++) x[i] = (x[i] as number) + (y[i] as number);
}

function silu(v: number): number {
  return v / (1 + Math.exp(-v));
}

/** Row `index` of a matrix, copied. */
function row(m: Matrix, index: number): Float64Array {
  return m.data.slice(index * m.cols, (index + 1) * m.cols);
}

/** ln softmax(logits), computed stably. */
export function logSoftmax(logits: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i] as number);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp((logits[i] as number) - max);
  const lse = max + Math.log(sum);
  return Float64Array.from({ length: logits.length }, (_, i) => (logits[i] as number) - lse);
}

/** Index of the largest value; ties go to the lowest index (as llama.cpp's greedy does). */
export function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if ((values[i] as number) > (values[best] as number)) best = i;
  return best;
}

// ─── attention ──────────────────────────────────────────────────────────────────────────────

/**
 * Full causal attention of one query position over every cached position (the current one
 * included, as the last entry). q is [heads·headDim]; each cached k/v is [kvHeads·headDim].
 * Query head h reads KV head floor(h / (heads / kvHeads)). Scores are q·k / sqrt(headDim).
 */
function attention(q: Float64Array, keys: readonly Float64Array[], values: readonly Float64Array[], heads: number, kvHeads: number, headDim: number): Float64Array {
  const out = new Float64Array(heads * headDim);
  const group = heads / kvHeads;
  const scale = 1 / Math.sqrt(headDim);
  for (let h = 0; h < heads; h++) {
    const g = Math.floor(h / group);
    const scores = keys.map((k) => {
      let dot = 0;
      for (let i = 0; i < headDim; i++) dot += (q[h * headDim + i] as number) * (k[g * headDim + i] as number);
      return dot * scale;
    });
    const max = Math.max(...scores);
    const weights = scores.map((s) => Math.exp(s - max));
    const total = weights.reduce((a, b) => a + b, 0);
    for (let j = 0; j < values.length; j++) {
      const p = (weights[j] as number) / total;
      const v = values[j] as Float64Array;
      for (let i = 0; i < headDim; i++) out[h * headDim + i] = (out[h * headDim + i] as number) + p * (v[g * headDim + i] as number);
    }
  }
  return out;
}

// ─── RoPE ───────────────────────────────────────────────────────────────────────────────────

/**
 * The rotation frequency (radians per position) of each dimension pair i < headDim/2:
 * theta^(−2i/headDim), then linear scaling (÷ factor) or Llama 3 scaling (Hugging Face's
 * `_compute_llama3_parameters`: long wavelengths ÷ factor, short ones kept, a smooth blend between).
 */
export function ropeFrequencies(headDim: number, theta: number, scaling?: RopeScaling): Float64Array {
  const out = new Float64Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) {
    const base = Math.pow(theta, (-2 * i) / headDim);
    out[i] = scaling === undefined ? base : scaledFrequency(base, scaling);
  }
  return out;
}

function scaledFrequency(frequency: number, scaling: RopeScaling): number {
  if (scaling.kind === 'linear') return frequency / scaling.factor;
  const low = scaling.lowFreqFactor ?? 1;
  const high = scaling.highFreqFactor ?? 4;
  const original = scaling.originalContextLength ?? 8192;
  const wavelength = (2 * Math.PI) / frequency;
  if (wavelength < original / high) return frequency; // high frequency: kept
  if (wavelength > original / low) return frequency / scaling.factor; // low frequency: scaled
  const smooth = (original / wavelength - low) / (high - low);
  return (1 - smooth) * (frequency / scaling.factor) + smooth * frequency;
}

/**
 * Rotates every head of x (heads·headDim) in place by position·frequency. Pair i is
 * (2i, 2i+1) for 'interleaved' and (i, i + headDim/2) for 'neox';
 * (a, b) → (a·cos − b·sin, a·sin + b·cos).
 */
function applyRope(x: Float64Array, heads: number, headDim: number, position: number, frequencies: Float64Array, layout: 'interleaved' | 'neox'): void {
  const half = headDim / 2;
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < half; i++) {
      const ia = h * headDim + (layout === 'interleaved' ? 2 * i : i);
      const ib = h * headDim + (layout === 'interleaved' ? 2 * i + 1 : i + half);
      const angle = position * (frequencies[i] as number);
      const cos = Math.cos(angle);
      const sin = Math.sin(angle);
      const a = x[ia] as number;
      const b = x[ib] as number;
      x[ia] = a * cos - b * sin;
      x[ib] = a * sin + b * cos;
    }
  }
}

// ─── the model ──────────────────────────────────────────────────────────────────────────────

interface LlamaBlock {
  attnNorm: Float64Array;
  q: Matrix;
  qBias?: Float64Array;
  k: Matrix;
  kBias?: Float64Array;
  v: Matrix;
  vBias?: Float64Array;
  output: Matrix;
  outputBias?: Float64Array;
  ffnNorm: Float64Array;
  gate: Matrix;
  up: Matrix;
  down: Matrix;
}

interface OptBlock {
  attnNorm: Float64Array;
  attnNormBias: Float64Array;
  q: Matrix;
  qBias?: Float64Array;
  k: Matrix;
  kBias?: Float64Array;
  v: Matrix;
  vBias?: Float64Array;
  output: Matrix;
  outputBias?: Float64Array;
  ffnNorm: Float64Array;
  ffnNormBias: Float64Array;
  up: Matrix; // fc1
  upBias?: Float64Array;
  down: Matrix; // fc2
  downBias?: Float64Array;
}

/** Bias vectors are used when the file has them (qkvBias / enable_bias decide what the loader kept). */
function withBias<T extends object>(value: T, key: string, bias: Float64Array | undefined): T {
  return bias === undefined ? value : { ...value, [key]: bias };
}

/**
 * Which past positions a query sees (llama family): `firstVisible(layer, position)` is the first
 * position attended (default 0: every one). A sliding window of w is position − w + 1.
 */
export interface ReferenceOptions {
  firstVisible?: (layer: number, position: number) => number;
}

export function referenceForward(model: LoadedModel, options: ReferenceOptions = {}): ReferenceForward {
  const hyper = model.hyper;
  if (hyper.architecture === 'opt' && options.firstVisible) throw new RangeError('reference forward: firstVisible is for the llama family');
  return hyper.architecture === 'opt' ? optForward(model) : llamaForward(model, options);
}

function lmHead(w: Weights): Matrix {
  return w.matrix(w.has('output.weight') ? 'output.weight' : 'token_embd.weight');
}

function checkTokens(tokenIds: readonly number[], vocab: number): void {
  for (const id of tokenIds) {
    if (!Number.isInteger(id) || id < 0 || id >= vocab) throw new RangeError(`reference forward: token id ${id} is outside the vocabulary (${vocab})`);
  }
}

function llamaForward(model: LoadedModel, options: ReferenceOptions): ReferenceForward {
  const hyper = model.hyper;
  const { hiddenSize: d, heads, kvHeads, headDim, normEps: eps } = hyper;
  const w = new Weights(model);
  const qRows = heads * headDim;
  const kvRows = kvHeads * headDim;
  const blocks: LlamaBlock[] = [];
  for (let l = 0; l < hyper.layers; l++) {
    const p = `blk.${l}.`;
    let block: LlamaBlock = {
      attnNorm: w.vector(`${p}attn_norm.weight`, d),
      q: w.matrix(`${p}attn_q.weight`),
      k: w.matrix(`${p}attn_k.weight`),
      v: w.matrix(`${p}attn_v.weight`),
      output: w.matrix(`${p}attn_output.weight`),
      ffnNorm: w.vector(`${p}ffn_norm.weight`, d),
      gate: w.matrix(`${p}ffn_gate.weight`),
      up: w.matrix(`${p}ffn_up.weight`),
      down: w.matrix(`${p}ffn_down.weight`),
    };
    block = withBias(block, 'qBias', w.optionalVector(`${p}attn_q.bias`, qRows));
    block = withBias(block, 'kBias', w.optionalVector(`${p}attn_k.bias`, kvRows));
    block = withBias(block, 'vBias', w.optionalVector(`${p}attn_v.bias`, kvRows));
    block = withBias(block, 'outputBias', w.optionalVector(`${p}attn_output.bias`, d));
    if (hyper.qkvBias && block.qBias === undefined) throw new Error(`reference forward: qkvBias is set but ${p}attn_q.bias is missing`);
    blocks.push(block);
  }
  const embedding = w.matrix('token_embd.weight');
  const outputNorm = w.vector('output_norm.weight', d);
  const head = lmHead(w);
  const frequencies = ropeFrequencies(headDim, hyper.ropeTheta ?? 10000, hyper.ropeScaling);
  const layout = hyper.ropeLayout;
  if (layout === undefined) throw new Error('reference forward: a llama-family model needs ropeLayout');

  return {
    hyper,
    logits(tokenIds) {
      checkTokens(tokenIds, embedding.rows);
      const keys: Float64Array[][] = blocks.map(() => []); // (layer, position) → [kvHeads·headDim], after RoPE
      const values: Float64Array[][] = blocks.map(() => []); // (layer, position) → [kvHeads·headDim]
      const out: Float64Array[] = [];
      tokenIds.forEach((token, position) => {
        const x = row(embedding, token); // the residual stream, [d]
        blocks.forEach((b, l) => {
          const h = rmsNorm(x, b.attnNorm, eps);
          const q = linear(b.q, h, b.qBias);
          const k = linear(b.k, h, b.kBias);
          const v = linear(b.v, h, b.vBias);
          applyRope(q, heads, headDim, position, frequencies, layout);
          applyRope(k, kvHeads, headDim, position, frequencies, layout);
          (keys[l] as Float64Array[]).push(k);
          (values[l] as Float64Array[]).push(v);
          const from = options.firstVisible?.(l, position) ?? 0;
          const mixed = attention(q, (keys[l] as Float64Array[]).slice(from), (values[l] as Float64Array[]).slice(from), heads, kvHeads, headDim);
          addInPlace(x, linear(b.output, mixed, b.outputBias));
          const f = rmsNorm(x, b.ffnNorm, eps);
          const gate = linear(b.gate, f);
          const up = linear(b.up, f);
          const act = gate.map((g, i) => silu(g) * (up[i] as number));
          addInPlace(x, linear(b.down, act));
        });
        out.push(linear(head, rmsNorm(x, outputNorm, eps)));
      });
      return out;
    },
  };
}

function optForward(model: LoadedModel): ReferenceForward {
  const hyper = model.hyper;
  const { hiddenSize: d, heads, headDim, ffnSize: ffn, normEps: eps } = hyper;
  const offset = hyper.positionOffset ?? 2;
  const w = new Weights(model);
  const blocks: OptBlock[] = [];
  for (let l = 0; l < hyper.layers; l++) {
    const p = `blk.${l}.`;
    let block: OptBlock = {
      attnNorm: w.vector(`${p}attn_norm.weight`, d),
      attnNormBias: w.vector(`${p}attn_norm.bias`, d),
      q: w.matrix(`${p}attn_q.weight`),
      k: w.matrix(`${p}attn_k.weight`),
      v: w.matrix(`${p}attn_v.weight`),
      output: w.matrix(`${p}attn_output.weight`),
      ffnNorm: w.vector(`${p}ffn_norm.weight`, d),
      ffnNormBias: w.vector(`${p}ffn_norm.bias`, d),
      up: w.matrix(`${p}ffn_up.weight`),
      down: w.matrix(`${p}ffn_down.weight`),
    };
    block = withBias(block, 'qBias', w.optionalVector(`${p}attn_q.bias`, d));
    block = withBias(block, 'kBias', w.optionalVector(`${p}attn_k.bias`, d));
    block = withBias(block, 'vBias', w.optionalVector(`${p}attn_v.bias`, d));
    block = withBias(block, 'outputBias', w.optionalVector(`${p}attn_output.bias`, d));
    block = withBias(block, 'upBias', w.optionalVector(`${p}ffn_up.bias`, ffn));
    block = withBias(block, 'downBias', w.optionalVector(`${p}ffn_down.bias`, d));
    if (hyper.qkvBias && block.qBias === undefined) throw new Error(`reference forward: enable_bias is set but ${p}attn_q.bias is missing`);
    blocks.push(block);
  }
  const embedding = w.matrix('token_embd.weight');
  const positions = w.matrix('position_embd.weight');
  const outputNorm = w.vector('output_norm.weight', d);
  const outputNormBias = w.vector('output_norm.bias', d);
  const head = lmHead(w);

  return {
    hyper,
    logits(tokenIds) {
      checkTokens(tokenIds, embedding.rows);
      if (tokenIds.length + offset > positions.rows) {
        throw new RangeError(`reference forward: ${tokenIds.length} tokens need ${tokenIds.length + offset} position rows, the model has ${positions.rows}`);
      }
      const keys: Float64Array[][] = blocks.map(() => []); // (layer, position) → [d]
      const values: Float64Array[][] = blocks.map(() => []); // (layer, position) → [d]
      const out: Float64Array[] = [];
      tokenIds.forEach((token, position) => {
        const x = row(embedding, token); // the residual stream, [d]
        addInPlace(x, row(positions, position + offset));
        blocks.forEach((b, l) => {
          const h = layerNorm(x, b.attnNorm, b.attnNormBias, eps);
          // OPT multiplies q by 1/sqrt(headDim) after its bias; attention() divides the scores
          // by sqrt(headDim) instead: the same numbers.
          const q = linear(b.q, h, b.qBias);
          (keys[l] as Float64Array[]).push(linear(b.k, h, b.kBias));
          (values[l] as Float64Array[]).push(linear(b.v, h, b.vBias));
          const mixed = attention(q, keys[l] as Float64Array[], values[l] as Float64Array[], heads, heads, headDim);
          addInPlace(x, linear(b.output, mixed, b.outputBias));
          const f = layerNorm(x, b.ffnNorm, b.ffnNormBias, eps);
          const act = linear(b.up, f, b.upBias).map((v) => Math.max(0, v));
          addInPlace(x, linear(b.down, act, b.downBias));
        });
        out.push(linear(head, layerNorm(x, outputNorm, outputNormBias, eps)));
      });
      return out;
    },
  };
}
