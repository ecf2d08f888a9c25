// Settings → Remote endpoint end to end: two real `longhand serve` processes on 127.0.0.1, server
// A configured (POST /api/app settings.save) to send its window's generations to server B's
// OpenAI-compatible API. Over A's WebSocket the text must be what B produces itself; cancel, a
// wrong key and switching back to the local engine are covered too. The Prometheus parser is
// unit-tested on a vLLM-style sample.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePrometheus, remoteFigures } from '../../app/server/remote-metrics.ts';
import { readRemoteSettings, remoteRoot } from '../../app/server/remote-engine.ts';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';
import { firstLine, referenceText, wsConnect } from '../support/serve-client.ts';

const BIN = `${PROJECT_ROOT}/bin/longhand.mjs`;





const VLLM_V1 = `# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4375
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1500.0
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m \\"quoted\\""} 7.0
`;

const VLLM_V0 = `# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.125
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="facebook/opt-125m"} 0.25
`;

describe('remote /metrics figures', () => {
  it('reads vLLM v1 KV-cache usage and the prefix-cache hit rate', () => {
    const samples = parsePrometheus(VLLM_V1);
    expect(samples.get('vllm:num_requests_running')).toEqual([{ labels: { engine: '0', model_name: 'meta-llama/Llama-3.1-8B-Instruct' }, value: 1 }]);
    expect(samples.get('vllm:e2e_request_latency_seconds_bucket')![0]).toEqual({ labels: { engine: '0', le: '+Inf', model_name: 'm "quoted"' }, value: 7 });
    const figures = remoteFigures(samples);
    expect(figures).toMatchObject({ kvCacheUsage: 0.4375, prefixCacheHitRate: 0.75 });
    // between two polls: 300 more hits out of 1000 more queried tokens
    const later = remoteFigures(parsePrometheus(VLLM_V1.replace('} 2000.0', '} 3000.0').replace('} 1500.0', '} 1800.0')), figures);
    expect(later.prefixCacheHitRate).toBeCloseTo(0.3, 10);
  });

  it('reads vLLM v0 gauges, and nothing from a server without them', () => {
    expect(remoteFigures(parsePrometheus(VLLM_V0))).toMatchObject({ kvCacheUsage: 0.125, prefixCacheHitRate: 0.25 });
    expect(remoteFigures(parsePrometheus('longhand_requests_total{endpoint="/ws",status="101"} 1\ngarbage line {\n'))).toMatchObject({ kvCacheUsage: null, prefixCacheHitRate: null });
  });

  it('accepts only http(s) endpoint URLs and strips a trailing /v1', async () => {
    expect(remoteRoot('http://127.0.0.1:8000/v1/')).toBe('http://127.0.0.1:8000');
    expect(remoteRoot('https://example.org/vllm')).toBe('https://example.org/vllm');
    expect(() => remoteRoot('file:///etc/passwd')).toThrow(/http:\/\/ or https:\/\//);
    expect(() => remoteRoot('not a url')).toThrow(/not a URL/);
    expect(await readRemoteSettings(join(tmpdir(), `longhand-missing-${randomBytes(4).toString('hex')}.json`))).toBeUndefined();
  });
});

interface Server {
  child: ChildProcessWithoutNullStreams;
  port: number;
  token: string;
  origin: string;
  dataDir: string;
}

async function startServe(): Promise<Server> {
  const dataDir = mkdtempSync(join(tmpdir(), 'longhand-remote-'));
  const child = spawn(process.execPath, [BIN, 'serve', '--model', STORIES_260K, '--port', '0', '--threads', '1', '--data-dir', dataDir], { cwd: PROJECT_ROOT, stdio: 'pipe' });
  const line = await firstLine(child);
  const match = /^http:\/\/127\.0\.0\.1:(\d+)\/\?token=([A-Za-z0-9_-]{32})$/.exec(line);
  if (!match) throw new Error(`unexpected first line: ${line}`);
  const port = Number(match[1]);
  return { child, port, token: match[2]!, origin: `http://127.0.0.1:${port}`, dataDir };
}

async function stopServe(server: Server | undefined): Promise<void> {
  if (!server) return;
  if (server.child.exitCode === null) {
    const exited = new Promise((resolve) => server.child.once('exit', resolve));
    server.child.kill('SIGTERM');
    await exited;
  }
  rmSync(server.dataDir, { recursive: true, force: true });
}

/** A JSON body, untyped (JSON.parse's any), as the tests poke into it freely. */
const json = async (res: Response) => JSON.parse(await res.text());

describe.runIf(haveSharedModel())('a remote endpoint: Longhand A generating through Longhand B', () => {
  let a: Server;
  let b: Server;
  let ws: Awaited<ReturnType<typeof wsConnect>>;
  let n = 0;

  const saveRemote = async (remote: { enabled: boolean; baseUrl: string; apiKey: string; model: string }) => {
    const res = await fetch(`${a.origin}/api/app`, { method: 'POST', headers: { Authorization: `Bearer ${a.token}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ kind: 'settings.save', settings: { remote } }) });
    expect(res.status).toBe(200);
    expect((await json(res)).settings.remote).toEqual(remote);
  };

  /** One generation over A's WebSocket: its events in order, up to its done (or error). */
  const generate = async (prompt: unknown, params: unknown, onToken?: (requestId: string) => void) => {
    const requestId = `g${++n}`;
    ws.send({ kind: 'generate', requestId, prompt, params });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- events are poked into freely, as in server.test.ts
    const events: Record<string, any>[] = [];
    for (;;) {
      const event = JSON.parse(await ws.next());
      if (event.requestId === 'server:current-model') continue;
      expect(event.requestId).toBe(requestId);
      events.push(event);
      if (event.kind === 'token' && events.filter((e) => e.kind === 'token').length === 1) onToken?.(requestId);
      if (event.kind === 'done' || event.kind === 'error') break;
    }
    const text = events.filter((e) => e.kind === 'token' || e.kind === 'done').map((e) => e.text as string).join('');
    return { events, text, last: events.at(-1)! };
  };

  beforeAll(async () => {
    [a, b] = await Promise.all([startServe(), startServe()]);
    ws = await wsConnect(a.port, { Authorization: `Bearer ${a.token}` });
    expect(ws.status).toBe(101);
  }, 120_000);

  afterAll(async () => {
    ws?.socket.destroy();
    await Promise.all([stopServe(a), stopServe(b)]);
  });

  it('streams B\'s greedy text through A\'s WebSocket, with remote metrics', async () => {
    const direct = await fetch(`${b.origin}/v1/completions`, { method: 'POST', headers: { Authorization: `Bearer ${b.token}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 20, temperature: 0 }) });
    expect(direct.status).toBe(200);
    const directText = (await json(direct)).choices[0].text as string;
    expect(directText).toBe(referenceText(20));
    const bModels = await json(await fetch(`${b.origin}/v1/models`, { headers: { Authorization: `Bearer ${b.token}` } }));
    const bContext = bModels.data[0].longhand.context_length as number;

    await saveRemote({ enabled: true, baseUrl: `${b.origin}/v1`, apiKey: b.token, model: 'stories260K' });
    const before = await (await fetch(`${b.origin}/metrics`, { headers: { Authorization: `Bearer ${b.token}` } })).text();
    const { events, text, last } = await generate({ text: 'Once upon a time' }, { maxTokens: 20, sampling: { temperature: 0 } });
    expect(text).toBe(directText);
    expect(events[0]).toEqual({ kind: 'prompt', requestId: `g${n}`, ids: [], contextLength: bContext });
    expect(events.filter((e) => e.kind === 'token')).toHaveLength(20);
    expect(last).toMatchObject({ kind: 'done', stopReason: 'maxTokens', promptTokens: 5, completionTokens: 20 });
    expect(last.timings.ttftMs).toBeGreaterThan(0);
    expect(last.timings.decodeTokensPerS).toBeGreaterThan(0);
    const metrics = events.filter((e) => e.kind === 'metrics');
    expect(metrics.length).toBeGreaterThan(0);
    expect(metrics.at(-1)!.metrics).toMatchObject({ policy: 'remote', fetchRatio: 1, layers: [], step: 20, contextTokens: 25, contextLength: bContext, reuseHitRate: null, remote: { kvCacheUsage: null, prefixCacheHitRate: null } });
    expect(metrics.at(-1)!.metrics.tokensPerS).toBeGreaterThan(0);
    // B really did the work: its completions counter went up
    const count = (body: string) => Number(/longhand_generations_total\{[^}]*stop_reason="maxTokens"[^}]*\} (\d+)/.exec(body)?.[1] ?? 0);
    const after = await (await fetch(`${b.origin}/metrics`, { headers: { Authorization: `Bearer ${b.token}` } })).text();
    expect(count(after)).toBe(count(before) + 1);
  }, 60_000);

  it('chat prompts go to /v1/chat/completions', async () => {
    const { events, last } = await generate({ messages: [{ role: 'user', content: 'Tell me a story' }] }, { maxTokens: 4, sampling: { temperature: 0 } });
    // stories260K has no chat template: B refuses, and A says so before any token
    if (last.kind === 'error') expect(last.error.message).toMatch(/chat\/completions answered 4\d\d/);
    else expect(events.some((e) => e.kind === 'token')).toBe(true);
  }, 60_000);

  it('cancels a remote generation mid-stream', async () => {
    const { events, last } = await generate({ text: 'Once upon a time' }, { maxTokens: 400, stopOnEos: false, sampling: { temperature: 0 } }, (requestId) => ws.send({ kind: 'cancel', requestId: `c-${requestId}`, target: requestId }));
    expect(last).toMatchObject({ kind: 'done', stopReason: 'cancelled' });
    expect(events.filter((e) => e.kind === 'token').length).toBeLessThan(400);
  }, 60_000);

  it('a wrong key is an error that names 401', async () => {
    await saveRemote({ enabled: true, baseUrl: b.origin, apiKey: 'wrong-key', model: 'stories260K' });
    const { last } = await generate({ text: 'Once upon a time' }, { maxTokens: 5, sampling: { temperature: 0 } });
    expect(last.kind).toBe('error');
    expect(last.error.message).toMatch(/answered 401/);
    expect(last.error.message).toContain(`${b.origin}/v1/completions`);
  }, 60_000);

  it('an unreachable endpoint is an error, not a hang', async () => {
    await saveRemote({ enabled: true, baseUrl: 'http://127.0.0.1:9', apiKey: '', model: '' });
    const { last } = await generate({ text: 'Once upon a time' }, { maxTokens: 5 });
    expect(last).toMatchObject({ kind: 'error', error: { code: 'DEVICE_UNAVAILABLE' } });
    expect(last.error.message).toMatch(/could not be reached/);
  }, 60_000);

  it('with the remote disabled again, A\'s own engine answers', async () => {
    await saveRemote({ enabled: false, baseUrl: b.origin, apiKey: b.token, model: 'stories260K' });
    const { events, text, last } = await generate({ text: 'Once upon a time' }, { maxTokens: 20, sampling: { temperature: 0 } });
    expect(events[0]).toMatchObject({ kind: 'prompt', ids: [1, 403, 407, 261, 378] });
    expect(last).toMatchObject({ kind: 'done', stopReason: 'maxTokens', completionTokens: 20 });
    expect(text).toBe(referenceText(20));
    expect(events.filter((e) => e.kind === 'metrics').at(-1)!.metrics.policy).toBe('full');
  }, 60_000);
});
