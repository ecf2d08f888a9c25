#!/usr/bin/env node
// Memory soak: one long generation under a KV pool budget smaller than the full cache, so the
// pool evicts instead of growing; samples the engine host's RSS along the way and reports whether
// it stays flat. The context is sized so the run never reaches contextLimit.
// Usage: node --import tsx bench/soak.mjs --model M.gguf [--tokens 20000] [--budget-fraction 0.25]
//        [--policy infinigen] [--sample-every 500] [--threads N] [--seed 1234] [--prompt TEXT]
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { EngineClient } from '../app/engine/client.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    tokens: { type: 'string', default: '20000' },
    'budget-fraction': { type: 'string', default: '0.25' },
    policy: { type: 'string', default: 'infinigen' },
    'sample-every': { type: 'string', default: '500' },
    threads: { type: 'string' },
    seed: { type: 'string', default: '1234' },
    prompt: { type: 'string', default: 'Once upon a time' },
    context: { type: 'string' },
  },
});
if (!values.model) throw new Error('--model is required');
const tokens = Number(values.tokens);
const fraction = Number(values['budget-fraction']);
const every = Number(values['sample-every']);
const MiB = 1024 * 1024;

const engine = await EngineClient.start();
const rows = [];
let info, budget, contextLength, stopReason, promptTokens, wallMs;
try {
  // The prompt length is only known after tokenizing, which needs a loaded model; give it headroom.
  contextLength = values.context ? Number(values.context) : tokens + 100;
  const load = { modelPath: values.model, contextLength, policy: values.policy, ...(values.threads ? { threads: Number(values.threads) } : {}) };
  info = await engine.load(load);
  const fullBytes = contextLength * info.layers * info.kvHeads * info.headDim * 2 * 2; // K+V, fp16
  budget = Math.floor(fullBytes * fraction);
  info = await engine.load({ ...load, poolBudgetBytes: budget });
  const ids = await engine.tokenize(values.prompt);
  promptTokens = ids.length;
  if (promptTokens + tokens > contextLength) throw new Error(`context ${contextLength} < prompt ${promptTokens} + ${tokens} tokens`);

  const t0 = performance.now();
  let next = every;
  let lastAt = t0;
  let lastStep = 0;
  let count = 0;
  let latest;
  const record = (m) => {
    const now = performance.now();
    rows.push({ step: m.step, rss: m.memory.rssBytes, evictions: m.evictions, pool: m.memory.poolBytes, kvUsed: m.memory.kvUsedBytes, ctx: m.contextTokens, tps: ((m.step - lastStep) * 1000) / Math.max(1e-9, now - lastAt) });
    lastAt = now;
    lastStep = m.step;
  };
  for await (const event of engine.generate({ ids }, { maxTokens: tokens, stopOnEos: false, sampling: { temperature: 0.8, seed: Number(values.seed) } })) {
    if (event.kind === 'token') count++;
    else if (event.kind === 'metrics') {
      latest = event.metrics;
      // metrics arrive at most every 100 ms: take the first snapshot at or past each boundary
      if (latest.step >= next) {
        record(latest);
        while (next <= latest.step) next += every;
      }
    } else if (event.kind === 'done') {
      stopReason = event.stopReason;
      if (latest && latest.step !== lastStep) record(latest);
    }
  }
  wallMs = performance.now() - t0;
  if (count !== tokens) console.error(`note: ${count} tokens generated, ${tokens} asked`);
} finally {
  await engine.close();
}

const warmupEnd = Math.ceil(tokens * 0.1);
const warm = rows.filter((r) => r.step <= warmupEnd);
const after = rows.filter((r) => r.step > warmupEnd);
const warmRss = (warm.at(-1) ?? rows[0]).rss;
const maxAfter = Math.max(...after.map((r) => r.rss));
const growth = ((maxAfter - warmRss) / warmRss) * 100;

console.log(`RSS soak: ${values.model}, policy ${values.policy}, ${tokens} tokens (prompt ${promptTokens}), context ${contextLength}, ` +
  `pool budget ${(budget / MiB).toFixed(2)} MiB (${fraction} of the full cache), temperature 0.8 seed ${values.seed}, stop: ${stopReason}, ${(wallMs / 1000).toFixed(1)} s`);
console.log('');
console.log('| tokens | RSS (MiB) | evictions | pool bytes | KV used bytes | context tokens | tok/s |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.step} | ${(r.rss / MiB).toFixed(1)} | ${r.evictions} | ${r.pool} | ${r.kvUsed} | ${r.ctx} | ${r.tps.toFixed(0)} |`);
console.log('');
console.log(`verdict: RSS after warm-up (${warmupEnd} tokens) ${(warmRss / MiB).toFixed(1)} MiB, max after ${(maxAfter / MiB).toFixed(1)} MiB: ` +
  `${growth >= 0 ? '+' : ''}${growth.toFixed(1)}% (target: within 10%) → ${Math.abs(growth) <= 10 ? 'FLAT' : 'GROWS'}`);
