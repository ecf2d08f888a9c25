// The forward pass: token ids in, next-token logits out, with the KV cache in the native pool.
// This file makes a runner (stages, pool, the per-layer policy plan, the attention placement) and
// keeps the sequence's bookkeeping (position, prompts in chunks, aborts, truncation, policy
// switches, snapshots); step.ts runs one chunk through every layer.
//
// Policies (policy/registry.ts): prefill stays dense under every policy; in a decode step each layer
// at or above its policy's denseLayers attends the rows its policy selects + the current token
// ('infinigen' speculates them one layer ahead, the comparison policies select with the real query).
//
// Byte budget (ARCHITECTURE.md §5; policies 'full' and 'infinigen'): with `poolBudgetBytes` the pool's
// whole allocation (K/V rows, partial keys, positions, counters, flags, headers) is at most that many
// bytes, its capacity in tokens follows, and a full layer evicts one token per appended token: the
// slot with the smallest prefetch counter outside the first `sinks` (4) positions and the `recent` (64)
// newest tokens (native/src/kv_pool.h). Counters: +1 per KV head whose speculation selects the slot,
// halved every `ageEvery` (K = 32) decode steps of the layer; layers nobody speculates for (dense
// layers, policy 'full') evict oldest-first. Positions still run to `contextLength`.
// A prompt longer than the free slots: the chunks shrink to the free slots, then the rest of the
// prompt runs one token at a time and evicts by the same rule (counters 0 -> oldest first outside
// the sinks and window); every eviction is counted, nothing is dropped silently. truncate()/an abort
// forget the positions >= n; tokens evicted before stay gone.
//
// Prompts run in chunks of `prefillChunk` tokens; the AbortSignal is checked between layers and
// an abort rolls the pool back to where the call started.
import { LonghandError, UsageError } from '../../common/errors.ts';
import type { LoadProgress } from '../../common/protocol.ts';
import type { TokenRunner } from '../generate/loop.ts';
import type { LoadedModel } from '../model/types.ts';
import { kvRowBytes } from '../model/memory-estimate.ts';
import { createKvPool, createLayeredKvPool, type AttentionArgs, type KvPool, type KvType } from '../../../native/index.js';
import type { StepProbe } from '../metrics/step-probe.ts';
import { EmbeddingTable } from './embedding.ts';
import { contextOverflow, ForwardAbortedError } from './errors.ts';
import type { StageGraph } from './graphs.ts';
import type { ModelFamily } from './layers/family.ts';
import { assertPolicySupported, familyOf } from './layers/families.ts';
import { checkLayerSpecs, isLinear, kvOwner, ownsKv, ropeFrequencies, uniformAttention, type LayerSpec } from './layers/layer-spec.ts';
import { LinearAttentionState, type StateCheckpointOptions } from './linear-attention.ts';
import type { RopeFrequencies } from '../onnx/ops.ts';
import { layerAttentionArgs } from './placement/attention-args.ts';
import { RingCheckpoints, ringKeepRows, ringSlots, windowRingLayers, type RingCheckpointOptions, type RingLayer } from '../kv/ring-checkpoints.ts';
import { poolLayerBytes } from '../model/memory-estimate.ts';
import type { InfinigenOptions, InfinigenSequenceState, InfinigenState } from './policy/infinigen-state.ts';
import { createNativeStages, nativeDenseUnsupported, type DenseKernelName, type StageRunner } from './native-stages.ts';
import { OffloadAttention, type OffloadStepStats } from './placement/offload-attention.ts';
import type { AttentionPlacement } from './placement/attention-placement.ts';
import { DeviceRowsAttention } from './placement/device-rows.ts';
import { InPlaceAttention } from './placement/in-place.ts';
import { createComparisonPolicy } from './policy/comparison.ts';
import { InfinigenPolicy } from './policy/infinigen.ts';
import { FullPolicy } from './policy/full.ts';
import { planLayers } from './policy/plan.ts';
import { policyRecipe, RUNNER_POLICIES, type PolicyRecipe, type RunnerPolicy, type RunnerPolicyOptions } from './policy/registry.ts';
import type { LayerRowShape, PolicySequenceState, PolicyShape, RowPolicy } from './policy/row-policy.ts';
import type { SparsePolicyOptions } from './policy/selection-settings.ts';
import { createStageSessions, type StageCacheOptions } from './stage-sessions.ts';
import type { StageCacheStats } from './stage-cache.ts';
import { emptyTimings as emptyForwardTimings, StepLoop, type ChunkOptions, type ForwardTimings } from './step.ts';
import type { StepStats } from './step-trace.ts';
import { ModelWeights, type AccuracyLevel } from './weights.ts';

export interface ModelRunnerOptions {
  /** onnxruntime intra-op threads (default 1); prefill attention spreads its queries over as many. */
  threads?: number;
  /** Tokens the cache holds (default: the model's context, at most 4096). */
  contextLength?: number;
  /** K/V row type in the pool (default 'fp16'; 'fp32' for exact comparisons). */
  kvType?: KvType;
  /** Tokens per prefill chunk (default 128). */
  prefillChunk?: number;
  /** MatMulNBits accuracy_level for quantised weights (default 4: int8 activations). */
  accuracyLevel?: AccuracyLevel;
  /** 'cpu' (default); another execution provider only with `offload` (its sessions fail with ONNX_PROVIDER_UNAVAILABLE where it cannot start). */
  device?: 'cpu' | 'webgpu' | 'cuda';
  /**
   * Offload mode (issue 14; placement/offload-attention.ts): decode-step attention runs in an onnxruntime graph over
   * a device-side row buffer fed only the rows it lacks from the pool; every policy.
   */
  offload?: boolean;
  /** Offload mode: how misses reach the row buffer (default 'host' on the CPU provider, 'graph' on others; placement/offload-attention.ts). */
  offloadRowUpdate?: 'host' | 'graph';
  /** Ids that end generation (default: the GGUF's eos id when it has one). */
  eosIds?: readonly number[];
  /** KV management (default 'full': every layer attends to every token). 'infinigen': llama family only. */
  policy?: RunnerPolicy;
  /** Knobs of policy 'infinigen'. */
  infinigen?: InfinigenOptions;
  /** Load progress: called after each stage's onnxruntime session is built (`done` of `total` = layers + 1 stages). */
  onProgress?: (progress: LoadProgress) => void;
  /** Knobs of the comparison policies 'streaming' | 'h2o' | 'quest' | 'oracle' | 'snapkv'. */
  sparse?: SparsePolicyOptions;
  /**
   * Upper bound in bytes of the KV pool's whole allocation; the pool evicts when full (policies 'full'
   * and 'infinigen'). Must hold more than sinks + recent tokens. Default: no budget, room for contextLength.
   */
  poolBudgetBytes?: number;
  /** Eviction knobs under poolBudgetBytes. */
  eviction?: EvictionOptions;
  /**
   * Keep onnxruntime's optimised stage graphs with their pre-packed weights in this cache and load
   * from it when they are there (stage-sessions.ts; CPU provider only). Default: no cache.
   */
  stageCache?: StageCacheOptions;
  /**
   * Who runs the dense work (norms, projections, MLP, LM head): 'native', C++ over the mapped GGUF
   * weights read in place (native-stages.ts; llama family on the CPU provider, every weight type with
   * kernels), or 'onnx', onnxruntime graphs over repacked weights (graphs.ts; every model and
   * provider). Default 'auto': native where it can run, else onnx. 'native' where it cannot: a
   * UsageError naming why.
   */
  dense?: DenseEngine;
  /**
   * Sliding-window layers keep only their window, as rings (default true; kv/ring-checkpoints.ts).
   * false: they keep every row like a global layer (llama.cpp's --swa-full), the reference a ring
   * is held against.
   */
  windowRings?: boolean;
  /** Checkpoints of the rings for prefix reuse and snapshots (kv/ring-checkpoints.ts; default every 1024 tokens, ringCheckpointCount of them). */
  ringCheckpoints?: RingCheckpointOptions;
  /** Checkpoints of the linear-attention layers' state for prefix reuse (linear-attention.ts; default every 1024 tokens, stateCheckpointCount of them). */
  stateCheckpoints?: StateCheckpointOptions;
}

