#!/usr/bin/env node
// Load test of `longhand serve`: starts the server as a child on 127.0.0.1 (port 0), runs N
// concurrent streaming clients against /v1/completions until a deadline, and reports requests,
// errors, tokens streamed vs usage.completion_tokens (lost tokens), latency (request start →
// [DONE]) and time to first byte p50/p99, and the RSS of the server and its engine process at the
// start and the end. The engine serves one generation at a time (FIFO), so latency includes queueing.
// Every request started must complete; new ones stop at the deadline, in-flight ones are given
// --grace seconds, then aborted (counted as errors). The server gets SIGTERM at the end.
// Usage: node --import tsx bench/load.mjs --model M.gguf [--clients 32] [--seconds 60] [--max-tokens 32] [--grace 120]
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    clients: { type: 'string', default: '32' },
    seconds: { type: 'string', default: '60' },
    'max-tokens': { type: 'string', default: '32' },
    grace: { type: 'string', default: '120' },
    prompt: { type: 'string', default: 'Once upon a time' },
  },
});
if (!values.model) throw new Error('--model is required');
const clients = Number(values.clients);
const seconds = Number(values.seconds);
const maxTokens = Number(values['max-tokens']);
const graceMs = Number(values.grace) * 1000;
const MiB = 1024 * 1024;

// ── the server process and its descendants' RSS ──────────────────────────────────────────────
function childrenOf(pid) {
  const out = [];
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      try {
        out.push(...readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number));
      } catch {
        // the task ended between the listing and the read
      }
    }
  } catch {
    // the process is gone: no children
  }
  return out;
}
function rssOf(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}
function commOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, 4).join(' ');
  } catch {
    return '?';
  }
}
/** RSS of the server and of every descendant (the engine host is a forked grandchild or child). */
function rssTree(rootPid) {
  const seen = [];
  const walk = (pid, depth) => {
    seen.push({ pid, depth, rss: rssOf(pid), cmd: commOf(pid) });
    for (const c of childrenOf(pid)) walk(c, depth + 1);
  };
  walk(rootPid, 0);
  return seen;
}

const root = fileURLToPath(new URL('..', import.meta.url));
const server = spawn(process.execPath, ['bin/longhand.mjs', 'serve', '--model', values.model, '--port', '0'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
let serverErr = '';
server.stderr.on('data', (c) => (serverErr = (serverErr + c.toString()).slice(-4000)));
const serverExited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({ code, signal })));
const stopServer = async () => {
  if (server.exitCode !== null || server.signalCode !== null) return serverExited;
  server.kill('SIGTERM');
  const timer = setTimeout(() => server.kill('SIGKILL'), 10_000);
  const result = await serverExited;
  clearTimeout(timer);
  return result;
};
process.once('SIGINT', () => void stopServer().then(() => process.exit(130)));

const line = await new Promise((resolve, reject) => {
  let out = '';
  const timer = setTimeout(() => reject(new Error(`no URL line after 90 s; stderr: ${serverErr}`)), 90_000);
  server.stdout.on('data', (chunk) => {
    out += chunk.toString();
    const nl = out.indexOf('\n');
    if (nl >= 0) {
      clearTimeout(timer);
      resolve(out.slice(0, nl).trim());
    }
  });
  server.once('exit', (code) => {
    clearTimeout(timer);
    reject(new Error(`serve exited with ${code} before printing a URL; stderr: ${serverErr}`));
  });
});
const pageUrl = new URL(/https?:\/\/\S+/.exec(line)?.[0] ?? line);
const token = pageUrl.searchParams.get('token');
const base = `http://127.0.0.1:${pageUrl.port}`;
if (pageUrl.hostname !== '127.0.0.1' && pageUrl.hostname !== 'localhost') throw new Error(`unexpected URL ${line}`);
const auth = { Authorization: `Bearer ${token}` };

