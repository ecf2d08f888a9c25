// Browser mode: the page was opened as `/?token=…`, which set an HttpOnly SameSite=Strict cookie
// for this origin, so every same-origin request below is authorised without the renderer ever
// holding the token.
//   POST /api/app   body: AppRequest JSON → 200 with the AppResponses[kind] JSON, or an error
//                   status with `{ error: { code, message } }`
//   GET  /ws        WebSocket; text frames: EngineRequestInput JSON out, EngineEvent JSON in
// There is no separate engine-status channel over HTTP: the socket's state is the status
// (open → ready, closed → crashed with willRestart false); restartEngine() reconnects it.
import type { AppRequestInput, AppResponses } from '../../../app/common/app-api.ts';
import type { EngineEvent, EngineRequestInput } from '../../../app/common/protocol.ts';
import type { EngineStatus, LonghandWindowApi } from '../../../app/common/window-api.ts';

export const APP_ENDPOINT = '/api/app';
export const WS_ENDPOINT = '/ws';

/** A rejected app request, as `{code, message}` (the window API's promise contract). */
export class AppRequestError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'AppRequestError';
  }
}

export interface WebBridgeOptions {
  /** Origin-relative base, e.g. '' (same origin). */
  base?: string;
  fetch?: typeof fetch;
  WebSocket?: typeof WebSocket;
  location?: Pick<Location, 'protocol' | 'host'>;
}

export function webBridge(options: WebBridgeOptions = {}): LonghandWindowApi {
  const base = options.base ?? '';
  const doFetch = options.fetch ?? ((input, init) => fetch(input, init));
  const Socket = options.WebSocket ?? WebSocket;
  const where = options.location ?? window.location;
  const eventListeners = new Set<(event: EngineEvent) => void>();
  const statusListeners = new Set<(status: EngineStatus) => void>();
  let socket: WebSocket | undefined;
  let outbox: string[] = [];
  let status: EngineStatus = { state: 'starting' };

  const setStatus = (next: EngineStatus): void => {
    status = next;
    for (const listener of statusListeners) listener(next);
  };

  const connect = (): void => {
    const url = `${where.protocol === 'https:' ? 'wss:' : 'ws:'}//${where.host}${base}${WS_ENDPOINT}`;
    const ws = new Socket(url);
    socket = ws;
    setStatus({ state: 'starting' });
    ws.onopen = () => {
      if (socket !== ws) return;
      setStatus({ state: 'ready', pid: 0 });
      for (const frame of outbox.splice(0)) ws.send(frame);
    };
    ws.onmessage = (message: MessageEvent) => {
      if (socket !== ws || typeof message.data !== 'string') return;
      let event: EngineEvent;
      try {
        event = JSON.parse(message.data) as EngineEvent;
      } catch {
        return; // the server only sends JSON; a broken frame is dropped, not rendered
      }
      for (const listener of eventListeners) listener(event);
    };
    ws.onclose = (close: CloseEvent) => {
      if (socket !== ws) return;
      socket = undefined;
      outbox = [];
      const why = close.reason ? `: ${close.reason}` : '';
      setStatus({ state: 'crashed', reason: 'crashed', message: `The connection to the engine closed (code ${close.code})${why}.`, willRestart: false });
    };
  };

  connect();

  return {
    host: 'browser',
    engineSend(request: EngineRequestInput): void {
      const frame = JSON.stringify(request);
      if (socket && socket.readyState === Socket.OPEN) socket.send(frame);
      else if (socket) outbox.push(frame);
      else throw new AppRequestError('ENGINE_CRASHED', 'the engine connection is closed; restart it first');
    },
    onEngineEvent(listener) {
      eventListeners.add(listener);
      return () => eventListeners.delete(listener);
    },
    onEngineStatus(listener) {
      statusListeners.add(listener);
      listener(status);
      return () => statusListeners.delete(listener);
    },
    async restartEngine(): Promise<void> {
      const old = socket;
      socket = undefined;
      old?.close(1000, 'restart');
      setStatus({ state: 'restarting', attempt: 1 });
      connect();
    },
    async app<K extends AppRequestInput['kind']>(request: Extract<AppRequestInput, { kind: K }>): Promise<AppResponses[K]> {
      let response: Response;
      try {
        response = await doFetch(`${base}${APP_ENDPOINT}`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          credentials: 'same-origin',
          body: JSON.stringify(request),
        });
      } catch (error) {
        throw new AppRequestError('NETWORK', `the app server did not answer: ${(error as Error).message}`);
      }
      let body: unknown;
      try {
        body = await response.json();
      } catch {
        throw new AppRequestError('PROTOCOL_BAD_MESSAGE', `the app server answered ${response.status} without JSON`);
      }
      const failure = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
      if (!response.ok || (failure && typeof failure === 'object')) {
        const code = typeof failure?.code === 'string' ? failure.code : `HTTP_${response.status}`;
        const message = typeof failure?.message === 'string' ? failure.message : `the app server answered ${response.status}`;
        throw new AppRequestError(code, message);
      }
      return body as AppResponses[K];
    },
  };
}
