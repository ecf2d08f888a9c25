// The comparison policies in the decode path (ARCHITECTURE.md §6): streaming, h2o, quest, oracle,
// snapkv.
//
//   decode step, layer ℓ >= denseLayers:  append the current token ─► select(ℓ, q, N) with the REAL
//   query (these policies do not speculate) ─► per KV head a slot list over the N past tokens
//   ─► attendSlots over [list, current token] (the decode kernel reads the listed pool rows in place)
//   ─► afterAttend: H2O adds the step's attention mass to each kept slot's account.
//
// The selection of streaming, h2o, quest and snapkv runs natively over the pool (native/src/
// policy_select.h) by exactly the rules of the plain references of app/engine/kv/policies-reference.ts,
// which stay the oracle of the tests (sparse-policies.test.ts: the same slots on random and real
// inputs); oracle still calls its reference (measurement only). The state kept across steps lives in
// typed arrays here: streaming needs nothing; quest the element-wise page bounds of the stored keys
// (extended natively chunk by chunk in prefill and to the N candidates before each selection); h2o the accumulated softmax mass per
// KV head (prefill's causal attention included; natively from the logits of the listed slots only),
// with evictions made permanent per KV head (an evicted slot never returns); snapkv the last `window`
// queries of the context (kept here from observePrefill, and from select for decoded tokens, so a
// second prefill shorter than the window still has a full window): at the first decode step after a
// prefill, per layer, their logits over the whole context go through the rule once (natively); then
// every step attends the kept prompt slots + every token after the prompt. A later prefill (a
// continued conversation) recomputes over the whole context; a truncate into the prompt invalidates
// the kept set. Each layer's lists are views of two buffers that alternate step by step (this step's
// and the previous one's, for the reuse-cache figures), grown when a longer context needs it.
//
// Budget parity with InfiniGen: unless a fixed `budget` is given, each step keeps ⌊fetchCap·N⌋
// tokens per KV head (at least 1), the same cap InfiniGen's n is clipped to. snapkv spends that
// budget once, on the prompt (N = prompt length, the observation window included); tokens
// generated after the prompt are always attended, as in the SnapKV paper.
import { UsageError } from '../../common/errors.ts';
import { attentionScores, h2oAccumulate, questExtendBounds, selectH2o, selectQuest, selectStreaming, snapkvCompress, type KvPool } from '../../../native/index.js';
import { oracle, pageCount } from '../kv/policies-reference.ts';
import { fractionOf } from '../kv/topk.ts';

export const SPARSE_POLICIES = ['streaming', 'h2o', 'quest', 'oracle', 'snapkv'] as const;
export type SparsePolicyName = (typeof SPARSE_POLICIES)[number];

export interface SparsePolicyOptions {
  /** Fixed tokens per KV head (besides the current one). Default: ⌊fetchCap·N⌋ each step. */
  budget?: number;
  /** Fraction of the context kept when no fixed budget is given (default 0.2, InfiniGen's cap). */
  fetchCap?: number;
  /** Layers below this attend to everything (default 2, as InfiniGen). */
  denseLayers?: number;
  /** streaming: attention-sink tokens (default 4). */
  sinks?: number;
  /**
   * streaming: recent window (default budget − sinks); h2o: recent tokens (default ⌊budget/2⌋);
   * snapkv: observation window, the last prompt queries that vote, always kept (default 32, ≥ 1).
   */
  window?: number;
  /** snapkv: max-pool kernel over the votes (odd; 1 = none; default 7). */
  poolKernel?: number;
  /** quest: pages kept (default max(1, round(budget / pageSize)); every page when budget ≥ N). */
  topPages?: number;
  /** quest: tokens per page (default 16). */
  pageSize?: number;
}

export interface SparseSettings {
  budget: number | undefined;
  fetchCap: number;
  denseLayers: number;
  sinks: number;
  window: number | undefined;
  topPages: number | undefined;
  pageSize: number;
  poolKernel: number;
}

/** snapkv's defaults: observation window and max-pool kernel (SnapKV, Li et al. 2024). */
export const SNAPKV_WINDOW = 32;
export const SNAPKV_POOL_KERNEL = 7;

