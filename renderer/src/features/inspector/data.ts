// The inspector's data work, kept pure so it can be tested without a canvas: position
// bucketing for the heatmap, colours, sparkline geometry, the memory stack, the per-layer table,
// exports (CSV, JSON lines) and the comparison of two token streams.
import type { LayerMetrics, StepMetrics } from '../../../../app/common/protocol.ts';

/** One metrics sample as the inspector keeps it. */
export interface Snapshot {
  /** Increases by one per sample received (the heatmap draws only what is new). */
  seq: number;
  requestId: string;
  /** Wall-clock time it arrived (ms since the epoch). */
  receivedAt: number;
  metrics: StepMetrics;
}

/** The heatmap never has more rows than this, whatever the context length. */
export const MAX_ROWS = 512;

export function heatRows(contextLength: number): number {
  return Math.max(1, Math.min(MAX_ROWS, Math.floor(contextLength)));
}

/**
 * Share of each position bucket that was selected: `rows` buckets over [0, contextLength),
 * bucket b covering positions [b·L/rows, (b+1)·L/rows). Values are in [0, 1].
 */
export function bucketPositions(positions: readonly number[], contextLength: number, rows: number): Float32Array {
  const out = new Float32Array(rows);
  if (contextLength <= 0 || rows <= 0) return out;
  const scale = rows / contextLength;
  for (const p of positions) {
    if (p < 0 || p >= contextLength) continue;
    const b = Math.min(rows - 1, Math.floor(p * scale));
    out[b] = (out[b] ?? 0) + 1;
  }
  // Bucket b holds ceil((b+1)L/rows) − ceil(bL/rows) integer positions.
  for (let b = 0; b < rows; b++) {
    const size = Math.ceil(((b + 1) * contextLength) / rows) - Math.ceil((b * contextLength) / rows);
    out[b] = size > 0 ? Math.min(1, (out[b] ?? 0) / size) : 0;
  }
  return out;
}

export const layerRatio = (l: Pick<LayerMetrics, 'selected' | 'candidates'>): number => (l.candidates > 0 ? Math.min(1, l.selected / l.candidates) : 0);

/** What the heatmap shows: every layer's fetch ratio as one row each, or one layer's positions. */
export type HeatMode = { kind: 'layers'; layers: number } | { kind: 'positions'; layer: number; contextLength: number };

export function heatModeRows(mode: HeatMode): number {
  return mode.kind === 'layers' ? Math.max(1, mode.layers) : heatRows(mode.contextLength);
}

/**
 * One heatmap column for one sample. Positions mode without `positions` in the sample: the
 * layer's selected/candidates fills the rows up to the tokens in the cache.
 */
export function heatColumn(metrics: StepMetrics, mode: HeatMode): Float32Array {
  const rows = heatModeRows(mode);
  if (mode.kind === 'layers') {
    const out = new Float32Array(rows);
    for (const l of metrics.layers) if (l.layer < rows) out[l.layer] = layerRatio(l);
    return out;
  }
  const layer = metrics.layers.find((l) => l.layer === mode.layer);
  if (!layer) return new Float32Array(rows);
  if (layer.positions) return bucketPositions(layer.positions, mode.contextLength, rows);
  const out = new Float32Array(rows);
  const filled = Math.min(rows, Math.ceil((metrics.contextTokens / mode.contextLength) * rows));
  out.fill(layerRatio(layer), 0, filled);
  return out;
}

// A dark-to-bright ramp (close to viridis): 0 is nearly the background, 1 is bright yellow.
const STOPS: readonly [number, number, number][] = [
  [20, 18, 40],
  [59, 82, 139],
  [33, 145, 140],
  [94, 201, 98],
  [253, 231, 37],
];

export function heatColor(value: number): [number, number, number] {
  const v = Number.isFinite(value) ? Math.max(0, Math.min(1, value)) : 0;
  const x = v * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(x));
  const t = x - i;
  const a = STOPS[i]!;
  const b = STOPS[i + 1]!;
  return [Math.round(a[0] + (b[0] - a[0]) * t), Math.round(a[1] + (b[1] - a[1]) * t), Math.round(a[2] + (b[2] - a[2]) * t)];
}

