import { describe, expect, it, vi } from 'vitest';
import type { EngineStatus } from '../../../app/common/window-api.ts';
import { EngineClient } from '../engine/client.ts';
import { MODEL, timeoutFrames } from '../test/fake-api.ts';
import { APP_ENDPOINT, webBridge } from './web-bridge.ts';

class FakeSocket {
  static readonly CONNECTING = 0;
  static readonly OPEN = 1;
  static readonly CLOSED = 3;
  static instances: FakeSocket[] = [];
  readyState = FakeSocket.CONNECTING;
  sent: string[] = [];
  onopen: (() => void) | null = null;
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onclose: ((e: { code: number; reason: string }) => void) | null = null;
  constructor(readonly url: string) {
    FakeSocket.instances.push(this);
  }
  send(data: string) {
    this.sent.push(data);
  }
  close() {
    this.readyState = FakeSocket.CLOSED;
  }
  open() {
    this.readyState = FakeSocket.OPEN;
    this.onopen?.();
  }
}

function bridge(fetchImpl: typeof fetch = vi.fn()) {
  FakeSocket.instances = [];
  const api = webBridge({ fetch: fetchImpl, WebSocket: FakeSocket as unknown as typeof WebSocket, location: { protocol: 'http:', host: '127.0.0.1:5123' } });
  return { api, socket: () => FakeSocket.instances.at(-1)! };
}

const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

