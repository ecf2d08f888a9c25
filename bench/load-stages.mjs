#!/usr/bin/env node
// Where a model load's time goes (issue 11 part 2, "fast load"), and what a cache of onnxruntime's
// optimised graphs with their pre-packed weights would save. Each measurement runs in its own child
// (a fresh heap, so peak RSS is that load's), alternating A B A B over --rounds; the load average
// is printed beside the numbers (2 shared cores: read wall beside CPU).
//
//   cold   what createModelRunner does today, per stage: buildStage (GGUF → MatMulNBits repack,
//          then the protobuf encode), createSession (graph optimisation + MatMulNBits PrePack)
//   save   cold, but each session also writes its optimised graph and, in one aligned external
//          file, the weights and their pre-packed blobs (session.save_external_prepacked_constant_initializers)
//   warm   sessions created from those files by path, graph optimisation off: onnxruntime maps
//          the external file and hands MatMulNBits its pre-packed blobs instead of packing again
//   llama  node-llama-cpp: loadModel + createContext (the bench/dense.mjs load)
//
// --hugetlb also runs cold and warm with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc ≥ 2.35 madvises
// its large mmap'd chunks for transparent huge pages: first touch of fresh memory is ~15 µs per 4 KiB
// page on our VMs, ~300 MB/s, and a load writes ~1 GB of fresh memory several times over).
// --runner measures createModelRunner itself instead: without the stage cache, with an empty cache
// folder (first: the model file is hashed too), cold (entries written and checked), warm (loaded
// from them), and llama; each row also prints the sha256 of the first logits so that rows can be
// compared. The stage-level 'warm' above reloads MatMulNBits' pre-packed blobs, which onnxruntime 1.30
// restores wrongly under accuracy level 4 (session.test.ts): its times are not a load that computes
// the right numbers, and the runner's cache keeps no pre-packed blobs there (--accuracy 0 shows them).
// Usage: node --import tsx bench/load-stages.mjs --model /tmp/lc/q8.gguf [--rounds 2] [--threads 2] [--hugetlb] [--cache DIR] [--runner] [--accuracy 4]
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { loadavg, tmpdir } from 'node:os';
import { mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    rounds: { type: 'string', default: '2' },
    threads: { type: 'string', default: '2' },
    hugetlb: { type: 'boolean', default: false },
    cache: { type: 'string' },
    child: { type: 'string' },
    accuracy: { type: 'string', default: '4' },
    runner: { type: 'boolean', default: false },
  },
});
const accuracy = Number(values.accuracy);
if (!values.model) throw new Error('--model is required');
const threads = Number(values.threads);
const cacheDir = values.cache ?? path.join(tmpdir(), 'longhand-load-stages-cache');
const cpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
const peakRssMiB = () => process.resourceUsage().maxRSS / 1024;

