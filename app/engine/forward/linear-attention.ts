// The per-sequence state of a model's linear-attention layers (LayerSpec kind 'linear': Gated
// DeltaNet, Qwen3.5) and the recurrence that advances it, held by the runner beside the KV pool.
// What each token computes is layer-spec.ts's LinearAttentionSpec; here is how, as llama.cpp's
// src/models/delta-net-base.cpp and ggml's gated_delta_net op compute it:
//
//   stage ℓ (qwen35-graph.ts) ─► lin_qkv [T, C], lin_z [T, Hv·D], lin_beta [T, Hv], lin_decay [T, Hv]
//   run(ℓ):  conv   x_t[c] = silu(Σ_k in[t + k][c]·w[c][k])   in = tail (K−1 rows) ++ qkv; tail ← last K−1 rows of in
//            split  q = x[0, Hk·D), k = x[Hk·D, 2·Hk·D), v = x[2·Hk·D, C); q, k L2-normed per head (1/max(‖·‖, ε))
//            per value head h (key head h mod Hk):
//              S ← e^{decay}·S;  δ = β·(v − Sᵀk);  S ← S + k·δᵀ;  o = (Sᵀq)/√D
//            out = rmsnorm(o)·ssm_norm ⊙ silu(z)      per head ─► attn [T, Hv·D] for stage ℓ+1's ssm_out
//
// The matrices are kept as ggml keeps them, transposed: M[h][j][i] = S[i][j], so row j of M is
// column j of S and every inner loop runs over contiguous memory. Two kernels compute it over the
// same state: with `native` (the runner's native dense stages) native/src/gated_delta_net.h in C++,
// the value heads split over the dense workers, prefill in its chunked form (64-token chunks whose
// outputs equal the token recurrence within float rounding; native_tests holds both against float64);
// else the TypeScript below, token by token in float64 arithmetic over float32 storage (the
// onnxruntime stages' path, and the reference the native one is held to).
//
// Prefix reuse: a state cannot be cut back to an earlier position. The state keeps one backup, of
// where the current chunk began, so a chunk that fails or is aborted half-way through its layers
// rolls back exactly; and CHECKPOINTS, copies of every linear layer's state taken at the end of a
// chunk (prompt or decode step) once every `every` tokens (default 1024), at most `max` of them
// (default ⌊context / every⌋, at most 8: stateCheckpointCount). When all are used the one whose
// removal leaves the smallest gap goes (never the newest; ring-checkpoints.ts's rule), so a long
// draft keeps them spread over its length. A cut to n resumes at the newest checkpoint at or before
// n (resumePoint), or at the state's own position when n is it, else at 0; the tokens after it are
// prefilled again and `reusedTokens` says how many were not. Buffers are allocated as checkpoints
// are first taken and reused after; a checkpoint costs one state (Qwen3.5-0.8B-like: 18 layers of
// 16 heads × 128² floats, ~19 MB), so the default stays within 8 of them.
import { gatedDeltaNet } from '../../../native/index.js';
import { thinnestCheckpoint } from '../kv/ring-checkpoints.ts';
import type { TensorData } from '../onnx/graph-builder.ts';
import { linearConvChannels, linearStateFloats, type LayerSpec, type LinearAttentionSpec } from './layers/layer-spec.ts';

/** The weights of one linear-attention layer the recurrence reads (the projections are the stages'). */
export interface LinearLayerWeights {
  /** [C, K] taps of the causal convolution per channel (GGUF ssm_conv1d: ne [K, C]) */
  conv: Float32Array;
  /** [D] the gated RMSNorm's weight (ssm_norm) */
  norm: Float32Array;
}

export interface StateCheckpointOptions {
  /** tokens between checkpoints (default 1024) */
  every?: number;
  /** checkpoints kept at most (default stateCheckpointCount(context, every); 0: none, a cut re-prefills from 0) */
  max?: number;
}

export const STATE_CHECKPOINT_DEFAULTS = { every: 1024, most: 8 } as const;

/** The default number of state checkpoints for a context of `contextLength` tokens: one per `every`, at most 8. */
export function stateCheckpointCount(contextLength: number, every: number = STATE_CHECKPOINT_DEFAULTS.every): number {
  return Math.min(STATE_CHECKPOINT_DEFAULTS.most, Math.floor(contextLength / every));
}

interface LayerState {
  readonly layer: number;
  readonly spec: LinearAttentionSpec;
  readonly weights: LinearLayerWeights;
  /** [Hv, D, D] M[h][j][i] = S_h[i][j], then [(K−1), C] the convolution's tail (oldest row first) */
  readonly state: Float32Array;
  /** the state where the running chunk began */
  readonly backup: Float32Array;
}

