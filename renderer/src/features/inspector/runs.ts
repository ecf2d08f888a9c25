// One generation as the inspector records it (a "run"): the prompt's ids and texts, the generated
// tokens (with their top-k log-probabilities when the run asked for them) and every metrics sample.
// From a run come the views' figures, all pure so they are tested without a canvas: per-position
// fetch counts over the sampled steps (token map and tooltip), recall vs the oracle per layer over
// the generation, the memory stack over time, and the A/B figures of two runs over the same prompt.
// Runs are exported as JSON lines (a "run" line, then its samples) and loaded back from them.
import type { KvLayerInfo, StepMetrics } from '../../../../app/common/protocol.ts';
import { parseRouting, routingToJson, type RunRouting } from './routing.ts';

export type TopLogprobs = [number, number][];

export interface RunToken {
  id: number;
  text: string;
  top?: TopLogprobs;
}

export interface Run {
  requestId: string;
  /** The policy of its samples (known from the first one; '' before). */
  policy: string;
  contextLength: number;
  promptIds: number[];
  /** Each prompt token's text ('' where the engine sent none). */
  pieces: string[];
  tokens: RunToken[];
  samples: StepMetrics[];
  /** Loaded from a file rather than seen live. */
  loaded?: boolean;
  /**
   * Per layer, its kind as the loaded model's pool holds it (sliding-window layers keep a ring of
   * their window; global layers every token). Absent: every layer global (a model without window layers).
   */
  kvLayers?: Pick<KvLayerInfo, 'kind' | 'window'>[];
  /** Mixture-of-experts models: the experts each layer ran every computed position on (routing.ts). */
  routing?: RunRouting;
}

/** 'window 512' or 'global' for a layer of a model with window layers; '' otherwise. */
export function layerKind(run: Run, layer: number): string {
  const l = run.kvLayers?.[layer];
  if (!l) return '';
  return l.kind === 'window' ? `window ${l.window ?? '?'}` : l.kind === 'linear' ? 'linear (no KV)' : 'global';
}

/** 'layer 3' with its kind where the model has window layers: 'layer 3 · window 512'. */
export function layerLabel(run: Run, layer: number): string {
  const kind = layerKind(run, layer);
  return kind ? `layer ${layer} · ${kind}` : `layer ${layer}`;
}

/** '5 window (512) + 1 global layers', or '' for a model without window layers. */
export function layerPattern(run: Run): string {
  const kinds = run.kvLayers;
  if (!kinds) return '';
  const global = kinds.filter((l) => l.kind === 'global').length;
  // a hybrid model (Qwen3.5): linear-attention layers keep a state, no KV
  if (kinds.some((l) => l.kind === 'linear')) return `${kinds.filter((l) => l.kind === 'linear').length} linear + ${global} global layers`;
  if (!kinds.some((l) => l.kind === 'window')) return '';
  const windows = [...new Set(kinds.filter((l) => l.kind === 'window').map((l) => l.window))].join('/');
  return `${kinds.filter((l) => l.kind === 'window').length} window (${windows}) + ${global} global layers`;
}

/** A run's context as positions: prompt tokens, then generated ones (position = index). */
export interface ContextToken {
  position: number;
  id: number;
  text: string;
  generated: boolean;
}

export function contextTokens(run: Run): ContextToken[] {
  const out: ContextToken[] = run.promptIds.map((id, i) => ({ position: i, id, text: run.pieces[i] ?? '', generated: false }));
  run.tokens.forEach((t, i) => out.push({ position: run.promptIds.length + i, id: t.id, text: t.text, generated: true }));
  return out;
}

/** Layers whose samples name selected positions (the sparse layers). */
export function sparseLayers(run: Run): number[] {
  const set = new Set<number>();
  for (const s of run.samples) for (const l of s.layers) if (l.positions) set.add(l.layer);
  return [...set].sort((a, b) => a - b);
}

