// Byte accounting of the KV cache (ARCHITECTURE.md §7): what a selection moves host → device per
// step, what the partial key cache costs, and the fetch ratio. Pure functions: the metrics module
// and the dashboard call these with the counts the native side reports.
//
// Units: a "row" is one token's K (or V) vector of one KV head in one layer: headDim elements.
// A selected slot moves two rows (K and V). int8 rows carry one float32 scale each.
import { UsageError } from '../../common/errors.ts';

export type KvElementType = 'f32' | 'f16' | 'int8';

export interface KvRowFormat {
  /** bytes of one element */
  readonly elementBytes: number;
  /** extra bytes per row (the int8 row's float32 scale) */
  readonly rowOverheadBytes: number;
}

export const KV_FORMATS: Readonly<Record<KvElementType, KvRowFormat>> = {
  f32: { elementBytes: 4, rowOverheadBytes: 0 },
  f16: { elementBytes: 2, rowOverheadBytes: 0 },
  int8: { elementBytes: 1, rowOverheadBytes: 4 },
};

function checkCount(name: string, v: number): void {
  if (!Number.isInteger(v) || v < 0) throw new UsageError(`${name} must be a non-negative integer, got ${v}`, { field: name, value: v });
}

/** Bytes of one row of headDim elements. */
export function rowBytes(headDim: number, type: KvElementType): number {
  checkCount('headDim', headDim);
  const f = KV_FORMATS[type];
  if (f === undefined) throw new UsageError(`unknown KV element type ${String(type)}`, {});
  return headDim * f.elementBytes + f.rowOverheadBytes;
}

/** K + V bytes for `rows` selected (slot, KV head) pairs: rows × rowBytes × 2. */
export function kvBytes(rows: number, headDim: number, type: KvElementType): number {
  checkCount('rows', rows);
  return rows * rowBytes(headDim, type) * 2;
}

/** Selected (slot, KV head) pairs of one layer: Σ over KV heads of the selection size. */
export function selectedRows(selection: readonly ArrayLike<number>[]): number {
  let n = 0;
  for (const s of selection) n += s.length;
  return n;
}

export interface StepBytes {
  /** [layers] K+V bytes moved for each layer's selection */
  readonly perLayer: number[];
  readonly total: number;
}

/**
 * Bytes moved host → device in one step: `selections[layer][kvHead]` are the selected slots. The
 * current token's own K/V are produced on the device and do not count.
 * With a reuse cache, pass only the misses as the selection.
 */
export function stepKvBytes(selections: readonly (readonly ArrayLike<number>[])[], headDim: number, type: KvElementType): StepBytes {
  const perLayer = selections.map((sel) => kvBytes(selectedRows(sel), headDim, type));
  return { perLayer, total: perLayer.reduce((a, b) => a + b, 0) };
}

/** Bytes of the partial key cache: tokens × layers × kvHeads × p elements. */
export function partialKeyBytes(tokens: number, layers: number, kvHeads: number, p: number, type: Exclude<KvElementType, 'int8'> = 'f16'): number {
  for (const [n, v] of Object.entries({ tokens, layers, kvHeads, p })) checkCount(n, v);
  return tokens * layers * kvHeads * p * KV_FORMATS[type].elementBytes;
}

/** Bytes the speculation reads per layer per step: N candidates × kvHeads × p elements. */
export function speculationReadBytes(N: number, kvHeads: number, p: number, type: Exclude<KvElementType, 'int8'> = 'f16'): number {
  return partialKeyBytes(N, 1, kvHeads, p, type);
}

/** Full K+V bytes of the pool for `tokens` tokens (what `full` would move per step). */
export function fullKvBytes(tokens: number, layers: number, kvHeads: number, headDim: number, type: KvElementType): number {
  checkCount('tokens', tokens);
  checkCount('layers', layers);
  checkCount('kvHeads', kvHeads);
  return kvBytes(tokens * layers * kvHeads, headDim, type);
}

/** n / N, 0 for an empty context. */
export function fetchRatio(n: number, N: number): number {
  if (!(n >= 0) || !(N >= 0)) throw new UsageError(`fetch ratio of ${n} / ${N}`, {});
  return N === 0 ? 0 : n / N;
}

/** Mean fetch ratio of one step: selected rows over candidate rows, across layers and KV heads. */
export function stepFetchRatio(selections: readonly (readonly ArrayLike<number>[])[], candidatesPerLayer: readonly number[]): number {
  if (selections.length !== candidatesPerLayer.length) throw new UsageError('one candidate count per layer is needed', {});
  let picked = 0;
  let possible = 0;
  selections.forEach((sel, l) => {
    picked += selectedRows(sel);
    possible += candidatesPerLayer[l]! * sel.length;
  });
  return fetchRatio(picked, possible);
}
