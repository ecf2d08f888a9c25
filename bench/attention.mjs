#!/usr/bin/env node
// Decode attention on CPU, two ways, same shapes, one run:
//   native  — the addon's kernel reading fp16 K/V rows in place in the pool (Longhand's default)
//   int8    — the same kernel over an int8 pool (kvType 'int8': d bytes + one fp32 scale per row)
//             holding the same K/V; its output's max difference from the fp16 kernel's is printed
//   ort     — an onnxruntime graph (MatMul · Softmax · MatMul) fed with the rows gathered for it
//             as fp32 tensors; the graph is timed alone (rows already gathered: ORT's best case).
//             The gather column copies rows one by one through the JS facade (readK/readV), an
//             upper bound: a native bulk gather would cost about a memcpy of the rows.
//   listed  — attendSlots over a selected fraction (--selected, default 0.1) of each KV head's rows,
//             read in place through the kernel's row list (what every sparse policy does), next to
//             full attention, each over a pool with huge pages (madvise(MADV_HUGEPAGE), the default)
//             and one without (hugePages: false): the cost of scattered reads, and what 2 MiB pages save.
//             The rows are chosen at random (ascending per head): the scattered case.
// Usage: node --import tsx bench/attention.mjs [--contexts 512,2048,8192] [--heads 32] [--kv-heads 32] [--head-dim 64] [--threads 1] [--repeats 20]
//        [--selected 0.1] [--ort on|off] [--layers 4]
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { attend, attendSlots, createKvPool } from '../native/index.js';
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
    selected: { type: 'string', default: '0.1' },
    ort: { type: 'string', default: 'on' },
    layers: { type: 'string', default: '4' },
  },
});
const selected = Number(values.selected);
if (!(selected > 0 && selected <= 1)) throw new Error(`--selected must be in (0, 1], got ${values.selected}`);
const withOrt = values.ort !== 'off';
/** layers of the listed-row pools: the timed layer sits among others, as in a real pool (TLB reach) */
const listedLayers = Number(values.layers);
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

/**
 * Full attention and listed-row attention over a `selected` fraction, on pools with and without huge
 * pages; every layer filled (the timed one is the middle one), layers visited round-robin so that no
 * layer's rows stay in the cache between calls.
 */
function listedRows(n) {
  const bytesPerToken = listedLayers * (2 * kvHeads * d * 2 + kvHeads * 4);
  const q = new Float32Array(heads * d).map(() => Math.random() - 0.5);
  const per = Math.max(1, Math.floor(selected * n));
  // per KV head: `per` distinct random slots in ascending order, then the current (last) slot
  const lists = [];
  for (let g = 0; g < kvHeads; g++) {
    const pick = new Uint8Array(n);
    let c = 0;
    while (c < per) {
      const j = Math.floor(Math.random() * (n - 1));
      if (!pick[j]) {
        pick[j] = 1;
        c++;
      }
    }
    const one = [];
    for (let j = 0; j < n - 1; j++) if (pick[j]) one.push(j);
    one.push(n - 1);
    lists.push(one);
  }
  const offsets = new Int32Array(kvHeads + 1);
  for (let g = 0; g < kvHeads; g++) offsets[g + 1] = offsets[g] + lists[g].length;
  const slots = new Int32Array(offsets[kvHeads]);
  for (let g = 0; g < kvHeads; g++) slots.set(lists[g], offsets[g]);
  const out = { n, per };
  // both pools live at once and the four timings interleave, round by round: on a shared machine a
  // change of load hits every column alike instead of whichever ran then
  const pools = {};
  for (const huge of [true, false]) {
    const pool = createKvPool({ budgetBytes: Math.ceil((n + 64) * bytesPerToken * 1.05) + (1 << 22), layers: listedLayers, kvHeads, headDim: d, hugePages: huge });
    const chunk = 1024;
    for (let l = 0; l < listedLayers; l++)
      for (let t0 = 0; t0 < n; t0 += chunk) {
        const T = Math.min(chunk, n - t0);
        pool.appendBatch(l, new Float32Array(T * kvHeads * d).map(() => Math.random() - 0.5), new Float32Array(T * kvHeads * d).map(() => Math.random() - 0.5), t0);
      }
    pools[huge] = pool;
    if (huge) out.anonHugeMiB = anonHugeMiB(); // the advised pool's 2 MiB pages (the only ones unless THP is 'always')
  }
  const o = new Float32Array(heads * d);
  let l = 0;
  const next = () => (l = (l + 1) % listedLayers);
  const runs = {
    fullHuge: () => attend(pools[true], next(), q, heads, o),
    listedHuge: () => attendSlots(pools[true], next(), q, heads, slots, offsets, o),
    full: () => attend(pools[false], next(), q, heads, o),
    listed: () => attendSlots(pools[false], next(), q, heads, slots, offsets, o),
  };
  const samples = Object.fromEntries(Object.keys(runs).map((k) => [k, []]));
  for (let r = 0; r < repeats; r++)
    for (const [k, fn] of Object.entries(runs)) {
      const t0 = performance.now();
      fn();
      samples[k].push(performance.now() - t0);
    }
  for (const k of Object.keys(runs)) out[k] = median(samples[k]);
  out.advised = pools[true].hugePages;
  for (const p of Object.values(pools)) p.free();
  return out;
}

/** MiB of this process's memory on transparent huge pages (AnonHugePages of /proc/self/smaps_rollup). */
function anonHugeMiB() {
  try {
    const m = /AnonHugePages:\s+(\d+) kB/.exec(readFileSync('/proc/self/smaps_rollup', 'utf8'));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

function thpMode() {
  try {
    return readFileSync('/sys/kernel/mm/transparent_hugepage/enabled', 'utf8').trim();
  } catch {
    return 'unknown';
  }
}

const listed = contexts.map(listedRows);
console.log(`listed-row attention in place: ${heads} heads / ${kvHeads} KV heads, head dim ${d}, ${listedLayers} layers per pool, ${(selected * 100).toFixed(0)}% of the rows per KV head at random, median of ${repeats}; THP ${thpMode()}`);
console.log('');
console.log('| context | rows per KV head | pool MiB on 2 MiB pages | full, huge pages (ms) | listed, huge pages (ms) | listed / full, huge | full, 4 KiB pages (ms) | listed, 4 KiB pages (ms) | listed / full, 4 KiB | 4 KiB / huge, full | 4 KiB / huge, listed |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of listed) {
  console.log(
    `| ${r.n} | ${r.per} | ${r.anonHugeMiB.toFixed(0)} | ${r.fullHuge.toFixed(3)} | ${r.listedHuge.toFixed(3)} | ${((100 * r.listedHuge) / r.fullHuge).toFixed(0)}% | ${r.full.toFixed(3)} | ${r.listed.toFixed(3)} | ${((100 * r.listed) / r.full).toFixed(0)}% | ${(r.full / r.fullHuge).toFixed(2)}x | ${(r.listed / r.listedHuge).toFixed(2)}x${r.advised ? '' : ' (advice refused)'} |`,
  );
}
console.log('');
if (!withOrt) process.exit(0);

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
