// The forward pass: token ids in, next-token logits out, with the KV cache in the native pool.
//
//   ids ─► embedding rows (JS, from the mapped file) ─► stage 0 ─► for ℓ in 0..L−1:
//            append k,v of the chunk to the pool (layer ℓ) ─► causal attention (native)
//            ─► stage ℓ+1 (post(ℓ) fused with pre(ℓ+1); the last one ends in the LM head)
//
// Policy 'infinigen' (llama family; ARCHITECTURE.md §3–§4, see infinigen.ts): prefill stays dense;
// in a decode step, stage ℓ−1 also outputs layer ℓ's speculative query, the native speculator
// selects and gathers layer ℓ's rows on its own thread while layer ℓ−1's attention and stage ℓ run,
// and layer ℓ (>= denseLayers) attends to [gathered rows, current token].
//
// Policies 'streaming' | 'h2o' | 'quest' | 'oracle' | 'snapkv' (sparse-policies.ts): prefill stays
// dense; in a decode step, layer ℓ (>= denseLayers) selects per KV head with the real query right
// before its attention, and attends to [selected rows, current token] (native attendSlots).
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
// an abort rolls the pool back to where the call started. Nothing in a step allocates in native
// code; JS allocates only the small per-step arrays onnxruntime hands back.
import { LonghandError } from '../../common/errors.ts';
import type { TokenRunner } from '../generate/loop.ts';
import type { LoadedModel } from '../model/types.ts';
import { kvRowBytes } from '../model/memory-estimate.ts';
import { ropeRows, type RopeFrequencies } from '../onnx/ops.ts';
import type { TensorData } from '../onnx/graph-builder.ts';
import { UsageError } from '../../common/errors.ts';
import type { LoadProgress } from '../../common/protocol.ts';
import { attendCausal, attendSlots, createKvPool, createSpeculator, type KvPool, type KvType, type Speculator } from '../../../native/index.js';
import { CALIBRATION_TOKENS, infinigenSettings, InfinigenState, speculatorInlineThreads, layerStatsFrom, summarizeStep, type InfinigenLayerStats, type InfinigenOptions, type InfinigenSequenceState, type InfinigenSettings, type InfinigenStepStats } from './infinigen.ts';
import { EmbeddingTable } from './embedding.ts';
import type { StepProbe } from '../metrics/step-probe.ts';
import { packSlotLists, SPARSE_POLICIES, SparsePolicyState, type SparsePolicyName, type SparsePolicyOptions } from './sparse-policies.ts';
import { contextOverflow, ForwardAbortedError } from './errors.ts';
import { stageRope, type StageGraph } from './graphs.ts';
import { createNativeStages, nativeDenseUnsupported, type DenseKernelName, type StageRunner } from './native-stages.ts';
import { createStageSessions, type StageCacheOptions } from './stage-sessions.ts';
import type { StageCacheStats } from './stage-cache.ts';
import { ModelWeights, type AccuracyLevel } from './weights.ts';
import { OffloadAttention, type OffloadStepStats } from './offload-attention.ts';

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
   * Offload mode (issue 14; offload-attention.ts): decode-step attention runs in an onnxruntime graph over
   * a device-side row buffer fed only the rows it lacks from the pool; policies 'full' and 'infinigen'.
   */
  offload?: boolean;
  /** Offload mode: how misses reach the row buffer (default 'host' on the CPU provider, 'graph' on others; offload-attention.ts). */
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
}

export type DenseEngine = 'auto' | 'native' | 'onnx';

export type RunnerDense = { engine: 'native'; kernel: DenseKernelName } | { engine: 'onnx'; whyNotNative?: string };

/** How far createModelRunner is: stages (repacked weights + onnxruntime session) built so far. */
export type { LoadProgress } from '../../common/protocol.ts';

/** The part of ModelRunnerOptions that a policy switch changes. */
export type RunnerPolicyOptions = Pick<ModelRunnerOptions, 'policy' | 'infinigen' | 'sparse'>;

export interface EvictionOptions {
  /** first positions never evicted (default 4) */
  sinks?: number;
  /** newest tokens never evicted (default 64) */
  recent?: number;
  /** counters halve every this many decode steps of a layer (default 32) */
  ageEvery?: number;
}

export const EVICTION_DEFAULTS: Required<EvictionOptions> = { sinks: 4, recent: 64, ageEvery: 32 };

/** The policies the forward pass runs (ARCHITECTURE.md §6). */
export type RunnerPolicy = 'full' | 'infinigen' | SparsePolicyName;
export const RUNNER_POLICIES: readonly RunnerPolicy[] = ['full', 'infinigen', ...SPARSE_POLICIES];
export type { SparsePolicyName, SparsePolicyOptions } from './sparse-policies.ts';

export type { InfinigenLayerStats, InfinigenOptions, InfinigenStepStats } from './infinigen.ts';

