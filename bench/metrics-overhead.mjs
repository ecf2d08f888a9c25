// Cost of the per-token metrics sampling (app/engine/metrics/step-metrics.ts). Not part of `npm test`.
//
//   node --import tsx bench/metrics-overhead.mjs --model PATH [--policies full,infinigen]
//        [--threads 1] [--context 256] [--steps 64] [--rounds 3] [--cap 0.2]
//
// For each policy: one runner, a prompt of `--context` seeded random ids, then `rounds` rounds of
// three interleaved modes, each decoding `steps` greedy tokens from the same cache (truncated back to
// the prompt before each mode):
//   none     — decode only;
//   maybe    — one StepMetricsSampler made at the start, `.maybe(step)` after every token (what the
//              engine does: a snapshot at most every 100 ms);
//   inspect  — `.sampleEvery(--every)` then `.maybe(step)`: the inspector's own runs (Compare asks
//              for a measured sample every ceil(tokens/150) steps: 2 for 300 tokens), each one a probed
//              step (recall + oracle recall + true attention from a full score pass per sparse layer);
//   snapshot — `.snapshot(step)` after every token (the worst case; equals a new sampler per token,
//              whose first maybe() always snapshots).
// Every sampler attaches the inspector's probe (app/engine/metrics/step-probe.ts): 'maybe' measures
// one step per 100 ms snapshot (what every generation pays, inspector open or not), 'inspect' every
// --every steps; its cost lands inside decode, so the wall difference is the figure to read
// (issue 13: inspector open within 10% of closed, i.e. inspect vs maybe).
// Reported: ms per token (median over rounds of the mean), the sampler's own time per token (timed
// around the call alone), and the overhead = sampler time / step time, in %. Target (issue): < 3%.
import { performance } from 'node:perf_hooks';
import { loadavg, tmpdir } from 'node:os';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: opts } = parseArgs({
  options: {
    model: { type: 'string' },
    policies: { type: 'string', default: 'full,infinigen' },
    threads: { type: 'string', default: '1' },
    context: { type: 'string', default: '256' },
    steps: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '3' },
    cap: { type: 'string', default: '0.2' },
    every: { type: 'string', default: '2' },
  },
});
if (!opts.model) {
  console.error('usage: node --import tsx bench/metrics-overhead.mjs --model PATH [--policies full,infinigen] [--threads 1] [--context 256] [--steps 64] [--rounds 3]');
  process.exit(2);
}
const int = (s, n) => {
  const v = Number(s);
  if (!Number.isInteger(v) || v <= 0) throw new Error(`${n} must be a positive integer, got ${s}`);
  return v;
};
const threads = int(opts.threads, '--threads');
const context = int(opts.context, '--context');
const steps = int(opts.steps, '--steps');
const rounds = int(opts.rounds, '--rounds');
const cap = Number(opts.cap);
const every = int(opts.every, '--every');
const MODES = ['none', 'maybe', 'inspect', 'snapshot'];

const { loadModel } = await import('../app/engine/model/load-model.ts');
const { createModelRunner } = await import('../app/engine/forward/model-runner.ts');
const { StepMetricsSampler } = await import('../app/engine/metrics/step-metrics.ts');

function argmax(x) {
  let b = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[b]) b = i;
  return b;
}
function ids(n, vocab) {
  const out = [Math.min(1, vocab - 1)];
  let s = 20240611;
  while (out.length < n) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    out.push(s % vocab);
  }
  return out;
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const f = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '—');

