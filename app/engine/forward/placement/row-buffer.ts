// The device-side row buffer of the offload path (issue 14; ARCHITECTURE.md §5 "device reuse cache"):
// per layer and KV head, rows of K and V indexed by pool slot, so that a step sends only the rows that
// are not there yet.
//
// Rule (the plain model in row-buffer.test.ts is exactly this): after a step of (layer, KV head), the
// buffer holds the rows that step attended and nothing else. At the next step, a listed slot whose
// row is held is a HIT; every other listed slot is a MISS, copied from the pool into a row that the
// previous step's set frees. A slot whose content changed (the pool appended into it: a new token,
// the victim of an eviction, a slot reused after truncate) stops being held at once (invalidate).
//
// Storage: per layer one K and one V array [kvHeads · rowsPerHead, headDim] of the row buffer's element
// type (fp16 bits for an fp16 pool, else fp32), bound to the attention session as `k_rows` / `v_rows`
// (AttentionSession); KV head g owns rows g·rowsPerHead .. (g+1)·rowsPerHead − 1. A list longer than
// rowsPerHead grows the layer's buffer (rows keep their contents; a device would reallocate and copy).
// Bookkeeping is typed arrays, O(listed rows) per step; nothing allocates while the buffer does not grow.
// Mode 'graph' (device-resident buffers, offload-attention.ts): the same bookkeeping, but the misses are
// gathered into a staging pair [misses, headDim] that the row-update graph scatters into the device
// tensors; the host keeps no copy of the rows, and a layer's buffer cannot grow (it is sized to hold
// every slot of the pool).
import type { KvPool } from '../../../../native/index.js';
import { gatherRows } from '../../../../native/index.js';
import { BoundRows, type RowElemType } from '../../onnx/attention-graph.ts';

/** One layer's planned step: the rows to attend and what had to be sent. */
export interface RowPlan {
  /** [kvHeads · n] buffer row per KV head and list entry (absolute row indices into k_rows / v_rows) */
  idx: Int32Array;
  /** entries per KV head */
  n: number;
  hits: number;
  misses: number;
  /** bytes written into the buffer for the misses (K and V) */
  uploadBytes: number;
  /** every KV head g attends rows g·rowsPerHead + 0..n−1 in order (the attention needs no idx) */
  prefix: boolean;
  /** [kvHeads] entries of each head that count, when some head lists fewer than n (the rest are padding) */
  lengths?: Int32Array;
  /** mode 'graph': the misses' buffer rows (dest[i] gets staged row i of k / v) */
  staged?: { dest: Int32Array; k: Uint16Array | Float32Array; v: Uint16Array | Float32Array };
}

export type RowBufferMode = 'host' | 'graph';

class LayerRows {
  rowsPerHead = 0;
  bound: BoundRows | undefined;
  /** [kvHeads · poolCapacity] row of each (head, slot), −1: not held */
  slotRow: Int32Array;
  /** [kvHeads · rowsPerHead] slot held by each row, −1: free */
  rowSlot = new Int32Array(0);
  /** [kvHeads · rowsPerHead] the step that last attended the row */
  rowStep = new Int32Array(0);
  /** per head: the rows attended by the previous step, and a free-row stack */
  prev: Int32Array[] = [];
  prevN: number[] = [];
  free: Int32Array[] = [];
  freeN: number[] = [];
  step = 0;
  constructor(kvHeads: number, capacity: number) {
    this.slotRow = new Int32Array(kvHeads * capacity).fill(-1);
  }
}

export class RowBuffer {
  readonly rowType: RowElemType;
  private readonly layers: LayerRows[];
  /** scratch for one layer's plan: idx and the miss lists given to the native gather */
  private idx = new Int32Array(0);
  /** [kvHeads] a ragged step's entries per head (RowPlan.lengths) */
  private lengths = new Int32Array(0);
  private missHeads = new Int32Array(0);
  private missSlots = new Int32Array(0);
  private missDest = new Int32Array(0);
  /** mode 'graph': staged miss rows, and 0, 1, 2, … as their destinations in the staging pair */
  private stageK: Uint16Array | Float32Array = new Float32Array(0);
  private stageV: Uint16Array | Float32Array = new Float32Array(0);
  private seq = new Int32Array(0);

  constructor(
    private readonly pool: KvPool,
    /** initial rows per KV head of each layer (grown on demand up to the pool's capacity; mode 'graph': must be the capacity) */
    initialRowsPerHead: readonly number[],
    readonly mode: RowBufferMode = 'host',
  ) {
    this.rowType = pool.kvType === 'fp16' ? 'float16' : 'float32';
    if (mode === 'graph' && initialRowsPerHead.some((r) => r < pool.capacityTokens)) throw new RangeError('RowBuffer: mode graph needs rows for every slot (it cannot grow)');
    this.layers = initialRowsPerHead.map((rows) => {
      const l = new LayerRows(pool.kvHeads, pool.capacityTokens);
      this.resize(l, Math.max(1, Math.min(rows, pool.capacityTokens)));
      return l;
    });
  }

