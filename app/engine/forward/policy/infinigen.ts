// Policy 'infinigen' (ARCHITECTURE.md §4): layer ℓ's rows are chosen from a rehearsal of its
// attention with the speculative query q̃ that stage ℓ−1 outputs, by the native speculator
// (native/src/infinigen.cc), which also gathers them while layer ℓ−1 finishes. The skew, the partial
// columns and their calibration are the sequence state of infinigen-state.ts (InfinigenState): the
// runner keeps that state across policy switches, this policy only drives the speculator with it.
//
//   prefetch(ℓ, q̃)   queue layer ℓ's job (score the partial keys, select, gather into staging)
//   settle(ℓ)         wait for the queued jobs (a placement that reads the lists, before ℓ+1 is queued)
//   attendInPlace     attention over [gathered rows, current token] (waits for layer ℓ's job only)
//   select(ℓ)         the lists per KV head, for a placement that moves rows itself
//   attended          recall under `inspect` (a full score pass)
//   figures           the speculator's native figures
//
// Prefill stays dense; a decode step speculates once the columns are chosen and no calibration runs.
import { createSpeculator, type AttentionArgs, type KvPool, type Speculator } from '../../../../native/index.js';
import { CALIBRATION_TOKENS, speculatorInlineThreads, type InfinigenSettings, type InfinigenState } from './infinigen-state.ts';
import type { StepTrace } from '../step-trace.ts';
import type { PolicyShape, PromptRunner, RowPolicy } from './row-policy.ts';

export class InfinigenPolicy implements RowPolicy {
  readonly name = 'infinigen';
  readonly denseLayers: number;
  /** the speculator's inlineThreads, resolved once at its creation (0: it has its own side thread) */
  readonly inlineThreads: number;
  private readonly spec: Speculator;
  /** [layer] a job was queued since the last settle: select() must wait for it */
  private readonly queued: Uint8Array;
  /** [layer] recall of the latest attended step under `inspect` (NaN: not measured) */
  private readonly recall: Float64Array;

  constructor(
    readonly state: InfinigenState,
    private readonly pool: KvPool,
    private readonly shape: PolicyShape,
    /** [layer] the layer's scale, window, soft-cap where not the defaults, for the speculator's attention and recall */
    attention: readonly (AttentionArgs | undefined)[] = [],
  ) {
    const s: InfinigenSettings = state.settings;
    this.denseLayers = s.denseLayers;
    this.inlineThreads = speculatorInlineThreads(s.speculation, shape.threads ?? 1);
    // the selection scores at the layers' own scale when every layer has the same non-default one
    // (Gemma 4: 1, q and k being normed), else at the speculator's default 1/√headDim
    const scales = new Set(Array.from({ length: shape.layers }, (_, l) => attention[l]?.scale));
    const scale = scales.size === 1 ? [...scales][0] : undefined;
    this.spec = createSpeculator(pool, { heads: shape.heads, alpha: s.alpha, cap: s.fetchCap, denseLayers: s.denseLayers, inlineThreads: this.inlineThreads, ...(scale !== undefined ? { scale } : {}), ...(attention.some((a) => a !== undefined) ? { layerAttention: [...attention] } : {}) });
    this.queued = new Uint8Array(shape.layers);
    this.recall = new Float64Array(shape.layers).fill(NaN);
  }

  get sequence(): InfinigenState {
    return this.state;
  }

  get settings(): InfinigenSettings {
    return this.state.settings;
  }

  /** Where the speculation runs for this runner's threads. */
  get speculationPlacement(): 'side-thread' | 'inline' {
    return this.inlineThreads > 0 ? 'inline' : 'side-thread';
  }

  sparseStep(): boolean {
    return this.state.ready && this.state.calibrator === undefined;
  }

  selects(layer: number): boolean {
    return layer >= this.denseLayers;
  }

  prefetch(layer: number, qSpec: Float32Array): void {
    if (layer < this.denseLayers) return;
    this.spec.begin(layer, qSpec);
    this.queued[layer] = 1;
  }

  settle(): number {
    const t0 = performance.now();
    this.spec.drain();
    this.queued.fill(0);
    return performance.now() - t0;
  }

  select(layer: number): Int32Array[] {
    if (this.queued[layer] === 1) this.settle();
    return this.selection(layer);
  }

  attendInPlace(layer: number, q: Float32Array, out: Float32Array, threads: number): void {
    // a side-thread speculator is scoring the next layer on another core meanwhile: one thread here
    // (bench/long-context.mjs, MHA, 2 threads: splitting this attention too took InfiniGen from
    // 8.25 / 7.27 to 6.62 / 5.83 tok/s at 16K / 32K); an inline one has finished: every thread
    this.spec.attend(layer, q, out, this.inlineThreads > 0 ? threads : 1);
    this.queued[layer] = 0;
  }

  /** Under `inspect`: the share of the true softmax mass the attended set covered (a full score pass). */
  attended(layer: number, q: Float32Array): void {
    this.recall[layer] = this.state.settings.inspect ? this.spec.recall(layer, q) : NaN;
  }

  figures(layer: number, _N: number, trace: StepTrace): void {
    trace.speculated(layer, this.spec.stats(layer));
    trace.recall[layer] = this.recall[layer]!;
  }

  selection(layer: number): Int32Array[] {
    return Array.from({ length: this.pool.layerKvHeads(layer) }, (_, g) => this.spec.selected(layer, g));
  }

  /** Before a prompt while the skew is unknown: the cache file, else a calibration on this prompt or on text the model writes. */
  async beforePrompt(promptTokens: number, start: number, runner: PromptRunner): Promise<void> {
    const state = this.state;
    if (state.skew || (await state.loadCached())) return;
    state.startCalibration();
    if (promptTokens >= CALIBRATION_TOKENS || start > 0) return;
    // greedy from BOS on the empty cache; the runner is dense while a calibrator is set
    try {
      await runner.generateAndForget(CALIBRATION_TOKENS);
    } finally {
      this.spec.drain();
    }
    await state.finishCalibration('self-generated');
  }

  /** After a prompt: finish a calibration that ran on it, choose the columns over the sequence, set the projections. */
  async afterPrompt(): Promise<void> {
    if (this.state.calibrator) await this.state.finishCalibration('prompt');
    this.state.choosePartialColumns(this.pool);
    this.spec.clearStaging();
  }

  /** A calibration on the failed prompt would take its skew from a part: it is dropped, and with it the chunks. */
  abortPrompt(): boolean {
    if (!this.state.calibrator) return false;
    this.state.calibrator = undefined;
    return true;
  }

  /** The cache keeps its first n tokens: the staged rows no longer mirror it (the column state truncates itself). */
  truncate(): void {
    this.spec.drain();
    this.spec.clearStaging();
    this.queued.fill(0);
  }

  appendedWithoutForward(): void {
    this.spec.clearStaging();
  }

  /** Waits for every queued job (before the pool is read or changed outside a step). */
  drain(): void {
    this.spec.drain();
    this.queued.fill(0);
  }

  free(): void {
    this.spec.free();
  }
}
