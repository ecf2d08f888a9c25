// The llama family's onnxruntime stage graphs (graphs.ts draws the stages): RMSNorm before
// attention and before the MLP, q/k/v projections (+ Qwen2's bias), RoPE at the chunk's positions,
// SwiGLU MLP; residual adds fused into SkipSimplifiedLayerNormalization. With speculateNext, stage s
// also outputs layer s+1's query from layer s's normalised input (InfiniGen, ARCHITECTURE.md §4.4).
import { addRopeInputs, linear, rmsNorm, rope, skipRmsNorm, swigluMlp, type RopeCaches } from '../../onnx/ops.ts';
import type { ModelWeights } from '../weights.ts';
import { blk, finishStage, lmHead, startStage, stageRope, type StageGraph, type StageOptions } from './stage-graph.ts';

/** Stage `s` (0..L) of a llama-family model. */
export function llamaStageGraph(w: ModelWeights, s: number, opts: StageOptions): StageGraph {
  const { hyper, d, qw, kvw, L, eps, g, h, inputs } = startStage(w, s);
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
    return finishStage(g, inputs);
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
  return finishStage(g, inputs);
}
