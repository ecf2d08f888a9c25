// A plain llama-family forward pass (float32 storage, float64 sums) that records, per layer and
// token, what InfiniGen's speculation works with: the true post-RoPE query q and key k of the layer,
// and the speculation query q_spec of the layer as the engine builds it one layer early
// (ARCHITECTURE.md §4.4: q̃ source = RoPE_t(norm_{ℓ−1}(h_{ℓ−1}) · W_q^{(ℓ)}), graphs.ts's q_spec), plus
// a variant normalised with layer ℓ's own norm weight, RoPE_t(norm_ℓ(h_{ℓ−1}) · W_q^{(ℓ)}), which
// differs from the true query only by layer ℓ−1's residual updates. It is an instrument for
// bench/infinigen-diagnose.mjs, independent of the ORT graphs and the native pool; its logits are
// checked against the engine's in attention-capture.test.ts. Token by token, no batching: the
// models it is meant for are small (kjv-llama-hd64, stories260K).
import type { LoadedModel } from '../model/types.ts';

export interface CaptureShape {
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  dim: number;
}

/** What one pass over `ids` recorded. Per layer ℓ: rows of token t at t·width. */
export interface AttentionCapture {
  shape: CaptureShape;
  tokens: number;
  /** [layers][T, heads·d] post-RoPE queries */
  q: Float32Array[];
  /** [layers][T, kvHeads·d] post-RoPE keys */
  k: Float32Array[];
  /** [layers][T, heads·d] speculation query of layer ℓ from layer ℓ−1's normed input (ℓ = 0: q itself) */
  qSpec: Float32Array[];
  /** [layers][T, heads·d] the same with layer ℓ's norm weight on h_{ℓ−1} (ℓ = 0: q itself) */
  qSpecOwnNorm: Float32Array[];
  /** [T, vocab] logits when asked for (else empty) */
  logits: Float32Array;
}

interface LayerWeights {
  attnNorm: Float32Array; // [dim]
  wq: Float32Array; // [heads·d, dim]
  wk: Float32Array; // [kvHeads·d, dim]
  wv: Float32Array; // [kvHeads·d, dim]
  wo: Float32Array; // [dim, heads·d]
  ffnNorm: Float32Array; // [dim]
  gate: Float32Array; // [ffn, dim]
  up: Float32Array; // [ffn, dim]
  down: Float32Array; // [dim, ffn]
}

function tensor(model: LoadedModel, name: string): Float32Array {
  const t = model.tensors.get(name);
  if (t === undefined) throw new Error(`attention capture: tensor ${name} is missing`);
  return t.toFloat32();
}

