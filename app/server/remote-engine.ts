// A remote OpenAI-compatible endpoint (vLLM, a llama.cpp server, Ollama, LM Studio, another
// Longhand) behind the local engine's generate surface: the same events (prompt, token, metrics,
// done) from POST {base}/v1/completions ({text} and {ids} prompts) or /v1/chat/completions
// ({messages} prompts) with `stream: true`, read as Server-Sent Events.
//
//   stop reasons   finish_reason 'stop' → 'stopString' when the server says one of our stop
//                  strings matched (vLLM's choice.stop_reason, Longhand's longhand.stop_reason),
//                  else 'eos'; 'length' → 'maxTokens' ('contextLimit' when fewer tokens came
//                  than asked for); the caller's abort → 'cancelled'.
//   errors         before the first token: a thrown LonghandError (4xx → BAD_ARGUMENT, network
//                  and 5xx → DEVICE_UNAVAILABLE) naming the URL and the HTTP status; after it:
//                  done with stopReason 'error' and the error payload.
//   prompt event   ids [] (the remote's token ids are not ours) and the context length the
//                  remote's /v1/models reports (vLLM max_model_len, Longhand
//                  longhand.context_length, …), else REMOTE_FALLBACK_CONTEXT; the prompt's size
//                  comes in done.promptTokens from usage (stream_options.include_usage).
//   token events   one per streamed chunk with text; `id` is 0 (the remote sends no ids).
//   timings        measured here: TTFT from the request to the first text, decode rate after it.
//   metrics        policy 'remote', fetchRatio 1, layers []; tokensPerS measured here; the
//                  remote's own /metrics (polled at most once per second during a generation)
//                  gives reuseHitRate = the prefix-cache hit rate, and `remote` carries the
//                  KV-cache usage fraction and the prefix-cache hit rate as the server reports them.
import { readFile } from 'node:fs/promises';
import { SettingsSchema } from '../common/app-api.ts';
import { LonghandError } from '../common/errors.ts';
import { GenerateParamsSchema, type ErrorPayload, type GenerateParams, type Prompt, type StepMetrics, type StopReason, type Timings } from '../common/protocol.ts';
import type { GenerationEvent } from './engine-session.ts';
import { parsePrometheus, remoteFigures, type RemoteFigures } from './remote-metrics.ts';

/** The context length reported when the remote does not say (prompt event, metrics). */
export const REMOTE_FALLBACK_CONTEXT = 4096;
/** /metrics is polled at most this often during a generation. */
export const METRICS_POLL_MS = 1000;
/** metrics events go out at most this often (the protocol's ~10 per second). */
const METRICS_EVENT_MS = 100;
export interface RemoteConfig {
  /** http(s) origin, optionally ending in /v1. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer …` when not empty. */
  apiKey: string;
  /** The model id to ask for; empty = the first one /v1/models lists. */
  model: string;
}

export interface RemoteEngineOptions {
  fetch?: typeof fetch;
  now?: () => number;
}

/** The remote settings in force, read from settings.json without touching it; undefined when off. */
export async function readRemoteSettings(settingsPath: string): Promise<RemoteConfig | undefined> {
  let text: string;
  try {
    text = await readFile(settingsPath, 'utf8');
  } catch {
    return undefined;
  }
  let parsed;
  try {
    parsed = SettingsSchema.safeParse(JSON.parse(text));
  } catch {
    return undefined;
  }
  if (!parsed.success || !parsed.data.remote.enabled) return undefined;
  const { baseUrl, apiKey, model } = parsed.data.remote;
  return { baseUrl, apiKey, model };
}