/** RGBA pixels of `columns` (each `rows` tall) laid out left to right, for one putImageData. */
export function heatPixels(columns: readonly Float32Array[], width: number, rows: number): Uint8ClampedArray<ArrayBuffer> {
  const pixels = new Uint8ClampedArray(width * rows * 4);
  const offset = width - columns.length; // newest on the right
  const [r0, g0, b0] = heatColor(0);
  for (let i = 0; i < pixels.length; i += 4) {
    pixels[i] = r0;
    pixels[i + 1] = g0;
    pixels[i + 2] = b0;
    pixels[i + 3] = 255;
  }
  columns.forEach((column, c) => {
    const x = offset + c;
    if (x < 0) return;
    for (let y = 0; y < rows; y++) {
      const [r, g, b] = heatColor(column[y] ?? 0);
      const i = (y * width + x) * 4;
      pixels[i] = r;
      pixels[i + 1] = g;
      pixels[i + 2] = b;
    }
  });
  return pixels;
}

/**
 * Sparkline geometry: polyline point lists in a width × height box (y grows down), one list per
 * run of non-null values. The scale is [0, max] (max defaults to the largest value).
 */
export function sparkSegments(values: readonly (number | null)[], width: number, height: number, max?: number): string[] {
  const top = max ?? Math.max(0, ...values.filter((v): v is number => v !== null && Number.isFinite(v)));
  const scale = top > 0 ? height / top : 0;
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  const segments: string[] = [];
  let current: string[] = [];
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) {
      if (current.length > 0) segments.push(current.join(' '));
      current = [];
      return;
    }
    const x = values.length > 1 ? i * step : width / 2;
    const y = height - Math.min(height, Math.max(0, v * scale));
    current.push(`${round(x)},${round(y)}`);
  });
  if (current.length > 0) segments.push(current.join(' '));
  return segments;
}

const round = (v: number): number => Math.round(v * 10) / 10;

export interface MemorySegment {
  key: 'weights' | 'kv' | 'kv-window' | 'kv-checkpoints' | 'state' | 'state-checkpoints' | 'staged' | 'partial' | 'other';
  label: string;
  bytes: number;
}

/** Weights, KV in RAM, staged KV, partial keys and the rest of the process (RSS − those, ≥ 0). */
export function memoryStack(m: StepMetrics['memory']): { segments: MemorySegment[]; total: number; poolBudgetBytes: number; kvInPool: number } {
  const checkpoints = m.kvByKind?.checkpoints ?? 0;
  const recurrent = m.recurrent ? m.recurrent.stateBytes + m.recurrent.checkpointBytes : 0;
  const known = m.weightsBytes + m.kvUsedBytes + checkpoints + recurrent + m.stagedBytes + m.partialKeyBytes;
  const other = Math.max(0, m.rssBytes - known);
  // a model with sliding-window layers: their rows (rings of the window) apart from the global layers'
  const kv: MemorySegment[] = m.kvByKind
    ? [
        { key: 'kv', label: 'KV, global layers', bytes: m.kvByKind.global },
        { key: 'kv-window', label: 'KV, window layers (rings)', bytes: m.kvByKind.window },
        { key: 'kv-checkpoints', label: 'Ring checkpoints', bytes: checkpoints },
      ]
    : [{ key: 'kv', label: 'KV in RAM', bytes: m.kvUsedBytes }];
  const segments: MemorySegment[] = [
    { key: 'weights', label: 'Weights', bytes: m.weightsBytes },
    ...kv,
    // a hybrid model's linear-attention layers: a fixed-size state per sequence instead of rows
    ...(m.recurrent
      ? [
          { key: 'state' as const, label: 'Recurrent state, linear layers (+ rollback copy)', bytes: m.recurrent.stateBytes },
          { key: 'state-checkpoints' as const, label: 'State checkpoints', bytes: m.recurrent.checkpointBytes },
        ]
      : []),
    { key: 'staged', label: 'Staged KV', bytes: m.stagedBytes },
    { key: 'partial', label: 'Partial keys', bytes: m.partialKeyBytes },
    { key: 'other', label: 'Other', bytes: other },
  ];
  return { segments, total: known + other, poolBudgetBytes: m.poolBudgetBytes, kvInPool: m.kvUsedBytes + m.partialKeyBytes };
}