/** What one layer's KV is: its kind, its slots and the pool bytes of its rows (figures per layer kind). */
export interface KvLayerFigure {
  /** 'linear': a linear-attention layer, no slots; its bytes are its recurrent state's */
  kind: 'global' | 'window' | 'linear';
  /** the sliding window (window layers) */
  window?: number;
  /** slots the layer holds at most (a ring's capacity, or the pool's) */
  capacityTokens: number;
  /** tokens it holds now */
  tokens: number;
  /** bytes of its slots in the pool (K, V, positions, partial rows; int8 scales), allocated at load */
  bytes: number;
}

export type DenseEngine = 'auto' | 'native' | 'onnx';

/** What a mixture-of-experts model's latest forward call read of its experts (ModelRunner.lastExperts). */
export interface ExpertStepStats {
  /** Bytes of expert weights the kernels read: per layer the router and each routed expert's gate, up and down rows once. */
  bytes: number;
  /** [layer] the experts each token of the call ran, [tokens, k] largest weight first (undefined: a layer without experts). */
  routed: (Uint32Array | undefined)[];
}

/** Which experts each layer ran a forward call's tokens on (a mixture-of-experts model), for the inspector. */
export interface RoutingRecord {
  /** Position of the call's first token. */
  start: number;
  tokens: number;
  /** The layers that have experts, ascending. */
  layers: number[];
  /** Experts per token and layer. */
  k: number;
  /** [tokens, layers.length, k] expert ids, the largest routing weight first; -1 where the layer did not run the token (a prompt chunk that needs no logits skips the last layer's MLP). */
  experts: Int32Array;
}

export type RunnerDense = { engine: 'native'; kernel: DenseKernelName } | { engine: 'onnx'; whyNotNative?: string };

/** How far createModelRunner is: stages (repacked weights + onnxruntime session) built so far. */
export type { LoadProgress } from '../../common/protocol.ts';

export type { RunnerPolicy, RunnerPolicyOptions } from './policy/registry.ts';
export { RUNNER_POLICIES } from './policy/registry.ts';

export interface EvictionOptions {
  /** first positions never evicted (default 4) */
  sinks?: number;
  /** newest tokens never evicted (default 64) */
  recent?: number;
  /** counters halve every this many decode steps of a layer (default 32) */
  ageEvery?: number;
}

export const EVICTION_DEFAULTS: Required<EvictionOptions> = { sinks: 4, recent: 64, ageEvery: 32 };

export type { SparsePolicyName, SparsePolicyOptions } from './policy/selection-settings.ts';
export type { InfinigenOptions } from './policy/infinigen-state.ts';
export type { LayerStepStats, StepStats } from './step-trace.ts';
export type { ForwardTimings } from './step.ts';

export interface PrefillOptions {
  /** Logits of every position, [T·vocab] (teacher-forced evaluation), instead of the last only. */
  allLogits?: boolean;
}

export interface ModelRunner extends TokenRunner {
  readonly contextLength: number;
  readonly vocabSize: number;
  /** Tokens in the cache. */
  readonly position: number;
  readonly kvType: KvType;
  readonly eosIds: readonly number[];
  /** How the load used the stage cache (undefined: it had none, or the stages are native). */
  readonly stageCache: StageCacheStats | undefined;
  /** Who runs the dense stages ('native' with its kernels, or 'onnx' and why not native). */
  readonly dense: RunnerDense;
  /** Bytes of weights in the onnxruntime graphs, and of the KV pool. */
  readonly graphWeightBytes: number;
  readonly poolBytes: number;
  /** Tokens per layer the pool holds (contextLength without a budget, or what the budget allows). */
  readonly poolCapacityTokens: number;
  /** Tokens evicted since the cache was last reset, per layer (all 0 without a budget). */
  evictions(): number[];
  prefill(ids: readonly number[], signal?: AbortSignal, opts?: PrefillOptions): Promise<Float32Array>;
  decode(id: number, signal?: AbortSignal): Promise<Float32Array>;
  /** Forgets every token. */
  reset(): void;
  /** Keeps the first n tokens of the cache (n <= position). */
  truncate(n: number): void;
  /**
   * The largest position <= n where the cache can be cut with every policy state exact, so that
   * continuing from there computes what a fresh prefill would (InfiniGen: its column energies are
   * checkpointed every 64 positions; H2O: its mass is kept at its latest prompt ends; SnapKV: the
   * window's prompt queries before the cut are kept). 0 after an eviction (the pool no longer holds a prefix).
   */
  resumePoint(n: number): number;
  /**
   * Switches to another policy keeping the onnxruntime sessions, the pool and the cached tokens, when
   * the new policy needs the same stage graphs and pool layout (every policy but 'infinigen' builds
   * the same ones; infinigen to infinigen when only alpha/fetchCap differ). The policy's own state is
   * rebuilt from the pool. Returns false, changing nothing, when the layouts differ.
   */
  tryAdoptPolicy(options: RunnerPolicyOptions): boolean;
  /**
   * Bytes of a layer's snapshot section for a cut at `tokens` (native pool export layout): every token
   * for a global layer, the window before it (w − 1 rows) for a ring, 0 for a KV-shared layer (Gemma
   * 4); layers may differ in row shape. Without `layer`, the one size every layer has, or a
   * NATIVE_BAD_ARGUMENT when they differ.
   */
  snapshotLayerBytes(tokens: number, layer?: number): number;
  /** Packs a layer's rows for a cut at `tokens` (a resumePoint; K, V rows, int8 scales, positions) into `out`. */
  exportLayer(layer: number, tokens: number, out: Uint8Array): void;
  /** Per layer: its kind, capacity, tokens and pool bytes (the Memory view, /metrics, inspect). */
  kvLayers(): KvLayerFigure[];
  /** Bytes of the window layers' checkpoint buffers (0 without window layers); part of the KV memory. */
  readonly ringCheckpointBytes: number;
  /**
   * Bytes of the linear-attention layers' recurrent state of the sequence (0 for a model without
   * such layers); held beside the pool, with as much again for the rollback of a running chunk.
   */
  readonly recurrentStateBytes: number;
  /** Bytes of the checkpoints of that state held now (a copy of it each; linear-attention.ts), and their positions (ascending). */
  readonly recurrentCheckpointBytes: number;
  recurrentCheckpointPositions(): number[];
  /** The linear-attention layers and the floats of each one's state (a snapshot's sections); empty for a model without them. */
  recurrentLayers(): { layer: number; floats: number }[];
  /** Layer ℓ's linear-attention state at `tokens` (a resumePoint), a copy, for a snapshot. */
  exportRecurrent(layer: number, tokens: number): Float32Array;
  /**
   * After importSequence(tokens, ...): the linear-attention states at `tokens` (every layer of
   * recurrentLayers()), so the cache continues as it did. Any failure leaves the cache empty.
   */
  importRecurrent(tokens: number, states: ReadonlyMap<number, Float32Array>): void;
  /** Positions of the ring checkpoints held (ascending; empty without window layers). */
  ringCheckpointPositions(): number[];
  /** Offload mode: the latest decode step's bytes crossed, hits and misses per layer (undefined otherwise or before one). */
  lastOffloadStep?(): OffloadStepStats | undefined;
  /** Offload mode: bytes of the device-side row buffer (0 otherwise). */
  readonly rowBufferBytes?: number;
  /** InfiniGen's sequence state at `tokens` (a resumePoint) for a snapshot; undefined under other policies. */
  exportInfinigen(tokens: number): InfinigenSequenceState | undefined;
  /** The active comparison policy's own state at `tokens` (a resumePoint) for a snapshot (H2O's mass, SnapKV's window queries); undefined under the others. */
  exportPolicyState(tokens: number): PolicySequenceState | undefined;
  /** The active policy that a restore must give its own state (exportPolicyState's), and the layers it needs; undefined when none. */
  policyStateNeeds(): { policy: string; layers: number[] } | undefined;
  /** The skew's identity under InfiniGen (loads the cached skew file when none is known yet); null otherwise or when none exists. */
  skewId(): Promise<string | null>;
  /**
   * Replaces the cache with `tokens` restored tokens: every layer's section is read by `readLayer`
   * into the buffer it is given and imported into the pool; InfiniGen's state (required under
   * 'infinigen') restored and its columns chosen; a comparison policy's own state (required where
   * policyStateNeeds says so) restored. Any failure leaves the cache empty.
   */
  importSequence(tokens: number, readLayer: (layer: number, into: Uint8Array) => Promise<void>, infinigen: InfinigenSequenceState | undefined, policyState?: PolicySequenceState): Promise<void>;
  /**
   * For long-context benchmarks only: appends `tokens` tokens of seeded random (unit-variance) K/V rows to every
   * layer (with their partial keys under 'infinigen') as if they had been prefilled, without running
   * the model. Decode cost depends on how many rows there are, not on what they hold, and a
   * 32,768-token prefill takes most of an hour on two cores; the benchmark says when it used this.
   */
  appendRandomContextForBenchmark(tokens: number, seed: number): void;
  timings(): ForwardTimings;
  resetTimings(): void;
  readonly policy: RunnerPolicy;
  /** Figures of the latest decode step under a sparse policy (undefined before one, or under 'full'). */
  lastStepStats(): StepStats | undefined;
  /**
   * A mixture-of-experts model: what the latest forward call (a decode step: one token) read of expert
   * weights, as the native stages counted it, and which experts each layer's tokens ran; undefined
   * for every other model and before a call.
   */
  lastExperts(): ExpertStepStats | undefined;
  /**
   * Called after every forward call of the sequence (prompt chunks and decode steps, not detached
   * calibration runs) with the experts its tokens were routed to; a model without experts never
   * calls it. undefined detaches it. (Listening makes each call drop the stages' older expert
   * figures first, so lastExperts() after a prompt chunk names only what that chunk ran.)
   */
  setRoutingListener(listener: ((record: RoutingRecord) => void) | undefined): void;
  /** The latest selection of a sparse layer as token positions, union over KV heads (InfiniGen and the comparison policies; undefined otherwise). */
  selectedPositions(layer: number): number[] | undefined;
  /** The inspector's probe (app/engine/metrics/step-probe.ts): measures the decode steps it arms; undefined detaches it. */
  setProbe(probe: StepProbe | undefined): void;
  /** Bytes of InfiniGen's partial key rows for the tokens in the pool (0 without them). */
  partialKeyBytes(): number;
  /** The row policy the decode steps run (its selections, snapkv's kept prompt, the selection time: tests and benchmarks). */
  readonly rowPolicy: RowPolicy;
  /** Where the skew matrices came from under 'infinigen' (undefined until the first prefill). */
  readonly skewSource: 'cache' | 'prompt' | 'self-generated' | undefined;
  /** Where InfiniGen's speculation runs (its `speculation` option resolved for this runner's threads); undefined under other policies. */
  readonly speculationPlacement: 'side-thread' | 'inline' | undefined;
  dispose(): Promise<void>;
}