/** The server's root URL (no trailing slash, no /v1); throws BAD_ARGUMENT for anything but http(s). */
export function remoteRoot(baseUrl: string): string {
  let url: URL;
  try {
    url = new URL(baseUrl.trim());
  } catch {
    throw new LonghandError('BAD_ARGUMENT', `the remote endpoint's URL is not a URL: "${baseUrl}" (Settings → Remote endpoint)`, { baseUrl });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new LonghandError('BAD_ARGUMENT', `the remote endpoint's URL must be http:// or https://, not ${url.protocol}`, { baseUrl });
  url.search = '';
  url.hash = '';
  return url.href.replace(/\/+$/, '').replace(/\/v1$/, '');
}

type Chunk = {
  error?: { message?: unknown; code?: unknown; type?: unknown } | string;
  choices?: { text?: unknown; delta?: { content?: unknown }; finish_reason?: unknown; stop_reason?: unknown }[];
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } | null;
  longhand?: { stop_reason?: unknown };
};

export class RemoteEngine {
  readonly root: string;
  private readonly fetch: typeof fetch;
  private readonly now: () => number;
  /** From /v1/models, asked once: the model id to use and its context length. */
  private described: Promise<{ model: string; contextLength: number }> | undefined;
  /** False once /metrics answered 404 or something that is not Prometheus text. */
  private metricsAvailable = true;

  constructor(
    readonly config: RemoteConfig,
    options: RemoteEngineOptions = {},
  ) {
    this.root = remoteRoot(config.baseUrl);
    this.fetch = options.fetch ?? fetch;
    this.now = options.now ?? (() => performance.now());
  }

  private headers(json: boolean): Record<string, string> {
    const headers: Record<string, string> = { Accept: json ? 'text/event-stream, application/json' : 'text/plain, */*' };
    if (json) headers['Content-Type'] = 'application/json';
    if (this.config.apiKey !== '') headers.Authorization = `Bearer ${this.config.apiKey}`;
    return headers;
  }