/** Per-position fetch figures over a run's sampled steps. */
export interface FetchStats {
  /** Positions covered (the largest context a sample saw). */
  positions: number;
  layers: number[];
  /** [layer index in `layers`] times each position was selected, over the samples that name positions. */
  counts: Int32Array[];
  /** [layer index] samples of that layer that named positions. */
  samples: number[];
  /** [layer index] samples in which each position already existed (the denominator of its frequency). */
  seen: Int32Array[];
  /** The latest prefetch counter seen per position (any layer; -1: none sent). */
  counter: Float32Array;
  /** [layer index] decode step that evicted each position (-1: never seen evicted). */
  evictedAt: Int32Array[];
  /** [layer index] true attention mass summed over the samples that sent it (positions outside a sample's top list count 0) */
  attention: Float32Array[];
  /** [layer index] samples that sent true attention */
  attentionSamples: number[];
}

export function fetchStats(run: Run): FetchStats {
  const layers = sparseLayers(run);
  const positions = Math.max(0, ...run.samples.map((s) => s.contextTokens), run.promptIds.length + run.tokens.length);
  const index = new Map(layers.map((l, i) => [l, i]));
  const counts = layers.map(() => new Int32Array(positions));
  const seen = layers.map(() => new Int32Array(positions));
  const evictedAt = layers.map(() => new Int32Array(positions).fill(-1));
  const samples = layers.map(() => 0);
  const counter = new Float32Array(positions).fill(-1);
  const attention = layers.map(() => new Float32Array(positions));
  const attentionSamples = layers.map(() => 0);
  for (const s of run.samples) {
    for (const l of s.layers) {
      const i = index.get(l.layer);
      if (i === undefined) continue;
      if (l.attention) {
        attentionSamples[i] = attentionSamples[i]! + 1;
        const a = attention[i]!;
        for (const [p, mass] of l.attention) if (p < positions) a[p] = a[p]! + mass;
      }
      for (const [p, step] of l.evicted ?? []) if (p < positions) evictedAt[i]![p] = step;
      if (!l.positions) continue;
      samples[i] = samples[i]! + 1;
      const c = counts[i]!;
      const sn = seen[i]!;
      // the positions before the current token existed at this step
      for (let p = 0; p < Math.min(positions, s.contextTokens - 1); p++) sn[p] = sn[p]! + 1;
      l.positions.forEach((p, k) => {
        if (p >= positions) return;
        c[p] = c[p]! + 1;
        const v = l.counters?.[k];
        if (v !== undefined) counter[p] = v;
      });
    }
  }
  return { positions, layers, counts, samples, seen, counter, evictedAt, attention, attentionSamples };
}

/** Mean over sparse layers of count / seen per position, in [0, 1] (NaN where never seen). */
export function fetchFrequency(stats: FetchStats, layer?: number): Float32Array {
  const out = new Float32Array(stats.positions);
  const which = layer === undefined ? stats.layers.map((_, i) => i) : [stats.layers.indexOf(layer)].filter((i) => i >= 0);
  for (let p = 0; p < stats.positions; p++) {
    let sum = 0;
    let n = 0;
    for (const i of which) {
      const seen = stats.seen[i]![p]!;
      if (seen > 0) {
        sum += stats.counts[i]![p]! / seen;
        n += 1;
      }
    }
    out[p] = n > 0 ? sum / n : Number.NaN;
  }
  return out;
}

/** What the tooltip says about one position. */
export interface TokenInfo {
  position: number;
  id: number;
  text: string;
  generated: boolean;
  /** Per sparse layer: times selected of the sampled steps it existed in. */
  layers: { layer: number; fetched: number; of: number; evictedAt: number | null; attention: number | null; kind?: string }[];
  counter: number | null;
}

export function tokenInfo(run: Run, stats: FetchStats, position: number): TokenInfo | null {
  const token = contextTokens(run)[position];
  if (!token) return null;
  return {
    ...token,
    layers: stats.layers.map((layer, i) => ({ ...(layerKind(run, layer) ? { kind: layerKind(run, layer) } : {}), layer, fetched: stats.counts[i]![position] ?? 0, of: stats.seen[i]![position] ?? 0, evictedAt: (stats.evictedAt[i]![position] ?? -1) >= 0 ? stats.evictedAt[i]![position]! : null, attention: stats.attentionSamples[i]! > 0 ? stats.attention[i]![position]! / stats.attentionSamples[i]! : null })),
    counter: (stats.counter[position] ?? -1) >= 0 ? stats.counter[position]! : null,
  };
}

// ── token map cells ─────────────────────────────────────────────────────────────────────────

