// The server's one engine: an EngineClient (its own process), the FIFO queue in front of it,
// the loaded model's description and the figures /metrics reports. HTTP handlers and the
// WebSocket relay both go through here, so their requests share one line.
//
// Crash isolation (browser mode's counterpart of app/main/engine-supervisor.ts): when the engine
// process dies (SIGKILL, a native fault, the OOM killer) the running request fails with
// ENGINE_CRASHED naming the signal or exit code, every request queued for that process fails with
// the same error when its turn comes, and the status (window-api.ts EngineStatus) turns 'crashed'
// for the windows (the /ws relay forwards it). Nothing restarts by itself: restart() (the user
// asked) starts a fresh process and reloads the model that was loaded, with the same options;
// until then every engine request fails with that ENGINE_CRASHED (the HTTP API answers 503).
import { LonghandError } from '../common/errors.ts';
import { EngineClient, type EngineExit } from '../engine/client.ts';
import type { EngineEvent, GenerateParams, LoadOptionsInput, LoadProgress, ModelInfo, Prompt, SnapshotStatsPayload } from '../common/protocol.ts';
import type { EngineStatus } from '../common/window-api.ts';
import { crashStatus, launchFailedStatus } from './crash-status.ts';
import { ServerMetrics } from './metrics.ts';
import { EngineQueue } from './queue.ts';
import { RemoteEngine, type RemoteConfig } from './remote-engine.ts';

export type GenerationEvent = Extract<EngineEvent, { kind: 'prompt' | 'routing' | 'token' | 'metrics' | 'done' }>;

export interface EngineSessionOptions {
  /** Starts a fresh engine process for restart() (default: EngineClient.start() with this process's env). */
  startEngine?: () => Promise<EngineClient>;
  /** Where crashes and restarts are logged (default: stderr). */
  log?: (line: string) => void;
}

export class EngineSession {
  readonly queue = new EngineQueue();
  readonly metrics: ServerMetrics;
  private info: ModelInfo | undefined;
  /**
   * The remote endpoint the window's generations go to instead of the engine, or undefined for
   * the local engine; asked before each such generation (serve.ts reads the app's settings).
   */
  remoteConfig: (() => Promise<RemoteConfig | undefined>) | undefined;
  private remote: { key: string; engine: RemoteEngine } | undefined;

  private current: EngineClient;
  /** Bumped when the engine dies or is replaced: a job queued under an older epoch never runs. */
  private epoch = 0;
  private state: EngineStatus;
  /** What requests get while the engine is down (and jobs queued for the process that died). */
  private crashError: LonghandError | undefined;
  /** The options of the model loaded now, reloaded by restart(). */
  private loadOptions: LoadOptionsInput | undefined;
  /** What the engine is doing, for the crash message ("while generating"). */
  private activity = '';
  private restarting: Promise<void> | undefined;
  /** Engines this session killed on purpose (a restart of a live engine): their exit is no crash. */
  private readonly retired = new WeakSet<EngineClient>();
  private readonly statusListeners = new Set<(status: EngineStatus) => void>();
  private readonly startEngine: () => Promise<EngineClient>;
  private readonly log: (line: string) => void;

  constructor(engine: EngineClient, options: EngineSessionOptions = {}) {
    this.metrics = new ServerMetrics(() => ({ model: this.info, queueWaiting: this.queue.waiting, generating: this.queue.running }));
    this.startEngine = options.startEngine ?? (() => EngineClient.start());
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.current = engine;
    this.state = { state: 'ready', pid: engine.pid };
    this.watch(engine);
  }

  /** The engine process in use now (replaced by restart()). */
  get engine(): EngineClient {
    return this.current;
  }

  get status(): EngineStatus {
    return this.state;
  }

