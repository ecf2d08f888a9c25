// Qwen3.5's onnxruntime stage graphs (graphs.ts draws the stages; llama.cpp's src/models/qwen35.cpp
// is what each layer computes). Stage s = post(s−1) fused with pre(s), as every family's:
//
//   pre(ℓ), full attention   x = rmsnorm(h)·attn_norm
//                            [q | gate] per head = x·W_q (2·headDim rows per head: its query, then its gate)
//                            q = rope(rmsnorm_head(q)·q_norm), k = rope(rmsnorm_head(x·W_k)·k_norm), v = x·W_v
//                            outputs q, k, v and gate [1, T, heads·headDim]
//   pre(ℓ), linear           outputs what the recurrence (forward/linear-attention.ts) reads:
//                            lin_qkv = x·W_qkv [1, T, convDim], lin_z = x·W_gate [1, T, Hv·D],
//                            lin_beta = σ(x·W_beta) [1, T, Hv], lin_decay = softplus(x·W_alpha + dt)·a [1, T, Hv]
//   post(ℓ), full attention  o = (attn ⊙ σ(gate))·W_o            (attn: the pool's attention of q)
//   post(ℓ), linear          o = attn·W_ssm_out                  (attn: the recurrence's normed, gated output)
//   both                     h' = h + o;  h'' = h' + mlp(rmsnorm(h')·post_attention_norm)
//
// RoPE: interleaved M-RoPE whose sections all take the token's position for text, which is NeoX
// RoPE over the first rope.dimension_count dimensions of each head (partial rotary).
import { addRopeInputs, linear, rmsNorm, rope, skipRmsNorm, swigluMlp, type RopeCaches } from '../../onnx/ops.ts';
import type { ModelWeights } from '../weights.ts';
import { perHeadRmsNorm } from './qwen3-graph.ts';
import { blk, finishStage, lmHead, startStage, stageRope, type StageGraph, type StageOptions } from './stage-graph.ts';

