// Picks the next token from a row of logits. Model-independent: it sees a Float32Array of
// vocabSize logits and the ids so far, nothing else.
//
// Order (llama.cpp's default sampler chain, common/common.h, minus the samplers we do not have):
//   penalties → top-k → top-p → min-p → temperature → draw.
// Top-p and min-p therefore see the temperature-1 distribution, as in llama.cpp; temperature only
// reshapes what they kept. temperature 0 is greedy: penalties, then argmax (ties → lowest id).
//
// Non-finite logits: NaN counts as -Infinity (never chosen), +Infinity as the largest float32
// (3.4e38, so several +Infinity share the mass equally). If no logit is finite after that, sample()
// throws SamplingError. Every non-greedy sample() consumes exactly one rng.nextFloat().
//
// Cost per call: a few O(V) passes. top-k: one pass with a k-heap (k ≤ 4096), else a 3-way
// quickselect. top-p: one pass computes the weights and bins their mass by logit, and an exact
// selection runs inside the boundary bin only. No full sort of the vocabulary. Scratch buffers of
// vocabSize are allocated once in createSampler.
import { LonghandError, UsageError } from '../../common/errors.ts';
import { Rng, randomSeed } from './rng.ts';

export interface SamplingParams {
  /** 0 = greedy (argmax after penalties). Default 0.8. */
  temperature: number;
  /** Keep the k most likely tokens; 0 = off. Default 40. */
  topK: number;
  /** Keep the smallest set whose probability mass is ≥ topP; 1 = off. In (0, 1]. Default 0.95. */
  topP: number;
  /** Drop tokens less likely than minP × the most likely one; 0 = off. In [0, 1]. Default 0.05. */
  minP: number;
  /** llama.cpp's repeat penalty over the window: logit > 0 ? logit / p : logit × p. 1 = off. */
  repetitionPenalty: number;
  /** OpenAI's presence penalty: logit -= presencePenalty if the token occurs in the window. 0 = off. */
  presencePenalty: number;
  /** OpenAI's frequency penalty: logit -= frequencyPenalty × count in the window. 0 = off. */
  frequencyPenalty: number;
  /** The penalty window: the last N ids of the history. 0 = no penalties, -1 = the whole history. Default 64. */
  penaltyLastN: number;
  /** RNG seed, an integer in [0, 2^53). Absent: a random seed (see Sampler.seed). */
  seed?: number | undefined;
}

/** llama.cpp's defaults (common_params_sampling). */
export const DEFAULT_SAMPLING_PARAMS: Readonly<SamplingParams> = Object.freeze({
  temperature: 0.8,
  topK: 40,
  topP: 0.95,
  minP: 0.05,
  repetitionPenalty: 1,
  presencePenalty: 0,
  frequencyPenalty: 0,
  penaltyLastN: 64,
});

/** Logits that cannot be sampled (wrong length, or nothing finite). Placeholder code: see the report. */
export class SamplingError extends LonghandError {
  constructor(message: string, details: Readonly<Record<string, string | number | boolean | null | undefined>> = {}) {
    super('GENERATION_INVALID_LOGITS', message, details);
    this.name = 'SamplingError';
  }
}

function bad(field: string, value: unknown, rule: string): UsageError {
  return new UsageError(`sampling.${field} must be ${rule}, got ${String(value)}`, { field, value: String(value) });
}

function isNumber(value: unknown): value is number {
  return typeof value === 'number' && !Number.isNaN(value);
}

