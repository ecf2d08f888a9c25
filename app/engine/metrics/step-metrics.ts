// Per-step metrics (ARCHITECTURE.md §7) for the inspector and /metrics, sampled so the cost
// stays small: at most one snapshot per `intervalMs` while tokens stream, plus one at the end.
// Each snapshot covers the decode steps since the previous one (timings are deltas).
import type { LayerMetrics, StepMetrics } from '../../common/protocol.ts';
import type { ForwardTimings } from '../forward/model-runner.ts';
import type { ModelHyperparameters } from '../model/types.ts';

/** What the sampler reads from the forward pass. */
export interface MetricsSource {
  readonly contextLength: number;
  readonly position: number;
  readonly kvType: 'fp16' | 'fp32';
  readonly graphWeightBytes: number;
  readonly poolBytes: number;
  timings(): ForwardTimings;
}

const ZERO_TIMINGS: ForwardTimings = { embedding: 0, layerGraphs: 0, headGraph: 0, append: 0, attention: 0, other: 0, total: 0, tokens: 0, calls: 0 };

export class StepMetricsSampler {
  private last: ForwardTimings;
  private lastAt = -Infinity;

  constructor(
    private readonly source: MetricsSource,
    private readonly hyper: ModelHyperparameters,
    private readonly policy: string,
    private readonly intervalMs = 100,
    private readonly now: () => number = () => performance.now(),
    private readonly rss: () => number = () => process.memoryUsage.rss(),
  ) {
    this.last = { ...source.timings() };
  }

  /** A snapshot when the interval has passed since the last one, else undefined. */
  maybe(step: number): StepMetrics | undefined {
    const t = this.now();
    if (t - this.lastAt < this.intervalMs) return undefined;
    this.lastAt = t;
    return this.snapshot(step);
  }

  /** A snapshot now (the end of a generation). */
  snapshot(step: number): StepMetrics {
    const current = this.source.timings();
    const delta = subtract(current, this.last);
    this.last = { ...current };
    const { hyper, source } = this;
    const contextTokens = source.position;
    const elem = source.kvType === 'fp32' ? 4 : 2;
    // full attention: every layer reads every stored row of K and V
    const rowBytes = hyper.kvHeads * hyper.headDim * 2 * elem;
    const layers: LayerMetrics[] = Array.from({ length: hyper.layers }, (_, layer) => ({
      layer,
      selected: contextTokens,
      candidates: contextTokens,
      bytesMoved: contextTokens * rowBytes,
      reuseHits: 0,
      reuseMisses: 0,
      recall: null,
      speculationMs: 0,
      gatherMs: 0,
      attentionMs: delta.calls > 0 ? delta.attention / delta.calls / hyper.layers : 0,
    }));
    const perCall = (ms: number) => (delta.calls > 0 ? ms / delta.calls : 0);
    const kvUsedBytes = contextTokens * rowBytes * hyper.layers;
    return {
      step,
      contextTokens,
      contextLength: source.contextLength,
      policy: this.policy,
      tokensPerS: delta.total > 0 ? (delta.tokens * 1000) / delta.total : 0,
      fetchRatio: contextTokens > 0 ? 1 : 0,
      bytesMovedPerToken: kvUsedBytes,
      reuseHitRate: null,
      recall: null,
      evictions: 0,
      timing: {
        denseMs: perCall(delta.layerGraphs + delta.headGraph + delta.embedding),
        attentionMs: perCall(delta.attention),
        speculationMs: 0,
        gatherMs: perCall(delta.append),
        otherMs: perCall(delta.other),
      },
      memory: {
        weightsBytes: source.graphWeightBytes,
        poolBytes: source.poolBytes,
        poolBudgetBytes: source.poolBytes,
        kvUsedBytes,
        partialKeyBytes: 0,
        stagedBytes: 0,
        rssBytes: this.rss(),
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