/** y[r] = Σ_c W[r, c]·x[c], W [rows, cols] row-major. */
function matvec(w: Float32Array, x: Float32Array, rows: number, cols: number, out: Float32Array = new Float32Array(rows)): Float32Array {
  for (let r = 0; r < rows; r++) {
    let s = 0;
    const o = r * cols;
    for (let c = 0; c < cols; c++) s += w[o + c]! * x[c]!;
    out[r] = s;
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

/** Captures q, k and the speculation queries of every layer over `ids` (positions 0..T−1). */
export class AttentionCapturer {
  readonly shape: CaptureShape;
  private readonly layers: LayerWeights[];
  private readonly embd: Float32Array; // [vocab, dim]
  private readonly outNorm: Float32Array;
  private readonly out: Float32Array; // [vocab, dim]
  private readonly vocab: number;
  private readonly ffn: number;
  private readonly eps: number;
  private readonly cos: Float64Array; // [maxPos, d/2]
  private readonly sin: Float64Array;
  private readonly interleaved: boolean;

  constructor(model: LoadedModel, maxPositions: number) {
    const h = model.hyper;
    if (h.family === 'opt' || h.qkvBias) throw new Error(`attention capture: llama-family models without q/k/v biases only, got ${h.family}`);
    this.shape = { layers: h.layers, heads: h.heads, kvHeads: h.kvHeads, headDim: h.headDim, dim: h.hiddenSize };
    this.vocab = h.vocabSize;
    this.ffn = h.ffnSize;
    this.eps = h.normEps;
    this.interleaved = (h.ropeLayout ?? 'neox') === 'interleaved';
    this.embd = tensor(model, 'token_embd.weight');
    this.outNorm = tensor(model, 'output_norm.weight');
    this.out = model.tensors.has('output.weight') ? tensor(model, 'output.weight') : this.embd;
    this.layers = Array.from({ length: h.layers }, (_, l) => ({
      attnNorm: tensor(model, `blk.${l}.attn_norm.weight`),
      wq: tensor(model, `blk.${l}.attn_q.weight`),
      wk: tensor(model, `blk.${l}.attn_k.weight`),
      wv: tensor(model, `blk.${l}.attn_v.weight`),
      wo: tensor(model, `blk.${l}.attn_output.weight`),
      ffnNorm: tensor(model, `blk.${l}.ffn_norm.weight`),
      gate: tensor(model, `blk.${l}.ffn_gate.weight`),
      up: tensor(model, `blk.${l}.ffn_up.weight`),
      down: tensor(model, `blk.${l}.ffn_down.weight`),
    }));
    const d = h.headDim;
    const theta = h.ropeTheta ?? 10000;
    this.cos = new Float64Array(maxPositions * (d / 2));
    this.sin = new Float64Array(maxPositions * (d / 2));
    for (let p = 0; p < maxPositions; p++) {
      for (let i = 0; i < d / 2; i++) {
        const a = p * Math.pow(theta, (-2 * i) / d);
        this.cos[p * (d / 2) + i] = Math.cos(a);
        this.sin[p * (d / 2) + i] = Math.sin(a);
      }
    }
  }

  /** RoPE at position p over `heads` heads of x [heads·d], in place. */
  private rope(x: Float32Array, heads: number, p: number): void {
    const d = this.shape.headDim;
    const half = d / 2;
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < half; i++) {
        const a = this.interleaved ? h * d + 2 * i : h * d + i;
        const b = this.interleaved ? a + 1 : a + half;
        const c = this.cos[p * half + i]!;
        const s = this.sin[p * half + i]!;
        const x0 = x[a]!;
        const x1 = x[b]!;
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
      }
    }
  }

  /** One pass over ids; `logits` also returns every position's logits (costs vocab·dim per token). */
  run(ids: readonly number[], opts: { logits?: boolean } = {}): AttentionCapture {
    const { layers: L, heads, kvHeads, headDim: d, dim } = this.shape;
    const T = ids.length;
    const qw = heads * d;
    const kvw = kvHeads * d;
    const group = heads / kvHeads;
    const q = Array.from({ length: L }, () => new Float32Array(T * qw));
    const k = Array.from({ length: L }, () => new Float32Array(T * kvw));
    const v = Array.from({ length: L }, () => new Float32Array(T * kvw));
    const qSpec = Array.from({ length: L }, () => new Float32Array(T * qw));
    const qSpecOwnNorm = Array.from({ length: L }, () => new Float32Array(T * qw));
    const logits = new Float32Array(opts.logits ? T * this.vocab : 0);
    const scale = 1 / Math.sqrt(d);
    const attn = new Float32Array(qw);
    const scores = new Float64Array(T);
    const gateBuf = new Float32Array(this.ffn);
    const upBuf = new Float32Array(this.ffn);
    for (let t = 0; t < T; t++) {
      const h = this.embd.slice(ids[t]! * dim, (ids[t]! + 1) * dim);
      for (let l = 0; l < L; l++) {
        const w = this.layers[l]!;
        const x = rmsNorm(h, w.attnNorm, this.eps);
        const ql = q[l]!.subarray(t * qw, (t + 1) * qw);
        matvec(w.wq, x, qw, dim, ql);
        this.rope(ql, heads, t);
        const kl = k[l]!.subarray(t * kvw, (t + 1) * kvw);
        matvec(w.wk, x, kvw, dim, kl);
        this.rope(kl, kvHeads, t);
        matvec(w.wv, x, kvw, dim, v[l]!.subarray(t * kvw, (t + 1) * kvw));
        if (l + 1 < L) {
          const n = this.layers[l + 1]!;
          const qs = qSpec[l + 1]!.subarray(t * qw, (t + 1) * qw);
          matvec(n.wq, x, qw, dim, qs);
          this.rope(qs, heads, t);
          const qo = qSpecOwnNorm[l + 1]!.subarray(t * qw, (t + 1) * qw);
          matvec(n.wq, rmsNorm(h, n.attnNorm, this.eps), qw, dim, qo);
          this.rope(qo, heads, t);
        }
        if (l === 0) {
          qSpec[0]!.set(ql, t * qw);
          qSpecOwnNorm[0]!.set(ql, t * qw);
        }
        // causal attention over 0..t
        for (let hh = 0; hh < heads; hh++) {
          const g = Math.floor(hh / group);
          let m = -Infinity;
          for (let j = 0; j <= t; j++) {
            let s = 0;
            for (let i = 0; i < d; i++) s += ql[hh * d + i]! * k[l]![j * kvw + g * d + i]!;
            scores[j] = s * scale;
            m = Math.max(m, scores[j]!);
          }
          let z = 0;
          for (let j = 0; j <= t; j++) {
            scores[j] = Math.exp(scores[j]! - m);
            z += scores[j]!;
          }
          for (let i = 0; i < d; i++) {
            let acc = 0;
            for (let j = 0; j <= t; j++) acc += scores[j]! * v[l]![j * kvw + g * d + i]!;
            attn[hh * d + i] = acc / z;
          }
        }
        const o = matvec(w.wo, attn, dim, qw);
        for (let i = 0; i < dim; i++) h[i] = h[i]! + o[i]!;
        const x2 = rmsNorm(h, w.ffnNorm, this.eps);
        matvec(w.gate, x2, this.ffn, dim, gateBuf);
        matvec(w.up, x2, this.ffn, dim, upBuf);
        for (let i = 0; i < this.ffn; i++) gateBuf[i] = (gateBuf[i]! / (1 + Math.exp(-gateBuf[i]!))) * upBuf[i]!;
        const m = matvec(w.down, gateBuf, dim, this.ffn);
        for (let i = 0; i < dim; i++) h[i] = h[i]! + m[i]!;
      }
      if (opts.logits) matvec(this.out, rmsNorm(h, this.outNorm, this.eps), this.vocab, dim, logits.subarray(t * this.vocab, (t + 1) * this.vocab));
    }
    return { shape: this.shape, tokens: T, q, k, qSpec, qSpecOwnNorm, logits };
  }
}
