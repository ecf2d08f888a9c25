// The engine as the host serves it: one model loaded at a time (weights, tokenizer, chat
// template, forward pass with its KV pool), one generation at a time. Everything a request
// needs is checked here before any work starts; a generation always ends with one `done`.
//
// Prefix reuse (cached-sequence.ts): the loaded model keeps the K/V of its last sequence; a
// generation reuses the longest common token prefix with it and prefills only the rest. done.cache
// reports what was reused and why a cache was dropped.
//
// KV policy per generation (ARCHITECTURE.md §6): a generate request may name a policy and knobs
// other than the loaded ones. A switch keeps the onnxruntime sessions, the pool and the cached
// tokens whenever the graphs allow (the policy's own state is rebuilt from the pool): every policy
// but InfiniGen runs on any stage graphs, InfiniGen's included (their extra speculative-query
// outputs are ignored, their partial keys unused), and InfiniGen on its own graphs when only alpha or
// the fetch cap change. Only a switch to InfiniGen on graphs built without it (or with other
// denseLayers / r) rebuilds the forward pass from the model already in memory (the file is not read
// again) and drops the cache (done.cache.dropped 'policySwitch'); after it, every switch keeps it.
// `done` names the policy that ran and, when a switch happened, its time (timings.policySwitchMs).
import { existsSync } from 'node:fs';
import { availableParallelism, homedir } from 'node:os';
import { basename, join } from 'node:path';
import { isLonghandError, LonghandError, UsageError } from '../common/errors.ts';
import type { AdapterInfo, CacheReport, Device, ErrorPayload, GenerateParams, InfinigenKnobs, KvPolicy, LoadOptions, LoadProgress, ModelInfo, Prompt, SparseKnobs } from '../common/protocol.ts';
import { CachedSequence } from './forward/cached-sequence.ts';
import { assertPolicySupported } from './forward/layers/families.ts';
import { createModelRunner, type ModelRunner, type ModelRunnerOptions, type RoutingRecord } from './forward/model-runner.ts';
import type { StageCacheOptions } from './forward/stage-sessions.ts';
import { SPARSE_POLICIES, sparseSettings } from './forward/policy/selection-settings.ts';
import { tokenizerDecoder } from './generate/decoder.ts';
import { generate } from './generate/loop.ts';
import type { EngineCore, GenerationEvent, SnapshotLoaded, SnapshotSaved, SnapshotStats } from './host/engine-core.ts';
import { modelDigest } from './forward/model-digest.ts';
import { peekSequenceSnapshot, restoreSequenceSnapshot, saveSequenceSnapshot, type SnapshotIdentity } from './forward/sequence-snapshot.ts';
import { SnapshotStore } from './kv/snapshot-store.ts';
import { ChatTemplate } from './model/chat-template.ts';
import { StepMetricsSampler } from './metrics/step-metrics.ts';
import { LogitTap } from './metrics/logit-tap.ts';
import { promptPieces } from './metrics/prompt-pieces.ts';
import { familyLayers, summariseWeights } from './model/inspect.ts';
import { assertFits, estimateMemory } from './model/memory-estimate.ts';
import { loadModel } from './model/load-model.ts';
import { createTokenizer, type Tokenizer } from './model/tokenizer/tokenizer.ts';
import type { LoadedModel } from './model/types.ts';
import { probeProvider } from './onnx/session.ts';
import { adapterLine, describeWebgpuAdapter, type WebgpuAdapter } from './device/webgpu-adapter.ts';

/** A KV policy with the knobs it reads (the other policy's knobs are left out: they change nothing). */
export interface PolicyChoice {
  policy: KvPolicy;
  infinigen?: InfinigenKnobs;
  sparse?: SparseKnobs;
}