async function child(mode) {
  const ort = await import('onnxruntime-node');
  const base = { executionProviders: ['cpu'], executionMode: 'sequential', interOpNumThreads: 1, intraOpNumThreads: threads, enableCpuMemArena: false };
  const spin = { intra_op: { allow_spinning: '0' } };
  const t0 = performance.now();
  const c0 = cpu();
  const out = { mode, build: 0, buildCpu: 0, session: 0, sessionCpu: 0 };
  const held = []; // sessions stay alive to the end, as the runner's do (peak RSS)
  if (mode.startsWith('runner')) {
    // the engine's load as users get it: createModelRunner, with the stage cache (app/engine/forward/stage-cache.ts)
    // or without it ('runner'); 'runner-first' starts from an empty cache folder (the model file is hashed too)
    const { loadModel } = await import('../app/engine/model/load-model.ts');
    const { createModelRunner } = await import('../app/engine/forward/model-runner.ts');
    const runnerCache = path.join(cacheDir, 'runner');
    if (mode === 'runner-first') rmSync(runnerCache, { recursive: true, force: true });
    if (mode === 'runner-cold') rmSync(path.join(runnerCache, 'stages'), { recursive: true, force: true });
    const model = await loadModel(values.model);
    const runner = await createModelRunner(model, {
      threads,
      contextLength: 4096,
      kvType: 'fp16',
      accuracyLevel: accuracy,
      // onnxruntime's stages (what the stage cache is for): the native ones have no load to cache (bench/dense.mjs times them)
      dense: 'onnx',
      ...(mode === 'runner' ? {} : { stageCache: { dir: runnerCache } }),
    });
    held.push(runner);
    out.session = performance.now() - t0;
    out.sessionCpu = cpu() - c0;
    out.peakRssMiB = peakRssMiB(); // at the end of the load, before the prefill's activations
    out.stageCache = runner.stageCache && { ...runner.stageCache, problems: runner.stageCache.problems.slice(0, 3) };
    // the first token's logits, so rows can be compared (a cache that loads fast but computes other numbers is no cache)
    const logits = await runner.prefill([1, 2, 3, 4]);
    out.logitsSha = createHash('sha256').update(new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength)).digest('hex').slice(0, 12);
    // a warm load maps the cached weights and touches them on first use: the RSS to compare is after a prefill
    out.prefillPeakRssMiB = peakRssMiB();
    out.wall = out.session;
    out.cpu = out.sessionCpu;
    out.sessions = held.length;
    process.stdout.write(`RESULT ${JSON.stringify(out)}\n`);
    return;
  }
  if (mode === 'llama') {
    const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath: values.model, gpuLayers: 0 });
    const context = await model.createContext({ contextSize: 4096, threads, batchSize: 512, flashAttention: false });
    held.push(context);
    if (values.runner) {
      out.peakRssMiB = peakRssMiB();
      out.wall = performance.now() - t0;
      out.cpu = cpu() - c0;
      await context.getSequence().controlledEvaluate([1, 2, 3, [4, { generateNext: { token: true, options: { temperature: 0 } } }]]);
      out.prefillPeakRssMiB = peakRssMiB();
      process.stdout.write(`RESULT ${JSON.stringify(out)}\n`);
      return;
    }
  } else {
    const { loadModel } = await import('../app/engine/model/load-model.ts');
    const { mallocTrim } = await import('../native/index.js');
    const model = await loadModel(values.model);
    const layers = model.hyper.layers;
    if (mode === 'warm') {
      for (let s = 0; s <= layers; s++) {
        held.push(await ort.InferenceSession.create(path.join(cacheDir, `s${s}.onnx`), { ...base, graphOptimizationLevel: 'disabled', extra: { session: spin } }));
      }
      out.session = performance.now() - t0;
      out.sessionCpu = cpu() - c0;
    } else {
      const { ModelWeights } = await import('../app/engine/forward/weights.ts');
      const { buildStage } = await import('../app/engine/forward/graphs.ts');
      const w = new ModelWeights(model, 4);
      if (mode === 'save') {
        rmSync(cacheDir, { recursive: true, force: true });
        mkdirSync(cacheDir, { recursive: true });
      }
      for (let s = 0; s <= layers; s++) {
        const a = performance.now();
        const ac = cpu();
        const g = buildStage(w, s, { speculateNext: false });
        const b = performance.now();
        const bc = cpu();
        const save =
          mode === 'save'
            ? {
                optimizedModelFilePath: path.join(cacheDir, `s${s}.onnx`),
                extra: {
                  session: {
                    ...spin,
                    save_external_prepacked_constant_initializers: '1',
                    optimized_model_external_initializers_file_name: `s${s}.bin`,
                    optimized_model_external_initializers_min_size_in_bytes: '1024',
                  },
                },
              }
            : { extra: { session: spin } };
        held.push(await ort.InferenceSession.create(g.model, { ...base, graphOptimizationLevel: 'all', ...save }));
        mallocTrim();
        out.build += b - a;
        out.buildCpu += bc - ac;
        out.session += performance.now() - b;
        out.sessionCpu += cpu() - bc;
      }
    }
  }
  out.wall = performance.now() - t0;
  out.cpu = cpu() - c0;
  out.peakRssMiB = peakRssMiB();
  out.sessions = held.length;
  process.stdout.write(`RESULT ${JSON.stringify(out)}\n`);
}

function dirBytes(dir) {
  let n = 0;
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) n += e.isDirectory() ? dirBytes(path.join(dir, e.name)) : statSync(path.join(dir, e.name)).size;
  } catch {
    // no folder: 0
  }
  return n;
}