  /** Engine process state changes; returns an unsubscribe function. */
  onStatus(listener: (status: EngineStatus) => void): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  /** ENGINE_CRASHED while the engine process is down or restarting (what the API answers 503 with), else undefined. */
  unavailable(): LonghandError | undefined {
    if (this.state.state === 'crashed') return this.crashError ?? new LonghandError('ENGINE_CRASHED', this.state.message, { reason: this.state.reason });
    if (this.state.state === 'restarting') return new LonghandError('ENGINE_CRASHED', 'The engine is restarting; try again in a moment.', { reason: 'restarting' });
    return undefined;
  }

  get model(): ModelInfo | undefined {
    return this.info;
  }

  /** The id clients see in /v1/models and in answers: the file's name without `.gguf`. */
  get modelId(): string | undefined {
    if (!this.info) return undefined;
    const name = this.info.path.split(/[\\/]/).filter(Boolean).pop() ?? this.info.path;
    return name.replace(/\.gguf$/i, '');
  }

  /**
   * Loads a model when its turn comes. `onProgress` gets the host's loadProgress figures (stages of
   * the forward pass built so far) while it loads: the /ws relay forwards them to the page that asked.
   */
  load(options: LoadOptionsInput, onProgress?: (progress: LoadProgress) => void): Promise<ModelInfo> {
    const epoch = this.epoch;
    return this.queue.run(async () => {
      const engine = this.usable(epoch);
      this.info = undefined; // a failed load leaves the engine without a model
      this.loadOptions = undefined;
      this.activity = `while loading ${baseName(options.modelPath)}`;
      try {
        this.info = await engine.load(options, onProgress);
      } finally {
        this.activity = '';
      }
      this.loadOptions = options;
      return this.info;
    });
  }

  unload(): Promise<void> {
    const epoch = this.epoch;
    return this.queue.run(async () => {
      const engine = this.usable(epoch);
      this.info = undefined;
      this.loadOptions = undefined;
      await engine.unload();
    });
  }

