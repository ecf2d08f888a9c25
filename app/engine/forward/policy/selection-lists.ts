// What the comparison policies (streaming, h2o, quest, snapkv, oracle; ARCHITECTURE.md §6) share,
// written once: a policy that, at each decode step of a layer ℓ >= denseLayers, chooses per KV head
// a list of slots among the N past tokens with the REAL query (none of them speculates), which the
// placement then attends with the current token appended.
//
//   select(ℓ, q, N) ─► choose(ℓ, q, N), the policy's own rule ─► the lists become the layer's latest
//   and are merged with the previous step's (the reuse-cache figures) ─► figures(ℓ, N, trace) writes
//   them into the step trace.
//
// Each layer's lists are views of two buffers that alternate step by step (this step's and the
// previous one's, which the merge still reads), grown when a longer context needs it. A policy
// that selects natively writes per-KV-head lists into output(ℓ, need) with this.offsets
// [kvHeads + 1] and takes views(out).
import type { AttentionArgs, KvPool } from '../../../../native/index.js';
import { kvRowBytes } from '../../model/memory-estimate.ts';
import { fractionOf } from '../../kv/topk.ts';
import type { StepTrace } from '../step-trace.ts';
import { layerRows, type PolicyContext, type PolicyShape, type RowPolicy } from './row-policy.ts';
import { sparseSettings, type SparsePolicyName, type SparsePolicyOptions, type SparseSettings } from './selection-settings.ts';

/** A comparison policy: its settings and its own list selection; the lists' bookkeeping lives here. */
export abstract class ListPolicy implements RowPolicy {
  abstract readonly name: SparsePolicyName;
  readonly settings: SparseSettings;
  readonly denseLayers: number;
  readonly shape: PolicyShape;
  readonly pool: KvPool;
  /** [layer] the layer's scale, window, soft-cap where not the defaults (the masses H2O, snapkv and oracle compute use them) */
  protected readonly attention: readonly (AttentionArgs | undefined)[];
  /** Milliseconds spent in select() (and H2O's attended()) since construction (the bench's per-step breakdown). */
  selectMs = 0;
  /** [kvHeads + 1] where each KV head's list starts in this step's output buffer (native selections write it); the largest layer's size */
  protected readonly offsets: Int32Array;
  /** [layer] two output buffers that alternate (this step's lists, the previous step's) */
  private readonly outBuf: Int32Array[][] = [];
  private readonly outFlip: number[] = [];
  /** [layer][kvHead] the previous step's selection (reuse-cache figures) */
  private readonly previous: Int32Array[][] = [];
  /** [layer][kvHead] the latest selection: ascending slots, the current one not included */
  private readonly latest: Int32Array[][] = [];
  /** [layers] the latest selection's mean list length over KV heads, and its rows also in the previous one (hits) or not */
  private readonly selected: Float64Array;
  private readonly hits: Float64Array;
  private readonly misses: Float64Array;
  /** [layer] bytes of one K (or V) row of one KV head of the rows the layer attends */
  private readonly rowBytes: number[];
  /** selectingLayers(), once computed */
  private selecting: number[] | undefined;

  constructor(options: SparsePolicyOptions, ctx: PolicyContext) {
    const { shape, pool } = ctx;
    this.shape = shape;
    this.pool = pool;
    this.attention = ctx.attention ?? [];
    this.settings = sparseSettings(options, shape.layers);
    this.denseLayers = this.settings.denseLayers;
    this.offsets = new Int32Array(shape.kvHeads + 1);
    this.selected = new Float64Array(shape.layers);
    this.hits = new Float64Array(shape.layers);
    this.misses = new Float64Array(shape.layers);
    this.rowBytes = Array.from({ length: shape.layers }, (_, l) => kvRowBytes(pool.kvType, layerRows(shape, l).headDim));
    for (let l = 0; l < shape.layers; l++) {
      this.previous.push(this.noLists(l));
      this.latest.push([]);
      this.outBuf.push([new Int32Array(0), new Int32Array(0)]);
      this.outFlip.push(0);
    }
  }

  sparseStep(): boolean {
    return true;
  }

  selects(layer: number): boolean {
    return layer >= this.denseLayers;
  }

  /** Tokens per KV head kept at a step with N candidates. */
  budgetFor(N: number): number {
    return Math.min(N, this.settings.budget ?? Math.max(1, fractionOf(this.settings.fetchCap, N)));
  }

  /** Per KV head the slots among 0..N−1 that layer ℓ attends this step (q: [heads·d], the real query). */
  select(layer: number, q: Float32Array, N: number): Int32Array[] {
    const t0 = performance.now();
    const lists = this.choose(layer, q, N);
    this.latest[layer] = lists;
    this.merge(layer, lists);
    this.selectMs += performance.now() - t0;
    return lists;
  }

