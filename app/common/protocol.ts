// The engine's one protocol, whatever carries it: a worker/child-process channel (CLI, tests),
// Electron's MessagePort (desktop) or a WebSocket (browser mode). Requests go to the engine,
// events come back; every message is checked against these schemas where it crosses a process
// boundary. Types are derived from the schemas, never written twice.
import { z } from 'zod';
import { ERROR_CODES } from './errors.ts';

export const PROTOCOL_VERSION = 1;

// ── shared shapes ───────────────────────────────────────────────────────────────────────────

export const DEVICES = ['auto', 'cpu', 'webgpu', 'cuda', 'dml', 'coreml'] as const;
export const DeviceSchema = z.enum(DEVICES);
export type Device = z.infer<typeof DeviceSchema>;

export const KV_TYPES = ['fp16', 'fp32', 'int8'] as const;
/** Who runs the dense layers (load option `dense`). */
export const DENSE_ENGINES = ['auto', 'native', 'onnx'] as const;
export const KvTypeSchema = z.enum(KV_TYPES);

/** Why a generation ended. Every generation ends with exactly one. */
export const STOP_REASONS = ['eos', 'stopString', 'maxTokens', 'contextLimit', 'cancelled', 'error'] as const;
export const StopReasonSchema = z.enum(STOP_REASONS);
export type StopReason = z.infer<typeof StopReasonSchema>;

const positiveInt = z.int().positive();
const tokenId = z.int().nonnegative();

export const SamplingSchema = z.strictObject({
  /** 0 = greedy (argmax, ties to the lowest id). */
  temperature: z.number().min(0).max(100).default(0.8),
  /** 0 = off. */
  topK: z.int().nonnegative().default(40),
  /** 1 = off. */
  topP: z.number().gt(0).max(1).default(0.95),
  /** 0 = off. */
  minP: z.number().min(0).max(1).default(0.05),
  /** 1 = off (llama.cpp semantics). */
  repetitionPenalty: z.number().gt(0).max(10).default(1),
  presencePenalty: z.number().min(-2).max(2).default(0),
  frequencyPenalty: z.number().min(-2).max(2).default(0),
  /** How many recent tokens the penalties look at. */
  penaltyLastN: z.int().nonnegative().default(64),
  seed: z.int().nonnegative().max(2 ** 32 - 1).optional(),
});
export type Sampling = z.infer<typeof SamplingSchema>;

export const ChatMessageSchema = z.strictObject({
  role: z.enum(['system', 'user', 'assistant']),
  content: z.string(),
});
export type ChatMessage = z.infer<typeof ChatMessageSchema>;

/** What to continue: raw text, token ids, or a chat rendered through the model's template. */
export const PromptSchema = z.union([
  z.strictObject({ text: z.string() }),
  z.strictObject({ ids: z.array(tokenId).min(1) }),
  z.strictObject({ messages: z.array(ChatMessageSchema).min(1) }),
]);
export type Prompt = z.infer<typeof PromptSchema>;

/** The row policies (ARCHITECTURE.md §6), named once: the settings, the CLI and the API take these. */
export const KV_POLICIES = ['full', 'infinigen', 'h2o', 'streaming', 'quest', 'snapkv', 'oracle', 'window'] as const;
export const KvPolicySchema = z.enum(KV_POLICIES);
export type KvPolicy = z.infer<typeof KvPolicySchema>;

/** InfiniGen's knobs (ARCHITECTURE.md §4). */
export const InfinigenKnobsSchema = z.strictObject({
  alpha: z.number().gt(0).max(1000).default(5),
  partialRatio: z.number().gt(0).max(1).default(0.3),
  fetchCap: z.number().gt(0).max(1).default(0.2),
  denseLayers: z.int().nonnegative().max(1024).default(2),
  /** Ignore the cached skew matrices and calibrate again. */
  recalibrate: z.boolean().default(false),
});
export type InfinigenKnobs = z.infer<typeof InfinigenKnobsSchema>;

