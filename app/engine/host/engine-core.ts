// What the engine host serves: one loaded model, one generation at a time. The host
// (serve.ts) adds request ids, checks messages and routes cancels; the core does the work.
import type { EngineEvent, GenerateParams, LoadOptions, LoadProgress, ModelInfo, Prompt } from '../../common/protocol.ts';

type WithoutRequestId<T> = T extends unknown ? Omit<T, 'requestId'> : never;

/** Events of one generation, before the host stamps them with the request id. */
export type GenerationEvent = WithoutRequestId<Extract<EngineEvent, { kind: 'prompt' | 'routing' | 'token' | 'metrics' | 'done' }>>;

export interface EngineCore {
  /** `onProgress`: the forward pass's stages built so far (weights repacked + onnxruntime session), after each one. */
  load(options: LoadOptions, onProgress?: (progress: LoadProgress) => void): Promise<ModelInfo>;
  unload(): Promise<void>;
  tokenize(text: string, addSpecial: boolean): number[];
  /** Streams prompt → (token | metrics)* → done. Ends with exactly one `done`; never throws after `prompt`. */
  generate(prompt: Prompt, params: GenerateParams, signal: AbortSignal): AsyncGenerator<GenerationEvent>;
  /** Writes the cached sequence (token ids + every layer's K/V) to `path`, atomically. */
  saveSnapshot(path: string): Promise<SnapshotSaved>;
  /**
   * Replaces the cached sequence with the one saved at `path` (rows read straight into the pool).
   * A snapshot that does not fit the loaded model, policy or KV type, or is damaged, throws a
   * SNAPSHOT_* LonghandError; the cache is never half-restored: refused before any row was read it
   * is as it was, refused later (a section's checksum) it is empty.
   */
  loadSnapshot(path: string): Promise<SnapshotLoaded>;
  /**
   * Document snapshots (GenerateParams.document): the folder they are kept in (undefined: none are
   * kept) and the bytes they may take together; beyond it the least recently used are deleted.
   */
  configureSnapshots(options: { dir: string | undefined; capBytes: number }): Promise<SnapshotStats>;
  snapshotStats(): Promise<SnapshotStats>;
  /** Deletes every document snapshot in the folder. */
  clearSnapshots(): Promise<SnapshotStats>;
}

export interface SnapshotSaved {
  tokens: number;
  bytes: number;
  ms: number;
}

export interface SnapshotLoaded {
  tokens: number;
  bytes: number;
  ms: number;
}

export interface SnapshotStats {
  dir: string | undefined;
  count: number;
  bytes: number;
  capBytes: number;
}
