// One decode step's figures, per layer, in typed arrays allocated once per runner (ARCHITECTURE.md
// §7). The step loop marks each layer dense or sparse; the layer's row policy writes what it chose
// (selected, candidates, reuse hits and misses, bytes, its own times) and the attention placement
// then writes what it measured (bytes that crossed, hits and misses of the device's rows, attention
// time). Nothing is summed while the step runs: report() builds the step's object when a caller
// asks (the metrics sampler, the benchmarks, the tests).
import type { SpeculatorLayerStats } from '../../../native/index.js';

/** Per layer of one decode step. Times in ms; *Ns are CLOCK_MONOTONIC ns (process.hrtime.bigint()). */
export interface LayerStepStats {
  layer: number;
  /** below the policy's denseLayers: attends to everything, no selection */
  dense: boolean;
  /** tokens per KV head attended besides the current one (N for dense layers) */
  selected: number;
  /** N, the past tokens that could be attended */
  candidates: number;
  /** selected / candidates (1 for dense layers, 0 when N = 0) */
  fetchRatio: number;
  /** K+V bytes that would cross to a device (the reuse cache's misses; all rows for dense layers) */
  bytes: number;
  hits: number;
  misses: number;
  speculationMs: number;
  gatherMs: number;
  /** the main thread waited for the selection this long before the attention */
  waitMs: number;
  attentionMs: number;
  /** share of the true softmax mass covered by the attended set (InfiniGen with inspect only) */
  recall?: number;
  /** begin() queued the speculation job (main thread) */
  beginNs?: number;
  /** the native job (q̃, selection, gather) of this layer */
  jobStartNs?: number;
  jobEndNs?: number;
  /** the stage that ran while this layer's job was in flight (post(ℓ−1) ⨾ pre(ℓ)) */
  stageStartNs?: number;
  stageEndNs?: number;
}

export interface StepStats {
  /** tokens in the cache before the step */
  position: number;
  layers: LayerStepStats[];
  /** mean fetch ratio over the sparse layers */
  fetchRatio: number;
  bytes: number;
  hits: number;
  misses: number;
  /** hits / (hits + misses) over every layer (0 when nothing was fetched) */
  hitRate: number;
  /** Under a pool byte budget: tokens evicted since the cache was reset (total, per layer) and in this step. */
  evictions?: { total: number; step: number; perLayer: number[] };
}

/** [layers] figures of the current (or latest) decode step. NaN in an optional column: not measured. */
export class StepTrace {
  /** tokens in the cache before the step */
  position = 0;
  /** the step selected rows (a sparse step); a dense step has no report */
  sparse = false;
  readonly dense: Uint8Array;
  readonly selected: Float64Array;
  readonly candidates: Float64Array;
  readonly bytes: Float64Array;
  readonly hits: Float64Array;
  readonly misses: Float64Array;
  readonly speculationMs: Float64Array;
  readonly gatherMs: Float64Array;
  readonly waitMs: Float64Array;
  readonly attentionMs: Float64Array;
  readonly recall: Float64Array;
  readonly beginNs: Float64Array;
  readonly jobStartNs: Float64Array;
  readonly jobEndNs: Float64Array;
  /** [stages = layers + 1] start and end of each stage's latest run (written for every chunk) */
  readonly stageStartNs: Float64Array;
  readonly stageEndNs: Float64Array;
  /** whether the stage times belong in the layer's figures (a policy that overlaps work with them) */
  readonly overlapped: Uint8Array;
  /** evictions at the end of the step (a pool with a byte budget) */
  evictions: { total: number; step: number; perLayer: number[] } | undefined;

  constructor(readonly layers: number) {
    const f64 = (): Float64Array => new Float64Array(layers);
    this.dense = new Uint8Array(layers);
    this.overlapped = new Uint8Array(layers);
    this.selected = f64();
    this.candidates = f64();
    this.bytes = f64();
    this.hits = f64();
    this.misses = f64();
    this.speculationMs = f64();
    this.gatherMs = f64();
    this.waitMs = f64();
    this.attentionMs = f64();
    this.recall = f64();
    this.beginNs = f64();
    this.jobStartNs = f64();
    this.jobEndNs = f64();
    this.stageStartNs = new Float64Array(layers + 1);
    this.stageEndNs = new Float64Array(layers + 1);
  }