/** Throws UsageError (code BAD_ARGUMENT, details.field = the bad field) for the first bad field. */
export function validateSamplingParams(params: SamplingParams): void {
  const p = params as unknown as Record<string, unknown>;
  const t = p.temperature;
  if (!isNumber(t) || !Number.isFinite(t) || t < 0) throw bad('temperature', t, 'a finite number ≥ 0');
  const k = p.topK;
  if (!isNumber(k) || !Number.isSafeInteger(k) || k < 0) throw bad('topK', k, 'an integer ≥ 0 (0 = off)');
  const topP = p.topP;
  if (!isNumber(topP) || !(topP > 0 && topP <= 1)) throw bad('topP', topP, 'in (0, 1] (1 = off)');
  const minP = p.minP;
  if (!isNumber(minP) || !(minP >= 0 && minP <= 1)) throw bad('minP', minP, 'in [0, 1] (0 = off)');
  const rep = p.repetitionPenalty;
  if (!isNumber(rep) || !Number.isFinite(rep) || rep <= 0) throw bad('repetitionPenalty', rep, 'a finite number > 0 (1 = off)');
  for (const field of ['presencePenalty', 'frequencyPenalty'] as const) {
    const v = p[field];
    if (!isNumber(v) || !Number.isFinite(v)) throw bad(field, v, 'a finite number (0 = off)');
  }
  const n = p.penaltyLastN;
  if (!isNumber(n) || !Number.isSafeInteger(n) || n < -1) throw bad('penaltyLastN', n, 'an integer ≥ -1 (0 = off, -1 = whole history)');
  const seed = p.seed;
  if (seed !== undefined && (!isNumber(seed) || !Number.isSafeInteger(seed) || seed < 0)) throw bad('seed', seed, 'an integer in [0, 2^53)');
}

/** Defaults filled in, then validated. */
export function resolveSamplingParams(partial: Partial<SamplingParams> = {}): SamplingParams {
  const params: SamplingParams = { ...DEFAULT_SAMPLING_PARAMS };
  for (const [key, value] of Object.entries(partial)) {
    if (value !== undefined) (params as unknown as Record<string, unknown>)[key] = value;
  }
  validateSamplingParams(params);
  return params;
}

export interface Sampler {
  readonly vocabSize: number;
  /** The seed in use (given or drawn), so a run can be repeated. */
  readonly seed: number;
  /**
   * The next token id. `logits` ([vocabSize]) is only read; `history` is every id so far (prompt and
   * generated), of which the last penaltyLastN feed the penalties.
   */
  sample(logits: Float32Array, history: readonly number[]): number;
  /**
   * What sample() would choose from, without drawing: the kept ids in id order with their final
   * probabilities (temperature applied). Greedy gives the one argmax with p = 1. Allocates; for
   * inspection (a UI's "alternatives") and tests.
   */
  candidates(logits: Float32Array, history: readonly number[]): Array<{ id: number; p: number }>;
}

const FLT_MAX = 3.4028234663852886e38;
/** Up to this k (and k ≤ n / 8) top-k uses a heap pass, above it a quickselect. */
const HEAP_MAX_K = 4096;
/** top-p's histogram: BUCKETS buckets over the BUCKET_RANGE nats below the maximum logit. */
const BUCKETS = 512;
const BUCKET_RANGE = 32;
const BUCKET_SCALE = BUCKETS / BUCKET_RANGE;

/**
 * Penalties in place over values[vocab] (llama.cpp's order: repeat penalty, then frequency and
 * presence). counts [vocab] must be all zero and is left all zero; touched holds ≥ window entries.
 */
function applyPenalties(values: Float64Array, history: readonly number[], params: SamplingParams, counts: Int32Array, touched: Int32Array): void {
  const { repetitionPenalty: rep, presencePenalty: presence, frequencyPenalty: frequency, penaltyLastN } = params;
  const V = values.length;
  const start = penaltyLastN < 0 ? 0 : Math.max(0, history.length - penaltyLastN);
  let nTouched = 0;
  for (let j = start; j < history.length; j++) {
    const id = history[j]!;
    if (!Number.isInteger(id) || id < 0 || id >= V) {
      for (let t = 0; t < nTouched; t++) counts[touched[t]!] = 0;
      throw new UsageError(`history[${j}] = ${String(id)} is not a token id of a ${V}-token vocabulary`, { field: 'history', index: j, vocabSize: V });
    }
    const seen = counts[id]!;
    counts[id] = seen + 1;
    if (seen === 0) touched[nTouched++] = id;
  }
  for (let t = 0; t < nTouched; t++) {
    const id = touched[t]!;
    const count = counts[id]!;
    counts[id] = 0;
    let x = values[id]!;
    if (x === -Infinity) continue;
    if (rep !== 1) x = x <= 0 ? x * rep : x / rep;
    x -= count * frequency + presence;
    values[id] = x !== x ? -Infinity : x === Infinity ? FLT_MAX : x;
  }
}

