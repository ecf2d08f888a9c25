// `longhand serve` end to end: the real bin, a real HTTP server on 127.0.0.1, the engine host
// and the reference model, spoken to with plain fetch, node:http and a hand-made WebSocket client.
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { request } from 'node:http';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveSharedModel, loadReferenceRuns, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';
import { firstLine, referenceText, wsConnect } from '../support/serve-client.ts';

const BIN = `${PROJECT_ROOT}/bin/longhand.mjs`;
const CONTEXT = 256;



/** A JSON body, untyped (JSON.parse's any), as the tests poke into it freely. */
const json = async (res: Response) => JSON.parse(await res.text());

/** A raw node:http request, for headers fetch will not let us forge (Host). */
function rawRequest(port: number, path: string, headers: Record<string, string>, method = 'GET'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, headers }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The `data:` payloads of an SSE body. */
function sseData(body: string): string[] {
  return body
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      expect(block.startsWith('data: ')).toBe(true);
      return block.slice('data: '.length);
    });
}


describe.runIf(haveSharedModel())('longhand serve on stories260K', () => {
  let child: ChildProcessWithoutNullStreams;
  let base: string;
  let port: number;
  let token: string;
  let pageUrl: string;
  const auth = () => ({ Authorization: `Bearer ${token}` });
  const post = (path: string, body: unknown, init: RequestInit = {}) =>
    fetch(`${base}${path}`, { method: 'POST', headers: { ...auth(), 'Content-Type': 'application/json' }, body: JSON.stringify(body), ...init });

  beforeAll(async () => {
    child = spawn(process.execPath, [BIN, 'serve', '--model', STORIES_260K, '--port', '0', '--context', String(CONTEXT), '--threads', '1'], { cwd: PROJECT_ROOT, stdio: 'pipe' });
    pageUrl = await firstLine(child);
    const match = /^http:\/\/127\.0\.0\.1:(\d+)\/\?token=([A-Za-z0-9_-]{32})$/.exec(pageUrl);
    if (!match) throw new Error(`unexpected first line: ${pageUrl}`);
    port = Number(match[1]);
    token = match[2]!;
    base = `http://127.0.0.1:${port}`;
  });

  afterAll(() => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
  });

  it('prints the page URL first; the page sets an HttpOnly SameSite=Strict cookie and a strict CSP', async () => {
    expect(pageUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=/);
    const page = await fetch(pageUrl);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toBe("default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'");
    const cookie = page.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Strict/);
    const session = { Cookie: cookie.split(';')[0]! };
    const built = join(PROJECT_ROOT, 'renderer', 'dist', 'index.html');
    const html = await page.text();
    if (existsSync(built)) {
      // the built renderer, and its assets for the page's cookie (the module script sends our own Origin)
      expect(html).toBe(readFileSync(built, 'utf8'));
      const asset = /src="\.?(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
      if (asset) {
        const script = await rawRequest(port, asset, { ...session, Origin: base });
        expect(script.status).toBe(200);
        expect((await rawRequest(port, asset, {})).status).toBe(401);
      }
    } else expect(html).toMatch(/Longhand browser mode — the window UI is not built yet; the API is at \/v1/);
    const viaCookie = await fetch(`${base}/v1/models`, { headers: session });
    expect(viaCookie.status).toBe(200);
    expect((await rawRequest(port, '/../../package.json', session)).status).toBe(404);
    // the token in a query string opens only the page
    expect((await fetch(`${base}/v1/models?token=${token}`)).status).toBe(401);
  });

  it('refuses requests without the token (401), with a foreign Host or Origin (403), and bodies over 1 MiB (413)', async () => {
    const none = await fetch(`${base}/v1/models`);
    expect(none.status).toBe(401);
    expect((await json(none)).error).toMatchObject({ type: 'authentication_error', code: 'invalid_api_key' });
    expect((await fetch(`${base}/v1/models`, { headers: { Authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await fetch(`${base}/`)).status).toBe(401);

    expect((await rawRequest(port, '/v1/models', { ...auth(), Host: `evil.example:${port}` })).status).toBe(403);
    expect((await rawRequest(port, '/v1/models', { ...auth(), Host: `localhost:${port}` })).status).toBe(200);
    expect((await rawRequest(port, '/v1/models', { ...auth(), Origin: 'http://evil.example' })).status).toBe(403);
    expect((await rawRequest(port, '/v1/models', { ...auth(), Origin: `http://localhost:${port}` })).status).toBe(200);

    const big = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { ...auth(), 'Content-Type': 'application/json' }, body: 'x'.repeat(1024 * 1024 + 1) });
    expect(big.status).toBe(413);
    const bad = await fetch(`${base}/v1/completions`, { method: 'POST', headers: auth(), body: '{"prompt": ' });
    expect(bad.status).toBe(400);
    expect((await json(bad)).error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_json' });
    const badParam = await post('/v1/completions', { prompt: 'x', temperature: 'hot' });
    expect(badParam.status).toBe(400);
    expect((await json(badParam)).error.param).toBe('temperature');
  });

  it('lists the loaded model', async () => {
    const res = await fetch(`${base}/v1/models`, { headers: auth() });
    const body = await json(res);
    expect(body.object).toBe('list');
    expect(body.data).toHaveLength(1);
    expect(body.data[0]).toMatchObject({ id: 'stories260K', object: 'model', owned_by: 'longhand', longhand: { context_length: CONTEXT } });
  });

  it('completes greedily exactly as llama.cpp does', async () => {
    const res = await post('/v1/completions', { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 20, temperature: 0 });
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.object).toBe('text_completion');
    expect(body.choices[0].text).toBe(referenceText(20));
    expect(body.choices[0].text.startsWith(', there was a little girl named Lily')).toBe(true);
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage).toEqual({ prompt_tokens: 5, completion_tokens: 20, total_tokens: 25 });
  });

  it('streams SSE chunks that add up to the same text, then finish_reason and [DONE]', async () => {
    const res = await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const data = sseData(await res.text());
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    const text = chunks.map((c) => c.choices[0]?.text ?? '').join('');
    expect(text).toBe(referenceText(20));
    const finishes = chunks.map((c) => c.choices[0]?.finish_reason).filter((f) => f != null);
    expect(finishes).toEqual(['length']);
    expect(chunks.at(-1).usage).toEqual({ prompt_tokens: 5, completion_tokens: 20, total_tokens: 25 });
  });

  it('answers chat completions (no template in stories260K: the user content is the prompt), streaming too', async () => {
    const messages = [{ role: 'user', content: 'Once upon a time' }];
    const res = await post('/v1/chat/completions', { messages, max_tokens: 20, temperature: 0 });
    const body = await json(res);
    expect(body.object).toBe('chat.completion');
    expect(body.choices[0].message).toEqual({ role: 'assistant', content: referenceText(20) });
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage.completion_tokens).toBe(20);

    const streamed = await post('/v1/chat/completions', { messages, max_tokens: 20, temperature: 0, stream: true });
    const data = sseData(await streamed.text());
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    expect(chunks[0].object).toBe('chat.completion.chunk');
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0].delta.content ?? '').join('')).toBe(referenceText(20));
    expect(chunks.at(-1).choices[0].finish_reason).toBe('length');
  });

  it('queues concurrent requests and serves them first in, first out', async () => {
    const lengths = [60, 45, 30, 15]; // later ones are shorter: only a FIFO finishes them in order
    const finished: number[] = [];
    const pending = lengths.map(async (maxTokens, i) => {
      await new Promise((resolve) => setTimeout(resolve, i * 15)); // arrival order 0, 1, 2, 3
      const res = await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: maxTokens, temperature: 0 });
      const body = await json(res);
      finished.push(i);
      return { status: res.status, body };
    });
    const results = await Promise.all(pending);
    expect(finished).toEqual([0, 1, 2, 3]);
    results.forEach(({ status, body }, i) => {
      expect(status).toBe(200);
      expect(body.usage).toEqual({ prompt_tokens: 5, completion_tokens: lengths[i], total_tokens: 5 + lengths[i]! });
      expect(loadReferenceRuns()[0]!.generatedText.startsWith(body.choices[0].text)).toBe(true);
    });
  });

  it('cancels the generation when a streaming client disconnects, and serves the next request', async () => {
    const abort = new AbortController();
    const res = await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 200, temperature: 0, stream: true }, { signal: abort.signal });
    const reader = res.body!.getReader();
    let received = '';
    while (!received.includes('\n\n')) received += new TextDecoder().decode((await reader.read()).value);
    abort.abort();
    await reader.read().catch(() => undefined);

    const next = await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
    expect(next.status).toBe(200);
    expect((await json(next)).choices[0].text).toBe(referenceText(5));
    const metrics = await (await fetch(`${base}/metrics`, { headers: auth() })).text();
    expect(metrics).toMatch(/^longhand_generations_total\{stop_reason="cancelled"\} 1$/m);
    expect(metrics).toMatch(/^longhand_requests_total\{endpoint="\/v1\/completions",status="499"\} 1$/m);
  });

  it('maps a prompt longer than the context to 400 context_length_exceeded', async () => {
    for (const stream of [false, true]) {
      const res = await post('/v1/completions', { prompt: 'Once upon a time '.repeat(100), max_tokens: 5, stream });
      expect(res.status).toBe(400);
      expect((await json(res)).error).toMatchObject({ code: 'context_length_exceeded', type: 'invalid_request_error' });
    }
  });

  it('exposes Prometheus metrics with plausible values', async () => {
    const res = await fetch(`${base}/metrics`, { headers: auth() });
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    const value = (pattern: string) => Number(new RegExp(`^${pattern} (\\S+)$`, 'm').exec(text)?.[1]);
    for (const name of ['longhand_requests_total', 'longhand_tokens_generated_total', 'longhand_prompt_tokens_total', 'longhand_decode_tokens_per_second', 'longhand_ttft_seconds', 'longhand_queue_depth', 'longhand_model_loaded', 'longhand_context_length', 'longhand_kv_pool_bytes']) {
      expect(text).toContain(`# HELP ${name} `);
      expect(text).toMatch(new RegExp(`^# TYPE ${name} (counter|gauge)$`, 'm'));
    }
    // 20 + 20 + 20 + 20 + (60+45+30+15) + 5, plus the cancelled stream's few tokens
    expect(value('longhand_tokens_generated_total')).toBeGreaterThanOrEqual(235);
    expect(value('longhand_tokens_generated_total')).toBeLessThan(235 + 200);
    expect(value('longhand_prompt_tokens_total')).toBeGreaterThanOrEqual(5 * 10);
    expect(value('longhand_requests_total\\{endpoint="/v1/completions",status="200"\\}')).toBe(7); // 1 + 1 streamed + 4 queued + 1 after the cancel
    expect(value('longhand_requests_total\\{endpoint="/v1/completions",status="400"\\}')).toBe(4); // bad JSON, bad param, 2 overflows
    expect(value('longhand_requests_total\\{endpoint="/v1/chat/completions",status="200"\\}')).toBe(2);
    expect(value('longhand_requests_total\\{endpoint="/v1/models",status="401"\\}')).toBeGreaterThanOrEqual(2);
    expect(value('longhand_requests_total\\{endpoint="/v1/models",status="403"\\}')).toBe(2);
    expect(value('longhand_requests_total\\{endpoint="/v1/completions",status="413"\\}')).toBe(1);
    expect(value('longhand_decode_tokens_per_second')).toBeGreaterThan(0);
    expect(value('longhand_ttft_seconds')).toBeGreaterThan(0);
    expect(value('longhand_ttft_seconds')).toBeLessThan(10);
    expect(value('longhand_queue_depth')).toBe(0);
    expect(value('longhand_model_loaded')).toBe(1);
    expect(value('longhand_context_length')).toBe(CONTEXT);
    // stories260K: 5 layers · 4 KV heads · head dim 8 · K and V · fp16 · 256 positions
    expect(value('longhand_kv_pool_bytes\\{kv_type="fp16"\\}')).toBe(5 * 4 * 8 * 2 * 2 * CONTEXT);
    // from the engine's last metric event (policy full: every candidate is selected)
    expect(value('longhand_kv_fetch_ratio\\{policy="full"\\}')).toBe(1);
    expect(value('longhand_kv_context_tokens')).toBeGreaterThan(0);
    expect(value('longhand_kv_context_tokens')).toBeLessThanOrEqual(CONTEXT);
  });

  it('relays the engine protocol over a token-checked WebSocket', async () => {
    expect((await wsConnect(port, {})).status).toBe(401);
    expect((await wsConnect(port, { ...auth(), Origin: 'http://evil.example' })).status).toBe(403);
    const ws = await wsConnect(port, auth());
    expect(ws.status).toBe(101);
    // a new connection is told which model the server already has loaded
    expect(JSON.parse(await ws.next())).toMatchObject({ kind: 'loaded', requestId: 'server:current-model', model: { vocabSize: 512, layers: 5 } });
    ws.send({ kind: 'nonsense', requestId: 'x' });
    expect(JSON.parse(await ws.next())).toMatchObject({ kind: 'error', requestId: 'x', error: { code: 'PROTOCOL_BAD_MESSAGE' } });
    ws.send({ kind: 'generate', requestId: 'g1', prompt: { text: 'Once upon a time' }, params: { maxTokens: 12, sampling: { temperature: 0 } } });
    let text = '';
    for (;;) {
      const event = JSON.parse(await ws.next());
      expect(event.requestId).toBe('g1');
      if (event.kind === 'metrics') continue;
      if (event.kind === 'prompt') expect(event.ids).toEqual([1, 403, 407, 261, 378]);
      else if (event.kind === 'token') text += event.text;
      else {
        expect(event).toMatchObject({ kind: 'done', stopReason: 'maxTokens', completionTokens: 12 });
        text += event.text;
        break;
      }
    }
    expect(text).toBe(referenceText(12));
    ws.socket.destroy();
  });

  it('refuses any --host but 127.0.0.1', () => {
    const result = spawnSync(process.execPath, [BIN, 'serve', '--host', '0.0.0.0'], { cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 30_000 });
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/--host must be 127\.0\.0\.1/);
  });

  it('closes the engine and exits 0 on SIGTERM', async () => {
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