  /** The tensors bound as k_rows / v_rows for `layer` (mode 'host'). */
  bound(layer: number): BoundRows {
    const b = this.layers[layer]!.bound;
    if (!b) throw new RangeError('RowBuffer: mode graph keeps the rows on the device');
    return b;
  }

  rowsPerHead(layer: number): number {
    return this.layers[layer]!.rowsPerHead;
  }

  /** Bytes of every layer's K and V rows (what the buffer takes on the device). */
  get byteLength(): number {
    const elem = this.rowType === 'float16' ? 2 : 4;
    let b = 0;
    for (const l of this.layers) b += 2 * this.pool.kvHeads * l.rowsPerHead * this.pool.headDim * elem;
    return b;
  }

  /** The pool wrote new content into slots first..first+count−1 of `layer`: they are no longer held. */
  invalidate(layer: number, first: number, count: number): void {
    const l = this.layers[layer]!;
    const cap = this.pool.capacityTokens;
    for (let g = 0; g < this.pool.kvHeads; g++) {
      for (let s = first; s < first + count; s++) {
        const r = l.slotRow[g * cap + s]!;
        if (r < 0) continue;
        l.slotRow[g * cap + s] = -1;
        l.rowSlot[r] = -1;
        l.free[g]![l.freeN[g]!++] = r;
      }
    }
  }

  /** Forgets every row (reset, truncate, import: the pool's slots are not what the buffer holds). */
  clear(): void {
    for (const l of this.layers) this.resize(l, l.rowsPerHead);
  }

  /**
   * Plans and performs one step of `layer`: per KV head g the slots lists[g] (at most n each, at least
   * one), or with `lists` undefined the slots 0..n−1 of every head (full attention). Misses are copied
   * from the pool. A list shorter than n (a policy whose KV heads keep different counts, as Quest's
   * pages do) is padded to n with its first row, and the plan's `lengths` say how many entries of each
   * head count: the attention masks the rest.
   */
  step(layer: number, n: number, lists?: readonly Int32Array[]): RowPlan {
    const l = this.layers[layer]!;
    const kvHeads = this.pool.kvHeads;
    const cap = this.pool.capacityTokens;
    if (n > l.rowsPerHead) this.grow(l, n);
    const t = ++l.step;
    if (this.idx.length < kvHeads * n) this.idx = new Int32Array(Math.max(kvHeads * n, 2 * this.idx.length));
    if (this.missSlots.length < kvHeads * n) {
      const m = Math.max(kvHeads * n, 2 * this.missSlots.length);
      this.missHeads = new Int32Array(m);
      this.missSlots = new Int32Array(m);
      this.missDest = new Int32Array(m);
    }
    const idx = this.idx;
    let hits = 0;
    let misses = 0;
    let ragged = false;
    for (let g = 0; g < kvHeads; g++) {
      const list = lists?.[g];
      const base = g * n;
      const map = g * cap;
      const m = list ? list.length : n; // entries of this head that count
      if (m > n || m < 1) throw new RangeError(`row buffer: KV head ${g} lists ${m} rows, expected 1..${n}`);
      if (m < n) ragged = true;
      // 1. hits: held rows stay, marked with this step
      for (let i = 0; i < m; i++) {
        const s = list ? list[i]! : i;
        const r = l.slotRow[map + s]!;
        if (r >= 0) {
          l.rowStep[r] = t;
          idx[base + i] = r;
          hits++;
        } else {
          idx[base + i] = -1;
        }
      }
      // 2. the previous step's rows that this step does not attend are freed
      const prev = l.prev[g]!;
      const free = l.free[g]!;
      for (let i = 0; i < l.prevN[g]!; i++) {
        const r = prev[i]!;
        const s = l.rowSlot[r]!;
        if (s < 0 || l.rowStep[r] === t) continue; // invalidated already, or attended again
        l.slotRow[map + s] = -1;
        l.rowSlot[r] = -1;
        free[l.freeN[g]!++] = r;
      }
      // 3. misses take free rows; the row list of this step becomes the next step's `prev`
      let pn = 0;
      for (let i = 0; i < m; i++) {
        let r = idx[base + i]!;
        if (r < 0) {
          const s = list ? list[i]! : i;
          r = free[--l.freeN[g]!]!;
          l.slotRow[map + s] = r;
          l.rowSlot[r] = s;
          l.rowStep[r] = t;
          idx[base + i] = r;
          this.missHeads[misses] = g;
          this.missSlots[misses] = s;
          this.missDest[misses] = r;
          misses++;
        }
        prev[pn++] = r;
      }
      l.prevN[g] = pn;
      // padding: the head's first row again, masked by `lengths`
      for (let i = m; i < n; i++) idx[base + i] = idx[base]!;
    }
    let lengths: Int32Array | undefined;
    if (ragged) {
      if (this.lengths.length < kvHeads) this.lengths = new Int32Array(kvHeads);
      for (let g = 0; g < kvHeads; g++) this.lengths[g] = lists![g]!.length;
      lengths = this.lengths.subarray(0, kvHeads);
    }
    let prefix = !ragged;
    const B = l.rowsPerHead;
    for (let g = 0; g < kvHeads && prefix; g++) for (let i = 0; i < n; i++) if (idx[g * n + i] !== g * B + i) { prefix = false; break; }
    if (this.mode === 'graph') {
      const d = this.pool.headDim;
      if (this.seq.length < misses) {
        this.seq = Int32Array.from({ length: this.missDest.length }, (_, i) => i);
        const Arr = this.rowType === 'float16' ? Uint16Array : Float32Array;
        this.stageK = new Arr(this.missDest.length * d);
        this.stageV = new Arr(this.missDest.length * d);
      }
      const uploadBytes = misses > 0 ? gatherRows(this.pool, layer, this.missHeads, this.missSlots, this.seq, misses, this.stageK, this.stageV) : 0;
      return { idx, n, hits, misses, uploadBytes, prefix, ...(lengths ? { lengths } : {}), staged: { dest: this.missDest.subarray(0, misses), k: this.stageK, v: this.stageV } };
    }
    const bound = l.bound!;
    const uploadBytes = misses > 0 ? gatherRows(this.pool, layer, this.missHeads, this.missSlots, this.missDest, misses, bound.kData, bound.vData) : 0;
    return { idx, n, hits, misses, uploadBytes, prefix, ...(lengths ? { lengths } : {}) };
  }