export interface PolicyShape {
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  contextLength: number;
  /** the runner's threads: quest's and h2o's native selection split their KV heads over them (default 1) */
  threads?: number;
}

function nonNegativeInt(v: number | undefined, name: string, min = 0): void {
  if (v !== undefined && (!Number.isInteger(v) || v < min)) throw new UsageError(`${name} must be an integer ≥ ${min}, got ${v}`, { field: name });
}

export function sparseSettings(o: SparsePolicyOptions, layers: number): SparseSettings {
  const fetchCap = o.fetchCap ?? 0.2;
  if (!(fetchCap > 0 && fetchCap <= 1)) throw new UsageError(`fetchCap must be in (0, 1], got ${fetchCap}`, { field: 'fetchCap' });
  nonNegativeInt(o.budget, 'budget', 1);
  nonNegativeInt(o.denseLayers, 'denseLayers');
  nonNegativeInt(o.sinks, 'sinks');
  nonNegativeInt(o.window, 'window');
  nonNegativeInt(o.topPages, 'topPages', 1);
  nonNegativeInt(o.pageSize, 'pageSize', 1);
  nonNegativeInt(o.poolKernel, 'poolKernel', 1);
  if (o.poolKernel !== undefined && o.poolKernel % 2 !== 1) throw new UsageError(`poolKernel must be odd, got ${o.poolKernel}`, { field: 'poolKernel' });
  return {
    budget: o.budget,
    fetchCap,
    denseLayers: Math.min(o.denseLayers ?? 2, layers),
    sinks: o.sinks ?? 4,
    window: o.window,
    topPages: o.topPages,
    pageSize: o.pageSize ?? 16,
    poolKernel: o.poolKernel ?? SNAPKV_POOL_KERNEL,
  };
}

/** Figures of one layer's selection (the runner turns them into InfinigenLayerStats). */
export interface SelectionFigures {
  /** mean tokens per KV head attended besides the current one */
  selected: number;
  candidates: number;
  /** rows also selected by the previous step of this layer and KV head (a device's reuse cache) */
  hits: number;
  misses: number;
}

/** Per-runner state of a comparison policy; all arrays are sized once for the context. */
export class SparsePolicyState {
  readonly settings: SparseSettings;
  /** Milliseconds spent in select() and afterAttend() since construction (the bench's per-step breakdown). */
  selectMs = 0;
  private readonly group: number;
  /** h2o: [layer] accumulated softmax mass [kvHeads, contextLength], summed over the group */
  private readonly acc: Float32Array[] = [];
  /** h2o: [layer] 1 = slot still held by the KV head [kvHeads, contextLength] */
  private readonly live: Uint8Array[] = [];
  /** quest: [layer] element-wise key bounds [kvHeads, pages, d] and how many slots they cover */
  private readonly pageMin: Float32Array[] = [];
  private readonly pageMax: Float32Array[] = [];
  private readonly bounded: number[] = [];
  /** [layer][kvHead] the previous step's selection (reuse-cache figures) */
  private readonly previous: Int32Array[][] = [];
  /** the latest selection of each layer: per KV head ascending slots (the current one not included) */
  private readonly latest: Int32Array[][] = [];
  /** snapkv: [layer] the last `window` queries by position modulo window [window, heads·d], and their positions (−1: none) */
  private readonly obsQ: Float32Array[] = [];
  private readonly obsPos: Int32Array[] = [];
  /** snapkv: [layer] where the latest prefill ended (the prompt is slots 0..promptEnd−1) */
  private readonly promptEnd: number[] = [];
  /** snapkv: [layer] per KV head the kept prompt slots, and the promptEnd they were chosen for (−1: stale) */
  private readonly kept: Int32Array[][] = [];
  private readonly keptFor: number[] = [];
  private readonly obsWindow: number;
  /** [heads, contextLength] scratch for logits (oracle) */
  private readonly scores: Float32Array;
  /** [layer] two output buffers that alternate (this step's lists, the previous step's), and offsets [kvHeads + 1] */
  private readonly outBuf: Int32Array[][] = [];
  private readonly outFlip: number[] = [];
  private readonly offsets: Int32Array;
  private readonly maxPages: number;