const cacheDir = mkdtempSync(join(tmpdir(), 'longhand-metrics-skew-'));
const model = await loadModel(opts.model);
const h = model.hyper;
console.log(`metrics overhead ${new Date().toISOString()}: ${opts.model} (dim ${h.hiddenSize}, ${h.layers} layers, ${h.heads}/${h.kvHeads} heads), threads ${threads}, context ${context}, ${steps} steps x ${rounds} rounds; load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
const rows = [];
try {
  for (const policy of opts.policies.split(',').map((s) => s.trim())) {
    const runner = await createModelRunner(model, { threads, contextLength: context + steps + 8, kvType: 'fp16', prefillChunk: 128, policy, infinigen: { fetchCap: cap, cacheDir }, sparse: { fetchCap: cap } });
    const prompt = ids(context, h.vocabSize);
    const first = await runner.prefill(prompt);
    // warm-up
    let l = first;
    for (let i = 0; i < 4; i++) l = await runner.decode(argmax(l));
    runner.truncate(context);
    const res = Object.fromEntries(MODES.map((m) => [m, []]));
    const samplerMs = Object.fromEntries(MODES.map((m) => [m, []]));
    const calls = Object.fromEntries(MODES.map((m) => [m, []]));
    let snapshots = 0;
    let inspected = 0;
    for (let r = 0; r < rounds; r++) {
      for (const mode of MODES) {
        runner.truncate(context);
        runner.resetTimings();
        const sampler = mode === 'none' ? undefined : new StepMetricsSampler(runner, h, runner.policy);
        if (mode === 'inspect') sampler.sampleEvery(every);
        let logits = first;
        let inSampler = 0;
        const a = performance.now();
        for (let s = 0; s < steps; s++) {
          logits = await runner.decode(argmax(logits));
          if (sampler) {
            const b = performance.now();
            const m = mode === 'snapshot' ? sampler.snapshot(s) : sampler.maybe(s);
            const c = performance.now() - b;
            inSampler += c;
            calls[mode].push(c);
            if (m && mode === 'maybe') snapshots++;
            if (m && mode === 'inspect' && m.layers.some((x) => x.oracleRecall !== undefined)) inspected++;
          }
        }
        sampler?.close();
        const ms = performance.now() - a;
        res[mode].push(ms / steps);
        samplerMs[mode].push(inSampler / steps);
      }
    }
    const base = median(res.none);
    const closed = median(res.maybe);
    for (const mode of MODES) {
      const step = median(res[mode]);
      const own = median(samplerMs[mode]);
      const callMedian = calls[mode].length ? median(calls[mode]) : NaN;
      rows.push({ policy, mode, step, own, callMedian, pctOwn: (100 * own) / base, pctMedian: (100 * callMedian) / base, pctWall: (100 * (step - base)) / base, pctClosed: (100 * (step - closed)) / closed });
    }
    rows.push({ policy, snapshots, inspected });
    await runner.dispose();
  }
} finally {
  model.close();
  rmSync(cacheDir, { recursive: true, force: true });
}
const notes = [];
console.log('');
console.log('| policy | mode | ms/token (wall) | sampler ms/token (mean) | sampler ms/call (median) | overhead mean / step | overhead median / step | wall difference vs none | vs maybe (inspector closed) |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  if (r.mode === undefined) {
    notes.push(`${r.policy}: the 'maybe' mode emitted ${r.snapshots} snapshots in ${rounds * steps} tokens (interval 100 ms); 'inspect' ${r.inspected} measured samples (every ${every} steps)`);
    continue;
  }
  console.log(`| ${r.policy} | ${r.mode} | ${f(r.step)} | ${r.mode === 'none' ? '—' : f(r.own, 4)} | ${r.mode === 'none' ? '—' : f(r.callMedian, 4)} | ${r.mode === 'none' ? '—' : `${f(r.pctOwn, 2)}%`} | ${r.mode === 'none' ? '—' : `${f(r.pctMedian, 2)}%`} | ${r.mode === 'none' ? '—' : `${f(r.pctWall, 1)}%`} | ${r.mode === 'none' || r.mode === 'maybe' ? '—' : `${f(r.pctClosed, 1)}%`} |`);
}
console.log('');
for (const n of notes) console.log(n);
console.log(`Target: < 3% of step time. 'sampler' times the call alone (the mean also catches GC pauses and preemption landing in it; the median per call is the sampler's own cost); the wall difference also carries the noise of the other load on the machine. Load average now ${loadavg().map((x) => x.toFixed(2)).join(' ')}.`);
