// A plain gpt-oss forward pass in TypeScript (float32 storage, float64 sums, token by token) that
// records what InfiniGen's speculation works with, as attention-capture.ts does for the llama
// family: per layer and token the true post-RoPE q and k and the speculation query q_spec (layer ℓ's
// W_q and bias over layer ℓ−1's normed input, rotated by layer ℓ's RoPE: the engine's q_spec). It
// is the tests' reference for gpt-oss (forward/layers/gpt-oss.ts has the formulas), written from them
// and not from the engine's kernels:
//   attention: q/k/v biases; the window layers see positions t − window < j ≤ t; the head's sink
//              logit s joins the softmax's denominator: out = Σ_j e^{s_j − m} v_j / (Σ_j e^{s_j − m} + e^{s − m})
//   MoE:       router logits (+ bias), the 4 largest, a softmax over those 4; SwiGLU-OAI with the
//              experts' biases
// RoPE rows come from the engine's ropeRows (YaRN included: its figures are held against llama.cpp
// by gpt-oss-llama-cpp.test.ts). Only for the small test fixture: the whole model in float32.
import { ropeRows } from '../onnx/ops.ts';
import { familyOf } from '../forward/layers/families.ts';
import { ropeFrequencies, type AttentionSpec } from '../forward/layers/layer-spec.ts';
import type { LoadedModel } from '../model/types.ts';
import type { AttentionCapture, CaptureShape } from './attention-capture.ts';

function tensor(model: LoadedModel, name: string): Float32Array {
  const t = model.tensors.get(name);
  if (t === undefined) throw new Error(`gpt-oss capture: tensor ${name} is missing`);
  return t.toFloat32();
}

/** out[r] = Σ_c W[row0 + r, c]·x[c] (+ bias[bias0 + r]), W row-major with `cols` columns. */
function matvec(w: Float32Array, x: Float32Array, rows: number, cols: number, out: Float32Array, bias?: Float32Array, row0 = 0, bias0 = 0): Float32Array {
  for (let r = 0; r < rows; r++) {
    let s = 0;
    const o = (row0 + r) * cols;
    for (let c = 0; c < cols; c++) s += w[o + c]! * x[c]!;
    out[r] = s + (bias ? bias[bias0 + r]! : 0);
  }
  return out;
}

function rmsNorm(x: Float32Array, w: Float32Array, eps: number): Float32Array {
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i]! * x[i]!;
  const scale = 1 / Math.sqrt(ss / x.length + eps);
  const y = new Float32Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = x[i]! * scale * w[i]!;
  return y;
}

function swigluOai(g: number, u: number): number {
  const x = Math.min(g, 7);
  const y = Math.max(-7, Math.min(u, 7));
  return (x / (1 + Math.exp(-1.702 * x))) * (y + 1);
}

interface Layer {
  attnNorm: Float32Array;
  wq: Float32Array;
  bq: Float32Array;
  wk: Float32Array;
  bk: Float32Array;
  wv: Float32Array;
  bv: Float32Array;
  wo: Float32Array;
  bo: Float32Array;
  sinks: Float32Array;
  postNorm: Float32Array;
  router: Float32Array;
  routerBias: Float32Array;
  gate: Float32Array;
  gateBias: Float32Array;
  up: Float32Array;
  upBias: Float32Array;
  down: Float32Array;
  downBias: Float32Array;
  window: number | undefined;
  cos: Float32Array; // [maxPositions, d/2] (NeoX pairs i, i + d/2)
  sin: Float32Array;
}

/** Captures q, k and the speculation queries of every layer of a gpt-oss model over `ids`. */
export class GptOssCapturer {
  readonly shape: CaptureShape;
  private readonly layers: Layer[];
  private readonly embd: Float32Array;
  private readonly outNorm: Float32Array;
  private readonly out: Float32Array;
  private readonly vocab: number;
  private readonly eps: number;
  private readonly experts: number;
  private readonly used: number;
  private readonly ffn: number;