export interface LayerRow {
  layer: number;
  selected: number;
  candidates: number;
  fetchRatio: number;
  bytesMoved: number;
  reuseHits: number;
  reuseMisses: number;
  hitRate: number | null;
  recall: number | null;
  speculationMs: number;
  gatherMs: number;
  attentionMs: number;
}

export function layerRows(metrics: StepMetrics): LayerRow[] {
  return metrics.layers.map((l) => ({
    layer: l.layer,
    selected: l.selected,
    candidates: l.candidates,
    fetchRatio: layerRatio(l),
    bytesMoved: l.bytesMoved,
    reuseHits: l.reuseHits,
    reuseMisses: l.reuseMisses,
    hitRate: l.reuseHits + l.reuseMisses > 0 ? l.reuseHits / (l.reuseHits + l.reuseMisses) : null,
    recall: l.recall,
    speculationMs: l.speculationMs,
    gatherMs: l.gatherMs,
    attentionMs: l.attentionMs,
  }));
}

// ── export ──────────────────────────────────────────────────────────────────────────────────

export const CSV_COLUMNS = [
  'receivedAt', 'requestId', 'step', 'contextTokens', 'contextLength', 'policy', 'tokensPerS', 'fetchRatio', 'bytesMovedPerToken', 'reuseHitRate', 'recall', 'evictions',
  'denseMs', 'attentionMs', 'speculationMs', 'gatherMs', 'otherMs',
  'weightsBytes', 'poolBytes', 'poolBudgetBytes', 'kvUsedBytes', 'partialKeyBytes', 'stagedBytes', 'rssBytes', 'layers',
] as const;

function csvField(value: string | number | null): string {
  if (value === null) return '';
  const text = String(value);
  // Quote what needs it; a leading = + - @ would be a formula in a spreadsheet: prefix a quote.
  const safe = typeof value === 'string' && /^[=+\-@\t\r]/.test(text) ? `'${text}` : text;
  return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

/** One header line, then one line per snapshot (per-layer detail is in the JSON lines export). */
export function toCsv(snapshots: readonly Snapshot[]): string {
  const lines = [CSV_COLUMNS.join(',')];
  for (const s of snapshots) {
    const m = s.metrics;
    const row: (string | number | null)[] = [
      new Date(s.receivedAt).toISOString(), s.requestId, m.step, m.contextTokens, m.contextLength, m.policy, m.tokensPerS, m.fetchRatio, m.bytesMovedPerToken, m.reuseHitRate, m.recall, m.evictions,
      m.timing.denseMs, m.timing.attentionMs, m.timing.speculationMs, m.timing.gatherMs, m.timing.otherMs,
      m.memory.weightsBytes, m.memory.poolBytes, m.memory.poolBudgetBytes, m.memory.kvUsedBytes, m.memory.partialKeyBytes, m.memory.stagedBytes, m.memory.rssBytes, m.layers.length,
    ];
    lines.push(row.map(csvField).join(','));
  }
  return lines.join('\n') + '\n';
}

/** One JSON object per line: {receivedAt, requestId, ...StepMetrics} (layers and positions included). */
export function toJsonl(snapshots: readonly Snapshot[]): string {
  return snapshots.map((s) => JSON.stringify({ receivedAt: new Date(s.receivedAt).toISOString(), requestId: s.requestId, ...s.metrics })).join('\n') + (snapshots.length > 0 ? '\n' : '');
}

// ── compare ─────────────────────────────────────────────────────────────────────────────────

export interface TokenComparison {
  /** Positions where both sides produced the same token ÷ the longer side's length (1 when both are empty). */
  agreement: number;
  matching: number;
  lengthA: number;
  lengthB: number;
  /** First index where the streams differ (a shorter stream differs where it ends); null when identical. */
  firstDivergence: number | null;
}

export function compareTokens(a: readonly number[], b: readonly number[]): TokenComparison {
  const common = Math.min(a.length, b.length);
  let matching = 0;
  let firstDivergence: number | null = null;
  for (let i = 0; i < common; i++) {
    if (a[i] === b[i]) matching += 1;
    else firstDivergence ??= i;
  }
  if (firstDivergence === null && a.length !== b.length) firstDivergence = common;
  const longer = Math.max(a.length, b.length);
  return { agreement: longer === 0 ? 1 : matching / longer, matching, lengthA: a.length, lengthB: b.length, firstDivergence };
}
