// What the engine host serves: one loaded model, one generation at a time. The host
// (serve.ts) adds request ids, checks messages and routes cancels; the core does the work.
import type { EngineEvent, GenerateParams, LoadOptions, ModelInfo, Prompt } from '../../common/protocol.ts';

type WithoutRequestId<T> = T extends unknown ? Omit<T, 'requestId'> : never;

/** Events of one generation, before the host stamps them with the request id. */
export type GenerationEvent = WithoutRequestId<Extract<EngineEvent, { kind: 'prompt' | 'token' | 'metrics' | 'done' }>>;

export interface EngineCore {
  load(options: LoadOptions): Promise<ModelInfo>;
  unload(): Promise<void>;
  tokenize(text: string, addSpecial: boolean): number[];
  /** Streams prompt → (token | metrics)* → done. Ends with exactly one `done`; never throws after `prompt`. */
  generate(prompt: Prompt, params: GenerateParams, signal: AbortSignal): AsyncGenerator<GenerationEvent>;
}