  figures(layer: number, N: number, trace: StepTrace): void {
    trace.selected[layer] = this.selected[layer]!;
    trace.candidates[layer] = N;
    trace.hits[layer] = this.hits[layer]!;
    trace.misses[layer] = this.misses[layer]!;
    // a device's reuse cache would fetch the K and V rows of the misses only
    trace.bytes[layer] = this.misses[layer]! * 2 * this.rowBytes[layer]!;
  }

  /** Layers below denseLayers never select: what they attend is no policy's business. */
  observePrompt(layer: number, q: Float32Array, p0: number, T: number): void {
    if (layer >= this.denseLayers) this.observeChunk(layer, q, p0, T);
  }

  /** The latest selection of a layer (per KV head, ascending; the current token not included). */
  selection(layer: number): readonly Int32Array[] {
    return this.latest[layer] ?? [];
  }

  /** The cache keeps its first n tokens: the lists of earlier steps name slots that may be gone. */
  truncate(_n: number): void {
    for (let l = 0; l < this.shape.layers; l++) {
      this.previous[l] = this.noLists(l);
      this.latest[l] = [];
    }
  }

  /** The layers this policy selects for and observes prompts of (not dense, not a sliding window's), ascending. */
  protected selectingLayers(): readonly number[] {
    if (this.selecting === undefined) {
      const out: number[] = [];
      for (let l = this.denseLayers; l < this.shape.layers; l++) if (!this.shape.sliding?.[l]) out.push(l);
      this.selecting = out;
    }
    return this.selecting;
  }

  /** The policy's rule: per KV head ascending slots among 0..N−1 (views of output(), or its own arrays). */
  protected abstract choose(layer: number, q: Float32Array, N: number): Int32Array[];

  /** A prompt chunk of T tokens at p0 ran sparse layer ℓ densely (its rows appended); q: [T, heads·d]. */
  protected observeChunk(_layer: number, _q: Float32Array, _p0: number, _T: number): void {}

  /** This step's output buffer of a layer (the other one holds the previous step's lists), at least `need` long. */
  protected output(layer: number, need: number): Int32Array {
    const flip = (this.outFlip[layer] = 1 - this.outFlip[layer]!);
    const bufs = this.outBuf[layer]!;
    if (bufs[flip]!.length < need) bufs[flip] = new Int32Array(Math.max(need, Math.ceil(bufs[flip]!.length * 1.5)));
    return bufs[flip]!;
  }

  /** Layer ℓ's KV heads: how many lists a selection of it has. */
  protected kvHeadsOf(layer: number): number {
    return layerRows(this.shape, layer).kvHeads;
  }

  /** Per KV head of `layer` views of `out` by this.offsets. */
  protected views(out: Int32Array, layer: number): Int32Array[] {
    const off = this.offsets;
    return Array.from({ length: this.kvHeadsOf(layer) }, (_, g) => out.subarray(off[g]!, off[g + 1]!));
  }

  /** Counts the slots of `lists` also in the previous step's lists of the layer, then makes them the previous ones. */
  private merge(layer: number, lists: Int32Array[]): void {
    let hits = 0;
    let total = 0;
    const prev = this.previous[layer]!;
    for (let g = 0; g < lists.length; g++) {
      // both ascending (a ring's window list wraps: sorted copies): a merge counts the slots in both
      const a = lists[g]!;
      const b = ascending(prev[g]!);
      const a2 = ascending(a);
      for (let i = 0, k = 0; i < a2.length && k < b.length; ) {
        if (a2[i]! === b[k]!) {
          hits++;
          i++;
          k++;
        } else if (a2[i]! < b[k]!) i++;
        else k++;
      }
      total += a.length;
      prev[g] = a;
    }
    this.selected[layer] = lists.length > 0 ? total / lists.length : 0;
    this.hits[layer] = hits;
    this.misses[layer] = total - hits;
  }

  private noLists(layer: number): Int32Array[] {
    return Array.from({ length: this.kvHeadsOf(layer) }, () => new Int32Array(0));
  }
}

/**
 * The list itself when ascending (every policy's but a ring's window), else an ascending copy: a
 * ring's window list is one ascending run that wraps (rotated back in O(n)), anything else is sorted.
 */
function ascending(list: Int32Array): Int32Array {
  let wrap = -1;
  for (let i = 1; i < list.length; i++) {
    if (list[i]! >= list[i - 1]!) continue;
    if (wrap >= 0) return list.slice().sort();
    wrap = i;
  }
  if (wrap < 0) return list;
  if (list[list.length - 1]! > list[0]!) return list.slice().sort();
  const out = new Int32Array(list.length);
  out.set(list.subarray(wrap));
  out.set(list.subarray(0, wrap), list.length - wrap);
  return out;
}
