// Per-layer and per-head instruments for InfiniGen's speculation (issue 15), computed from an
// AttentionCapture (true q, k and the speculation queries of every layer), the skew A and the
// partial columns C, outside the engine so each error source can be isolated:
//
//   recall(S, h)   share of head h's true softmax mass (over the pool and the current token) that
//                  the attended set S ∪ {current} covers — the engine's `inspect` figure
//   sets compared at the SAME size n (InfiniGen's n from α and the cap at that step):
//     infinigen    the rule of select-reference.ts on q̃ = (q_spec·A)[C], k̃ = (k·A)[C]
//     oracle       top-n by the true softmax mass summed over the group (policies-reference oracle)
//     specFull     the same rule on the full-width scores q_spec·k (no skew, no column cut): what
//                  the one-layer-early query loses on its own
//     truePartial  the same rule on the TRUE query's partial scores (q·A)[C]·k̃: what the column
//                  cut loses on its own
//   spearman       rank correlation, over the pool, of the speculation's scores with the true
//                  scores q·k: full width (q_spec·k) and partial (q̃·k̃); every `sampleEvery` steps
//   energy         Σ_{c∈C}(xA)_c² / Σ_c (xA)_c², x = the true q, q_spec, and k: how much of each
//                  vector the partial columns keep
//
// Positions: the teacher-forced decode steps of accuracy.ts (t = P .. T−2: the pool holds 0..t−1,
// the current token t is always attended). Pure computation; no I/O.
import { choosePartialColumnsForLayer, partialCount } from '../kv/partial-columns.ts';
import { skewMatrix, type SkewMatrices } from '../kv/skew.ts';
import { fractionOf, topIndices } from '../kv/topk.ts';
import type { AttentionCapture } from './attention-capture.ts';

export type SpecSource = 'spec' | 'ownNorm' | 'true';

export interface DiagnoseOptions {
  alpha: number;
  cap: number;
  denseLayers: number;
  /** prompt tokens prefilled (the decode steps start at t = P) */
  prefill: number;
  /** which query the speculation uses: layer ℓ−1's normed input (the engine), the same with layer ℓ's norm weight, or the true query */
  source?: SpecSource;
  /** Spearman only every this many steps (it sorts the pool) */
  sampleEvery?: number;
}

/** Sums per (layer, query head); divide by `steps` / `sampled`. */
export interface HeadFigures {
  layer: number;
  head: number;
  steps: number;
  sampled: number;
  fetch: number;
  recall: { infinigen: number; oracle: number; specFull: number; truePartial: number };
  spearman: { full: number; partial: number };
  energy: { q: number; qSpec: number; k: number };
}

/**
 * How the partial columns are ranked (per layer and KV head, from the first `tokens` tokens):
 *   'qk'     Σ|qA| + Σ|kA| (ARCHITECTURE.md §4.2, what the engine does)
 *   'q'      Σ|qA| alone
 *   'qkvar'  Σ(qA)_c² · Var_t (kA)_c: the column's share of the variance of q·k over the tokens;
 *            a key component that is the same for every token shifts all scores alike and ranks
 *            nothing, however large it is
 *   'eigen'  the largest eigenvalues of the calibration's QᵀQ (the first p skewed columns)
 */
export type ColumnRule = 'qk' | 'q' | 'qkvar' | 'eigen';

/** Partial columns of every layer from the first `tokens` tokens of a capture: [layers][kvHeads·p]. */
export function columnsFromCapture(c: AttentionCapture, skew: SkewMatrices, r: number, tokens: number, rule: ColumnRule = 'qk'): Int32Array[] {
  const { layers, heads, kvHeads, headDim: d } = c.shape;
  const T = Math.min(tokens, c.tokens);
  if (rule === 'qk') {
    return Array.from({ length: layers }, (_, l) =>
      choosePartialColumnsForLayer(skew, { layers, heads, kvHeads, headDim: d }, l, c.q[l]!.subarray(0, T * heads * d), c.k[l]!.subarray(0, T * kvHeads * d), T, r),
    );
  }
  const p = partialCount(r, d);
  const group = heads / kvHeads;
  const tmp = new Float64Array(d);
  const all = Int32Array.from({ length: d }, (_, j) => j);
  return Array.from({ length: layers }, (_, l) => {
    const out = new Int32Array(kvHeads * p);
    for (let g = 0; g < kvHeads; g++) {
      const A = skewMatrix(skew, l, g);
      const score = new Float64Array(d);
      if (rule === 'eigen') {
        const ev = skew.eigenvalues.subarray((l * kvHeads + g) * d, (l * kvHeads + g + 1) * d);
        for (let j = 0; j < d; j++) score[j] = ev[j]!;
      } else {
        const q2 = new Float64Array(d);
        const qa = new Float64Array(d);
        const k1 = new Float64Array(d);
        const k2 = new Float64Array(d);
        for (let t = 0; t < T; t++) {
          for (let h = g * group; h < (g + 1) * group; h++) {
            project(c.q[l]!, (t * heads + h) * d, A, all, 0, d, d, tmp);
            for (let j = 0; j < d; j++) {
              q2[j] = q2[j]! + tmp[j]! ** 2;
              qa[j] = qa[j]! + Math.abs(tmp[j]!);
            }
          }
          project(c.k[l]!, (t * kvHeads + g) * d, A, all, 0, d, d, tmp);
          for (let j = 0; j < d; j++) {
            k1[j] = k1[j]! + tmp[j]!;
            k2[j] = k2[j]! + tmp[j]! ** 2;
          }
        }
        for (let j = 0; j < d; j++) score[j] = rule === 'q' ? qa[j]! : q2[j]! * Math.max(0, k2[j]! / T - (k1[j]! / T) ** 2);
      }
      const order = Array.from({ length: d }, (_, j) => j).sort((a, b) => score[b]! - score[a]! || a - b);
      out.set(Int32Array.from(order.slice(0, p)).sort(), g * p);
    }
    return out;
  });
}

