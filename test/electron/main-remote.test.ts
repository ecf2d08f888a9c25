// Electron main with Settings → remote enabled: the window's generate requests go to a remote
// OpenAI-compatible endpoint (a tiny SSE server on 127.0.0.1 here) instead of the engine host;
// cancel aborts them; tokenize (and load/unload) still go to the host. app/main/index.ts runs
// against the fake electron module; the settings are written with the same SettingsStore main's
// app services use, into userData.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { EngineEvent } from '../../app/common/protocol.ts';
import { IPC } from '../../app/main/ipc-channels.ts';
import { SettingsStore } from '../../app/server/services/settings.ts';
import type { BrowserWindow, FakePort } from './fake-electron.ts';
import { fake, ipcMain, resetFake } from './fake-electron.ts';

vi.mock('electron', () => import('./fake-electron.ts'));

// ── the remote: /v1/models, /metrics and a streamed /v1/completions ───────────────────────────

interface Seen {
  completions: Array<Record<string, unknown>>;
  closedEarly: number;
  authorization: string[];
}
const seen: Seen = { completions: [], closedEarly: 0, authorization: [] };

function sse(res: ServerResponse, chunk: unknown): void {
  res.write(`data: ${JSON.stringify(chunk)}\n\n`);
}

function remoteHandler(req: IncomingMessage, res: ServerResponse): void {
  seen.authorization.push(String(req.headers.authorization ?? ''));
  if (req.method === 'GET' && req.url === '/v1/models') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ object: 'list', data: [{ id: 'tiny-remote', max_model_len: 2048 }] }));
    return;
  }
  if (req.method === 'GET' && req.url === '/metrics') {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="tiny-remote"} 0.25\nvllm:gpu_prefix_cache_hit_rate 0.5\n');
    return;
  }
  if (req.method === 'POST' && req.url === '/v1/completions') {
    let body = '';
    req.on('data', (data: Buffer) => (body += data.toString()));
    req.on('end', () => {
      const request = JSON.parse(body) as { prompt: string; max_tokens: number; model?: string };
      seen.completions.push(request);
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
      const id = 'cmpl-1';
      if (request.prompt.includes('slow')) {
        // one piece, then nothing until the client goes away
        sse(res, { id, object: 'text_completion', choices: [{ index: 0, text: ' and then', finish_reason: null }] });
        res.on('close', () => seen.closedEarly++);
        return;
      }
      const pieces = request.prompt.includes('short') ? [' The', ' end.'] : [' there', ' was', ' a'];
      const finish = request.prompt.includes('short') ? 'stop' : 'length';
      pieces.forEach((text, index) => sse(res, { id, object: 'text_completion', choices: [{ index: 0, text, finish_reason: index === pieces.length - 1 ? finish : null }] }));
      sse(res, { id, object: 'text_completion', choices: [], usage: { prompt_tokens: 3, completion_tokens: pieces.length, total_tokens: 3 + pieces.length } });
      res.write('data: [DONE]\n\n');
      res.end();
    });
    return;
  }
  res.writeHead(404);
  res.end();
}

// ── the fake engine host: records what reaches it, answers tokenize ───────────────────────────

const hostReceived: Array<{ kind: string; requestId: string }> = [];
let server: Server;
let window: BrowserWindow;
let page: FakePort;
const received: EngineEvent[] = [];

function eventsOf(requestId: string): EngineEvent[] {
  return received.filter((event) => 'requestId' in event && event.requestId === requestId);
}