/** The map never has more columns than this: positions are bucketed (mean per bucket). */
export const MAP_COLUMNS = 1024;

export function mapColumns(positions: number): number {
  return Math.max(1, Math.min(MAP_COLUMNS, positions));
}

/** Bucket b covers positions [⌊b·P/C⌋, ⌊(b+1)·P/C⌋). */
export function bucketRange(bucket: number, positions: number, columns: number): [number, number] {
  return [Math.floor((bucket * positions) / columns), Math.max(Math.floor((bucket * positions) / columns) + 1, Math.floor(((bucket + 1) * positions) / columns))];
}

/** Mean of each bucket's finite values (NaN when none). */
export function bucketMeans(values: Float32Array, columns: number): Float32Array {
  const out = new Float32Array(columns);
  for (let b = 0; b < columns; b++) {
    const [lo, hi] = bucketRange(b, values.length, columns);
    let sum = 0;
    let n = 0;
    for (let p = lo; p < hi; p++) {
      const v = values[p]!;
      if (v === v) {
        sum += v;
        n += 1;
      }
    }
    out[b] = n > 0 ? sum / n : Number.NaN;
  }
  return out;
}

/** Rows of the map: one per sparse layer (frequency over the run), or one per sample for one layer (selected 1 / not 0 / evicted −1). */
export type MapMode = { kind: 'layers' } | { kind: 'attention' } | { kind: 'steps'; layer: number };

export interface MapGrid {
  rows: number;
  columns: number;
  /** [rows·columns] values in [0, 1], NaN = no data, −1 = evicted */
  cells: Float32Array;
  rowLabels: string[];
}

/** `range` [lo, hi): only those positions (the close-ups of the first and last positions). */
export function mapGrid(run: Run, stats: FetchStats, mode: MapMode, range: [number, number] = [0, stats.positions]): MapGrid {
  const [lo, hi] = [Math.max(0, range[0]), Math.min(stats.positions, range[1])];
  const columns = mapColumns(Math.max(1, hi - lo));
  if (mode.kind === 'attention') {
    // mean true mass per position; shown as a share of the row's largest (square root: small masses stay visible)
    const rows = Math.max(1, stats.layers.length);
    const cells = new Float32Array(rows * columns).fill(Number.NaN);
    stats.layers.forEach((_, r) => {
      const n = stats.attentionSamples[r]!;
      if (n === 0) return;
      const row = stats.attention[r]!.subarray(lo, hi);
      const means = bucketMeans(Float32Array.from(row, (v) => v / n), columns);
      const top = stats.attention[r]!.reduce((m, v) => (v > m ? v : m), 0) / n;
      cells.set(means.map((v) => (top > 0 ? Math.sqrt(v / top) : 0)), r * columns);
    });
    return { rows, columns, cells, rowLabels: stats.layers.map((l) => layerLabel(run, l)) };
  }
  if (mode.kind === 'layers') {
    const rows = Math.max(1, stats.layers.length);
    const cells = new Float32Array(rows * columns).fill(Number.NaN);
    stats.layers.forEach((layer, r) => {
      const freq = fetchFrequency(stats, layer);
      const ev = stats.evictedAt[r]!;
      for (let p = 0; p < freq.length; p++) if (ev[p]! >= 0) freq[p] = -1;
      cells.set(bucketMeansSigned(freq.subarray(lo, hi), columns), r * columns);
    });
    return { rows, columns, cells, rowLabels: stats.layers.map((l) => layerLabel(run, l)) };
  }
  const samples = run.samples.filter((s) => s.layers.some((l) => l.layer === mode.layer && l.positions));
  const rows = Math.max(1, samples.length);
  const cells = new Float32Array(rows * columns).fill(Number.NaN);
  const row = new Float32Array(stats.positions);
  samples.forEach((s, r) => {
    const l = s.layers.find((x) => x.layer === mode.layer)!;
    row.fill(Number.NaN);
    row.fill(0, 0, Math.min(stats.positions, s.contextTokens - 1));
    for (const p of l.positions ?? []) if (p < row.length) row[p] = 1;
    for (const [p] of l.evicted ?? []) if (p < row.length) row[p] = -1;
    cells.set(bucketMeansSigned(row.subarray(lo, hi), columns), r * columns);
  });
  return { rows, columns, cells, rowLabels: samples.map((s) => `step ${s.step}`) };
}

