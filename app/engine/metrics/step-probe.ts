// What the inspector measures inside one decode step, on the steps the metrics sampler asks for
// (one per snapshot, so the cost is one extra score pass per sparse layer per ~100 ms, not per
// token). The forward pass calls measure() for every sparse layer of an armed step with the
// layer's real query and the slots it attended; the probe computes, from the true logits over the
// whole pool (native attentionScores):
//
//   recall        share of the true softmax mass that the selected slots + the current token cover
//                 (mean over query heads; InfiniGen's Speculator.recall, for every policy)
//   oracleRecall  the same for the oracle's set of the same size: per KV head, the current token plus
//                 the n past slots with the most true softmax mass summed over the head's query heads,
//                 n = that KV head's selection size. recall <= oracleRecall always (the oracle set
//                 maximises the mass at that size), and the oracle policy's recall equals it.
//
// It also keeps, for every decode step (armed or not, O(layers) per step), the position each
// layer's append evicted, so the inspector can say when a token left the pool.
import { attentionScores, type KvPool } from '../../../native/index.js';

export interface ProbeLayer {
  layer: number;
  recall: number;
  oracleRecall: number;
  /** Selected positions, union over KV heads, ascending (the current token not included). */
  positions: number[];
  /** Prefetch counters of those positions' slots (evicting pools only). */
  counters?: number[];
  /** The ATTENTION_TOP positions with the most true softmax mass (mean over query heads), as [position, mass], largest first. */
  attention: [number, number][];
}

/** Positions of true attention a measured layer reports. */
export const ATTENTION_TOP = 64;

/** Where the runner reports an armed step's sparse layers and every step's evictions. */
export interface StepProbe {
  /** true: the next decode step is measured. The runner reads it once per step. */
  readonly armed: boolean;
  /**
   * One sparse layer of an armed decode step, after the current token was appended and attended.
   * `lists[g]`: KV head g's selected slots (the current token not included).
   */
  measure(pool: KvPool, layer: number, q: Float32Array, heads: number, lists: readonly Int32Array[]): void;
  /** After a decode step's append to `layer`: the position it evicted (−1: none). */
  evicted(layer: number, position: number): void;
  /** The decode step ended (its layers were reported). */
  stepDone(): void;
}

/** The latest measured step, and the evictions seen since the last take(). */
export interface ProbeReading {
  layers: ProbeLayer[];
}

export class InspectProbe implements StepProbe {
  private wanted = false;
  /** ms spent in measure() since the probe was made (the sampler keeps it under its budget) */
  spentMs = 0;
  private measuring: ProbeLayer[] = [];
  private reading: ProbeReading | undefined;
  private scores = new Float32Array(0);
  private weights = new Float64Array(0);
  private total = new Float64Array(0);
  /** [layer] evicted positions since the last takeEvictions(), with the decode step (counted by stepDone) */
  private evictedSince: [number, number][][] = [];
  private steps = 0;

  get armed(): boolean {
    return this.wanted;
  }

  /** Measure the next decode step. */
  arm(): void {
    this.wanted = true;
  }

  /** Decode steps seen since the probe was attached. */
  get decodeSteps(): number {
    return this.steps;
  }

  measure(pool: KvPool, layer: number, q: Float32Array, heads: number, lists: readonly Int32Array[]): void {
    if (!this.wanted) return;
    const started = performance.now();
    try {
      this.measureLayer(pool, layer, q, heads, lists);
    } finally {
      this.spentMs += performance.now() - started;
    }
  }

  private measureLayer(pool: KvPool, layer: number, q: Float32Array, heads: number, lists: readonly Int32Array[]): void {
    const T = pool.length(layer);
    if (T <= 0 || pool.lastSlot(layer) < 0) return;
    // attentionScores scores ROWS (a plain layer's row r is slot r; a ring's row r is slot (start + r) %
    // capacity): a ring cut back after it wrapped holds its rows in slots that are not [0, T), so the
    // selected slots are read as rows here and the rows' positions read from their slots
    const ring = pool.isRing(layer);
    const capacity = ring ? pool.layerCapacityTokens(layer) : 0;
    const start = ring ? pool.ringStart(layer) : 0;
    const slotOf = (row: number): number => (ring ? (start + row) % capacity : row);
    if (ring) lists = lists.map((list) => Int32Array.from(list, (slot) => (slot - start + capacity) % capacity).sort());
    // the current token (just appended): a ring's newest row; an evicting layer's append took a victim's slot
    const current = ring ? T - 1 : pool.lastSlot(layer);
    if (this.scores.length < heads * T) {
      this.scores = new Float32Array(heads * T * 2);
      this.weights = new Float64Array(T * 4);
      this.total = new Float64Array(T * 2);
    }
    const scores = this.scores.subarray(0, heads * T);
    attentionScores(pool, layer, q, heads, scores, T);
    const total = this.total.subarray(0, T);
    total.fill(0);
    const m = measureRecall(scores, heads, T, current, lists, this.weights, total);
    const attention = topMass(total, heads, ATTENTION_TOP).map(([row, mass]): [number, number] => [pool.position(layer, slotOf(row)), mass]);
    const positions = new Set<number>();
    for (const list of lists) for (const row of list) if (row !== current) positions.add(pool.position(layer, slotOf(row)));
    const sorted = [...positions].sort((a, b) => a - b);
    const entry: ProbeLayer = { layer, recall: m.recall, oracleRecall: m.oracleRecall, positions: sorted, attention };
    if (pool.evicting) {
      // slot of each selected position (the union's order): first KV head that selected it
      const slotAt = new Map<number, number>();
      for (const list of lists) for (const row of list) if (row !== current) slotAt.set(pool.position(layer, slotOf(row)), slotOf(row));
      entry.counters = sorted.map((p) => pool.counter(layer, slotAt.get(p)!));
    }
    this.measuring.push(entry);
  }