/** Milliseconds spent per part of the forward pass since the last resetTimings(). */
export interface ForwardTimings {
  embedding: number;
  /** stage 0 and the fused post/pre stages */
  layerGraphs: number;
  /** the last stage: post(L−1), final norm, LM head */
  headGraph: number;
  append: number;
  attention: number;
  /** whole calls minus the parts above: feeds, checks, awaits */
  other: number;
  total: number;
  tokens: number;
  calls: number;
}

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
   * checkpointed every 64 positions). 0 after an eviction (the pool no longer holds a prefix).
   */
  resumePoint(n: number): number;
  /**
   * Switches to another policy keeping the onnxruntime sessions, the pool and the cached tokens, when
   * the new policy needs the same stage graphs and pool layout (every policy but 'infinigen' builds
   * the same ones; infinigen to infinigen when only alpha/fetchCap differ). The policy's own state is
   * rebuilt from the pool. Returns false, changing nothing, when the layouts differ.
   */
  tryAdoptPolicy(options: RunnerPolicyOptions): boolean;
  /** Bytes of one layer's snapshot section for `tokens` tokens (native pool export layout). */
  snapshotLayerBytes(tokens: number): number;
  /** Packs the first `tokens` tokens of a layer (K, V rows, int8 scales, positions) into `out`. */
  exportLayer(layer: number, tokens: number, out: Uint8Array): void;
  /** Offload mode: the latest decode step's bytes crossed, hits and misses per layer (undefined otherwise or before one). */
  lastOffloadStep?(): OffloadStepStats | undefined;
  /** Offload mode: bytes of the device-side row buffer (0 otherwise). */
  readonly rowBufferBytes?: number;
  /** InfiniGen's sequence state at `tokens` (a resumePoint) for a snapshot; undefined under other policies. */
  exportInfinigen(tokens: number): InfinigenSequenceState | undefined;
  /** The skew's identity under InfiniGen (loads the cached skew file when none is known yet); null otherwise or when none exists. */
  skewId(): Promise<string | null>;
  /**
   * Replaces the cache with `tokens` restored tokens: every layer's section is read by `readLayer`
   * into the buffer it is given and imported into the pool; InfiniGen's state (required under
   * 'infinigen') restored and its columns chosen. Any failure leaves the cache empty.
   */
  importSequence(tokens: number, readLayer: (layer: number, into: Uint8Array) => Promise<void>, infinigen: InfinigenSequenceState | undefined): Promise<void>;
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
  lastStepStats(): InfinigenStepStats | undefined;
  /** The latest selection of a sparse layer as token positions, union over KV heads (InfiniGen and the comparison policies; undefined otherwise). */
  selectedPositions(layer: number): number[] | undefined;
  /** The inspector's probe (app/engine/metrics/step-probe.ts): measures the decode steps it arms; undefined detaches it. */
  setProbe(probe: StepProbe | undefined): void;
  /** Bytes of InfiniGen's partial key rows for the tokens in the pool (0 without them). */
  partialKeyBytes(): number;
  /** The comparison policy's state (its selections, snapkv's kept prompt), for tests; undefined under 'full' and 'infinigen'. */
  readonly sparsePolicy: SparsePolicyState | undefined;
  /** Where the skew matrices came from under 'infinigen' (undefined until the first prefill). */
  readonly skewSource: 'cache' | 'prompt' | 'self-generated' | undefined;
  /** Where InfiniGen's speculation runs (its `speculation` option resolved for this runner's threads); undefined under other policies. */
  readonly speculationPlacement: 'side-thread' | 'inline' | undefined;
  dispose(): Promise<void>;
}