const DEFAULT_MAX_CONTEXT = 4096;

function ggufEosIds(model: LoadedModel): number[] {
  if (model.tokenizer.kind !== 'gguf') return [];
  const v = model.tokenizer.metadata.get('tokenizer.ggml.eos_token_id');
  const n = typeof v === 'bigint' ? Number(v) : v;
  return typeof n === 'number' && Number.isInteger(n) ? [n] : [];
}

export async function createModelRunner(model: LoadedModel, options: ModelRunnerOptions = {}): Promise<ModelRunner> {
  const hyper = model.hyper;
  const contextLength = options.contextLength ?? Math.min(hyper.contextLength, DEFAULT_MAX_CONTEXT);
  if (!Number.isInteger(contextLength) || contextLength < 1) throw new RangeError(`contextLength must be a positive integer, got ${contextLength}`);
  const family = familyOf(hyper);
  const limit = family.contextLimit(hyper);
  if (limit !== undefined && contextLength > limit) throw contextOverflow(0, contextLength, limit); // e.g. learned positions end there
  const specs = family.layers(hyper);
  try {
    checkLayerSpecs(specs);
  } catch (error) {
    throw new UsageError(`${family.name}: ${(error as Error).message}`, { field: 'model' });
  }
  // Layers may differ in KV heads, head dim and RoPE (Gemma 4): the pool then holds one native pool
  // per row shape (createLayeredKvPool), the step feeds each stage its layer's RoPE rows and widths.
  // The query heads stay one number for every layer (the placements and policies take one); a
  // layer's scale, window and soft-cap go to the kernels with it (attention-args.ts), and the sink
  // logits the family reads for its layers with sinks (gpt-oss).
  const uniform = uniformAttention(specs, ['heads']);
  if (uniform.reason !== undefined) throw new UsageError(`${family.name}: ${uniform.reason}; the forward pass runs one query-head count for every layer`, { field: 'model' });
  const sinkLayers = specs.flatMap((spec, l) => (spec.attention.kind === 'attention' && spec.attention.sinks ? [l] : []));
  if (sinkLayers.length > 0 && family.attentionSinks === undefined) throw new UsageError(`${family.name}: layers with attention sinks and no sink logits to read`, { field: 'model' });
  const rows = layerRowShapes(specs);
  const mixedRows = rows.some((r) => r.kvHeads !== rows[0]!.kvHeads || r.headDim !== rows[0]!.headDim) || specs.some((spec) => !ownsKv(spec));
  const attention = layerAttentionArgs(specs);
  // the sink logits join every attention call of their layer (each kernel and the references)
  for (const l of sinkLayers) attention[l] = { ...attention[l], sinks: family.attentionSinks!(model, l) };
  const prefillChunk = options.prefillChunk ?? 128;
  if (!Number.isInteger(prefillChunk) || prefillChunk < 1) throw new RangeError(`prefillChunk must be a positive integer, got ${prefillChunk}`);
  if (options.device !== undefined && options.device !== 'cpu' && !(options.offload === true && (options.device === 'webgpu' || options.device === 'cuda'))) {
    throw new LonghandError('DEVICE_UNAVAILABLE', `device ${String(options.device)} is not supported by the forward pass yet (webgpu and cuda: with offload only)`);
  }
  const providers = options.device !== undefined && options.device !== 'cpu' ? [options.device] : undefined;
  const threads = options.threads ?? 1;
  const kvType = options.kvType ?? 'fp16';
  const heads = uniform.shape.heads;
  const sliding = specs.map((spec) => spec.attention.kind === 'attention' && spec.attention.window !== undefined);
  const slides = sliding.some(Boolean) ? { sliding } : {};
  const shape: PolicyShape = mixedRows
    ? { layers: hyper.layers, heads, kvHeads: Math.max(...rows.map((r) => r.kvHeads)), headDim: Math.max(...rows.map((r) => r.headDim)), perLayer: rows, contextLength, threads, ...slides }
    : { layers: hyper.layers, heads, kvHeads: rows[0]!.kvHeads, headDim: rows[0]!.headDim, contextLength, threads, ...slides };
  const recipe = policyRecipe(options, shape, model);
  const policy = recipe.name;
  assertPolicySupported(hyper, policy);
  const budget = options.poolBudgetBytes;
  if (budget !== undefined) {
    if (!Number.isSafeInteger(budget) || budget < 1) throw new UsageError(`poolBudgetBytes must be a positive integer, got ${String(budget)}`, { field: 'poolBudgetBytes' });
    if (!recipe.evicts) throw new UsageError(`poolBudgetBytes (eviction) supports policies 'full' and 'infinigen' only, got '${policy}'`, { field: 'poolBudgetBytes', policy });
  }
  const eviction = { ...EVICTION_DEFAULTS, ...(options.eviction ?? {}) };
  const weights = new ModelWeights(model, options.accuracyLevel ?? 4);

  const speculates = recipe.speculates;
  const denseWanted = options.dense ?? 'auto';
  if (!['auto', 'native', 'onnx'].includes(denseWanted)) throw new UsageError(`dense must be 'auto', 'native' or 'onnx', got ${String(denseWanted)}`, { field: 'dense' });
  const nativeWhyNot = providers !== undefined ? `the ${providers[0]} provider runs onnxruntime graphs` : nativeDenseUnsupported(model, { accuracyLevel: options.accuracyLevel });
  if (denseWanted === 'native' && nativeWhyNot !== undefined) throw new UsageError(`dense 'native' cannot run ${model.path}: ${nativeWhyNot}`, { field: 'dense' });
  const native = denseWanted !== 'onnx' && nativeWhyNot === undefined ? createNativeStages(weights, { threads, speculates, onProgress: options.onProgress }) : undefined;
  const { sessions, graphs, graphWeightBytes, cache: stageCache } = native
    ? { ...native, cache: undefined }
    : await createStageSessions(model, weights, {
        threads,
        providers,
        speculates,
        cache: options.stageCache,
        onProgress: options.onProgress,
      });
  const dense: RunnerDense = native ? { engine: 'native', kernel: native.kernel } : { engine: 'onnx', ...(nativeWhyNot !== undefined ? { whyNotNative: nativeWhyNot } : {}) };
  const p = recipe.partialDim;
  // a sliding-window layer keeps its window as a ring (kv/ring-checkpoints.ts says how many slots),
  // in a plain pool and in a layered one (Gemma 4: a KV-shared window layer reads its source's ring)
  const rings: RingLayer[] = options.windowRings !== false ? windowRingLayers(specs, prefillChunk, contextLength) : [];
  const ringOf = new Map(rings.map((r) => [r.layer, r.window]));
  const layerCapacity = rings.length > 0 ? Array.from({ length: hyper.layers }, (_, l) => (ringOf.has(l) ? ringSlots(ringOf.get(l)!, prefillChunk, contextLength) : contextLength)) : undefined;
  const ringLayers = layerCapacity ? layerCapacity.map((_, l) => ringOf.has(l)) : undefined;
  if (rings.length > 0 && budget !== undefined) throw new UsageError(`poolBudgetBytes (eviction) with sliding-window layers: a ring and eviction in one pool are not built yet; load without a budget, or with windowRings false`, { field: 'poolBudgetBytes' });
  let pool: KvPool;
  if (mixedRows) {
    // one native pool per row shape; a KV-shared layer keeps no rows (native/kv-pool-layers.js)
    pool = createLayeredKvPool({
      // InfiniGen's p follows each layer's head dim (⌊r·d_ℓ⌋)
      // a linear-attention layer keeps no rows at all (its state is the runner's, beside the pool)
      layerShapes: specs.map((spec, l) => (isLinear(spec) ? { rows: 'none' as const } : ownsKv(spec) ? { ...rows[l]!, partialDim: recipe.partialDimFor(rows[l]!.headDim) } : { kvSource: kvOwner(specs, l)! })),
      ...(budget !== undefined ? { budgetBytes: budget, eviction } : { tokens: contextLength }),
      kvType,
      ...(layerCapacity ? { layerCapacity, ringLayers } : {}),
    });
  } else {
    const { kvHeads, headDim } = rows[0]!;
    const bytesPerToken = hyper.layers * kvHeads * (2 * kvRowBytes(kvType, headDim) + 4 + 2 * p);
    const projBytes = p > 0 ? hyper.layers * kvHeads * headDim * p * 4 + hyper.layers * 4 + 3 * 64 : 0;
    const scalePadding = kvType === 'int8' ? 2 * 64 : 0; // the int8 scale regions start on their own lines
    pool = createKvPool({
      budgetBytes: budget ?? contextLength * bytesPerToken + 4 * 64 + hyper.layers * 4 + 64 + projBytes + scalePadding,
      ...(budget !== undefined ? { eviction } : {}),
      layers: hyper.layers,
      kvHeads,
      headDim,
      kvType,
      ...(p > 0 ? { partialDim: p } : {}),
      ...(layerCapacity ? { layerCapacity, ringLayers } : {}),
    });
  }
  const ringCheckpoints = new RingCheckpoints(pool, rings, contextLength, options.ringCheckpoints);
  const recurrent = specs.some(isLinear)
    ? new LinearAttentionState(specs, (l) => ({ conv: weights.vector(`blk.${l}.ssm_conv1d.weight`), norm: weights.vector(`blk.${l}.ssm_norm.weight`) }), contextLength, options.stateCheckpoints, native ? { threads } : undefined)
    : undefined;
  let rowPolicy: RowPolicy | undefined;
  let placement: AttentionPlacement;
  try {
    rowPolicy = recipe.build(pool, undefined, attention);
    placement = new InPlaceAttention(pool, heads, threads, attention);
    if (options.offload === true && rings.length > 0) throw new UsageError(`offload: ${family.name} has sliding-window layers (rings), which run in place only`, { field: 'offload' });
    if (options.offload === true) {
      if (mixedRows) throw new UsageError(`offload: ${family.name} layers differ in KV heads or head dim (or share K/V); they run in place only`, { field: 'offload' });
      // the device graph runs one scale, no window and no soft-cap for every layer
      if (attention.some((a) => a !== undefined)) throw new UsageError(`offload: ${family.name} layers with their own attention scale, window, soft-cap or sinks run in place only`, { field: 'offload' });
      // a sparse layer's lists are at most the recipe's bound + the current token; the buffer grows if a list is longer
      const sparseRows = Math.min(pool.capacityTokens, recipe.mostRows(pool.capacityTokens) + 1);
      const initialRowsPerHead = Array.from({ length: hyper.layers }, (_, l) => (rowPolicy!.selects(l) ? sparseRows : pool.capacityTokens));
      const offload = await OffloadAttention.create(pool, { heads, threads, initialRowsPerHead, ...(providers ? { providers } : {}), ...(options.offloadRowUpdate ? { rowUpdate: options.offloadRowUpdate } : {}) });
      placement = new DeviceRowsAttention(pool, heads, threads, offload, attention);
    }
  } catch (error) {
    rowPolicy?.free?.();
    pool.free();
    await Promise.all(sessions.map((s) => s.release()));
    throw error;
  }
  return new Runner(model, family, specs, attention, sessions, graphs, pool, recipe, rowPolicy, placement, {
    contextLength,
    prefillChunk,
    kvType,
    threads,
    graphWeightBytes,
    eosIds: options.eosIds ?? ggufEosIds(model),
    stageCache,
    dense,
    shape,
    rings: ringCheckpoints,
    recurrent,
  });
}

