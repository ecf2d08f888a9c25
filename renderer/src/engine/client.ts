// The one engine client every feature uses, over whichever bridge carries the window API.
// It owns request ids, routes events back to their request, turns generations into callbacks
// (text batched per animation frame, metrics throttled to 10/s), and turns engine errors and
// crashes into typed EngineErrors. Other views (summarise, cache inspector) subscribe to every
// generation's raw events and metrics without taking part in them.
import type { CacheReport, EngineEvent, EngineRequestInput, LoadProgress, ModelInfo, Prompt, SnapshotStatsPayload, StepMetrics, StopReason, Timings } from '../../../app/common/protocol.ts';
import type { EngineStatus, LonghandWindowApi } from '../../../app/common/window-api.ts';
import { animationFrame, TextBatcher, Throttle, type FrameScheduler } from './schedule.ts';

export type LoadOptionsInput = Extract<EngineRequestInput, { kind: 'load' }>['options'];
export type GenerateParamsInput = NonNullable<Extract<EngineRequestInput, { kind: 'generate' }>['params']>;
export type GenerationEvent = Extract<EngineEvent, { kind: 'prompt' | 'routing' | 'token' | 'done' }>;
export type { LoadProgress } from '../../../app/common/protocol.ts';

/** A request that failed: `code` is one of app/common/errors.ts ERROR_CODES (or ENGINE_CRASHED). */
export class EngineError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details: Readonly<Record<string, unknown>> = {},
  ) {
    super(message);
    this.name = 'EngineError';
  }
}

/** Live figures of one generation; the last one (done: true) carries the engine's own timings. */
export interface GenerationMetrics {
  requestId: string;
  promptTokens: number;
  completionTokens: number;
  /** The context window (M of "context used N of M"); null until the prompt event. */
  contextLength: number | null;
  /** Time to first token: measured here while streaming, the engine's figure once done. */
  ttftMs: number | null;
  /** Decode speed: measured here while streaming, the engine's figure once done. */
  tokensPerS: number | null;
  elapsedMs: number;
  done: boolean;
  stopReason: StopReason | null;
  timings: Timings | null;
  seed: number | null;
  /** How the prompt used the KV cache (reused tokens, snapshot restore); null until done, or from engines that keep none. */
  cache: CacheReport | null;
  error: { code: string; message: string } | null;
}

export type SnapshotAction = Extract<EngineRequestInput, { kind: 'snapshots' }>['action'];
export type SnapshotStats = SnapshotStatsPayload;

export interface GenerationResult {
  requestId: string;
  /** All generated text, the held-back tail of `done` included. */
  text: string;
  stopReason: StopReason;
  metrics: GenerationMetrics;
}

/** The engine's own per-step figures (ARCHITECTURE.md §7) for one generation. */
export interface StepMetricsEvent {
  requestId: string;
  metrics: StepMetrics;
}

export interface GenerationCallbacks {
  /** New text, at most once per animation frame (several tokens concatenated). */
  onText?: (text: string) => void;
  /** Metrics, at most 10 times a second, and always once more at the end. */
  onMetrics?: (metrics: GenerationMetrics) => void;
  /** The engine's step metrics (KV cache, per layer), at most 10 times a second; the last one is never dropped. */
  onStepMetrics?: (event: StepMetricsEvent) => void;
}

export interface Generation {
  readonly requestId: string;
  /** Resolves at `done` (whatever the stop reason); rejects with EngineError if it never started or the engine died. */
  readonly result: Promise<GenerationResult>;
  /** Asks the engine to stop; the result then resolves with stopReason 'cancelled'. */
  cancel(): void;
}

export interface EngineClientOptions {
  schedule?: FrameScheduler;
  now?: () => number;
  metricsIntervalMs?: number;
}

interface Pending {
  event(event: EngineEvent): void;
  fail(error: EngineError): void;
}

/**
 * Browser mode passes the server's frames on unparsed (the renderer has no schemas, only types):
 * figures a progress bar cannot show are dropped rather than drawn.
 */