  constructor(
    readonly name: SparsePolicyName,
    options: SparsePolicyOptions,
    readonly shape: PolicyShape,
    readonly pool: KvPool,
  ) {
    if (!SPARSE_POLICIES.includes(name)) throw new UsageError(`unknown sparse policy ${String(name)}`, { field: 'policy' });
    this.settings = sparseSettings(options, shape.layers);
    this.group = shape.heads / shape.kvHeads;
    const C = shape.contextLength;
    this.maxPages = pageCount(C, this.settings.pageSize);
    this.scores = new Float32Array(name === 'oracle' ? shape.heads * C : 0);
    this.offsets = new Int32Array(shape.kvHeads + 1);
    this.obsWindow = name === 'snapkv' ? (this.settings.window ?? SNAPKV_WINDOW) : 0;
    if (name === 'snapkv' && this.obsWindow < 1) throw new UsageError(`snapkv: window must be ≥ 1, got ${this.obsWindow}`, { field: 'window' });
    for (let l = 0; l < shape.layers; l++) {
      this.previous.push(Array.from({ length: shape.kvHeads }, () => new Int32Array(0)));
      this.latest.push([]);
      this.outBuf.push([new Int32Array(0), new Int32Array(0)]);
      this.outFlip.push(0);
      if (name === 'h2o') {
        this.acc.push(new Float32Array(shape.kvHeads * C));
        this.live.push(new Uint8Array(shape.kvHeads * C).fill(1));
      }
      if (name === 'quest') {
        this.pageMin.push(new Float32Array(shape.kvHeads * this.maxPages * shape.headDim).fill(Infinity));
        this.pageMax.push(new Float32Array(shape.kvHeads * this.maxPages * shape.headDim).fill(-Infinity));
        this.bounded.push(0);
      }
      if (name === 'snapkv') {
        this.obsQ.push(new Float32Array(this.obsWindow * shape.heads * shape.headDim));
        this.obsPos.push(new Int32Array(this.obsWindow).fill(-1));
        this.promptEnd.push(0);
        this.kept.push([]);
        this.keptFor.push(-1);
      }
    }
  }

  /** Tokens per KV head kept at a step with N candidates. */
  budgetFor(N: number): number {
    return Math.min(N, this.settings.budget ?? Math.max(1, fractionOf(this.settings.fetchCap, N)));
  }

  /** The latest selection of a layer (per KV head, ascending; the current token not included). */
  selection(layer: number): Int32Array[] {
    return this.latest[layer] ?? [];
  }

  /**
   * Prefill chunk of T tokens at p0 (dense; appended already): H2O accounts each query's causal
   * attention mass, as H2O does over the prompt; SnapKV keeps the queries of the observation window
   * and marks the kept set stale (the prompt now ends at p0 + T). q: [T, heads·d].
   */
  observePrefill(layer: number, q: Float32Array, p0: number, T: number): void {
    if (this.name === 'snapkv') {
      for (let i = Math.max(0, T - this.obsWindow); i < T; i++) this.keepQuery(layer, q, i, p0 + i);
      this.promptEnd[layer] = p0 + T;
      this.keptFor[layer] = -1;
      return;
    }
    if (this.name === 'quest') {
      // the chunk's rows are in the pool (and in cache): bound them now, not all at the first decode step
      this.extendBounds(layer, p0 + T);
      return;
    }
    if (this.name !== 'h2o') return;
    const w = this.shape.heads * this.shape.headDim;
    for (let i = 0; i < T; i++) h2oAccumulate(this.pool, layer, q.subarray(i * w, (i + 1) * w), this.shape.heads, this.acc[layer]!, this.shape.contextLength, p0 + i + 1, undefined, undefined, this.shape.threads ?? 1);
  }