/** Knobs of the comparison policies (streaming, h2o, quest, oracle, snapkv, window). */
export const SparseKnobsSchema = z.strictObject({
  /** Tokens per KV head besides the current one; default ⌊fetchCap·context⌋ each step. */
  budget: positiveIntOptional(),
  fetchCap: z.number().gt(0).max(1).default(0.2),
  denseLayers: z.int().nonnegative().max(1024).default(2),
  /** streaming: attention-sink tokens. */
  sinks: z.int().nonnegative().max(1 << 20).default(4),
  /** streaming: recent window; h2o: recent tokens; snapkv: observation window (default 32); window: tokens attended, the current one included. */
  window: positiveIntOptional(),
  /** snapkv: max-pool kernel over the window's votes (odd; 1 = none). */
  poolKernel: z.int().positive().max(1023).refine((k) => k % 2 === 1, { message: 'poolKernel must be odd' }).default(7),
  /** quest: pages kept, and tokens per page. */
  topPages: positiveIntOptional(),
  pageSize: z.int().positive().max(4096).default(16),
});
export type SparseKnobs = z.infer<typeof SparseKnobsSchema>;

export const GenerateParamsSchema = z.strictObject({
  maxTokens: positiveInt.default(256),
  stopStrings: z.array(z.string().min(1)).max(16).default([]),
  stopOnEos: z.boolean().default(true),
  sampling: SamplingSchema.prefault({}),
  /**
   * KV policy of this generation (absent: the loaded one), with its knobs (an absent object: the
   * loaded ones). A policy or knobs other than the runner's rebuild the forward pass from the
   * already-loaded model and start from an empty cache; the same ones keep everything.
   */
  policy: KvPolicySchema.optional(),
  infinigen: InfinigenKnobsSchema.optional(),
  sparse: SparseKnobsSchema.optional(),
  /**
   * Reuse the cached K/V of the longest common token prefix with the sequence the engine holds
   * (default true). false starts from an empty cache (benchmarks, comparisons).
   */
  reusePrefix: z.boolean().default(true),
  /**
   * The document this generation continues (the Writer's or Summarise's document id). Where the
   * host keeps document snapshots, the engine restores this document's saved cache when it holds
   * another sequence, and saves the cache after the generation.
   */
  document: DocumentIdSchema().optional(),
  /** Send each token's top-k log-probabilities under the model's own distribution (softmax of the raw logits; 0/absent = none). */
  logprobs: z.int().min(0).max(20).optional(),
  /**
   * Metrics every N decode steps (each a measured step: recall, oracle recall, positions) instead of
   * at most every 100 ms — the inspector's own runs (Compare), for a denser recall chart and token map.
   */
  inspectEvery: z.int().min(1).max(4096).optional(),
  /** The inspector's share of decode time (measurements + snapshots); a due step over it is skipped. Default 0.05; 1 measures every due step. */
  inspectBudget: z.number().gt(0).max(1).optional(),
  /** Mixture-of-experts models: send `routing` events, the experts each layer ran every prompt and generated token on (ignored for other models). */
  routing: z.boolean().optional(),
});
export type GenerateParams = z.infer<typeof GenerateParamsSchema>;
/** Generation parameters as a client writes them (defaults may be left out). */
export type GenerateParamsInput = z.input<typeof GenerateParamsSchema>;

/** A document id as the renderer makes them: also a file name in the snapshot folder. */
function DocumentIdSchema() {
  return z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'a document id is 1-128 letters, digits, _ or -');
}

function positiveIntOptional() {
  return z.int().positive().max(2 ** 31 - 1).optional();
}

