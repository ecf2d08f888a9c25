// Gemma 4's onnxruntime stage graphs (graphs.ts draws the stages; forward/layers/gemma4.ts's header
// is the computation): Gemma's sandwich norms, GeGLU, q/k norm and final soft-cap from gemma-graph.ts,
// with what Gemma 4 adds per layer —
//   - each layer's own head dim and KV heads (stage s emits q [1, T, heads·d_s], k and v
//     [1, T, kvHeads_s·d_s]; post(s−1) takes attn [1, T, heads·d_{s−1}])
//   - v RMS-normed per head without a weight; v = k's projection where the layer has no attn_v
//   - a KV-shared layer emits q only (the step loop attends its source's rows)
//   - layer_output_scale: the layer's whole output (residual included) times a scalar
//   - RoPE rows per layer (proportional on the global layers: their frequency factors are in the rows)
//   - per-layer embeddings (E2B/E4B, P > 0): stage 0 turns its input ple_tok [1, T, L·P] (the
//     per_layer_token_embd rows of the chunk's ids) into ple [1, T, L·P]; stage ℓ+1 adds
//     post_norm(proj(gelu(inp_gate(f)) ⊙ ple_ℓ)) to layer ℓ's output f before its output scale
import { linear, rmsNorm, rope, skipRmsNorm, type RopeCaches, type RopeFrequencies } from '../../onnx/ops.ts';
import type { GraphBuilder } from '../../onnx/graph-builder.ts';
import type { ModelWeights } from '../weights.ts';
import { gegluMlp, geluTanhAsLlamaCpp, headRmsNorm, sameRope, softcappedLmHead } from './gemma-graph.ts';
import { ownsKv, ropeFrequencies, type AttentionSpec, type LayerSpec } from './layer-spec.ts';
import { blk, finishStage, startStage, type StageGraph, type StageOptions } from './stage-graph.ts';

function ropeInputs(g: GraphBuilder, freq: RopeFrequencies, prefix: '' | 'spec_'): RopeCaches {
  const half = (freq.rotaryDim ?? freq.headDim) / 2;
  return { cos: g.input(`${prefix}rope_cos`, 'float32', ['T', half]), sin: g.input(`${prefix}rope_sin`, 'float32', ['T', half]), options: freq };
}

/**
 * Per-layer inputs of every layer (llama.cpp's project_per_layer_inputs), [1, T, L·P]:
 * e = (rmsnorm_P(per_layer_model_proj · h0 / √d) · per_layer_proj_norm + ple_tok · √P) / √2,
 * the norm over each layer's P values; h0 the scaled token embedding stage 0 takes.
 */
function perLayerInputs(g: GraphBuilder, w: ModelWeights, h0: string, L: number, P: number, d: number, eps: number): string {
  const tok = g.input('ple_tok', 'float32', [1, 'T', L * P]);
  const proj = linear(g, h0, w.linear('per_layer_model_proj.weight'), 'ple.model_proj');
  const scaled = g.op('Mul', [proj, g.floatInitializer('ple.proj_scale', [], Float32Array.of(Math.fround(1 / Math.sqrt(d))))], {}, { name: 'ple.proj_scaled' });
  const normed = headRmsNorm(g, scaled, w.vector('per_layer_proj_norm.weight'), L, eps, 'ple.proj_norm');
  const tokScaled = g.op('Mul', [tok, g.floatInitializer('ple.tok_scale', [], Float32Array.of(Math.fround(Math.sqrt(P))))], {}, { name: 'ple.tok_scaled' });
  const sum = g.op('Add', [normed, tokScaled], {}, { name: 'ple.sum' });
  return g.op('Mul', [sum, g.floatInitializer('ple.input_scale', [], Float32Array.of(Math.fround(1 / Math.sqrt(2))))], {}, { name: 'ple.scaled' });
}

/** Stage `s` (0..L) of a Gemma 4 model whose layers are `specs`; `outputScale`: layers end in layer_output_scale; `finalSoftcap` 0: none; `perLayerInput` P (0: no per-layer embeddings). */
export function gemma4StageGraph(w: ModelWeights, s: number, opts: StageOptions, specs: readonly LayerSpec[], valueProjection: readonly boolean[], outputScale: boolean, finalSoftcap: number, perLayerInput = 0): StageGraph {
  const { hyper, d, L, eps, g, h, inputs } = startStage(w, s);
  const P = perLayerInput;
  const heads = hyper.heads;
  const att = (l: number): AttentionSpec => specs[l]!.attention as AttentionSpec;
  let normed: string;
  let residual = h;
  if (s === 0) {
    normed = rmsNorm(g, h, w.vector(blk(0, 'attn_norm.weight')), eps, 'attn_norm0');
    if (P > 0) {
      inputs.push('ple_tok');
      g.output(g.rename(perLayerInputs(g, w, h, L, P, d, eps), 'ple'), 'float32', [1, 'T', L * P]);
    }
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
    if (outputScale || P > 0) {
      // llama.cpp: f = ffn_post_norm(ffn) + attn_out; f += post_norm(proj(gelu(inp_gate(f)) ⊙ e_ℓ)) with
      // per-layer embeddings; then f · layer_output_scale, and the next layer's norm of that
      let sum = g.op('Add', [mlpNormed, mid.sum], {}, { name: `l${p}.ffn_residual` });
      if (P > 0) {
        const e = g.input('ple', 'float32', [1, 'T', P]);
        inputs.push('ple');
        const gate = geluTanhAsLlamaCpp(g, linear(g, sum, w.linear(blk(p, 'inp_gate.weight')), `l${p}.ple_gate`), `l${p}.ple_gelu`);
        const mixed = linear(g, g.op('Mul', [gate, e], {}, { name: `l${p}.ple_mul` }), w.linear(blk(p, 'proj.weight')), `l${p}.ple_proj`);
        sum = g.op('Add', [sum, rmsNorm(g, mixed, w.vector(blk(p, 'post_norm.weight')), eps, `l${p}.ple_post_norm`)], {}, { name: `l${p}.ple_residual` });
      }
      residual = outputScale ? g.op('Mul', [sum, g.floatInitializer(`l${p}.layer_output_scale`, [1], w.vector(blk(p, 'layer_output_scale.weight')))], {}, { name: `l${p}.output_scaled` }) : sum;
      normed = rmsNorm(g, residual, nextNorm, eps, nextName);
    } else {
      const end = skipRmsNorm(g, mlpNormed, mid.sum, nextNorm, eps, nextName);
      residual = end.sum;
      normed = end.normed;
    }
  }
  if (s === L) {
    inputs.push('rows');
    softcappedLmHead(g, w, normed, hyper.vocabSize, finalSoftcap);
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
