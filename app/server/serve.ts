// The browser-mode / API server: HTTP on 127.0.0.1 only, one per-run token, one engine behind
// a FIFO queue. Routes:
//   GET  /                     the renderer (or a placeholder page); `?token=` here sets the cookie
//   GET  /v1/models            the loaded model
//   POST /v1/completions       OpenAI text completion (stream: SSE)
//   POST /v1/chat/completions  OpenAI chat completion (stream: SSE)
//   GET  /metrics              Prometheus text exposition
//   GET  /health               {status, model_loaded, queue_depth, generating, engine} (503 while the engine is down)
//   GET  /ws                   WebSocket relay of the engine protocol (see websocket.ts)
//   POST /api/app              the window's app requests: documents, settings, models, downloads (app-route.ts)
// Every request passes the Gate (security.ts) first: Host, Origin, then the token.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { isLonghandError } from '../common/errors.ts';
import { TEST_FAULTS_ENV } from '../common/protocol.ts';
import { APP_ROUTE, handleAppRoute } from './app-route.ts';
import { handleCompletion } from './completions.ts';
import type { EngineSession } from './engine-session.ts';
import { errorBody, HttpError, httpErrorFromEngine, sendError, sendJson } from './http.ts';
import { PAGE_HEADERS, RENDERER_DIST, sendPage, staticFile } from './page.ts';
import { readRemoteSettings } from './remote-engine.ts';
import { Gate, newToken, sessionCookie } from './security.ts';
import { createAppServices } from './services/app-services.ts';
import { defaultDataDir } from './services/data-dir.ts';
import { inspectModelFile, probeModelFile } from './services/inspect-model.ts';
import { acceptWebSocket, EngineRelay } from './websocket.ts';

export const LOOPBACK_HOST = '127.0.0.1';

export interface ServerOptions {
  session: EngineSession;
  /** 0 (the default) picks a free port. */
  port?: number;
  /** The per-run token; a fresh random one by default. */
  token?: string;
  /** Where the built renderer lives (tests point it elsewhere). */
  rendererDist?: string;
  /** Documents, settings and downloads for /api/app (default: defaultDataDir()). */
  dataDir?: string;
  /** Internal errors that are not the client's fault. */
  log?: (line: string) => void;
  /** Relay test-only `testFault` requests to the engine (default: LONGHAND_TEST_FAULTS=1 in this process's env). */
  testFaults?: boolean;
}

export interface RunningServer {
  readonly port: number;
  readonly token: string;
  /** The page URL with the token: what `longhand serve` prints first. */
  readonly url: string;
  close(): Promise<void>;
}

/** Known paths, for the `endpoint` label of longhand_requests_total (anything else is 'other'). */
const ENDPOINTS = new Set(['/', '/v1/models', '/v1/completions', '/v1/chat/completions', '/metrics', '/health', '/ws', APP_ROUTE]);

