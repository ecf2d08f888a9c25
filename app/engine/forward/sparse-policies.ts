// The comparison policies in the decode path (ARCHITECTURE.md §6): streaming, h2o, quest, oracle,
// snapkv.
//
//   decode step, layer ℓ >= denseLayers:  append the current token ─► select(ℓ, q, N) with the REAL
//   query (these policies do not speculate) ─► per KV head a slot list over the N past tokens
//   ─► attendSlots over [list, current token] (native gather + the ordinary decode kernel)
//   ─► afterAttend: H2O adds the step's attention mass to each kept slot's account.
//
// The selection rules are the plain references of app/engine/kv/policies-reference.ts, called on
// the pool's data: streaming needs nothing; quest the element-wise page bounds of the stored keys
// (kept incrementally here, extended to the N candidates before each selection); oracle the full
// logits (native attentionScores); h2o the accumulated softmax mass per KV head (prefill's causal
// attention included), with evictions made permanent per KV head (an evicted slot never returns);
// snapkv the last `window` queries of the context (kept here from observePrefill, and from select
// for decoded tokens, so a second prefill shorter than the window still has a full window): at the
// first decode step after a prefill, per layer, their native logits over the whole context go
// through the reference rule once; then every step attends the kept prompt slots + every token
// after the prompt. A later prefill (a continued conversation) recomputes over the whole context;
// a truncate into the prompt invalidates the kept set.
//
// Budget parity with InfiniGen: unless a fixed `budget` is given, each step keeps ⌊fetchCap·N⌋
// tokens per KV head (at least 1), the same cap InfiniGen's n is clipped to. snapkv spends that
// budget once, on the prompt (N = prompt length, the observation window included); tokens
// generated after the prompt are always attended, as in the SnapKV paper.
import { UsageError } from '../../common/errors.ts';
import { attentionScores, type KvPool } from '../../../native/index.js';
import { h2o, oracle, pageCount, quest, snapkv, streaming } from '../kv/policies-reference.ts';
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
  /** [heads, contextLength] scratch for logits */
  private readonly scores: Float32Array;
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
    this.scores = new Float32Array(name === 'h2o' || name === 'oracle' || name === 'snapkv' ? shape.heads * C : 0);
    this.obsWindow = name === 'snapkv' ? (this.settings.window ?? SNAPKV_WINDOW) : 0;
    if (name === 'snapkv' && this.obsWindow < 1) throw new UsageError(`snapkv: window must be ≥ 1, got ${this.obsWindow}`, { field: 'window' });
    for (let l = 0; l < shape.layers; l++) {
      this.previous.push(Array.from({ length: shape.kvHeads }, () => new Int32Array(0)));
      this.latest.push([]);
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
    if (this.name !== 'h2o') return;
    const w = this.shape.heads * this.shape.headDim;
    for (let i = 0; i < T; i++) {
      const n = p0 + i + 1;
      attentionScores(this.pool, layer, q.subarray(i * w, (i + 1) * w), this.shape.heads, this.scores.subarray(0, this.shape.heads * n), n);
      this.accumulate(layer, n, undefined);
    }
  }

  /** Per KV head the slots among 0..N−1 that layer ℓ attends this step (q: [heads·d], the real query). */
  select(layer: number, q: Float32Array, N: number): { lists: Int32Array[]; figures: SelectionFigures } {
    const { heads, kvHeads, headDim: d, contextLength: C } = this.shape;
    const budget = this.budgetFor(N);
    const s = this.settings;
    let lists: Int32Array[];
    switch (this.name) {
      case 'streaming': {
        const window = s.window ?? Math.max(0, budget - Math.min(s.sinks, budget));
        const one = streaming(N, { sinks: s.sinks, window });
        lists = Array.from({ length: kvHeads }, () => one);
        break;
      }
      case 'quest': {
        this.extendBounds(layer, N);
        const pages = pageCount(N, s.pageSize);
        const topPages = s.topPages ?? (budget >= N ? pages : Math.max(1, Math.round(budget / s.pageSize)));
        lists = [];
        for (let g = 0; g < kvHeads; g++) {
          const at = g * this.maxPages * d;
          const [one] = quest(
            q.subarray(g * this.group * d, (g + 1) * this.group * d),
            this.pageMin[layer]!.subarray(at, at + pages * d),
            this.pageMax[layer]!.subarray(at, at + pages * d),
            { heads: this.group, kvHeads: 1, headDim: d, N },
            { pageSize: s.pageSize, topPages },
          );
          lists.push(one!);
        }
        break;
      }
      case 'oracle': {
        const sc = this.scores.subarray(0, heads * N);
        if (N > 0) attentionScores(this.pool, layer, q, heads, sc, N);
        lists = oracle(sc, { heads, kvHeads, N }, { budget });
        break;
      }
      case 'h2o': {
        const recent = Math.min(budget, s.window ?? Math.floor(budget / 2));
        lists = [];
        const acc = this.acc[layer]!;
        const live = this.live[layer]!;
        for (let g = 0; g < kvHeads; g++) {
          const mask = live.subarray(g * C, g * C + N);
          const [one] = h2o(acc.subarray(g * C, g * C + N), 1, N, { budget, recent }, mask);
          // H2O evicts for good: every older slot not kept now is gone
          const keep = new Uint8Array(N);
          for (const j of one!) keep[j] = 1;
          for (let j = 0; j < N - recent; j++) if (!keep[j]) mask[j] = 0;
          lists.push(one!);
        }
        break;
      }
      case 'snapkv': {
        const P = this.promptEnd[layer]!;
        if (this.keptFor[layer] !== P) this.compressPrompt(layer, P);
        this.keepQuery(layer, q, 0, N); // a later, shorter prefill's window may reach back to here
        lists = this.kept[layer]!.map((prompt) => {
          const one = new Int32Array(prompt.length + Math.max(0, N - P));
          one.set(prompt);
          for (let j = P, o = prompt.length; j < N; j++, o++) one[o] = j;
          return one;
        });
        break;
      }
    }
    this.latest[layer] = lists;
    return { lists, figures: this.figures(layer, lists, N) };
  }

  /** After layer ℓ attended [lists, current slot N]: H2O adds this step's mass to the kept slots. */
  afterAttend(layer: number, q: Float32Array, N: number): void {
    if (this.name !== 'h2o') return;
    attentionScores(this.pool, layer, q, this.shape.heads, this.scores.subarray(0, this.shape.heads * (N + 1)), N + 1);
    this.accumulate(layer, N + 1, this.latest[layer]);
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
        const sc = this.scores.subarray(0, heads * P); // [heads, P] one window query's logits
        const obs = new Float32Array(heads * w * P); // [heads, w, P] the reference's layout
        for (let i = 0; i < w; i++) {
          const at = (P - w + i) % this.obsWindow;
          attentionScores(this.pool, layer, this.obsQ[layer]!.subarray(at * width, (at + 1) * width), heads, sc, P);
          for (let h = 0; h < heads; h++) obs.set(sc.subarray(h * P, (h + 1) * P), (h * w + i) * P);
        }
        kept = snapkv(obs, { heads, kvHeads, N: P }, { budget, window: w, kernel: this.settings.poolKernel, pooling: 'max' });
      }
    }
    this.kept[layer] = kept;
    this.keptFor[layer] = P;
  }

  /** Adds softmax(scores[h, 0..n)) restricted to `lists` (+ slot n−1, the current token) to each KV head's account; all slots when lists is undefined. */
  private accumulate(layer: number, n: number, lists: Int32Array[] | undefined): void {
    const { heads, contextLength: C } = this.shape;
    const acc = this.acc[layer]!;
    const sc = this.scores;
    for (let h = 0; h < heads; h++) {
      const g = Math.floor(h / this.group);
      const row = h * n;
      const slots = lists ? [...lists[g]!, n - 1] : undefined;
      let max = -Infinity;
      if (slots) for (const j of slots) max = Math.max(max, sc[row + j]!);
      else for (let j = 0; j < n; j++) max = Math.max(max, sc[row + j]!);
      let sum = 0;
      if (slots) for (const j of slots) sum += Math.exp(sc[row + j]! - max);
      else for (let j = 0; j < n; j++) sum += Math.exp(sc[row + j]! - max);
      if (slots) for (const j of slots) acc[g * C + j] = acc[g * C + j]! + Math.exp(sc[row + j]! - max) / sum;
      else for (let j = 0; j < n; j++) acc[g * C + j] = acc[g * C + j]! + Math.exp(sc[row + j]! - max) / sum;
    }
  }

  /** Quest: extends the page bounds of `layer` to cover slots 0..N−1 (the stored, rounded keys). */
  private extendBounds(layer: number, N: number): void {
    const { kvHeads, headDim: d } = this.shape;
    const min = this.pageMin[layer]!;
    const max = this.pageMax[layer]!;
    for (let j = this.bounded[layer]!; j < N; j++) {
      const P = Math.floor(j / this.settings.pageSize);
      for (let g = 0; g < kvHeads; g++) {
        const k = this.pool.readK(layer, g, j);
        const at = (g * this.maxPages + P) * d;
        for (let i = 0; i < d; i++) {
          min[at + i] = Math.min(min[at + i]!, k[i]!);
          max[at + i] = Math.max(max[at + i]!, k[i]!);
        }
      }
    }
    this.bounded[layer] = Math.max(this.bounded[layer]!, N);
  }

  private figures(layer: number, lists: Int32Array[], N: number): SelectionFigures {
    let hits = 0;
    let total = 0;
    const prev = this.previous[layer]!;
    for (let g = 0; g < lists.length; g++) {
      const was = new Set(prev[g]);
      for (const j of lists[g]!) if (was.has(j)) hits++;
      total += lists[g]!.length;
      prev[g] = lists[g]!;
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