  /** A decode step begins at `position`; every layer's columns are cleared. */
  begin(position: number, sparse: boolean): void {
    this.position = position;
    this.sparse = sparse;
    this.evictions = undefined;
    for (const a of [this.selected, this.candidates, this.bytes, this.hits, this.misses, this.speculationMs, this.gatherMs, this.waitMs, this.attentionMs]) a.fill(0);
    for (const a of [this.recall, this.beginNs, this.jobStartNs, this.jobEndNs]) a.fill(NaN);
    this.dense.fill(1);
    this.overlapped.fill(0);
  }

  /** Layer ℓ attended every one of N rows: all of them count as fetched, `rowBytes` K+V bytes a token. */
  denseLayer(layer: number, N: number, rowBytes: number): void {
    this.dense[layer] = 1;
    this.selected[layer] = N;
    this.candidates[layer] = N;
    this.bytes[layer] = N * rowBytes;
  }

  /** Layer ℓ selected: its policy writes the figures next. */
  sparseLayer(layer: number): void {
    this.dense[layer] = 0;
  }

  /** A speculator's native figures of layer ℓ (InfiniGen), with the stage that overlapped its job. */
  speculated(layer: number, s: SpeculatorLayerStats): void {
    this.selected[layer] = s.n;
    this.candidates[layer] = s.candidates;
    this.bytes[layer] = s.bytes;
    this.hits[layer] = s.hits;
    this.misses[layer] = s.misses;
    this.speculationMs[layer] = s.specNs / 1e6;
    this.gatherMs[layer] = s.gatherNs / 1e6;
    this.waitMs[layer] = s.waitNs / 1e6;
    this.attentionMs[layer] = s.attnNs / 1e6;
    this.beginNs[layer] = s.beginNs;
    this.jobStartNs[layer] = s.jobStartNs;
    this.jobEndNs[layer] = s.jobEndNs;
    this.overlapped[layer] = 1;
  }

  /** The step's object, built from the arrays (undefined for a dense step). */
  report(): StepStats | undefined {
    if (!this.sparse) return undefined;
    const layers: LayerStepStats[] = [];
    let bytes = 0;
    let hits = 0;
    let misses = 0;
    let ratioSum = 0;
    let sparseLayers = 0;
    for (let l = 0; l < this.layers; l++) {
      const candidates = this.candidates[l]!;
      const selected = this.selected[l]!;
      const dense = this.dense[l] === 1;
      const fetchRatio = dense ? (candidates > 0 ? 1 : 0) : candidates > 0 ? selected / candidates : 0;
      const layer: LayerStepStats = {
        layer: l,
        dense,
        selected,
        candidates,
        fetchRatio,
        bytes: this.bytes[l]!,
        hits: this.hits[l]!,
        misses: this.misses[l]!,
        speculationMs: this.speculationMs[l]!,
        gatherMs: this.gatherMs[l]!,
        waitMs: this.waitMs[l]!,
        attentionMs: this.attentionMs[l]!,
      };
      if (!Number.isNaN(this.beginNs[l]!)) {
        layer.beginNs = this.beginNs[l]!;
        layer.jobStartNs = this.jobStartNs[l]!;
        layer.jobEndNs = this.jobEndNs[l]!;
      }
      if (!Number.isNaN(this.recall[l]!)) layer.recall = this.recall[l]!;
      if (this.overlapped[l] === 1) {
        layer.stageStartNs = this.stageStartNs[l]!;
        layer.stageEndNs = this.stageEndNs[l]!;
      }
      layers.push(layer);
      bytes += layer.bytes;
      hits += layer.hits;
      misses += layer.misses;
      if (!dense) {
        ratioSum += fetchRatio;
        sparseLayers++;
      }
    }
    const step: StepStats = { position: this.position, layers, fetchRatio: sparseLayers > 0 ? ratioSum / sparseLayers : 1, bytes, hits, misses, hitRate: hits + misses > 0 ? hits / (hits + misses) : 0 };
    if (this.evictions) step.evictions = this.evictions;
    return step;
  }
}