function run(mode, hugetlb) {
  const env = { ...process.env };
  if (hugetlb) env.GLIBC_TUNABLES = 'glibc.malloc.hugetlb=1';
  const args = ['--import', 'tsx', fileURLToPath(import.meta.url), '--model', values.model, '--threads', String(threads), '--cache', cacheDir, '--accuracy', String(accuracy), ...(values.runner ? ['--runner'] : []), '--child', mode];
  const r = spawnSync(process.execPath, args, { env, encoding: 'utf8', cwd: fileURLToPath(new URL('..', import.meta.url)), maxBuffer: 1 << 24 });
  const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
  if (!line) throw new Error(`${mode}: no result (exit ${r.status}): ${r.stderr.slice(-2000)}`);
  return { ...JSON.parse(line.slice(7)), hugetlb, load1: loadavg()[0] };
}

if (values.child) {
  await child(values.child);
} else {
  const before = loadavg();
  console.log(`load-stages ${new Date().toISOString()}: ${values.model}, ${threads} threads, load average before ${before.map((x) => x.toFixed(2)).join(' ')}`);
  if (values.runner) {
    // createModelRunner's load without the cache, then with it: first (empty cache folder), cold
    // (the model's sha256 known, no entries), warm; each in a fresh child, A B C D over --rounds
    const rows = [];
    for (let r = 0; r < Number(values.rounds); r++) for (const m of ['runner', 'runner-first', 'runner-cold', 'runner-warm', 'runner-warm', 'llama']) rows.push(run(m, false));
    const f = (x, d = 2) => (x === undefined ? '—' : x.toFixed(d));
    console.log(`accuracy level ${accuracy}; cache ${(dirBytes(path.join(cacheDir, 'runner', 'stages')) / 2 ** 20).toFixed(0)} MiB in ${path.join(cacheDir, 'runner', 'stages')}`);
    console.log('| mode | load wall s | load CPU s | peak RSS at load MiB | peak RSS after a 4-token prefill MiB | hits / misses / stored | logits sha256 | load avg 1 min |');
    console.log('|---|---|---|---|---|---|---|---|');
    for (const o of rows) {
      const c = o.stageCache ? `${o.stageCache.hits} / ${o.stageCache.misses} / ${o.stageCache.stored}` : '—';
      console.log(`| ${o.mode} | ${f(o.wall / 1000)} | ${f(o.cpu)} | ${f(o.peakRssMiB, 0)} | ${f(o.prefillPeakRssMiB, 0)} | ${c} | ${o.logitsSha ?? '—'} | ${f(o.load1)} |`);
      if (o.stageCache?.problems.length) console.log(`|  | problems: ${o.stageCache.problems.join('; ').slice(0, 300)} | | | | | | |`);
    }
    console.log(`load average after ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
    process.exit(0);
  }
  const rows = [run('save', false)];
  const bytes = readdirSync(cacheDir).reduce((n, f) => n + statSync(path.join(cacheDir, f)).size, 0);
  console.log(`cache: ${(bytes / 2 ** 20).toFixed(0)} MiB in ${cacheDir}`);
  const plan = ['cold', 'warm', 'llama', ...(values.hugetlb ? ['cold+h', 'warm+h'] : [])];
  for (let r = 0; r < Number(values.rounds); r++) for (const m of plan) rows.push(run(m.replace('+h', ''), m.endsWith('+h')));
  const f = (x, d = 2) => (x === undefined ? '—' : x.toFixed(d));
  console.log('| mode | hugetlb | build s (CPU) | sessions s (CPU) | load wall s | load CPU s | peak RSS MiB | load avg 1 min |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const o of rows) {
    const b = o.mode === 'llama' || o.mode === 'warm' ? '—' : `${f(o.build / 1000)} (${f(o.buildCpu)})`;
    const s = o.mode === 'llama' ? '—' : `${f(o.session / 1000)} (${f(o.sessionCpu)})`;
    console.log(`| ${o.mode} | ${o.hugetlb ? 'on' : 'off'} | ${b} | ${s} | ${f(o.wall / 1000)} | ${f(o.cpu)} | ${f(o.peakRssMiB, 0)} | ${f(o.load1)} |`);
  }
  console.log(`load average after ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
}