interface RunnerConfig {
  contextLength: number;
  prefillChunk: number;
  kvType: KvType;
  /** onnxruntime's intra-op threads; native attention uses as many (between the graphs the cores are idle) */
  threads: number;
  graphWeightBytes: number;
  eosIds: readonly number[];
  stageCache: StageCacheStats | undefined;
  dense: RunnerDense;
  shape: PolicyShape;
  /** the window layers' rings and their checkpoints (no rings: an empty set) */
  rings: RingCheckpoints;
  /** the linear-attention layers' state (none: undefined) */
  recurrent: LinearAttentionState | undefined;
}

class Runner implements ModelRunner {
  readonly contextLength: number;
  readonly vocabSize: number;
  readonly kvType: KvType;
  readonly eosIds: readonly number[];
  readonly graphWeightBytes: number;
  readonly stageCache: StageCacheStats | undefined;
  readonly dense: RunnerDense;
  private pos = 0;
  private disposed = false;
  private busy = false;
  private readonly layers: number;
  private readonly prefillChunk: number;
  private readonly step: StepLoop;
  /** the [stage] speculative-query outputs of the stage graphs, and the policy the runner was made with */
  private readonly speculates: readonly boolean[];
  private active: RowPolicy;
  private activeName: RunnerPolicy;
  /**
   * The sequence state of a policy that keeps one (InfiniGen's column energies), active or dormant:
   * while another policy runs on InfiniGen's graphs and pool it still folds every prompt chunk, so
   * switching back keeps the cache exact.
   */
  private sequence: InfinigenState | undefined;
  /** the latest decode step was a sparse one: its trace holds the figures */
  private stepReported = false;

