// Small HTTP helpers: bounded bodies, JSON answers and OpenAI-style error objects.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ErrorCode } from '../common/errors.ts';

export const MAX_BODY_BYTES = 1024 * 1024;

/** An error that becomes one HTTP answer: `{error: {message, type, code, param}}`. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  405: 'invalid_request_error',
  413: 'invalid_request_error',
  503: 'service_unavailable',
};

export function errorBody(status: number, message: string, code: string, param: string | null = null) {
  return { error: { message, type: ERROR_TYPES[status] ?? 'server_error', code, param } };
}

/** The HTTP status for an engine error code (ARCHITECTURE: typed errors reach the API as statuses). */
export function statusForEngineError(code: ErrorCode | string): number {
  switch (code) {
    case 'CONTEXT_OVERFLOW':
    case 'BAD_ARGUMENT':
    case 'PROTOCOL_BAD_MESSAGE':
      return 400;
    case 'ENGINE_NOT_LOADED':
    case 'ENGINE_CRASHED': // the engine process died; it comes back when the window restarts it
      return 503;
    default:
      return 500;
  }
}

/** An engine error as an HttpError; CONTEXT_OVERFLOW gets OpenAI's own code. */
export function httpErrorFromEngine(code: string, message: string): HttpError {
  const apiCode = code === 'CONTEXT_OVERFLOW' ? 'context_length_exceeded' : code.toLowerCase();
  return new HttpError(statusForEngineError(code), message, apiCode);
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-store', ...headers });
  res.end(text);
}

export function sendError(res: ServerResponse, error: HttpError, headers: Record<string, string> = {}): void {
  sendJson(res, error.status, errorBody(error.status, error.message, error.code, error.param), headers);
}

/** Reads a request body of at most MAX_BODY_BYTES; more is a 413 (told by Content-Length or counted). */
export function readBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume(); // drain, so the answer can be read by the client
    return Promise.reject(new HttpError(413, `the request body is ${declared} bytes; the limit is ${limit}`, 'request_too_large'));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      if (size > limit) {
        over = true;
        reject(new HttpError(413, `the request body is over the limit of ${limit} bytes`, 'request_too_large'));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!over) resolve(Buffer.concat(chunks));
    });
    req.on('error', reject);
  });
}

/** A JSON object body; bad JSON or a non-object is a 400. */
export async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const body = await readBody(req);
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch (error) {
    throw new HttpError(400, `the body is not valid JSON: ${(error as Error).message}`, 'invalid_json');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new HttpError(400, 'the body must be a JSON object', 'invalid_json');
  return value as Record<string, unknown>;
}