/** bucketMeans, but a bucket holding an evicted position (−1) shows as evicted. */
function bucketMeansSigned(values: Float32Array, columns: number): Float32Array {
  const out = new Float32Array(columns);
  for (let b = 0; b < columns; b++) {
    const [lo, hi] = bucketRange(b, values.length, columns);
    let sum = 0;
    let n = 0;
    let evicted = false;
    for (let p = lo; p < hi; p++) {
      const v = values[p]!;
      if (v < 0) evicted = true;
      else if (v === v) {
        sum += v;
        n += 1;
      }
    }
    out[b] = evicted ? -1 : n > 0 ? sum / n : Number.NaN;
  }
  return out;
}

// ── recall vs oracle ────────────────────────────────────────────────────────────────────────

export interface RecallSeries {
  steps: number[];
  layers: { layer: number; recall: (number | null)[]; oracle: (number | null)[] }[];
}

export function recallSeries(run: Run): RecallSeries {
  const samples = run.samples.filter((s) => s.layers.some((l) => l.oracleRecall !== undefined || l.recall !== null));
  const layerIds = [...new Set(samples.flatMap((s) => s.layers.filter((l) => l.oracleRecall !== undefined || l.recall !== null).map((l) => l.layer)))].sort((a, b) => a - b);
  return {
    steps: samples.map((s) => s.step),
    layers: layerIds.map((layer) => ({
      layer,
      recall: samples.map((s) => s.layers.find((l) => l.layer === layer)?.recall ?? null),
      oracle: samples.map((s) => s.layers.find((l) => l.layer === layer)?.oracleRecall ?? null),
    })),
  };
}

export interface RecallRow {
  layer: number;
  samples: number;
  recall: number | null;
  oracle: number | null;
  /** oracle − recall, over the samples that have both */
  gap: number | null;
}

const mean = (xs: number[]): number | null => (xs.length > 0 ? xs.reduce((a, b) => a + b, 0) / xs.length : null);

export function recallTable(series: RecallSeries): RecallRow[] {
  return series.layers.map((l) => {
    const both = l.recall.map((r, i) => [r, l.oracle[i]] as const).filter((x): x is readonly [number, number] => x[0] !== null && x[1] !== null);
    return {
      layer: l.layer,
      samples: l.recall.filter((r) => r !== null).length,
      recall: mean(l.recall.filter((r): r is number => r !== null)),
      oracle: mean(l.oracle.filter((r): r is number => r !== null)),
      gap: mean(both.map(([r, o]) => o - r)),
    };
  });
}

// ── memory over time ────────────────────────────────────────────────────────────────────────

/** 'window': the sliding-window layers' rings and their checkpoints (0 for a model without window layers; 'kv' is then every row). */
export const MEMORY_PARTS = ['weights', 'kv', 'window', 'partial', 'staged', 'other'] as const;
export type MemoryPart = (typeof MEMORY_PARTS)[number];

export interface MemorySeries {
  steps: number[];
  parts: Record<MemoryPart, number[]>;
  /** weights + pool budget: the line the KV pool may fill up to */
  budgetLine: number[];
  /** steps where the eviction count rose, and by how much */
  evictions: { step: number; count: number }[];
}

export function memorySeries(run: Run): MemorySeries {
  const parts: Record<MemoryPart, number[]> = { weights: [], kv: [], window: [], partial: [], staged: [], other: [] };
  const evictions: { step: number; count: number }[] = [];
  let before = 0;
  for (const s of run.samples) {
    const m = s.memory;
    parts.weights.push(m.weightsBytes);
    const window = m.kvByKind ? m.kvByKind.window + m.kvByKind.checkpoints : 0;
    parts.kv.push(m.kvByKind ? m.kvByKind.global : m.kvUsedBytes);
    parts.window.push(window);
    parts.partial.push(m.partialKeyBytes);
    parts.staged.push(m.stagedBytes);
    parts.other.push(Math.max(0, m.rssBytes - m.weightsBytes - parts.kv.at(-1)! - window - m.partialKeyBytes - m.stagedBytes));
    if (s.evictions > before) evictions.push({ step: s.step, count: s.evictions - before });
    before = s.evictions;
  }
  return { steps: run.samples.map((s) => s.step), parts, budgetLine: run.samples.map((s) => s.memory.weightsBytes + s.memory.poolBudgetBytes), evictions };
}

