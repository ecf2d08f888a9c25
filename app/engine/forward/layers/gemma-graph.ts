// The onnxruntime stage graphs of Gemma 2 and Gemma 3 (graphs.ts draws the stages), shared by any
// family whose layers are Gemma's (gemma.ts): sandwich norms, GeGLU with the tanh GELU, per-head
// q/k RMSNorm where the layer has it, RoPE per layer (each layer's own base: the stage takes the
// cos/sin rows of its layer as rope_cos/rope_sin, and those of layer s+1 as spec_rope_cos/
// spec_rope_sin when it speculates for a layer whose RoPE differs), a final logit soft-cap.
//
//   pre(s):  x = rmsnorm(h)·attn_norm_s
//            q = RoPE_s(qnorm_s(x·W_qᵀ))  k = RoPE_s(knorm_s(x·W_kᵀ))  v = x·W_vᵀ     (qnorm per head, Gemma 3)
//            q_spec = RoPE_{s+1}(qnorm_{s+1}(x·W_q^{(s+1)ᵀ}))                       (InfiniGen)
//   post(p): o = rmsnorm(attn·W_oᵀ)·post_attention_norm_p;  sa = h + o
//            m = rmsnorm(GeGLU(rmsnorm(sa)·ffn_norm_p))·post_ffw_norm_p;  h_next = sa + m
//   head:    logits = c·tanh((rmsnorm(h)·output_norm)·W_outᵀ / c)   (c: final soft-cap; none when 0)
//   GeGLU(x) = (gelu_tanh(x·W_gateᵀ) ⊙ x·W_upᵀ)·W_downᵀ
// The attention scale, window and logit soft-cap are the attention kernels' (attention-args.ts);
// the embedding's √d is the step loop's (family.embedding).
import type { GraphBuilder } from '../../onnx/graph-builder.ts';
import { linear, rmsNorm, rope, skipRmsNorm, type LinearWeights, type RopeCaches, type RopeFrequencies } from '../../onnx/ops.ts';
import type { ModelWeights } from '../weights.ts';
import { ropeFrequencies, type AttentionSpec, type LayerSpec } from './layer-spec.ts';
import { blk, finishStage, lmHead, startStage, type StageGraph, type StageOptions } from './stage-graph.ts';

/** The LayerSpecs a Gemma stage reads (gemma.ts makes them; a stage graph builder gets only weights). */
export type GemmaSpecs = (w: ModelWeights) => readonly LayerSpec[];

/** Whether two layers' RoPE give the same cos/sin rows. */
export function sameRope(a: RopeFrequencies | undefined, b: RopeFrequencies | undefined): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * The tanh GELU as llama.cpp's CPU backend computes it (ggml_vec_geglu_f32, GGML_GELU_FP16): the
 * input rounded to fp16, GELU (ONNX Gelu, opset 20, approximate 'tanh'), the result rounded to fp16
 * (its lookup table); 0 at or below −10 and the input itself at or above 10. The roundings move a
 * value by < 2⁻¹¹ of itself; matching them keeps F32 files within the reference's float noise.
 */
export function geluTanhAsLlamaCpp(g: GraphBuilder, x: string, name: string): string {
  const toF16 = (v: string, n: string): string => g.op('Cast', [g.op('Cast', [v], { to: 10 }, { name: `${name}.${n}.f16` })], { to: 1 }, { name: `${name}.${n}.f32` });
  const gelu = toF16(g.op('Gelu', [toF16(x, 'in')], { approximate: 'tanh' }, { name: `${name}.gelu` }), 'out');
  const low = g.floatInitializer(`${name}.low`, [], Float32Array.of(-10));
  const high = g.floatInitializer(`${name}.high`, [], Float32Array.of(10));
  const zero = g.floatInitializer(`${name}.zero`, [], Float32Array.of(0));
  const above = g.op('Where', [g.op('GreaterOrEqual', [x, high], {}, { name: `${name}.ge10` }), x, gelu], {}, { name: `${name}.identity_above` });
  return g.op('Where', [g.op('LessOrEqual', [x, low], {}, { name: `${name}.le_10` }), zero, above], {}, { name: `${name}.zero_below` });
}