export const LoadOptionsSchema = z.strictObject({
  modelPath: z.string().min(1),
  device: DeviceSchema.default('cpu'),
  /** Threads for the dense work (ORT intra-op). Default: all cores. */
  threads: positiveInt.max(256).optional(),
  /** Context window; default min(trained context, 4096). */
  contextLength: positiveInt.optional(),
  kvType: KvTypeSchema.default('fp16'),
  /** Tokens per prefill chunk. A cancel lands between layers, so one layer's graph on one chunk
   *  bounds its latency: 64 keeps it under 100 ms on a 1B-class Q8_0 model on one core (measured
   *  with bench/cancel.mjs: ≤ 60 ms at 64, up to 154 ms at 256) and prefills fastest there. */
  prefillChunk: positiveInt.max(8192).default(64),
  /** How decode steps choose the past tokens they attend to. */
  policy: KvPolicySchema.default('full'),
  infinigen: InfinigenKnobsSchema.prefault({}),
  sparse: SparseKnobsSchema.prefault({}),
  /** Byte budget of the whole KV pool; 0 = the full cache at the context length. When it is
   *  smaller, the least-prefetched tokens are evicted (sinks and the recent window protected). */
  poolBudgetBytes: z.int().nonnegative().default(0),
  /** Compute attention recall against the full softmax (slower; for the inspector). */
  inspect: z.boolean().default(false),
  /**
   * Offload mode (every policy): decode attention runs in an onnxruntime graph over a
   * device-side row buffer that receives only the rows it lacks; the bytes that cross are reported.
   */
  offload: z.boolean().optional(),
  /**
   * Who runs the dense work: 'native' (C++ over the file's own blocks, read in place: llama-family
   * GGUF/safetensors on the CPU with F32/F16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K/MXFP4 weights), 'onnx' (onnxruntime
   * graphs over repacked weights: every model and device), or 'auto': native where it can run.
   */
  dense: z.enum(DENSE_ENGINES).default('auto'),
});
export type LoadOptions = z.infer<typeof LoadOptionsSchema>;
/** Load options as a client writes them (defaults may be left out). */
export type LoadOptionsInput = z.input<typeof LoadOptionsSchema>;

/** The GPU adapter a WebGPU load runs on (app/engine/device/webgpu-adapter.ts), as the engine identified it. */
export const AdapterInfoSchema = z.strictObject({
  /** the adapter's name ('NVIDIA GeForce RTX 4070', 'SwiftShader Device (Subzero)'); 'unknown' where it could not be read */
  name: z.string(),
  vendor: z.string(),
  /** a software rasteriser on the CPU (SwiftShader, lavapipe): correct, slower than the CPU path; null: not known */
  software: z.boolean().nullable(),
  /** the provider computes in float16 on it (else the KV rows and graphs run in float32) */
  float16: z.boolean(),
  /** what the engine made of it, in words (why fp32, why not chosen by auto) */
  note: z.string().optional(),
});
export type AdapterInfo = z.infer<typeof AdapterInfoSchema>;

/** One layer's KV as the pool holds it: a global layer every token, a sliding-window layer its ring, a linear-attention layer no slots (its bytes: its recurrent state). */
export const KvLayerInfoSchema = z.strictObject({
  kind: z.enum(['global', 'window', 'linear']),
  /** the sliding window in tokens (window layers) */
  window: positiveInt.optional(),
  /** slots the pool gives the layer (a ring's capacity, or the context) */
  capacityTokens: z.int().nonnegative(),
  /** bytes of its slots in the pool, allocated at load */
  bytes: z.number().nonnegative(),
});
export type KvLayerInfo = z.infer<typeof KvLayerInfoSchema>;