  /** quest: the page bounds of layer ℓ cover slots 0..N−1 (extended from where they stopped). */
  private extendBounds(layer: number, N: number): void {
    if (N <= this.bounded[layer]!) return;
    questExtendBounds(this.pool, layer, this.pageMin[layer]!, this.pageMax[layer]!, this.maxPages, this.settings.pageSize, this.bounded[layer]!, N);
    this.bounded[layer] = N;
  }

  /** Per KV head the slots among 0..N−1 that layer ℓ attends this step (q: [heads·d], the real query). */
  select(layer: number, q: Float32Array, N: number): { lists: Int32Array[]; figures: SelectionFigures } {
    const t0 = performance.now();
    const { heads, kvHeads, headDim: d, contextLength: C } = this.shape;
    const budget = this.budgetFor(N);
    const s = this.settings;
    const off = this.offsets;
    let lists: Int32Array[];
    switch (this.name) {
      case 'streaming': {
        const window = s.window ?? Math.max(0, budget - Math.min(s.sinks, budget));
        const out = this.output(layer, N);
        const one = out.subarray(0, selectStreaming(N, s.sinks, window, out));
        lists = Array.from({ length: kvHeads }, () => one);
        break;
      }
      case 'quest': {
        const maxPages = this.maxPages;
        this.extendBounds(layer, N);
        const pages = pageCount(N, s.pageSize);
        const topPages = s.topPages ?? (budget >= N ? pages : Math.max(1, Math.round(budget / s.pageSize)));
        const out = this.output(layer, kvHeads * Math.min(N, topPages * s.pageSize));
        selectQuest(q, heads, kvHeads, d, this.pageMin[layer]!, this.pageMax[layer]!, maxPages, N, s.pageSize, topPages, out, off, this.shape.threads ?? 1);
        lists = this.views(out);
        break;
      }
      case 'oracle': {
        const sc = this.scores.subarray(0, heads * N);
        if (N > 0) attentionScores(this.pool, layer, q, heads, sc, N);
        lists = oracle(sc, { heads, kvHeads, N }, { budget });
        break;
      }
      case 'h2o': {
        // H2O evicts for good: selectH2o clears `live` of every older slot it does not keep
        const recent = Math.min(budget, s.window ?? Math.floor(budget / 2));
        const out = this.output(layer, kvHeads * budget);
        selectH2o(this.acc[layer]!, this.live[layer]!, kvHeads, C, N, budget, recent, out, off, this.shape.threads ?? 1);
        lists = this.views(out);
        break;
      }
      case 'snapkv': {
        const P = this.promptEnd[layer]!;
        if (this.keptFor[layer] !== P) this.compressPrompt(layer, P);
        this.keepQuery(layer, q, 0, N); // a later, shorter prefill's window may reach back to here
        const kept = this.kept[layer]!;
        const after = Math.max(0, N - P);
        let total = 0;
        for (const prompt of kept) total += prompt.length + after;
        const out = this.output(layer, total);
        lists = [];
        let o = 0;
        for (const prompt of kept) {
          out.set(prompt, o);
          for (let j = P, i = o + prompt.length; j < N; j++, i++) out[i] = j;
          lists.push(out.subarray(o, o + prompt.length + after));
          o += prompt.length + after;
        }
        break;
      }
    }
    this.latest[layer] = lists;
    const figures = this.figures(layer, lists, N);
    this.selectMs += performance.now() - t0;
    return { lists, figures };
  }

  /** After layer ℓ attended [lists, current slot N]: H2O adds this step's mass to the kept slots. */
  afterAttend(layer: number, q: Float32Array, N: number): void {
    if (this.name !== 'h2o') return;
    const t0 = performance.now();
    const { slots, offsets } = packSlotLists(this.latest[layer]!, N);
    h2oAccumulate(this.pool, layer, q, this.shape.heads, this.acc[layer]!, this.shape.contextLength, N + 1, slots, offsets, this.shape.threads ?? 1);
    this.selectMs += performance.now() - t0;
  }