async function until(check: () => boolean, ms = 5000): Promise<void> {
  const start = Date.now();
  while (!check()) {
    if (Date.now() - start > ms) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

beforeAll(async () => {
  server = createServer(remoteHandler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  resetFake();
  const store = new SettingsStore(fake.app.userData);
  const { settings } = await store.get();
  await store.save({ ...settings, remote: { enabled: true, baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: 'sk-test', model: '' } });
  fake.onHostMessage = (child, message, transfer) => {
    const hostPort = transfer[0];
    const connect = message as { kind?: string; client?: string };
    if (connect.kind !== 'connect' || !hostPort) return;
    hostPort.start();
    if (connect.client === 'supervisor') {
      hostPort.postMessage({ kind: 'ready', protocol: 1, pid: child.pid });
      return;
    }
    hostPort.on('message', ({ data }: { data: unknown }) => {
      const request = data as { kind: string; requestId: string };
      hostReceived.push(request);
      if (request.kind === 'tokenize') hostPort.postMessage({ kind: 'tokenized', requestId: request.requestId, ids: [1, 2, 3] });
    });
  };
  await import('../../app/main/index.ts');
  await new Promise((resolve) => setTimeout(resolve, 0)); // whenReady().then(onReady)
  window = fake.windows[0]!;

  ipcMain.sendFrom(IPC.engineConnect, window.webContents, window.webContents.mainFrame);
  page = window.webContents.posted.at(-1)!.ports[0]!;
  page.on('message', ({ data }: { data: unknown }) => received.push(data as EngineEvent));
  page.start();
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('Electron main: generations through the remote endpoint in the settings', () => {
  it('answers a generate from the remote (maxTokens), on the renderer port with its id, never reaching the host', async () => {
    page.postMessage({ kind: 'generate', requestId: 'r1', prompt: { text: 'Once upon a time' }, params: { maxTokens: 3 } });
    await until(() => eventsOf('r1').some((event) => event.kind === 'done'));
    const events = eventsOf('r1');
    expect(events[0]).toEqual({ kind: 'prompt', requestId: 'r1', ids: [], contextLength: 2048 });
    const text = events.flatMap((event) => (event.kind === 'token' ? [event.text] : [])).join('');
    expect(text).toBe(' there was a');
    const metrics = events.filter((event) => event.kind === 'metrics');
    expect(metrics.length).toBeGreaterThan(0);
    expect(metrics.at(-1)).toMatchObject({ metrics: { policy: 'remote', layers: [], remote: { kvCacheUsage: 0.25, prefixCacheHitRate: 0.5 } } });
    expect(events.at(-1)).toMatchObject({ kind: 'done', requestId: 'r1', stopReason: 'maxTokens', promptTokens: 3, completionTokens: 3 });
    expect(hostReceived.filter((request) => request.kind === 'generate')).toEqual([]);
    expect(seen.completions.at(-1)).toMatchObject({ prompt: 'Once upon a time', max_tokens: 3, model: 'tiny-remote', stream: true });
    expect(seen.authorization).toContain('Bearer sk-test');
  });

  it('reports eos when the remote stops by itself', async () => {
    page.postMessage({ kind: 'generate', requestId: 'r2', prompt: { text: 'Something short' }, params: { maxTokens: 50 } });
    await until(() => eventsOf('r2').some((event) => event.kind === 'done'));
    expect(eventsOf('r2').at(-1)).toMatchObject({ kind: 'done', stopReason: 'eos', completionTokens: 2 });
  });

  it('cancel aborts a remote generation: done cancelled, and the HTTP request is dropped', async () => {
    const closedBefore = seen.closedEarly;
    page.postMessage({ kind: 'generate', requestId: 'r3', prompt: { text: 'A slow one' }, params: { maxTokens: 100 } });
    await until(() => eventsOf('r3').some((event) => event.kind === 'token'));
    page.postMessage({ kind: 'cancel', requestId: 'c3', target: 'r3' });
    await until(() => eventsOf('r3').some((event) => event.kind === 'done'));
    expect(eventsOf('r3').at(-1)).toMatchObject({ kind: 'done', stopReason: 'cancelled' });
    await until(() => seen.closedEarly > closedBefore);
    expect(hostReceived.filter((request) => request.kind === 'cancel' || request.kind === 'generate')).toEqual([]);
  });

  it('still sends tokenize to the local engine host', async () => {
    page.postMessage({ kind: 'tokenize', requestId: 't1', text: 'hello' });
    await until(() => eventsOf('t1').length > 0);
    expect(eventsOf('t1')).toEqual([{ kind: 'tokenized', requestId: 't1', ids: [1, 2, 3] }]);
    expect(hostReceived).toContainEqual(expect.objectContaining({ kind: 'tokenize', requestId: 't1' }));
  });

  it('goes back to the host once remote is switched off (read per request)', async () => {
    const store = new SettingsStore(fake.app.userData);
    const { settings } = await store.get();
    await store.save({ ...settings, remote: { ...settings.remote, enabled: false } });
    page.postMessage({ kind: 'generate', requestId: 'l1', prompt: { text: 'Local please' } });
    await until(() => hostReceived.some((request) => request.requestId === 'l1'));
    expect(hostReceived.find((request) => request.requestId === 'l1')).toMatchObject({ kind: 'generate' });
  });
});
