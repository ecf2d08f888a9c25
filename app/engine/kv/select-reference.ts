// InfiniGen's token selection (ARCHITECTURE.md §4.4–§4.6), as a plain reference for the native
// speculation kernel. Runs for layer ℓ while layer ℓ−1 computes; inputs are the speculated partial
// queries of layer ℓ and layer ℓ's partial key cache.
//
// The rule, for N candidate tokens (slots holding a token that was not evicted):
//   s_{h,j} = scale · q̃_h · k̃_{kv(h),j}         per query head h and candidate j (float64 here)
//   m_h     = max_j s_{h,j}                       EACH head's own maximum (the authors' Llama path
//                                                 used head 0's maximum for every head: a fault)
//   c_h     = |{ j : s_{h,j} > m_h − α }|          α > 0, so c_h ≥ 1
//   n       = max(1, min(⌊mean_h c_h⌋, ⌊cap·N⌋))  one n for the whole layer
//   KV head g keeps its own top-n slots by the combined score
//   S_{g,j} = max_{h ∈ group(g)} (s_{h,j} − m_h)
//
// Why this combination (GQA, §4.4 "per query head, then combined per KV head"): the K/V rows of a
// KV head are shared by its query heads, so a row is worth fetching when ANY head of the group
// would attend to it — a max, not a mean, which would dilute a spike that only one head has.
// Each head's score is taken relative to its own maximum first: s − m_h is the log of the token's
// attention weight relative to that head's top token, which is exactly what α thresholds; raw
// scores would let the head with the largest logits decide for the whole group. For MHA (group of
// one) subtracting m_h changes nothing and this is the paper's per-head top-n.
//
// Ties: equal combined scores → the lower slot wins (topk.ts). Evicted or empty slots are never
// candidates: they do not count towards N, m_h, c_h, and are never selected (the authors'
// eviction simulation re-picked evicted tokens, so its memory limit never bound).
//
// The current token is NOT in the pool when layer ℓ is selected (its k/v of layer ℓ are computed
// in pre(ℓ) and appended after attention). The caller always adds it to the attended set itself;
// n and the selection here count pool tokens only.
//
// Layers below denseLayers (default 2) select every candidate.
import { UsageError } from '../../common/errors.ts';
import { countCandidates, fractionOf, topIndices } from './topk.ts';

export interface InfinigenKnobs {
  /** Score margin below each head's maximum (4 for OPT-like, 5 for Llama-like models). > 0. */
  readonly alpha: number;
  /** Most tokens a head may take, as a fraction of the candidates, (0, 1]. */
  readonly cap: number;
  /** Layers below this attend to every candidate. */
  readonly denseLayers: number;
}

export const ALPHA_OPT_LIKE = 4;
export const ALPHA_LLAMA_LIKE = 5;
/** Our default knobs (cap is ours, to be tuned against recall measurements). */
export const INFINIGEN_DEFAULTS: InfinigenKnobs = { alpha: ALPHA_LLAMA_LIKE, cap: 0.2, denseLayers: 2 };

export interface PartialScoreInput {
  readonly heads: number;
  readonly kvHeads: number;
  /** p = ⌊r·d⌋ partial columns */
  readonly p: number;
  /** slots in this layer's pool (candidates or not) */
  readonly slots: number;
  /** [heads, p] speculated partial queries (RoPE'd at the current position, skewed, column-picked) */
  readonly qPartial: Float32Array;
  /** [kvHeads, slots, p] partial key cache of the layer */
  readonly kPartial: Float32Array;
  /** [slots] 1 = the slot holds a candidate token; 0 = empty or evicted */
  readonly candidates: Uint8Array;
  /** multiplies every score: 1/√d for models whose q is not pre-scaled (Llama); 1 for OPT */
  readonly scale: number;
}

export interface InfinigenSelection {
  /** [kvHeads] selected slots, ascending; each has n entries (N when dense) */
  readonly selected: Int32Array[];
  /** tokens per KV head */
  readonly n: number;
  /** N, the candidates */
  readonly candidateCount: number;
  /** [heads] c_h (empty for dense layers) */
  readonly counts: Int32Array;
}