  // ─── internals ──────────────────────────────────────────────────────────────────────────

  /** Empty buffer of `rows` rows per KV head (contents forgotten). */
  private resize(l: LayerRows, rows: number): void {
    const kvHeads = this.pool.kvHeads;
    const d = this.pool.headDim;
    if (l.rowsPerHead !== rows || (!l.bound && this.mode === 'host')) {
      const Arr = this.rowType === 'float16' ? Uint16Array : Float32Array;
      l.bound = this.mode === 'host' ? new BoundRows(new Arr(kvHeads * rows * d), new Arr(kvHeads * rows * d), kvHeads * rows, d, this.rowType) : undefined;
      l.rowSlot = new Int32Array(kvHeads * rows);
      l.rowStep = new Int32Array(kvHeads * rows);
      l.prev = Array.from({ length: kvHeads }, () => new Int32Array(rows));
      l.free = Array.from({ length: kvHeads }, () => new Int32Array(rows));
      l.rowsPerHead = rows;
    }
    l.slotRow.fill(-1);
    l.rowSlot.fill(-1);
    l.rowStep.fill(0);
    l.step = 0;
    l.prevN = new Array<number>(kvHeads).fill(0);
    l.freeN = new Array<number>(kvHeads).fill(rows);
    for (let g = 0; g < kvHeads; g++) {
      const f = l.free[g]!;
      // rows handed out lowest first (popped from the end)
      for (let i = 0; i < rows; i++) f[i] = g * rows + (rows - 1 - i);
    }
  }

  /** At least `need` rows per KV head, keeping what is held (rows move to their head's new block). */
  private grow(l: LayerRows, need: number): void {
    if (this.mode === 'graph') throw new RangeError(`RowBuffer: ${need} rows per head do not fit the device buffer (${l.rowsPerHead})`);
    const old = { rows: l.rowsPerHead, bound: l.bound!, slotRow: l.slotRow.slice(), prev: l.prev, prevN: l.prevN, rowStep: l.rowStep, step: l.step };
    const rows = Math.min(this.pool.capacityTokens, Math.max(need, 2 * old.rows));
    const kvHeads = this.pool.kvHeads;
    const d = this.pool.headDim;
    const cap = this.pool.capacityTokens;
    this.resize(l, rows);
    l.step = old.step;
    for (let g = 0; g < kvHeads; g++) {
      // held rows of head g keep their offset within the head's block: row g·old + j -> g·rows + j
      for (let s = 0; s < cap; s++) {
        const r = old.slotRow[g * cap + s]!;
        if (r < 0) continue;
        const j = r - g * old.rows;
        const nr = g * rows + j;
        l.bound!.kData.set(old.bound.kData.subarray(r * d, (r + 1) * d), nr * d);
        l.bound!.vData.set(old.bound.vData.subarray(r * d, (r + 1) * d), nr * d);
        l.slotRow[g * cap + s] = nr;
        l.rowSlot[nr] = s;
        l.rowStep[nr] = old.rowStep[r]!;
      }
      const prev = l.prev[g]!;
      for (let i = 0; i < old.prevN[g]!; i++) prev[i] = old.prev[g]![i]! - g * old.rows + g * rows;
      l.prevN[g] = old.prevN[g]!;
      // free rows: every row of the block not held
      let fn = 0;
      const f = l.free[g]!;
      for (let j = rows - 1; j >= 0; j--) if (l.rowSlot[g * rows + j]! < 0) f[fn++] = g * rows + j;
      l.freeN[g] = fn;
    }
  }
}
