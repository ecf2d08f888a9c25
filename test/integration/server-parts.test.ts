// The server's parts without an engine: the fallback page and static files, the Gate, the
// Prometheus text and the WebSocket frame parser.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventEmitter } from 'node:events';
import { afterAll, describe, expect, it } from 'vitest';
import type { ModelInfo } from '../../app/common/protocol.ts';
import { kvPoolBytes, ServerMetrics } from '../../app/server/metrics.ts';
import { sendPage, staticFile } from '../../app/server/page.ts';
import { EngineQueue, QueueAbortedError } from '../../app/server/queue.ts';
import { Gate, newToken } from '../../app/server/security.ts';
import { acceptKey, WebSocketConnection } from '../../app/server/websocket.ts';

const dir = mkdtempSync(join(tmpdir(), 'longhand-server-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function fakeResponse() {
  const sent: { status?: number; headers?: Record<string, unknown>; body?: string } = {};
  const res = {
    writeHead: (status: number, headers: Record<string, unknown>) => Object.assign(sent, { status, headers }),
    end: (body: Buffer) => (sent.body = body.toString()),
  } as unknown as ServerResponse;
  return { res, sent };
}

describe('page', () => {
  it('serves an honest placeholder with a strict CSP when the renderer is not built', () => {
    const { res, sent } = fakeResponse();
    sendPage(res, {}, join(dir, 'missing'));
    expect(sent.status).toBe(200);
    expect(sent.body).toMatch(/Longhand browser mode — the window UI is not built yet; the API is at \/v1/);
    expect(sent.headers!['Content-Security-Policy']).toBe("default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'");
  });

  it('serves the built index.html and files inside dist only', () => {
    const dist = join(dir, 'dist');
    mkdirSync(join(dist, 'assets'), { recursive: true });
    writeFileSync(join(dist, 'index.html'), '<!doctype html><title>built</title>');
    writeFileSync(join(dist, 'assets', 'a.js'), 'export {}');
    writeFileSync(join(dir, 'secret.txt'), 'no');
    const { res, sent } = fakeResponse();
    sendPage(res, { 'Set-Cookie': 'c' }, dist);
    expect(sent.body).toBe('<!doctype html><title>built</title>');
    expect(sent.headers!['Set-Cookie']).toBe('c');
    expect(staticFile('/assets/a.js', dist)).toMatchObject({ type: 'text/javascript; charset=utf-8' });
    expect(staticFile('/../secret.txt', dist)).toBeUndefined();
    expect(staticFile('/%2e%2e/secret.txt', dist)).toBeUndefined();
    expect(staticFile('/assets', dist)).toBeUndefined();
    expect(staticFile('/%E0%A4%A', dist)).toBeUndefined();
  });
});

describe('Gate', () => {
  const token = newToken();
  const gate = new Gate(4242, token);
  const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;
  const page = new URL(`http://127.0.0.1:4242/?token=${token}`);
  const api = new URL('http://127.0.0.1:4242/v1/models');

  it('makes 32-character base64url tokens', () => {
    expect(token).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(newToken()).not.toBe(token);
  });

  it('checks Host and Origin', () => {
    expect(gate.checkSite(req({ host: '127.0.0.1:4242' }))).toBeUndefined();
    expect(gate.checkSite(req({ host: 'LOCALHOST:4242', origin: 'http://127.0.0.1:4242' }))).toBeUndefined();
    expect(gate.checkSite(req({}))?.status).toBe(403);
    expect(gate.checkSite(req({ host: '127.0.0.1:4243' }))?.status).toBe(403);
    expect(gate.checkSite(req({ host: 'attacker.example:4242' }))?.status).toBe(403);
    expect(gate.checkSite(req({ host: '127.0.0.1:4242', origin: 'null' }))?.status).toBe(403);
    expect(gate.checkSite(req({ host: '127.0.0.1:4242', origin: 'https://127.0.0.1:4242' }))?.status).toBe(403);
  });

  it('takes the token from the header, the cookie, or the page URL only', () => {
    expect(gate.checkToken(req({ authorization: `Bearer ${token}` }), api, false)).toBe('header');
    expect(gate.checkToken(req({ cookie: `x=1; longhand_token_4242=${token}` }), api, false)).toBe('cookie');
    expect(gate.checkToken(req({ cookie: `longhand_token_4243=${token}` }), api, false)).toMatchObject({ status: 401 });
    expect(gate.checkToken(req({}), page, true)).toBe('query');
    expect(gate.checkToken(req({}), page, false)).toMatchObject({ status: 401 });
    expect(gate.checkToken(req({ authorization: 'Bearer nope' }), page, true)).toMatchObject({ status: 401 });
    expect(gate.checkToken(req({ authorization: `Basic ${token}` }), api, false)).toMatchObject({ status: 401 });
  });
});

describe('metrics', () => {
  const model = { layers: 32, kvHeads: 8, headDim: 128, kvType: 'fp16', contextLength: 4096, path: 'm.gguf' } as ModelInfo;

  it('sizes the KV pool from the model info', () => {
    expect(kvPoolBytes(model)).toBe(512 * 2 ** 20); // Llama-3-8B at 4096 fp16: 512 MiB
    expect(kvPoolBytes({ ...model, kvType: 'fp32' })).toBe(2 ** 30);
  });

  it('renders only what it knows: no speed gauges before a generation, no model gauges without a model', () => {
    const state: { model: ModelInfo | undefined } = { model: undefined };
    const metrics = new ServerMetrics(() => ({ model: state.model, queueWaiting: 2, generating: true }));
    let text = metrics.render();
    expect(text).toMatch(/^longhand_model_loaded 0$/m);
    expect(text).not.toMatch(/longhand_kv_pool_bytes|longhand_decode_tokens_per_second/);
    state.model = model;
    metrics.countRequest('/v1/completions', 200);
    metrics.countRequest('/v1/completions', 200);
    metrics.countGeneration({ stopReason: 'eos', promptTokens: 7, completionTokens: 9, ttftMs: 250, decodeTokensPerS: 40, prefillTokensPerS: 100 });
    text = metrics.render();
    expect(text).toMatch(/^longhand_requests_total\{endpoint="\/v1\/completions",status="200"\} 2$/m);
    expect(text).toMatch(/^longhand_ttft_seconds 0.25$/m);
    expect(text).toMatch(/^longhand_queue_depth 2$/m);
    expect(text).toMatch(/^longhand_kv_pool_bytes\{kv_type="fp16"\} 536870912$/m);
    expect(text.endsWith('\n')).toBe(true);
  });
});

describe('EngineQueue', () => {
  it('runs jobs one at a time in order and drops a job abandoned while waiting', async () => {
    const queue = new EngineQueue();
    const log: string[] = [];
    const job = (name: string, ms: number) => async () => {
      log.push(`start ${name}`);
      await new Promise((resolve) => setTimeout(resolve, ms));
      log.push(`end ${name}`);
      return name;
    };
    const abandoned = new AbortController();
    const a = queue.run(job('a', 30));
    const b = queue.run(job('b', 1), abandoned.signal);
    const c = queue.run(job('c', 1));
    expect(queue.waiting).toBe(3);
    abandoned.abort();
    await expect(a).resolves.toBe('a');
    await expect(b).rejects.toBeInstanceOf(QueueAbortedError);
    await expect(c).resolves.toBe('c');
    expect(log).toEqual(['start a', 'end a', 'start c', 'end c']);
  });
});

describe('WebSocket frames', () => {
  class FakeSocket extends EventEmitter {
    written: Buffer[] = [];
    ended = false;
    setNoDelay() {}
    write(data: Buffer) {
      this.written.push(data);
      return true;
    }
    end() {
      this.ended = true;
    }
    destroy() {}
  }
  const masked = (opcode: number, payload: Buffer, fin = true) => {
    const mask = Buffer.from([1, 2, 3, 4]);
    const body = Buffer.from(payload.map((b, i) => b ^ mask[i & 3]!));
    const length = payload.length < 126 ? Buffer.from([0x80 | payload.length]) : Buffer.from([0x80 | 126, payload.length >> 8, payload.length & 0xff]);
    return Buffer.concat([Buffer.from([(fin ? 0x80 : 0) | opcode]), length, mask, body]);
  };
  const closeCode = (frame: Buffer) => (frame[0] === 0x88 ? frame.readUInt16BE(2) : undefined);

  it('computes the RFC 6455 accept key (the RFC\'s own example, section 1.3)', () => {
    expect(acceptKey('dGhlIHNhbXBsZSBub25jZQ==')).toBe('s3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
  });

  it('reads masked text split across chunks, answers pings, and refuses what it does not support', () => {
    const socket = new FakeSocket();
    const ws = new WebSocketConnection(socket as unknown as Socket);
    const got: string[] = [];
    ws.onMessage((text) => got.push(text));
    const long = 'é'.repeat(200);
    const frames = Buffer.concat([masked(1, Buffer.from('hello')), masked(1, Buffer.from(long)), masked(9, Buffer.from('p'))]);
    for (let i = 0; i < frames.length; i += 7) ws.receive(frames.subarray(i, i + 7));
    expect(got).toEqual(['hello', long]);
    expect(socket.written.at(-1)).toEqual(Buffer.from([0x8a, 1, 0x70]));
    ws.send('x'.repeat(300));
    expect(socket.written.at(-1)!.subarray(0, 4)).toEqual(Buffer.from([0x81, 126, 1, 44]));

    const fragmented = new FakeSocket();
    new WebSocketConnection(fragmented as unknown as Socket).receive(masked(1, Buffer.from('he'), false));
    expect(closeCode(fragmented.written[0]!)).toBe(1003);
    const unmasked = new FakeSocket();
    new WebSocketConnection(unmasked as unknown as Socket).receive(Buffer.from([0x81, 1, 0x41]));
    expect(closeCode(unmasked.written[0]!)).toBe(1002);
    const binary = new FakeSocket();
    new WebSocketConnection(binary as unknown as Socket).receive(masked(2, Buffer.from([1])));
    expect(closeCode(binary.written[0]!)).toBe(1003);
    const huge = new FakeSocket();
    new WebSocketConnection(huge as unknown as Socket).receive(Buffer.from([0x81, 0xff, 0, 0, 0, 0, 0, 0x20, 0, 0]));
    expect(closeCode(huge.written[0]!)).toBe(1009);
  });

  it('answers a close frame and ends the socket', () => {
    const socket = new FakeSocket();
    const ws = new WebSocketConnection(socket as unknown as Socket);
    ws.receive(masked(8, Buffer.from([0x03, 0xe8])));
    expect(socket.written[0]).toEqual(Buffer.from([0x88, 2, 0x03, 0xe8]));
    expect(socket.ended).toBe(true);
    expect(ws.open).toBe(false);
  });
});
