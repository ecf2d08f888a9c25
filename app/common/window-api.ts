// The API the renderer sees, whatever carries it (Electron preload or browser-mode bridge).
// Derived from the two contracts: the engine protocol and the app API.
import type { AppRequestInput, AppResponses } from './app-api.ts';
import type { EngineEvent, EngineRequestInput } from './protocol.ts';

export interface LonghandWindowApi {
  /** Sends an engine request (load, generate, cancel, tokenize, unload). */
  engineSend(request: EngineRequestInput): void;
  /** Engine events for every request; returns an unsubscribe function. */
  onEngineEvent(listener: (event: EngineEvent) => void): () => void;
  /** Engine process state changes (crashed with a reason, restarting, ready). */
  onEngineStatus(listener: (status: EngineStatus) => void): () => void;
  /** Restarts the engine after a crash (the user asked for it). */
  restartEngine(): Promise<void>;
  /** One app request, one typed answer (or a rejected promise with {code, message}). */
  app<K extends AppRequestInput['kind']>(request: Extract<AppRequestInput, { kind: K }>): Promise<AppResponses[K]>;
  /** Where it runs: 'electron' or 'browser'. */
  readonly host: 'electron' | 'browser';
}

export type EngineStatus =
  | { state: 'starting' }
  | { state: 'ready'; pid: number }
  | { state: 'crashed'; reason: 'crashed' | 'oom' | 'killed' | 'launch-failed'; message: string; willRestart: boolean }
  | { state: 'restarting'; attempt: number };
