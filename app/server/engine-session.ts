// The server's one engine: an EngineClient (its own process), the FIFO queue in front of it,
// the loaded model's description and the figures /metrics reports. HTTP handlers and the
// WebSocket relay both go through here, so their requests share one line.
import type { EngineClient } from '../engine/client.ts';
import type { EngineEvent, GenerateParams, LoadOptions, ModelInfo, Prompt } from '../common/protocol.ts';
import { ServerMetrics } from './metrics.ts';
import { EngineQueue } from './queue.ts';

export type GenerationEvent = Extract<EngineEvent, { kind: 'prompt' | 'token' | 'metrics' | 'done' }>;

export class EngineSession {
  readonly queue = new EngineQueue();
  readonly metrics: ServerMetrics;
  private info: ModelInfo | undefined;

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
   * the engine refused the request.
   */
  generate(prompt: Prompt, params: Partial<GenerateParams>, signal: AbortSignal, onEvent: (event: GenerationEvent) => void): Promise<void> {
    return this.queue.run(async () => {
      for await (const event of this.engine.generate(prompt, params, signal)) {
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
}
