// Plain reference selections of the comparison policies (ARCHITECTURE.md §6), on the same slot
// model as InfiniGen: slots 0..N−1 in token order; an optional candidate mask [N] removes evicted
// or empty slots (they are never selected). Every function returns, per KV head, the selected
// slots in ascending order; the current token is never among them (the caller always attends it).
// Ties everywhere: the lower slot (or page) wins (topk.ts).
//
// GQA combination, one rule per kind of score:
//  - logit-scale scores (Quest's page bounds) combine like InfiniGen: max over the group of
//    (score − that head's own max), so no head decides for the others by its logit scale;
//  - probability masses (oracle, SnapKV votes, H2O's accumulated attention) are already normalised
//    per head, so they add up over the group: the top-k by the sum maximises the group's covered
//    attention mass.
import { UsageError } from '../../common/errors.ts';
import { fractionOf, topIndices } from './topk.ts';

export interface GroupShape {
  /** query heads */
  readonly heads: number;
  readonly kvHeads: number;
}

function checkGroup({ heads, kvHeads }: GroupShape): number {
  if (!Number.isInteger(heads) || !Number.isInteger(kvHeads) || kvHeads < 1 || heads < 1 || heads % kvHeads !== 0) {
    throw new UsageError(`heads (${heads}) must be a positive multiple of kvHeads (${kvHeads})`, { heads, kvHeads });
  }
  return heads / kvHeads;
}

function checkCount(name: string, v: number, min = 0): void {
  if (!Number.isInteger(v) || v < min) throw new UsageError(`${name} must be an integer ≥ ${min}, got ${v}`, { field: name, value: v });
}

function checkLength(name: string, a: ArrayLike<number>, want: number, shape: string): void {
  if (a.length !== want) throw new UsageError(`${name}: expected ${shape} = ${want} values, got ${a.length}`, { field: name });
}

function allCandidates(N: number, mask?: Uint8Array): Int32Array {
  return topIndices(new Float64Array(N), N, mask);
}

/** Slots a∪b, ascending (both ascending). */
function union(a: Int32Array, b: Int32Array): Int32Array {
  return Int32Array.from(new Set([...a, ...b])).sort();
}

// ---------------------------------------------------------------- streaming (StreamingLLM)

export interface StreamingKnobs {
  /** attention-sink tokens at the start (default 4) */
  readonly sinks: number;
  /** most recent tokens */
  readonly window: number;
}

/** Sinks [0, sinks) + recent window [N − window, N): the same slots for every KV head. */
export function streaming(N: number, knobs: Partial<StreamingKnobs> & Pick<StreamingKnobs, 'window'>, mask?: Uint8Array): Int32Array {
  const sinks = knobs.sinks ?? 4;
  checkCount('N', N);
  checkCount('sinks', sinks);
  checkCount('window', knobs.window);
  if (mask !== undefined) checkLength('mask', mask, N, '[N]');
  const keep = new Uint8Array(N); // [N]
  for (let j = 0; j < Math.min(sinks, N); j++) keep[j] = 1;
  for (let j = Math.max(0, N - knobs.window); j < N; j++) keep[j] = 1;
  if (mask !== undefined) for (let j = 0; j < N; j++) keep[j]! &= mask[j]!;
  return allCandidates(N, keep);
}

// ---------------------------------------------------------------- H2O (heavy hitters)

export interface H2oKnobs {
  /** tokens kept per KV head, recent window included */
  readonly budget: number;
  /** most recent tokens, always kept (≤ budget) */
  readonly recent: number;
}

/**
 * Recent window + heavy hitters: per KV head, the last `recent` slots and the (budget − recent)
 * older slots of largest accumulated attention mass. `accumulated`: [kvHeads, N] — the softmax mass
 * each slot received so far, summed over steps and over the group's query heads.
 */