  constructor(
    private readonly model: LoadedModel,
    private readonly family: ModelFamily,
    private readonly specs: readonly LayerSpec[],
    /** [layer] each layer's scale, window, soft-cap where not the defaults */
    private readonly attention: readonly (AttentionArgs | undefined)[],
    private readonly sessions: StageRunner[],
    graphs: StageGraph[],
    private readonly pool: KvPool,
    recipe: PolicyRecipe,
    policy: RowPolicy,
    private readonly placement: AttentionPlacement,
    private readonly cfg: RunnerConfig,
  ) {
    const h = model.hyper;
    this.contextLength = cfg.contextLength;
    this.vocabSize = h.vocabSize;
    this.kvType = cfg.kvType;
    this.eosIds = cfg.eosIds;
    this.graphWeightBytes = cfg.graphWeightBytes;
    this.stageCache = cfg.stageCache;
    this.dense = cfg.dense;
    this.prefillChunk = cfg.prefillChunk;
    this.layers = h.layers;
    this.speculates = recipe.speculates;
    this.active = policy;
    this.activeName = recipe.name;
    this.sequence = policy instanceof InfinigenPolicy ? policy.state : undefined;
    // Its pages are dropped now and then (embedding.ts says why), unless the table is also the LM
    // head: then every step streams it whole from pages the dense stages made their own.
    const embedding = family.embedding(h);
    const tiedHead = !model.tensors.has('output.weight');
    const table = embedding.tokenTable;
    const tokens = new EmbeddingTable(model.tensors.get(table)!, tiedHead || !model.releaseTensor ? undefined : () => model.releaseTensor!(table));
    const positions = embedding.positions;
    const posView = positions ? model.tensors.get(positions.table) : undefined;
    this.step = new StepLoop(
      {
        pool,
        stages: sessions,
        graphs,
        input: {
          tokens,
          positions: posView ? new EmbeddingTable(posView) : undefined,
          positionOffset: positions?.offset ?? 0,
          scale: embedding.scale,
          // never the LM head: its pages are always dropped now and then (E2B's is 262K × 8960 values)
          ...(embedding.perLayerTable ? { perLayerTokens: perLayerTable(model, embedding.perLayerTable) } : {}),
          ropes: layerRopes(specs, cfg.contextLength),
        },
        layers: h.layers,
        heads: cfg.shape.heads,
        d: h.hiddenSize,
        headDims: specs.map((spec) => (spec.attention.kind === 'attention' ? spec.attention.headDim : 0)),
        ownsKv: specs.map(ownsKv),
        linear: specs.map(isLinear),
        attnWidths: specs.map((spec) => (spec.attention.kind === 'attention' ? cfg.shape.heads * spec.attention.headDim : spec.attention.kind === 'linear' ? spec.attention.valueHeads * spec.attention.headDim : 0)),
        recurrent: cfg.recurrent,
        tokenRowBytes: specs.map((_, l) => {
          const r = layerRowShapes(specs)[l]!;
          return r.kvHeads * 2 * kvRowBytes(cfg.kvType, r.headDim);
        }),
      },
      this.planFor(policy),
      placement,
    );
    this.step.sequence = this.sequence;
  }

  get poolCapacityTokens(): number {
    return this.pool.capacityTokens;
  }

  evictions(): number[] {
    return this.step.evictions();
  }

  get position(): number {
    return this.pos;
  }

  get poolBytes(): number {
    return this.pool.byteLength;
  }

  get policy(): RunnerPolicy {
    return this.activeName;
  }

  get rowPolicy(): RowPolicy {
    return this.active;
  }

  get skewSource(): 'cache' | 'prompt' | 'self-generated' | undefined {
    return this.active instanceof InfinigenPolicy ? this.active.state.skewSource : undefined;
  }

  get speculationPlacement(): 'side-thread' | 'inline' | undefined {
    return this.active instanceof InfinigenPolicy ? this.active.speculationPlacement : undefined;
  }

  lastStepStats(): StepStats | undefined {
    return this.stepReported ? this.step.trace.report() : undefined;
  }

  lastOffloadStep(): OffloadStepStats | undefined {
    return this.placement instanceof DeviceRowsAttention ? this.placement.lastStep() : undefined;
  }

  lastExperts(): ExpertStepStats | undefined {
    // stage s > 0 runs layer s − 1's MLP; only a mixture-of-experts stage reports
    let bytes = 0;
    const routed: (Uint32Array | undefined)[] = [];
    let any = false;
    for (let s = 1; s < this.sessions.length; s++) {
      const e = this.sessions[s]!.lastExperts?.();
      routed.push(e?.routed);
      if (e === undefined) continue;
      any = true;
      bytes += e.bytes;
    }
    return any ? { bytes, routed } : undefined;
  }

  get rowBufferBytes(): number {
    return this.placement.bufferBytes;
  }

  selectedPositions(layer: number): number[] | undefined {
    // the latest selection of a sparse layer, as token positions (union over KV heads)
    if (!this.stepReported || layer < 0 || layer >= this.layers || this.step.trace.dense[layer] === 1) return undefined;
    const positions = new Set<number>();
    for (const list of this.step.plan[layer]!.selection(layer)) for (const slot of list) positions.add(this.pool.position(layer, slot));
    return [...positions].sort((a, b) => a - b);
  }

  setProbe(probe: StepProbe | undefined): void {
    this.step.probe = probe;
  }

  private routingListener: ((record: RoutingRecord) => void) | undefined;

  setRoutingListener(listener: ((record: RoutingRecord) => void) | undefined): void {
    this.routingListener = listener;
  }

  /** The routing of the call just run at `start` (`tokens` tokens), as one record; undefined without experts. */
  private routingRecord(start: number, tokens: number): RoutingRecord | undefined {
    const layers = this.moeLayers;
    if (layers.length === 0) return undefined;
    const routed = this.lastExperts()?.routed ?? [];
    const k = this.model.hyper.moe!.expertsUsed;
    // regroup [layer][token, k] as [token][layer][k]: a token's routing through the model reads as one row
    const experts = new Int32Array(tokens * layers.length * k).fill(-1);
    layers.forEach((layer, li) => {
      const r = routed[layer];
      if (r === undefined) return; // the stage did not run: a prompt chunk that needs no logits skips the last layer's MLP
      // all the call's tokens, or only its last (the rows the logits need)
      const first = tokens - r.length / k;
      for (let t = Math.max(0, first); t < tokens; t++) experts.set(r.subarray((t - first) * k, (t - first + 1) * k), (t * layers.length + li) * k);
    });
    return { start, tokens, layers, k, experts };
  }

