#!/usr/bin/env node
// How fast a cancel takes effect during prefill, through the real engine host process:
// a long prompt starts prefilling, the client aborts after a delay, and we time abort → done.
// The engine checks the signal between layers, so the latency is bounded by one layer's graph
// run on one prefill chunk; smaller chunks cancel faster.
// After the cancels, a short generation must still give its tokens (the engine stays usable).
// Usage: node --import tsx bench/cancel.mjs --model M.gguf [--tokens 1024] [--chunks 32,64,128,256] [--threads 1] [--repeats 3]
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { EngineClient } from '../app/engine/client.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    tokens: { type: 'string', default: '1024' },
    chunks: { type: 'string', default: '32,64,128,256' },
    threads: { type: 'string', default: '1' },
    repeats: { type: 'string', default: '3' },
  },
});
if (!values.model) throw new Error('--model is required');
const tokens = Number(values.tokens);
const repeats = Number(values.repeats);
const ids = [1, ...Array.from({ length: tokens - 1 }, (_, i) => 3 + ((i * 7919) % 30000))];

const rows = [];
for (const chunk of values.chunks.split(',').map(Number)) {
  const engine = await EngineClient.start();
  try {
    await engine.load({ modelPath: values.model, threads: Number(values.threads), contextLength: tokens + 64, prefillChunk: chunk });
    // an uncancelled prefill, to know how long one takes
    const t0 = performance.now();
    let prefillMs = 0;
    for await (const event of engine.generate({ ids }, { maxTokens: 1 })) if (event.kind === 'done') prefillMs = event.timings.prefillMs;
    const fullMs = performance.now() - t0;
    const latencies = [];
    for (let r = 0; r < repeats; r++) {
      const abort = new AbortController();
      let abortedAt = 0;
      let stop;
      const delay = (0.3 + 0.4 * (r / Math.max(1, repeats - 1))) * prefillMs; // 30%..70% into the prefill
      for await (const event of engine.generate({ ids }, { maxTokens: 1 }, abort.signal)) {
        if (event.kind === 'prompt') setTimeout(() => ((abortedAt = performance.now()), abort.abort()), delay);
        if (event.kind === 'done') stop = event.stopReason;
      }
      latencies.push({ ms: performance.now() - abortedAt, stop });
    }
    // the engine is still usable after the cancels: a short generation gives its tokens
    let after = 0;
    let afterStop;
    for await (const event of engine.generate({ ids: ids.slice(0, 16) }, { maxTokens: 4, sampling: { temperature: 0 } })) {
      if (event.kind === 'token') after++;
      if (event.kind === 'done') afterStop = event.stopReason;
    }
    rows.push({ chunk, prefillMs, fullMs, latencies, after: `${after} tokens, ${afterStop}` });
    console.error(`chunk ${chunk}: prefill ${prefillMs.toFixed(0)} ms, abort → done ${latencies.map((l) => l.ms.toFixed(0)).join(', ')} ms`);
  } finally {
    await engine.close();
  }
}

console.log(`cancel during prefill: ${values.model}, ${tokens}-token prompt, ${values.threads} thread(s)`);
console.log('');
console.log('| prefill chunk | prefill (ms) | prefill tok/s | abort → done (ms), each try | stop reasons | next generation |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.chunk} | ${r.prefillMs.toFixed(0)} | ${((tokens * 1000) / r.prefillMs).toFixed(1)} | ${r.latencies.map((l) => l.ms.toFixed(0)).join(', ')} | ${[...new Set(r.latencies.map((l) => l.stop))].join(', ')} | ${r.after} |`);
}