  /** Tokenizes with the loaded model (not queued: the host answers between generation steps). */
  tokenize(text: string, addSpecial: boolean): Promise<number[]> {
    try {
      return this.usable(this.epoch).tokenize(text, addSpecial);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Document snapshots of the local engine (never a remote endpoint's): not queued here, the host
   * runs them in its own order, after the generation in progress.
   */
  snapshots(action: 'stats' | 'setCap' | 'clear', capBytes?: number): Promise<SnapshotStatsPayload> {
    try {
      return this.usable(this.epoch).snapshots(action, capBytes);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Runs one generation when its turn comes, handing each event to `onEvent`. Rejects with
   * QueueAbortedError if `signal` fired while it waited, with the engine's typed error if
   * the engine refused the request, or with ENGINE_CRASHED if the engine died. With `allowRemote`
   * (the window's WebSocket relay; never the HTTP API, so a server pointed at itself cannot loop)
   * and a remote endpoint in the settings, the generation goes to that endpoint
   * (remote-engine.ts) instead; load and tokenize stay local.
   */
  generate(prompt: Prompt, params: Partial<GenerateParams>, signal: AbortSignal, onEvent: (event: GenerationEvent) => void, options: { allowRemote?: boolean } = {}): Promise<void> {
    const epoch = this.epoch;
    return this.queue.run(async () => {
      const remote = options.allowRemote ? await this.remoteEngine() : undefined;
      let events: AsyncIterable<GenerationEvent>;
      if (remote) events = remote.generate(prompt, params, signal);
      else {
        events = this.usable(epoch).generate(prompt, params, signal);
        this.activity = 'while generating';
      }
      try {
        for await (const event of events) {
          if (event.kind === 'metrics') this.metrics.observeStep(event.metrics);
          if (event.kind === 'done') {
            this.metrics.countGeneration({
              stopReason: event.stopReason,
              promptTokens: event.promptTokens,
              completionTokens: event.completionTokens,
              ttftMs: event.timings.ttftMs,
              decodeTokensPerS: event.timings.decodeTokensPerS,
              prefillTokensPerS: event.timings.prefillTokensPerS,
            });
          }
          onEvent(event);
        }
      } finally {
        if (!remote) this.activity = '';
      }
    }, signal);
  }

  /**
   * The user asked: a fresh engine process (the old one is killed if it still runs), then the
   * model that was loaded, with the same options. Status: restarting → ready (or crashed again,
   * naming why). Resolves when that is settled; concurrent calls share one restart.
   */
  restart(): Promise<void> {
    this.restarting ??= this.doRestart().finally(() => (this.restarting = undefined));
    return this.restarting;
  }

  /** Ends the engine process in use (the server is shutting down). */
  async close(): Promise<void> {
    this.retired.add(this.current);
    await this.current.close();
  }

  // ── internals ──────────────────────────────────────────────────────────────────────────────

  private async doRestart(): Promise<void> {
    const old = this.current;
    if (!old.exited) {
      this.retired.add(old);
      old.kill('SIGKILL');
    }
    // Whatever was queued for the old process fails; what comes after this waits for the new one.
    this.epoch += 1;
    this.crashError ??= new LonghandError('ENGINE_CRASHED', 'The engine was restarted before this request ran.', { reason: 'killed' });
    this.info = undefined;
    const options = this.loadOptions;
    this.setStatus({ state: 'restarting', attempt: 1 });
    this.log(`longhand serve: restarting the engine${options ? ` and reloading ${options.modelPath}` : ''}`);
    await this.queue.run(async () => {
      let engine: EngineClient;
      try {
        engine = await this.startEngine();
      } catch (error) {
        this.fail(launchFailedStatus(error));
        return;
      }
      this.current = engine;
      this.watch(engine);
      if (options) {
        this.activity = `while loading ${baseName(options.modelPath)}`;
        try {
          this.info = await engine.load(options);
        } catch (error) {
          // A crash while loading has already set the status (watch); a refusal leaves the
          // engine running without a model, which the window shows as such.
          this.loadOptions = undefined;
          this.log(`longhand serve: reloading ${options.modelPath} after the restart failed: ${(error as Error).message}`);
        } finally {
          this.activity = '';
        }
      }
      if (this.current !== engine || engine.exited) return;
      this.crashError = undefined;
      this.setStatus({ state: 'ready', pid: engine.pid });
    });
  }

  /** The engine for a job queued under `epoch`, or the crash error when that engine is gone. */
  private usable(epoch: number): EngineClient {
    if (epoch !== this.epoch || this.state.state === 'crashed') {
      throw this.crashError ?? new LonghandError('ENGINE_CRASHED', 'The engine is not running.', {});
    }
    return this.current;
  }

  private watch(engine: EngineClient): void {
    engine.onExit((exit: EngineExit) => {
      if (this.current !== engine || this.retired.has(engine)) return;
      this.fail(crashStatus(exit, this.activity), exit);
    });
  }

  private fail(status: Extract<EngineStatus, { state: 'crashed' }>, exit?: EngineExit): void {
    this.epoch += 1;
    this.info = undefined;
    this.crashError = new LonghandError('ENGINE_CRASHED', status.message, { reason: status.reason, code: exit?.code ?? null, signal: exit?.signal ?? null });
    this.log(`longhand serve: ${status.message}`);
    this.setStatus(status);
  }

  private setStatus(status: EngineStatus): void {
    this.state = status;
    for (const listener of [...this.statusListeners]) listener(status);
  }

  /** The RemoteEngine for the settings in force (kept while they stay the same), or undefined. */
  private async remoteEngine(): Promise<RemoteEngine | undefined> {
    const config = await this.remoteConfig?.();
    if (!config) return undefined;
    const key = JSON.stringify(config);
    if (this.remote?.key !== key) this.remote = { key, engine: new RemoteEngine(config) };
    return this.remote.engine;
  }
}

function baseName(path: string): string {
  return path.split(/[\\/]/).filter(Boolean).pop() ?? path;
}