interface Loaded {
  model: LoadedModel;
  tokenizer: Tokenizer;
  chat: ChatTemplate;
  runner: ModelRunner;
  /** the ids in the runner's pool: what the next generation may reuse */
  sequence: CachedSequence;
  info: ModelInfo;
  /** the runner's options besides the policy, to rebuild it under another one */
  base: Omit<ModelRunnerOptions, 'policy' | 'infinigen' | 'sparse'>;
  /** the load's policy and both knob sets (what a generate request leaves out), and the runner's choice */
  atLoad: { policy: KvPolicy; infinigen: InfinigenKnobs; sparse: SparseKnobs };
  choice: PolicyChoice;
  inspect: boolean;
  /** SHA-256 of the model file, on first need (InfiniGen's skew cache, snapshots): see digest() */
  sha?: Promise<string>;
  /** the document whose snapshot the cache was last restored from or saved to */
  document?: string;
}

/** The policy and knobs a request asks for: its own fields, else the load's. */
export function policyChoice(policy: KvPolicy, infinigen: InfinigenKnobs, sparse: SparseKnobs): PolicyChoice {
  if (policy === 'infinigen') return { policy, infinigen };
  if ((SPARSE_POLICIES as readonly string[]).includes(policy)) return { policy, sparse };
  return { policy };
}

const sameChoice = (a: PolicyChoice, b: PolicyChoice): boolean => JSON.stringify(a) === JSON.stringify(b);

/** Where calibration results (skew matrices per model file) are kept between runs. */
function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CACHE_HOME ?? join(homedir(), '.cache');
  return join(base, 'longhand');
}

/**
 * The stage cache (forward/stage-cache.ts: onnxruntime's optimised graphs of the loaded model, so a
 * second load skips repacking) in the same folder, on unless LONGHAND_STAGE_CACHE=off;
 * LONGHAND_STAGE_CACHE_MAX_BYTES caps it (default 8 GiB). Read per load: the host inherits them
 * from whoever starts it (Electron main, `longhand serve`, the CLI). What the cache could not do
 * (a damaged entry, a full disk) is logged; the load goes on without it.
 */
export function stageCacheOptions(env: NodeJS.ProcessEnv = process.env): StageCacheOptions | undefined {
  const mode = env.LONGHAND_STAGE_CACHE;
  if (mode !== undefined && mode !== 'on' && mode !== 'off') {
    throw new UsageError(`LONGHAND_STAGE_CACHE must be 'on' or 'off', got '${mode}'`, { field: 'LONGHAND_STAGE_CACHE' });
  }
  if (mode === 'off') return undefined;
  const max = env.LONGHAND_STAGE_CACHE_MAX_BYTES;
  if (max === undefined) return { dir: cacheDir(env) };
  const maxBytes = Number(max);
  if (!/^\d+$/.test(max) || !Number.isSafeInteger(maxBytes)) {
    throw new UsageError(`LONGHAND_STAGE_CACHE_MAX_BYTES must be a whole number of bytes, got '${max}'`, { field: 'LONGHAND_STAGE_CACHE_MAX_BYTES' });
  }
  return { dir: cacheDir(env), maxBytes };
}

/** Longest default context: the KV pool is sized for it at load. */
const DEFAULT_CONTEXT = 4096;

/** Where a load runs: the CPU, or WebGPU (offload mode: dense graphs and attention on the device) with its adapter. */
export type ResolvedDevice = { device: 'cpu' } | { device: 'webgpu'; adapter: AdapterInfo };

/**
 * The device a load runs on (issue 33). 'webgpu' runs the offload path on onnxruntime's WebGPU
 * provider on whatever adapter it finds, a software one (SwiftShader, lavapipe) included, since the
 * user asked for it; no adapter is DEVICE_UNAVAILABLE with onnxruntime's reason. 'auto' takes WebGPU
 * only on an identified hardware adapter with float16, and otherwise says why it stays on the CPU:
 * a software adapter computes correctly and much slower than the CPU path. cuda, dml and coreml:
 * their providers are not in this onnxruntime-node build (or not wired to the forward pass).
 */