function isLoadProgress(progress: LoadProgress): boolean {
  const { done, total } = progress;
  return Number.isInteger(done) && Number.isInteger(total) && total > 0 && done >= 0 && done <= total;
}

let idCounter = 0;
const session = Math.random().toString(36).slice(2, 8);
export function newRequestId(prefix = 'r'): string {
  idCounter += 1;
  return `${prefix}-${session}-${idCounter}`;
}

const createdListeners = new Set<(client: EngineClient) => void>();
let liveClient: EngineClient | null = null;

/**
 * Calls `listener` with every EngineClient created from now on (and the live one, if any), so a
 * feature that must observe every generation from start-up (the cache inspector) can subscribe
 * without the shell wiring it in. Returns an unsubscribe function.
 */
export function onEngineClientCreated(listener: (client: EngineClient) => void): () => void {
  createdListeners.add(listener);
  if (liveClient) listener(liveClient);
  return () => createdListeners.delete(listener);
}

function announce(client: EngineClient): void {
  liveClient = client;
  for (const listener of createdListeners) listener(client);
}

export class EngineClient {
  private readonly pending = new Map<string, Pending>();
  private readonly stepMetricsListeners = new Set<(event: StepMetricsEvent) => void>();
  private lastLoad: LoadOptionsInput | null = null;
  private readonly eventListeners = new Set<(event: GenerationEvent) => void>();
  private readonly modelListeners = new Set<(model: ModelInfo) => void>();
  /** The loaded model has experts (its generations send routing events). */
  private hasExperts = false;
  private readonly metricsListeners = new Set<(metrics: GenerationMetrics) => void>();
  private readonly unsubscribe: (() => void)[] = [];
  private readonly schedule: FrameScheduler;
  private readonly now: () => number;
  private readonly metricsIntervalMs: number;

  constructor(
    readonly api: LonghandWindowApi,
    options: EngineClientOptions = {},
  ) {
    this.schedule = options.schedule ?? animationFrame;
    this.now = options.now ?? (() => performance.now());
    this.metricsIntervalMs = options.metricsIntervalMs ?? 100;
    this.unsubscribe.push(api.onEngineEvent((event) => this.route(event)));
    this.unsubscribe.push(
      api.onEngineStatus((status) => {
        if (status.state === 'crashed') this.failAll(new EngineError('ENGINE_CRASHED', status.message, { reason: status.reason }));
      }),
    );
    announce(this);
  }

  dispose(): void {
    if (liveClient === this) liveClient = null;
    for (const off of this.unsubscribe.splice(0)) off();
    this.failAll(new EngineError('ENGINE_CRASHED', 'the window closed its engine client'));
  }

  onStatus(listener: (status: EngineStatus) => void): () => void {
    return this.api.onEngineStatus(listener);
  }

  restart(): Promise<void> {
    return this.api.restartEngine();
  }

  /** Raw prompt/token/done events of every generation (for the cache inspector, summarise). */
  onGenerationEvent(listener: (event: GenerationEvent) => void): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  /** Throttled metrics of every generation. */
  onMetrics(listener: (metrics: GenerationMetrics) => void): () => void {
    this.metricsListeners.add(listener);
    return () => this.metricsListeners.delete(listener);
  }

  /**
   * The engine's step metrics of every generation (per request at most 10 a second, the final
   * one always delivered).
   */
  /** Models loaded by someone else than this client (the server's --model, another page). */
  onModelAnnounced(listener: (model: ModelInfo) => void): () => void {
    this.modelListeners.add(listener);
    return () => this.modelListeners.delete(listener);
  }

  onStepMetrics(listener: (event: StepMetricsEvent) => void): () => void {
    this.stepMetricsListeners.add(listener);
    return () => this.stepMetricsListeners.delete(listener);
  }

  /** The options of the last load that succeeded (to restore the user's model after a comparison). */
  get lastLoadOptions(): LoadOptionsInput | null {
    return this.lastLoad;
  }