export class LinearAttentionState {
  private readonly byLayer = new Map<number, LayerState>();
  /** tokens the state has folded in */
  private at = 0;
  /** where the backup was taken (−1: none) */
  private backupAt = -1;
  /** a chunk began and has not ended: some layers may have advanced the state past `at` */
  private pending = false;
  /** [max C] one token's convolved q|k|v; [max D] scratch of one head's δ and output */
  private readonly x: Float32Array;
  private readonly delta: Float64Array;
  private readonly o: Float64Array;
  /** floats of every linear layer's state together: one checkpoint */
  private readonly total: number;
  private readonly every: number;
  private readonly max: number;
  /** the checkpoints held, ascending by position; buffers of dropped ones are kept for the next */
  private readonly held: { at: number; data: Float32Array }[] = [];
  private readonly spare: Float32Array[] = [];

  /** the native kernel's threads, or undefined: the TypeScript recurrence */
  private readonly native: { threads: number } | undefined;

  constructor(specs: readonly LayerSpec[], weights: (layer: number) => LinearLayerWeights, contextLength: number, checkpoints: StateCheckpointOptions = {}, native?: { threads: number }) {
    this.native = native;
    let maxC = 0;
    let maxD = 0;
    for (let l = 0; l < specs.length; l++) {
      const a = specs[l]!.attention;
      if (a.kind !== 'linear') continue;
      const w = weights(l);
      const C = linearConvChannels(a);
      if (w.conv.length !== C * a.convKernel) throw new RangeError(`layer ${l}: the convolution has ${w.conv.length} taps, expected ${C} channels × ${a.convKernel}`);
      if (w.norm.length !== a.headDim) throw new RangeError(`layer ${l}: the output norm has ${w.norm.length} values, expected ${a.headDim}`);
      if (a.valueHeads % a.keyHeads !== 0) throw new RangeError(`layer ${l}: ${a.valueHeads} value heads cannot share ${a.keyHeads} key heads`);
      const n = linearStateFloats(a);
      this.byLayer.set(l, { layer: l, spec: a, weights: w, state: new Float32Array(n), backup: new Float32Array(n) });
      maxC = Math.max(maxC, C);
      maxD = Math.max(maxD, a.headDim);
    }
    this.x = new Float32Array(maxC);
    this.delta = new Float64Array(maxD);
    this.o = new Float64Array(maxD);
    let total = 0;
    for (const s of this.byLayer.values()) total += s.state.length;
    this.total = total;
    this.every = checkpoints.every ?? STATE_CHECKPOINT_DEFAULTS.every;
    this.max = checkpoints.max ?? stateCheckpointCount(contextLength, this.every);
    if (!(Number.isInteger(this.every) && this.every > 0)) throw new RangeError(`state checkpoints: every must be a positive integer, got ${this.every}`);
    if (!(Number.isInteger(this.max) && this.max >= 0)) throw new RangeError(`state checkpoints: max must be a non-negative integer, got ${this.max}`);
  }

  /** Positions of the checkpoints held, ascending. */
  checkpointPositions(): number[] {
    return this.held.map((c) => c.at);
  }

  /** Bytes of the checkpoints held. */
  get checkpointBytes(): number {
    return this.held.length * this.total * 4;
  }

  /** Whether the model has linear-attention layers at all. */
  get any(): boolean {
    return this.byLayer.size > 0;
  }

  /** Tokens folded into the state. */
  get position(): number {
    return this.at;
  }

  /** Bytes of one sequence's state over every linear layer (the matrices and the convolution tails; the chunk backup doubles it). */
  get bytes(): number {
    let n = 0;
    for (const s of this.byLayer.values()) n += s.state.byteLength;
    return n;
  }

  /** [layer] bytes of each layer's state (0 for the attention layers). */
  layerBytes(layers: number): number[] {
    return Array.from({ length: layers }, (_, l) => this.byLayer.get(l)?.state.byteLength ?? 0);
  }

  /** A chunk at position p0 starts: the state there is kept, so a failure inside the chunk rolls back to it. */
  beginChunk(p0: number): void {
    if (p0 !== this.at) throw new RangeError(`linear attention: a chunk at ${p0}, the state is at ${this.at}`);
    if (this.pending) throw new RangeError(`linear attention: a chunk at ${p0} began before the one at ${this.backupAt} ended or was cut back`);
    for (const s of this.byLayer.values()) s.backup.set(s.state);
    this.backupAt = p0;
    this.pending = true;
  }