export async function resolveDevice(device: Device, log: (line: string) => void, describe: () => Promise<WebgpuAdapter> = describeWebgpuAdapter): Promise<ResolvedDevice> {
  if (device === 'cpu') return { device: 'cpu' };
  if (device === 'auto') {
    const gpu = await describe();
    if (!gpu.available) {
      log(`device auto: no WebGPU adapter here (${gpu.reason}); using cpu`);
      return { device: 'cpu' };
    }
    const info = gpu.info!;
    if (info.software !== false) {
      const why = info.software ? 'a software rasteriser, slower than the CPU path (ask for --device webgpu to use it anyway)' : 'the adapter could not be identified';
      log(`device auto: WebGPU adapter ${adapterLine(info)} is ${why}; using cpu`);
      return { device: 'cpu' };
    }
    if (!info.float16) {
      log(`device auto: WebGPU adapter ${adapterLine(info)} has no float16; using cpu`);
      return { device: 'cpu' };
    }
    log(`device auto: WebGPU on ${adapterLine(info)} (offload mode)`);
    return { device: 'webgpu', adapter: info };
  }
  if (device === 'webgpu') {
    const gpu = await describe();
    if (!gpu.available) throw new LonghandError('DEVICE_UNAVAILABLE', `device webgpu is not available: ${gpu.reason}; use --device cpu or --device auto`, { device });
    log(`device webgpu: ${adapterLine(gpu.info!)}${gpu.info!.note ? ` — ${gpu.info!.note}` : ''}`);
    return { device: 'webgpu', adapter: gpu.info! };
  }
  const probe = await probeProvider(device);
  if (!probe.ok) {
    throw new LonghandError('DEVICE_UNAVAILABLE', `device ${device} is not available: ${probe.message ?? 'unknown reason'}; use --device cpu or --device auto`, { device });
  }
  throw new LonghandError('DEVICE_UNAVAILABLE', `device ${device} is available to onnxruntime, but Longhand's forward pass runs on cpu and webgpu only in this version; use --device cpu, webgpu or auto`, { device });
}

/**
 * On WebGPU the load runs in offload mode (the placement that keeps attention on the device), its
 * dense stages as onnxruntime graphs; an adapter without float16 keeps the KV rows in float32 (the
 * row buffer and the attention graph read the pool's row type). int8 rows have no device graph.
 */
function deviceKvType(resolved: ResolvedDevice, kvType: LoadOptions['kvType']): LoadOptions['kvType'] {
  if (resolved.device === 'cpu') return kvType;
  if (kvType === 'int8') throw new UsageError('kv-type int8 does not run on webgpu (the device row buffer holds fp16 or fp32 rows); use --kv-type fp16 or fp32', { field: 'kvType' });
  return kvType === 'fp16' && !resolved.adapter.float16 ? 'fp32' : kvType;
}

/** The model file's SHA-256, read through once per file (model-digest.ts), then kept for the load. */
function digest(state: Pick<Loaded, 'model' | 'sha'>): Promise<string> {
  state.sha ??= modelDigest(state.model, cacheDir());
  return state.sha;
}

/**
 * Runner options of a choice (InfiniGen's skew cache and the inspect flag come from the load; the
 * model's SHA-256, when known, spares InfiniGen hashing the file for its skew cache).
 */
function runnerPolicy(choice: PolicyChoice, inspect: boolean, modelSha256?: string): Pick<ModelRunnerOptions, 'policy' | 'infinigen' | 'sparse'> {
  return {
    policy: choice.policy,
    infinigen: { ...choice.infinigen, inspect, cacheDir: cacheDir(), ...(modelSha256 !== undefined ? { modelSha256 } : {}) },
    ...(choice.sparse ? { sparse: choice.sparse } : {}),
  };
}

/**
 * Makes the runner run the request's policy: nothing when it already does; the same sessions and
 * pool when the layouts allow (the cache kept); else the knobs are checked, the old runner is freed
 * first (two KV pools of a large model may not fit), and a new one is built from the loaded model
 * (the cache dropped). If building fails the previous runner is rebuilt and the error thrown
 * (typed: the request was bad, the model is still usable). Returns the switch time and whether
 * the cached tokens survived it.
 */