/** Spearman's rank correlation of two equally long vectors (no tie correction: float scores). */
export function spearman(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const n = a.length;
  if (n < 2) return 1;
  const rank = (x: ArrayLike<number>): Float64Array => {
    const idx = Array.from({ length: n }, (_, i) => i).sort((i, j) => (x[i] as number) - (x[j] as number));
    const r = new Float64Array(n);
    idx.forEach((i, k) => (r[i] = k));
    return r;
  };
  const ra = rank(a);
  const rb = rank(b);
  let s = 0;
  for (let i = 0; i < n; i++) s += (ra[i]! - rb[i]!) ** 2;
  return 1 - (6 * s) / (n * (n * n - 1));
}

/** x·A[:, C] for one head vector x [d] → [p]. */
function project(x: Float32Array, at: number, A: Float32Array, cols: Int32Array, colAt: number, p: number, d: number, out: Float64Array): void {
  for (let i = 0; i < p; i++) {
    const c = cols[colAt + i]!;
    let s = 0;
    for (let j = 0; j < d; j++) s += x[at + j]! * A[j * d + c]!;
    out[i] = s;
  }
}

/** Share of the energy of x [d] that lands on the columns: Σ_C (xA)² / |x|² (A is orthogonal). */
function energyShare(x: Float32Array, at: number, A: Float32Array, cols: Int32Array, colAt: number, p: number, d: number, tmp: Float64Array): number {
  project(x, at, A, cols, colAt, p, d, tmp);
  let part = 0;
  for (let i = 0; i < p; i++) part += tmp[i]! ** 2;
  let all = 0;
  for (let j = 0; j < d; j++) all += x[at + j]! ** 2;
  return all > 0 ? part / all : 1;
}

/**
 * The selection rule (select-reference.ts) on scores s [group heads][t] of one KV head: returns
 * each head's max m_h and count c_h so the caller can form n, and, given n, the top-n slots by
 * max_h (s_h − m_h).
 */
function maxAndCount(s: Float64Array, t: number, alpha: number): { m: number; c: number } {
  let m = -Infinity;
  for (let j = 0; j < t; j++) m = Math.max(m, s[j]!);
  let c = 0;
  for (let j = 0; j < t; j++) if (s[j]! > m - alpha) c++;
  return { m, c };
}

function combinedTop(s: Float64Array[], maxes: number[], t: number, n: number): Int32Array {
  const comb = new Float64Array(t);
  comb.fill(-Infinity);
  for (let i = 0; i < s.length; i++) for (let j = 0; j < t; j++) comb[j] = Math.max(comb[j]!, s[i]![j]! - maxes[i]!);
  return topIndices(comb, n);
}