/**
 * The logits after the penalties of params (NaN → -Infinity, +Infinity → 3.4e38 as in sample()).
 * Allocates; for inspection and tests, not the token path.
 */
export function penalizedLogits(logits: Float32Array, history: readonly number[], params: SamplingParams): Float64Array {
  validateSamplingParams(params);
  const values = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) {
    const x = logits[i]!;
    values[i] = x !== x ? -Infinity : x === Infinity ? FLT_MAX : x;
  }
  if (params.penaltyLastN === 0) return values;
  const window = params.penaltyLastN < 0 ? history.length : Math.min(history.length, params.penaltyLastN);
  applyPenalties(values, history, params, new Int32Array(logits.length), new Int32Array(Math.max(window, 0)));
  return values;
}

class ChainSampler implements Sampler {
  readonly vocabSize: number;
  readonly seed: number;
  private readonly params: SamplingParams;
  private readonly rng: Rng;
  private readonly penalties: boolean;
  // scratch, all [vocabSize]: logits after sanitising/penalties (by id), weights (by id),
  // candidate ids (by position), occurrence counts in the penalty window (by id), touched ids
  private readonly val: Float64Array;
  private readonly weight: Float64Array;
  private readonly idx: Uint32Array;
  private readonly counts: Int32Array;
  private readonly touched: Int32Array;
  // top-k heap [min(topK, vocabSize)] (ids; the root is the worst kept), kept-id marks [vocabSize]
  private readonly heap: Uint32Array;
  private readonly mark: Uint8Array;
  // top-p: the boundary bucket's ids [vocabSize], mass per bucket [BUCKETS]
  private readonly spill: Uint32Array;
  private readonly bucketMass: Float64Array;
  // partition3's result
  private lt = 0;
  private gt = 0;
  private greaterSum = 0;
  // filter's results
  private greedyId = 0;
  private weightSum = 0;

  constructor(params: SamplingParams, vocabSize: number) {
    this.params = { ...params };
    this.vocabSize = vocabSize;
    this.seed = params.seed ?? randomSeed();
    this.rng = new Rng(this.seed);
    this.penalties =
      params.penaltyLastN !== 0 && (params.repetitionPenalty !== 1 || params.presencePenalty !== 0 || params.frequencyPenalty !== 0);
    this.val = new Float64Array(vocabSize);
    this.weight = new Float64Array(vocabSize);
    this.idx = new Uint32Array(vocabSize);
    this.counts = new Int32Array(this.penalties ? vocabSize : 0);
    this.touched = new Int32Array(this.penalties ? (params.penaltyLastN < 0 ? vocabSize : Math.min(vocabSize, params.penaltyLastN)) : 0);
    this.heap = new Uint32Array(Math.min(params.topK, vocabSize, HEAP_MAX_K));
    this.mark = new Uint8Array(vocabSize);
    const topP = params.topP < 1;
    this.spill = new Uint32Array(topP ? vocabSize : 0);
    this.bucketMass = new Float64Array(topP ? BUCKETS : 0);
  }