export function h2o(accumulated: Float32Array, kvHeads: number, N: number, knobs: H2oKnobs, mask?: Uint8Array): Int32Array[] {
  checkCount('kvHeads', kvHeads, 1);
  checkCount('N', N);
  checkCount('budget', knobs.budget);
  checkCount('recent', knobs.recent);
  if (knobs.recent > knobs.budget) throw new UsageError(`h2o: recent (${knobs.recent}) exceeds budget (${knobs.budget})`, {});
  checkLength('accumulated', accumulated, kvHeads * N, `[${kvHeads}, ${N}]`);
  if (mask !== undefined) checkLength('mask', mask, N, '[N]');
  const recentStart = Math.max(0, N - knobs.recent);
  const recentMask = new Uint8Array(N); // [N]
  const olderMask = new Uint8Array(N); // [N]
  for (let j = 0; j < N; j++) {
    const ok = mask === undefined || mask[j] !== 0 ? 1 : 0;
    if (j >= recentStart) recentMask[j] = ok;
    else olderMask[j] = ok;
  }
  const recentSlots = allCandidates(N, recentMask);
  const out: Int32Array[] = [];
  for (let g = 0; g < kvHeads; g++) {
    const heavy = topIndices(accumulated.subarray(g * N, (g + 1) * N), knobs.budget - recentSlots.length, olderMask);
    out.push(union(heavy, recentSlots));
  }
  return out;
}

// ---------------------------------------------------------------- Quest (page bounds)

export interface QuestKnobs {
  /** tokens per page (default 16) */
  readonly pageSize: number;
  /** pages kept per KV head */
  readonly topPages: number;
}

/** Number of pages for N tokens. */
export const pageCount = (N: number, pageSize: number): number => Math.ceil(N / pageSize);

/**
 * Quest: per query head h and page P, the upper bound U_{h,P} = Σ_i max(q_i·min_{P,i}, q_i·max_{P,i})
 * of q·k over the page's keys; pages combined per KV head as max_h (U_{h,P} − max_P U_{h,P}); the
 * top pages are kept, with all their (candidate) tokens. `q`: [heads, d] (full query, post-RoPE);
 * `pageMin`, `pageMax`: [kvHeads, pages, d] element-wise key bounds of each page's candidates
 * (pages = ⌈N / pageSize⌉; the last may be partial). A page without candidates is never picked.
 */
export function quest(
  q: Float32Array,
  pageMin: Float32Array,
  pageMax: Float32Array,
  shape: GroupShape & { readonly headDim: number; readonly N: number },
  knobs: Partial<QuestKnobs> & Pick<QuestKnobs, 'topPages'>,
  mask?: Uint8Array,
): Int32Array[] {
  const group = checkGroup(shape);
  const { heads, kvHeads, headDim: d, N } = shape;
  const pageSize = knobs.pageSize ?? 16;
  checkCount('pageSize', pageSize, 1);
  checkCount('topPages', knobs.topPages);
  checkCount('N', N);
  const pages = pageCount(N, pageSize);
  checkLength('q', q, heads * d, `[${heads}, ${d}]`);
  checkLength('pageMin', pageMin, kvHeads * pages * d, `[${kvHeads}, ${pages}, ${d}]`);
  checkLength('pageMax', pageMax, kvHeads * pages * d, `[${kvHeads}, ${pages}, ${d}]`);
  if (mask !== undefined) checkLength('mask', mask, N, '[N]');

  const live = new Uint8Array(pages); // [pages] 1 when the page holds a candidate
  for (let j = 0; j < N; j++) if (mask === undefined || mask[j] !== 0) live[Math.floor(j / pageSize)] = 1;
  const bound = new Float64Array(pages); // [pages] U of one head
  const combined = new Float64Array(pages); // [pages] combined over the group
  const out: Int32Array[] = [];
  for (let g = 0; g < kvHeads; g++) {
    combined.fill(-Infinity);
    for (let h = g * group; h < (g + 1) * group; h++) {
      let max = -Infinity;
      for (let P = 0; P < pages; P++) {
        let u = 0;
        const at = (g * pages + P) * d;
        for (let i = 0; i < d; i++) {
          const qi = q[h * d + i]!;
          u += Math.max(qi * pageMin[at + i]!, qi * pageMax[at + i]!);
        }
        bound[P] = u;
        if (live[P]) max = Math.max(max, u);
      }
      for (let P = 0; P < pages; P++) if (live[P]) combined[P] = Math.max(combined[P]!, bound[P]! - max);
    }
    const chosen = topIndices(combined, knobs.topPages, live);
    const keep = new Uint8Array(N); // [N]
    for (const P of chosen) for (let j = P * pageSize; j < Math.min(N, (P + 1) * pageSize); j++) keep[j] = mask === undefined ? 1 : mask[j]!;
    out.push(allCandidates(N, keep));
  }
  return out;
}