export const ModelInfoSchema = z.strictObject({
  path: z.string(),
  format: z.enum(['gguf', 'safetensors']),
  architecture: z.string(),
  family: z.string(),
  layers: positiveInt,
  heads: positiveInt,
  kvHeads: positiveInt,
  headDim: positiveInt,
  hiddenSize: positiveInt,
  vocabSize: positiveInt,
  trainedContext: positiveInt,
  contextLength: positiveInt,
  device: DeviceSchema,
  threads: positiveInt,
  kvType: KvTypeSchema,
  policy: KvPolicySchema,
  chatTemplate: z.boolean(),
  loadMs: z.number().nonnegative(),
  /** Offload mode is on (absent: off). */
  offload: z.boolean().optional(),
  /** Offload mode: bytes of the device-side row buffer at load (it grows with InfiniGen's selections). */
  rowBufferBytes: z.number().nonnegative().optional(),
  /** device webgpu: the adapter it runs on (absent on the CPU) */
  adapter: AdapterInfoSchema.optional(),
  /** Who runs the dense stages: 'native (avx512)' and the like, or 'onnxruntime' (with why not native). */
  dense: z.string().optional(),
  /** Per layer: its kind (window / global) and its pool slots and bytes (absent: every layer global, the context). */
  kvLayers: z.array(KvLayerInfoSchema).optional(),
  /** Bytes of the window layers' ring checkpoints (prefix reuse), apart from the pool. */
  ringCheckpointBytes: z.number().nonnegative().optional(),
  /** Mixture-of-experts models: experts per layer and how many each token runs on. */
  experts: z.strictObject({ count: positiveInt, used: positiveInt }).optional(),
});
export type ModelInfo = z.infer<typeof ModelInfoSchema>;

export const TimingsSchema = z.strictObject({
  loadMs: z.number().nonnegative().optional(),
  ttftMs: z.number().nonnegative(),
  prefillMs: z.number().nonnegative(),
  decodeMs: z.number().nonnegative(),
  prefillTokensPerS: z.number().nonnegative(),
  decodeTokensPerS: z.number().nonnegative(),
  totalMs: z.number().nonnegative(),
  /** Rebuilding the forward pass for this generation's policy; absent when none was needed. */
  policySwitchMs: z.number().nonnegative().optional(),
});
export type Timings = z.infer<typeof TimingsSchema>;

export const ErrorPayloadSchema = z.strictObject({
  code: z.enum(ERROR_CODES),
  message: z.string(),
  details: z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.null(), z.undefined()])).default({}),
});
export type ErrorPayload = z.infer<typeof ErrorPayloadSchema>;

/** Why cached tokens that were there could not be used. */
export const CACHE_DROP_REASONS = [
  'disabled', // the request asked for no reuse (reusePrefix false)
  'policySwitch', // the new policy needs another pool layout (partial keys): a new, empty pool
  'evicted', // the pool had evicted tokens: their prefix is no longer the text's prefix
  'otherDocument', // the cache held another document and no snapshot of this one could be used
] as const;

/** How a generation used the KV cache it found (done.cache). */
export const CacheReportSchema = z.strictObject({
  /** Prompt tokens whose K/V were already in the pool (not computed again). */
  reusedTokens: z.int().nonnegative(),
  /** Prompt tokens computed by this generation's prefill. */
  prefilledTokens: z.int().nonnegative(),
  /** Where the reused tokens came from: the sequence in memory, or a document snapshot restored for this generation. */
  source: z.enum(['none', 'memory', 'snapshot']),
  dropped: z.enum(CACHE_DROP_REASONS).optional(),
  /** Document snapshots: restored before, saved after; a refused snapshot names its error (the generation ran from a fresh prefill). */
  snapshot: z
    .strictObject({
      restored: z.boolean(),
      restoreMs: z.number().nonnegative().optional(),
      saved: z.boolean(),
      saveMs: z.number().nonnegative().optional(),
      bytes: z.number().nonnegative().optional(),
      error: ErrorPayloadSchema.optional(),
    })
    .optional(),
});
export type CacheReport = z.infer<typeof CacheReportSchema>;

// ── document snapshots (the host's folder; the window never names a path) ───────────────────

/** The folder under the app's data folder (beside documents/) where the host keeps document snapshots. */
export const SNAPSHOT_FOLDER = 'kv-snapshots';
/** The environment variable that tells an engine host where its document snapshot folder is (unset: none are kept). */
export const SNAPSHOT_DIR_ENV = 'LONGHAND_SNAPSHOT_DIR';
/** The size cap of a snapshot folder nobody has set a cap for (least recently used deleted beyond it). */
export const DEFAULT_SNAPSHOT_CAP_BYTES = 2 * 1024 ** 3;