  /** The cache keeps its first n tokens: forget what the later slots contributed. */
  truncate(n: number): void {
    const { kvHeads, headDim: d, contextLength: C } = this.shape;
    for (let l = 0; l < this.shape.layers; l++) {
      this.previous[l] = Array.from({ length: kvHeads }, () => new Int32Array(0));
      this.latest[l] = [];
      if (this.name === 'h2o') {
        for (let g = 0; g < kvHeads; g++) {
          this.acc[l]!.fill(0, g * C + n, (g + 1) * C);
          this.live[l]!.fill(1, g * C + n, (g + 1) * C);
        }
        if (n === 0) this.acc[l]!.fill(0);
      }
      if (this.name === 'quest') {
        // bounds cannot be undone token by token: drop the pages from the one holding slot n on
        const firstPage = Math.floor(Math.min(n, this.bounded[l]!) / this.settings.pageSize);
        for (let g = 0; g < kvHeads; g++) {
          this.pageMin[l]!.fill(Infinity, (g * this.maxPages + firstPage) * d, (g + 1) * this.maxPages * d);
          this.pageMax[l]!.fill(-Infinity, (g * this.maxPages + firstPage) * d, (g + 1) * this.maxPages * d);
        }
        this.bounded[l] = firstPage * this.settings.pageSize;
      }
    }
    if (this.name === 'h2o' && n === 0) for (const m of this.live) m.fill(1);
    if (this.name === 'snapkv') {
      for (let l = 0; l < this.shape.layers; l++) {
        const pos = this.obsPos[l]!;
        for (let i = 0; i < pos.length; i++) if (pos[i]! >= n) pos[i] = -1;
        // the kept set depends on slots and queries < promptEnd only: a cut above it changes nothing
        if (n < this.promptEnd[l]!) {
          this.promptEnd[l] = n;
          this.keptFor[l] = -1;
        }
      }
    }
  }

  /**
   * The pool now holds N tokens appended without a forward pass (the benchmark's random rows): for
   * snapkv they are prompt with no stored queries, so the next step keeps the newest budget tokens
   * of 0..N−1 (the rule's case without a window) instead of attending every one of them; quest
   * bounds them now, as observePrefill would have chunk by chunk.
   */
  appendedForBenchmark(N: number): void {
    if (this.name === 'quest') {
      // as a prefill would have (observePrefill): the first timed step does not pay for 0..N−1
      for (let l = this.settings.denseLayers; l < this.shape.layers; l++) this.extendBounds(l, N);
      return;
    }
    if (this.name !== 'snapkv') return;
    for (let l = 0; l < this.shape.layers; l++) {
      this.promptEnd[l] = N;
      this.keptFor[l] = -1;
    }
  }

  /** snapkv: the kept prompt slots of a layer per KV head (ascending), once computed. */
  keptPrompt(layer: number): { promptEnd: number; window: number; kept: Int32Array[] } | undefined {
    if (this.name !== 'snapkv' || this.keptFor[layer] !== this.promptEnd[layer]) return undefined;
    return { promptEnd: this.promptEnd[layer]!, window: this.obsWindow, kept: this.kept[layer]! };
  }

  /** snapkv: the stored queries of positions from..to−1 as [to − from, heads·d]; undefined when one is not stored. */
  storedQueries(layer: number, from: number, to: number): Float32Array | undefined {
    if (this.name !== 'snapkv' || to - from > this.obsWindow || from > to) return undefined;
    const w = this.shape.heads * this.shape.headDim;
    const out = new Float32Array((to - from) * w);
    for (let p = from; p < to; p++) {
      const at = p % this.obsWindow;
      if (this.obsPos[layer]![at] !== p) return undefined;
      out.set(this.obsQ[layer]!.subarray(at * w, (at + 1) * w), (p - from) * w);
    }
    return out;
  }

  // ─── internals ──────────────────────────────────────────────────────────────────────────

  /** snapkv: stores row `row` of q ([rows, heads·d]) as the query of position `pos`. */
  private keepQuery(layer: number, q: Float32Array, row: number, pos: number): void {
    const w = this.shape.heads * this.shape.headDim;
    const at = pos % this.obsWindow;
    this.obsQ[layer]!.set(q.subarray(row * w, (row + 1) * w), at * w);
    this.obsPos[layer]![at] = pos;
  }

