// The dense part of the model as L + 1 onnxruntime graphs ("stages"), one session.run each per
// chunk of tokens (ARCHITECTURE.md §3). Attention sits between stages, in the native pool:
//
//   stage 0       h                          → pre(0)                      → q, k, v
//   stage ℓ (1..L−1)  h, attn(ℓ−1)           → post(ℓ−1) ⨾ pre(ℓ)          → q, k, v, h_next
//   stage L       h, attn(L−1), rows         → post(L−1) ⨾ final norm ⨾ LM head on `rows` → logits
//
// pre(ℓ) = norm, q/k/v projections (+bias), RoPE at `pos`; post(ℓ) = output projection,
// residual, norm, MLP, residual. Fusing post(ℓ−1) with pre(ℓ) halves the runs per token.
// Shapes: h [1, T, d], attn and q [1, T, heads·headDim], k and v [1, T, kvHeads·headDim],
// pos int64 [1, T] = 0..T−1 (each token's row of the RoPE rows), rope_cos and rope_sin float32
// [T, rotaryDim/2] (the cos/sin of the chunk's absolute positions: ropeRows(stageRope(hyper), p0, T)),
// rows int64 [R] (indices into T), logits [1, R, vocab].
import type { ModelHyperparameters } from '../model/types.ts';
import { GraphBuilder } from '../onnx/graph-builder.ts';
import { addRopeInputs, layerNorm, linear, reluMlp, rmsNorm, rope, skipRmsNorm, swigluMlp, type RopeCaches, type RopeFrequencies } from '../onnx/ops.ts';
import type { ModelWeights } from './weights.ts';

/** Every input a stage graph may have (shapes above). */
export const STAGE_INPUTS = ['h', 'attn', 'pos', 'rope_cos', 'rope_sin', 'rows'] as const;
export type StageInput = (typeof STAGE_INPUTS)[number];

export interface StageGraph {
  name: string;
  model: Uint8Array;
  /** Bytes of weights in the graph. */
  weightBytes: number;
  inputs: readonly StageInput[];
}

export interface StageOptions {
  /**
   * InfiniGen (llama family): stage s also outputs q_spec [1, T, heads·headDim] = RoPE(x_s·W_q^{(s+1)} + b),
   * layer s+1's query computed from layer s's normalised attention input (ARCHITECTURE.md §4.4).
   * The skew A[:, C] is applied natively (it is chosen per prompt, after the graphs are built).
   */
  speculateNext?: boolean;
}

const blk = (l: number, what: string): string => `blk.${l}.${what}`;

/** Builds stage `s` (0..L) of a llama-family or OPT model. */
export function buildStage(w: ModelWeights, s: number, opts: StageOptions): StageGraph {
  const hyper = w.model.hyper;
  return hyper.architecture === 'opt' ? optStage(w, hyper, s) : llamaStage(w, hyper, s, opts);
}

/** The RoPE of a llama-family model's stages (its cos/sin rows are fed per run: ropeRows). */
export function stageRope(hyper: ModelHyperparameters): RopeFrequencies {
  return { headDim: hyper.headDim, theta: hyper.ropeTheta ?? 10000, layout: hyper.ropeLayout ?? 'neox', ...(hyper.ropeScaling ? { scaling: hyper.ropeScaling } : {}) };
}

function dims(hyper: ModelHyperparameters): { d: number; qw: number; kvw: number } {
  return { d: hyper.hiddenSize, qw: hyper.heads * hyper.headDim, kvw: hyper.kvHeads * hyper.headDim };
}

function finish(g: GraphBuilder, inputs: StageGraph['inputs']): StageGraph {
  return { name: g.name, model: g.toModel(), weightBytes: g.weightBytes, inputs };
}

/** LM head on the chosen rows of an already normed [1, T, d]. */
function lmHead(g: GraphBuilder, w: ModelWeights, normed: string, vocab: number): void {
  const rows = g.input('rows', 'int64', ['R']);
  const picked = g.op('Gather', [normed, rows], { axis: 1 }, { name: 'pick_rows' });
  const head = linear(g, picked, w.linear(w.has('output.weight') ? 'output.weight' : 'token_embd.weight'), 'lm_head');
  g.rename(head, 'logits');
  g.output('logits', 'float32', [1, 'R', vocab]);
}