/** Element-wise min/max of each page's keys: `keys` [kvHeads, N, d] → [kvHeads, pages, d] each. */
export function questPageBounds(keys: Float32Array, kvHeads: number, N: number, d: number, pageSize = 16, mask?: Uint8Array): { pageMin: Float32Array; pageMax: Float32Array } {
  checkLength('keys', keys, kvHeads * N * d, `[${kvHeads}, ${N}, ${d}]`);
  const pages = pageCount(N, pageSize);
  const pageMin = new Float32Array(kvHeads * pages * d).fill(Infinity);
  const pageMax = new Float32Array(kvHeads * pages * d).fill(-Infinity);
  for (let g = 0; g < kvHeads; g++) {
    for (let j = 0; j < N; j++) {
      if (mask !== undefined && mask[j] === 0) continue;
      const at = (g * pages + Math.floor(j / pageSize)) * d;
      for (let i = 0; i < d; i++) {
        const k = keys[(g * N + j) * d + i]!;
        pageMin[at + i] = Math.min(pageMin[at + i]!, k);
        pageMax[at + i] = Math.max(pageMax[at + i]!, k);
      }
    }
  }
  // pages without candidates: zero bounds (never picked anyway)
  for (let i = 0; i < pageMin.length; i++) {
    if (pageMin[i] === Infinity) {
      pageMin[i] = 0;
      pageMax[i] = 0;
    }
  }
  return { pageMin, pageMax };
}

// ---------------------------------------------------------------- oracle (measurement only)

export interface OracleKnobs {
  /** tokens kept per KV head */
  readonly budget: number;
}

/** Softmax over the candidates of each head: [heads, N] logits → probabilities (0 off-mask). */
export function softmaxRows(logits: Float32Array | Float64Array, rows: number, N: number, mask?: Uint8Array): Float64Array {
  const p = new Float64Array(rows * N); // [rows, N]
  for (let r = 0; r < rows; r++) {
    let max = -Infinity;
    for (let j = 0; j < N; j++) if (mask === undefined || mask[j] !== 0) max = Math.max(max, logits[r * N + j]!);
    if (max === -Infinity) continue;
    let sum = 0;
    for (let j = 0; j < N; j++) {
      if (mask !== undefined && mask[j] === 0) continue;
      const e = Math.exp(logits[r * N + j]! - max);
      p[r * N + j] = e;
      sum += e;
    }
    for (let j = 0; j < N; j++) p[r * N + j] = p[r * N + j]! / sum;
  }
  return p;
}

/**
 * The true top tokens by attention mass: per KV head, the `budget` candidates with the largest
 * Σ_{h ∈ group} softmax_h(trueScores)_j. `trueScores`: [heads, N] full, scaled attention logits of
 * the current query against every slot. This maximises the group's covered softmax mass (recall).
 */
export function oracle(trueScores: Float32Array, shape: GroupShape & { readonly N: number }, knobs: OracleKnobs, mask?: Uint8Array): Int32Array[] {
  const group = checkGroup(shape);
  const { heads, kvHeads, N } = shape;
  checkCount('budget', knobs.budget);
  checkLength('trueScores', trueScores, heads * N, `[${heads}, ${N}]`);
  if (mask !== undefined) checkLength('mask', mask, N, '[N]');
  const p = softmaxRows(trueScores, heads, N, mask);
  const mass = new Float64Array(N); // [N]
  const out: Int32Array[] = [];
  for (let g = 0; g < kvHeads; g++) {
    mass.fill(0);
    for (let h = g * group; h < (g + 1) * group; h++) for (let j = 0; j < N; j++) mass[j] = mass[j]! + p[h * N + j]!;
    out.push(topIndices(mass, knobs.budget, mask));
  }
  return out;
}

// ---------------------------------------------------------------- SnapKV (prefill compression)

