// Gemma 4's onnxruntime stage graphs (graphs.ts draws the stages; forward/layers/gemma4.ts's header
// is the computation): Gemma's sandwich norms, GeGLU, q/k norm and final soft-cap from gemma-graph.ts,
// with what Gemma 4 adds per layer —
//   - each layer's own head dim and KV heads (stage s emits q [1, T, heads·d_s], k and v
//     [1, T, kvHeads_s·d_s]; post(s−1) takes attn [1, T, heads·d_{s−1}])
//   - v RMS-normed per head without a weight; v = k's projection where the layer has no attn_v
//   - a KV-shared layer emits q only (the step loop attends its source's rows)
//   - layer_output_scale: the layer's whole output (residual included) times a scalar
//   - RoPE rows per layer (proportional on the global layers: their frequency factors are in the rows)
import { linear, rmsNorm, rope, skipRmsNorm, type RopeCaches, type RopeFrequencies } from '../../onnx/ops.ts';
import type { GraphBuilder } from '../../onnx/graph-builder.ts';
import type { ModelWeights } from '../weights.ts';
import { gegluMlp, headRmsNorm, sameRope, softcap } from './gemma-graph.ts';
import { ownsKv, ropeFrequencies, type AttentionSpec, type LayerSpec } from './layer-spec.ts';
import { blk, finishStage, lmHead, startStage, type StageGraph, type StageOptions } from './stage-graph.ts';

function ropeInputs(g: GraphBuilder, freq: RopeFrequencies, prefix: '' | 'spec_'): RopeCaches {
  const half = (freq.rotaryDim ?? freq.headDim) / 2;
  return { cos: g.input(`${prefix}rope_cos`, 'float32', ['T', half]), sin: g.input(`${prefix}rope_sin`, 'float32', ['T', half]), options: freq };
}