  /** The model id and context length, from GET /v1/models (failures fall back quietly). */
  describe(signal?: AbortSignal): Promise<{ model: string; contextLength: number }> {
    this.described ??= (async () => {
      let model = this.config.model;
      let contextLength = 0;
      let answered = false;
      try {
        const res = await this.fetch(`${this.root}/v1/models`, { headers: this.headers(false), signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(5000)]) : AbortSignal.timeout(5000) });
        if (res.ok) {
          answered = true;
          const body = (await res.json()) as { data?: Record<string, unknown>[] };
          const list = Array.isArray(body.data) ? body.data : [];
          const entry = list.find((m) => m.id === model) ?? (model === '' ? list[0] : undefined);
          if (entry) {
            if (model === '' && typeof entry.id === 'string') model = entry.id;
            contextLength = contextOf(entry);
          }
        }
      } catch {
        // the completion request will say what is wrong
      }
      if (!answered) this.described = undefined; // a failed or cancelled look-up is not remembered
      return { model, contextLength: contextLength > 0 ? contextLength : REMOTE_FALLBACK_CONTEXT };
    })();
    return this.described;
  }

  /** The remote's /metrics figures now, or undefined when it has none. */
  async pollMetrics(since?: RemoteFigures): Promise<RemoteFigures | undefined> {
    if (!this.metricsAvailable) return undefined;
    try {
      const res = await this.fetch(`${this.root}/metrics`, { headers: this.headers(false), signal: AbortSignal.timeout(2000) });
      if (res.status === 404 || res.status === 405) this.metricsAvailable = false;
      if (!res.ok) return undefined;
      return remoteFigures(parsePrometheus(await res.text()), since);
    } catch {
      return undefined;
    }
  }

  async *generate(prompt: Prompt, paramsInput: Partial<GenerateParams>, signal: AbortSignal): AsyncGenerator<GenerationEvent> {
    const params = GenerateParamsSchema.parse(paramsInput);
    const start = this.now();
    const abort = new AbortController();
    const onAbort = () => abort.abort();
    signal.addEventListener('abort', onAbort, { once: true });

    // metrics: a poll now (the baseline) and at most one per second after it
    let figures: RemoteFigures | undefined;
    let baseline: RemoteFigures | undefined;
    let lastPoll = this.now();
    let polling: Promise<void> | undefined = this.pollMetrics().then((f) => {
      baseline = f;
      figures = f;
    });
    const maybePoll = () => {
      if (polling || this.now() - lastPoll < METRICS_POLL_MS) return;
      lastPoll = this.now();
      polling = this.pollMetrics(baseline).then((f) => {
        if (f) figures = f;
        polling = undefined;
      });
    };

    let text = '';
    let completionTokens = 0;
    let promptTokens = 0;
    let firstAt: number | undefined;
    let lastMetricsAt = -Infinity;
    let contextLength = REMOTE_FALLBACK_CONTEXT;
    const timings = (): Timings => {
      const end = this.now();
      const ttftMs = firstAt === undefined ? end - start : firstAt - start;
      const decodeMs = firstAt === undefined ? 0 : end - firstAt;
      const decodeTokensPerS = completionTokens > 1 && decodeMs >= 1 ? ((completionTokens - 1) * 1000) / decodeMs : completionTokens > 0 ? (completionTokens * 1000) / Math.max(1, end - start) : 0;
      return { ttftMs, prefillMs: ttftMs, decodeMs, prefillTokensPerS: promptTokens > 0 && ttftMs > 0 ? (promptTokens * 1000) / ttftMs : 0, decodeTokensPerS, totalMs: end - start };
    };
    const metrics = (): GenerationEvent => ({ kind: 'metrics', requestId: '', metrics: this.stepMetrics(completionTokens, promptTokens, contextLength, timings().decodeTokensPerS, figures) });
    const done = (stopReason: StopReason, error?: ErrorPayload): GenerationEvent => ({
      kind: 'done',
      requestId: '',
      stopReason,
      text: '',
      promptTokens,
      completionTokens,
      timings: timings(),
      ...(params.sampling.seed !== undefined ? { seed: params.sampling.seed } : {}),
      ...(error ? { error } : {}),
    });

    try {
      const described = await this.describe(abort.signal);
      contextLength = described.contextLength;
      if (signal.aborted) {
        yield done('cancelled');
        return;
      }
      const chat = 'messages' in prompt;
      const url = `${this.root}/v1/${chat ? 'chat/completions' : 'completions'}`;
      const body = this.body(prompt, params, described.model);

      let res: Response;
      try {
        res = await this.fetch(url, { method: 'POST', headers: this.headers(true), body: JSON.stringify(body), signal: abort.signal });
      } catch (error) {
        if (signal.aborted) {
          yield done('cancelled');
          return;
        }
        throw new LonghandError('DEVICE_UNAVAILABLE', `the remote endpoint ${url} could not be reached: ${causeOf(error)}`, { url });
      }
      if (!res.ok) {
        const detail = await res.text().catch(() => '');
        throw new LonghandError(res.status >= 500 ? 'DEVICE_UNAVAILABLE' : 'BAD_ARGUMENT', `the remote endpoint ${url} answered ${res.status}${res.statusText ? ` ${res.statusText}` : ''}${remoteMessage(detail)}${res.status === 401 || res.status === 403 ? ' (check the API key in Settings → Remote endpoint)' : ''}`, { url, status: res.status });
      }
      if (!res.body) throw new LonghandError('DEVICE_UNAVAILABLE', `the remote endpoint ${url} answered without a body`, { url });

      yield { kind: 'prompt', requestId: '', ids: [], contextLength };
      let finish: string | undefined;
      let serverStop: unknown;
      const decoder = new TextDecoder();
      let pending = '';
      const reader = res.body.getReader();
      try {
        reading: for (;;) {
          let chunk: Awaited<ReturnType<typeof reader.read>>;
          try {
            chunk = await reader.read();
          } catch (error) {
            if (signal.aborted) break;
            throw new LonghandError('DEVICE_UNAVAILABLE', `the remote endpoint ${url} broke off the stream: ${causeOf(error)}`, { url });
          }
          pending += chunk.done ? decoder.decode() : decoder.decode(chunk.value, { stream: true });
          const blocks = pending.split(/\r?\n\r?\n/);
          pending = chunk.done ? '' : blocks.pop()!;
          for (const block of blocks) {
            const data = block
              .split(/\r?\n/)
              .filter((line) => line.startsWith('data:'))
              .map((line) => line.slice(5).replace(/^ /, ''))
              .join('\n');
            if (data === '') continue;
            if (data.trim() === '[DONE]') break reading;
            let parsed: Chunk;
            try {
              parsed = JSON.parse(data) as Chunk;
            } catch {
              continue;
            }
            if (parsed.error !== undefined) {
              const message = typeof parsed.error === 'string' ? parsed.error : typeof parsed.error.message === 'string' ? parsed.error.message : JSON.stringify(parsed.error);
              throw new LonghandError('DEVICE_UNAVAILABLE', `the remote endpoint ${url} failed mid-stream: ${message}`, { url });
            }
            if (parsed.usage) {
              if (typeof parsed.usage.prompt_tokens === 'number') promptTokens = parsed.usage.prompt_tokens;
              if (typeof parsed.usage.completion_tokens === 'number') completionTokens = Math.max(completionTokens, parsed.usage.completion_tokens);
            }
            if (parsed.longhand?.stop_reason !== undefined) serverStop = parsed.longhand.stop_reason;
            const choice = parsed.choices?.[0];
            if (!choice) continue;
            const piece = chat ? choice.delta?.content : choice.text;
            if (typeof piece === 'string' && piece !== '') {
              firstAt ??= this.now();
              const index = completionTokens;
              completionTokens += 1;
              text += piece;
              yield { kind: 'token', requestId: '', index, id: 0, text: piece };
              maybePoll();
              if (this.now() - lastMetricsAt >= METRICS_EVENT_MS) {
                lastMetricsAt = this.now();
                yield metrics();
              }
            }
            if (typeof choice.finish_reason === 'string') finish = choice.finish_reason;
            if (choice.stop_reason !== undefined && choice.stop_reason !== null) serverStop = choice.stop_reason;
          }
          if (chunk.done) break;
        }
      } finally {
        reader.cancel().catch(() => undefined);
      }

      if (signal.aborted) {
        yield done('cancelled');
        return;
      }
      await settle(polling, 500);
      yield metrics();
      yield done(this.stopReason(finish, serverStop, params, completionTokens, text));
    } catch (error) {
      if (signal.aborted && !(error instanceof LonghandError)) {
        yield done('cancelled');
        return;
      }
      if (firstAt === undefined) throw error;
      const payload: ErrorPayload = error instanceof LonghandError ? { code: error.code, message: error.message, details: { ...error.details } } : { code: 'INTERNAL', message: causeOf(error), details: {} };
      yield done('error', payload);
    } finally {
      signal.removeEventListener('abort', onAbort);
      abort.abort();
    }
  }

  private body(prompt: Prompt, params: GenerateParams, model: string): Record<string, unknown> {
    const s = params.sampling;
    const body: Record<string, unknown> = { stream: true, stream_options: { include_usage: true }, max_tokens: params.maxTokens, temperature: s.temperature };
    if (model !== '') body.model = model;
    if ('messages' in prompt) body.messages = prompt.messages;
    else body.prompt = 'text' in prompt ? prompt.text : prompt.ids;
    if (s.temperature > 0) {
      if (s.topP < 1) body.top_p = s.topP;
      if (s.topK > 0) body.top_k = s.topK;
      if (s.minP > 0) body.min_p = s.minP;
    }
    if (s.repetitionPenalty !== 1) {
      body.repetition_penalty = s.repetitionPenalty; // vLLM
      body.repeat_penalty = s.repetitionPenalty; // llama.cpp, Longhand
    }
    if (s.presencePenalty !== 0) body.presence_penalty = s.presencePenalty;
    if (s.frequencyPenalty !== 0) body.frequency_penalty = s.frequencyPenalty;
    if (s.seed !== undefined) body.seed = s.seed;
    if (params.stopStrings.length > 0) body.stop = params.stopStrings;
    if (!params.stopOnEos) body.ignore_eos = true; // vLLM, llama.cpp
    return body;
  }

  private stopReason(finish: string | undefined, serverStop: unknown, params: GenerateParams, completionTokens: number, text: string): StopReason {
    if (finish === 'length') return completionTokens < params.maxTokens ? 'contextLimit' : 'maxTokens';
    if (typeof serverStop === 'string' && (serverStop === 'stopString' || serverStop === 'eos' || serverStop === 'maxTokens' || serverStop === 'contextLimit')) return serverStop; // Longhand
    if (typeof serverStop === 'string' && params.stopStrings.includes(serverStop)) return 'stopString'; // vLLM
    if (finish === 'stop') return 'eos';
    // no finish_reason (a server that just ends the stream): judge by what came
    if (params.stopStrings.some((stop) => text.endsWith(stop))) return 'stopString';
    return completionTokens >= params.maxTokens ? 'maxTokens' : 'eos';
  }

  private stepMetrics(step: number, promptTokens: number, contextLength: number, tokensPerS: number, figures: RemoteFigures | undefined): StepMetrics {
    const metrics: StepMetrics = {
      step,
      contextTokens: promptTokens + step,
      contextLength,
      policy: 'remote',
      tokensPerS,
      fetchRatio: 1,
      bytesMovedPerToken: 0,
      reuseHitRate: figures?.prefixCacheHitRate ?? null,
      recall: null,
      evictions: 0,
      timing: { denseMs: 0, attentionMs: 0, speculationMs: 0, gatherMs: 0, otherMs: 0 },
      memory: { weightsBytes: 0, poolBytes: 0, poolBudgetBytes: 0, kvUsedBytes: 0, partialKeyBytes: 0, stagedBytes: 0, rssBytes: 0 },
      layers: [],
    };
    metrics.remote = { kvCacheUsage: figures?.kvCacheUsage ?? null, prefixCacheHitRate: figures?.prefixCacheHitRate ?? null };
    return metrics;
  }
}

