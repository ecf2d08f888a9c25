// Per-step metrics (ARCHITECTURE.md §7) for the inspector and /metrics, sampled so the cost
// stays small: at most one snapshot per `intervalMs` while tokens stream, plus one at the end.
// Each snapshot covers the decode steps since the previous one (timings are deltas).
//
// With a source that takes a probe (the model runner), the step a snapshot reports is measured:
// once the interval has passed the sampler arms the probe for the next decode step and sends the
// snapshot after it, with that step's recall and the oracle's recall at the same size per sparse
// layer (app/engine/metrics/step-probe.ts). One measured step per snapshot bounds the cost.
import type { LayerMetrics, StepMetrics } from '../../common/protocol.ts';
import type { ExpertStepStats, ForwardTimings, KvLayerFigure, StepStats } from '../forward/model-runner.ts';
import type { OffloadStepStats } from '../forward/placement/offload-attention.ts';
import type { ModelHyperparameters } from '../model/types.ts';
import { kvRowBytes, type KvElementType } from '../model/memory-estimate.ts';
import { InspectProbe, type StepProbe } from './step-probe.ts';

/** What the sampler reads from the forward pass. */
export interface MetricsSource {
  readonly contextLength: number;
  readonly position: number;
  readonly kvType: KvElementType;
  readonly graphWeightBytes: number;
  readonly poolBytes: number;
  timings(): ForwardTimings;
  /** The last decode step's per-layer selection figures (policies other than full). */
  lastStepStats?(): StepStats | undefined;
  /** Evictions per layer since the cache was last reset (a pool with a byte budget). */
  evictions?(): number[];
  /** Tokens the pool holds at most (less than the context when a byte budget evicts). */
  readonly poolCapacityTokens?: number;
  /** The latest selection of a sparse layer as token positions (for the inspector's heatmap). */
  selectedPositions?(layer: number): number[] | undefined;
  /** Attaches the sampler's probe (undefined detaches it). */
  setProbe?(probe: StepProbe | undefined): void;
  /** Bytes of partial key rows in the pool (InfiniGen). */
  partialKeyBytes?(): number;
  /** Offload mode: the latest decode step's bytes crossed, hits and misses per layer. */
  lastOffloadStep?(): OffloadStepStats | undefined;
  /** Offload mode: bytes of the device-side row buffer. */
  readonly rowBufferBytes?: number;
  /** Per layer: its kind, capacity and the tokens it holds (a window layer's ring holds its window only). */
  kvLayers?(): readonly KvLayerFigure[];
  /** Positions of the window layers' ring checkpoints held. */
  ringCheckpointPositions?(): number[];
  /** A mixture-of-experts model: the latest step's expert bytes read (and routing). */
  lastExperts?(): ExpertStepStats | undefined;
  /** A hybrid model: bytes of one copy of the linear-attention layers' state (0 without such layers). */
  readonly recurrentStateBytes?: number;
  /** A hybrid model: bytes of the state checkpoints held now. */
  readonly recurrentCheckpointBytes?: number;
}

/**
 * The inspector's share of decode time: a step is measured (and, by step count, a snapshot taken)
 * only while the probe's and the snapshots' time stays under this share of the decode time since
 * the generation began. On a small model whose step is a few ms this bounds how dense the samples
 * get; on a large one it never binds.
 */
export const INSPECT_BUDGET = 0.05;

/** At most this many positions per layer go out in one snapshot (the heatmap buckets them). */
const MAX_POSITIONS = 4096;

const ZERO_TIMINGS: ForwardTimings = { embedding: 0, layerGraphs: 0, headGraph: 0, append: 0, attention: 0, other: 0, total: 0, tokens: 0, calls: 0 };

export class StepMetricsSampler {
  private last: ForwardTimings;
  private lastAt = -Infinity;
  private readonly probe: InspectProbe | undefined;
  /** the probe is armed for the step the next snapshot reports */
  private waiting = false;
  /** sampleEvery(): snapshots by step count instead of by time */
  private everySteps: number | undefined;
  /** ms spent in snapshot() (with the probe's, kept under INSPECT_BUDGET of the decode time) */
  private ownMs = 0;
  private readonly startTotal: number;
  /** The inspector's share of decode time (INSPECT_BUDGET; tests set 1 to see every arming). */
  budget = INSPECT_BUDGET;

  constructor(
    private readonly source: MetricsSource,
    private readonly hyper: ModelHyperparameters,
    private readonly policy: string,
    private readonly intervalMs = 100,
    private readonly now: () => number = () => performance.now(),
    private readonly rss: () => number = () => process.memoryUsage.rss(),
  ) {
    this.last = { ...source.timings() };
    this.startTotal = this.last.total;
    if (source.setProbe) {
      this.probe = new InspectProbe();
      source.setProbe(this.probe);
    }
  }

