// A fake LonghandWindowApi for component tests: records engine requests, lets the test stream
// engine events, and answers app requests from overridable handlers.
import { vi } from 'vitest';
import type { AppRequestInput, AppResponses, Settings } from '../../../app/common/app-api.ts';
import type { CacheReport, EngineEvent, EngineRequestInput, LayerMetrics, ModelInfo, SnapshotStatsPayload, StepMetrics, Timings } from '../../../app/common/protocol.ts';
import type { EngineStatus, LonghandWindowApi } from '../../../app/common/window-api.ts';

type Kind = AppRequestInput['kind'];
type Handler<K extends Kind> = (request: Extract<AppRequestInput, { kind: K }>) => AppResponses[K] | Promise<AppResponses[K]>;

/** SettingsSchema's defaults, as settings.get answers them. */
export function defaultSettings(): Settings {
  return {
    policy: 'full', alpha: 5, partialRatio: 0.3, fetchCap: 0.1, denseLayers: 2, poolBudgetBytes: 0, kvType: 'fp16', device: 'cpu', threads: 0, contextLength: 0,
    sampling: { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64 },
    theme: 'system', remote: { enabled: false, baseUrl: '', apiKey: '', model: '' }, lastModelPath: '',
  };
}

export const MODEL: ModelInfo = {
  path: '/models/tiny.gguf', format: 'gguf', architecture: 'llama', family: 'llama', layers: 2, heads: 4, kvHeads: 2, headDim: 16, hiddenSize: 64, vocabSize: 512,
  trainedContext: 2048, contextLength: 2048, device: 'cpu', threads: 2, kvType: 'fp16', policy: 'full', chatTemplate: true, loadMs: 12,
};

export const TIMINGS: Timings = { ttftMs: 42, prefillMs: 40, decodeMs: 100, prefillTokensPerS: 125, decodeTokensPerS: 31.5, totalMs: 142 };

/** A step-metrics sample with plausible figures; `layers` defaults to two layers. */
export function stepMetrics(fields: Partial<StepMetrics> = {}, layerFields: Partial<LayerMetrics>[] = [{}, {}]): StepMetrics {
  return {
    step: 1, contextTokens: 100, contextLength: 2048, policy: 'infinigen', tokensPerS: 20, fetchRatio: 0.25, bytesMovedPerToken: 4096, reuseHitRate: 0.5, recall: 0.9, evictions: 0,
    timing: { denseMs: 10, attentionMs: 2, speculationMs: 1, gatherMs: 1, otherMs: 0.5 },
    memory: { weightsBytes: 1000, poolBytes: 800, poolBudgetBytes: 2000, kvUsedBytes: 600, partialKeyBytes: 100, stagedBytes: 50, rssBytes: 2000 },
    layers: layerFields.map((l, layer) => ({ layer, selected: 25, candidates: 100, bytesMoved: 2048, reuseHits: 10, reuseMisses: 15, recall: 0.9, speculationMs: 0.5, gatherMs: 0.5, attentionMs: 1, ...l })),
    ...fields,
  };
}

export class FakeApi implements LonghandWindowApi {
  readonly host = 'browser' as const;
  readonly sent: EngineRequestInput[] = [];
  private readonly eventListeners = new Set<(event: EngineEvent) => void>();
  private readonly statusListeners = new Set<(status: EngineStatus) => void>();
  status: EngineStatus = { state: 'ready', pid: 1 };
  readonly restartEngine = vi.fn(async () => this.setStatus({ state: 'ready', pid: 2 }));
  readonly handlers: { [K in Kind]?: Handler<K> } = {
    'settings.get': () => ({ settings: defaultSettings(), warning: null }),
    'settings.save': (r) => ({ settings: r.settings as Settings }),
    'documents.list': () => [],
    'documents.save': (r) => ({ updatedAt: r.document.updatedAt }),
    'models.scan': () => [],
    'downloads.list': () => [],
  };
  readonly appCalls: AppRequestInput[] = [];
  /** Answer `load` requests at once with MODEL. */
  autoLoad = true;
  /** When set, `tokenize` requests are answered at once with its ids. */
  tokenizer: ((text: string, addSpecial: boolean) => number[]) | null = null;
  /**
   * The host's document snapshots: `snapshots` requests are answered at once from these files
   * (setCap drops the oldest beyond the cap, clear empties it). null: the host keeps none.
   */
  snapshotFolder: { dir: string; capBytes: number; files: { name: string; bytes: number }[] } | null = { dir: '/data/kv-snapshots', capBytes: 2 * 1024 ** 3, files: [] };
  /** When set, `snapshots` requests are refused with this error instead. */
  snapshotError: { code: 'BAD_ARGUMENT' | 'NATIVE_INTERNAL'; message: string } | null = null;