  /**
   * snapkv: the kept prompt slots of `layer` for a prompt of P tokens. The window is the run of
   * stored queries ending at P − 1 (at most `window`, and at most the budget, so the window alone
   * never exceeds it); their logits over slots 0..P−1 (native attentionScores; the reference applies
   * the causal mask) go through the reference rule. A prompt within the budget keeps everything;
   * without any stored query (a truncate into the prompt, then no prefill) the newest tokens are kept.
   */
  private compressPrompt(layer: number, P: number): void {
    const { heads, kvHeads, headDim: d } = this.shape;
    const budget = Math.min(P, this.settings.budget ?? Math.max(1, fractionOf(this.settings.fetchCap, P)));
    const all = Int32Array.from({ length: P }, (_, j) => j);
    let kept: Int32Array[];
    if (budget >= P) kept = Array.from({ length: kvHeads }, () => all.slice());
    else {
      const pos = this.obsPos[layer]!;
      let w = 0;
      while (w < Math.min(this.obsWindow, budget) && pos[(P - 1 - w) % this.obsWindow] === P - 1 - w) w++;
      if (w === 0) kept = Array.from({ length: kvHeads }, () => all.slice(P - budget));
      else {
        const width = heads * d;
        const obs = new Float32Array(w * width); // [w, heads·d] the window's queries, oldest first
        for (let i = 0; i < w; i++) {
          const at = (P - w + i) % this.obsWindow;
          obs.set(this.obsQ[layer]!.subarray(at * width, (at + 1) * width), i * width);
        }
        const slots = new Int32Array(kvHeads * budget);
        const off = new Int32Array(kvHeads + 1);
        snapkvCompress(this.pool, layer, obs, heads, P, w, budget, this.settings.poolKernel, slots, off);
        kept = Array.from({ length: kvHeads }, (_, g) => slots.slice(off[g]!, off[g + 1]!));
      }
    }
    this.kept[layer] = kept;
    this.keptFor[layer] = P;
  }

  /** This step's output buffer of a layer (the other one holds the previous step's lists), at least `need` long. */
  private output(layer: number, need: number): Int32Array {
    const flip = (this.outFlip[layer] = 1 - this.outFlip[layer]!);
    const bufs = this.outBuf[layer]!;
    if (bufs[flip]!.length < need) bufs[flip] = new Int32Array(Math.max(need, Math.ceil(bufs[flip]!.length * 1.5)));
    return bufs[flip]!;
  }

  /** Per KV head views of `out` by this.offsets. */
  private views(out: Int32Array): Int32Array[] {
    const off = this.offsets;
    return Array.from({ length: this.shape.kvHeads }, (_, g) => out.subarray(off[g]!, off[g + 1]!));
  }

  private figures(layer: number, lists: Int32Array[], N: number): SelectionFigures {
    let hits = 0;
    let total = 0;
    const prev = this.previous[layer]!;
    for (let g = 0; g < lists.length; g++) {
      // both ascending: a merge counts the slots in both
      const a = lists[g]!;
      const b = prev[g]!;
      for (let i = 0, k = 0; i < a.length && k < b.length; ) {
        if (a[i]! === b[k]!) {
          hits++;
          i++;
          k++;
        } else if (a[i]! < b[k]!) i++;
        else k++;
      }
      total += a.length;
      prev[g] = a;
    }
    return { selected: lists.length > 0 ? total / lists.length : 0, candidates: N, hits, misses: total - hits };
  }
}

/** Flat per-KV-head lists for attendSlots, each with the current slot N appended: slots, offsets [kvHeads + 1]. */
export function packSlotLists(lists: Int32Array[], N: number): { slots: Int32Array; offsets: Int32Array } {
  const offsets = new Int32Array(lists.length + 1);
  let total = 0;
  for (let g = 0; g < lists.length; g++) {
    total += lists[g]!.length + 1;
    offsets[g + 1] = total;
  }
  const slots = new Int32Array(total);
  for (let g = 0; g < lists.length; g++) {
    slots.set(lists[g]!, offsets[g]!);
    slots[offsets[g + 1]! - 1] = N;
  }
  return { slots, offsets };
}
