// The server's one engine: an EngineClient (its own process), the FIFO queue in front of it,
// the loaded model's description and the figures /metrics reports. HTTP handlers and the
// WebSocket relay both go through here, so their requests share one line.
import type { EngineClient } from '../engine/client.ts';
import type { EngineEvent, GenerateParams, LoadOptions, ModelInfo, Prompt } from '../common/protocol.ts';
import { ServerMetrics } from './metrics.ts';
import { EngineQueue } from './queue.ts';
import { RemoteEngine, type RemoteConfig } from './remote-engine.ts';

export type GenerationEvent = Extract<EngineEvent, { kind: 'prompt' | 'token' | 'metrics' | 'done' }>;

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

  constructor(readonly engine: EngineClient) {
    this.metrics = new ServerMetrics(() => ({ model: this.info, queueWaiting: this.queue.waiting, generating: this.queue.running }));
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

  load(options: Partial<LoadOptions> & { modelPath: string }): Promise<ModelInfo> {
    return this.queue.run(async () => {
      this.info = undefined; // a failed load leaves the engine without a model
      this.info = await this.engine.load(options);
      return this.info;
    });
  }

  unload(): Promise<void> {
    return this.queue.run(async () => {
      this.info = undefined;
      await this.engine.unload();
    });
  }

  /**
   * Runs one generation when its turn comes, handing each event to `onEvent`. Rejects with
   * QueueAbortedError if `signal` fired while it waited, or with the engine's typed error if
   * the engine refused the request. With `allowRemote` (the window's WebSocket relay; never the
   * HTTP API, so a server pointed at itself cannot loop) and a remote endpoint in the settings,
   * the generation goes to that endpoint (remote-engine.ts) instead; load and tokenize stay local.
   */
  generate(prompt: Prompt, params: Partial<GenerateParams>, signal: AbortSignal, onEvent: (event: GenerationEvent) => void, options: { allowRemote?: boolean } = {}): Promise<void> {
    return this.queue.run(async () => {
      const remote = options.allowRemote ? await this.remoteEngine() : undefined;
      const events = remote ? remote.generate(prompt, params, signal) : this.engine.generate(prompt, params, signal);
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
    }, signal);
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