  sample(logits: Float32Array, history: readonly number[]): number {
    const n = this.filter(logits, history);
    if (n === 0) return this.greedyId;
    const idx = this.idx;
    const weight = this.weight;
    const r = this.rng.nextFloat() * this.weightSum;
    let cum = 0;
    let last = idx[0]!;
    for (let j = 0; j < n; j++) {
      const id = idx[j]!;
      const w = weight[id]!;
      if (w === 0) continue;
      cum += w;
      last = id;
      if (r < cum) return id;
    }
    return last; // r within rounding of the sum
  }

  candidates(logits: Float32Array, history: readonly number[]): Array<{ id: number; p: number }> {
    const n = this.filter(logits, history);
    if (n === 0) return [{ id: this.greedyId, p: 1 }];
    const out: Array<{ id: number; p: number }> = [];
    for (let j = 0; j < n; j++) {
      const id = this.idx[j]!;
      out.push({ id, p: this.weight[id]! / this.weightSum });
    }
    return out;
  }

  /**
   * Runs the chain up to the draw. Greedy: returns 0 and sets greedyId. Otherwise returns n ≥ 1
   * with the kept ids in idx[0, n) in id order, their unnormalised weights (temperature applied) in
   * weight[id] and the total in weightSum.
   */
  private filter(logits: Float32Array, history: readonly number[]): number {
    const V = this.vocabSize;
    if (logits.length !== V) {
      throw new SamplingError(`logits have ${logits.length} entries, the vocabulary ${V}`, { logits: logits.length, vocabSize: V });
    }
    const val = this.val;
    for (let i = 0; i < V; i++) {
      const x = logits[i]!;
      val[i] = x !== x ? -Infinity : x === Infinity ? FLT_MAX : x;
    }
    if (this.penalties) applyPenalties(val, history, this.params, this.counts, this.touched);

    const { temperature, topK, topP, minP } = this.params;
    if (temperature === 0) {
      this.greedyId = this.argmax();
      return 0;
    }

    // candidates: every id with a finite logit, in id order
    const idx = this.idx;
    let n = 0;
    let maxVal = -Infinity;
    for (let i = 0; i < V; i++) {
      const x = val[i]!;
      if (x === -Infinity) continue;
      idx[n++] = i;
      if (x > maxVal) maxVal = x;
    }
    if (n === 0) throw new SamplingError('no finite logit to sample from (all are -Infinity or NaN)', { vocabSize: V });
    let inIdOrder = true;

    if (topK > 0 && topK < n) {
      if (topK <= HEAP_MAX_K && topK * 8 <= n) this.heapTopK(n, topK);
      else this.selectTopK(n, topK);
      n = topK;
      inIdOrder = false;
    }

    const weight = this.weight;
    if (topP < 1 && n > 1) {
      n = this.topP(n, maxVal, topP);
      inIdOrder = false;
    }

    if (minP > 0 && n > 1) {
      const threshold = maxVal + Math.log(minP);
      let m = 0;
      for (let j = 0; j < n; j++) {
        const id = idx[j]!;
        if (val[id]! >= threshold) idx[m++] = id;
      }
      n = m; // ≥ 1: the maximum always passes
    }

    // The draw walks the kept ids in id order, so it depends on the kept set only.
    if (!inIdOrder) this.toIdOrder(n);
    let sum = 0;
    for (let j = 0; j < n; j++) {
      const id = idx[j]!;
      const w = Math.exp((val[id]! - maxVal) / temperature);
      weight[id] = w;
      sum += w;
    }
    this.weightSum = sum;
    return n;
  }