  /** Snapshots every `steps` decode steps (each one measured by the probe) instead of by time. */
  sampleEvery(steps: number): void {
    if (!Number.isInteger(steps) || steps < 1) throw new RangeError(`sampleEvery needs a positive integer, got ${steps}`);
    this.everySteps = steps;
  }

  /** Detaches the probe from the source (the generation ended). */
  close(): void {
    if (this.probe) this.source.setProbe?.(undefined);
  }

  /** A snapshot when the interval has passed since the last one, else undefined. */
  maybe(step: number): StepMetrics | undefined {
    const t = this.now();
    if (!this.waiting) {
      const due = this.everySteps !== undefined ? step % this.everySteps === 0 : t - this.lastAt >= this.intervalMs;
      if (!due) return undefined;
      const affordable = this.inspectMs() <= this.budget * (this.source.timings().total - this.startTotal);
      // by step count, a step the budget cannot afford is skipped; by time, the snapshot goes out unmeasured
      if (this.everySteps !== undefined && !affordable) return undefined;
      if (this.probe && affordable) {
        // measure the next step, and report it
        this.probe.arm();
        this.waiting = true;
        return undefined;
      }
    }
    this.waiting = false;
    this.lastAt = t;
    return this.snapshot(step);
  }

  /** ms the inspector's work took so far: the probe's measurements and the snapshots. */
  inspectMs(): number {
    return this.ownMs + (this.probe?.spentMs ?? 0);
  }

  /** A snapshot now (the end of a generation). */
  snapshot(step: number): StepMetrics {
    const started = performance.now();
    try {
      return this.build(step);
    } finally {
      this.ownMs += performance.now() - started;
    }
  }