/** What a `snapshots` request answers: the folder's figures. */
export const SnapshotStatsSchema = z.strictObject({
  /** false: this host keeps no document snapshots (no folder was configured, or it could not be used). */
  enabled: z.boolean(),
  /** Where they are kept (shown, never sent back), or null. */
  dir: z.string().nullable(),
  count: z.int().nonnegative(),
  bytes: z.number().nonnegative(),
  capBytes: z.number().nonnegative(),
});
export type SnapshotStatsPayload = z.infer<typeof SnapshotStatsSchema>;

// ── requests (to the engine) ────────────────────────────────────────────────────────────────

const requestId = z.string().min(1).max(128);

export const EngineRequestSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('load'), requestId, options: LoadOptionsSchema }),
  z.strictObject({ kind: z.literal('unload'), requestId }),
  z.strictObject({ kind: z.literal('generate'), requestId, prompt: PromptSchema, params: GenerateParamsSchema.prefault({}) }),
  /** Cancels the generation whose requestId is `target`; answered by that generation's `done`. */
  z.strictObject({ kind: z.literal('cancel'), requestId, target: requestId }),
  z.strictObject({ kind: z.literal('tokenize'), requestId, text: z.string(), addSpecial: z.boolean().default(true) }),
  /**
   * Document snapshots: read the figures, change the size cap (setCap needs capBytes; it applies at
   * once, deleting the least recently used beyond it) or delete them all. Answered by `snapshots`.
   */
  z.strictObject({ kind: z.literal('snapshots'), requestId, action: z.enum(['stats', 'setCap', 'clear']), capBytes: z.int().nonnegative().max(Number.MAX_SAFE_INTEGER).optional() }),
]);
export type EngineRequest = z.infer<typeof EngineRequestSchema>;
/** A request as a client writes it (defaults may be left out). */
export type EngineRequestInput = z.input<typeof EngineRequestSchema>;

// ── metrics (ARCHITECTURE.md §7), sampled during a generation ───────────────────────────────

export const LayerMetricsSchema = z.strictObject({
  layer: z.int().nonnegative(),
  /** Tokens attended (selected rows; all of them for `full` and dense layers). */
  selected: z.int().nonnegative(),
  /** Tokens that could have been attended (in the pool, not evicted). */
  candidates: z.int().nonnegative(),
  /** Bytes of K/V rows moved to the compute device this step (counted on CPU too). */
  bytesMoved: z.number().nonnegative(),
  reuseHits: z.int().nonnegative(),
  reuseMisses: z.int().nonnegative(),
  /** Share of the true softmax mass the selection covers; null unless inspection is on. */
  recall: z.number().min(0).max(1).nullable(),
  speculationMs: z.number().nonnegative(),
  gatherMs: z.number().nonnegative(),
  attentionMs: z.number().nonnegative(),
  /** Selected token positions (for the heatmap), when the engine sends them. */
  positions: z.array(z.int().nonnegative()).optional(),
  /**
   * The oracle's recall at the same size: the true softmax mass of the current token plus, per query
   * head, its KV head's selected count of past positions with the largest true scores (>= recall).
   * Measured on the sampled step a snapshot reports, for every sparse policy.
   */
  oracleRecall: z.number().min(0).max(1).optional(),
  /** Prefetch counters of `positions`' slots, index for index (pools with a byte budget only). */
  counters: z.array(z.number().nonnegative()).optional(),
  /**
   * The true attention of the measured step: the positions with the most softmax mass (mean over
   * the layer's query heads, the current token included), at most 64, as [position, mass], largest first.
   */
  attention: z.array(z.tuple([z.int().nonnegative(), z.number().min(0).max(1)])).optional(),
  /** Positions this layer's pool evicted since the previous snapshot, each as [position, decode step (0-based)]. */
  evicted: z.array(z.tuple([z.int().nonnegative(), z.int().nonnegative()])).optional(),
  /**
   * Offload mode only: bytes this layer bound from the host for the step, counted from the tensors
   * bound (the reuse buffer's missed K/V rows + the row index); bytesMoved is then the rows' part.
   */
  bytesCrossed: z.number().nonnegative().optional(),
});
export type LayerMetrics = z.infer<typeof LayerMetricsSchema>;