/** Stage `s` (0..L) of a Gemma 4 model whose layers are `specs`; `outputScale`: layers end in layer_output_scale; `finalSoftcap` 0: none. */
export function gemma4StageGraph(w: ModelWeights, s: number, opts: StageOptions, specs: readonly LayerSpec[], valueProjection: readonly boolean[], outputScale: boolean, finalSoftcap: number): StageGraph {
  const { hyper, d, L, eps, g, h, inputs } = startStage(w, s);
  const heads = hyper.heads;
  const att = (l: number): AttentionSpec => specs[l]!.attention as AttentionSpec;
  let normed: string;
  let residual = h;
  if (s === 0) {
    normed = rmsNorm(g, h, w.vector(blk(0, 'attn_norm.weight')), eps, 'attn_norm0');
  } else {
    const p = s - 1;
    const attn = g.input('attn', 'float32', [1, 'T', heads * att(p).headDim]);
    inputs.push('attn');
    const o = linear(g, attn, w.linear(blk(p, 'attn_output.weight')), `l${p}.attn_output`);
    const oNormed = rmsNorm(g, o, w.vector(blk(p, 'post_attention_norm.weight')), eps, `l${p}.post_attention_norm`);
    const mid = skipRmsNorm(g, oNormed, h, w.vector(blk(p, 'ffn_norm.weight')), eps, `l${p}.ffn_norm`);
    const mlp = gegluMlp(g, mid.normed, { gate: w.linear(blk(p, 'ffn_gate.weight')), up: w.linear(blk(p, 'ffn_up.weight')), down: w.linear(blk(p, 'ffn_down.weight')) }, `l${p}.mlp`);
    const mlpNormed = rmsNorm(g, mlp, w.vector(blk(p, 'post_ffw_norm.weight')), eps, `l${p}.post_ffw_norm`);
    const nextNorm = s === L ? w.vector('output_norm.weight') : w.vector(blk(s, 'attn_norm.weight'));
    const nextName = s === L ? 'output_norm' : `l${s}.attn_norm`;
    if (outputScale) {
      // llama.cpp: (ffn_post_norm(ffn) + attn_out) · layer_output_scale, then the next layer's norm of that
      const sum = g.op('Add', [mlpNormed, mid.sum], {}, { name: `l${p}.ffn_residual` });
      residual = g.op('Mul', [sum, g.floatInitializer(`l${p}.layer_output_scale`, [1], w.vector(blk(p, 'layer_output_scale.weight')))], {}, { name: `l${p}.output_scaled` });
      normed = rmsNorm(g, residual, nextNorm, eps, nextName);
    } else {
      const end = skipRmsNorm(g, mlpNormed, mid.sum, nextNorm, eps, nextName);
      residual = end.sum;
      normed = end.normed;
    }
  }
  if (s === L) {
    inputs.push('rows');
    if (finalSoftcap === 0) {
      lmHead(g, w, normed, hyper.vocabSize);
      return finishStage(g, inputs);
    }
    const rows = g.input('rows', 'int64', ['R']);
    const picked = g.op('Gather', [normed, rows], { axis: 1 }, { name: 'pick_rows' });
    const head = linear(g, picked, w.linear(w.has('output.weight') ? 'output.weight' : 'token_embd.weight'), 'lm_head');
    g.rename(softcap(g, head, finalSoftcap, 'final_softcap'), 'logits');
    g.output('logits', 'float32', [1, 'R', hyper.vocabSize]);
    return finishStage(g, inputs);
  }
  const a = att(s);
  const pos = g.input('pos', 'int64', [1, 'T']);
  const freq = ropeFrequencies(a)!;
  const caches = ropeInputs(g, freq, '');
  inputs.push('pos', 'rope_cos', 'rope_sin');
  const query = (layer: number, c: RopeCaches, name: string): string => {
    const x = linear(g, normed, w.linear(blk(layer, 'attn_q.weight')), `l${layer}.${name}_proj`);
    return rope(g, headRmsNorm(g, x, w.vector(blk(layer, 'attn_q_norm.weight')), heads, eps, `l${layer}.${name}_norm`), pos, c, heads, `l${layer}.${name}_rope`);
  };
  g.output(g.rename(query(s, caches, 'q'), 'q'), 'float32', [1, 'T', heads * a.headDim]);
  if (ownsKv(specs[s]!)) {
    const kvw = a.kvHeads * a.headDim;
    const kProj = linear(g, normed, w.linear(blk(s, 'attn_k.weight')), `l${s}.k_proj`);
    // v: its own projection, or k's (before k's norm) where the layer has no attn_v; RMS-normed per head without a weight
    const vProj = valueProjection[s] ? linear(g, normed, w.linear(blk(s, 'attn_v.weight')), `l${s}.v_proj`) : kProj;
    const k = rope(g, headRmsNorm(g, kProj, w.vector(blk(s, 'attn_k_norm.weight')), a.kvHeads, eps, `l${s}.k_norm`), pos, caches, a.kvHeads, `l${s}.k_rope`);
    const v = headRmsNorm(g, vProj, new Float32Array(a.headDim).fill(1), a.kvHeads, eps, `l${s}.v_norm`);
    g.output(g.rename(k, 'k'), 'float32', [1, 'T', kvw]);
    g.output(g.rename(v, 'v'), 'float32', [1, 'T', kvw]);
  }
  if (s > 0) g.output(g.rename(residual, 'h_next'), 'float32', [1, 'T', d]);
  if (opts.speculateNext === true && s + 1 < L) {
    const n = s + 1;
    const nextFreq = ropeFrequencies(att(n))!;
    let nextCaches = caches;
    if (!sameRope(freq, nextFreq)) {
      nextCaches = ropeInputs(g, nextFreq, 'spec_');
      inputs.push('spec_rope_cos', 'spec_rope_sin');
    }
    g.output(g.rename(query(n, nextCaches, 'q_spec'), 'q_spec'), 'float32', [1, 'T', heads * att(n).headDim]);
  }
  return finishStage(g, inputs);
}