/** Cumulative sums of the parts in MEMORY_PARTS order (the stacked area's upper edges). */
export function stackParts(series: MemorySeries): number[][] {
  const out: number[][] = [];
  let below = series.steps.map(() => 0);
  for (const part of MEMORY_PARTS) {
    below = below.map((b, i) => b + series.parts[part][i]!);
    out.push(below);
  }
  return out;
}

// ── A/B ─────────────────────────────────────────────────────────────────────────────────────

export interface FetchDiff {
  layer: number;
  /** A's sampled steps compared, each with B's nearest sampled step (at most PAIR_STEPS away) */
  steps: number;
  /** per matched step, the mean count of positions A fetched and B did not, the reverse, and both */
  meanOnlyA: number;
  meanOnlyB: number;
  meanBoth: number;
  /** per position: (steps only A fetched it − steps only B fetched it) ÷ matched steps, in [−1, 1] */
  balance: Float32Array;
  /** positions compared: the shorter of the two contexts */
  positions: number;
}

/** An A sample is compared with B's nearest sampled step when it is at most this many steps away. */
export const PAIR_STEPS = 4;

/** Each A sample with B's sample of the nearest step (ties: the earlier), when within PAIR_STEPS. */
export function pairSamples(a: Run, b: Run): [StepMetrics, StepMetrics][] {
  const out: [StepMetrics, StepMetrics][] = [];
  const bs = [...b.samples].sort((x, y) => x.step - y.step);
  for (const sa of a.samples) {
    let best: StepMetrics | undefined;
    for (const sb of bs) if (!best || Math.abs(sb.step - sa.step) < Math.abs(best.step - sa.step)) best = sb;
    if (best && Math.abs(best.step - sa.step) <= PAIR_STEPS) out.push([sa, best]);
  }
  return out;
}

/**
 * Per sparse layer, A's and B's selections compared step by step (each A sample with B's nearest
 * sampled step): which positions each fetched that the other did not.
 */
export function fetchDiff(a: Run, b: Run): FetchDiff[] {
  const pairs = pairSamples(a, b);
  const layers = sparseLayers(a).filter((l) => sparseLayers(b).includes(l));
  const positions = Math.min(a.promptIds.length + a.tokens.length, b.promptIds.length + b.tokens.length);
  return layers.map((layer) => {
    const balance = new Float32Array(positions);
    let onlyA = 0;
    let onlyB = 0;
    let both = 0;
    let matched = 0;
    const inB = new Uint8Array(positions);
    for (const [xa, xb] of pairs) {
      const pa = xa.layers.find((l) => l.layer === layer)?.positions;
      const pb = xb.layers.find((l) => l.layer === layer)?.positions;
      if (!pa || !pb) continue;
      matched += 1;
      inB.fill(0);
      for (const p of pb) if (p < positions) inB[p] = 1;
      for (const p of pa) {
        if (p >= positions) continue;
        if (inB[p]) {
          both += 1;
          inB[p] = 2;
        } else {
          onlyA += 1;
          balance[p] = balance[p]! + 1;
        }
      }
      for (let p = 0; p < positions; p++) {
        if (inB[p] === 1) {
          onlyB += 1;
          balance[p] = balance[p]! - 1;
        }
      }
    }
    if (matched > 0) for (let p = 0; p < positions; p++) balance[p] = balance[p]! / matched;
    const per = (n: number) => (matched > 0 ? n / matched : 0);
    return { layer, steps: matched, meanOnlyA: per(onlyA), meanOnlyB: per(onlyB), meanBoth: per(both), balance, positions };
  });
}

export interface StepCompare {
  step: number;
  /** both runs' most likely token at this step agree */
  top1: boolean;
  /**
   * KL(A ‖ B) over the ids in both runs' top-k plus one bucket for everything else. Lumping ids
   * together never raises a KL, so this is a lower bound of the true KL (null without logprobs).
   */
  kl: number | null;
  /** the step comes after the first divergence: the two contexts differ there */
  afterDivergence: boolean;
}