  /** The layers whose MLP is a mixture of experts (LayerSpec ffn kind), ascending. */
  private get moeLayers(): number[] {
    return (this.moeLayerList ??= this.specs.flatMap((spec, layer) => (spec.ffn.kind === 'moe' ? [layer] : [])));
  }

  private moeLayerList: number[] | undefined;

  partialKeyBytes(): number {
    let bytes = 0; // over the layers that keep rows: a ring holds at most its window's slots
    for (let l = 0; l < this.layers; l++) if (this.pool.owns(l)) bytes += this.pool.layerPartialDim(l) * 2 * this.pool.layerKvHeads(l) * this.pool.length(l);
    return bytes;
  }

  kvLayers(): KvLayerFigure[] {
    const stateBytes = this.cfg.recurrent?.layerBytes(this.layers);
    return Array.from({ length: this.layers }, (_, l) => {
      const a = this.specs[l]!.attention;
      if (a.kind === 'linear') return { kind: 'linear', capacityTokens: 0, tokens: 0, bytes: stateBytes![l]! };
      const window = a.kind === 'attention' ? a.window : undefined;
      // a KV-shared layer (Gemma 4) reads its owner's rows and keeps none of its own
      const owns = this.pool.owns(l);
      const capacityTokens = owns ? this.pool.layerCapacityTokens(l) : 0;
      return {
        kind: window !== undefined ? 'window' : 'global',
        ...(window !== undefined ? { window } : {}),
        capacityTokens,
        tokens: owns ? this.pool.length(l) : 0,
        bytes: owns ? poolLayerBytes(this.pool.layerKvHeads(l), this.pool.layerHeadDim(l), this.kvType, capacityTokens, this.pool.layerPartialDim(l)) : 0,
      };
    });
  }

  get ringCheckpointBytes(): number {
    return this.cfg.rings.bytes;
  }

  get recurrentStateBytes(): number {
    return this.cfg.recurrent?.bytes ?? 0;
  }

  get recurrentCheckpointBytes(): number {
    return this.cfg.recurrent?.checkpointBytes ?? 0;
  }

  recurrentCheckpointPositions(): number[] {
    return this.cfg.recurrent?.checkpointPositions() ?? [];
  }

  recurrentLayers(): { layer: number; floats: number }[] {
    return this.cfg.recurrent?.stateLayers() ?? [];
  }

  exportRecurrent(layer: number, tokens: number): Float32Array {
    this.live();
    if (!this.cfg.recurrent) throw new RangeError('exportRecurrent: the model has no linear-attention layers');
    return this.cfg.recurrent.exportLayer(layer, tokens);
  }

  importRecurrent(tokens: number, states: ReadonlyMap<number, Float32Array>): void {
    this.live();
    if (this.busy) throw new LonghandError('ENGINE_BUSY', 'the model runner is running a prefill or decode');
    if (!this.cfg.recurrent) throw new RangeError('importRecurrent: the model has no linear-attention layers');
    if (tokens !== this.pos) throw new RangeError(`importRecurrent(${tokens}): the cache holds ${this.pos} tokens`);
    try {
      this.cfg.recurrent.importStates(tokens, states);
    } catch (error) {
      this.reset();
      throw error;
    }
  }

  ringCheckpointPositions(): number[] {
    return this.cfg.rings.positions();
  }

  async prefill(ids: readonly number[], signal?: AbortSignal, opts: PrefillOptions = {}): Promise<Float32Array> {
    this.enter(ids.length, signal);
    const start = this.pos;
    this.stepReported = false; // the latest decode step's figures (and staged selections) end with a new prompt
    try {
      if (ids.length === 0) throw new RangeError('prefill needs at least one token');
      await this.active.beforePrompt?.(ids.length, start, this);
      const all = opts.allLogits === true;
      const parts: Float32Array[] = [];
      let last: Float32Array | undefined;
      for (let at = 0; at < ids.length; ) {
        // under a budget a chunk never exceeds the free slots; a full pool takes one token (evicting) at a time
        const size = this.pool.evicting ? Math.max(1, Math.min(this.prefillChunk, this.pool.capacityTokens - this.pool.length(0))) : this.prefillChunk;
        const chunk = ids.slice(at, at + size);
        at += chunk.length;
        const isLast = at >= ids.length;
        const logits = await this.runChunk(chunk, { rows: all ? 'all' : isLast ? 'last' : 'none', prompt: true, detached: false, signal });
        if (all) parts.push(logits!);
        else if (isLast) last = logits;
      }
      await this.active.afterPrompt?.();
      if (!all) return last!;
      const out = new Float32Array(ids.length * this.vocabSize);
      let o = 0;
      for (const p of parts) {
        out.set(p, o);
        o += p.length;
      }
      return out;
    } catch (error) {
      // An abort keeps the chunks that ran through every layer (pressing Continue again resumes
      // there), unless the policy says they must go (a calibration on this prompt was running).
      const drop = this.active.abortPrompt?.() === true;
      const keep = error instanceof ForwardAbortedError && !drop ? this.pos : start;
      this.sequence?.discardChunk();
      const kept = this.rollback(keep);
      throw error instanceof ForwardAbortedError && kept !== error.position ? new ForwardAbortedError(kept, { cause: error.cause }) : error;
    } finally {
      this.busy = false;
    }
  }

  async decode(id: number, signal?: AbortSignal): Promise<Float32Array> {
    this.enter(1, signal);
    const start = this.pos;
    try {
      return (await this.runChunk([id], { rows: 'last', prompt: false, detached: false, signal }))!;
    } catch (error) {
      this.sequence?.discardChunk();
      this.rollback(start);
      throw error;
    } finally {
      this.busy = false;
    }
  }

  /** Runs `tokens` greedy tokens from BOS on the empty cache, then empties it again (InfiniGen's self-generated calibration). */
  async generateAndForget(tokens: number): Promise<void> {
    try {
      let logits = (await this.runChunk([this.bosId()], { rows: 'last', prompt: false, detached: true, signal: undefined }))!;
      for (let i = 1; i < tokens && this.pos < this.contextLength; i++) {
        logits = (await this.runChunk([argmax(logits)], { rows: 'last', prompt: false, detached: true, signal: undefined }))!;
      }
    } finally {
      this.drainPolicies();
      this.pool.reset();
      this.step.forgetEvictions();
      this.pos = 0;
      this.cfg.rings.reset();
      this.cfg.recurrent?.reset();
    }
  }

  reset(): void {
    this.live();
    this.drainPolicies();
    this.pool.reset();
    this.step.forgetEvictions();
    this.forgetFrom(0);
    this.sequence?.clearSequence();
    this.cfg.rings.reset();
    this.cfg.recurrent?.reset();
  }

  truncate(n: number): void {
    this.live();
    if (!Number.isInteger(n) || n < 0 || n > this.pos) throw new RangeError(`truncate(${n}): the cache holds ${this.pos} tokens`);
    // a recurrent state cannot be cut back (resumePoint gives only the points it can): refuse before anything changes
    if (this.cfg.recurrent && this.cfg.recurrent.resumePoint(n) !== n) throw new RangeError(`truncate(${n}): the linear-attention state holds ${this.pos} tokens and cannot be cut back to ${n} (resumePoint(${n}) is ${this.cfg.recurrent.resumePoint(n)})`);
    this.drainPolicies();
    this.cutPool(n);
    this.forgetFrom(n);
    this.sequence?.truncate(n);
  }