function llamaStage(w: ModelWeights, hyper: ModelHyperparameters, s: number, opts: StageOptions): StageGraph {
  const { d, qw, kvw } = dims(hyper);
  const L = hyper.layers;
  const eps = hyper.normEps;
  const g = new GraphBuilder(s === 0 ? 'stage0.pre0' : s === L ? `stage${s}.post${s - 1}.head` : `stage${s}.post${s - 1}.pre${s}`);
  const h = g.input('h', 'float32', [1, 'T', d]);
  const inputs: StageGraph['inputs'][number][] = ['h'];
  let residual = h; // the residual stream entering layer s
  let normed: string;
  if (s === 0) {
    normed = rmsNorm(g, h, w.vector(blk(0, 'attn_norm.weight')), eps, 'attn_norm0');
  } else {
    const p = s - 1;
    const attn = g.input('attn', 'float32', [1, 'T', qw]);
    inputs.push('attn');
    const o = linear(g, attn, w.linear(blk(p, 'attn_output.weight'), blk(p, 'attn_output.bias')), `l${p}.attn_output`);
    const mid = skipRmsNorm(g, o, h, w.vector(blk(p, 'ffn_norm.weight')), eps, `l${p}.ffn_norm`);
    const mlp = swigluMlp(g, mid.normed, { gate: w.linear(blk(p, 'ffn_gate.weight')), up: w.linear(blk(p, 'ffn_up.weight')), down: w.linear(blk(p, 'ffn_down.weight')) }, `l${p}.mlp`);
    const nextNorm = s === L ? w.vector('output_norm.weight') : w.vector(blk(s, 'attn_norm.weight'));
    const end = skipRmsNorm(g, mlp, mid.sum, nextNorm, eps, s === L ? 'output_norm' : `l${s}.attn_norm`);
    residual = end.sum;
    normed = end.normed;
  }
  if (s === L) {
    inputs.push('rows');
    lmHead(g, w, normed, hyper.vocabSize);
    return finish(g, inputs);
  }
  const pos = g.input('pos', 'int64', [1, 'T']);
  const caches: RopeCaches = addRopeInputs(g, stageRope(hyper));
  inputs.push('pos', 'rope_cos', 'rope_sin');
  const q = rope(g, linear(g, normed, w.linear(blk(s, 'attn_q.weight'), blk(s, 'attn_q.bias')), `l${s}.q_proj`), pos, caches, hyper.heads, `l${s}.q_rope`);
  const k = rope(g, linear(g, normed, w.linear(blk(s, 'attn_k.weight'), blk(s, 'attn_k.bias')), `l${s}.k_proj`), pos, caches, hyper.kvHeads, `l${s}.k_rope`);
  const v = linear(g, normed, w.linear(blk(s, 'attn_v.weight'), blk(s, 'attn_v.bias')), `l${s}.v_proj`);
  g.output(g.rename(q, 'q'), 'float32', [1, 'T', qw]);
  g.output(g.rename(k, 'k'), 'float32', [1, 'T', kvw]);
  g.output(g.rename(v, 'v'), 'float32', [1, 'T', kvw]);
  if (s > 0) g.output(g.rename(residual, 'h_next'), 'float32', [1, 'T', d]);
  if (opts.speculateNext === true && s + 1 < L) {
    const n = s + 1;
    const qs = rope(g, linear(g, normed, w.linear(blk(n, 'attn_q.weight'), blk(n, 'attn_q.bias')), `l${n}.q_spec_proj`), pos, caches, hyper.heads, `l${n}.q_spec_rope`);
    g.output(g.rename(qs, 'q_spec'), 'float32', [1, 'T', qw]);
  }
  return finish(g, inputs);
}

function optStage(w: ModelWeights, hyper: ModelHyperparameters, s: number): StageGraph {
  const { d, qw, kvw } = dims(hyper);
  const L = hyper.layers;
  const eps = hyper.normEps;
  const g = new GraphBuilder(s === 0 ? 'stage0.pre0' : s === L ? `stage${s}.post${s - 1}.head` : `stage${s}.post${s - 1}.pre${s}`);
  const h = g.input('h', 'float32', [1, 'T', d]);
  const inputs: StageGraph['inputs'][number][] = ['h'];
  let residual = h;
  if (s > 0) {
    const p = s - 1;
    const attn = g.input('attn', 'float32', [1, 'T', qw]);
    inputs.push('attn');
    const o = linear(g, attn, w.linear(blk(p, 'attn_output.weight'), blk(p, 'attn_output.bias')), `l${p}.attn_output`);
    const h1 = g.op('Add', [h, o], {}, { name: `l${p}.attn_residual` });
    const x = layerNorm(g, h1, w.vector(blk(p, 'ffn_norm.weight')), w.vector(blk(p, 'ffn_norm.bias')), eps, `l${p}.ffn_norm`);
    const m = reluMlp(g, x, { fc1: w.linear(blk(p, 'ffn_up.weight'), blk(p, 'ffn_up.bias')), fc2: w.linear(blk(p, 'ffn_down.weight'), blk(p, 'ffn_down.bias')) }, `l${p}.mlp`);
    residual = g.op('Add', [h1, m], {}, { name: `l${p}.mlp_residual` });
  }
  if (s === L) {
    inputs.push('rows');
    const normed = layerNorm(g, residual, w.vector('output_norm.weight'), w.vector('output_norm.bias'), eps, 'output_norm');
    lmHead(g, w, normed, hyper.vocabSize);
    return finish(g, inputs);
  }
  const x = layerNorm(g, residual, w.vector(blk(s, 'attn_norm.weight')), w.vector(blk(s, 'attn_norm.bias')), eps, `l${s}.attn_norm`);
  const q = linear(g, x, w.linear(blk(s, 'attn_q.weight'), blk(s, 'attn_q.bias')), `l${s}.q_proj`);
  const k = linear(g, x, w.linear(blk(s, 'attn_k.weight'), blk(s, 'attn_k.bias')), `l${s}.k_proj`);
  const v = linear(g, x, w.linear(blk(s, 'attn_v.weight'), blk(s, 'attn_v.bias')), `l${s}.v_proj`);
  g.output(g.rename(q, 'q'), 'float32', [1, 'T', qw]);
  g.output(g.rename(k, 'k'), 'float32', [1, 'T', kvw]);
  g.output(g.rename(v, 'v'), 'float32', [1, 'T', kvw]);
  if (s > 0) g.output(g.rename(residual, 'h_next'), 'float32', [1, 'T', d]);
  return finish(g, inputs);
}
