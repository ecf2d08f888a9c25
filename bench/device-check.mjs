// The prepared device check (issue 14, part 4). For each execution provider that starts here
// (default webgpu, cuda), in offload mode on that provider:
//   1. exactness against the CPU path on both reference models (../shared/models/stories260K.gguf,
//      kjv-llama-hd64.gguf): greedy ids of `--exact-steps` decode steps after the reference prompt, fp32
//      KV, policies full and infinigen, vs the CPU provider's in-place run; max |Δ logit| printed;
//   2. decode tokens/s at each N of --contexts (default 2K, 8K, 16K) for full and infinigen on the
//      1 GB fixture (Q8_0, dim 2048, 16 layers, 32 heads / --kv-heads 4, written by
//      test/fixtures/cli.ts into os.tmpdir()), with the bytes crossed per token counted from the
//      tensors bound: the row buffer's missed K/V rows, and the other host tensors (the row index or
//      its length, the rows a graph update overwrites; on a non-CPU provider also q, the output and any
//      host buffer, which onnxruntime copies at every run — see below), and the CPU provider's
//      in-place tok/s at the same N beside it.
//
//   node --import tsx bench/device-check.mjs [--providers webgpu,cuda] [--contexts 2048,8192,16384]
//        [--steps 8] [--exact-steps 32] [--kv-heads 4] [--threads N] [--budget-s 540] [--json FILE]
//        [--row-update host|graph] [--exact-only] [--speed-on-software]
//
// The WebGPU adapter is identified (app/engine/device/webgpu-adapter.ts: name, vendor, software or not,
// float16) and printed with the report. On a software adapter (SwiftShader, lavapipe: what machines
// without a GPU have, e.g. `LD_LIBRARY_PATH=/usr/lib/chromium VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json`)
// the check is a dry run of this script: exactness only, the speed phase skipped unless
// --speed-on-software, and then its rows marked "software" (their timings say nothing about a GPU).
// An adapter without float16 runs the speed phase's KV rows in fp32. --exact-only skips the speed phase anywhere.
//
// --row-update: how the row buffer gets its misses (app/engine/forward/placement/offload-attention.ts): 'graph' (the default on a
// non-CPU provider) keeps the buffer in onnxruntime's device tensors and writes the misses with a
// ScatterND graph; 'host' binds host arrays (on a GPU onnxruntime then copies the whole buffer every
// run). `--providers cpu` runs the whole check on the CPU provider (a dry run of the script).
//
// Unattended: everything runs under one watchdog (--budget-s, default 540 s, under 10 minutes); a
// phase that would start after the budget is skipped and said so, and the watchdog prints what was
// measured and exits 124 if a call hangs. Exit codes: 0 a provider ran and every exactness check held;
// 1 an exactness check failed or a run failed; 2 no provider started (nothing to time: the message
// names each provider and onnxruntime's reason); 124 the budget ran out.
//
// What onnxruntime-node 1.30 allows (app/engine/onnx/attention-graph.ts): CPU tensors fed to a run
// alias the JS arrays; on a GPU provider they are copied to the device at every run, and only WebGPU
// can keep an output on the device (preferredOutputLocation 'gpu-buffer') to feed it to the next run.
// So with --row-update graph the buffer stays on a WebGPU device between steps; on CUDA the update
// graph's outputs come back to the host and cross again (the column "host tensors" shows it: q, the
// output, and whatever buffer tensor was bound from the host).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const MODELS = join(ROOT, '..', 'shared', 'models');
const SEED = 20240611;

