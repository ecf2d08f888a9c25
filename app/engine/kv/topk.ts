// Top-k over pool slots, the one ranking rule every reference policy shares:
//  - only candidate slots compete (mask[j] = 1; a missing mask means every slot);
//  - larger score first; on equal scores the LOWER slot index wins (deterministic, and the
//    native kernels must do the same — a stable sort by slot, or a (score, −slot) key);
//  - NaN ranks below everything (it never beats a number);
//  - the result is sorted ascending by slot: the order rows are gathered in.
import { UsageError } from '../../common/errors.ts';

/** Slots of the k largest scores among the candidates (fewer if there are fewer candidates). */
export function topIndices(scores: ArrayLike<number>, k: number, mask?: Uint8Array): Int32Array {
  if (!Number.isInteger(k) || k < 0) throw new UsageError(`top-k: k must be a non-negative integer, got ${k}`, { k });
  if (mask !== undefined && mask.length !== scores.length) {
    throw new UsageError(`top-k: mask has ${mask.length} slots, scores ${scores.length}`, {});
  }
  const slots: number[] = [];
  for (let j = 0; j < scores.length; j++) if (mask === undefined || mask[j] !== 0) slots.push(j);
  if (k >= slots.length) return Int32Array.from(slots);
  const key = (j: number): number => {
    const s = scores[j]!;
    return Number.isNaN(s) ? -Infinity : s;
  };
  slots.sort((a, b) => {
    const ka = key(a);
    const kb = key(b);
    return ka === kb ? a - b : kb > ka ? 1 : -1;
  });
  return Int32Array.from(slots.slice(0, k)).sort();
}

/** Number of candidate slots. */
export function countCandidates(mask: Uint8Array): number {
  let n = 0;
  for (let j = 0; j < mask.length; j++) if (mask[j] !== 0) n++;
  return n;
}

/** ⌊fraction·N⌋ with the same 1e-9 slack as the partial-column count (0.3·10 → 3, not 2). */
export function fractionOf(fraction: number, N: number): number {
  return Math.floor(fraction * N + 1e-9);
}