/** gelu_tanh(x·W_gateᵀ) ⊙ x·W_upᵀ, then ·W_downᵀ (GELU as geluTanhAsLlamaCpp). */
export function gegluMlp(g: GraphBuilder, x: string, w: { gate: LinearWeights; up: LinearWeights; down: LinearWeights }, name: string): string {
  const gate = linear(g, x, w.gate, `${name}.gate`);
  const up = linear(g, x, w.up, `${name}.up`);
  const act = geluTanhAsLlamaCpp(g, gate, `${name}.gelu_tanh`);
  const h = g.op('Mul', [act, up], {}, { name: `${name}.glu` });
  return linear(g, h, w.down, `${name}.down`);
}

/** RMSNorm of each head of x [1, T, heads·headDim] with one weight [headDim] (q/k norm). */
export function headRmsNorm(g: GraphBuilder, x: string, weight: Float32Array, heads: number, eps: number, name: string): string {
  const d = weight.length;
  const split = g.initializer(`${name}.split_shape`, { elemType: 'int64', dims: [4], data: BigInt64Array.of(0n, 0n, BigInt(heads), BigInt(d)) });
  const join = g.initializer(`${name}.join_shape`, { elemType: 'int64', dims: [3], data: BigInt64Array.of(0n, 0n, BigInt(heads * d)) });
  const perHead = g.op('Reshape', [x, split], {}, { name: `${name}.split` });
  const normed = rmsNorm(g, perHead, weight, eps, name);
  return g.op('Reshape', [normed, join], {}, { name: `${name}.join` });
}

/** The LM head of the rows asked for, its logits soft-capped at c (Gemma 2/4's final_logit_softcapping; 0: none). */
export function softcappedLmHead(g: GraphBuilder, w: ModelWeights, normed: string, vocab: number, cap: number): void {
  if (cap === 0) {
    lmHead(g, w, normed, vocab);
    return;
  }
  const rows = g.input('rows', 'int64', ['R']);
  const picked = g.op('Gather', [normed, rows], { axis: 1 }, { name: 'pick_rows' });
  const head = linear(g, picked, w.linear(w.has('output.weight') ? 'output.weight' : 'token_embd.weight'), 'lm_head');
  g.rename(softcap(g, head, cap, 'final_softcap'), 'logits');
  g.output('logits', 'float32', [1, 'R', vocab]);
}

/** c·tanh(x / c). */
export function softcap(g: GraphBuilder, x: string, cap: number, name: string): string {
  const c = g.floatInitializer(`${name}.cap`, [], Float32Array.of(cap));
  const inv = g.floatInitializer(`${name}.inv_cap`, [], Float32Array.of(1 / cap));
  const t = g.op('Tanh', [g.op('Mul', [x, inv], {}, { name: `${name}.scale_in` })], {}, { name: `${name}.tanh` });
  return g.op('Mul', [t, c], {}, { name: `${name}.scale_out` });
}

function ropeInputs(g: GraphBuilder, freq: RopeFrequencies, prefix: '' | 'spec_'): RopeCaches {
  const half = (freq.rotaryDim ?? freq.headDim) / 2;
  return { cos: g.input(`${prefix}rope_cos`, 'float32', ['T', half]), sin: g.input(`${prefix}rope_sin`, 'float32', ['T', half]), options: freq };
}

