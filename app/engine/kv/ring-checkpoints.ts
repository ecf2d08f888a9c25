// Sliding-window layers as rings (ARCHITECTURE.md §5), and the rule that keeps prefix reuse and
// snapshots exact on them.
//
// A window layer with window w needs, to run the token at position t, the rows of positions
// t − w + 1 .. t. Its ring (native/src/kv_pool.h "Rings") holds
//   w − 1 + prefillChunk   rows: a prompt chunk's queries see their whole windows (and an abort in
//                          the middle of a chunk still rolls back to its start exactly), and
//   + prefillChunk         rows of slack: a cut back by up to a chunk (regenerate, an edit near the
//                          end of the text) needs no checkpoint,
// so ringSlots() = min(contextLength, w − 1 + 2·prefillChunk), whatever the context length.
//
// The reuse rule. A cut back to n (an edit in the middle of a draft, a snapshot of the first n
// tokens) is exact when every ring still holds positions max(0, n − w + 1) .. n − 1: then the ring
// is cut like any layer. Older rows were overwritten, so further back the ring cannot be cut; for
// that the runner keeps CHECKPOINTS: every `every` tokens (default 1024) the newest w − 1 rows of
// each ring are copied into buffers allocated once at load, at most `max` of them (default 8).
// When all are used, the one whose removal leaves the smallest gap goes (never the newest), so a
// long draft keeps checkpoints spread over its whole length rather than only its end. A cut to n
// resumes at the newest point p <= n where the rings hold the window or a checkpoint was taken,
// restores that checkpoint into the emptied rings, and re-prefills p .. n: `reusedTokens` is p, the
// tokens that are really not recomputed. The checkpoints' bytes count in every KV figure
// (the memory estimate, inspect, /metrics) as part of the window layers' memory.
//
// How many. A checkpoint costs w − 1 rows of each window layer, so M of them over a context of C
// tokens cost what keeping every row would when M·(w − 1) = C: they only pay while they are few and
// far apart. The default keeps them to a quarter of that, M = ⌊C / (4·(w − 1))⌋ with the largest
// window, at most 8 (ringCheckpointCount): Gemma-3-like, window 1024, 8 at 32K (one per ~4K tokens,
// 1/4 of the window layers' full rows), 4 at 16K, 1 at 4K, none below (a cut past the rings' slack
// there re-prefills from 0, which costs less than 4 windows).
import type { KvPool } from '../../../native/index.js';
import { ownsKv, type LayerSpec } from '../forward/layers/layer-spec.ts';

/** A window layer of the model and its window in tokens. */
export interface RingLayer {
  layer: number;
  window: number;
}

export interface RingCheckpointOptions {
  /** tokens between checkpoints (default 1024) */
  every?: number;
  /** checkpoints kept at most (default ringCheckpointCount; 0: none, a cut past the rings' slack re-prefills from 0) */
  max?: number;
}

export const RING_CHECKPOINT_DEFAULTS = { every: 1024, most: 8 } as const;

/** The default number of checkpoints for a context of `contextLength` tokens and the largest window (see the file comment). */
export function ringCheckpointCount(contextLength: number, largestWindow: number): number {
  return Math.min(RING_CHECKPOINT_DEFAULTS.most, Math.floor(contextLength / (4 * Math.max(1, largestWindow - 1))));
}

/** Slots of the ring of a window layer (see the file comment). */
export function ringSlots(window: number, prefillChunk: number, contextLength: number): number {
  return Math.min(contextLength, window - 1 + 2 * prefillChunk);
}

/**
 * The window layers that keep their window as a ring: every layer that has a window, keeps rows of
 * its own, and whose ring (ringSlots) is smaller than the context. A KV-shared layer (Gemma 4) keeps
 * no rows and reads its source's ring: checkLayerSpecs holds it to its source's window, so the ring
 * holds what it attends too. One rule for the runner's pool and the memory estimate.
 */
export function windowRingLayers(specs: readonly LayerSpec[], prefillChunk: number, contextLength: number): RingLayer[] {
  const rings: RingLayer[] = [];
  specs.forEach((spec, layer) => {
    if (!ownsKv(spec)) return;
    const w = spec.attention.window;
    if (w !== undefined && ringSlots(w, prefillChunk, contextLength) < contextLength) rings.push({ layer, window: w });
  });
  return rings;
}

/** Rows a resume at position n needs of a window layer: the w − 1 before it (fewer near the start). */
export function ringKeepRows(window: number, n: number): number {
  return Math.min(n, window - 1);
}

interface Checkpoint {
  /** the position the checkpoint resumes at (its rows are positions < at) */
  at: number;
  /** [ring] the packed rows of each ring layer (pool snapshot sections), views of preallocated buffers */
  sections: Uint8Array[];
}

export class RingCheckpoints {
  readonly every: number;
  readonly max: number;
  /** Bytes of the checkpoint buffers (allocated once, whether used or not). */
  readonly bytes: number;
  private readonly held: Checkpoint[] = [];
  /** [max] free buffer sets: [ring] a section of w − 1 rows */
  private readonly free: Uint8Array[][] = [];
  /** taken / restored so far (figures and tests) */
  taken = 0;
  restored = 0;

