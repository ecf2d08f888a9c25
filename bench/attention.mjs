#!/usr/bin/env node
// Decode attention on CPU, two ways, same shapes, one run:
//   native  — the addon's kernel reading fp16 K/V rows in place in the pool (Longhand's default)
//   int8    — the same kernel over an int8 pool (kvType 'int8': d bytes + one fp32 scale per row)
//             holding the same K/V; its output's max difference from the fp16 kernel's is printed
//   ort     — an onnxruntime graph (MatMul · Softmax · MatMul) fed with the rows gathered for it
//             as fp32 tensors; the graph is timed alone (rows already gathered: ORT's best case).
//             The gather column copies rows one by one through the JS facade (readK/readV), an
//             upper bound: a native bulk gather would cost about a memcpy of the rows.
// Usage: node --import tsx bench/attention.mjs [--contexts 512,2048,8192] [--heads 32] [--kv-heads 32] [--head-dim 64] [--threads 1] [--repeats 20]
import { parseArgs } from 'node:util';
import { attend, createKvPool } from '../native/index.js';
import { performance } from 'node:perf_hooks';
import { GraphBuilder } from '../app/engine/onnx/graph-builder.ts';
import { createSession } from '../app/engine/onnx/session.ts';

const { values } = parseArgs({
  options: {
    contexts: { type: 'string', default: '512,2048,8192' },
    heads: { type: 'string', default: '32' },
    'kv-heads': { type: 'string', default: '32' },
    'head-dim': { type: 'string', default: '64' },
    threads: { type: 'string', default: '1' },
    repeats: { type: 'string', default: '20' },
  },
});
const contexts = values.contexts.split(',').map(Number);
const heads = Number(values.heads);
const kvHeads = Number(values['kv-heads']);
const d = Number(values['head-dim']);
const threads = Number(values.threads);
const repeats = Number(values.repeats);
const group = heads / kvHeads;

/** q [kvHeads, group, d] · K[kvHeads, N, d]ᵀ → softmax → · V[kvHeads, N, d] */
async function ortAttention() {
  const g = new GraphBuilder('attention');
  const q = g.input('q', 'float32', [kvHeads, group, d]);
  const k = g.input('k', 'float32', [kvHeads, 'n', d]);
  const v = g.input('v', 'float32', [kvHeads, 'n', d]);
  const kt = g.op('Transpose', [k], { perm: [0, 2, 1] });
  const scores = g.op('MatMul', [q, kt]);
  const scaled = g.op('Mul', [scores, g.floatInitializer('scale', [1], new Float32Array([1 / Math.sqrt(d)]))]);
  const probs = g.op('Softmax', [scaled], { axis: -1 });
  g.rename(g.op('MatMul', [probs, v]), 'out');
  g.output('out', 'float32', [kvHeads, group, d]);
  return createSession(g.toModel(), { intraOpThreads: threads, label: 'attention' });
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function time(fn) {
  const samples = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    fn();
    samples.push(performance.now() - t0);
  }
  return median(samples);
}

async function timeAsync(fn) {
  const samples = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    await fn();
    samples.push(performance.now() - t0);
  }
  return median(samples);
}

const session = await ortAttention();
const rows = [];
for (const n of contexts) {
  const bytesPerToken = 2 * kvHeads * d * 2 + kvHeads * 4;
  const pool = createKvPool({ budgetBytes: Math.ceil((n + 64) * bytesPerToken * 1.1) + (1 << 16), layers: 1, kvHeads, headDim: d });
  const k = new Float32Array(n * kvHeads * d).map(() => Math.random() - 0.5);
  const v = new Float32Array(n * kvHeads * d).map(() => Math.random() - 0.5);
  pool.appendBatch(0, k, v, 0);
  const q = new Float32Array(heads * d).map(() => Math.random() - 0.5);
  const out = new Float32Array(heads * d);
  attend(pool, 0, q, heads, out);
  const nativeMs = time(() => attend(pool, 0, q, heads, out));

  // the same rows in an int8 pool: bytes per token 2 * kvHeads * (d + 4) + positions
  const pool8 = createKvPool({ budgetBytes: Math.ceil((n + 64) * (2 * kvHeads * (d + 4) + kvHeads * 4) * 1.1) + (1 << 16), layers: 1, kvHeads, headDim: d, kvType: 'int8' });
  pool8.appendBatch(0, k, v, 0);
  const out8 = new Float32Array(heads * d);
  attend(pool8, 0, q, heads, out8);
  const int8Ms = time(() => attend(pool8, 0, q, heads, out8));
  let int8Diff = 0;
  for (let i = 0; i < out.length; i++) int8Diff = Math.max(int8Diff, Math.abs(out8[i] - out[i]));
  pool8.free();

  // rows gathered for ORT: [kvHeads, N, d] fp32 (the pool stores [kvHeads][slot][d] fp16)
  const kg = new Float32Array(kvHeads * n * d);
  const vg = new Float32Array(kvHeads * n * d);
  const gather = () => {
    for (let h = 0; h < kvHeads; h++) {
      for (let s = 0; s < n; s++) {
        kg.set(pool.readK(0, h, s), (h * n + s) * d);
        vg.set(pool.readV(0, h, s), (h * n + s) * d);
      }
    }
  };
  const feeds = () => ({
    q: { elemType: 'float32', dims: [kvHeads, group, d], data: q },
    k: { elemType: 'float32', dims: [kvHeads, n, d], data: kg },
    v: { elemType: 'float32', dims: [kvHeads, n, d], data: vg },
  });
  gather();
  const ortOut = (await session.run(feeds())).out.data;
  let maxDiff = 0;
  for (let i = 0; i < out.length; i++) maxDiff = Math.max(maxDiff, Math.abs(ortOut[i] - out[i]));
  const ortMs = await timeAsync(() => session.run(feeds()));
  const gatherMs = time(gather);
  rows.push({ n, nativeMs, int8Ms, int8Diff, ortMs, gatherMs, maxDiff });
  pool.free();
}
await session.release();

console.log(`decode attention, ${heads} heads / ${kvHeads} KV heads, head dim ${d}, ${threads} thread(s), median of ${repeats}`);
console.log('');
console.log('| context | native, fp16 rows in place (ms) | native, int8 rows in place (ms) | int8 / fp16 time | int8 vs fp16 max abs diff | ORT graph, rows pre-gathered (ms) | ORT graph / native | gather for ORT via the JS facade (ms) | max abs diff |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(
    `| ${r.n} | ${r.nativeMs.toFixed(3)} | ${r.int8Ms.toFixed(3)} | ${(r.int8Ms / r.nativeMs).toFixed(2)} | ${r.int8Diff.toExponential(1)} | ${r.ortMs.toFixed(3)} | ${(r.ortMs / r.nativeMs).toFixed(1)}x | ${r.gatherMs.toFixed(1)} | ${r.maxDiff.toExponential(1)} |`,
  );
}