export interface SnapKvKnobs {
  /** tokens kept per KV head, the observation window included */
  readonly budget: number;
  /** observation window: the last `window` prompt tokens (always kept) */
  readonly window: number;
  /** pooling size over the votes (odd; 1 = no pooling; default 7) */
  readonly kernel: number;
  /**
   * 'max' (default: a 1-D max-pool, so a token next to a strongly attended one is kept with it and
   * a spike's neighbours are not diluted) or 'avg' (zero padding counted, like avg_pool1d; the
   * SnapKV authors' code offers both).
   */
  readonly pooling: 'avg' | 'max';
}

/**
 * SnapKV at the end of prefill: the last `window` prompt queries vote for the earlier tokens.
 * `obsScores`: [heads, window, N] scaled attention logits of the window's queries over the whole
 * prompt; row i is the query at position N − window + i and sees slots ≤ N − window + i (later
 * columns are ignored: causal). Per head: softmax each row, sum the rows' mass on the prefix
 * [0, N − window), pool along the prefix (kernel, stride 1, padding ⌊kernel/2⌋); per KV head the
 * votes add over the group. Keeps the top (budget − window) prefix tokens + the window (ties: the
 * lower slot). N ≤ budget keeps everything. Defaults: max-pooling, kernel 7.
 */
export function snapkv(obsScores: Float32Array, shape: GroupShape & { readonly N: number }, knobs: Partial<SnapKvKnobs> & Pick<SnapKvKnobs, 'budget' | 'window'>): Int32Array[] {
  const group = checkGroup(shape);
  const { heads, kvHeads, N } = shape;
  const { budget, window } = knobs;
  const kernel = knobs.kernel ?? 7;
  const pooling = knobs.pooling ?? 'max';
  checkCount('N', N);
  checkCount('budget', budget);
  checkCount('window', window, 1);
  checkCount('kernel', kernel, 1);
  if (kernel % 2 !== 1) throw new UsageError(`snapkv: kernel must be odd, got ${kernel}`, { kernel });
  if (window > N) throw new UsageError(`snapkv: window (${window}) exceeds the prompt (${N})`, {});
  if (budget < window) throw new UsageError(`snapkv: budget (${budget}) is smaller than the window (${window})`, {});
  checkLength('obsScores', obsScores, heads * window * N, `[${heads}, ${window}, ${N}]`);
  const all = allCandidates(N);
  if (N <= budget) return Array.from({ length: kvHeads }, () => all.slice());

  const prefix = N - window;
  const windowSlots = Int32Array.from({ length: window }, (_, i) => prefix + i);
  const rowMask = new Uint8Array(N);
  const vote = new Float64Array(prefix); // [prefix] one head's summed mass
  const pooled = new Float64Array(prefix); // [prefix]
  const groupVote = new Float64Array(prefix); // [prefix] summed over the group
  const half = (kernel - 1) / 2;
  const out: Int32Array[] = [];
  for (let g = 0; g < kvHeads; g++) {
    groupVote.fill(0);
    for (let h = g * group; h < (g + 1) * group; h++) {
      vote.fill(0);
      for (let i = 0; i < window; i++) {
        rowMask.fill(0);
        rowMask.fill(1, 0, prefix + i + 1);
        const row = obsScores.subarray((h * window + i) * N, (h * window + i + 1) * N);
        const p = softmaxRows(row, 1, N, rowMask);
        for (let j = 0; j < prefix; j++) vote[j] = vote[j]! + p[j]!;
      }
      for (let j = 0; j < prefix; j++) {
        let acc = pooling === 'avg' ? 0 : -Infinity;
        for (let t = j - half; t <= j + half; t++) {
          const v = t >= 0 && t < prefix ? vote[t]! : pooling === 'avg' ? 0 : -Infinity;
          acc = pooling === 'avg' ? acc + v : Math.max(acc, v);
        }
        pooled[j] = pooling === 'avg' ? acc / kernel : acc;
      }
      for (let j = 0; j < prefix; j++) groupVote[j] = groupVote[j]! + pooled[j]!;
    }
    out.push(union(topIndices(groupVote, budget - window), windowSlots));
  }
  return out;
}

/** ⌊fraction·N⌋ budgets for callers that think in ratios. */
export const budgetFromRatio = (ratio: number, N: number): number => Math.max(1, fractionOf(ratio, N));