const { values: opts } = parseArgs({
  options: {
    providers: { type: 'string', default: 'webgpu,cuda' },
    contexts: { type: 'string', default: '2048,8192,16384' },
    steps: { type: 'string', default: '8' },
    'exact-steps': { type: 'string', default: '32' },
    'kv-heads': { type: 'string', default: '4' },
    threads: { type: 'string' },
    'budget-s': { type: 'string', default: '540' },
    json: { type: 'string' },
    'row-update': { type: 'string' },
    'exact-only': { type: 'boolean', default: false },
    'speed-on-software': { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});

const positiveInt = (text, name) => {
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${text}`);
  return n;
};
const fmt = (x, d = 1) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(d) : '—');
const kib = (b) => fmt(b / 1024, 1);
const argmax = (x) => {
  let b = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[b]) b = i;
  return b;
};

const started = Date.now();
const budgetMs = positiveInt(opts['budget-s'], '--budget-s') * 1000;
const left = () => budgetMs - (Date.now() - started);
const rowUpdate = opts['row-update'];
if (rowUpdate !== undefined && rowUpdate !== 'host' && rowUpdate !== 'graph') throw new Error(`--row-update must be host or graph, got ${rowUpdate}`);
const report = { started: new Date(started).toISOString(), loadBefore: loadavg(), probes: [], exactness: [], speed: [], skipped: [] };
let exitCode = 0;

function printReport() {
  const lines = [];
  lines.push('');
  lines.push(`### device check — ${report.started}; load average before ${report.loadBefore.map((x) => x.toFixed(2)).join(' ')}, now ${loadavg().map((x) => x.toFixed(2)).join(' ')}; ${((Date.now() - started) / 1000).toFixed(0)} s`);
  lines.push('');
  lines.push('| provider | starts | ms | onnxruntime says |');
  lines.push('|---|---|---|---|');
  for (const p of report.probes) lines.push(`| ${p.provider} | ${p.ok ? 'yes' : 'no'} | ${fmt(p.ms, 0)} | ${(p.message ?? '').replaceAll('|', '/').replaceAll('\n', ' ').slice(0, 300)} |`);
  if (report.adapter) lines.push('', `WebGPU adapter: ${report.adapter.line}${report.adapter.note ? ` — ${report.adapter.note}` : ''}`);
  if (report.exactness.length > 0) {
    lines.push('');
    lines.push('| provider | model | policy | steps | ids == CPU in place | first divergence | max abs Δ logit |');
    lines.push('|---|---|---|---|---|---|---|');
    for (const e of report.exactness) lines.push(`| ${e.provider} | ${e.model} | ${e.policy} | ${e.steps} | ${e.error ? `**failed**: ${e.error}` : e.equal ? 'yes' : '**no**'} | ${e.first ?? '—'} | ${fmt(e.maxDiff, 6)} |`);
  }
  if (report.speed.length > 0) {
    lines.push('');
    lines.push('| provider | policy | N | decode tok/s | CPU in place tok/s | KV rows crossed KiB/token | other host tensors KiB/token | hit rate |');
    lines.push('|---|---|---|---|---|---|---|---|');
    for (const s of report.speed) lines.push(`| ${s.provider} | ${s.policy} | ${s.N} | ${s.error ? `**failed**: ${s.error}` : fmt(s.tps, 2)} | ${fmt(s.cpuTps, 2)} | ${kib(s.rowsBytesPerToken)} | ${kib(s.hostBytesPerToken)} | ${fmt(s.hitRate, 3)} |`);
  }
  for (const s of report.skipped) lines.push(`skipped: ${s}`);
  console.log(lines.join('\n'));
  if (opts.json) writeFileSync(opts.json, `${JSON.stringify(report, null, 2)}\n`);
}

const watchdog = setTimeout(() => {
  report.skipped.push(`the budget of ${opts['budget-s']} s ran out during a run; the rest did not run`);
  printReport();
  process.exit(124);
}, budgetMs + 30_000);
watchdog.unref();

async function greedy(createModelRunner, model, prompt, options, steps) {
  const r = await createModelRunner(model, options);
  try {
    let logits = await r.prefill(prompt);
    const ids = [];
    const all = [];
    for (let i = 0; i < steps; i++) {
      all.push(logits.slice());
      const b = argmax(logits);
      ids.push(b);
      logits = await r.decode(b);
    }
    return { ids, logits: all };
  } finally {
    await r.dispose();
  }
}

async function main() {
  if (opts.help) {
    console.log('usage: node --import tsx bench/device-check.mjs [--providers webgpu,cuda] [--contexts 2048,8192,16384] [--steps 8] [--exact-steps 32] [--kv-heads 4] [--threads N] [--budget-s 540] [--json FILE] [--row-update host|graph] [--exact-only] [--speed-on-software]');
    return;
  }
  const { probeProvider, listProviders } = await import('../app/engine/onnx/session.ts');
  const providers = opts.providers.split(',').map((s) => s.trim()).filter(Boolean);
  console.log(`device check: providers ${providers.join(', ')}; this onnxruntime-node build lists ${listProviders().map((p) => `${p.name}${p.bundled ? '' : ' (not bundled)'}`).join(', ')}`);
  for (const p of providers) {
    const r = await probeProvider(p);
    report.probes.push(r);
    console.log(`${p}: ${r.ok ? `starts (${fmt(r.ms, 0)} ms)` : `does not start: ${(r.message ?? '').split('\n')[0]}`}`);
  }
  const usable = report.probes.filter((p) => p.ok).map((p) => p.provider);
  let software = false;
  let float16 = true;
  if (usable.includes('webgpu')) {
    const { describeWebgpuAdapter, adapterLine } = await import('../app/engine/device/webgpu-adapter.ts');
    const a = await describeWebgpuAdapter();
    if (a.available) {
      report.adapter = { ...a.info, line: adapterLine(a.info) };
      software = a.info.software === true;
      float16 = a.info.float16;
      console.log(`webgpu adapter: ${report.adapter.line}`);
    }
  }
  if (usable.length === 0) {
    report.skipped.push(`no execution provider of ${providers.join(', ')} starts on this machine, so nothing ran on a device: no exactness check, no tok/s (the CPU provider's offload figures are bench/long-context.mjs --offload)`);
    exitCode = 2;
    return;
  }

  const { loadModel } = await import('../app/engine/model/load-model.ts');
  const { createModelRunner } = await import('../app/engine/forward/model-runner.ts');
  const threads = opts.threads ? positiveInt(opts.threads, '--threads') : availableParallelism();
  const exactSteps = positiveInt(opts['exact-steps'], '--exact-steps');
  const skewDir = mkdtempSync(join(tmpdir(), 'longhand-device-skew-'));
  const fixtureDir = mkdtempSync(join(tmpdir(), 'longhand-device-'));
  try {
    // 1. exactness on the reference models
    for (const [name, file, ref] of [
      ['stories260K', 'stories260K.gguf', 'reference-greedy.json'],
      ['kjv-llama-hd64', 'kjv-llama-hd64.gguf', 'kjv-reference-greedy.json'],
    ]) {
      const path = join(MODELS, file);
      if (!existsSync(path)) {
        report.skipped.push(`${name}: ${path} is missing`);
        continue;
      }
      const { readFileSync } = await import('node:fs');
      const prompt = JSON.parse(readFileSync(join(MODELS, ref), 'utf8')).runs[0].promptIds;
      const model = await loadModel(path);
      try {
        for (const policy of ['full', 'infinigen']) {
          const base = { kvType: 'fp32', contextLength: 512, threads, policy, ...(policy === 'infinigen' ? { infinigen: { cacheDir: skewDir } } : {}) };
          const cpu = await greedy(createModelRunner, model, prompt, base, exactSteps);
          for (const provider of usable) {
            if (left() < 60_000) {
              report.skipped.push(`exactness ${provider} ${name} ${policy}: out of budget`);
              continue;
            }
            try {
              const dev = await greedy(createModelRunner, model, prompt, { ...base, offload: true, device: provider, ...(rowUpdate ? { offloadRowUpdate: rowUpdate } : {}) }, exactSteps);
              const first = dev.ids.findIndex((id, i) => id !== cpu.ids[i]);
              let maxDiff = 0;
              for (let s = 0; s < exactSteps; s++) for (let j = 0; j < cpu.logits[s].length; j++) maxDiff = Math.max(maxDiff, Math.abs(cpu.logits[s][j] - dev.logits[s][j]));
              report.exactness.push({ provider, model: name, policy, steps: exactSteps, equal: first === -1, first: first === -1 ? undefined : first, maxDiff });
              if (first !== -1) exitCode = 1;
            } catch (error) {
              report.exactness.push({ provider, model: name, policy, steps: exactSteps, error: String(error?.message ?? error).slice(0, 200) });
              exitCode = 1;
            }
          }
        }
      } finally {
        model.close();
      }
    }

    // 2. speed on the 1 GB fixture
    if (opts['exact-only']) {
      report.skipped.push('speed: --exact-only');
      return;
    }
    if (software && !opts['speed-on-software']) {
      report.skipped.push(`speed: the WebGPU adapter is a software rasteriser (${report.adapter.line}); this was a dry run of the script (exactness only); --speed-on-software times it anyway`);
      return;
    }
    const contexts = opts.contexts.split(',').map((s) => positiveInt(s, '--contexts')).sort((a, b) => a - b);
    const steps = positiveInt(opts.steps, '--steps');
    const kvHeads = positiveInt(opts['kv-heads'], '--kv-heads');
    const maxN = contexts[contexts.length - 1];
    const fixture = join(fixtureDir, `device-Q8_0-kv${kvHeads}.gguf`);
    const write = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'test/fixtures/cli.ts'), 'gguf', fixture, '--type', 'Q8_0', '--dim', '2048', '--layers', '16', '--heads', '32', '--kv-heads', `${kvHeads}`, '--ffn', '5632', '--vocab', '32000', '--context', `${Math.max(4096, maxN + 2 * steps + 64)}`], { cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 24 });
    if (write.status !== 0) throw new Error(`writing the fixture failed: ${write.stderr}`);
    const model = await loadModel(fixture);
    try {
      const bos = 1;
      const prompt = [bos];
      let s = SEED;
      while (prompt.length < 512) {
        s ^= s << 13;
        s >>>= 0;
        s ^= s >>> 17;
        s ^= s << 5;
        s >>>= 0;
        prompt.push(s % 32000);
      }
      for (const policy of ['full', 'infinigen']) {
        // first the CPU provider in place (the baseline), then offload on each provider that starts
        for (const provider of [undefined, ...usable]) {
          const offload = provider !== undefined;
          const target = provider === undefined ? 'cpu (in place)' : provider === 'webgpu' && software ? 'webgpu (software: timings mean nothing)' : provider;
          if (left() < 45_000) {
            report.skipped.push(`speed ${target} ${policy}: out of budget`);
            continue;
          }
          let runner;
          try {
            // an adapter without float16 cannot run fp16 rows (its graphs fail at run())
            const kvType = provider === 'webgpu' && !float16 ? 'fp32' : 'fp16';
            runner = await createModelRunner(model, { threads, contextLength: maxN + 2 * steps + 8, kvType, policy, infinigen: { fetchCap: 0.1, cacheDir: skewDir }, ...(offload ? { offload: true, device: provider, ...(rowUpdate ? { offloadRowUpdate: rowUpdate } : {}) } : {}) });
            let logits = await runner.prefill(prompt);
            for (const N of contexts) {
              if (left() < 20_000) {
                report.skipped.push(`speed ${target} ${policy} N=${N}: out of budget`);
                break;
              }
              if (N > runner.position) runner.appendRandomContextForBenchmark(N - runner.position, SEED + N);
              if (offload) logits = await runner.decode(argmax(logits)); // fills the empty row buffer (untimed)
              let rows = 0;
              let host = 0;
              let hits = 0;
              let lookups = 0;
              const t0 = performance.now();
              for (let i = 0; i < steps; i++) {
                logits = await runner.decode(argmax(logits));
                const st = runner.lastOffloadStep?.();
                if (st) {
                  for (const l of st.layers) {
                    rows += l.uploadBytes;
                    host += l.hostTensorBytes;
                    hits += l.hits;
                    lookups += l.hits + l.misses;
                  }
                }
              }
              const tps = (steps * 1000) / (performance.now() - t0);
              if (!offload) report.speed.push({ provider: target, policy, N, tps, cpuTps: tps });
              else {
                const cpuRow = report.speed.find((x) => x.provider === 'cpu (in place)' && x.policy === policy && x.N === N);
                report.speed.push({ provider: target, policy, N, tps, cpuTps: cpuRow?.tps, rowsBytesPerToken: rows / steps, hostBytesPerToken: host / steps, hitRate: lookups > 0 ? hits / lookups : undefined });
              }
              console.log(`${target} ${policy} N=${N}: ${fmt(tps, 2)} tok/s`);
            }
          } catch (error) {
            report.speed.push({ provider: target, policy, N: '—', error: String(error?.message ?? error).slice(0, 200) });
            exitCode = 1;
          } finally {
            await runner?.dispose();
          }
        }
      }
    } finally {
      model.close();
    }
  } finally {
    rmSync(skewDir, { recursive: true, force: true });
    rmSync(fixtureDir, { recursive: true, force: true });
  }
}

try {
  await main();
} catch (error) {
  report.skipped.push(`failed: ${error?.stack ?? error}`);
  exitCode = 1;
}
printReport();
clearTimeout(watchdog);
process.exit(exitCode);