  /**
   * top-p over idx[0, n) at temperature 1. One pass computes the weights and a histogram of
   * their mass by distance below the maximum logit (BUCKETS buckets over BUCKET_RANGE nats, the
   * rest in the last); the buckets above the one where the cumulative mass reaches p are kept
   * whole, and an exact selection runs inside that boundary bucket only. Returns the kept count.
   */
  private topP(n: number, maxVal: number, p: number): number {
    const idx = this.idx;
    const val = this.val;
    const weight = this.weight;
    const mass = this.bucketMass;
    mass.fill(0);
    let sum = 0;
    for (let j = 0; j < n; j++) {
      const id = idx[j]!;
      const d = maxVal - val[id]!;
      const w = Math.exp(-d);
      weight[id] = w;
      sum += w;
      mass[d < BUCKET_RANGE ? (d * BUCKET_SCALE) | 0 : BUCKETS - 1]! += w;
    }
    const target = p * sum;
    let above = 0;
    let boundary = 0;
    while (boundary < BUCKETS - 1 && above + mass[boundary]! < target) above += mass[boundary++]!;
    // keep buckets < boundary at the front, gather the boundary bucket behind them
    const spill = this.spill;
    let m = 0;
    let e = 0;
    for (let j = 0; j < n; j++) {
      const id = idx[j]!;
      const d = maxVal - val[id]!;
      const b = d < BUCKET_RANGE ? (d * BUCKET_SCALE) | 0 : BUCKETS - 1;
      if (b < boundary) idx[m++] = id;
      else if (b === boundary) spill[e++] = id;
    }
    idx.set(spill.subarray(0, e), m);
    return this.selectMass(m, m + e, above, target);
  }

  /** Puts idx[0, n) in increasing id order: a sort when few, a pass over marks when many. */
  private toIdOrder(n: number): void {
    const idx = this.idx;
    if (n * 64 < this.vocabSize) {
      idx.subarray(0, n).sort();
      return;
    }
    const mark = this.mark;
    for (let j = 0; j < n; j++) mark[idx[j]!] = 1;
    let m = 0;
    for (let i = 0; i < this.vocabSize; i++) {
      if (mark[i] === 1) {
        mark[i] = 0;
        idx[m++] = i;
      }
    }
  }

  /**
   * top-k for small k: one pass over idx[0, n) (in id order) with a min-heap of the k best;
   * a later id with an equal value never displaces an earlier one, so ties keep the lowest ids.
   * Leaves the k ids in idx[0, k), in no particular order.
   */
  private heapTopK(n: number, k: number): void {
    const idx = this.idx;
    const val = this.val;
    const heap = this.heap;
    for (let j = 0; j < k; j++) heap[j] = idx[j]!;
    for (let i = (k >> 1) - 1; i >= 0; i--) this.siftDown(i, k);
    let rootVal = val[heap[0]!]!;
    for (let j = k; j < n; j++) {
      const id = idx[j]!;
      if (val[id]! > rootVal) {
        heap[0] = id;
        this.siftDown(0, k);
        rootVal = val[heap[0]!]!;
      }
    }
    for (let j = 0; j < k; j++) idx[j] = heap[j]!;
  }

  /** Heap order: the root is the worst (lowest value; among equal values the highest id). */
  private worse(a: number, b: number): boolean {
    const va = this.val[a]!;
    const vb = this.val[b]!;
    return va < vb || (va === vb && a > b);
  }