export const StepMetricsSchema = z.strictObject({
  /** Generated tokens so far. */
  step: z.int().nonnegative(),
  /** Tokens in the cache. */
  contextTokens: z.int().nonnegative(),
  contextLength: positiveInt,
  policy: z.string(),
  tokensPerS: z.number().nonnegative(),
  /** Mean over layers of selected / candidates. */
  fetchRatio: z.number().min(0).max(1),
  bytesMovedPerToken: z.number().nonnegative(),
  /** Offload mode only: the layers' bytesCrossed summed (what crossed to the device for the step). */
  bytesCrossedPerToken: z.number().nonnegative().optional(),
  /**
   * Mixture-of-experts models only: bytes of expert weights the step read (per layer the router and
   * each routed expert's gate, up and down rows), counted by the native kernels.
   */
  expertBytesPerToken: z.number().nonnegative().optional(),
  reuseHitRate: z.number().min(0).max(1).nullable(),
  recall: z.number().min(0).max(1).nullable(),
  evictions: z.int().nonnegative(),
  timing: z.strictObject({ denseMs: z.number().nonnegative(), attentionMs: z.number().nonnegative(), speculationMs: z.number().nonnegative(), gatherMs: z.number().nonnegative(), otherMs: z.number().nonnegative() }),
  memory: z.strictObject({
    weightsBytes: z.number().nonnegative(),
    poolBytes: z.number().nonnegative(),
    poolBudgetBytes: z.number().nonnegative(),
    kvUsedBytes: z.number().nonnegative(),
    partialKeyBytes: z.number().nonnegative(),
    stagedBytes: z.number().nonnegative(),
    rssBytes: z.number().nonnegative(),
    /** Offload mode only: the device-side row buffer (K and V rows of every layer), apart from the pool. */
    rowBufferBytes: z.number().nonnegative().optional(),
    /**
     * kvUsedBytes split by layer kind (models with sliding-window layers): K/V bytes in the window
     * layers' rings (+ their checkpoints' bytes in use) and in the global layers.
     */
    kvByKind: z.strictObject({ window: z.number().nonnegative(), global: z.number().nonnegative(), checkpoints: z.number().nonnegative() }).optional(),
    /**
     * Hybrid models (Qwen3.5): the linear-attention layers' recurrent state beside the pool (the
     * state and the running chunk's rollback copy) and the checkpoints of it held now. Not KV.
     */
    recurrent: z.strictObject({ stateBytes: z.number().nonnegative(), checkpointBytes: z.number().nonnegative() }).optional(),
  }),
  layers: z.array(LayerMetricsSchema),
  /** What a remote OpenAI-compatible server reports about its own cache (vLLM, llama.cpp server). */
  remote: z.strictObject({ kvCacheUsage: z.number().min(0).max(1).nullable(), prefixCacheHitRate: z.number().min(0).max(1).nullable() }).optional(),
});
export type StepMetrics = z.infer<typeof StepMetricsSchema>;

// ── events (from the engine) ────────────────────────────────────────────────────────────────