/** A Gemma-style stage `s` (0..L) of `w`'s model, for the layers `specs` and a final soft-cap `finalSoftcap` (0: none). */
export function gemmaStageGraph(w: ModelWeights, s: number, opts: StageOptions, specs: readonly LayerSpec[], finalSoftcap: number): StageGraph {
  const { hyper, d, qw, kvw, L, eps, g, h, inputs } = startStage(w, s);
  let normed: string;
  let residual = h;
  if (s === 0) {
    normed = rmsNorm(g, h, w.vector(blk(0, 'attn_norm.weight')), eps, 'attn_norm0');
  } else {
    const p = s - 1;
    const attn = g.input('attn', 'float32', [1, 'T', qw]);
    inputs.push('attn');
    const o = linear(g, attn, w.linear(blk(p, 'attn_output.weight')), `l${p}.attn_output`);
    const oNormed = rmsNorm(g, o, w.vector(blk(p, 'post_attention_norm.weight')), eps, `l${p}.post_attention_norm`);
    const mid = skipRmsNorm(g, oNormed, h, w.vector(blk(p, 'ffn_norm.weight')), eps, `l${p}.ffn_norm`);
    const mlp = gegluMlp(g, mid.normed, { gate: w.linear(blk(p, 'ffn_gate.weight')), up: w.linear(blk(p, 'ffn_up.weight')), down: w.linear(blk(p, 'ffn_down.weight')) }, `l${p}.mlp`);
    const mlpNormed = rmsNorm(g, mlp, w.vector(blk(p, 'post_ffw_norm.weight')), eps, `l${p}.post_ffw_norm`);
    const nextNorm = s === L ? w.vector('output_norm.weight') : w.vector(blk(s, 'attn_norm.weight'));
    const end = skipRmsNorm(g, mlpNormed, mid.sum, nextNorm, eps, s === L ? 'output_norm' : `l${s}.attn_norm`);
    residual = end.sum;
    normed = end.normed;
  }
  if (s === L) {
    inputs.push('rows');
    softcappedLmHead(g, w, normed, hyper.vocabSize, finalSoftcap);
    return finishStage(g, inputs);
  }
  const attention = specs[s]!.attention as AttentionSpec;
  const pos = g.input('pos', 'int64', [1, 'T']);
  const freq = ropeFrequencies(attention)!;
  const caches = ropeInputs(g, freq, '');
  inputs.push('pos', 'rope_cos', 'rope_sin');
  const query = (layer: number, caches: RopeCaches, name: string): string => {
    let x = linear(g, normed, w.linear(blk(layer, 'attn_q.weight')), `l${layer}.${name}_proj`);
    if ((specs[layer]!.attention as AttentionSpec).qkNorm) x = headRmsNorm(g, x, w.vector(blk(layer, 'attn_q_norm.weight')), hyper.heads, eps, `l${layer}.${name}_norm`);
    return rope(g, x, pos, caches, hyper.heads, `l${layer}.${name}_rope`);
  };
  const q = query(s, caches, 'q');
  let kProj = linear(g, normed, w.linear(blk(s, 'attn_k.weight')), `l${s}.k_proj`);
  if (attention.qkNorm) kProj = headRmsNorm(g, kProj, w.vector(blk(s, 'attn_k_norm.weight')), hyper.kvHeads, eps, `l${s}.k_norm`);
  const k = rope(g, kProj, pos, caches, hyper.kvHeads, `l${s}.k_rope`);
  const v = linear(g, normed, w.linear(blk(s, 'attn_v.weight')), `l${s}.v_proj`);
  g.output(g.rename(q, 'q'), 'float32', [1, 'T', qw]);
  g.output(g.rename(k, 'k'), 'float32', [1, 'T', kvw]);
  g.output(g.rename(v, 'v'), 'float32', [1, 'T', kvw]);
  if (s > 0) g.output(g.rename(residual, 'h_next'), 'float32', [1, 'T', d]);
  if (opts.speculateNext === true && s + 1 < L) {
    const n = s + 1;
    const nextFreq = ropeFrequencies(specs[n]!.attention as AttentionSpec)!;
    let nextCaches = caches;
    if (!sameRope(freq, nextFreq)) {
      nextCaches = ropeInputs(g, nextFreq, 'spec_');
      inputs.push('spec_rope_cos', 'spec_rope_sin');
    }
    g.output(g.rename(query(n, nextCaches, 'q_spec'), 'q_spec'), 'float32', [1, 'T', qw]);
  }
  return finishStage(g, inputs);
}