  evicted(layer: number, position: number): void {
    if (position < 0) return;
    (this.evictedSince[layer] ??= []).push([position, this.steps]);
  }

  stepDone(): void {
    this.steps += 1;
    if (!this.wanted) return;
    this.wanted = false;
    this.reading = { layers: this.measuring };
    this.measuring = [];
  }

  /** The measured step's figures (once: a second call returns undefined until another step is measured). */
  take(): ProbeReading | undefined {
    const r = this.reading;
    this.reading = undefined;
    return r;
  }

  /** [layer] positions evicted since the last call, each with the decode step (0-based) that evicted it. */
  takeEvictions(): [number, number][][] {
    const out = this.evictedSince;
    this.evictedSince = [];
    return out;
  }
}

/**
 * recall and oracleRecall of one layer from its true logits `scores` [heads, T] (see the file
 * comment). Query head h belongs to KV head ⌊h / (heads / kvHeads)⌋ (kvHeads = lists.length); a KV
 * head's oracle set is the n past slots with the largest softmax mass summed over its query heads
 * (one selection serves the whole group, as every policy's does). `scratch` holds at least T doubles.
 */
export function measureRecall(scores: Float32Array, heads: number, T: number, current: number, lists: readonly Int32Array[], scratch = new Float64Array(T), total?: Float64Array): { recall: number; oracleRecall: number } {
  const kvHeads = Math.max(1, lists.length);
  const group = Math.max(1, Math.floor(heads / kvHeads));
  const exps = scratch.length >= 2 * T ? scratch.subarray(T, 2 * T) : new Float64Array(T);
  let recall = 0;
  let oracle = 0;
  for (let g = 0; g < kvHeads; g++) {
    const list = lists[g] ?? new Int32Array(0);
    const mass = scratch.subarray(0, T);
    mass.fill(0);
    for (let h = g * group; h < Math.min(heads, (g + 1) * group); h++) {
      const row = scores.subarray(h * T, (h + 1) * T);
      let max = -Infinity;
      for (let j = 0; j < T; j++) if (row[j]! > max) max = row[j]!;
      let z = 0;
      for (let j = 0; j < T; j++) {
        const e = Math.exp(row[j]! - max);
        exps[j] = e;
        z += e;
      }
      if (!(z > 0)) continue;
      const inv = 1 / z;
      for (let j = 0; j < T; j++) mass[j] = mass[j]! + exps[j]! * inv;
    }
    if (total) for (let j = 0; j < T; j++) total[j] = total[j]! + mass[j]!;
    const self = mass[current]!;
    let selected = self;
    let n = 0;
    let seen = -1;
    for (const slot of list) {
      // ascending lists: skip repeats and the current token
      if (slot === current || slot === seen || slot < 0 || slot >= T) continue;
      seen = slot;
      selected += mass[slot]!;
      n += 1;
    }
    // the oracle: the current token + the n past slots of largest group mass
    mass[current] = mass[T - 1]!;
    const top = sumLargest(mass.subarray(0, T - 1), n);
    recall += selected;
    oracle += self + top;
  }
  return { recall: Math.min(1, recall / heads), oracleRecall: Math.min(1, oracle / heads) };
}

/** The k slots of largest `total` (summed over `heads` query heads) as [slot, total / heads], largest first. */
export function topMass(total: Float64Array, heads: number, k: number): [number, number][] {
  const best: [number, number][] = [];
  for (let j = 0; j < total.length; j++) {
    const v = total[j]! / heads;
    if (best.length === k && v <= best[k - 1]![1]) continue;
    let at = best.length;
    while (at > 0 && best[at - 1]![1] < v) at--;
    best.splice(at, 0, [j, Math.min(1, v)]);
    if (best.length > k) best.pop();
  }
  return best;
}

/** Sum of the n largest values (reorders `values`; quickselect, O(length) on average). */
export function sumLargest(values: Float64Array, n: number): number {
  const len = values.length;
  if (n <= 0 || len === 0) return 0;
  if (n >= len) return values.reduce((a, v) => a + v, 0);
  // put the n largest in values[0..n) (Hoare-style selection on descending order)
  let lo = 0;
  let hi = len - 1;
  const want = n - 1;
  while (lo < hi) {
    const pivot = values[(lo + hi) >>> 1]!;
    let i = lo;
    let j = hi;
    while (i <= j) {
      while (values[i]! > pivot) i++;
      while (values[j]! < pivot) j--;
      if (i <= j) {
        const t = values[i]!;
        values[i] = values[j]!;
        values[j] = t;
        i++;
        j--;
      }
    }
    if (want <= j) hi = j;
    else if (want >= i) lo = i;
    else break;
  }
  let sum = 0;
  for (let i = 0; i < n; i++) sum += values[i]!;
  return sum;
}