  private build(step: number): StepMetrics {
    const current = this.source.timings();
    const delta = subtract(current, this.last);
    this.last = { ...current };
    const { hyper, source } = this;
    const contextTokens = source.position;
    // tokens actually in the pool: an evicting pool holds at most its capacity
    const pooledTokens = Math.min(contextTokens, source.poolCapacityTokens ?? Infinity);
    // full attention: every layer reads every stored row of K and V (int8: with its scale)
    const rowBytes = hyper.kvHeads * 2 * kvRowBytes(source.kvType, hyper.headDim);
    const layers: LayerMetrics[] = Array.from({ length: hyper.layers }, (_, layer) => ({
      layer,
      selected: pooledTokens,
      candidates: pooledTokens,
      bytesMoved: pooledTokens * rowBytes,
      reuseHits: 0,
      reuseMisses: 0,
      recall: null,
      speculationMs: 0,
      gatherMs: 0,
      attentionMs: delta.calls > 0 ? delta.attention / delta.calls / hyper.layers : 0,
    }));
    const perCall = (ms: number) => (delta.calls > 0 ? ms / delta.calls : 0);
    // a window layer's ring holds its window only: per layer, the tokens it holds
    const kvLayers = source.kvLayers?.();
    const windowLayers = kvLayers?.filter((l) => l.kind === 'window') ?? [];
    let kvByKind: StepMetrics['memory']['kvByKind'];
    if (kvLayers && windowLayers.length > 0) {
      const used = (kind: string): number => kvLayers.filter((l) => l.kind === kind).reduce((a, l) => a + l.tokens * rowBytes, 0);
      // a checkpoint holds w − 1 rows of every window layer
      const checkpoints = (source.ringCheckpointPositions?.() ?? []).reduce((a, at) => a + windowLayers.reduce((b, l) => b + Math.min(at, (l.window ?? 1) - 1) * rowBytes, 0), 0);
      kvByKind = { window: used('window'), global: used('global'), checkpoints };
    }
    // linear-attention layers (a hybrid model) keep a state, no rows: only the attention layers count
    const kvLayerCount = kvLayers?.some((l) => l.kind === 'linear') ? kvLayers.filter((l) => l.kind !== 'linear').length : hyper.layers;
    const kvUsedBytes = kvByKind ? kvByKind.window + kvByKind.global : pooledTokens * rowBytes * kvLayerCount;
    const state = source.recurrentStateBytes ?? 0;
    // the state and the running chunk's rollback copy (linear-attention.ts), then its checkpoints
    const recurrent = state > 0 ? { stateBytes: 2 * state, checkpointBytes: source.recurrentCheckpointBytes ?? 0 } : undefined;
    const sparse = source.lastStepStats?.();
    const probed = this.probe?.take();
    const evicted = this.probe?.takeEvictions() ?? [];
    if (sparse) {
      // the last decode step's selection, per layer (InfiniGen and the other sparse policies)
      for (const stats of sparse.layers) {
        const layer = layers[stats.layer];
        if (!layer) continue;
        Object.assign(layer, {
          selected: stats.selected,
          candidates: stats.candidates,
          bytesMoved: stats.bytes,
          reuseHits: stats.hits,
          reuseMisses: stats.misses,
          recall: stats.recall ?? null,
          speculationMs: stats.speculationMs,
          gatherMs: stats.gatherMs,
          attentionMs: stats.attentionMs,
        });
        const measured = probed?.layers.find((p) => p.layer === stats.layer);
        if (measured) {
          // the probe measured this very step (the sampler armed it): its recall, the oracle's, the positions and counters
          if (layer.recall === null) layer.recall = measured.recall;
          layer.oracleRecall = measured.oracleRecall;
          layer.attention = measured.attention;
          if (measured.positions.length <= MAX_POSITIONS) {
            layer.positions = measured.positions;
            if (measured.counters) layer.counters = measured.counters;
          }
        } else {
          const positions = source.selectedPositions?.(stats.layer);
          if (positions && positions.length <= MAX_POSITIONS) layer.positions = positions;
        }
      }
    }
    // offload mode: what the step bound, counted from its tensors (placement/offload-attention.ts), replaces the estimate
    const offload = source.lastOffloadStep?.();
    const experts = source.lastExperts?.();
    if (offload) {
      for (const s of offload.layers) {
        const layer = layers[s.layer];
        if (!layer) continue;
        layer.bytesMoved = s.uploadBytes;
        layer.bytesCrossed = s.crossedBytes;
        layer.reuseHits = s.hits;
        layer.reuseMisses = s.misses;
      }
    }
    evicted.forEach((list, l) => {
      const layer = layers[l];
      if (layer && list.length > 0) layer.evicted = list.slice(-MAX_POSITIONS);
    });
    const sum = (pick: (l: LayerMetrics) => number) => layers.reduce((a, l) => a + pick(l), 0);
    const hits = sum((l) => l.reuseHits);
    const lookups = hits + sum((l) => l.reuseMisses);
    const recalls = layers.map((l) => l.recall).filter((r): r is number => r !== null);
    return {
      step,
      contextTokens,
      contextLength: source.contextLength,
      policy: this.policy,
      tokensPerS: delta.total > 0 ? (delta.tokens * 1000) / delta.total : 0,
      fetchRatio: layers.length > 0 ? sum((l) => (l.candidates > 0 ? l.selected / l.candidates : 0)) / layers.length : 0,
      bytesMovedPerToken: sum((l) => l.bytesMoved),
      ...(offload ? { bytesCrossedPerToken: offload.crossedBytes } : {}),
      ...(experts ? { expertBytesPerToken: experts.bytes } : {}),
      reuseHitRate: (sparse || offload) && lookups > 0 ? hits / lookups : null,
      recall: recalls.length > 0 ? recalls.reduce((a, r) => a + r, 0) / recalls.length : null,
      evictions: (source.evictions?.() ?? []).reduce((a, n) => a + n, 0),
      timing: {
        denseMs: perCall(delta.layerGraphs + delta.headGraph + delta.embedding),
        attentionMs: perCall(delta.attention),
        speculationMs: sum((l) => l.speculationMs),
        gatherMs: sparse ? sum((l) => l.gatherMs) : perCall(delta.append),
        otherMs: perCall(delta.other),
      },
      memory: {
        weightsBytes: source.graphWeightBytes,
        poolBytes: source.poolBytes,
        poolBudgetBytes: source.poolBytes,
        kvUsedBytes,
        partialKeyBytes: source.partialKeyBytes?.() ?? 0,
        // rows gathered for the step's sparse layers (staged for the device; a CPU attends them in place)
        stagedBytes: sparse ? sparse.layers.reduce((a, l) => a + (l.dense ? 0 : l.selected * rowBytes), 0) : 0,
        rssBytes: this.rss(),
        ...(offload ? { rowBufferBytes: source.rowBufferBytes ?? 0 } : {}),
        ...(kvByKind ? { kvByKind } : {}),
        ...(recurrent ? { recurrent } : {}),
      },
      layers,
    };
  }
}

function subtract(a: ForwardTimings, b: ForwardTimings = ZERO_TIMINGS): ForwardTimings {
  const out = { ...a };
  for (const key of Object.keys(out) as (keyof ForwardTimings)[]) out[key] = Math.max(0, a[key] - b[key]);
  return out;
}
