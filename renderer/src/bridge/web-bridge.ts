// Browser mode: the page was opened as `/?token=…`, which set an HttpOnly SameSite=Strict cookie
// for this origin, so every same-origin request below is authorised without the renderer ever
// holding the token.
//   POST /api/app   body: AppRequest JSON → 200 with the AppResponses[kind] JSON, or an error
//                   status with `{ error: { code, message } }`
//   GET  /ws        WebSocket; text frames: EngineRequestInput JSON out, EngineEvent JSON in
// The engine process belongs to the server. Its state comes over the same socket as
// `{kind:'engineStatus', status}` frames (crashed with the signal named, restarting, ready with
// the new pid), which the window shows exactly as it shows the Electron supervisor's; an open
// socket with no such frame means a ready engine. restartEngine() asks the server
// (`{kind:'restartEngine'}`: fresh process, same model) and settles when the engine is ready or
// crashed again. A closed socket (the server itself is gone) is reported as crashed too, and
// restartEngine() then reconnects.
import type { AppRequestInput, AppResponses } from '../../../app/common/app-api.ts';
import type { EngineEvent, EngineRequestInput, RelayStatusEvent, RestartEngineRequest } from '../../../app/common/protocol.ts';
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
  let restarts = 0;

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
      let event: EngineEvent | RelayStatusEvent;
      try {
        event = JSON.parse(message.data) as EngineEvent | RelayStatusEvent;
      } catch {
        return; // the server only sends JSON; a broken frame is dropped, not rendered
      }
      if (event.kind === 'engineStatus') {
        if (isStatus(event.status)) setStatus(event.status);
        return;
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
      if (socket && socket.readyState === Socket.OPEN) {
        // The server restarts its engine and reloads the model; its status frames tell the outcome.
        const settled = new Promise<void>((resolve) => {
          const listener = (next: EngineStatus): void => {
            if (next.state !== 'ready' && next.state !== 'crashed') return;
            statusListeners.delete(listener);
            resolve();
          };
          statusListeners.add(listener);
        });
        restarts += 1;
        socket.send(JSON.stringify({ kind: 'restartEngine', requestId: `restart-${restarts}` } satisfies RestartEngineRequest));
        return settled;
      }
      // No connection to the server: connect again (its engine state comes with the socket).
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

/** A status frame the window can show (the server's own frames always are; anything else is dropped). */
function isStatus(value: unknown): value is EngineStatus {
  const state = (value as { state?: unknown } | null)?.state;
  if (state === 'starting') return true;
  if (state === 'ready') return typeof (value as { pid?: unknown }).pid === 'number';
  if (state === 'restarting') return typeof (value as { attempt?: unknown }).attempt === 'number';
  if (state !== 'crashed') return false;
  const crashed = value as { reason?: unknown; message?: unknown; willRestart?: unknown };
  return ['crashed', 'oom', 'killed', 'launch-failed'].includes(crashed.reason as string) && typeof crashed.message === 'string' && typeof crashed.willRestart === 'boolean';
}