export function klLowerBound(a: TopLogprobs, b: TopLogprobs): number {
  const pb = new Map(b.map(([id, lp]) => [id, Math.exp(lp)]));
  let kl = 0;
  let restA = 1;
  let restB = 1;
  for (const [id, lp] of a) {
    const q = pb.get(id);
    if (q === undefined) continue;
    const p = Math.exp(lp);
    restA -= p;
    restB -= q;
    if (p > 0) kl += p * (Math.log(p) - Math.log(q));
  }
  restA = Math.max(0, restA);
  restB = Math.max(1e-12, restB);
  if (restA > 0) kl += restA * (Math.log(restA) - Math.log(restB));
  return Math.max(0, kl);
}

export function stepCompare(a: Run, b: Run, firstDivergence: number | null): StepCompare[] {
  const n = Math.min(a.tokens.length, b.tokens.length);
  const out: StepCompare[] = [];
  for (let i = 0; i < n; i++) {
    const ta = a.tokens[i]!;
    const tb = b.tokens[i]!;
    const topA = ta.top?.[0]?.[0] ?? ta.id;
    const topB = tb.top?.[0]?.[0] ?? tb.id;
    out.push({ step: i, top1: topA === topB, kl: ta.top && tb.top ? klLowerBound(ta.top, tb.top) : null, afterDivergence: firstDivergence !== null && i > firstDivergence });
  }
  return out;
}

// ── JSON lines: export and load ─────────────────────────────────────────────────────────────

export const RUN_RECORD = 'longhand.run/1';

/** A run line, then one line per sample ({receivedAt?, requestId, ...StepMetrics}) — the metrics export's lines. */
export function runsToJsonl(runs: readonly Run[]): string {
  const lines: string[] = [];
  for (const r of runs) {
    lines.push(JSON.stringify({ record: RUN_RECORD, requestId: r.requestId, policy: r.policy, contextLength: r.contextLength, promptIds: r.promptIds, pieces: r.pieces, tokens: r.tokens.map((t) => (t.top ? [t.id, t.text, t.top] : [t.id, t.text])), ...(r.kvLayers ? { kvLayers: r.kvLayers } : {}), ...(r.routing ? { routing: routingToJson(r.routing) } : {}) }));
    for (const s of r.samples) lines.push(JSON.stringify({ requestId: r.requestId, ...s }));
  }
  return lines.length > 0 ? lines.join('\n') + '\n' : '';
}

export class JsonlError extends Error {
  readonly code = 'INSPECTOR_BAD_FILE';
  constructor(
    readonly line: number,
    message: string,
  ) {
    super(`line ${line}: ${message}`);
    this.name = 'JsonlError';
  }
}

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;
const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A sample line as StepMetrics (the fields the views read are checked; the rest passed through). */
function parseSample(o: Record<string, unknown>, line: number): StepMetrics {
  const need = (ok: boolean, what: string) => {
    if (!ok) throw new JsonlError(line, what);
  };
  need(isInt(o.step), 'step is not a non-negative integer');
  need(isInt(o.contextTokens), 'contextTokens is not a non-negative integer');
  need(isInt(o.contextLength), 'contextLength is not a non-negative integer');
  need(typeof o.policy === 'string', 'policy is not a string');
  need(isInt(o.evictions), 'evictions is not a non-negative integer');
  need(isObj(o.memory) && ['weightsBytes', 'poolBytes', 'poolBudgetBytes', 'kvUsedBytes', 'partialKeyBytes', 'stagedBytes', 'rssBytes'].every((k) => isNum((o.memory as Record<string, unknown>)[k])), 'memory is missing a byte figure');
  need(isObj(o.timing), 'timing is not an object');
  need(Array.isArray(o.layers), 'layers is not an array');
  for (const [i, l] of (o.layers as unknown[]).entries()) {
    need(isObj(l) && isInt(l.layer) && isInt(l.selected) && isInt(l.candidates), `layers[${i}] has no layer/selected/candidates`);
    const layer = l as Record<string, unknown>;
    need(layer.recall === null || (isNum(layer.recall) && layer.recall >= 0 && layer.recall <= 1), `layers[${i}].recall is not in [0, 1] or null`);
    need(layer.oracleRecall === undefined || (isNum(layer.oracleRecall) && layer.oracleRecall >= 0 && layer.oracleRecall <= 1), `layers[${i}].oracleRecall is not in [0, 1]`);
    need(layer.positions === undefined || (Array.isArray(layer.positions) && layer.positions.every(isInt)), `layers[${i}].positions is not a list of positions`);
    need(layer.counters === undefined || (Array.isArray(layer.counters) && layer.counters.every(isNum)), `layers[${i}].counters is not a list of numbers`);
    need(layer.evicted === undefined || (Array.isArray(layer.evicted) && layer.evicted.every((e) => Array.isArray(e) && e.length === 2 && isInt(e[0]) && isInt(e[1]))), `layers[${i}].evicted is not a list of [position, step]`);
  }
  const { requestId: _r, receivedAt: _t, record: _k, ...metrics } = o;
  return metrics as unknown as StepMetrics;
}