async function usePolicy(state: Loaded, params: GenerateParams): Promise<{ ms: number; cacheKept: boolean } | undefined> {
  const wanted = policyChoice(
    params.policy ?? state.atLoad.policy,
    params.infinigen ?? state.atLoad.infinigen,
    params.sparse ?? state.atLoad.sparse,
  );
  if (sameChoice(wanted, state.choice)) return undefined;
  // the checks the runner would make, before the current one is given up
  const { hyper } = state.model;
  assertPolicySupported(hyper, wanted.policy);
  if (state.base.poolBudgetBytes !== undefined && wanted.policy !== 'full' && wanted.policy !== 'infinigen') {
    throw new UsageError(`policy '${wanted.policy}' cannot run under the loaded pool budget (eviction works with full and infinigen only); load without one`, { field: 'policy', policy: wanted.policy });
  }
  if (wanted.sparse) sparseSettings(wanted.sparse, hyper.layers);
  const started = performance.now();
  const sha = wanted.policy === 'infinigen' ? await digest(state) : undefined;
  if (state.runner.tryAdoptPolicy(runnerPolicy(wanted, state.inspect, sha))) {
    state.choice = wanted;
    return { ms: performance.now() - started, cacheKept: true };
  }
  await state.runner.dispose();
  try {
    state.runner = await createModelRunner(state.model, { ...state.base, ...runnerPolicy(wanted, state.inspect, sha) });
  } catch (error) {
    state.runner = await createModelRunner(state.model, { ...state.base, ...runnerPolicy(state.choice, state.inspect, state.choice.policy === 'infinigen' ? await digest(state) : undefined) });
    state.sequence = new CachedSequence(state.runner);
    throw error;
  }
  state.sequence = new CachedSequence(state.runner);
  state.document = undefined;
  state.choice = wanted;
  return { ms: performance.now() - started, cacheKept: false };
}