  constructor(
    private readonly pool: KvPool,
    readonly rings: readonly RingLayer[],
    contextLength: number,
    options: RingCheckpointOptions = {},
  ) {
    const o = { every: options.every ?? RING_CHECKPOINT_DEFAULTS.every, max: options.max ?? ringCheckpointCount(contextLength, Math.max(0, ...rings.map((r) => r.window))) };
    if (!Number.isInteger(o.every) || o.every < 1) throw new RangeError(`ring checkpoints: every must be a positive integer, got ${o.every}`);
    if (!Number.isInteger(o.max) || o.max < 0) throw new RangeError(`ring checkpoints: max must be an integer >= 0, got ${o.max}`);
    this.every = o.every;
    this.max = rings.length > 0 ? o.max : 0;
    let bytes = 0;
    for (let i = 0; i < this.max; i++) {
      // a layer's own section size: the layers of a layered pool (Gemma 4) differ in row shape
      const set = rings.map((r) => new Uint8Array(pool.snapshotLayerBytes(r.window - 1, r.layer)));
      for (const s of set) bytes += s.byteLength;
      this.free.push(set);
    }
    this.bytes = bytes;
  }

  /** Positions of the checkpoints held, ascending. */
  positions(): number[] {
    return this.held.map((c) => c.at);
  }

  /** Whether every ring holds the rows a resume at n needs (positions max(0, n − w + 1) .. n − 1). */
  covers(n: number): boolean {
    if (n === 0) return true;
    for (const { layer, window } of this.rings) {
      if (this.pool.length(layer) === 0) return false;
      const oldest = this.pool.position(layer, this.pool.ringStart(layer));
      const newest = this.pool.position(layer, this.pool.lastSlot(layer));
      if (oldest > Math.max(0, n - window + 1) || newest < n - 1) return false;
    }
    return true;
  }

  /** The largest p <= n where a cut is exact: n if the rings cover it, else the newest checkpoint <= n, else 0. */
  resumePoint(n: number): number {
    if (this.covers(n)) return n;
    for (let i = this.held.length - 1; i >= 0; i--) if (this.held[i]!.at <= n) return this.held[i]!.at;
    return 0;
  }

  /** After a chunk or a step that ended at `position`: a checkpoint when it crossed a multiple of `every`. */
  noteEnd(position: number): void {
    if (this.max === 0) return;
    const last = this.held.length > 0 ? this.held[this.held.length - 1]!.at : 0;
    if (Math.floor(position / this.every) <= Math.floor(last / this.every)) return;
    this.take(position);
  }

  /**
   * The pool was cut to n (pool.truncate(n) already ran): a ring that no longer holds n's window gets
   * the checkpoint at n restored. n must be a resumePoint computed before the cut.
   */
  cutTo(n: number, coveredBefore: boolean): void {
    this.truncate(n);
    if (coveredBefore || n === 0) return;
    const c = this.held.find((h) => h.at === n);
    if (!c) throw new RangeError(`ring checkpoints: no checkpoint at ${n} and the windows do not hold it (cut at a resumePoint)`);
    this.rings.forEach(({ layer, window }, i) => {
      this.pool.clearLayer(layer);
      this.pool.importLayer(layer, ringKeepRows(window, n), c.sections[i]!);
    });
    this.restored += 1;
  }

  /** Forgets the checkpoints past n (their rows are of text that is cut away). */
  truncate(n: number): void {
    while (this.held.length > 0 && this.held[this.held.length - 1]!.at > n) this.release(this.held.length - 1);
  }

  reset(): void {
    this.truncate(-1);
  }

  /** Bytes of a ring layer's section for a cut at n (what a snapshot stores for it). */
  sectionBytes(ringIndex: number, n: number): number {
    const { layer, window } = this.rings[ringIndex]!;
    return this.pool.snapshotLayerBytes(ringKeepRows(window, n), layer);
  }

  /** Packs a ring layer's rows for a cut at n (a resumePoint) into out: from the ring, or from the checkpoint at n. */
  exportSection(ringIndex: number, n: number, out: Uint8Array): void {
    const { layer, window } = this.rings[ringIndex]!;
    const rows = ringKeepRows(window, n);
    if (rows === 0) return;
    if (this.covers(n)) {
      const first = n - rows - this.pool.position(layer, this.pool.ringStart(layer));
      this.pool.exportRows(layer, first, rows, out);
      return;
    }
    const c = this.held.find((h) => h.at === n);
    if (!c) throw new RangeError(`ring checkpoints: position ${n} is not a resume point`);
    out.set(c.sections[ringIndex]!.subarray(0, out.byteLength));
  }

  private take(at: number): void {
    if (this.free.length === 0) this.release(thinnestCheckpoint(this.held));
    const set = this.free.pop()!;
    const sections = this.rings.map(({ layer, window }, i) => {
      const rows = ringKeepRows(window, at);
      const view = set[i]!.subarray(0, this.pool.snapshotLayerBytes(rows, layer));
      this.pool.exportRows(layer, this.pool.length(layer) - rows, rows, view);
      return view;
    });
    this.held.push({ at, sections });
    this.taken += 1;
  }

  private release(i: number): void {
    const [c] = this.held.splice(i, 1);
    // the views' buffers go back whole
    this.free.push(c!.sections.map((s) => new Uint8Array(s.buffer, 0, s.buffer.byteLength)));
  }
}

/**
 * Which of the checkpoints held (ascending positions) to drop when one must go: the one, never the
 * newest, whose removal leaves the smallest gap between its neighbours (the first one's gap counts
 * from 0), so the survivors stay spread over the text. Ring checkpoints and policy-state
 * checkpoints (forward/policy/state-checkpoints.ts) drop by this one rule.
 */
export function thinnestCheckpoint(held: readonly { at: number }[]): number {
  let best = 0;
  let bestGap = Infinity;
  for (let i = 0; i < held.length - 1; i++) {
    const gap = held[i + 1]!.at - (i > 0 ? held[i - 1]!.at : 0);
    if (gap < bestGap) {
      best = i;
      bestGap = gap;
    }
  }
  return best;
}