  /** `onProgress`: the host's loadProgress figures (stages of the forward pass built) while it loads. */
  load(options: LoadOptionsInput, onProgress?: (progress: LoadProgress) => void): Promise<ModelInfo> {
    const pick = (event: EngineEvent): ModelInfo | undefined => {
      if (event.kind === 'loadProgress' && isLoadProgress(event)) onProgress?.({ done: event.done, total: event.total });
      return event.kind === 'loaded' ? event.model : undefined;
    };
    return this.request({ kind: 'load', requestId: newRequestId('load'), options }, pick).then((model) => {
      this.lastLoad = options;
      this.hasExperts = model.experts !== undefined;
      return model;
    });
  }

  unload(): Promise<void> {
    return this.request({ kind: 'unload', requestId: newRequestId('unload') }, (event) => (event.kind === 'unloaded' ? true : undefined)).then(() => undefined);
  }

  tokenize(text: string, addSpecial = true): Promise<number[]> {
    return this.request({ kind: 'tokenize', requestId: newRequestId('tok'), text, addSpecial }, (event) => (event.kind === 'tokenized' ? event.ids : undefined));
  }

  /** Document snapshots kept by the engine host: its figures, a new size cap in bytes, or all deleted. */
  snapshots(action: SnapshotAction, capBytes?: number): Promise<SnapshotStats> {
    const request = { kind: 'snapshots' as const, requestId: newRequestId('snap'), action, ...(capBytes !== undefined ? { capBytes } : {}) };
    return this.request(request, (event) => (event.kind === 'snapshots' ? event.stats : undefined));
  }

  generate(prompt: Prompt, requested: GenerateParamsInput = {}, callbacks: GenerationCallbacks = {}): Generation {
    // a mixture-of-experts model: every generation records its routing for the inspector's Routing view
    const params: GenerateParamsInput = this.hasExperts && requested.routing === undefined ? { ...requested, routing: true } : requested;
    const requestId = newRequestId('gen');
    const started = this.now();
    let firstTokenAt: number | null = null;
    let text = '';
    const metrics: GenerationMetrics = {
      requestId, promptTokens: 0, completionTokens: 0, contextLength: null, ttftMs: null, tokensPerS: null,
      elapsedMs: 0, done: false, stopReason: null, timings: null, seed: null, cache: null, error: null,
    };
    const batcher = new TextBatcher((chunk) => callbacks.onText?.(chunk), this.schedule);
    const throttle = new Throttle<GenerationMetrics>((m) => this.emitMetrics(m, callbacks), this.metricsIntervalMs, this.now);
    const stepThrottle = new Throttle<StepMetricsEvent>((m) => this.emitStepMetrics(m, callbacks), this.metricsIntervalMs, this.now);
    const live = (): void => {
      const now = this.now();
      metrics.elapsedMs = now - started;
      if (firstTokenAt !== null && metrics.completionTokens > 1) metrics.tokensPerS = ((metrics.completionTokens - 1) * 1000) / Math.max(1, now - firstTokenAt);
      throttle.push({ ...metrics });
    };

    let settle!: { resolve: (r: GenerationResult) => void; reject: (e: EngineError) => void };
    const result = new Promise<GenerationResult>((resolve, reject) => (settle = { resolve, reject }));

    const finish = (): void => {
      this.pending.delete(requestId);
      batcher.flush();
      // The engine's final step metrics come before its done: deliver them now, never drop them.
      stepThrottle.flush();
      stepThrottle.cancel();
    };

    this.pending.set(requestId, {
      event: (event) => {
        if (event.kind === 'prompt') {
          metrics.promptTokens = event.ids.length;
          metrics.contextLength = event.contextLength;
          this.broadcast(event);
          live();
        } else if (event.kind === 'routing') {
          this.broadcast(event);
        } else if (event.kind === 'token') {
          if (firstTokenAt === null) {
            firstTokenAt = this.now();
            metrics.ttftMs = firstTokenAt - started;
          }
          metrics.completionTokens += 1;
          text += event.text;
          batcher.push(event.text);
          this.broadcast(event);
          live();
        } else if (event.kind === 'metrics') {
          // a generation that asked for metrics every N steps (the inspector's) gets each of them
          if (params.inspectEvery !== undefined) this.emitStepMetrics({ requestId, metrics: event.metrics }, callbacks);
          else stepThrottle.push({ requestId, metrics: event.metrics });
        } else if (event.kind === 'done') {
          text += event.text;
          batcher.push(event.text);
          finish();
          Object.assign(metrics, {
            promptTokens: event.promptTokens || metrics.promptTokens,
            completionTokens: event.completionTokens,
            ttftMs: event.timings.ttftMs,
            tokensPerS: event.timings.decodeTokensPerS,
            elapsedMs: event.timings.totalMs || this.now() - started,
            done: true,
            stopReason: event.stopReason,
            timings: event.timings,
            seed: event.seed ?? null,
            cache: event.cache ?? null,
            error: event.error ? { code: event.error.code, message: event.error.message } : null,
          });
          this.broadcast(event);
          throttle.cancel();
          this.emitMetrics({ ...metrics }, callbacks);
          settle.resolve({ requestId, text, stopReason: event.stopReason, metrics: { ...metrics } });
        } else if (event.kind === 'error') {
          const error = new EngineError(event.error.code, event.error.message, event.error.details);
          this.pending.get(requestId)?.fail(error);
        }
      },
      fail: (error) => {
        finish();
        throttle.cancel();
        Object.assign(metrics, { done: true, stopReason: 'error', error: { code: error.code, message: error.message }, elapsedMs: this.now() - started });
        this.emitMetrics({ ...metrics }, callbacks);
        settle.reject(error);
      },
    });

    this.send({ kind: 'generate', requestId, prompt, params });
    return {
      requestId,
      result,
      cancel: () => {
        if (!this.pending.has(requestId)) return;
        this.send({ kind: 'cancel', requestId: newRequestId('cancel'), target: requestId });
      },
    };
  }