  /** The chunk ran through every layer: the state is at p0 + T (a checkpoint is taken there when one is due). */
  endChunk(tokens: number): void {
    this.at += tokens;
    this.pending = false;
    if (this.max === 0) return;
    const last = this.held.length > 0 ? this.held[this.held.length - 1]!.at : 0;
    if (Math.floor(this.at / this.every) > Math.floor(last / this.every)) this.take();
  }

  /** The largest position ≤ n the state can be cut back to: n itself when it is where the state is, else the newest checkpoint at or before n, else 0. */
  resumePoint(n: number): number {
    if (n === this.at && !this.pending) return n;
    let best = 0;
    for (const c of this.held) if (c.at <= n) best = c.at;
    return best;
  }

  /**
   * Cuts the state back to n: nothing at its own position, the chunk backup at the chunk's start,
   * zeros at 0. Returns false (changing nothing) for any other n: the caller must start again from 0.
   */
  cutTo(n: number): boolean {
    // a chunk that failed part-way: its first layers moved their state on, the rest did not
    if (this.pending && n === this.backupAt) {
      for (const s of this.byLayer.values()) s.state.set(s.backup);
      this.at = n;
      this.pending = false;
      return true;
    }
    if (n === 0) {
      this.reset();
      return true;
    }
    if (this.pending) return false;
    if (n === this.at) return true;
    if (n === this.backupAt) {
      for (const s of this.byLayer.values()) s.state.set(s.backup);
    } else {
      const c = this.held.find((h) => h.at === n);
      if (c === undefined) return false;
      let o = 0;
      for (const s of this.byLayer.values()) {
        s.state.set(c.data.subarray(o, o + s.state.length));
        o += s.state.length;
      }
    }
    this.at = n;
    this.backupAt = -1;
    // what was taken after n is of tokens that are gone
    for (let i = this.held.length - 1; i >= 0 && this.held[i]!.at > n; i--) this.spare.push(this.held.pop()!.data);
    return true;
  }

  /** The layers with a state, ascending, and the floats of each (a snapshot's sections). */
  stateLayers(): { layer: number; floats: number }[] {
    return [...this.byLayer.values()].map((s) => ({ layer: s.layer, floats: s.state.length }));
  }

  /**
   * Layer ℓ's state at position n, a copy: n must be the state's own position or a checkpoint's
   * (a resumePoint), else a RangeError.
   */
  exportLayer(layer: number, n: number): Float32Array {
    const s = this.byLayer.get(layer);
    if (s === undefined) throw new RangeError(`layer ${layer} is not a linear-attention layer`);
    if (!this.pending && n === this.at) return s.state.slice();
    const c = this.held.find((h) => h.at === n);
    if (c === undefined) throw new RangeError(`linear attention: no state at position ${n} (the state is at ${this.at}, checkpoints at ${this.checkpointPositions().join(', ') || 'none'})`);
    let o = 0;
    for (const t of this.byLayer.values()) {
      if (t === s) return c.data.slice(o, o + s.state.length);
      o += t.state.length;
    }
    throw new Error('unreachable');
  }

  /**
   * Replaces the state with a restored one at position n: `states` holds every linear layer's
   * (stateLayers' sizes; values finite), else a RangeError and the state is left empty. The
   * checkpoints start again from n.
   */
  importStates(n: number, states: ReadonlyMap<number, Float32Array>): void {
    this.reset();
    for (const s of this.byLayer.values()) {
      const data = states.get(s.layer);
      if (data === undefined || data.length !== s.state.length) throw new RangeError(`layer ${s.layer}: a restored state of ${data?.length ?? 'no'} floats, expected ${s.state.length}`);
      for (let i = 0; i < data.length; i++) {
        if (!Number.isFinite(data[i]!)) {
          this.reset();
          throw new RangeError(`layer ${s.layer}: the restored state holds a non-finite value at ${i}`);
        }
      }
    }
    for (const s of this.byLayer.values()) s.state.set(states.get(s.layer)!);
    this.at = n;
  }

  private take(): void {
    if (this.held.length >= this.max) this.spare.push(this.held.splice(thinnestCheckpoint(this.held), 1)[0]!.data);
    const data = this.spare.pop() ?? new Float32Array(this.total);
    let o = 0;
    for (const s of this.byLayer.values()) {
      data.set(s.state, o);
      o += s.state.length;
    }
    this.held.push({ at: this.at, data });
  }

  reset(): void {
    for (const s of this.byLayer.values()) s.state.fill(0);
    this.at = 0;
    this.backupAt = -1;
    this.pending = false;
    while (this.held.length > 0) this.spare.push(this.held.pop()!.data);
  }