const ROUTES: Record<string, string> = {
  '/v1/models': 'GET',
  '/v1/completions': 'POST',
  '/v1/chat/completions': 'POST',
  '/metrics': 'GET',
  '/health': 'GET',
};

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const { session } = options;
  const token = options.token ?? newToken();
  const dist = options.rendererDist ?? RENDERER_DIST;
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const testFaults = options.testFaults ?? process.env[TEST_FAULTS_ENV] === '1';
  /** Set once the port is known (right after listen, before any request can arrive). */
  const ref: { gate?: Gate } = {};
  const sockets = new Set<Socket>();
  const relays = new Set<EngineRelay>();
  const appServices = createAppServices({ dataDir: options.dataDir ?? defaultDataDir(), inspect: inspectModelFile, probe: probeModelFile });
  // Settings → Remote endpoint: the window's generations go there while it is enabled.
  session.remoteConfig = () => readRemoteSettings(appServices.settings.path);

  async function route(req: IncomingMessage, res: ServerResponse, url: URL, via: string): Promise<void> {
    const { pathname } = url;
    const method = req.method ?? 'GET';
    if (pathname === '/' || pathname === '/index.html') {
      if (method !== 'GET') throw methodNotAllowed(res, 'GET');
      sendPage(res, via === 'query' ? { 'Set-Cookie': sessionCookie(ref.gate!.port, token) } : {}, dist);
      return;
    }
    if (pathname === APP_ROUTE) return handleAppRoute(req, res, appServices, log);
    const allowed = ROUTES[pathname];
    if (allowed !== undefined && method !== allowed) throw methodNotAllowed(res, allowed);
    switch (pathname) {
      case '/v1/models': {
        const model = session.model;
        const data = model
          ? [
              {
                id: session.modelId,
                object: 'model',
                created: Math.floor(Date.now() / 1000),
                owned_by: 'longhand',
                longhand: { path: model.path, format: model.format, architecture: model.architecture, context_length: model.contextLength, trained_context: model.trainedContext, layers: model.layers, kv_type: model.kvType, device: model.device, chat_template: model.chatTemplate },
              },
            ]
          : [];
        sendJson(res, 200, { object: 'list', data });
        return;
      }
      case '/v1/completions':
        await handleCompletion('completion', session, req, res);
        return;
      case '/v1/chat/completions':
        await handleCompletion('chat', session, req, res);
        return;
      case '/metrics': {
        const body = session.metrics.render();
        res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8', 'Content-Length': Buffer.byteLength(body), 'Cache-Control': 'no-store' });
        res.end(body);
        return;
      }
      case '/health': {
        // 503 while the engine process is down or restarting, with its state for monitors.
        const engine = session.status;
        const up = engine.state === 'ready';
        sendJson(res, up ? 200 : 503, { status: up ? 'ok' : `engine_${engine.state}`, model_loaded: session.model !== undefined, queue_depth: session.queue.waiting, generating: session.queue.running, engine });
        return;
      }
    }
    if (method === 'GET') {
      const file = staticFile(pathname, dist);
      if (file) {
        res.writeHead(200, { ...PAGE_HEADERS, 'Content-Type': file.type, 'Content-Length': file.body.length });
        res.end(file.body);
        return;
      }
    }
    throw new HttpError(404, `no route for ${method} ${pathname}`, 'not_found');
  }

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const endpoint = ENDPOINTS.has(url.pathname) ? url.pathname : 'other';
    res.on('close', () => session.metrics.countRequest(endpoint, res.writableFinished ? res.statusCode : 499));
    const refused = ref.gate!.checkSite(req);
    if (refused) return sendError(res, new HttpError(refused.status, refused.message, refused.code));
    const isPage = req.method === 'GET' && (url.pathname === '/' || url.pathname === '/index.html');
    const via = ref.gate!.checkToken(req, url, isPage);
    if (typeof via !== 'string') return sendError(res, new HttpError(via.status, via.message, via.code), { 'WWW-Authenticate': 'Bearer' });
    route(req, res, url, via).catch((error: unknown) => {
      if (error instanceof HttpError) return sendError(res, error);
      if (isLonghandError(error)) return sendError(res, httpErrorFromEngine(error.code, error.message));
      log(`longhand serve: internal error on ${req.method} ${url.pathname}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      if (!res.headersSent) sendJson(res, 500, errorBody(500, 'internal server error', 'internal'));
      else res.destroy();
    });
  });

  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });

  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const reject = (status: number, message: string) => {
      session.metrics.countRequest(ENDPOINTS.has(url.pathname) ? url.pathname : 'other', status);
      const body = JSON.stringify(errorBody(status, message, status === 401 ? 'invalid_api_key' : 'refused'));
      socket.end(`HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : status === 403 ? 'Forbidden' : status === 404 ? 'Not Found' : 'Bad Request'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    };
    const refused = ref.gate!.checkSite(req);
    if (refused) return reject(refused.status, refused.message);
    const via = ref.gate!.checkToken(req, url, false);
    if (typeof via !== 'string') return reject(via.status, via.message);
    if (url.pathname !== '/ws') return reject(404, `no WebSocket endpoint at ${url.pathname}`);
    const ws = acceptWebSocket(req, socket, head);
    if (typeof ws === 'string') return reject(400, ws);
    session.metrics.countRequest('/ws', 101);
    const relay = new EngineRelay(ws, session, { testFaults });
    relays.add(relay);
    ws.onClose(() => relays.delete(relay));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, LOOPBACK_HOST, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  ref.gate = new Gate(port, token);

  return {
    port,
    token,
    url: `http://${LOOPBACK_HOST}:${port}/?token=${token}`,
    async close() {
      for (const relay of relays) relay.close();
      await appServices.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

function methodNotAllowed(res: ServerResponse, allow: string): HttpError {
  res.setHeader('Allow', allow);
  return new HttpError(405, `use ${allow}`, 'method_not_allowed');
}