  private request<T>(request: EngineRequestInput & { requestId: string }, pick: (event: EngineEvent) => T | undefined): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.set(request.requestId, {
        event: (event) => {
          if (event.kind === 'error') {
            this.pending.delete(request.requestId);
            reject(new EngineError(event.error.code, event.error.message, event.error.details));
            return;
          }
          const value = pick(event);
          if (value === undefined) return;
          this.pending.delete(request.requestId);
          resolve(value);
        },
        fail: (error) => {
          this.pending.delete(request.requestId);
          reject(error);
        },
      });
      this.send(request);
    });
  }

  private send(request: EngineRequestInput & { requestId: string }): void {
    try {
      this.api.engineSend(request);
    } catch (error) {
      const failure = error as { code?: unknown; message?: unknown };
      const engineError = new EngineError(typeof failure.code === 'string' ? failure.code : 'ENGINE_CRASHED', typeof failure.message === 'string' ? failure.message : String(error));
      // Fail asynchronously so callers always get their handle first.
      queueMicrotask(() => this.pending.get(request.requestId)?.fail(engineError));
    }
  }

  private route(event: EngineEvent): void {
    if (!('requestId' in event)) return;
    const pending = this.pending.get(event.requestId);
    if (pending) pending.event(event);
    // Metrics of a generation that already ended (a late final sample): observers still get them.
    else if (event.kind === 'metrics') this.emitStepMetrics({ requestId: event.requestId, metrics: event.metrics }, {});
    // A model someone else loaded (browser mode tells a new page what the server already has).
    else if (event.kind === 'loaded') {
      this.hasExperts = event.model.experts !== undefined;
      for (const listener of this.modelListeners) listener(event.model);
    }
  }

  private failAll(error: EngineError): void {
    for (const pending of [...this.pending.values()]) pending.fail(error);
    this.pending.clear();
  }

  private broadcast(event: GenerationEvent): void {
    for (const listener of this.eventListeners) listener(event);
  }

  private emitStepMetrics(event: StepMetricsEvent, callbacks: GenerationCallbacks): void {
    callbacks.onStepMetrics?.(event);
    for (const listener of this.stepMetricsListeners) listener(event);
  }

  private emitMetrics(metrics: GenerationMetrics, callbacks: GenerationCallbacks): void {
    callbacks.onMetrics?.(metrics);
    for (const listener of this.metricsListeners) listener(metrics);
  }
}