describe('web bridge (browser mode)', () => {
  it('POSTs app requests as JSON to /api/app with the session cookie and returns the answer', async () => {
    const fetchImpl = vi.fn(async () => json(200, [{ id: 'd-1', title: 'A', updatedAt: 1, words: 2 }]));
    const { api } = bridge(fetchImpl as unknown as typeof fetch);
    const answer = await api.app({ kind: 'documents.list' });
    expect(answer).toEqual([{ id: 'd-1', title: 'A', updatedAt: 1, words: 2 }]);
    expect(fetchImpl).toHaveBeenCalledWith(APP_ENDPOINT, expect.objectContaining({ method: 'POST', credentials: 'same-origin', body: '{"kind":"documents.list"}' }));
    expect(api.host).toBe('browser');
  });

  it('rejects with {code, message} from an {error} answer', async () => {
    const { api } = bridge((async () => json(400, { error: { code: 'PROTOCOL_BAD_MESSAGE', message: 'bad app request: id' } })) as unknown as typeof fetch);
    await expect(api.app({ kind: 'documents.get', id: 'x' })).rejects.toMatchObject({ code: 'PROTOCOL_BAD_MESSAGE', message: 'bad app request: id' });
  });

  it('rejects a non-JSON answer and a failed fetch with a code', async () => {
    const { api } = bridge((async () => new Response('nope', { status: 502 })) as unknown as typeof fetch);
    await expect(api.app({ kind: 'models.scan' })).rejects.toMatchObject({ code: 'PROTOCOL_BAD_MESSAGE' });
    const { api: offline } = bridge((async () => {
      throw new TypeError('Failed to fetch');
    }) as unknown as typeof fetch);
    await expect(offline.app({ kind: 'models.scan' })).rejects.toMatchObject({ code: 'NETWORK' });
  });

  it('relays the engine protocol over ws://host/ws as JSON text frames, queueing until open', () => {
    const { api, socket } = bridge();
    expect(socket().url).toBe('ws://127.0.0.1:5123/ws');
    const events: unknown[] = [];
    api.onEngineEvent((e) => events.push(e));
    api.engineSend({ kind: 'tokenize', requestId: 't1', text: 'hi' });
    expect(socket().sent).toEqual([]);
    socket().open();
    expect(socket().sent).toEqual(['{"kind":"tokenize","requestId":"t1","text":"hi"}']);
    socket().onmessage?.({ data: '{"kind":"tokenized","requestId":"t1","ids":[1]}' });
    socket().onmessage?.({ data: 'not json' });
    expect(events).toEqual([{ kind: 'tokenized', requestId: 't1', ids: [1] }]);
  });

  it('carries a load\'s loadProgress frames to the engine client\'s onProgress, before the load resolves', async () => {
    const { api, socket } = bridge();
    const client = new EngineClient(api, { schedule: timeoutFrames });
    const progress: unknown[] = [];
    const loading = client.load({ modelPath: '/m.gguf' }, (p) => progress.push(p));
    socket().open();
    const { requestId } = JSON.parse(socket().sent[0]!) as { requestId: string };
    for (const done of [1, 2, 3]) socket().onmessage?.({ data: JSON.stringify({ kind: 'loadProgress', requestId, done, total: 3 }) });
    expect(progress).toEqual([{ done: 1, total: 3 }, { done: 2, total: 3 }, { done: 3, total: 3 }]);
    socket().onmessage?.({ data: JSON.stringify({ kind: 'loaded', requestId, model: { ...MODEL, path: '/m.gguf' } }) });
    await expect(loading).resolves.toMatchObject({ path: '/m.gguf' });
    client.dispose();
  });

  it('reports the socket state as the engine status and reconnects on restart', async () => {
    const { api, socket } = bridge();
    const statuses: EngineStatus[] = [];
    api.onEngineStatus((s) => statuses.push(s));
    socket().open();
    socket().onclose?.({ code: 1006, reason: '' });
    expect(statuses.map((s) => s.state)).toEqual(['starting', 'ready', 'crashed']);
    expect(() => api.engineSend({ kind: 'unload', requestId: 'u' })).toThrow(/restart/);
    await api.restartEngine();
    expect(FakeSocket.instances).toHaveLength(2);
    socket().open();
    expect(statuses.at(-1)).toEqual({ state: 'ready', pid: 0 });
  });

  it('shows the server\'s engine status frames and asks the server to restart its engine', async () => {
    const { api, socket } = bridge();
    const statuses: EngineStatus[] = [];
    const events: unknown[] = [];
    api.onEngineStatus((s) => statuses.push(s));
    api.onEngineEvent((e) => events.push(e));
    socket().open();
    const crashed = { state: 'crashed', reason: 'killed', message: 'The engine process was killed by SIGKILL while generating.', willRestart: false };
    socket().onmessage?.({ data: JSON.stringify({ kind: 'engineStatus', status: crashed }) });
    // a malformed status is dropped, never shown
    socket().onmessage?.({ data: JSON.stringify({ kind: 'engineStatus', status: { state: 'crashed', reason: 'gremlins' } }) });
    expect(statuses.at(-1)).toEqual(crashed);
    expect(events).toEqual([]);
    // the socket stays open: requests still go to the server, which answers them with the crash
    api.engineSend({ kind: 'unload', requestId: 'u1' });
    expect(socket().sent.at(-1)).toBe('{"kind":"unload","requestId":"u1"}');

    let settled = false;
    const restart = api.restartEngine().then(() => (settled = true));
    expect(JSON.parse(socket().sent.at(-1)!)).toMatchObject({ kind: 'restartEngine', requestId: expect.any(String) });
    expect(FakeSocket.instances).toHaveLength(1); // no reconnect: the server restarts its engine
    socket().onmessage?.({ data: JSON.stringify({ kind: 'engineStatus', status: { state: 'restarting', attempt: 1 } }) });
    await Promise.resolve();
    expect(settled).toBe(false);
    socket().onmessage?.({ data: JSON.stringify({ kind: 'loaded', requestId: 'server:current-model', model: { path: 'm.gguf' } }) });
    socket().onmessage?.({ data: JSON.stringify({ kind: 'engineStatus', status: { state: 'ready', pid: 4321 } }) });
    await restart;
    expect(statuses.slice(-2)).toEqual([{ state: 'restarting', attempt: 1 }, { state: 'ready', pid: 4321 }]);
    expect(events).toEqual([{ kind: 'loaded', requestId: 'server:current-model', model: { path: 'm.gguf' } }]);
  });
});
