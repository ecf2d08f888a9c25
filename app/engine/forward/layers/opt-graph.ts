// OPT's onnxruntime stage graphs (graphs.ts draws the stages): pre-LayerNorm (weight and bias)
// before attention and before the MLP, q/k/v projections with bias and no RoPE (OPT's positions are
// learned and added to the embedding), ReLU MLP (fc1, fc2) with bias, plain residual adds. No
// speculative query: OPT runs only with policy 'full' (opt.ts).
import { layerNorm, linear, reluMlp } from '../../onnx/ops.ts';
import type { ModelWeights } from '../weights.ts';
import { blk, finishStage, lmHead, startStage, type StageGraph } from './stage-graph.ts';

/** Stage `s` (0..L) of an OPT model. */
export function optStageGraph(w: ModelWeights, s: number): StageGraph {
  const { hyper, d, qw, kvw, L, eps, g, h, inputs } = startStage(w, s);
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
    return finishStage(g, inputs);
  }
  const x = layerNorm(g, residual, w.vector(blk(s, 'attn_norm.weight')), w.vector(blk(s, 'attn_norm.bias')), eps, `l${s}.attn_norm`);
  const q = linear(g, x, w.linear(blk(s, 'attn_q.weight'), blk(s, 'attn_q.bias')), `l${s}.q_proj`);
  const k = linear(g, x, w.linear(blk(s, 'attn_k.weight'), blk(s, 'attn_k.bias')), `l${s}.k_proj`);
  const v = linear(g, x, w.linear(blk(s, 'attn_v.weight'), blk(s, 'attn_v.bias')), `l${s}.v_proj`);
  g.output(g.rename(q, 'q'), 'float32', [1, 'T', qw]);
  g.output(g.rename(k, 'k'), 'float32', [1, 'T', kvw]);
  g.output(g.rename(v, 'v'), 'float32', [1, 'T', kvw]);
  if (s > 0) g.output(g.rename(residual, 'h_next'), 'float32', [1, 'T', d]);
  return finishStage(g, inputs);
}
