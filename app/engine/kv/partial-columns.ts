// Partial columns C_{ℓ,g} (ARCHITECTURE.md §4.2): the p = ⌊r·d⌋ skewed columns with the largest
// Σ|qA| + Σ|kA| over the prompt. The speculation scores q̃·k̃ on these columns only, so the partial
// key cache (§4.3) stores p of d values per token.
//
// GQA: the column sum runs over ALL query heads of the group (each rotated by the group's one A),
// not over their average: at decode time every query head scores with its own q̃ (§4.4), so every
// one of them should keep its energy in the chosen columns.
// Ties: the lower column index wins. The result is sorted ascending (the gather order).
import { UsageError } from '../../common/errors.ts';
import { applySkew, checkHeadShape, skewMatrix, type HeadShape, type SkewMatrices } from './skew.ts';

/** Default ratio r of the paper (the authors' code used 0.2). */
export const DEFAULT_PARTIAL_RATIO = 0.3;

/**
 * p = ⌊r·d⌋, at least 1. A 1e-9 slack absorbs binary rounding (0.29·100 = 28.999999999999996 → 29).
 */
export function partialCount(r: number, d: number): number {
  if (!(r > 0 && r <= 1)) throw new UsageError(`partial ratio must be in (0, 1], got ${r}`, { r });
  return Math.max(1, Math.floor(r * d + 1e-9));
}

/**
 * The ⌊r·d⌋ columns of largest Σ|qSkewed| + Σ|kSkewed|, ascending.
 * `qSkewed`: [rowsQ, d] skewed query rows (any number of tokens × heads of one group);
 * `kSkewed`: [rowsK, d] skewed key rows of the same KV head, or null to use the queries only.
 */
export function choosePartialColumns(qSkewed: Float32Array, kSkewed: Float32Array | null, d: number, r: number): Int32Array {
  const p = partialCount(r, d);
  if (qSkewed.length % d !== 0 || (kSkewed !== null && kSkewed.length % d !== 0)) {
    throw new UsageError(`partial columns: row lengths are not multiples of d = ${d}`, { d });
  }
  const energy = new Float64Array(d); // [d] Σ|x| per column
  for (const x of kSkewed === null ? [qSkewed] : [qSkewed, kSkewed]) {
    for (let at = 0; at < x.length; at += d) {
      for (let j = 0; j < d; j++) energy[j] = energy[j]! + Math.abs(x[at + j]!);
    }
  }
  const order = Array.from({ length: d }, (_, j) => j).sort((a, b) => energy[b]! - energy[a]! || a - b);
  return Int32Array.from(order.slice(0, p)).sort();
}

/**
 * Partial columns of every KV head of one layer from the prompt's post-RoPE projections.
 * `q`: [T, heads·d], `k`: [T, kvHeads·d] (or null). Returns [kvHeads, p], each row ascending.
 */
export function choosePartialColumnsForLayer(
  skew: SkewMatrices,
  shape: HeadShape,
  layer: number,
  q: Float32Array,
  k: Float32Array | null,
  T: number,
  r: number,
): Int32Array {
  checkHeadShape(shape);
  const { heads, kvHeads, headDim: d } = shape;
  if (skew.kvHeads !== kvHeads || skew.headDim !== d) throw new UsageError('partial columns: skew matrices do not match the head shape', {});
  if (q.length < T * heads * d || (k !== null && k.length < T * kvHeads * d)) {
    throw new UsageError(`partial columns: expected ${T} tokens of queries/keys`, { T });
  }
  const group = heads / kvHeads;
  const p = partialCount(r, d);
  const out = new Int32Array(kvHeads * p); // [kvHeads, p]
  for (let g = 0; g < kvHeads; g++) {
    const qRows = new Float32Array(T * group * d); // [T·group, d] the group's query heads
    for (let t = 0; t < T; t++) {
      qRows.set(q.subarray((t * heads + g * group) * d, (t * heads + (g + 1) * group) * d), t * group * d);
    }
    let kRows: Float32Array | null = null;
    if (k !== null) {
      kRows = new Float32Array(T * d); // [T, d]
      for (let t = 0; t < T; t++) kRows.set(k.subarray((t * kvHeads + g) * d, (t * kvHeads + g + 1) * d), t * d);
    }
    const A = skewMatrix(skew, layer, g);
    const cols = choosePartialColumns(applySkew(qRows, A, d), kRows === null ? null : applySkew(kRows, A, d), d, r);
    out.set(cols, g * p);
  }
  return out;
}