/**
 * Runs from an export: run lines start a run, sample lines join the run of their requestId (a file
 * of samples alone, the older export, gives runs without text). Throws JsonlError naming the line.
 */
export function parseRunsJsonl(text: string): Run[] {
  const runs = new Map<string, Run>();
  const lines = text.split('\n');
  lines.forEach((raw, i) => {
    const line = i + 1;
    if (raw.trim() === '') return;
    let o: unknown;
    try {
      o = JSON.parse(raw);
    } catch {
      throw new JsonlError(line, 'not JSON');
    }
    if (!isObj(o)) throw new JsonlError(line, 'not an object');
    if (typeof o.requestId !== 'string' || o.requestId === '') throw new JsonlError(line, 'requestId is missing');
    if (o.record === RUN_RECORD) {
      if (!Array.isArray(o.promptIds) || !o.promptIds.every(isInt)) throw new JsonlError(line, 'promptIds is not a list of token ids');
      if (!Array.isArray(o.pieces) || !o.pieces.every((p) => typeof p === 'string')) throw new JsonlError(line, 'pieces is not a list of strings');
      if (!Array.isArray(o.tokens)) throw new JsonlError(line, 'tokens is not a list');
      const tokens = o.tokens.map((t, k): RunToken => {
        if (!Array.isArray(t) || !isInt(t[0]) || typeof t[1] !== 'string') throw new JsonlError(line, `tokens[${k}] is not [id, text]`);
        const top = t[2] as unknown;
        if (top !== undefined && !(Array.isArray(top) && top.every((x) => Array.isArray(x) && isInt(x[0]) && isNum(x[1])))) throw new JsonlError(line, `tokens[${k}] has a bad top list`);
        return top !== undefined ? { id: t[0], text: t[1], top: top as TopLogprobs } : { id: t[0], text: t[1] };
      });
      const kvLayers = o.kvLayers as unknown;
      if (kvLayers !== undefined && !(Array.isArray(kvLayers) && kvLayers.every((l) => typeof l === 'object' && l !== null && ((l as { kind?: unknown }).kind === 'global' || (l as { kind?: unknown }).kind === 'linear' || ((l as { kind?: unknown }).kind === 'window' && isInt((l as { window?: unknown }).window))))))
        throw new JsonlError(line, 'kvLayers is not a list of { kind: "global" } / { kind: "linear" } / { kind: "window", window }');
      let routing: RunRouting | undefined;
      try {
        routing = parseRouting(o.routing);
      } catch (error) {
        throw new JsonlError(line, (error as Error).message);
      }
      runs.set(o.requestId, { requestId: o.requestId, policy: typeof o.policy === 'string' ? o.policy : '', contextLength: isInt(o.contextLength) ? o.contextLength : 0, promptIds: o.promptIds as number[], pieces: o.pieces as string[], tokens, samples: [], loaded: true, ...(kvLayers !== undefined ? { kvLayers: kvLayers as Run['kvLayers'] } : {}), ...(routing ? { routing } : {}) });
      return;
    }
    const sample = parseSample(o, line);
    let run = runs.get(o.requestId);
    if (!run) {
      run = { requestId: o.requestId, policy: sample.policy, contextLength: sample.contextLength, promptIds: [], pieces: [], tokens: [], samples: [], loaded: true };
      runs.set(o.requestId, run);
    }
    if (!run.policy) run.policy = sample.policy;
    run.samples.push(sample);
  });
  return [...runs.values()];
}