  constructor(model: LoadedModel, maxPositions: number) {
    const h = model.hyper;
    if (h.architecture !== 'gpt-oss' || h.moe === undefined) throw new Error(`gpt-oss capture: a gpt-oss model, got ${h.architecture}`);
    this.shape = { layers: h.layers, heads: h.heads, kvHeads: h.kvHeads, headDim: h.headDim, dim: h.hiddenSize };
    this.vocab = h.vocabSize;
    this.eps = h.normEps;
    this.experts = h.moe.experts;
    this.used = h.moe.expertsUsed;
    this.ffn = h.moe.expertFfn;
    this.embd = tensor(model, 'token_embd.weight');
    this.outNorm = tensor(model, 'output_norm.weight');
    this.out = tensor(model, 'output.weight');
    const specs = familyOf(h).layers(h);
    this.layers = specs.map((spec, l) => {
      const a = spec.attention as AttentionSpec;
      const { cos, sin } = ropeRows(ropeFrequencies(a, maxPositions)!, 0, maxPositions);
      const t = (name: string): Float32Array => tensor(model, `blk.${l}.${name}`);
      return {
        attnNorm: t('attn_norm.weight'), wq: t('attn_q.weight'), bq: t('attn_q.bias'), wk: t('attn_k.weight'), bk: t('attn_k.bias'), wv: t('attn_v.weight'), bv: t('attn_v.bias'),
        wo: t('attn_output.weight'), bo: t('attn_output.bias'), sinks: t('attn_sinks.weight'), postNorm: t('post_attention_norm.weight'),
        router: t('ffn_gate_inp.weight'), routerBias: t('ffn_gate_inp.bias'), gate: t('ffn_gate_exps.weight'), gateBias: t('ffn_gate_exps.bias'),
        up: t('ffn_up_exps.weight'), upBias: t('ffn_up_exps.bias'), down: t('ffn_down_exps.weight'), downBias: t('ffn_down_exps.bias'),
        window: a.window, cos, sin,
      };
    });
  }

