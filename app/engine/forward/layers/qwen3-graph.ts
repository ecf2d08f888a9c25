// Qwen3's onnxruntime stage graphs (graphs.ts draws the stages): the llama family's stages with
// one more step between the q/k projections and RoPE, a per-head RMSNorm (llama.cpp's qwen3.cpp:
// Qcur = rmsnorm(Qcur)·attn_q_norm, then rope; the same for K). The head size is the file's
// (hyper.headDim), so q is [1, T, heads·headDim] whatever the hidden size: Qwen3-0.6B's q has 2048
// features for a hidden size of 1024, and attn_output maps 2048 back to 1024. With speculateNext,
// stage s outputs layer s+1's query exactly as layer s+1 computes it, q_norm of layer s+1 included,
// since InfiniGen's skew was calibrated on those post-norm, post-RoPE queries.
import type { GraphBuilder } from '../../onnx/graph-builder.ts';
import { addRopeInputs, linear, rmsNorm, rope, skipRmsNorm, swigluMlp, type RopeCaches } from '../../onnx/ops.ts';
import type { ModelWeights } from '../weights.ts';
import { blk, finishStage, lmHead, startStage, stageRope, type StageGraph, type StageOptions } from './stage-graph.ts';

/**
 * RMSNorm of every head of x [1, T, heads·headDim] on its own (weight [headDim]): viewed as
 * [1, T, heads, headDim], normed over the last axis, viewed back.
 */
export function perHeadRmsNorm(g: GraphBuilder, x: string, weight: Float32Array, heads: number, eps: number, name: string): string {
  const headDim = weight.length;
  const split = g.initializer(`${name}.split_shape`, { elemType: 'int64', dims: [4], data: new BigInt64Array([0n, 0n, BigInt(heads), BigInt(headDim)]) });
  const join = g.initializer(`${name}.join_shape`, { elemType: 'int64', dims: [3], data: new BigInt64Array([0n, 0n, BigInt(heads * headDim)]) });
  const perHead = g.op('Reshape', [x, split], {}, { name: `${name}.split` });
  const normed = rmsNorm(g, perHead, weight, eps, name);
  return g.op('Reshape', [normed, join], {}, { name: `${name}.join` });
}

/** Stage `s` (0..L) of a Qwen3 model. */
export function qwen3StageGraph(w: ModelWeights, s: number, opts: StageOptions): StageGraph {
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
  /** Layer l's query from `normed`: projection, per-head q norm, RoPE. */
  const query = (l: number, tag: string): string => {
    const projected = linear(g, normed, w.linear(blk(l, 'attn_q.weight'), blk(l, 'attn_q.bias')), `l${l}.${tag}_proj`);
    const headNormed = perHeadRmsNorm(g, projected, w.vector(blk(l, 'attn_q_norm.weight')), hyper.heads, eps, `l${l}.${tag}_norm`);
    return rope(g, headNormed, pos, caches, hyper.heads, `l${l}.${tag}_rope`);
  };
  const q = query(s, 'q');
  const kProjected = linear(g, normed, w.linear(blk(s, 'attn_k.weight'), blk(s, 'attn_k.bias')), `l${s}.k_proj`);
  const kNormed = perHeadRmsNorm(g, kProjected, w.vector(blk(s, 'attn_k_norm.weight')), hyper.kvHeads, eps, `l${s}.k_norm`);
  const k = rope(g, kNormed, pos, caches, hyper.kvHeads, `l${s}.k_rope`);
  const v = linear(g, normed, w.linear(blk(s, 'attn_v.weight'), blk(s, 'attn_v.bias')), `l${s}.v_proj`);
  g.output(g.rename(q, 'q'), 'float32', [1, 'T', qw]);
  g.output(g.rename(k, 'k'), 'float32', [1, 'T', kvw]);
  g.output(g.rename(v, 'v'), 'float32', [1, 'T', kvw]);
  if (s > 0) g.output(g.rename(residual, 'h_next'), 'float32', [1, 'T', d]);
  if (opts.speculateNext === true && s + 1 < L) g.output(g.rename(query(s + 1, 'q_spec'), 'q_spec'), 'float32', [1, 'T', qw]);
  return finishStage(g, inputs);
}