  /**
   * Layer ℓ over a chunk of T tokens: reads its stage's outputs (lin_qkv, lin_z, lin_beta,
   * lin_decay), advances the state token by token and writes the gated, normed output into
   * out [T, Hv·D].
   */
  run(layer: number, stage: Readonly<Record<string, TensorData>>, T: number, out: Float32Array): void {
    const s = this.byLayer.get(layer);
    if (s === undefined) throw new RangeError(`layer ${layer} is not a linear-attention layer`);
    const { spec, weights, state } = s;
    const qkv = data(stage, 'lin_qkv', layer);
    const z = data(stage, 'lin_z', layer);
    const beta = data(stage, 'lin_beta', layer);
    const decay = data(stage, 'lin_decay', layer);
    const { keyHeads: Hk, valueHeads: Hv, headDim: D, convKernel: K, eps } = spec;
    const C = linearConvChannels(spec);
    const V = Hv * D;
    if (qkv.length !== T * C || z.length !== T * V || beta.length !== T * Hv || decay.length !== T * Hv || out.length !== T * V) {
      throw new RangeError(`layer ${layer}: linear-attention inputs of the wrong size for ${T} tokens`);
    }
    if (this.native !== undefined) {
      gatedDeltaNet({ keyHeads: Hk, valueHeads: Hv, headDim: D, convKernel: K, eps, tokens: T, qkv, z, beta, decay, conv: weights.conv, norm: weights.norm, state, out, threads: this.native.threads });
      return;
    }
    const matrices = Hv * D * D;
    const tail = state.subarray(matrices); // [(K−1), C]
    const x = this.x;
    const delta = this.delta;
    const o = this.o;
    const scale = 1 / Math.sqrt(D);
    for (let t = 0; t < T; t++) {
      const row = qkv.subarray(t * C, (t + 1) * C);
      // causal convolution over (tail, this row), then silu; the tail moves on by one row
      for (let c = 0; c < C; c++) {
        const w = c * K;
        let acc = 0;
        for (let k = 0; k < K - 1; k++) acc += tail[k * C + c]! * weights.conv[w + k]!;
        acc += row[c]! * weights.conv[w + K - 1]!;
        x[c] = acc / (1 + Math.exp(-acc));
      }
      tail.copyWithin(0, C);
      tail.set(row, (K - 2) * C);
      // q and k: L2 norm per key head (ggml_l2_norm: x / max(‖x‖, ε))
      for (let part = 0; part < 2; part++) {
        for (let h = 0; h < Hk; h++) {
          const base = part * Hk * D + h * D;
          let sum = 0;
          for (let i = 0; i < D; i++) sum += x[base + i]! * x[base + i]!;
          const inv = 1 / Math.max(Math.sqrt(sum), eps);
          for (let i = 0; i < D; i++) x[base + i] = x[base + i]! * inv;
        }
      }
      const vOff = 2 * Hk * D;
      for (let h = 0; h < Hv; h++) {
        const kh = h % Hk; // llama.cpp tiles the key heads over the value heads
        const qOff = kh * D;
        const kOff = Hk * D + kh * D;
        const m = state.subarray(h * D * D, (h + 1) * D * D); // M[j][i] = S[i][j]
        const g = Math.exp(decay[t * Hv + h]!);
        const b = beta[t * Hv + h]!;
        for (let j = 0; j < D; j++) {
          const mj = j * D;
          let sk = 0;
          for (let i = 0; i < D; i++) {
            const decayed = m[mj + i]! * g;
            m[mj + i] = decayed;
            sk += decayed * x[kOff + i]!;
          }
          delta[j] = (x[vOff + h * D + j]! - sk) * b;
        }
        for (let j = 0; j < D; j++) {
          const mj = j * D;
          const dj = delta[j]!;
          let acc = 0;
          for (let i = 0; i < D; i++) {
            const updated = m[mj + i]! + x[kOff + i]! * dj;
            m[mj + i] = updated;
            acc += updated * x[qOff + i]!;
          }
          o[j] = acc * scale;
        }
        // gated RMSNorm of the head's output: rmsnorm(o)·w ⊙ silu(z)
        let ss = 0;
        for (let j = 0; j < D; j++) ss += o[j]! * o[j]!;
        const inv = 1 / Math.sqrt(ss / D + eps);
        const zOff = t * V + h * D;
        for (let j = 0; j < D; j++) {
          const zj = z[zOff + j]!;
          out[zOff + j] = o[j]! * inv * weights.norm[j]! * (zj / (1 + Math.exp(-zj)));
        }
      }
    }
  }
}

function data(stage: Readonly<Record<string, TensorData>>, name: string, layer: number): Float32Array {
  const t = stage[name];
  if (t === undefined) throw new RangeError(`stage ${layer} output no ${name} for a linear-attention layer`);
  return t.data as Float32Array;
}