  /** NeoX RoPE of layer `l` at position p over `heads` heads of x [heads·d], in place. */
  private rope(l: number, x: Float32Array, heads: number, p: number): void {
    const d = this.shape.headDim;
    const half = d / 2;
    const { cos, sin } = this.layers[l]!;
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < half; i++) {
        const a = h * d + i;
        const b = a + half;
        const c = cos[p * half + i]!;
        const s = sin[p * half + i]!;
        const x0 = x[a]!;
        const x1 = x[b]!;
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
      }
    }
  }

  /** One pass over ids; `logitsAt`: positions whose logits are kept (vocab·dim each). */
  run(ids: readonly number[], opts: { logitsAt?: readonly number[]; sinks?: boolean } = {}): AttentionCapture & { logitsAt: Map<number, Float32Array> } {
    const { layers: L, heads, kvHeads, headDim: d, dim } = this.shape;
    const T = ids.length;
    const qw = heads * d;
    const kvw = kvHeads * d;
    const group = heads / kvHeads;
    const F = this.ffn;
    const withSinks = opts.sinks ?? true;
    const q = Array.from({ length: L }, () => new Float32Array(T * qw));
    const k = Array.from({ length: L }, () => new Float32Array(T * kvw));
    const v = Array.from({ length: L }, () => new Float32Array(T * kvw));
    const qSpec = Array.from({ length: L }, () => new Float32Array(T * qw));
    const logitsAt = new Map<number, Float32Array>();
    const scale = 1 / Math.sqrt(d);
    const attn = new Float32Array(qw);
    const o = new Float32Array(dim);
    const scores = new Float64Array(T);
    const logits = new Float32Array(this.experts);
    const g = new Float32Array(F);
    const u = new Float32Array(F);
    const y = new Float32Array(dim);
    for (let t = 0; t < T; t++) {
      const h = this.embd.slice(ids[t]! * dim, (ids[t]! + 1) * dim);
      for (let l = 0; l < L; l++) {
        const w = this.layers[l]!;
        const x = rmsNorm(h, w.attnNorm, this.eps);
        const ql = q[l]!.subarray(t * qw, (t + 1) * qw);
        this.rope(l, matvec(w.wq, x, qw, dim, ql, w.bq), heads, t);
        const kl = k[l]!.subarray(t * kvw, (t + 1) * kvw);
        this.rope(l, matvec(w.wk, x, kvw, dim, kl, w.bk), kvHeads, t);
        matvec(w.wv, x, kvw, dim, v[l]!.subarray(t * kvw, (t + 1) * kvw), w.bv);
        if (l + 1 < L) {
          const n = this.layers[l + 1]!;
          this.rope(l + 1, matvec(n.wq, x, qw, dim, qSpec[l + 1]!.subarray(t * qw, (t + 1) * qw), n.bq), heads, t);
        }
        if (l === 0) qSpec[0]!.set(ql, t * qw); // layer 0 has no layer before it: its own query
        // attention over the layer's band (or everything), the sink in the denominator
        const first = w.window === undefined ? 0 : Math.max(0, t - w.window + 1);
        for (let hh = 0; hh < heads; hh++) {
          const gi = Math.floor(hh / group);
          let m = -Infinity;
          for (let j = first; j <= t; j++) {
            let s = 0;
            for (let i = 0; i < d; i++) s += ql[hh * d + i]! * k[l]![j * kvw + gi * d + i]!;
            scores[j] = s * scale;
            m = Math.max(m, scores[j]!);
          }
          let z = withSinks ? Math.exp(w.sinks[hh]! - m) : 0;
          for (let j = first; j <= t; j++) z += scores[j] = Math.exp(scores[j]! - m);
          for (let i = 0; i < d; i++) {
            let acc = 0;
            for (let j = first; j <= t; j++) acc += scores[j]! * v[l]![j * kvw + gi * d + i]!;
            attn[hh * d + i] = acc / z;
          }
        }
        matvec(w.wo, attn, dim, qw, o, w.bo);
        for (let i = 0; i < dim; i++) h[i] = h[i]! + o[i]!;
        // the mixture of experts: top-4 logits, softmax over them
        const x2 = rmsNorm(h, w.postNorm, this.eps);
        matvec(w.router, x2, this.experts, dim, logits, w.routerBias);
        const picked: number[] = [];
        for (let i = 0; i < this.used; i++) {
          let best = -1;
          for (let e = 0; e < this.experts; e++) if (!picked.includes(e) && (best < 0 || logits[e]! > logits[best]!)) best = e;
          picked.push(best);
        }
        const top = logits[picked[0]!]!;
        let zw = 0;
        const weights = picked.map((e) => {
          const ew = Math.exp(logits[e]! - top);
          zw += ew;
          return ew;
        });
        const moe = new Float64Array(dim);
        picked.forEach((e, i) => {
          matvec(w.gate, x2, F, dim, g, w.gateBias, e * F, e * F);
          matvec(w.up, x2, F, dim, u, w.upBias, e * F, e * F);
          for (let j = 0; j < F; j++) g[j] = swigluOai(g[j]!, u[j]!);
          matvec(w.down, g, dim, F, y, w.downBias, e * dim, e * dim);
          for (let j = 0; j < dim; j++) moe[j] = moe[j]! + (weights[i]! / zw) * y[j]!;
        });
        for (let i = 0; i < dim; i++) h[i] = h[i]! + moe[i]!;
      }
      if (opts.logitsAt?.includes(t)) logitsAt.set(t, matvec(this.out, rmsNorm(h, this.outNorm, this.eps), this.vocab, dim, new Float32Array(this.vocab)));
    }
    return { shape: this.shape, tokens: T, q, k, qSpec, qSpecOwnNorm: qSpec, logits: new Float32Array(0), logitsAt };
  }
}