const DEFAULT_MAX_CONTEXT = 4096;
/** the native attention calls' most threads (native LH_MAX_ATTENTION_THREADS) */
const MAX_ATTENTION_THREADS = 64;

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
  if (hyper.architecture === 'opt' && contextLength > hyper.contextLength) {
    throw contextOverflow(0, contextLength, hyper.contextLength); // learned positions end there
  }
  const prefillChunk = options.prefillChunk ?? 128;
  if (!Number.isInteger(prefillChunk) || prefillChunk < 1) throw new RangeError(`prefillChunk must be a positive integer, got ${prefillChunk}`);
  if (options.device !== undefined && options.device !== 'cpu' && !(options.offload === true && (options.device === 'webgpu' || options.device === 'cuda'))) {
    throw new LonghandError('DEVICE_UNAVAILABLE', `device ${String(options.device)} is not supported by the forward pass yet (webgpu and cuda: with offload only)`);
  }
  const providers = options.device !== undefined && options.device !== 'cpu' ? [options.device] : undefined;
  const threads = options.threads ?? 1;
  const kvType = options.kvType ?? 'fp16';
  const policy = options.policy ?? 'full';
  if (!RUNNER_POLICIES.includes(policy)) throw new UsageError(`policy must be one of ${RUNNER_POLICIES.join(', ')}, got ${String(policy)}`, { field: 'policy' });
  if (policy !== 'full' && hyper.architecture === 'opt') {
    throw new UsageError(`policy '${policy}' supports the llama family only (OPT runs with 'full')`, { field: 'policy', architecture: hyper.architecture });
  }
  const budget = options.poolBudgetBytes;
  if (budget !== undefined) {
    if (!Number.isSafeInteger(budget) || budget < 1) throw new UsageError(`poolBudgetBytes must be a positive integer, got ${String(budget)}`, { field: 'poolBudgetBytes' });
    if (policy !== 'full' && policy !== 'infinigen') {
      throw new UsageError(`poolBudgetBytes (eviction) supports policies 'full' and 'infinigen' only, got '${policy}'`, { field: 'poolBudgetBytes', policy });
    }
  }
  if (options.offload === true && policy !== 'full' && policy !== 'infinigen') {
    throw new UsageError(`offload supports policies 'full' and 'infinigen' only, got '${policy}'`, { field: 'offload', policy });
  }
  const eviction = { ...EVICTION_DEFAULTS, ...(options.eviction ?? {}) };
  const ig = policy === 'infinigen' ? infinigenSettings(options.infinigen ?? {}, hyper.headDim, hyper.layers) : undefined;
  const sparseName = (SPARSE_POLICIES as readonly string[]).includes(policy) ? (policy as SparsePolicyName) : undefined;
  const weights = new ModelWeights(model, options.accuracyLevel ?? 4);

  const speculates = stagesSpeculating(hyper.layers, ig);
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
  const p = ig?.partialDim ?? 0;
  const bytesPerToken = hyper.layers * hyper.kvHeads * (2 * kvRowBytes(kvType, hyper.headDim) + 4 + 2 * p);
  const projBytes = p > 0 ? hyper.layers * hyper.kvHeads * hyper.headDim * p * 4 + hyper.layers * 4 + 3 * 64 : 0;
  const scalePadding = kvType === 'int8' ? 2 * 64 : 0; // the int8 scale regions start on their own lines
  const pool = createKvPool({
    budgetBytes: budget ?? contextLength * bytesPerToken + 4 * 64 + hyper.layers * 4 + 64 + projBytes + scalePadding,
    ...(budget !== undefined ? { eviction } : {}),
    layers: hyper.layers,
    kvHeads: hyper.kvHeads,
    headDim: hyper.headDim,
    kvType,
    ...(p > 0 ? { partialDim: p } : {}),
  });
  let infinigen: { state: InfinigenState; spec: Speculator; inlineThreads: number } | undefined;
  if (ig) {
    const inlineThreads = speculatorInlineThreads(ig.speculation, threads);
    const spec = createSpeculator(pool, { heads: hyper.heads, alpha: ig.alpha, cap: ig.fetchCap, denseLayers: ig.denseLayers, inlineThreads });
    infinigen = { state: new InfinigenState(ig, { layers: hyper.layers, heads: hyper.heads, kvHeads: hyper.kvHeads, headDim: hyper.headDim }, model), spec, inlineThreads };
  }
  let offload: OffloadAttention | undefined;
  if (options.offload === true) {
    // sparse layers attend at most fetchCap·N selected rows + the current token; the buffer grows if a list is longer
    const sparseRows = ig ? Math.min(pool.capacityTokens, Math.ceil(ig.fetchCap * pool.capacityTokens) + 2) : pool.capacityTokens;
    const initialRowsPerHead = Array.from({ length: hyper.layers }, (_, l) => (ig && l >= ig.denseLayers ? sparseRows : pool.capacityTokens));
    try {
      offload = await OffloadAttention.create(pool, { heads: hyper.heads, threads, initialRowsPerHead, ...(providers ? { providers } : {}), ...(options.offloadRowUpdate ? { rowUpdate: options.offloadRowUpdate } : {}) });
    } catch (error) {
      pool.free();
      await Promise.all(sessions.map((s) => s.release()));
      throw error;
    }
  }
  const sparse = sparseName ? new SparsePolicyState(sparseName, options.sparse ?? {}, { layers: hyper.layers, heads: hyper.heads, kvHeads: hyper.kvHeads, headDim: hyper.headDim, contextLength, threads }, pool) : undefined;
  return new Runner(model, sessions, graphs, pool, infinigen, sparse, {
    contextLength,
    prefillChunk,
    kvType,
    threads,
    graphWeightBytes,
    eosIds: options.eosIds ?? ggufEosIds(model),
    speculates,
    stageCache,
    dense,
    ...(offload ? { offload } : {}),
  });
}

/** Per stage s (0..layers): does it also output layer s+1's speculative query (InfiniGen's sparse layers)? */
function stagesSpeculating(layers: number, ig: InfinigenSettings | undefined): boolean[] {
  return Array.from({ length: layers + 1 }, (_, s) => ig !== undefined && s + 1 >= ig.denseLayers && s + 1 < layers);
}

interface RunnerConfig {
  contextLength: number;
  prefillChunk: number;
  kvType: KvType;
  /** onnxruntime's intra-op threads; native attention uses as many (between the graphs the cores are idle):
   * a prefill chunk's queries, or one decode query's KV heads, are spread over them */
  threads: number;
  graphWeightBytes: number;
  eosIds: readonly number[];
  /** the stage graphs' speculateNext flags (what a policy switch must match to keep the sessions) */
  speculates: boolean[];
  /** offload mode's attention (offload-attention.ts) */
  offload?: OffloadAttention;
  stageCache: StageCacheStats | undefined;
  dense: RunnerDense;
}