/** Adds one text's figures into `acc` (created on the first call: one entry per sparse layer and query head). */
export function diagnoseText(c: AttentionCapture, skew: SkewMatrices, columns: Int32Array[], p: number, o: DiagnoseOptions, acc: HeadFigures[] = []): HeadFigures[] {
  const { layers, heads, kvHeads, headDim: d } = c.shape;
  const group = heads / kvHeads;
  const qw = heads * d;
  const kvw = kvHeads * d;
  const scale = 1 / Math.sqrt(d);
  const every = o.sampleEvery ?? 8;
  const T = c.tokens;
  if (acc.length === 0) {
    for (let l = o.denseLayers; l < layers; l++) {
      for (let h = 0; h < heads; h++) {
        acc.push({ layer: l, head: h, steps: 0, sampled: 0, fetch: 0, recall: { infinigen: 0, oracle: 0, specFull: 0, truePartial: 0 }, spearman: { full: 0, partial: 0 }, energy: { q: 0, qSpec: 0, k: 0 } });
      }
    }
  }
  const at = (l: number, h: number): HeadFigures => acc[(l - o.denseLayers) * heads + h]!;
  const tmp = new Float64Array(d);
  for (let l = Math.max(o.denseLayers, 1); l < layers; l++) {
    const q = c.q[l]!;
    const k = c.k[l]!;
    const qs = o.source === 'true' ? q : o.source === 'ownNorm' ? c.qSpecOwnNorm[l]! : c.qSpec[l]!;
    // partial keys of every token, skewed: [kvHeads][T, p]
    const kp = Array.from({ length: kvHeads }, (_, g) => {
      const A = skewMatrix(skew, l, g);
      const out = new Float64Array(T * p);
      for (let j = 0; j < T; j++) {
        project(k, j * kvw + g * d, A, columns[l]!, g * p, p, d, tmp);
        out.set(tmp.subarray(0, p), j * p);
      }
      return out;
    });
    const sTrue = Array.from({ length: heads }, () => new Float64Array(T + 1)); // [heads][t+1] true scores incl. the current token
    const sSpec = Array.from({ length: heads }, () => new Float64Array(T)); // q̃·k̃ (partial, speculation query)
    const sSpecFull = Array.from({ length: heads }, () => new Float64Array(T)); // q_spec·k (full width)
    const sTruePart = Array.from({ length: heads }, () => new Float64Array(T)); // (qA)[C]·k̃
    const qt = new Float64Array(p);
    const qtt = new Float64Array(p);
    const probs = Array.from({ length: heads }, () => new Float64Array(T + 1));
    for (let t = o.prefill; t < T - 1; t++) {
      const counts: number[] = [];
      const maxSpec: number[] = [];
      const maxSpecFull: number[] = [];
      const maxTruePart: number[] = [];
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / group);
        const A = skewMatrix(skew, l, g);
        project(qs, t * qw + h * d, A, columns[l]!, g * p, p, d, qt);
        project(q, t * qw + h * d, A, columns[l]!, g * p, p, d, qtt);
        const kg = kp[g]!;
        let m = -Infinity;
        for (let j = 0; j <= t; j++) {
          let a = 0;
          let b = 0;
          for (let i = 0; i < d; i++) {
            const kv = k[j * kvw + g * d + i]!;
            a += q[t * qw + h * d + i]! * kv;
            b += qs[t * qw + h * d + i]! * kv;
          }
          sTrue[h]![j] = a * scale;
          m = Math.max(m, a * scale);
          if (j < t) {
            sSpecFull[h]![j] = b * scale;
            let e = 0;
            let f = 0;
            for (let i = 0; i < p; i++) {
              e += qt[i]! * kg[j * p + i]!;
              f += qtt[i]! * kg[j * p + i]!;
            }
            sSpec[h]![j] = e * scale;
            sTruePart[h]![j] = f * scale;
          }
        }
        let z = 0;
        for (let j = 0; j <= t; j++) z += (probs[h]![j] = Math.exp(sTrue[h]![j]! - m));
        for (let j = 0; j <= t; j++) probs[h]![j] = probs[h]![j]! / z;
        const mc = maxAndCount(sSpec[h]!, t, o.alpha);
        counts.push(mc.c);
        maxSpec.push(mc.m);
        maxSpecFull.push(maxAndCount(sSpecFull[h]!, t, o.alpha).m);
        maxTruePart.push(maxAndCount(sTruePart[h]!, t, o.alpha).m);
        const f = at(l, h);
        f.energy.q += energyShare(q, t * qw + h * d, A, columns[l]!, g * p, p, d, tmp);
        f.energy.qSpec += energyShare(qs, t * qw + h * d, A, columns[l]!, g * p, p, d, tmp);
        f.energy.k += energyShare(k, t * kvw + g * d, A, columns[l]!, g * p, p, d, tmp); // the head's KV head's key
        if ((t - o.prefill) % every === 0) {
          f.sampled++;
          f.spearman.full += spearman(sSpecFull[h]!.subarray(0, t), sTrue[h]!.subarray(0, t));
          f.spearman.partial += spearman(sSpec[h]!.subarray(0, t), sTrue[h]!.subarray(0, t));
        }
      }
      const n = Math.max(1, Math.min(Math.floor(counts.reduce((a, b) => a + b, 0) / heads), fractionOf(o.cap, t)));
      for (let g = 0; g < kvHeads; g++) {
        const hs = Array.from({ length: group }, (_, i) => g * group + i);
        const ig = combinedTop(hs.map((h) => sSpec[h]!), hs.map((h) => maxSpec[h]!), t, n);
        const sf = combinedTop(hs.map((h) => sSpecFull[h]!), hs.map((h) => maxSpecFull[h]!), t, n);
        const tp = combinedTop(hs.map((h) => sTruePart[h]!), hs.map((h) => maxTruePart[h]!), t, n);
        const mass = new Float64Array(t);
        for (const h of hs) for (let j = 0; j < t; j++) mass[j] = mass[j]! + probs[h]![j]!;
        const or = topIndices(mass, n);
        for (const h of hs) {
          const f = at(l, h);
          const cover = (set: Int32Array): number => {
            let s = probs[h]![t]!;
            for (const j of set) s += probs[h]![j]!;
            return s;
          };
          f.steps++;
          f.fetch += n / t;
          f.recall.infinigen += cover(ig);
          f.recall.oracle += cover(or);
          f.recall.specFull += cover(sf);
          f.recall.truePartial += cover(tp);
        }
      }
    }
  }
  return acc;
}

export { partialCount };