export const EngineEventSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('ready'), protocol: z.literal(PROTOCOL_VERSION), pid: z.int() }),
  /** While a load runs: `done` of `total` stages of the forward pass built (weights repacked, onnxruntime session made). */
  z
    .strictObject({ kind: z.literal('loadProgress'), requestId, done: z.int().nonnegative(), total: z.int().positive() })
    .refine((e) => e.done <= e.total, { message: 'done must not exceed total', path: ['done'] }),
  z.strictObject({ kind: z.literal('loaded'), requestId, model: ModelInfoSchema }),
  z.strictObject({ kind: z.literal('unloaded'), requestId }),
  z.strictObject({ kind: z.literal('tokenized'), requestId, ids: z.array(tokenId) }),
  z.strictObject({ kind: z.literal('snapshots'), requestId, stats: SnapshotStatsSchema }),
  /** The prompt as token ids, sent once before the first token. */
  z.strictObject({
    kind: z.literal('prompt'),
    requestId,
    ids: z.array(tokenId),
    contextLength: positiveInt,
    /** Each prompt token's text as the stream decoder gives it (a character split over tokens shows on its last token). */
    pieces: z.array(z.string()).optional(),
  }),
  z.strictObject({
    kind: z.literal('token'),
    requestId,
    index: z.int().nonnegative(),
    id: tokenId,
    text: z.string(),
    /** With params.logprobs = k: the k most likely ids at this step as [id, log-probability], most likely first. */
    top: z.array(z.tuple([tokenId, z.number().max(0)])).optional(),
  }),
  /**
   * params.routing on a mixture-of-experts model: after each forward call (a prompt chunk, a decode
   * step), the experts its tokens were routed to. `experts` is [tokens][layers.length][k] flattened,
   * the largest routing weight first, -1 where the layer did not run the token (a prompt chunk that
   * needs no logits skips the last layer's MLP); token t is at position start + t.
   */
  z
    .strictObject({ kind: z.literal('routing'), requestId, start: z.int().nonnegative(), layers: z.array(z.int().nonnegative()).min(1), k: positiveInt, experts: z.array(z.int().min(-1)) })
    .refine((e) => e.experts.length > 0 && e.experts.length % (e.layers.length * e.k) === 0, { message: 'experts must hold whole tokens of layers x k ids', path: ['experts'] }),
  /** Sampled (at most ~10 per second) while a generation runs, and once at its end. */
  z.strictObject({ kind: z.literal('metrics'), requestId, metrics: StepMetricsSchema }),
  z.strictObject({
    kind: z.literal('done'),
    requestId,
    stopReason: StopReasonSchema,
    /** Text still to append: held back by the stop matcher or the UTF-8 decoder until the end. */
    text: z.string(),
    promptTokens: z.int().nonnegative(),
    completionTokens: z.int().nonnegative(),
    timings: TimingsSchema,
    /** The sampler's seed, to repeat the run. */
    seed: z.int().nonnegative().optional(),
    /** The KV policy the generation ran with (the loaded one unless the request chose another). */
    policy: KvPolicySchema.optional(),
    /** Prefix reuse and snapshots (absent from engines that keep no cache, e.g. a remote server). */
    cache: CacheReportSchema.optional(),
    error: ErrorPayloadSchema.optional(),
  }),
  /** A session file saved or loaded (hosts started with LONGHAND_SESSION_FILES=1 only). */
  z.strictObject({ kind: z.literal('sessionFile'), requestId, action: z.enum(['save', 'load']), tokens: z.int().nonnegative(), bytes: z.number().nonnegative(), ms: z.number().nonnegative() }),
  /** A request that failed before it started (bad load, bad request, no model). */
  z.strictObject({ kind: z.literal('error'), requestId: z.string(), error: ErrorPayloadSchema }),
]);
export type EngineEvent = z.infer<typeof EngineEventSchema>;
/** A load's progress as every layer passes it on: `done` of `total` stages of the forward pass built. */
export type LoadProgress = Pick<Extract<EngineEvent, { kind: 'loadProgress' }>, 'done' | 'total'>;

/** Messages that cross a process boundary are parsed here; a bad one names its first problem. */
export function parseEngineRequest(message: unknown): EngineRequest {
  const parsed = EngineRequestSchema.safeParse(message);
  if (parsed.success) return parsed.data;
  throw protocolError('request', parsed.error);
}

export function parseEngineEvent(message: unknown): EngineEvent {
  const parsed = EngineEventSchema.safeParse(message);
  if (parsed.success) return parsed.data;
  throw protocolError('event', parsed.error);
}