  private siftDown(start: number, k: number): void {
    const heap = this.heap;
    let i = start;
    const id = heap[i]!;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= k) break;
      if (child + 1 < k && this.worse(heap[child + 1]!, heap[child]!)) child++;
      if (!this.worse(heap[child]!, id)) break;
      heap[i] = heap[child]!;
      i = child;
    }
    heap[i] = id;
  }

  /** Greedy: the largest value, ties → lowest id. */
  private argmax(): number {
    const val = this.val;
    let best = -1;
    let bestVal = -Infinity;
    for (let i = 0; i < this.vocabSize; i++) {
      const x = val[i]!;
      if (x > bestVal) {
        bestVal = x;
        best = i;
      }
    }
    if (best < 0) throw new SamplingError('no finite logit to sample from (all are -Infinity or NaN)', { vocabSize: this.vocabSize });
    return best;
  }

  /**
   * 3-way partition of idx[lo, hi) by key, descending: [lo, lt) > pivot, [lt, gt) = pivot,
   * [gt, hi) < pivot. Results in this.lt / this.gt, and the sum of
   * the greater keys in this.greaterSum.
   */
  private partition3(key: Float64Array, lo: number, hi: number, pivot: number): void {
    const idx = this.idx;
    let lt = lo;
    let i = lo;
    let gt = hi;
    let greaterSum = 0;
    while (i < gt) {
      const id = idx[i]!;
      const v = key[id]!;
      if (v > pivot) {
        greaterSum += v;
        idx[i] = idx[lt]!;
        idx[lt] = id;
        lt++;
        i++;
      } else if (v < pivot) {
        gt--;
        idx[i] = idx[gt]!;
        idx[gt] = id;
      } else {
        i++;
      }
    }
    this.lt = lt;
    this.gt = gt;
    this.greaterSum = greaterSum;
  }

  private pivot(key: Float64Array, lo: number, hi: number): number {
    const idx = this.idx;
    const a = key[idx[lo]!]!;
    const b = key[idx[(lo + hi) >>> 1]!]!;
    const c = key[idx[hi - 1]!]!;
    return a < b ? (b < c ? b : a < c ? c : a) : a < c ? a : b < c ? c : b;
  }

  /** Moves the k largest values (ties → lowest ids) to idx[0, k). 0 < k < n. */
  private selectTopK(n: number, k: number): void {
    const key = this.val;
    let lo = 0;
    let hi = n;
    let need = k; // how many more of idx[lo, hi) belong to the top k; idx[0, lo) already do
    for (;;) {
      this.partition3(key, lo, hi, this.pivot(key, lo, hi));
      const { lt, gt } = this;
      const greater = lt - lo;
      if (need < greater) {
        hi = lt;
      } else if (need <= greater + (gt - lt)) {
        this.idx.subarray(lt, gt).sort(); // ties at the boundary: lowest ids first
        return;
      } else {
        need -= gt - lo;
        lo = gt;
      }
    }
  }

  /**
   * top-p's exact part: idx[0, start) are kept and weigh `kept` (< target); moves the smallest
   * most-likely prefix of idx[start, end) (by this.weight) that brings the total to `target` (p ×
   * total weight) behind them and returns the kept count. Ties at the boundary: lowest ids first.
   */
  private selectMass(start: number, end: number, kept: number, target: number): number {
    const key = this.weight;
    const idx = this.idx;
    let lo = start;
    let hi = end;
    let acc = kept; // weight of idx[0, lo), all kept; always < target here
    while (lo < hi) {
      this.partition3(key, lo, hi, this.pivot(key, lo, hi));
      const { lt, gt, greaterSum } = this;
      if (acc + greaterSum >= target) {
        hi = lt; // the answer lies among the greater ones (lt > lo since acc < target)
        continue;
      }
      let cum = acc + greaterSum;
      const pivotWeight = key[idx[lt]!]!;
      if (cum + pivotWeight * (gt - lt) >= target) {
        idx.subarray(lt, gt).sort();
        for (let j = lt; j < gt; j++) {
          cum += pivotWeight;
          if (cum >= target) return j + 1;
        }
        return gt;
      }
      acc = cum + pivotWeight * (gt - lt);
      lo = gt;
    }
    return hi; // rounding left the total just under the target: keep everything examined
  }
}

/** Validates params (UsageError) and allocates the scratch for a vocabulary of vocabSize. */
export function createSampler(params: SamplingParams, vocabSize: number): Sampler {
  validateSamplingParams(params);
  if (!Number.isSafeInteger(vocabSize) || vocabSize <= 0) {
    throw new UsageError(`vocabSize must be a positive integer, got ${String(vocabSize)}`, { field: 'vocabSize', value: String(vocabSize) });
  }
  return new ChainSampler(params, vocabSize);
}