const results = [];
let tree0, treeEnd, peakTotal = 0, summary;
try {
  // wait for the model
  const readyBy = performance.now() + 90_000;
  for (;;) {
    const health = await fetch(`${base}/health`, { headers: auth }).then((r) => r.json()).catch(() => undefined);
    if (health?.model_loaded) break;
    if (performance.now() > readyBy) throw new Error(`model not loaded after 90 s: ${JSON.stringify(health)}; stderr: ${serverErr}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  tree0 = rssTree(server.pid);
  const sampler = setInterval(() => {
    peakTotal = Math.max(peakTotal, rssTree(server.pid).reduce((s, p) => s + p.rss, 0));
  }, 1000);

  const t0 = performance.now();
  const deadline = t0 + seconds * 1000;
  const hardStop = new AbortController();
  const hardTimer = setTimeout(() => hardStop.abort(), seconds * 1000 + graceMs);

  async function one(client, seq) {
    const start = performance.now();
    const r = { client, seq, start, ttfb: NaN, end: NaN, ok: false, tokens: 0, usage: undefined, finish: undefined, error: undefined, done: false };
    try {
      const res = await fetch(`${base}/v1/completions`, {
        method: 'POST',
        headers: { ...auth, 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: values.prompt, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true }, temperature: 0.8, seed: client * 100_000 + seq }),
        signal: hardStop.signal,
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
      const decoder = new TextDecoder();
      let buf = '';
      for await (const chunk of res.body) {
        if (Number.isNaN(r.ttfb)) r.ttfb = performance.now() - start;
        buf += decoder.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, i);
          buf = buf.slice(i + 2);
          for (const l of event.split('\n')) {
            if (!l.startsWith('data: ')) continue;
            const data = l.slice(6);
            if (data === '[DONE]') {
              r.done = true;
              continue;
            }
            const obj = JSON.parse(data);
            if (obj.error) throw new Error(`stream error: ${JSON.stringify(obj.error).slice(0, 200)}`);
            if (obj.usage && (!obj.choices || obj.choices.length === 0)) r.usage = obj.usage;
            else if (obj.choices?.[0]) {
              if (obj.choices[0].finish_reason == null) r.tokens++;
              else r.finish = obj.choices[0].finish_reason;
            }
          }
        }
      }
      r.end = performance.now() - start;
      if (!r.done) throw new Error('stream ended without [DONE]');
      if (!r.usage) throw new Error('no usage chunk');
      r.ok = true;
    } catch (error) {
      r.end = performance.now() - start;
      r.error = String(error?.message ?? error);
    }
    return r;
  }
  const inflight = new Set();
  await Promise.all(Array.from({ length: clients }, async (_, client) => {
    for (let seq = 0; performance.now() < deadline && !hardStop.signal.aborted; seq++) {
      const p = one(client, seq);
      inflight.add(p);
      results.push(await p);
      inflight.delete(p);
    }
  }));
  const elapsed = (performance.now() - t0) / 1000;
  clearTimeout(hardTimer);
  clearInterval(sampler);
  treeEnd = rssTree(server.pid);
  const metricsText = await fetch(`${base}/metrics`, { headers: auth }).then((r) => r.text()).catch(() => '');
  const serverTokens = Number(/^longhand_tokens_generated_total\s+(\S+)/m.exec(metricsText)?.[1] ?? NaN);
  summary = { elapsed, serverTokens };
} finally {
  const exit = await stopServer();
  if (summary) summary.exit = exit;
}

// ── report ───────────────────────────────────────────────────────────────────────────────────
const pct = (xs, p) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};
const ok = results.filter((r) => r.ok);
const errors = results.filter((r) => !r.ok);
const received = ok.reduce((s, r) => s + r.tokens, 0);
const usageTokens = ok.reduce((s, r) => s + r.usage.completion_tokens, 0);
const mismatched = ok.filter((r) => r.tokens !== r.usage.completion_tokens);
const finishes = {};
for (const r of ok) finishes[r.finish] = (finishes[r.finish] ?? 0) + 1;
const total = (t) => t.reduce((s, p) => s + p.rss, 0);
const s = (ms) => (ms / 1000).toFixed(2);

console.log(`load: ${values.model}, ${clients} streaming clients × ${seconds} s, max_tokens ${maxTokens}, /v1/completions stream:true; ` +
  `ran ${summary.elapsed.toFixed(1)} s (last in-flight requests finish after the deadline); server exit ${JSON.stringify(summary.exit)}`);
console.log('');
console.log('| figure | value |');
console.log('|---|---|');
console.log(`| requests (started / completed with [DONE]) | ${results.length} / ${ok.length} |`);
console.log(`| errors | ${errors.length} |`);
console.log(`| requests/s | ${(ok.length / summary.elapsed).toFixed(2)} |`);
console.log(`| tokens received (SSE chunks) / usage.completion_tokens | ${received} / ${usageTokens} |`);
console.log(`| lost tokens (usage − received) | ${usageTokens - received} (requests with a mismatch: ${mismatched.length}) |`);
console.log(`| server's longhand_tokens_generated_total | ${summary.serverTokens} |`);
console.log(`| tokens/s (received) | ${(received / summary.elapsed).toFixed(1)} |`);
console.log(`| finish reasons | ${Object.entries(finishes).map(([k, v]) => `${k} ${v}`).join(', ')} |`);
console.log(`| latency start → [DONE] p50 / p99 / max (s) | ${s(pct(ok.map((r) => r.end), 50))} / ${s(pct(ok.map((r) => r.end), 99))} / ${s(Math.max(...ok.map((r) => r.end)))} |`);
console.log(`| time to first byte p50 / p99 (s) | ${s(pct(ok.map((r) => r.ttfb), 50))} / ${s(pct(ok.map((r) => r.ttfb), 99))} |`);
console.log(`| requests per client min / max | ${Math.min(...Array.from({ length: clients }, (_, c) => results.filter((r) => r.client === c).length))} / ${Math.max(...Array.from({ length: clients }, (_, c) => results.filter((r) => r.client === c).length))} |`);
console.log(`| RSS start: ${tree0.map((p) => `pid ${p.pid} (depth ${p.depth})`).join(' + ')} (MiB) | ${tree0.map((p) => (p.rss / MiB).toFixed(1)).join(' + ')} = ${(total(tree0) / MiB).toFixed(1)} |`);
console.log(`| RSS end (MiB) | ${treeEnd.map((p) => (p.rss / MiB).toFixed(1)).join(' + ')} = ${(total(treeEnd) / MiB).toFixed(1)} |`);
console.log(`| RSS peak total, sampled each second (MiB) | ${(peakTotal / MiB).toFixed(1)} |`);
console.log('');
console.log(`processes: ${treeEnd.map((p) => `${p.pid}: ${p.cmd}`).join(' | ')}`);
if (errors.length) {
  const kinds = {};
  for (const e of errors) kinds[e.error] = (kinds[e.error] ?? 0) + 1;
  console.log(`errors: ${JSON.stringify(kinds)}`);
}
if (mismatched.length) console.log(`mismatches (first 5): ${JSON.stringify(mismatched.slice(0, 5).map((r) => ({ client: r.client, seq: r.seq, received: r.tokens, usage: r.usage.completion_tokens })))}`);
