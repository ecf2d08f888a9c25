// The OpenAI-compatible request and response shapes: what /v1/completions and
// /v1/chat/completions accept (checked with zod; unknown fields are ignored as OpenAI's own
// clients send many), how they map onto the engine's protocol, and the objects and stream
// chunks that go back.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { InfinigenKnobsSchema, KvPolicySchema, SparseKnobsSchema, type ChatMessage, type GenerateParams, type Prompt, type Sampling, type StopReason } from '../common/protocol.ts';
import { HttpError } from './http.ts';

const nullish = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

const commonFields = {
  model: nullish(z.string()),
  max_tokens: nullish(z.int().positive()),
  temperature: nullish(z.number().min(0).max(2)),
  top_p: nullish(z.number().gt(0).max(1)),
  stop: nullish(z.union([z.string(), z.array(z.string()).max(16)])),
  seed: nullish(z.int().min(0).max(2 ** 32 - 1)),
  presence_penalty: nullish(z.number().min(-2).max(2)),
  frequency_penalty: nullish(z.number().min(-2).max(2)),
  stream: nullish(z.boolean()),
  stream_options: nullish(z.object({ include_usage: z.boolean().optional() })),
  n: nullish(z.literal(1, { message: 'only n = 1 is supported' })),
  logprobs: nullish(z.union([z.literal(false), z.literal(0)], { message: 'logprobs are not supported yet' })),
  // llama.cpp-server extensions, for clients that know them
  top_k: nullish(z.int().nonnegative()),
  min_p: nullish(z.number().min(0).max(1)),
  repeat_penalty: nullish(z.number().gt(0).max(10)),
  // Longhand's extension: this request's KV policy and knobs (the engine's own schemas, so a bad
  // value is a 400 naming e.g. longhand.sparse.poolKernel); absent: the loaded policy
  longhand: nullish(z.strictObject({ policy: KvPolicySchema.optional(), infinigen: InfinigenKnobsSchema.optional(), sparse: SparseKnobsSchema.optional() })),
};

export const CompletionRequestSchema = z.object({
  ...commonFields,
  prompt: z.union([z.string(), z.array(z.string()).length(1, { message: 'one prompt per request (no batches)' }), z.array(z.int().nonnegative()).min(1)]),
  echo: nullish(z.literal(false, { message: 'echo is not supported' })),
});
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

const ContentSchema = z.union([z.string(), z.array(z.object({ type: z.literal('text'), text: z.string() }))]);

export const ChatRequestSchema = z.object({
  ...commonFields,
  max_completion_tokens: nullish(z.int().positive()),
  messages: z.array(z.object({ role: z.enum(['system', 'developer', 'user', 'assistant']), content: ContentSchema })).min(1),
});
export type ChatRequest = z.infer<typeof ChatRequestSchema>;

/** Parses a body against a schema; the first problem becomes a 400 naming the field. */
export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const param = issue && issue.path.length > 0 ? issue.path.join('.') : null;
  throw new HttpError(400, `${param ?? 'body'}: ${issue?.message ?? 'invalid request'}`, 'invalid_request', param);
}

type Common = { [K in keyof typeof commonFields]?: z.infer<(typeof commonFields)[K]> };

/** The engine's parameters for a request. Unset sampling fields keep the engine's defaults. */
export function engineParams(body: Common & { max_completion_tokens?: number | null }): Partial<GenerateParams> {
  const sampling: Partial<Sampling> = {};
  if (body.temperature != null) sampling.temperature = body.temperature;
  if (body.top_p != null) sampling.topP = body.top_p;
  if (body.top_k != null) sampling.topK = body.top_k;
  if (body.min_p != null) sampling.minP = body.min_p;
  if (body.repeat_penalty != null) sampling.repetitionPenalty = body.repeat_penalty;
  if (body.presence_penalty != null) sampling.presencePenalty = body.presence_penalty;
  if (body.frequency_penalty != null) sampling.frequencyPenalty = body.frequency_penalty;
  if (body.seed != null) sampling.seed = body.seed;
  const stop = body.stop == null ? [] : typeof body.stop === 'string' ? [body.stop] : body.stop;
  const params: Partial<GenerateParams> = { sampling: sampling as Sampling, stopStrings: stop.filter((s) => s.length > 0) };
  const maxTokens = body.max_tokens ?? body.max_completion_tokens;
  if (maxTokens != null) params.maxTokens = maxTokens;
  const ext = body.longhand;
  if (ext?.policy !== undefined) params.policy = ext.policy;
  if (ext?.infinigen !== undefined) params.infinigen = ext.infinigen;
  if (ext?.sparse !== undefined) params.sparse = ext.sparse;
  return params;
}

export function completionPrompt(body: CompletionRequest): Prompt {
  const { prompt } = body;
  if (typeof prompt === 'string') return { text: prompt };
  if (typeof prompt[0] === 'string') return { text: prompt[0] };
  return { ids: prompt as number[] };
}

export function chatPrompt(body: ChatRequest): Prompt {
  const messages: ChatMessage[] = body.messages.map((m) => ({
    role: m.role === 'developer' ? 'system' : m.role,
    content: typeof m.content === 'string' ? m.content : m.content.map((part) => part.text).join(''),
  }));
  return { messages };
}

/**
 * OpenAI's finish_reason for our stop reasons: 'stop' (eos, stop string), 'length' (max tokens,
 * context full). A cancel only happens when the client has gone, so nobody reads 'cancelled';
 * it is kept distinct for logs. 'error' never reaches a finish_reason: it becomes an error.
 */
export function finishReason(stopReason: StopReason): 'stop' | 'length' | 'cancelled' | 'error' {
  switch (stopReason) {
    case 'eos':
    case 'stopString':
      return 'stop';
    case 'maxTokens':
    case 'contextLimit':
      return 'length';
    default:
      return stopReason;
  }
}

export type Endpoint = 'completion' | 'chat';

/** Builds the objects and chunks of one answer; id, created and model are the same in all. */
export class AnswerShape {
  readonly id: string;
  readonly created = Math.floor(Date.now() / 1000);

  constructor(
    readonly endpoint: Endpoint,
    readonly model: string,
  ) {
    this.id = `${endpoint === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(12).toString('hex')}`;
  }

  private head(object: string) {
    return { id: this.id, object, created: this.created, model: this.model };
  }

  /** The whole answer of a non-streaming request. */
  full(text: string, finish: string, usage: Usage, extra: Record<string, unknown>) {
    if (this.endpoint === 'chat') {
      return { ...this.head('chat.completion'), choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: finish }], usage, ...extra };
    }
    return { ...this.head('text_completion'), choices: [{ index: 0, text, logprobs: null, finish_reason: finish }], usage, ...extra };
  }

  /** A stream chunk carrying text (or, with `finish`, the last chunk). */
  chunk(text: string | undefined, finish: string | null = null, first = false) {
    if (this.endpoint === 'chat') {
      const delta: Record<string, string> = {};
      if (first) delta.role = 'assistant';
      if (text !== undefined) delta.content = text;
      return { ...this.head('chat.completion.chunk'), choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] };
    }
    return { ...this.head('text_completion'), choices: [{ index: 0, text: text ?? '', logprobs: null, finish_reason: finish }] };
  }

  /** The usage chunk of `stream_options.include_usage`: no choices, only usage. */
  usageChunk(usage: Usage) {
    return { ...this.head(this.endpoint === 'chat' ? 'chat.completion.chunk' : 'text_completion'), choices: [], usage };
  }
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export function usage(promptTokens: number, completionTokens: number): Usage {
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}
