// POST /v1/completions and /v1/chat/completions: one request → one queued generation.
//
// Non-streaming answers come whole when the generation ends. Streaming answers are Server-Sent
// Events, one `data: {chunk}` per token, a last chunk with finish_reason, then `data: [DONE]`.
// The SSE headers are written with the first token, so a request the engine refuses (no model,
// context overflow, bad arguments) still gets a proper HTTP status and error object. An error
// after tokens went out is sent as one `data: {"error": …}` event, then [DONE].
// A client that disconnects cancels its generation (or its place in the queue).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isLonghandError, LonghandError } from '../common/errors.ts';
import type { GenerateParams, Prompt } from '../common/protocol.ts';
import type { EngineSession } from './engine-session.ts';
import { errorBody, HttpError, httpErrorFromEngine, readJson, sendError, sendJson } from './http.ts';
import { AnswerShape, chatPrompt, ChatRequestSchema, completionPrompt, CompletionRequestSchema, engineParams, finishReason, parseBody, usage, type Endpoint } from './openai.ts';
import { QueueAbortedError } from './queue.ts';

/**
 * The typed answer to a generation while no model is loaded (503, code engine_not_loaded, through
 * the server's engine-error mapping): it says the two ways to load one.
 */
export function noModelLoaded(): LonghandError {
  return new LonghandError(
    'ENGINE_NOT_LOADED',
    'no model is loaded. Load one in the Models view of the page that `longhand serve` printed (or that `npm start` opened), or start the server with `longhand serve --model PATH` (a .gguf file or a Hugging Face folder)',
  );
}

export async function handleCompletion(endpoint: Endpoint, session: EngineSession, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const raw = await readJson(req);
  let prompt: Prompt;
  let params: Partial<GenerateParams>;
  let stream: boolean;
  let includeUsage: boolean;
  if (endpoint === 'chat') {
    const body = parseBody(ChatRequestSchema, raw);
    prompt = chatPrompt(body);
    params = engineParams(body);
    stream = body.stream === true;
    includeUsage = body.stream_options?.include_usage === true;
  } else {
    const body = parseBody(CompletionRequestSchema, raw);
    prompt = completionPrompt(body);
    params = engineParams(body);
    stream = body.stream === true;
    includeUsage = body.stream_options?.include_usage === true;
  }
  // The engine process is down or coming back: 503 with the crash named, not "no model".
  const down = session.unavailable();
  if (down) throw httpErrorFromEngine(down.code, down.message);
  const modelId = session.modelId;
  if (modelId === undefined) throw noModelLoaded();

  const shape = new AnswerShape(endpoint, modelId);
  const abort = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on('close', onClose);

  let text = '';
  let streaming = false;
  const write = (data: unknown) => {
    if (!res.destroyed) res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
  };
  const startStream = () => {
    if (streaming || res.destroyed) return;
    streaming = true;
    res.writeHead(200, { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-store', Connection: 'keep-alive', 'X-Accel-Buffering': 'no' });
    res.flushHeaders();
  };

  try {
    await session.generate(prompt, params, abort.signal, (event) => {
      if (event.kind === 'token') {
        text += event.text;
        if (stream) {
          const first = !streaming;
          startStream();
          write(shape.chunk(event.text, null, first));
        }
        return;
      }
      if (event.kind !== 'done') return;
      text += event.text;
      if (abort.signal.aborted || res.destroyed) return; // the client left: nobody to answer
      if (event.stopReason === 'error') {
        const error = event.error ?? { code: 'INTERNAL', message: 'the generation failed' };
        const http = httpErrorFromEngine(error.code, error.message);
        if (streaming) {
          write(errorBody(http.status, http.message, http.code));
          write('[DONE]');
          res.end();
        } else sendError(res, http);
        return;
      }
      const finish = finishReason(event.stopReason);
      const used = usage(event.promptTokens, event.completionTokens);
      const extra = { longhand: { stop_reason: event.stopReason, timings: event.timings, ...(event.seed !== undefined ? { seed: event.seed } : {}), ...(event.policy !== undefined ? { policy: event.policy } : {}) } };
      if (!stream) {
        sendJson(res, 200, shape.full(text, finish, used, extra));
        return;
      }
      const first = !streaming;
      startStream();
      if (event.text !== '' || first) write(shape.chunk(event.text, null, first));
      write({ ...shape.chunk(undefined, finish), ...extra });
      if (includeUsage) write(shape.usageChunk(used));
      write('[DONE]');
      res.end();
    });
  } catch (error) {
    if (error instanceof QueueAbortedError || res.destroyed) return;
    const http = isLonghandError(error) ? httpErrorFromEngine(error.code, error.message) : error instanceof HttpError ? error : undefined;
    if (!http) throw error;
    if (streaming) {
      write(errorBody(http.status, http.message, http.code));
      write('[DONE]');
      res.end();
    } else sendError(res, http);
  } finally {
    res.off('close', onClose);
  }
}