  resumePoint(n: number): number {
    if (!Number.isInteger(n) || n < 0 || n > this.pos) throw new RangeError(`resumePoint(${n}): the cache holds ${this.pos} tokens`);
    if (this.pool.evicting && this.pool.evictionsTotal() > 0) return 0;
    // a dormant sequence state counts too: cutting it between checkpoints would cost a switch back its
    // exactness; the rings hold a window only where they still do, or where a checkpoint was taken
    // (kv/ring-checkpoints.ts). Each rule's point is <= the other's input: repeat until both agree.
    let at = n;
    for (;;) {
      const policy = this.active.resumePoint ? this.active.resumePoint(at) : at;
      const rings = this.cfg.rings.resumePoint(this.sequence ? this.sequence.resumePoint(policy) : policy);
      // a linear-attention state is exact at its own position and at its checkpoints: else from 0
      const next = this.cfg.recurrent ? this.cfg.recurrent.resumePoint(rings) : rings;
      if (next === at) return at;
      at = next;
    }
  }

  tryAdoptPolicy(options: RunnerPolicyOptions): boolean {
    this.live();
    if (this.busy) throw new LonghandError('ENGINE_BUSY', 'the model runner is running a prefill or decode');
    const name = options.policy ?? 'full';
    if (!RUNNER_POLICIES.includes(name) || this.family.policyRefusal(name) !== undefined) return false;
    const recipe = policyRecipe(options, this.cfg.shape, this.model);
    if (this.pool.evicting && !recipe.evicts) return false;
    if (!recipe.adopts({ speculates: this.speculates, pool: this.pool, sequence: this.sequence })) return false;
    this.drainPolicies();
    // build what can fail before anything is given up
    const next = recipe.build(this.pool, this.sequence, this.attention);
    this.active.free?.();
    this.active = next;
    this.activeName = recipe.name;
    // a policy without a sequence state of its own leaves the kept one dormant (still fed)
    if (next instanceof InfinigenPolicy) this.sequence = next.state;
    this.step.setPlan(this.planFor(next));
    this.step.sequence = this.sequence;
    this.stepReported = false;
    return true;
  }

  snapshotLayerBytes(tokens: number, layer?: number): number {
    const ring = layer === undefined ? -1 : this.ringIndex(layer);
    return ring >= 0 ? this.cfg.rings.sectionBytes(ring, tokens) : this.pool.snapshotLayerBytes(tokens, layer);
  }

  exportLayer(layer: number, tokens: number, out: Uint8Array): void {
    this.live();
    this.drainPolicies();
    const ring = this.ringIndex(layer);
    if (ring >= 0) this.cfg.rings.exportSection(ring, tokens, out);
    else this.pool.exportLayer(layer, tokens, out);
  }

  exportInfinigen(tokens: number): InfinigenSequenceState | undefined {
    return this.active instanceof InfinigenPolicy ? this.active.state.exportSequence(tokens) : undefined;
  }

  exportPolicyState(tokens: number): PolicySequenceState | undefined {
    this.drainPolicies();
    return this.active.exportState?.(tokens);
  }

  policyStateNeeds(): { policy: string; layers: number[] } | undefined {
    return this.active.importState && this.active.stateLayers ? { policy: this.active.name, layers: this.active.stateLayers() } : undefined;
  }

  async skewId(): Promise<string | null> {
    if (!(this.active instanceof InfinigenPolicy)) return null;
    await this.active.state.loadCached();
    return this.active.state.skewId() ?? null;
  }

  async importSequence(tokens: number, readLayer: (layer: number, into: Uint8Array) => Promise<void>, infinigen: InfinigenSequenceState | undefined, policyState?: PolicySequenceState): Promise<void> {
    this.live();
    if (this.busy) throw new LonghandError('ENGINE_BUSY', 'the model runner is running a prefill or decode');
    if (!Number.isInteger(tokens) || tokens < 0 || tokens > Math.min(this.contextLength, this.pool.capacityTokens)) {
      throw new RangeError(`importSequence(${tokens}): the cache holds at most ${Math.min(this.contextLength, this.pool.capacityTokens)} tokens`);
    }
    const ig = this.active instanceof InfinigenPolicy ? this.active.state : undefined;
    if (ig && !infinigen && tokens > 0) throw new RangeError('importSequence: InfiniGen needs its sequence state');
    // the snapshot's columns are chosen through the skew it was written with: the runner must know one (skewId() loads the cached one)
    if (ig && infinigen && tokens > 0 && ig.skewId() === undefined) throw new LonghandError('SNAPSHOT_MISMATCH', 'importSequence: InfiniGen has no skew matrices for this model (none cached, none calibrated): the snapshot cannot be restored', { reason: 'skew' });
    if (this.active.importState && !policyState && tokens > 0) throw new RangeError(`importSequence: ${this.active.name} needs its own state (exportPolicyState's)`);
    this.busy = true;
    try {
      this.reset();
      if (ig && infinigen && tokens > 0) {
        // columns first, on the empty pool: each layer's import then builds its partial rows once, with them
        ig.importSequence(infinigen);
        ig.choosePartialColumns(this.pool);
      }
      const sizes = Array.from({ length: this.layers }, (_, l) => this.snapshotLayerBytes(tokens, l)); // layers may differ; a ring's is its window's
      const section = new Uint8Array(Math.max(0, ...sizes)); // one layer's packed rows, reused
      for (let l = 0; l < this.layers; l++) {
        // a ring's section holds the window before `tokens` (ringKeepRows), which must end there
        const ring = this.ringIndex(l);
        const rows = ring >= 0 ? ringKeepRows(this.cfg.rings.rings[ring]!.window, tokens) : tokens;
        const into = section.subarray(0, sizes[l]);
        await readLayer(l, into);
        this.pool.importLayer(l, rows, into);
        if (rows > 0 && this.pool.owns(l) && this.pool.position(l, this.pool.lastSlot(l)) !== tokens - 1) {
          throw new RangeError(`importSequence: layer ${l}'s rows end at position ${this.pool.position(l, this.pool.lastSlot(l))}, not at ${tokens - 1}`);
        }
      }
      this.pos = tokens;
      // after the rows: the policy's state is of the pool's tokens (a reset above cleared it)
      if (policyState && tokens > 0) this.active.importState?.(tokens, policyState);
    } catch (error) {
      this.busy = false;
      this.reset();
      throw error;
    }
    this.busy = false;
  }

  appendRandomContextForBenchmark(tokens: number, seed: number): void {
    this.live();
    if (!Number.isInteger(tokens) || tokens < 0 || this.pos + tokens > this.contextLength) {
      throw new RangeError(`appendRandomContextForBenchmark(${tokens}): the cache holds ${this.pos} of ${this.contextLength} tokens`);
    }
    if (this.pool.evicting) throw new RangeError('appendRandomContextForBenchmark: not with a pool budget (eviction)');
    if (this.cfg.recurrent) throw new RangeError('appendRandomContextForBenchmark: not for a model with linear-attention layers (random rows would leave their state behind)');
    this.drainPolicies();
    const widthOf = (l: number): number => this.pool.layerKvHeads(l) * this.pool.layerHeadDim(l);
    let widest = 0;
    for (let l = 0; l < this.layers; l++) widest = Math.max(widest, widthOf(l));
    const chunk = 256;
    const k = new Float32Array(chunk * widest); // [chunk, kvHeads·headDim] of the widest layer
    const v = new Float32Array(chunk * widest);
    // xorshift32, uniform on [−√3, √3) (unit variance): seeded, so every policy gets the same rows,
    // and cheap enough for 32,768 tokens × 16 layers × 4,096 values × 2
    let s = seed >>> 0 || 1;
    const uniform = (): number => {
      s ^= s << 13;
      s >>>= 0;
      s ^= s >>> 17;
      s ^= s << 5;
      s >>>= 0;
      return (s / 2147483648 - 1) * Math.sqrt(3);
    };
    for (let t0 = 0; t0 < tokens; t0 += chunk) {
      const T = Math.min(chunk, tokens - t0);
      for (let l = 0; l < this.layers; l++) {
        if (!this.pool.owns(l)) continue; // a KV-shared layer reads its source's rows
        const width = widthOf(l);
        for (let i = 0; i < T * width; i++) {
          k[i] = uniform();
          v[i] = uniform();
        }
        this.pool.appendBatch(l, k.subarray(0, T * width), v.subarray(0, T * width), this.pos + t0);
      }
    }
    this.placement.clear();
    this.pos += tokens;
    for (const p of this.step.distinctPolicies) p.appendedWithoutForward?.(this.pos);
  }