/** A model entry's context length, whichever server wrote it. */
function contextOf(entry: Record<string, unknown>): number {
  const candidates = [
    entry.max_model_len, // vLLM
    (entry.longhand as Record<string, unknown> | undefined)?.context_length, // Longhand
    entry.context_length, // LM Studio, some proxies
    entry.max_context_length, // LM Studio
    (entry.meta as Record<string, unknown> | undefined)?.n_ctx, // llama.cpp server
    (entry.meta as Record<string, unknown> | undefined)?.n_ctx_train, // llama.cpp server
  ];
  for (const value of candidates) if (typeof value === 'number' && Number.isInteger(value) && value > 0) return value;
  return 0;
}

/** `: <the server's message>` from an error body (OpenAI's {error: {message}}, or short text). */
function remoteMessage(body: string): string {
  if (body.trim() === '') return '';
  try {
    const parsed = JSON.parse(body) as { error?: { message?: unknown } | string; message?: unknown; detail?: unknown };
    const message = typeof parsed.error === 'string' ? parsed.error : typeof parsed.error?.message === 'string' ? parsed.error.message : typeof parsed.message === 'string' ? parsed.message : typeof parsed.detail === 'string' ? parsed.detail : undefined;
    if (message) return `: ${message}`;
  } catch {
    // not JSON
  }
  return `: ${body.trim().slice(0, 200)}`;
}

function causeOf(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as Error & { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}

/** Waits for `promise` at most `ms`, never rejecting. */
async function settle(promise: Promise<unknown> | undefined, ms: number): Promise<void> {
  if (!promise) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise.catch(() => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