/** Stage `s` (0..L) of a Qwen3.5 model. */
export function qwen35StageGraph(w: ModelWeights, s: number, opts: StageOptions): StageGraph {
  const { hyper, d, L, eps, g, h, inputs } = startStage(w, s);
  const lin = hyper.linearAttention!;
  const H = hyper.heads;
  const hd = hyper.headDim;
  const qw = H * hd;
  const valueDim = lin.valueHeads * lin.headDim;
  let residual = h;
  let normed: string;
  if (s === 0) {
    normed = rmsNorm(g, h, w.vector(blk(0, 'attn_norm.weight')), eps, 'attn_norm0');
  } else {
    const p = s - 1;
    let o: string;
    if (lin.layers[p]) {
      const attn = g.input('attn', 'float32', [1, 'T', valueDim]);
      inputs.push('attn');
      o = linear(g, attn, w.linear(blk(p, 'ssm_out.weight')), `l${p}.ssm_out`);
    } else {
      const attn = g.input('attn', 'float32', [1, 'T', qw]);
      const gate = g.input('gate', 'float32', [1, 'T', qw]);
      inputs.push('attn', 'gate');
      const sig = g.op('Sigmoid', [gate], {}, { name: `l${p}.gate_sigmoid` });
      const gated = g.op('Mul', [attn, sig], {}, { name: `l${p}.attn_gated` });
      o = linear(g, gated, w.linear(blk(p, 'attn_output.weight')), `l${p}.attn_output`);
    }
    const mid = skipRmsNorm(g, o, h, w.vector(blk(p, 'post_attention_norm.weight')), eps, `l${p}.post_attention_norm`);
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
  // InfiniGen: layer s+1's query from this layer's normed input, as layer s+1 computes it (its query
  // half of W_q per head, its q norm, its RoPE), when layer s+1 is an attention layer
  const speculate = opts.speculateNext === true && s + 1 < L && !lin.layers[s + 1];
  let pos: string | undefined;
  let caches: RopeCaches | undefined;
  // the step feeds a stage its own layer's RoPE rows as rope_cos/rope_sin and layer s+1's as
  // spec_rope_cos/spec_rope_sin; a linear layer has none of its own, so its q̃ reads the latter
  const ropeInputs = (): { pos: string; caches: RopeCaches } => {
    if (pos === undefined || caches === undefined) {
      pos = g.input('pos', 'int64', [1, 'T']);
      inputs.push('pos');
      if (lin.layers[s]) {
        const freq = stageRope(hyper);
        const half = (freq.rotaryDim ?? freq.headDim) / 2;
        caches = { cos: g.input('spec_rope_cos', 'float32', ['T', half]), sin: g.input('spec_rope_sin', 'float32', ['T', half]), options: freq };
        inputs.push('spec_rope_cos', 'spec_rope_sin');
      } else {
        caches = addRopeInputs(g, stageRope(hyper));
        inputs.push('rope_cos', 'rope_sin');
      }
    }
    return { pos, caches };
  };
  /** Layer l's gated query projection of `normed`, split per head into its query (normed, rotated) and its gate. */
  const query = (l: number, tag: string): { q: string; gate: string } => {
    const { pos: p, caches: c } = ropeInputs();
    const qFull = linear(g, normed, w.linear(blk(l, 'attn_q.weight')), `l${l}.${tag}_full`); // [1, T, H·2hd]
    const perHead = g.initializer(`l${l}.${tag}_full_shape`, { elemType: 'int64', dims: [4], data: new BigInt64Array([0n, 0n, BigInt(H), BigInt(2 * hd)]) });
    const flat = g.initializer(`l${l}.${tag}_flat_shape`, { elemType: 'int64', dims: [3], data: new BigInt64Array([0n, 0n, BigInt(qw)]) });
    const split = g.op('Reshape', [qFull, perHead], {}, { name: `l${l}.${tag}_heads` });
    const axis = g.initializer(`l${l}.${tag}_axis`, { elemType: 'int64', dims: [1], data: new BigInt64Array([3n]) });
    const at = (name: string, v: number): string => g.initializer(`l${l}.${tag}_${name}`, { elemType: 'int64', dims: [1], data: new BigInt64Array([BigInt(v)]) });
    const qPart = g.op('Slice', [split, at('q_start', 0), at('q_end', hd), axis], {}, { name: `l${l}.${tag}_q_part` });
    const gatePart = g.op('Slice', [split, at('gate_start', hd), at('gate_end', 2 * hd), axis], {}, { name: `l${l}.${tag}_gate_part` });
    const q0 = g.op('Reshape', [qPart, flat], {}, { name: `l${l}.${tag}_q_flat` });
    const gate = g.op('Reshape', [gatePart, flat], {}, { name: `l${l}.${tag}_gate_flat` });
    const qNormed = perHeadRmsNorm(g, q0, w.vector(blk(l, 'attn_q_norm.weight')), H, eps, `l${l}.${tag}_norm`);
    return { q: rope(g, qNormed, p, c, H, `l${l}.${tag}_rope`), gate };
  };
  if (lin.layers[s]) {
    const convDim = (2 * lin.keyHeads + lin.valueHeads) * lin.headDim;
    const qkv = linear(g, normed, w.linear(blk(s, 'attn_qkv.weight')), `l${s}.qkv`);
    const z = linear(g, normed, w.linear(blk(s, 'attn_gate.weight')), `l${s}.z`);
    const b = linear(g, normed, w.linear(blk(s, 'ssm_beta.weight')), `l${s}.beta_proj`);
    const beta = g.op('Sigmoid', [b], {}, { name: `l${s}.beta` });
    const alpha = linear(g, normed, w.linear(blk(s, 'ssm_alpha.weight')), `l${s}.alpha_proj`);
    const dt = g.floatInitializer(`l${s}.dt_bias`, [lin.valueHeads], w.vector(blk(s, 'ssm_dt.bias')));
    const a = g.floatInitializer(`l${s}.ssm_a`, [lin.valueHeads], w.vector(blk(s, 'ssm_a')));
    const biased = g.op('Add', [alpha, dt], {}, { name: `l${s}.alpha_biased` });
    const soft = g.op('Softplus', [biased], {}, { name: `l${s}.alpha_softplus` });
    const decay = g.op('Mul', [soft, a], {}, { name: `l${s}.decay` });
    g.output(g.rename(qkv, 'lin_qkv'), 'float32', [1, 'T', convDim]);
    g.output(g.rename(z, 'lin_z'), 'float32', [1, 'T', valueDim]);
    g.output(g.rename(beta, 'lin_beta'), 'float32', [1, 'T', lin.valueHeads]);
    g.output(g.rename(decay, 'lin_decay'), 'float32', [1, 'T', lin.valueHeads]);
  } else {
    const { pos: p, caches: c } = ropeInputs();
    const kvw = hyper.kvHeads * hd;
    const { q, gate } = query(s, 'q');
    const kProjected = linear(g, normed, w.linear(blk(s, 'attn_k.weight')), `l${s}.k_proj`);
    const kNormed = perHeadRmsNorm(g, kProjected, w.vector(blk(s, 'attn_k_norm.weight')), hyper.kvHeads, eps, `l${s}.k_norm`);
    const k = rope(g, kNormed, p, c, hyper.kvHeads, `l${s}.k_rope`);
    const v = linear(g, normed, w.linear(blk(s, 'attn_v.weight')), `l${s}.v_proj`);
    g.output(g.rename(q, 'q'), 'float32', [1, 'T', qw]);
    g.output(g.rename(k, 'k'), 'float32', [1, 'T', kvw]);
    g.output(g.rename(v, 'v'), 'float32', [1, 'T', kvw]);
    g.output(g.rename(gate, 'gate'), 'float32', [1, 'T', qw]);
  }
  if (s > 0) g.output(g.rename(residual, 'h_next'), 'float32', [1, 'T', d]);
  if (speculate) g.output(g.rename(query(s + 1, 'q_spec').q, 'q_spec'), 'float32', [1, 'T', qw]);
  return finishStage(g, inputs);
}