  timings(): ForwardTimings {
    return { ...this.step.t };
  }

  resetTimings(): void {
    this.step.t = emptyForwardTimings();
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.drainPolicies();
    for (const p of this.step.distinctPolicies) p.free?.();
    this.pool.free();
    await this.placement.dispose();
    await Promise.all(this.sessions.map((s) => s.release()));
  }

  // ─── internals ──────────────────────────────────────────────────────────────────────────

  /** The per-layer plan (policy/plan.ts): the chosen policy, and 'window' on a family's sliding-window layers. */
  private planFor(policy: RowPolicy): RowPolicy[] {
    // a KV-shared layer has no partial keys of its own: under InfiniGen it attends densely
    const shared = policy instanceof InfinigenPolicy ? new FullPolicy(this.layers) : undefined;
    return planLayers(this.specs, policy, (window) => createComparisonPolicy('window', { window, denseLayers: 0 }, { shape: this.cfg.shape, pool: this.pool, attention: this.attention }), shared);
  }

  /** Waits for what the policies have in flight (InfiniGen's queued jobs) before the pool is read or changed outside a step. */
  private drainPolicies(): void {
    for (const p of this.step.distinctPolicies) p.drain?.();
  }

  /** The cache keeps its first n tokens: what the policies and the placement derived from later ones goes. */
  private forgetFrom(n: number): void {
    for (const p of this.step.distinctPolicies) p.truncate(n);
    this.placement.clear();
    this.pos = n;
    this.stepReported = false;
  }

  private live(): void {
    if (this.disposed) throw new LonghandError('ENGINE_NOT_LOADED', 'the model runner has been disposed');
  }

  private enter(adding: number, signal: AbortSignal | undefined): void {
    this.live();
    if (this.busy) throw new LonghandError('ENGINE_BUSY', 'the model runner is already running a prefill or decode');
    if (signal?.aborted) throw new ForwardAbortedError(this.pos, { cause: signal.reason });
    if (this.pos + adding > this.contextLength) throw contextOverflow(this.pos, adding, this.contextLength);
    this.busy = true;
  }

  /** Cuts the cache back to `start` after a failure; returns where it is now (0 when a linear-attention state could not go back to `start`). */
  private rollback(start: number): number {
    if (this.disposed) return start;
    this.drainPolicies();
    // the state goes back to the start of the chunk that failed (its backup) or to nothing
    if (this.cfg.recurrent && !this.cfg.recurrent.cutTo(start)) {
      this.reset();
      return 0;
    }
    this.cutPool(start);
    this.forgetFrom(start);
    this.sequence?.truncate(start);
    return start;
  }

  /**
   * pool.truncate(n), and the rings' rule: a ring that no longer holds n's window gets the checkpoint
   * at n back (n is a resumePoint; a rollback of one chunk or step always finds the window in the ring).
   */
  private cutPool(n: number): void {
    if (this.cfg.recurrent && !this.cfg.recurrent.cutTo(n)) throw new RangeError(`the linear-attention state cannot be cut back to ${n}`);
    const covered = this.cfg.rings.covers(n);
    this.pool.truncate(n);
    this.cfg.rings.cutTo(n, covered);
  }

  /** The index of `layer` among the rings, or −1 for a layer that keeps every token. */
  private ringIndex(layer: number): number {
    return this.cfg.rings.rings.findIndex((r) => r.layer === layer);
  }

  private checkIds(ids: readonly number[]): void {
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new RangeError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
    }
  }

  private async runChunk(ids: readonly number[], o: ChunkOptions): Promise<Float32Array | undefined> {
    this.checkIds(ids);
    const listener = o.detached ? undefined : this.routingListener;
    if (listener) for (const session of this.sessions) session.forgetExperts?.();
    const logits = await this.step.run(ids, this.pos, o);
    if (listener) {
      const record = this.routingRecord(this.pos, ids.length);
      if (record) listener(record);
    }
    this.pos += ids.length;
    if (!o.detached) this.cfg.rings.noteEnd(this.pos);
    if (ids.length === 1 && !o.prompt && !o.detached) this.stepReported = this.step.trace.sparse;
    return logits;
  }

  private bosId(): number {
    if (this.model.tokenizer.kind === 'gguf') {
      const v = this.model.tokenizer.metadata.get('tokenizer.ggml.bos_token_id');
      const n = typeof v === 'bigint' ? Number(v) : v;
      if (typeof n === 'number' && Number.isInteger(n) && n >= 0 && n < this.vocabSize) return n;
    }
    return Math.min(1, this.vocabSize - 1);
  }
}

function argmax(x: Float32Array): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

/**
 * [layer] the rows each layer attends: its own kvHeads × headDim, or its kvSource's. A layer without
 * attention is refused (the step loop runs attention layers only; plan.ts says so too).
 */
function layerRowShapes(specs: readonly LayerSpec[]): LayerRowShape[] {
  // a linear-attention layer: 0 KV heads (no rows; its state is held beside the pool), with the
  // attention layers' head dim so that per-layer checks of a row width (skew calibration) hold
  const firstAttention = specs.find((spec) => spec.attention.kind === 'attention')?.attention;
  const linearHeadDim = firstAttention?.kind === 'attention' ? firstAttention.headDim : 1;
  return specs.map((spec, l) => {
    if (isLinear(spec)) return { kvHeads: 0, headDim: linearHeadDim };
    const owner = kvOwner(specs, l);
    const a = owner === undefined ? undefined : specs[owner]!.attention;
    if (a === undefined || a.kind !== 'attention') throw new UsageError(`layer ${l} has no attention (no KV rows): the forward pass runs attention layers only`, { field: 'model', layer: l });
    return { kvHeads: a.kvHeads, headDim: a.headDim };
  });
}

/** [layer] each layer's RoPE for the step's feeds; layers with equal RoPE share one object (one set of rows per chunk). */
function layerRopes(specs: readonly LayerSpec[], contextLength: number): (RopeFrequencies | undefined)[] {
  const seen = new Map<string, RopeFrequencies>();
  return specs.map((spec) => {
    if (spec.attention.kind !== 'attention') return undefined;
    const r = ropeFrequencies(spec.attention, contextLength); // the session's context picks LongRoPE's factor set
    if (r === undefined) return undefined;
    const key = JSON.stringify(r);
    const same = seen.get(key);
    if (same) return same;
    seen.set(key, r);
    return r;
  });
}

/** The per-layer token table (EmbeddingSpec.perLayerTable), read row by row with its pages released as the token table's are. */
function perLayerTable(model: LoadedModel, name: string): EmbeddingTable {
  return new EmbeddingTable(model.tensors.get(name)!, model.releaseTensor ? () => model.releaseTensor!(name) : undefined);
}