function protocolError(what: string, error: z.ZodError): Error & { code: 'PROTOCOL_BAD_MESSAGE' } {
  const issue = error.issues[0];
  const where = issue && issue.path.length > 0 ? issue.path.join('.') : '(message)';
  const message = `bad ${what}: ${where}: ${issue?.message ?? 'does not match the protocol'}`;
  return Object.assign(new Error(message), { code: 'PROTOCOL_BAD_MESSAGE' as const });
}

// ── engine process status (Electron's supervisor and the browser-mode relay report the same) ──

/** The engine process's state, as the window shows it (window-api.ts's EngineStatus). */
export const EngineStatusSchema = z.discriminatedUnion('state', [
  z.strictObject({ state: z.literal('starting') }),
  z.strictObject({ state: z.literal('ready'), pid: z.int() }),
  z.strictObject({
    state: z.literal('crashed'),
    reason: z.enum(['crashed', 'oom', 'killed', 'launch-failed']),
    message: z.string(),
    willRestart: z.boolean(),
  }),
  z.strictObject({ state: z.literal('restarting'), attempt: z.int().positive() }),
]);

// ── browser-mode relay (/ws) messages besides the engine protocol ───────────────────────────
// The server owns the engine process there, so the window learns its state and asks for a
// restart over the same socket. These never reach the engine host.

/** Server → window: the engine process's state changed (and once when the socket opens). */
export const RelayStatusEventSchema = z.strictObject({ kind: z.literal('engineStatus'), status: EngineStatusSchema });
export type RelayStatusEvent = z.infer<typeof RelayStatusEventSchema>;

/** Window → server: start a fresh engine process and reload the model it had (the user asked). */
export const RestartEngineRequestSchema = z.strictObject({ kind: z.literal('restartEngine'), requestId });
export type RestartEngineRequest = z.infer<typeof RestartEngineRequestSchema>;

// ── session files (the CLI's --save-session / --load-session) ──────────────────────────────

/**
 * The environment variable that lets a host take file paths for KV snapshots (`sessionFile`). The
 * CLI sets it for the host it starts; hosts that serve windows never do, so a window cannot name a
 * path (the request is then refused as unknown: PROTOCOL_BAD_MESSAGE).
 */
export const SESSION_FILES_ENV = 'LONGHAND_SESSION_FILES';

/** Saves the cached sequence to `path`, or replaces it with the one saved there; answered by a `sessionFile` event. */
export const SessionFileRequestSchema = z.strictObject({
  kind: z.literal('sessionFile'),
  requestId,
  action: z.enum(['save', 'load']),
  path: z.string().min(1).max(4096),
});
export type SessionFileRequest = z.infer<typeof SessionFileRequestSchema>;

export function parseSessionFileRequest(message: unknown): SessionFileRequest {
  const parsed = SessionFileRequestSchema.safeParse(message);
  if (parsed.success) return parsed.data;
  throw protocolError('session file request', parsed.error);
}

// ── test-only fault hook ────────────────────────────────────────────────────────────────────

/** The environment variable that enables the fault hook (native addon, engine host, relay). */
export const TEST_FAULTS_ENV = 'LONGHAND_TEST_FAULTS';
export const TEST_FAULT_KINDS = ['segv', 'abort'] as const;

/**
 * Kills the engine process with a real native fault (native/index.js testFault). Not part of
 * EngineRequestSchema: a host or relay started without LONGHAND_TEST_FAULTS=1 never parses it, so
 * it is refused there as any unknown request is (PROTOCOL_BAD_MESSAGE).
 */
export const TestFaultRequestSchema = z.strictObject({ kind: z.literal('testFault'), requestId, fault: z.enum(TEST_FAULT_KINDS) });
export type TestFaultRequest = z.infer<typeof TestFaultRequestSchema>;

/** Parses a test-fault request (only called where the hook is enabled). */
export function parseTestFaultRequest(message: unknown): TestFaultRequest {
  const parsed = TestFaultRequestSchema.safeParse(message);
  if (parsed.success) return parsed.data;
  throw protocolError('test fault request', parsed.error);
}