  engineSend(request: EngineRequestInput): void {
    this.sent.push(request);
    if (request.kind === 'load' && this.autoLoad) {
      queueMicrotask(() => this.emit({ kind: 'loaded', requestId: request.requestId, model: { ...MODEL, path: request.options.modelPath, policy: request.options.policy ?? 'full' } }));
    }
    if (request.kind === 'snapshots') queueMicrotask(() => this.answerSnapshots(request));
    const tokenizer = this.tokenizer;
    if (request.kind === 'tokenize' && tokenizer) queueMicrotask(() => this.emit({ kind: 'tokenized', requestId: request.requestId, ids: tokenizer(request.text, request.addSpecial ?? true) }));
  }

  snapshotStats(): SnapshotStatsPayload {
    const folder = this.snapshotFolder;
    if (!folder) return { enabled: false, dir: null, count: 0, bytes: 0, capBytes: 0 };
    return { enabled: true, dir: folder.dir, count: folder.files.length, bytes: folder.files.reduce((sum, f) => sum + f.bytes, 0), capBytes: folder.capBytes };
  }

  private answerSnapshots(request: Extract<EngineRequestInput, { kind: 'snapshots' }>): void {
    const { requestId } = request;
    const folder = this.snapshotFolder;
    const refuse = (code: 'BAD_ARGUMENT' | 'NATIVE_INTERNAL', message: string) => this.emit({ kind: 'error', requestId, error: { code, message, details: {} } });
    if (this.snapshotError) return refuse(this.snapshotError.code, this.snapshotError.message);
    if (request.action === 'clear' && folder) folder.files = [];
    if (request.action === 'setCap') {
      if (!folder) return refuse('BAD_ARGUMENT', 'this engine keeps no document snapshots, so it has no size cap to set');
      if (request.capBytes === undefined) return refuse('BAD_ARGUMENT', 'setCap needs capBytes');
      folder.capBytes = request.capBytes;
      // Oldest first in the list: drop from the front until the rest fits.
      while (folder.files.reduce((sum, f) => sum + f.bytes, 0) > folder.capBytes) folder.files.shift();
    }
    this.emit({ kind: 'snapshots', requestId, stats: this.snapshotStats() });
  }

  onEngineEvent(listener: (event: EngineEvent) => void): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  onEngineStatus(listener: (status: EngineStatus) => void): () => void {
    this.statusListeners.add(listener);
    listener(this.status);
    return () => this.statusListeners.delete(listener);
  }

  async app<K extends Kind>(request: Extract<AppRequestInput, { kind: K }>): Promise<AppResponses[K]> {
    this.appCalls.push(request);
    const handler = this.handlers[request.kind] as Handler<K> | undefined;
    if (!handler) throw Object.assign(new Error(`no fake handler for ${request.kind}`), { code: 'INTERNAL' });
    return handler(request);
  }

  on<K extends Kind>(kind: K, handler: Handler<K>): void {
    (this.handlers as Record<string, unknown>)[kind] = handler;
  }

  calls<K extends Kind>(kind: K): Extract<AppRequestInput, { kind: K }>[] {
    return this.appCalls.filter((c): c is Extract<AppRequestInput, { kind: K }> => c.kind === kind);
  }

  emit(event: EngineEvent): void {
    for (const listener of this.eventListeners) listener(event);
  }

  setStatus(status: EngineStatus): void {
    this.status = status;
    for (const listener of this.statusListeners) listener(status);
  }

  generations(): Extract<EngineRequestInput, { kind: 'generate' }>[] {
    return this.sent.filter((r): r is Extract<EngineRequestInput, { kind: 'generate' }> => r.kind === 'generate');
  }

  lastGeneration(): Extract<EngineRequestInput, { kind: 'generate' }> {
    const last = this.generations().at(-1);
    if (!last) throw new Error('no generate request was sent');
    return last;
  }

  /** prompt event, then one token event per piece. */
  stream(requestId: string, pieces: string[], promptTokens = 5, contextLength = 2048, startIndex = 0): void {
    if (startIndex === 0) this.emit({ kind: 'prompt', requestId, ids: Array.from({ length: promptTokens }, (_, i) => i + 1), contextLength });
    pieces.forEach((text, i) => this.emit({ kind: 'token', requestId, index: startIndex + i, id: 100 + i, text }));
  }

  metrics(requestId: string, metrics: StepMetrics = stepMetrics()): void {
    this.emit({ kind: 'metrics', requestId, metrics });
  }

  done(requestId: string, fields: Partial<Extract<EngineEvent, { kind: 'done' }>> = {}): void {
    this.emit({ kind: 'done', requestId, stopReason: 'maxTokens', text: '', promptTokens: 5, completionTokens: 0, timings: TIMINGS, ...fields });
  }
}

/** A frame scheduler on a zero timeout, so tests need no requestAnimationFrame. */
export const timeoutFrames = (callback: () => void): (() => void) => {
  const id = setTimeout(callback, 0);
  return () => clearTimeout(id);
};

/** done.cache of a generation that reused `reused` of `prompt` prompt tokens from memory. */
export function cacheReport(reused: number, prompt: number, fields: Partial<CacheReport> = {}): CacheReport {
  return { reusedTokens: reused, prefilledTokens: prompt - reused, source: reused > 0 ? 'memory' : 'none', ...fields };
}