export function createEngineCore(log: (line: string) => void = (line) => process.stderr.write(`[engine] ${line}\n`)): EngineCore {
  let loaded: Loaded | undefined;

  async function unload(): Promise<void> {
    const current = loaded;
    loaded = undefined;
    if (!current) return;
    await current.runner.dispose();
    current.model.close();
  }

  function need(): Loaded {
    if (!loaded) throw new LonghandError('ENGINE_NOT_LOADED', 'no model is loaded: load one first');
    return loaded;
  }

  /** Document snapshots (GenerateParams.document): the folder and cap the host configured. */
  let snapshots: SnapshotStore | undefined;

  /** What the loaded model is, as a snapshot records it (the file's SHA-256 is hashed once per load). */
  async function identity(state: Loaded): Promise<SnapshotIdentity> {
    const sha = await digest(state);
    const { hyper } = state.model;
    const ig = state.choice.infinigen;
    return {
      modelSha256: sha,
      architecture: hyper.architecture,
      layers: hyper.layers,
      heads: hyper.heads,
      kvHeads: hyper.kvHeads,
      headDim: hyper.headDim,
      vocabSize: hyper.vocabSize,
      kvType: state.runner.kvType,
      policy: state.runner.policy,
      knobs: state.choice.policy === 'infinigen' && ig ? { denseLayers: ig.denseLayers, partialRatio: ig.partialRatio } : { ...(state.choice.sparse ?? {}) },
    };
  }

  /**
   * Before a generation for `document`: when the cache holds another sequence and this document's
   * snapshot shares more of the prompt than the cache does, restore it. A snapshot that cannot be
   * used is reported (its typed error) and the generation runs from the cache it found.
   */
  async function restoreDocument(state: Loaded, document: string, prompt: readonly number[]): Promise<RestoreResult | undefined> {
    if (state.document === document) return undefined;
    const file = snapshots!.pathFor(document);
    if (!existsSync(file)) return undefined;
    const started = performance.now();
    try {
      const id = await identity(state);
      const common = (ids: readonly number[]): number => {
        const limit = Math.min(ids.length, prompt.length - 1);
        let n = 0;
        while (n < limit && ids[n] === prompt[n]) n++;
        return n;
      };
      const saved = await peekSequenceSnapshot(file, id, await state.runner.skewId(), state.runner.policyStateNeeds());
      // what the cache really keeps is its resume point (H2O, SnapKV, InfiniGen and the rings may cut further back)
      if (common(saved) <= state.runner.resumePoint(common(state.sequence.tokens.slice(0, state.sequence.exactTokens)))) return undefined;
      const { bytes } = await restoreSequenceSnapshot(file, state.sequence, id);
      state.document = document;
      await snapshots!.touch(document);
      return { restored: true, restoreMs: performance.now() - started, bytes };
    } catch (error) {
      log(`document ${document}: snapshot not used: ${error instanceof Error ? error.message : String(error)}`);
      if (state.sequence.tokens.length === 0) state.document = undefined;
      return { restored: false, error: errorPayload(error) };
    }
  }

  /** After a generation for `document`: its cache saved as the document's snapshot, the folder kept under the cap. */
  async function saveDocument(state: Loaded, document: string): Promise<SaveResult> {
    const started = performance.now();
    state.document = document;
    try {
      if (state.runner.evictions().some((n) => n > 0)) return { saved: false }; // no prefix of the text is left to save
      const { bytes } = await saveSequenceSnapshot(snapshots!.pathFor(document), state.sequence, await identity(state));
      await snapshots!.touch(document);
      await snapshots!.enforceCap(document);
      return { saved: true, saveMs: performance.now() - started, bytes };
    } catch (error) {
      log(`document ${document}: snapshot not saved: ${error instanceof Error ? error.message : String(error)}`);
      return { saved: false, error: errorPayload(error) };
    }
  }

  function promptIds(state: Loaded, prompt: Prompt): number[] {
    if ('ids' in prompt) {
      const bad = prompt.ids.find((id) => id >= state.info.vocabSize);
      if (bad !== undefined) throw new UsageError(`prompt id ${bad} is outside the vocabulary of ${state.info.vocabSize}`);
      return prompt.ids;
    }
    if ('text' in prompt) return state.tokenizer.encode(prompt.text, { addSpecial: true });
    const rendered = state.chat.render(prompt.messages, { addGenerationPrompt: true });
    return state.tokenizer.encode(rendered, state.chat.encodeOptionsFor(rendered));
  }

  return {
    async load(options: LoadOptions, onProgress?: (progress: LoadProgress) => void): Promise<ModelInfo> {
      await unload();
      const started = performance.now();
      const resolved = await resolveDevice(options.device, log);
      const device = resolved.device;
      const kvType = deviceKvType(resolved, options.kvType);
      if (kvType !== options.kvType) log(`device webgpu: the adapter has no float16, so the KV rows are ${kvType} (asked: ${options.kvType})`);
      const offload = options.offload === true || device === 'webgpu';
      const model = await loadModel(options.modelPath);
      try {
        const tokenizer = await createTokenizer(model.tokenizer);
        const chat = ChatTemplate.forTokenizer(model.chatTemplate, tokenizer);
        const contextLength = options.contextLength ?? Math.min(model.hyper.contextLength, DEFAULT_CONTEXT);
        // Refuse before building anything when weights + KV at this context cannot fit.
        // per layer as the family lays the rows out (window layers' rings; Gemma 4: each layer's own shape, none for KV-shared layers)
        assertFits(estimateMemory(model.hyper, summariseWeights(model).summary, contextLength, { kvType, layers: familyLayers(model.hyper) }), basename(model.path), options.poolBudgetBytes);
        const threads = options.threads ?? availableParallelism();
        const stageCache = stageCacheOptions();
        const base: Loaded['base'] = {
          threads,
          contextLength,
          kvType,
          prefillChunk: options.prefillChunk,
          device,
          eosIds: tokenizer.eosIds,
          ...(options.poolBudgetBytes > 0 ? { poolBudgetBytes: options.poolBudgetBytes } : {}),
          ...(offload ? { offload: true } : {}),
          ...(stageCache ? { stageCache } : {}),
          dense: options.dense,
        };
        const choice = policyChoice(options.policy, options.infinigen, options.sparse);
        const sha = choice.policy === 'infinigen' ? await modelDigest(model, cacheDir()) : undefined;
        const runner = await createModelRunner(model, {
          ...base,
          ...(stageCache && sha !== undefined ? { stageCache: { ...stageCache, modelSha256: sha } } : {}),
          ...runnerPolicy(choice, options.inspect, sha),
          ...(onProgress ? { onProgress } : {}),
        });
        // only what went wrong: the CLI's stderr carries this log, and a load from the cache is the normal case
        for (const line of runner.stageCache?.problems ?? []) log(line);
        const { hyper } = model;
        const info: ModelInfo = {
          path: model.path,
          format: model.format,
          architecture: hyper.architecture,
          family: hyper.family,
          layers: hyper.layers,
          heads: hyper.heads,
          kvHeads: hyper.kvHeads,
          headDim: hyper.headDim,
          hiddenSize: hyper.hiddenSize,
          vocabSize: hyper.vocabSize,
          trainedContext: hyper.contextLength,
          contextLength: runner.contextLength,
          device: options.device === 'auto' ? 'auto' : device,
          threads,
          kvType,
          policy: options.policy,
          chatTemplate: !chat.isFallback,
          loadMs: performance.now() - started,
          ...(offload ? { offload: true, rowBufferBytes: runner.rowBufferBytes ?? 0 } : {}),
          ...(resolved.device === 'webgpu' ? { adapter: resolved.adapter } : {}),
          dense: runner.dense.engine === 'native' ? `native (${runner.dense.kernel})` : `onnxruntime${runner.dense.whyNotNative ? ` (${runner.dense.whyNotNative})` : ''}`,
          // window layers keep rings, linear-attention layers a state: their kinds and sizes go to the Memory view, the token map and /metrics
          ...(runner.kvLayers().some((l) => l.kind !== 'global')
            ? { kvLayers: runner.kvLayers().map(({ tokens: _tokens, ...l }) => l), ringCheckpointBytes: runner.ringCheckpointBytes }
            : {}),
          ...(hyper.moe ? { experts: { count: hyper.moe.experts, used: hyper.moe.expertsUsed } } : {}),
        };
        loaded = { model, tokenizer, chat, runner, sequence: new CachedSequence(runner), info, base, atLoad: { policy: options.policy, infinigen: options.infinigen, sparse: options.sparse }, choice, inspect: options.inspect, ...(sha !== undefined ? { sha: Promise.resolve(sha) } : {}) };
        return info;
      } catch (error) {
        model.close();
        throw error;
      }
    },

    unload,

    async saveSnapshot(path: string): Promise<SnapshotSaved> {
      const state = need();
      const started = performance.now();
      const { tokens, bytes } = await saveSequenceSnapshot(path, state.sequence, await identity(state));
      return { tokens, bytes, ms: performance.now() - started };
    },

    async loadSnapshot(path: string): Promise<SnapshotLoaded> {
      const state = need();
      const started = performance.now();
      const { tokens, bytes } = await restoreSequenceSnapshot(path, state.sequence, await identity(state));
      state.document = undefined;
      return { tokens, bytes, ms: performance.now() - started };
    },

    async configureSnapshots({ dir, capBytes }): Promise<SnapshotStats> {
      snapshots = dir === undefined ? undefined : new SnapshotStore(dir, capBytes);
      if (snapshots) await snapshots.enforceCap();
      return this.snapshotStats();
    },

    async snapshotStats(): Promise<SnapshotStats> {
      return snapshots ? await snapshots.stats() : { dir: undefined, count: 0, bytes: 0, capBytes: 0 };
    },

    async clearSnapshots(): Promise<SnapshotStats> {
      await snapshots?.clear();
      if (loaded) loaded.document = undefined;
      return this.snapshotStats();
    },

    tokenize(text: string, addSpecial: boolean): number[] {
      return need().tokenizer.encode(text, { addSpecial });
    },

    async *generate(prompt: Prompt, params: GenerateParams, signal: AbortSignal): AsyncGenerator<GenerationEvent> {
      const state = need();
      const ids = promptIds(state, prompt);
      const cachedBefore = state.sequence.tokens.length;
      const switched = await usePolicy(state, params);
      const switchMs = switched?.ms;
      const continuation = ids.some((id) => !state.tokenizer.isSpecial(id));
      // generate() checks the request eagerly: a bad one throws before the cache is cut back
      // the inspector's A/B: each token's top-k log-probabilities when asked
      const tap = params.logprobs ? new LogitTap(state.sequence, params.logprobs) : undefined;
      const stream = generate(tap ?? state.sequence, tokenizerDecoder(state.tokenizer, { continuation }), ids, params, signal);
      const document = params.document !== undefined && snapshots !== undefined && params.reusePrefix ? params.document : undefined;
      // a generation for no document (a Rewrite, a Compare) replaces the cached sequence: it is nobody's snapshot any more
      if (document === undefined) state.document = undefined;
      const restore = document !== undefined ? await restoreDocument(state, document, ids) : undefined;
      const plan = state.sequence.reuse(ids, params.reusePrefix);
      const dropped = switched && !switched.cacheKept && cachedBefore > 0 && !restore?.restored ? 'policySwitch' : plan.dropped;
      yield { kind: 'prompt', ids, contextLength: state.runner.contextLength, pieces: promptPieces(state.tokenizer, ids) };
      let saved: SaveResult | undefined;
      const cacheReport = (): CacheReport => ({
        reusedTokens: plan.reused,
        // what the prefill computed (a cancelled one: the chunks that completed)
        prefilledTokens: Math.max(0, Math.min(ids.length, state.sequence.tokens.length) - plan.reused),
        source: plan.reused > 0 ? (restore?.restored ? 'snapshot' : 'memory') : 'none',
        ...(dropped ? { dropped } : {}),
        ...(restore || saved ? { snapshot: snapshotReport(restore, saved) } : {}),
      });
      const metrics = new StepMetricsSampler(state.runner, state.model.hyper, state.runner.policy);
      if (params.inspectEvery !== undefined) metrics.sampleEvery(params.inspectEvery);
      if (params.inspectBudget !== undefined) metrics.budget = params.inspectBudget;
      // the inspector's routing view: each forward call's experts, sent before the token it produced
      const routing: RoutingRecord[] = [];
      if (params.routing && state.model.hyper.moe) state.runner.setRoutingListener((record) => routing.push(record));
      const routingEvents = function* (): Generator<GenerationEvent> {
        for (const r of routing.splice(0)) yield { kind: 'routing', start: r.start, layers: r.layers, k: r.k, experts: Array.from(r.experts) };
      };
      try {
        for await (const event of stream) {
          yield* routingEvents();
          if (event.type === 'token') {
            const top = tap?.take();
            yield { kind: 'token', index: event.index, id: event.id, text: event.text, ...(top ? { top } : {}) };
            const snapshot = metrics.maybe(event.index + 1);
            if (snapshot) yield { kind: 'metrics', metrics: snapshot };
          } else {
            yield { kind: 'metrics', metrics: metrics.snapshot(event.completionTokens) };
            if (document !== undefined) saved = await saveDocument(state, document);
            const { type: _type, error, timings, ...rest } = event;
            yield {
              kind: 'done',
              ...rest,
              timings: { ...timings, ...(switchMs !== undefined ? { policySwitchMs: switchMs } : {}) },
              policy: state.runner.policy,
              cache: cacheReport(),
              ...(error ? { error: { code: error.code, message: error.message, details: { ...error.details } } } : {}),
            };
          }
        }
      } finally {
        state.runner.setRoutingListener(undefined);
        metrics.close();
      }
    },
  };
}

type RestoreResult = { restored: boolean; restoreMs?: number; bytes?: number; error?: ErrorPayload };
type SaveResult = { saved: boolean; saveMs?: number; bytes?: number; error?: ErrorPayload };

/** done.cache.snapshot: what the restore before and the save after did (the first error, if any). */
function snapshotReport(restore: RestoreResult | undefined, saved: SaveResult | undefined): NonNullable<CacheReport['snapshot']> {
  const error = restore?.error ?? saved?.error;
  return {
    restored: restore?.restored ?? false,
    ...(restore?.restoreMs !== undefined ? { restoreMs: restore.restoreMs } : {}),
    saved: saved?.saved ?? false,
    ...(saved?.saveMs !== undefined ? { saveMs: saved.saveMs } : {}),
    ...((saved?.bytes ?? restore?.bytes) !== undefined ? { bytes: saved?.bytes ?? restore?.bytes } : {}),
    ...(error ? { error } : {}),
  };
}

function errorPayload(error: unknown): ErrorPayload {
  return isLonghandError(error)
    ? { code: error.code, message: error.message, details: { ...error.details } }
    : { code: 'INTERNAL', message: error instanceof Error ? error.message : String(error), details: {} };
}