const f32 = (dims: number[], data: Float32Array): TensorData => ({ elemType: 'float32', dims, data });

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
  private readonly tokenEmbd: EmbeddingTable;
  private readonly positionEmbd: EmbeddingTable | undefined;
  private readonly positionOffset: number;
  /** RoPE of the stage graphs (llama family; OPT adds learned position embeddings instead) */
  private readonly rope: RopeFrequencies | undefined;
  private readonly d: number;
  private readonly qw: number;
  private readonly heads: number;
  private readonly layers: number;
  private readonly prefillChunk: number;
  private readonly scratch: Float32Array;
  private readonly attnOne: Float32Array;
  private t: ForwardTimings = emptyTimings();
  /** InfiniGen while it is the policy (it speculates) */
  private ig: InfinigenState | undefined;
  private spec: Speculator | undefined;
  /** the speculator's inlineThreads, resolved once at its creation (0: it has its own side thread) */
  private specInlineThreads = 0;
  /**
   * InfiniGen's sequence state while another policy runs on InfiniGen's graphs and pool: it still
   * folds every prompt chunk's column energies, so switching back keeps the cache exact.
   */
  private dormantIg: InfinigenState | undefined;
  /** the self-generated calibration run is going on: its tokens are not the sequence's */
  private selfCalibrating = false;
  private lastStep: InfinigenStepStats | undefined;
  private probe: StepProbe | undefined;
  /** [layer] evictions seen at the end of the previous step (for the per-step figure) */
  private evictedBefore: number[];
  /** offload mode: attention in an onnxruntime graph over the device-side row buffer */
  private readonly off: OffloadAttention | undefined;
  /** [stage] start/end ns of the latest run of each stage (for the overlap figures) */
  private readonly stageNs: [number, number][];

  constructor(
    private readonly model: LoadedModel,
    private readonly sessions: StageRunner[],
    private readonly graphs: StageGraph[],
    private readonly pool: KvPool,
    infinigen: { state: InfinigenState; spec: Speculator; inlineThreads: number } | undefined,
    private sparse: SparsePolicyState | undefined,
    private readonly cfg: RunnerConfig,
  ) {
    this.ig = infinigen?.state;
    this.spec = infinigen?.spec;
    this.specInlineThreads = infinigen?.inlineThreads ?? 0;
    this.stageNs = graphs.map(() => [0, 0]);
    this.off = cfg.offload;
    const h = model.hyper;
    this.contextLength = cfg.contextLength;
    this.vocabSize = h.vocabSize;
    this.kvType = cfg.kvType;
    this.eosIds = cfg.eosIds;
    this.graphWeightBytes = cfg.graphWeightBytes;
    this.stageCache = cfg.stageCache;
    this.dense = cfg.dense;
    this.prefillChunk = cfg.prefillChunk;
    this.d = h.hiddenSize;
    this.heads = h.heads;
    this.qw = h.heads * h.headDim;
    this.layers = h.layers;
    // Its pages are dropped now and then (embedding.ts says why), unless the table is also the LM
    // head: then every step streams it whole from pages the dense stages made their own.
    const tiedHead = !model.tensors.has('output.weight');
    this.tokenEmbd = new EmbeddingTable(model.tensors.get('token_embd.weight')!, tiedHead || !model.releaseTensor ? undefined : () => model.releaseTensor!('token_embd.weight'));
    const posView = model.tensors.get('position_embd.weight');
    this.positionEmbd = h.architecture === 'opt' && posView ? new EmbeddingTable(posView) : undefined;
    this.positionOffset = h.positionOffset ?? 2;
    this.rope = h.architecture === 'opt' ? undefined : stageRope(h);
    this.scratch = new Float32Array(this.d);
    this.attnOne = new Float32Array(this.qw);
    this.evictedBefore = new Array<number>(h.layers).fill(0);
  }

  get poolCapacityTokens(): number {
    return this.pool.capacityTokens;
  }

  evictions(): number[] {
    if (!this.pool.evicting) return new Array<number>(this.layers).fill(0);
    return Array.from({ length: this.layers }, (_, l) => this.pool.evictions(l));
  }

  get position(): number {
    return this.pos;
  }

  get poolBytes(): number {
    return this.pool.byteLength;
  }

  get policy(): RunnerPolicy {
    return this.ig ? 'infinigen' : (this.sparse?.name ?? 'full');
  }

  get sparsePolicy(): SparsePolicyState | undefined {
    return this.sparse;
  }

  get skewSource(): 'cache' | 'prompt' | 'self-generated' | undefined {
    return this.ig?.skewSource;
  }

  get speculationPlacement(): 'side-thread' | 'inline' | undefined {
    if (!this.ig || !this.spec) return undefined;
    return this.specInlineThreads > 0 ? 'inline' : 'side-thread';
  }

  lastStepStats(): InfinigenStepStats | undefined {
    return this.lastStep;
  }

  lastOffloadStep(): OffloadStepStats | undefined {
    return this.off?.lastStep();
  }

  get rowBufferBytes(): number {
    return this.off?.rows.byteLength ?? 0;
  }

  selectedPositions(layer: number): number[] | undefined {
    // the latest selection of a sparse layer, as token positions (union over KV heads)
    if ((!this.spec && !this.sparse) || !this.lastStep || layer < 0 || layer >= this.layers) return undefined;
    if (this.lastStep.layers.find((s) => s.layer === layer)?.dense !== false) return undefined;
    const positions = new Set<number>();
    for (const list of this.selectionLists(layer)) for (const slot of list) positions.add(this.pool.position(layer, slot));
    return [...positions].sort((a, b) => a - b);
  }

  /** Per KV head the latest selected slots of a sparse layer (the current token not included). */
  private selectionLists(layer: number): Int32Array[] {
    if (this.spec) return Array.from({ length: this.pool.kvHeads }, (_, h) => this.spec!.selected(layer, h));
    return this.sparse?.selection(layer) ?? [];
  }

  setProbe(probe: StepProbe | undefined): void {
    this.probe = probe;
  }

  partialKeyBytes(): number {
    const tokens = Math.min(this.pos, this.pool.capacityTokens);
    return this.pool.partialDim * 2 * this.pool.kvHeads * this.layers * tokens;
  }

  async prefill(ids: readonly number[], signal?: AbortSignal, opts: PrefillOptions = {}): Promise<Float32Array> {
    this.enter(ids.length, signal);
    const start = this.pos;
    this.lastStep = undefined; // the latest decode step's figures (and staged selections) end with a new prompt
    try {
      if (ids.length === 0) throw new RangeError('prefill needs at least one token');
      if (this.ig && !this.ig.skew) await this.infinigenBeforePrompt(ids.length, start, signal);
      const all = opts.allLogits === true;
      const parts: Float32Array[] = [];
      let last: Float32Array | undefined;
      for (let at = 0; at < ids.length; ) {
        // under a budget a chunk never exceeds the free slots; a full pool takes one token (evicting) at a time
        const size = this.pool.evicting ? Math.max(1, Math.min(this.prefillChunk, this.pool.capacityTokens - this.pool.length(0))) : this.prefillChunk;
        const chunk = ids.slice(at, at + size);
        at += chunk.length;
        const isLast = at >= ids.length;
        const logits = await this.runChunk(chunk, all ? 'all' : isLast ? 'last' : 'none', signal, true);
        if (all) parts.push(logits!);
        else if (isLast) last = logits;
      }
      await this.infinigenAfterPrompt();
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
      // there), unless a calibration on this prompt was running: its skew would come from a part.
      const keep = error instanceof ForwardAbortedError && !this.ig?.calibrator ? this.pos : start;
      this.columnState?.discardChunk();
      if (this.ig?.calibrator) this.ig.calibrator = undefined;
      this.rollback(keep);
      throw error instanceof ForwardAbortedError && keep !== error.position ? new ForwardAbortedError(keep, { cause: error.cause }) : error;
    } finally {
      this.busy = false;
    }
  }

  async decode(id: number, signal?: AbortSignal): Promise<Float32Array> {
    this.enter(1, signal);
    const start = this.pos;
    try {
      return (await this.runChunk([id], 'last', signal))!;
    } catch (error) {
      this.columnState?.discardChunk();
      this.rollback(start);
      throw error;
    } finally {
      this.busy = false;
    }
  }

  reset(): void {
    this.live();
    this.spec?.drain();
    this.pool.reset();
    this.evictedBefore.fill(0);
    this.spec?.clearStaging();
    this.sparse?.truncate(0);
    this.columnState?.clearSequence();
    this.off?.clear();
    this.pos = 0;
    this.lastStep = undefined;
  }

  truncate(n: number): void {
    this.live();
    if (!Number.isInteger(n) || n < 0 || n > this.pos) throw new RangeError(`truncate(${n}): the cache holds ${this.pos} tokens`);
    this.spec?.drain();
    this.pool.truncate(n);
    this.spec?.clearStaging();
    this.sparse?.truncate(n);
    this.columnState?.truncate(n);
    this.off?.clear();
    this.pos = n;
    this.lastStep = undefined;
  }

  resumePoint(n: number): number {
    if (!Number.isInteger(n) || n < 0 || n > this.pos) throw new RangeError(`resumePoint(${n}): the cache holds ${this.pos} tokens`);
    if (this.pool.evicting && this.pool.evictionsTotal() > 0) return 0;
    // a dormant InfiniGen state counts too: cutting it between checkpoints would cost a switch back its exactness
    return this.columnState ? this.columnState.resumePoint(n) : n;
  }

  tryAdoptPolicy(options: RunnerPolicyOptions): boolean {
    this.live();
    if (this.busy) throw new LonghandError('ENGINE_BUSY', 'the model runner is running a prefill or decode');
    const hyper = this.model.hyper;
    const policy = options.policy ?? 'full';
    if (!RUNNER_POLICIES.includes(policy) || (policy !== 'full' && hyper.architecture === 'opt')) return false;
    if (this.pool.evicting && policy !== 'full' && policy !== 'infinigen') return false;
    if (this.off && policy !== 'full' && policy !== 'infinigen') return false; // offload runs those two only: rebuilding says so
    const ig = policy === 'infinigen' ? infinigenSettings(options.infinigen ?? {}, hyper.headDim, hyper.layers) : undefined;
    const speculates = stagesSpeculating(hyper.layers, ig);
    // InfiniGen needs exactly its graphs and partial keys; every other policy runs on any graphs
    // (InfiniGen's extra speculative-query outputs are ignored) and ignores partial keys
    if (ig && (speculates.some((f, s) => f !== this.cfg.speculates[s]) || ig.partialDim !== this.pool.partialDim)) return false;
    const kept = this.columnState;
    const old = kept?.settings;
    // InfiniGen's sequence state (column energies, skew) holds only for the same sparse layers, r and skew source
    if (ig && (!old || old.denseLayers !== ig.denseLayers || old.partialRatio !== ig.partialRatio || old.cacheDir !== ig.cacheDir || ig.recalibrate)) return false;
    const sparseName = (SPARSE_POLICIES as readonly string[]).includes(policy) ? (policy as SparsePolicyName) : undefined;
    // build what can fail before anything is given up
    const sparse = sparseName ? new SparsePolicyState(sparseName, options.sparse ?? {}, { layers: hyper.layers, heads: hyper.heads, kvHeads: hyper.kvHeads, headDim: hyper.headDim, contextLength: this.contextLength, threads: this.cfg.threads }, this.pool) : undefined;
    this.spec?.drain();
    if (ig) {
      const inlineThreads = speculatorInlineThreads(ig.speculation, this.cfg.threads);
      const spec = createSpeculator(this.pool, { heads: hyper.heads, alpha: ig.alpha, cap: ig.fetchCap, denseLayers: ig.denseLayers, inlineThreads });
      this.spec?.free();
      this.spec = spec;
      this.specInlineThreads = inlineThreads;
      kept!.settings = ig;
      this.ig = kept;
      this.dormantIg = undefined;
    } else {
      this.spec?.free();
      this.spec = undefined;
      this.dormantIg = kept;
      this.ig = undefined;
    }
    this.sparse = sparse;
    this.lastStep = undefined;
    return true;
  }

  snapshotLayerBytes(tokens: number): number {
    return this.pool.snapshotLayerBytes(tokens);
  }

  exportLayer(layer: number, tokens: number, out: Uint8Array): void {
    this.live();
    this.spec?.drain();
    this.pool.exportLayer(layer, tokens, out);
  }

  exportInfinigen(tokens: number): InfinigenSequenceState | undefined {
    return this.ig?.exportSequence(tokens);
  }

  async skewId(): Promise<string | null> {
    if (!this.ig) return null;
    await this.ig.loadCached();
    return this.ig.skewId() ?? null;
  }

  async importSequence(tokens: number, readLayer: (layer: number, into: Uint8Array) => Promise<void>, infinigen: InfinigenSequenceState | undefined): Promise<void> {
    this.live();
    if (this.busy) throw new LonghandError('ENGINE_BUSY', 'the model runner is running a prefill or decode');
    if (!Number.isInteger(tokens) || tokens < 0 || tokens > Math.min(this.contextLength, this.pool.capacityTokens)) {
      throw new RangeError(`importSequence(${tokens}): the cache holds at most ${Math.min(this.contextLength, this.pool.capacityTokens)} tokens`);
    }
    if (this.ig && !infinigen && tokens > 0) throw new RangeError('importSequence: InfiniGen needs its sequence state');
    this.busy = true;
    try {
      this.reset();
      if (this.ig && infinigen && tokens > 0) {
        // columns first, on the empty pool: each layer's import then builds its partial rows once, with them
        this.ig.importSequence(infinigen);
        this.ig.choosePartialColumns(this.pool);
      }
      const section = new Uint8Array(this.pool.snapshotLayerBytes(tokens)); // one layer's packed rows, reused
      for (let l = 0; l < this.layers; l++) {
        await readLayer(l, section);
        this.pool.importLayer(l, tokens, section);
      }
      this.pos = tokens;
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
    this.spec?.drain();
    const width = this.pool.kvHeads * this.pool.headDim;
    const chunk = 256;
    const k = new Float32Array(chunk * width); // [chunk, kvHeads·headDim]
    const v = new Float32Array(chunk * width);
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
        for (let i = 0; i < T * width; i++) {
          k[i] = uniform();
          v[i] = uniform();
        }
        this.pool.appendBatch(l, k.subarray(0, T * width), v.subarray(0, T * width), this.pos + t0);
      }
    }
    this.spec?.clearStaging();
    this.off?.clear();
    this.pos += tokens;
    this.sparse?.appendedForBenchmark(this.pos);
  }

  timings(): ForwardTimings {
    return { ...this.t };
  }

  resetTimings(): void {
    this.t = emptyTimings();
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.spec?.free();
    this.pool.free();
    await this.off?.dispose();
    await Promise.all(this.sessions.map((s) => s.release()));
  }

  // ─── internals ──────────────────────────────────────────────────────────────────────────

  /** Whichever InfiniGen state keeps the sequence's column energies: the active one or the dormant one. */
  private get columnState(): InfinigenState | undefined {
    return this.ig ?? this.dormantIg;
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

  private rollback(start: number): void {
    if (this.disposed) return;
    this.spec?.drain();
    this.spec?.clearStaging();
    this.pool.truncate(start);
    this.sparse?.truncate(start);
    this.columnState?.truncate(start);
    this.pos = start;
  }

  private checkIds(ids: readonly number[]): void {
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new RangeError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
    }
  }

  /** A dense layer of an InfiniGen step: every past token, all of it counted as fetched. */
  private denseLayerStats(l: number, N: number): InfinigenLayerStats {
    const rowBytes = kvRowBytes(this.kvType, this.model.hyper.headDim);
    const bytes = N * this.model.hyper.kvHeads * 2 * rowBytes;
    return { layer: l, dense: true, selected: N, candidates: N, fetchRatio: N > 0 ? 1 : 0, bytes, hits: 0, misses: 0, speculationMs: 0, gatherMs: 0, waitMs: 0, attentionMs: 0 };
  }

  /**
   * Before a prompt while the skew is unknown: the cache file, else a calibration on this prompt
   * (long enough, or when tokens are cached already) or on text the model writes itself (an empty
   * cache only: that run uses the pool and forgets it).
   */
  private async infinigenBeforePrompt(promptTokens: number, start: number, signal: AbortSignal | undefined): Promise<void> {
    const ig = this.ig!;
    if (await ig.loadCached()) return;
    ig.startCalibration();
    if (promptTokens >= CALIBRATION_TOKENS || start > 0) return;
    // greedy from BOS; the runner is dense while a calibrator is set
    this.selfCalibrating = true;
    try {
      const bos = this.bosId();
      let logits = (await this.runChunk([bos], 'last', signal))!;
      for (let i = 1; i < CALIBRATION_TOKENS && this.pos < this.contextLength; i++) {
        logits = (await this.runChunk([argmax(logits)], 'last', signal))!;
      }
    } finally {
      this.selfCalibrating = false;
      this.spec!.drain();
      this.pool.reset();
      this.evictedBefore.fill(0);
      this.pos = 0;
    }
    await ig.finishCalibration('self-generated');
  }

  /** After a prompt: finish a calibration that ran on it, choose the columns again over the sequence, set the projections. */
  private async infinigenAfterPrompt(): Promise<void> {
    const ig = this.ig;
    if (!ig) return;
    if (ig.calibrator) await ig.finishCalibration('prompt');
    ig.choosePartialColumns(this.pool);
    this.spec!.clearStaging();
  }

  private bosId(): number {
    if (this.model.tokenizer.kind === 'gguf') {
      const v = this.model.tokenizer.metadata.get('tokenizer.ggml.bos_token_id');
      const n = typeof v === 'bigint' ? Number(v) : v;
      if (typeof n === 'number' && Number.isInteger(n) && n >= 0 && n < this.vocabSize) return n;
    }
    return Math.min(1, this.vocabSize - 1);
  }

  /** One chunk through every layer; returns logits of 'last' / 'all' rows, or nothing. `prompt`: a prefill chunk (InfiniGen folds its q/k into the column energies). */
  private async runChunk(ids: readonly number[], rows: 'last' | 'all' | 'none', signal: AbortSignal | undefined, prompt = false): Promise<Float32Array | undefined> {
    this.checkIds(ids);
    const t0 = performance.now();
    const T = ids.length;
    const p0 = this.pos;
    const d = this.d;

    const h = new Float32Array(T * d);
    for (let i = 0; i < T; i++) {
      this.tokenEmbd.readRow(ids[i]!, h, i * d);
      if (this.positionEmbd) this.positionEmbd.addRow(p0 + i + this.positionOffset, h, i * d, this.scratch);
    }
    const t1 = performance.now();
    this.t.embedding += t1 - t0;

    // RoPE (llama family): the cos/sin rows of positions p0..p0+T−1, read by the graphs at rows 0..T−1 (graphs.ts)
    const pos: TensorData = { elemType: 'int64', dims: [1, T], data: BigInt64Array.from({ length: T }, (_, i) => BigInt(i)) };
    const rope: Record<string, TensorData> = {};
    if (this.rope) {
      const { cos, sin } = ropeRows(this.rope, p0, T);
      rope.rope_cos = f32([T, cos.length / T], cos);
      rope.rope_sin = f32([T, sin.length / T], sin);
    }
    const hT = f32([1, T, d], h);
    const attnDims = [1, T, this.qw];
    let out = await this.runStage(0, { h: hT, pos, ...rope }, 'layer');
    let residual = hT;
    let logits: Float32Array | undefined;
    // InfiniGen: a decode step once the columns are chosen speculates; prefill stays dense
    const ig = this.ig;
    const spec = this.spec;
    // a prompt chunk is dense under every policy, even one of a single token (the re-run last token of a reused prompt)
    const sparse = ig !== undefined && spec !== undefined && ig.ready && T === 1 && !prompt && ig.calibrator === undefined;
    const dense = ig?.settings.denseLayers ?? this.layers;
    const columns = this.columnState;
    if (columns && prompt && !this.selfCalibrating) columns.startChunk(p0, T);
    const stepLayers: InfinigenLayerStats[] = [];
    const sp = this.sparse;
    const spStep = sp !== undefined && T === 1 && !prompt;
    // the inspector's probe: evictions of every decode step, recall of the steps it arms
    const probe = T === 1 && !prompt ? this.probe : undefined;
    const measure = probe?.armed === true && (sparse || spStep);
    // offload mode covers decode steps (a prompt chunk attends natively, causal, in place)
    const off = T === 1 && !prompt && !this.selfCalibrating ? this.off : undefined;
    const attentionThreads = Math.min(this.cfg.threads, MAX_ATTENTION_THREADS);
    for (let l = 0; l < this.layers; l++) {
      if (signal) {
        // session.run may finish without giving timers a turn: let an abort be delivered
        await yieldToEventLoop();
        if (signal.aborted) throw new ForwardAbortedError(p0, { cause: signal.reason });
      }
      const q = out.q!.data as Float32Array;
      const k = out.k!.data as Float32Array;
      const v = out.v!.data as Float32Array;
      if (l > 0) residual = out.h_next!;
      columns?.observe(l, q, k, T);
      // offload: layer l's selection must be done before its attention; waiting now, before layer l+1's
      // job is queued, waits for that one job only (drain() waits for every queued job)
      let waitMs = 0;
      if (off && sparse && l >= dense) {
        const w0 = performance.now();
        spec.drain();
        waitMs = performance.now() - w0;
      }
      // layer l+1's speculation and gather start now and run while the rest of layer l does
      if (sparse && l + 1 < this.layers && l + 1 >= dense) spec.begin(l + 1, out.q_spec!.data as Float32Array);
      // denseLayers 0: no layer before layer 0 to speculate from, so it selects with its own query
      if (sparse && l === 0 && dense === 0) spec.begin(0, q);
      let a = performance.now();
      const slot = this.pool.appendBatch(l, k, v, p0);
      this.off?.appended(l, slot, T);
      if (probe && T === 1 && this.pool.evicting) probe.evicted(l, this.pool.lastEvicted(l));
      const b = performance.now();
      this.t.append += b - a;
      const attn = T === 1 ? this.attnOne : new Float32Array(T * this.qw);
      if (off) {
        // offload mode (offload-attention.ts): the same selection, attention in the row buffer's graph
        if (sparse && l >= dense) {
          if (l === 0 && dense === 0) spec.drain(); // layer 0 selects with its own query: its job began just above
          await off.attendSelected(l, this.selectionLists(l), this.pool.lastSlot(l), q, attn);
          const recall = ig.settings.inspect ? spec.recall(l, q) : undefined;
          const [stageStartNs, stageEndNs] = this.stageNs[l]!;
          const mine = off.lastLayer()!;
          stepLayers.push({ ...layerStatsFrom(l, spec.stats(l), { stageStartNs, stageEndNs, ...(recall !== undefined ? { recall } : {}) }), bytes: mine.crossedBytes, hits: mine.hits, misses: mine.misses, waitMs, attentionMs: mine.attentionMs });
          if (measure) probe.measure(this.pool, l, q, this.heads, this.selectionLists(l));
        } else {
          await off.attendAll(l, q, attn);
          const mine = off.lastLayer()!;
          if (sparse) stepLayers.push({ ...this.denseLayerStats(l, p0), bytes: mine.crossedBytes, hits: mine.hits, misses: mine.misses });
        }
      } else if (sparse && l >= dense) {
        // a side-thread speculator is scoring the next layer on another core meanwhile: one thread here
        // (bench/long-context.mjs, MHA, 2 threads: splitting this attention too took InfiniGen from
        // 8.25 / 7.27 to 6.62 / 5.83 tok/s at 16K / 32K); an inline one has finished: every thread
        spec.attend(l, q, attn, this.specInlineThreads > 0 ? attentionThreads : 1);
        const recall = ig.settings.inspect ? spec.recall(l, q) : undefined;
        const [stageStartNs, stageEndNs] = this.stageNs[l]!;
        stepLayers.push(layerStatsFrom(l, spec.stats(l), { stageStartNs, stageEndNs, ...(recall !== undefined ? { recall } : {}) }));
        if (measure) probe.measure(this.pool, l, q, this.heads, this.selectionLists(l));
      } else if (spStep && l >= sp.settings.denseLayers) {
        const { lists, figures } = sp.select(l, q, p0);
        const { slots, offsets } = packSlotLists(lists, p0);
        attendSlots(this.pool, l, q, this.heads, slots, offsets, attn, attentionThreads);
        sp.afterAttend(l, q, p0);
        if (measure) probe.measure(this.pool, l, q, this.heads, lists);
        const rowBytes = kvRowBytes(this.kvType, this.model.hyper.headDim);
        const { selected, candidates, hits, misses } = figures;
        const zero = { speculationMs: 0, gatherMs: 0, waitMs: 0, attentionMs: 0 };
        stepLayers.push({ layer: l, dense: false, selected, candidates, fetchRatio: candidates > 0 ? selected / candidates : 0, bytes: misses * 2 * rowBytes, hits, misses, ...zero });
      } else {
        attendCausal(this.pool, l, q, this.heads, attn, attentionThreads);
        if (sparse || spStep) stepLayers.push(this.denseLayerStats(l, p0));
        else if (sp && l >= sp.settings.denseLayers) sp.observePrefill(l, q, p0, T);
      }
      a = performance.now();
      this.t.attention += a - b;
      const feeds: Record<string, TensorData> = { h: residual, attn: f32(attnDims, attn) };
      const last = l === this.layers - 1;
      if (!last) Object.assign(feeds, { pos, ...rope });
      else if (rows === 'none') break;
      else feeds.rows = { elemType: 'int64', dims: [rows === 'all' ? T : 1], data: rows === 'all' ? BigInt64Array.from({ length: T }, (_, i) => BigInt(i)) : BigInt64Array.of(BigInt(T - 1)) };
      out = await this.runStage(l + 1, feeds, last ? 'head' : 'layer');
      if (last) logits = out.logits!.data as Float32Array;
    }
    // rows === 'none' skipped the head, but layer L−1's K/V are appended: the cache is complete.
    this.pos = p0 + T;
    if (off) off.endStep(p0);
    columns?.commitChunk();
    if (sparse || spStep) {
      this.lastStep = summarizeStep(p0, stepLayers);
      if (this.pool.evicting) {
        const perLayer = this.evictions();
        let step = 0;
        for (let l = 0; l < this.layers; l++) step += perLayer[l]! - this.evictedBefore[l]!;
        this.lastStep.evictions = { total: perLayer.reduce((a, b) => a + b, 0), step, perLayer };
      }
    }
    if (this.pool.evicting) this.evictedBefore = this.evictions();
    probe?.stepDone();
    const total = performance.now() - t0;
    this.t.total += total;
    this.t.tokens += T;
    this.t.calls += 1;
    this.t.other = this.t.total - this.t.embedding - this.t.layerGraphs - this.t.headGraph - this.t.append - this.t.attention;
    return logits;
  }

  private async runStage(s: number, feeds: Record<string, TensorData>, kind: 'layer' | 'head'): Promise<Record<string, TensorData>> {
    const a = performance.now();
    const wanted = this.graphs[s]!.inputs;
    const f: Record<string, TensorData> = {};
    for (const name of wanted) f[name] = feeds[name]!;
    const ns0 = this.ig ? Number(process.hrtime.bigint()) : 0;
    const out = await this.sessions[s]!.run(f);
    if (this.ig) this.stageNs[s] = [ns0, Number(process.hrtime.bigint())];
    const ms = performance.now() - a;
    if (kind === 'head') this.t.headGraph += ms;
    else this.t.layerGraphs += ms;
    return out;
  }
}

function argmax(x: Float32Array): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function emptyTimings(): ForwardTimings {
  return { embedding: 0, layerGraphs: 0, headGraph: 0, append: 0, attention: 0, other: 0, total: 0, tokens: 0, calls: 0 };
}
