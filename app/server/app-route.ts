// POST /api/app: the window's app requests in browser mode (the Gate has already checked Host,
// Origin and the token). Body: one AppRequest as JSON. Answers 200 with AppResponses[kind], or
// `{error: {code, message}}` with
//   400  PROTOCOL_BAD_MESSAGE (not JSON, not an AppRequest), BAD_ARGUMENT, MODEL_* (a bad model file)
//   404  an unknown document or download id, MODEL_NOT_FOUND
//   405  not POST;  413  a body over MAX_APP_BODY_BYTES
//   500  anything else (INTERNAL; the details go to the server log)
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseAppRequest, type AppRequest } from '../common/app-api.ts';
import { ERROR_CODES, isLonghandError, type ErrorCode } from '../common/errors.ts';
import { HttpError, readBody, sendJson } from './http.ts';
import type { AppServices } from './services/app-services.ts';

export const APP_ROUTE = '/api/app';
/** A document may hold 20 M characters; as JSON (UTF-8, escapes) that needs room. */
export const MAX_APP_BODY_BYTES = 96 * 1024 * 1024;

export function appErrorStatus(code: string, notFound = false): number {
  if (notFound || code === 'MODEL_NOT_FOUND') return 404;
  if (code === 'BAD_ARGUMENT' || code === 'PROTOCOL_BAD_MESSAGE') return 400;
  if (code.startsWith('MODEL_') || code === 'TOKENIZER_INVALID' || code === 'CHAT_TEMPLATE_INVALID') return 400;
  return 500;
}

function sendAppError(res: ServerResponse, status: number, code: string, message: string): void {
  sendJson(res, status, { error: { code, message } });
}

export async function handleAppRoute(req: IncomingMessage, res: ServerResponse, services: AppServices, log: (line: string) => void): Promise<void> {
  if (req.method !== 'POST') {
    res.setHeader('Allow', 'POST');
    return sendAppError(res, 405, 'PROTOCOL_BAD_MESSAGE', `use POST ${APP_ROUTE}`);
  }
  let request: AppRequest;
  try {
    const body = await readBody(req, MAX_APP_BODY_BYTES);
    let value: unknown;
    try {
      value = JSON.parse(body.toString('utf8'));
    } catch (error) {
      return sendAppError(res, 400, 'PROTOCOL_BAD_MESSAGE', `the body is not valid JSON: ${(error as Error).message}`);
    }
    request = parseAppRequest(value);
  } catch (error) {
    if (error instanceof HttpError) return sendAppError(res, error.status, 'PROTOCOL_BAD_MESSAGE', error.message);
    return sendAppError(res, 400, 'PROTOCOL_BAD_MESSAGE', (error as Error).message);
  }
  try {
    sendJson(res, 200, await services.answer(request));
  } catch (error) {
    if (isLonghandError(error)) return sendAppError(res, appErrorStatus(error.code, error.details.notFound === true), error.code, error.message);
    const code = (error as { code?: unknown } | null)?.code;
    if (typeof code === 'string' && (ERROR_CODES as readonly string[]).includes(code)) return sendAppError(res, appErrorStatus(code as ErrorCode), code, (error as Error).message);
    const message = error instanceof Error ? error.message : String(error);
    log(`longhand serve: ${request.kind} failed: ${error instanceof Error ? (error.stack ?? message) : message}`);
    sendAppError(res, 500, 'INTERNAL', `${request.kind} failed: ${message}`);
  }
}