export function checkPartialInput(x: PartialScoreInput): void {
  const { heads, kvHeads, p, slots } = x;
  for (const [name, v] of Object.entries({ heads, kvHeads, p, slots })) {
    if (!Number.isInteger(v) || v < 0 || (v === 0 && name !== 'slots')) throw new UsageError(`${name} must be a positive integer, got ${v}`, { field: name });
  }
  if (heads % kvHeads !== 0) throw new UsageError(`heads (${heads}) must be a multiple of kvHeads (${kvHeads})`, { heads, kvHeads });
  if (x.qPartial.length !== heads * p) throw new UsageError(`qPartial: expected [${heads}, ${p}], got ${x.qPartial.length} floats`, {});
  if (x.kPartial.length !== kvHeads * slots * p) throw new UsageError(`kPartial: expected [${kvHeads}, ${slots}, ${p}], got ${x.kPartial.length} floats`, {});
  if (x.candidates.length !== slots) throw new UsageError(`candidates: expected ${slots} slots, got ${x.candidates.length}`, {});
  if (!Number.isFinite(x.scale) || x.scale <= 0) throw new UsageError(`scale must be a positive number, got ${x.scale}`, {});
}

/**
 * Partial scores s_{h,j} = scale · q̃_h · k̃_{kv(h),j}: [heads, slots] (float64; −Infinity at
 * non-candidate slots). Throws UsageError if a candidate's score is not finite.
 */
export function partialScores(x: PartialScoreInput): Float64Array {
  checkPartialInput(x);
  const { heads, kvHeads, p, slots, qPartial, kPartial, candidates, scale } = x;
  const group = heads / kvHeads;
  const s = new Float64Array(heads * slots).fill(-Infinity); // [heads, slots]
  for (let h = 0; h < heads; h++) {
    const g = Math.floor(h / group);
    for (let j = 0; j < slots; j++) {
      if (candidates[j] === 0) continue;
      let acc = 0;
      const k = (g * slots + j) * p;
      for (let i = 0; i < p; i++) acc += qPartial[h * p + i]! * kPartial[k + i]!;
      acc *= scale;
      if (!Number.isFinite(acc)) throw new UsageError(`partial score of head ${h}, slot ${j} is not finite`, { h, j });
      s[h * slots + j] = acc;
    }
  }
  return s;
}

/** The selection of one layer (see the file comment for the rule). */
export function selectInfinigen(layer: number, x: PartialScoreInput, knobs: InfinigenKnobs): InfinigenSelection {
  checkKnobs(knobs);
  checkPartialInput(x);
  const { heads, kvHeads, slots, candidates } = x;
  const N = countCandidates(candidates);
  if (N === 0 || layer < knobs.denseLayers) {
    const all = topIndices(new Float64Array(slots), slots, candidates);
    return { selected: Array.from({ length: kvHeads }, () => all.slice()), n: N, candidateCount: N, counts: new Int32Array(0) };
  }
  const s = partialScores(x);
  const group = heads / kvHeads;
  const maxOf = new Float64Array(heads); // [heads] m_h
  const counts = new Int32Array(heads); // [heads] c_h
  for (let h = 0; h < heads; h++) {
    let m = -Infinity;
    for (let j = 0; j < slots; j++) m = Math.max(m, s[h * slots + j]!);
    maxOf[h] = m;
    let c = 0;
    for (let j = 0; j < slots; j++) if (s[h * slots + j]! > m - knobs.alpha) c++;
    counts[h] = c;
  }
  const meanCount = counts.reduce((a, c) => a + c, 0) / heads;
  const n = Math.max(1, Math.min(Math.floor(meanCount), fractionOf(knobs.cap, N)));

  const combined = new Float64Array(slots); // [slots] S_{g,j} of one KV head
  const selected: Int32Array[] = [];
  for (let g = 0; g < kvHeads; g++) {
    combined.fill(-Infinity);
    for (let h = g * group; h < (g + 1) * group; h++) {
      for (let j = 0; j < slots; j++) {
        if (candidates[j] !== 0) combined[j] = Math.max(combined[j]!, s[h * slots + j]! - maxOf[h]!);
      }
    }
    selected.push(topIndices(combined, n, candidates));
  }
  return { selected, n, candidateCount: N, counts };
}

export function checkKnobs(k: InfinigenKnobs): void {
  if (!(k.alpha > 0) || !Number.isFinite(k.alpha)) throw new UsageError(`alpha must be a positive number, got ${k.alpha}`, { alpha: k.alpha });
  if (!(k.cap > 0 && k.cap <= 1)) throw new UsageError(`cap must be in (0, 1], got ${k.cap}`, { cap: k.cap });
  if (!Number.isInteger(k.denseLayers) || k.denseLayers < 0) throw new UsageError(`denseLayers must be a non-negative integer, got ${k.denseLayers}`, {});
}
