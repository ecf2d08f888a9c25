// Long-context decode benchmark: every KV policy (and llama.cpp via node-llama-cpp, --llama) on the
// same realistic GGUF fixture, with the context already holding N tokens. Not part of `npm test`.
//
//   node --import tsx bench/long-context.mjs [--kv-heads 32|4] [--contexts 2048,8192] [--threads 1]
//        [--policies full,infinigen,streaming,h2o,quest] [--cap 0.1] [--llama] [--steps 16]
//        (infinigen@side-thread / infinigen@inline: InfiniGen with that speculation placement; plain
//        infinigen picks it: side thread with a spare core, else inline on the run's threads)
//        [--type Q8_0] [--dir DIR] [--keep] [--json FILE] [--bandwidth-mib 512]
//        [--fill random|prefill] [--llama-contexts 2048,8192] [--offload]
//   node --import tsx bench/long-context.mjs --family gemma3 [--contexts 8192,16384,32768]
//        [--threads 1] [--policies full] [--layers 12] [--window 1024] [--type Q8_0] [--steps 16]
//
// --family gemma3 (issue 30): a Gemma-3-like fixture (families/gemma.ts through cli.ts: Gemma 3's
// real layer pattern, 5 window layers : 1 global, window 1024, q/k and sandwich norms, GeGLU,
// per-layer RoPE, the real 262,144-piece vocabulary, tied) at hidden 512, 12 layers, 4 heads / 2 KV
// heads, head_dim 128, ffn 2048, so that real prefills to 32K finish in minutes. Both engines, in
// one run, in a fresh child each per threads (and policy): prefill the same seeded random ids up to
// each N in turn (timed: prefill tok/s), then `steps` greedy decode steps (decode tok/s, and the
// greedy ids compared). Then the KV memory of both: Longhand's rings + global rows + ring
// checkpoints (runner.kvLayers(), runner.ringCheckpointBytes) against llama.cpp's non-SWA + SWA
// caches as llama.cpp logs them when the context is made (captured through node-llama-cpp's
// logger), and what every layer at full length would take. No state files, no random rows.
// Smoke run (~1 min): node --import tsx bench/long-context.mjs --family gemma3 --contexts 2048,4096 --layers 6 --window 512 --threads 1 --steps 4
// Full table:         node --import tsx bench/long-context.mjs --family gemma3 --threads 1,2 --json long-gemma3.json
//
// --offload (issue 14): full and infinigen run a second time in offload mode (decode attention in an
// onnxruntime graph over the device-side row buffer, only its misses copied from the pool), and a
// table puts offload beside in place per policy, threads and N. An offload run takes one untimed
// decode step after each fill: the buffer is empty then, so that step sends every row the step
// attends (its ms and bytes are reported as the first-step upload); the timed steps send what the
// reuse buffer lacks (bytes crossed per token: the misses' K/V rows + the row index, counted from the
// tensors bound).
//
// Fixture: dim 2048, 16 layers, 32 heads (--kv-heads 32 = MHA, 4 = tinyllama's GQA), ffn 5632,
// vocab 32000, Q8_0, written by test/fixtures/cli.ts into os.tmpdir() (deleted unless --keep/--dir).
// One fresh child per (engine/policy, threads): fill the cache up to the first N, time `steps`
// greedy decode steps, fill on up to the next N, decode again, ... (so the cache holds N tokens,
// plus the previous steps' tokens, at most `steps` more). Filling: llama.cpp always prefills seeded
// random ids. Longhand with --fill prefill does the same; with --fill random (the default) it
// prefills the first 512 ids for real (skew calibration and InfiniGen's column choice use them) and
// appends seeded random unit-variance K/V rows for the rest (runner.appendRandomContextForBenchmark): decode cost
// depends on the number of rows, not their values, and on two cores a real 32,768-token prefill
// takes most of an hour per child. --llama-contexts limits llama.cpp to the lengths its prefill
// can reach in the time you have.
// Bytes read per decode token = weights (every tensor but the embedding; one row per token) + the
// KV rows the policy fetched (full: all N rows of K and V in every layer; sparse policies: the sum of
// the per-layer bytes from runner.lastStepStats(), averaged over the steps) + what the selection
// reads per sparse layer ("selection reads"): InfiniGen's partial keys (N · kvHeads · ⌊r·headDim⌋ · 2
// bytes), Quest's page bounds (⌈N / pageSize⌉ · kvHeads · headDim · 8), H2O's scores and live flags
// (N · kvHeads · 5). The bound is the measured read bandwidth (native measureReadBandwidth, probed before
// and after the runs, the higher reading per thread count) divided by that.
//
// llama.cpp (--llama) fills its context ONCE per fixture: one child prefills seeded random ids up to
// each N of --llama-contexts in turn and saves the sequence state at every N to a file
// (LlamaContextSequence.saveStateToFile) in a folder under os.tmpdir() (`--llama-state-dir DIR` keeps
// and reuses them: a re-run then prefills nothing); each timed child, per threads, loads the state of
// each N (loadStateFromFile) instead of prefilling. The files are as large as the KV cache (MHA
// Q8_0 fixture: 128 KiB per token, 4 GiB at 32,768); a length whose file would leave less than
// 2 GiB free on the folder's disk is skipped (said in the table); the folder is deleted at the end.
// Per-step breakdown (ms per decode step, main thread unless said): speculation = InfiniGen's side
// thread (q̃, scores, selection, reuse bookkeeping; it overlaps the graphs) or a comparison policy's
// native selection + H2O's accounting (main thread); wait = the main thread waiting for the
// speculation; attention = attention kernels (InfiniGen: without the wait; comparison policies:
// without their selection); dense = the ORT graphs (norms, projections, MLP, head); other = the rest
// (embedding, appends, JS). Bytes per token and the bound: see above.
//
// Children: `--child inspect|ours|llama-fill|llama`; each prints one line `RESULT {json}` on stdout.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SELF = fileURLToPath(import.meta.url);
const SEED = 20240611;
const CHILD_TIMEOUT_MS = 60 * 60 * 1000;

const { values: opts } = parseArgs({
  options: {
    family: { type: 'string', default: 'llama' },
    layers: { type: 'string' },
    window: { type: 'string' },
    'kv-heads': { type: 'string' },
    contexts: { type: 'string' },
    threads: { type: 'string', default: '1' },
    policies: { type: 'string' },
    cap: { type: 'string', default: '0.1' },
    llama: { type: 'boolean', default: false },
    steps: { type: 'string', default: '16' },
    type: { type: 'string', default: 'Q8_0' },
    dir: { type: 'string' },
    keep: { type: 'boolean', default: false },
    json: { type: 'string' },
    'bandwidth-mib': { type: 'string', default: '512' },
    fill: { type: 'string' },
    'llama-contexts': { type: 'string' },
    child: { type: 'string' },
    model: { type: 'string' },
    policy: { type: 'string' },
    vocab: { type: 'string' },
    bos: { type: 'string' },
    'cache-dir': { type: 'string' },
    'llama-state-dir': { type: 'string' },
    'state-dir': { type: 'string' },
    'bytes-per-token': { type: 'string' },
    offload: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});

function promptIds(n, vocab, bos) {
  const ids = [bos];
  let s = SEED >>> 0;
  while (ids.length < n) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    ids.push(s % vocab);
  }
  return ids;
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
function argmax(logits) {
  let best = 0;
  for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
  return best;
}
function positiveInt(text, name) {
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${text}`);
  return n;
}
const result = (obj) => process.stdout.write(`RESULT ${JSON.stringify(obj)}\n`);
const peakRss = () => process.resourceUsage().maxRSS * 1024;

// ─── children ────────────────────────────────────────────────────────────────────────────────

async function childInspect(path) {
  const { loadModel } = await import('../app/engine/model/load-model.ts');
  const model = await loadModel(path);
  try {
    let weightBytes = 0;
    let embedBytes = 0;
    for (const [name, t] of model.tensors) {
      const n = t.bytes().byteLength;
      if (name === 'token_embd.weight') embedBytes = n;
      else weightBytes += n;
    }
    const tied = !model.tensors.has('output.weight');
    const h = model.hyper;
    const bosMeta = model.tokenizer.kind === 'gguf' ? model.tokenizer.metadata.get('tokenizer.ggml.bos_token_id') : undefined;
    result({
      hyper: { dim: h.hiddenSize, layers: h.layers, heads: h.heads, kvHeads: h.kvHeads, headDim: h.headDim, ffn: h.ffnSize, vocab: h.vocabSize },
      weightBytesPerToken: weightBytes + (tied ? embedBytes : 0),
      bos: bosMeta === undefined ? 1 : Number(bosMeta),
    });
  } finally {
    model.close();
  }
}

/**
 * The KV memory the runner holds (allocated at load for its context): the window layers' rings, the
 * global layers' rows (runner.kvLayers(): slots · row bytes per layer) and the ring checkpoints
 * (runner.ringCheckpointBytes); `pool` is the whole pool buffer (runner.poolBytes, small headers included).
 */
function kvMemory(runner) {
  const layers = runner.kvLayers();
  const sum = (kind) => layers.filter((l) => l.kind === kind).reduce((acc, l) => acc + l.bytes, 0);
  const window = layers.find((l) => l.kind === 'window');
  return {
    windowLayers: layers.filter((l) => l.kind === 'window').length,
    globalLayers: layers.filter((l) => l.kind === 'global').length,
    ringSlots: window?.capacityTokens,
    globalSlots: layers.find((l) => l.kind === 'global')?.capacityTokens,
    ringBytes: sum('window'),
    globalBytes: sum('global'),
    checkpointBytes: runner.ringCheckpointBytes,
    checkpoints: runner.ringCheckpointPositions().length,
    poolBytes: runner.poolBytes,
    tokensHeld: layers.map((l) => l.tokens),
  };
}

const REAL_PREFIX = 512; // --fill random: tokens prefilled for real before the random rows

async function childOurs(path, policyName, threads, contexts, steps, cap, cacheDir, vocab, bos, fill, offload = false) {
  const { loadModel } = await import('../app/engine/model/load-model.ts');
  const { createModelRunner } = await import('../app/engine/forward/model-runner.ts');
  const { speculatorInlineThreads } = await import('../app/engine/forward/policy/infinigen-state.ts');
  // 'infinigen@side-thread' / 'infinigen@inline': InfiniGen with that speculation placement ('infinigen': auto)
  const [policy, speculation = 'auto'] = policyName.split('@');
  const specInline = policy === 'infinigen' && speculatorInlineThreads(speculation, threads) > 0;
  const maxN = contexts[contexts.length - 1];
  const ids = promptIds(maxN, vocab, bos);
  const model = await loadModel(path);
  const h = model.hyper;
  const runner = await createModelRunner(model, {
    threads,
    contextLength: maxN + steps + 8,
    kvType: 'fp16',
    prefillChunk: 128,
    policy,
    infinigen: { fetchCap: cap, cacheDir, speculation },
    sparse: { fetchCap: cap },
    ...(offload ? { offload: true } : {}),
  });
  const out = { engine: 'longhand', policy: offload ? `${policyName}+offload` : policyName, threads, speculation: policy === 'infinigen' ? (specInline ? 'inline' : 'side-thread') : undefined, rows: [] };
  let logits;
  for (const N of contexts) {
    const from = runner.position;
    const f0 = performance.now();
    if (N > from) {
      const realTo = fill === 'prefill' ? N : Math.min(N, Math.max(from, REAL_PREFIX));
      if (realTo > from) logits = await runner.prefill(ids.slice(from, realTo));
      // the next token still comes from the real prefix's logits
      if (N > runner.position) runner.appendRandomContextForBenchmark(N - runner.position, SEED + N);
    }
    const fillMs = performance.now() - f0;
    // offload: one untimed step fills the (empty) row buffer with what it attends
    let firstStep;
    if (offload) {
      const w0 = performance.now();
      logits = await runner.decode(argmax(logits));
      firstStep = { ms: performance.now() - w0, crossedBytes: runner.lastOffloadStep().crossedBytes };
    }
    const N0 = runner.position;
    runner.resetTimings();
    const stepMs = [];
    const stepIds = []; // the greedy id fed at each step (compared with llama.cpp's under --family gemma3)
    let fetched = 0;
    let stepsWithStats = 0;
    let crossed = 0;
    // InfiniGen per step, summed over the sparse layers: the speculation (q̃, scores, selection; on the
    // side thread, or inside begin() when inline) and reuse bookkeeping, the main thread's wait for
    // it, and the sparse attention
    const overlap = { speculationMs: 0, gatherMs: 0, waitMs: 0, sparseAttentionMs: 0 };
    const sp = runner.rowPolicy; // a comparison policy counts its selection time (selectMs); others have none
    const select0 = sp?.selectMs ?? 0;
    const a = performance.now();
    for (let i = 0; i < steps; i++) {
      const s = performance.now();
      const id = argmax(logits);
      stepIds.push(id);
      logits = await runner.decode(id);
      stepMs.push(performance.now() - s);
      if (offload) crossed += runner.lastOffloadStep().crossedBytes;
      const st = runner.lastStepStats();
      if (st) {
        fetched += st.layers.reduce((acc, l) => acc + l.bytes, 0);
        stepsWithStats++;
        for (const l of st.layers) {
          if (l.dense) continue;
          overlap.speculationMs += l.speculationMs;
          overlap.gatherMs += l.gatherMs;
          overlap.waitMs += l.waitMs;
          overlap.sparseAttentionMs += l.attentionMs;
        }
      }
    }
    const ms = performance.now() - a;
    const last = runner.lastStepStats();
    const rowBytesKV = h.kvHeads * h.headDim * 2 * 2; // K and V, fp16
    const ctx = N0 + steps / 2;
    const fetchedPerToken = stepsWithStats > 0 ? fetched / stepsWithStats : ctx * rowBytesKV * h.layers;
    // what the selection itself reads per sparse layer besides the rows: InfiniGen's partial keys,
    // Quest's page bounds (min and max, fp32, every page), H2O's accumulated scores (fp32) and live flags
    let selectionPerToken = 0;
    const sparseLayers = last ? last.layers.filter((l) => !l.dense).length : 0;
    if (policy === 'infinigen') {
      const p = Math.floor(0.3 * h.headDim); // default partialRatio
      selectionPerToken = sparseLayers * ctx * h.kvHeads * p * 2;
    } else if (policy === 'quest') {
      selectionPerToken = sparseLayers * Math.ceil(ctx / sp.settings.pageSize) * h.kvHeads * h.headDim * 4 * 2;
    } else if (policy === 'h2o') {
      selectionPerToken = sparseLayers * ctx * h.kvHeads * (4 + 1);
    }
    const t = runner.timings();
    const perCall = (x) => x / Math.max(1, t.calls);
    const selectMs = sp ? ((sp.selectMs ?? 0) - select0) / steps : 0;
    const spec = policy === 'infinigen' ? (stepsWithStats > 0 ? overlap.speculationMs / stepsWithStats : 0) : selectMs;
    const wait = policy === 'infinigen' && stepsWithStats > 0 ? overlap.waitMs / stepsWithStats : 0;
    const attention = perCall(t.attention) - (policy === 'infinigen' ? wait : selectMs);
    const denseMs = perCall(t.layerGraphs + t.headGraph);
    out.rows.push({
      // inline speculation runs inside begin(), outside the timed attention: taken out of "other"
      breakdown: { speculation: spec, speculationOnMainThread: policy !== 'infinigen' || specInline, wait, attention, dense: denseMs, other: perCall(t.total) - denseMs - perCall(t.attention) - (specInline && stepsWithStats > 0 ? (overlap.speculationMs + overlap.gatherMs) / stepsWithStats : 0), total: perCall(t.total) },
      N,
      startPosition: N0,
      fillTokens: N0 - from,
      fillTps: ((N0 - from) * 1000) / Math.max(1e-9, fillMs),
      tps: (steps * 1000) / ms,
      medianTps: 1000 / median(stepMs),
      stepMs,
      ids: stepIds,
      fetchRatio: last?.fetchRatio ?? 1,
      fetchedBytesPerToken: fetchedPerToken,
      selectionBytesPerToken: selectionPerToken,
      fill: N0 - from > 0 ? (fill === 'prefill' ? 'prefill' : `prefill ${Math.min(N0, REAL_PREFIX) - Math.min(from, REAL_PREFIX)} + random ${Math.max(0, N0 - Math.max(from, REAL_PREFIX))}`) : 'none',
      overlap: stepsWithStats > 0 ? Object.fromEntries(Object.entries(overlap).map(([k, v]) => [k, v / stepsWithStats])) : undefined,
      perStep: { layerGraphs: t.layerGraphs / t.calls, headGraph: t.headGraph / t.calls, append: t.append / t.calls, attention: t.attention / t.calls, other: t.other / t.calls, total: t.total / t.calls },
      skewSource: runner.skewSource,
      ...(offload ? { crossedBytesPerToken: crossed / steps, firstStep, rowBufferBytes: runner.rowBufferBytes } : {}),
      kv: kvMemory(runner),
    });
  }
  await runner.dispose();
  model.close();
  out.peakRssBytes = peakRss();
  result(out);
}

/** The greedy next token of the last of `tokens` evaluated on `sequence` (llama.cpp). */
async function llamaEvaluate(sequence, tokens) {
  const contextShift = { strategy: () => { throw new Error('llama.cpp: context shift requested'); } };
  const greedy = { generateNext: { token: true, options: { temperature: 0 } } };
  const items = tokens.map((t, i) => (i === tokens.length - 1 ? [t, greedy] : t));
  const res = await sequence.controlledEvaluate(items, { contextShift });
  const next = res[tokens.length - 1]?.next.token;
  if (next === undefined || next === null) throw new Error('llama.cpp returned no next token');
  return next;
}

/**
 * llama.cpp's KV caches as it logs them when the context is made ("llama_kv_cache: size = X MiB
 * (C cells, L layers, ...), K (f16): ..., V (f16): ..."): with sliding-window layers there are two,
 * the non-SWA one (global layers, context-size cells) and the SWA one (window layers,
 * pad256(n_swa + n_ubatch) cells unless swa_full: src/llama-kv-cache-iswa.cpp).
 */
const KV_LOG = /llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers/;

async function llamaOpen(path, threads, contextSize) {
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const kvCaches = [];
  // info level for the KV cache lines only; everything at warn and above still goes to stderr
  const logger = (level, message) => {
    const m = KV_LOG.exec(message);
    if (m) kvCaches.push({ bytes: Number(m[1]) * 2 ** 20, cells: Number(m[2]), layers: Number(m[3]) });
    else if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) process.stderr.write(`llama.cpp: ${message}\n`);
  };
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.info, logger });
  const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
  const context = await model.createContext({ contextSize, threads, batchSize: 512, flashAttention: false });
  if (context.contextSize < contextSize) throw new Error(`llama.cpp made a context of ${context.contextSize}, asked ${contextSize}`);
  const close = async () => {
    await context.dispose();
    await model.dispose();
    await llama.dispose();
  };
  return { context, sequence: context.getSequence(), close, kvCaches };
}

const MIN_FREE_BYTES = 2 * 2 ** 30;

/**
 * Prefills seeded random ids up to each N in turn, saving the sequence state at every N into
 * stateDir/N.state (+ N.json: the greedy next token and the prefill time); an existing pair is
 * reused (the prefill to the next N then starts from it). A state that would leave less than 2 GiB
 * free on the disk is not written (the row says so) and no longer N is filled.
 */
async function childLlamaFill(path, threads, contexts, steps, vocab, bos, stateDir, bytesPerToken) {
  const maxN = contexts[contexts.length - 1];
  const ids = promptIds(maxN, vocab, bos);
  const { sequence, close } = await llamaOpen(path, threads, maxN + steps + 64);
  const out = { engine: 'llama.cpp', fill: [] };
  let reused; // the longest N whose saved state is reused
  try {
    for (const N of contexts) {
      const file = join(stateDir, `${N}.state`);
      const meta = join(stateDir, `${N}.json`);
      if (existsSync(file) && existsSync(meta)) {
        out.fill.push({ N, ...JSON.parse(readFileSync(meta, 'utf8')), reused: true });
        reused = { N, file };
        continue;
      }
      if (reused && sequence.nextTokenIndex < reused.N) {
        await sequence.clearHistory();
        await sequence.loadStateFromFile(reused.file, { acceptRisk: true });
      }
      const fs = statfsSync(stateDir);
      const free = fs.bavail * fs.bsize;
      if (free - N * bytesPerToken < MIN_FREE_BYTES) {
        out.fill.push({ N, skipped: `a ${(N * bytesPerToken / 2 ** 30).toFixed(1)} GiB state would leave under 2 GiB free on ${stateDir}` });
        break;
      }
      // continue from the longest saved N below this one (the sequence may hold it already)
      const from = sequence.nextTokenIndex;
      const f0 = performance.now();
      const next = await llamaEvaluate(sequence, ids.slice(from, N));
      const fillMs = performance.now() - f0;
      const s0 = performance.now();
      const { fileSize } = await sequence.saveStateToFile(file);
      const info = { next, fillMs, fillTokens: N - from, saveMs: performance.now() - s0, fileSize };
      writeFileSync(meta, JSON.stringify(info));
      out.fill.push({ N, ...info });
    }
  } finally {
    await close();
  }
  out.peakRssBytes = peakRss();
  result(out);
}

async function childLlama(path, threads, contexts, steps, stateDir) {
  const maxN = contexts[contexts.length - 1];
  const { sequence, close } = await llamaOpen(path, threads, maxN + steps + 64);
  const out = { engine: 'llama.cpp', policy: 'llama.cpp (full)', threads, rows: [] };
  try {
    for (const N of contexts) {
      const file = join(stateDir, `${N}.state`);
      const meta = join(stateDir, `${N}.json`);
      if (!existsSync(file) || !existsSync(meta)) continue; // skipped by the fill (disk)
      let tok = JSON.parse(readFileSync(meta, 'utf8')).next;
      await sequence.clearHistory();
      const l0 = performance.now();
      await sequence.loadStateFromFile(file, { acceptRisk: true });
      const loadMs = performance.now() - l0;
      const N0 = sequence.nextTokenIndex;
      if (N0 !== N) throw new Error(`llama.cpp: the state of ${N} tokens loaded as ${N0}`);
      const stepMs = [];
      const a = performance.now();
      for (let i = 0; i < steps; i++) {
        const s = performance.now();
        tok = await llamaEvaluate(sequence, [tok]);
        stepMs.push(performance.now() - s);
      }
      const ms = performance.now() - a;
      out.rows.push({ N, startPosition: N0, fillTokens: 0, loadMs, tps: (steps * 1000) / ms, medianTps: 1000 / median(stepMs), stepMs, fetchRatio: 1 });
    }
  } finally {
    await close();
  }
  out.peakRssBytes = peakRss();
  result(out);
}

/**
 * --family gemma3: llama.cpp prefills seeded random ids up to each N in turn (timed: the prefill
 * figures), then decodes `steps` greedy steps; its KV caches from its log, its state size after each N.
 */
async function childLlamaPrefill(path, threads, contexts, steps, vocab, bos) {
  const maxN = contexts[contexts.length - 1];
  const ids = promptIds(maxN, vocab, bos);
  const { context, sequence, close, kvCaches } = await llamaOpen(path, threads, maxN + steps + 64);
  const out = { engine: 'llama.cpp', policy: 'llama.cpp (full)', threads, contextSize: context.contextSize, kvCaches, rows: [] };
  try {
    for (const N of contexts) {
      const from = sequence.nextTokenIndex;
      const f0 = performance.now();
      let tok = await llamaEvaluate(sequence, ids.slice(from, N));
      const fillMs = performance.now() - f0;
      const N0 = sequence.nextTokenIndex;
      if (N0 !== N) throw new Error(`llama.cpp: ${N0} tokens after the fill to ${N}`);
      const stepMs = [];
      const stepIds = [];
      const a = performance.now();
      for (let i = 0; i < steps; i++) {
        const s = performance.now();
        stepIds.push(tok);
        tok = await llamaEvaluate(sequence, [tok]);
        stepMs.push(performance.now() - s);
      }
      const ms = performance.now() - a;
      out.rows.push({ N, startPosition: N0, fillTokens: N0 - from, fillTps: ((N0 - from) * 1000) / fillMs, tps: (steps * 1000) / ms, medianTps: 1000 / median(stepMs), stepMs, ids: stepIds, fetchRatio: 1, stateSize: context.stateSize });
    }
  } finally {
    await close();
  }
  out.peakRssBytes = peakRss();
  result(out);
}

// ─── parent ──────────────────────────────────────────────────────────────────────────────────

function runChild(args, { tsx = true } = {}) {
  const nodeArgs = [...(tsx ? ['--import', 'tsx'] : []), SELF, '--child', ...args];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, nodeArgs, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
      if (code === 0 && line) resolve(JSON.parse(line.slice(7)));
      else resolve({ error: `exit ${code ?? signal}: ${(stderr.trim().split('\n').slice(-6).join(' | ') || stdout.trim().slice(-400)).slice(0, 1200)}` });
    });
  });
}

function diskFree(dir) {
  try {
    const f = statfsSync(dir);
    return `${((f.bavail * f.bsize) / 2 ** 30).toFixed(1)} GiB free there`;
  } catch {
    return 'free space unknown';
  }
}
const fmt = (x, d = 1) => (x === undefined || x === null || !Number.isFinite(x) ? '—' : x.toFixed(d));
const mib = (b) => (Number.isFinite(b) ? `${(b / 2 ** 20).toFixed(0)}` : '—');

async function parent() {
  if (opts.help) {
    console.log('usage: node --import tsx bench/long-context.mjs [--family llama|gemma3 (gemma3: [--layers 12] [--window 1024], contexts 8192,16384,32768, policies full, by prefill, with llama.cpp)] [--kv-heads 32|4] [--contexts 2048,8192] [--threads 1] [--policies full,infinigen,streaming,h2o,quest] (infinigen@side-thread / infinigen@inline: that speculation placement) [--cap 0.1] [--llama] [--steps 16] [--type Q8_0] [--dir DIR] [--keep] [--json FILE]');
    return;
  }
  const gemma = opts.family === 'gemma3';
  if (!gemma && opts.family !== 'llama') throw new Error(`--family must be llama or gemma3, got ${opts.family}`);
  if (gemma) return parentGemma();
  if (opts.layers !== undefined || opts.window !== undefined) throw new Error('--layers and --window are for --family gemma3');
  const kvHeads = positiveInt(opts['kv-heads'] ?? '32', '--kv-heads');
  const contexts = (opts.contexts ?? '2048,8192').split(',').map((s) => positiveInt(s, '--contexts')).sort((a, b) => a - b);
  const threadList = opts.threads.split(',').map((s) => positiveInt(s, '--threads'));
  const policies = (opts.policies ?? 'full,infinigen,streaming,h2o,quest').split(',').map((s) => s.trim()).filter(Boolean);
  const cap = Number(opts.cap);
  if (!(cap > 0 && cap <= 1)) throw new Error(`--cap must be in (0, 1], got ${opts.cap}`);
  const steps = positiveInt(opts.steps, '--steps');
  const bwMib = positiveInt(opts['bandwidth-mib'], '--bandwidth-mib');
  const sizes = { dim: 2048, layers: 16, heads: 32, kvHeads, ffn: 5632, vocab: 32000 };
  if (sizes.heads % kvHeads !== 0) throw new Error(`--kv-heads ${kvHeads} must divide 32`);
  const maxN = contexts[contexts.length - 1];
  opts.fill ??= 'random';
  if (opts.fill !== 'random' && opts.fill !== 'prefill') throw new Error(`--fill must be random or prefill, got ${opts.fill}`);
  const llamaContexts = opts['llama-contexts'] ? opts['llama-contexts'].split(',').map((s) => positiveInt(s, '--llama-contexts')).sort((a, b) => a - b) : contexts;

  const native = await import('../native/index.js');
  const started = new Date();
  const loadBefore = loadavg();
  console.log(`long-context bench ${started.toISOString()}: ${opts.type}, shape ${JSON.stringify(sizes)}, contexts ${contexts.join(',')}, threads ${threadList.join(',')}, policies ${policies.join(',')}${opts.llama ? ' + llama.cpp' : ''}, cap ${cap}, ${steps} steps; load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);
  const bwThreads = [...new Set([1, ...threadList])].sort((a, b) => a - b);
  // Probed before and after the runs, the bound taken from the higher reading per thread count: one
  // probe alone has read half the bandwidth when another job took the machine for its few seconds
  // (2 threads 30.1 GB/s against 56-60 in the runs around it), which doubled every share of bound.
  const probeBandwidth = () => Object.fromEntries(bwThreads.map((t) => [t, native.measureReadBandwidth(bwMib * 2 ** 20, 5, t)]));
  const bwBefore = probeBandwidth();
  console.log(`read bandwidth before the runs (GB/s): ${bwThreads.map((t) => `${t}t ${fmt(bwBefore[t], 2)}`).join(', ')}`);
  const bw = { ...bwBefore };

  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'longhand-long-'));
  const cacheDir = mkdtempSync(join(tmpdir(), 'longhand-long-skew-'));
  const keepStates = opts['llama-state-dir'] !== undefined;
  const llamaStateDir = keepStates ? opts['llama-state-dir'] : mkdtempSync(join(tmpdir(), 'longhand-long-llama-'));
  if (keepStates) mkdirSync(llamaStateDir, { recursive: true });
  const report = { started: started.toISOString(), sizes, contexts, cap, steps, bandwidth: bw, bandwidthBefore: bwBefore, runs: [] };
  try {
    const path = join(dir, `long-${opts.type}-kv${kvHeads}-ctx${maxN + steps + 64}.gguf`);
    const w0 = performance.now();
    const write = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'test/fixtures/cli.ts'), 'gguf', path, '--type', opts.type, '--dim', `${sizes.dim}`, '--layers', `${sizes.layers}`, '--heads', `${sizes.heads}`, '--kv-heads', `${kvHeads}`, '--ffn', `${sizes.ffn}`, '--vocab', `${sizes.vocab}`, '--context', `${Math.max(4096, maxN + steps + 64)}`], { cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 24 });
    if (write.status !== 0) throw new Error(`writing the fixture failed: ${write.stderr}`);
    console.log(`wrote ${path} in ${((performance.now() - w0) / 1000).toFixed(0)} s`);
    const info = await runChild(['inspect', '--model', path]);
    if (info.error) throw new Error(`inspect: ${info.error}`);
    report.info = info;
    if (opts.llama) {
      // one prefill per fixture: the states of every N, loaded by each timed llama.cpp child
      const hh = info.hyper;
      const stateBytesPerToken = hh.layers * hh.kvHeads * hh.headDim * 2 * 2; // f16 K and V
      const f0 = performance.now();
      const fill = await runChild(['llama-fill', '--model', path, '--threads', `${Math.max(...threadList)}`, '--contexts', llamaContexts.join(','), '--steps', `${steps}`, '--vocab', `${hh.vocab}`, '--bos', `${info.bos}`, '--state-dir', llamaStateDir, '--bytes-per-token', `${stateBytesPerToken}`], { tsx: false });
      report.llamaFill = fill;
      console.log(`llama.cpp states (${llamaStateDir}, ${((performance.now() - f0) / 1000).toFixed(0)} s): ${fill.error ?? fill.fill.map((x) => (x.skipped ? `N=${x.N} skipped: ${x.skipped}` : `N=${x.N} ${x.reused ? 'reused' : `prefilled ${x.fillTokens} in ${(x.fillMs / 1000).toFixed(0)} s`}, ${mib(x.fileSize)} MiB`)).join('; ')}; ${diskFree(llamaStateDir)}`);
    }
    for (const threads of threadList) {
      const common = ['--model', path, '--threads', `${threads}`, '--contexts', contexts.join(','), '--steps', `${steps}`, '--vocab', `${info.hyper.vocab}`, '--bos', `${info.bos}`];
      for (const policy of policies) {
        const r = await runChild(['ours', ...common, '--policy', policy, '--cap', `${cap}`, '--cache-dir', cacheDir, '--fill', opts.fill]);
        if (r.error) r.policy = policy;
        r.threads = threads;
        console.log(`${policy} ${threads}t: ${r.error ?? r.rows.map((x) => `N=${x.N} ${fmt(x.tps, 2)} tok/s`).join(', ')}`);
        report.runs.push(r);
        if (opts.offload && (policy === 'full' || policy.startsWith('infinigen'))) {
          const o = await runChild(['ours', ...common, '--policy', policy, '--cap', `${cap}`, '--cache-dir', cacheDir, '--fill', opts.fill, '--offload']);
          if (o.error) o.policy = `${policy}+offload`;
          o.threads = threads;
          console.log(`${policy}+offload ${threads}t: ${o.error ?? o.rows.map((x) => `N=${x.N} ${fmt(x.tps, 2)} tok/s`).join(', ')}`);
          report.runs.push(o);
        }
      }
      if (opts.llama) {
        const llamaArgs = common.map((a, i) => (common[i - 1] === '--contexts' ? llamaContexts.join(',') : a));
        const r = await runChild(['llama', ...llamaArgs, '--state-dir', llamaStateDir], { tsx: false });
        if (r.error) r.policy = 'llama.cpp (full)';
        r.threads = threads;
        console.log(`llama.cpp ${threads}t: ${r.error ?? r.rows.map((x) => `N=${x.N} ${fmt(x.tps, 2)} tok/s`).join(', ')}`);
        report.runs.push(r);
      }
    }
  } finally {
    rmSync(cacheDir, { recursive: true, force: true });
    if (!keepStates) rmSync(llamaStateDir, { recursive: true, force: true });
    else console.log(`kept the llama.cpp states in ${llamaStateDir}`);
    if (!opts.keep && opts.dir === undefined) rmSync(dir, { recursive: true, force: true });
    else console.log(`kept the fixture in ${dir}`);
  }

  const bwAfter = probeBandwidth();
  report.bandwidthAfter = bwAfter;
  for (const t of bwThreads) bw[t] = Math.max(bwBefore[t], bwAfter[t]);
  const bwLine = `read bandwidth (GB/s, before / after the runs; the bound uses the higher): ${bwThreads.map((t) => `${t}t ${fmt(bwBefore[t], 2)} / ${fmt(bwAfter[t], 2)}`).join(', ')}`;
  const h = report.info.hyper;
  const rowKV = h.kvHeads * h.headDim * 2 * 2;
  const lines = [];
  lines.push(`| policy | threads | N | decode tok/s | median-step tok/s | vs llama.cpp | fetch ratio | weights MiB | KV fetched MiB | selection reads MiB | total MiB/token | bound tok/s | % of bound | speculation ms | wait ms | attention ms | dense ms | other ms | step ms | peak RSS MiB |`);
  lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  const llamaTps = (threads, N) => report.runs.find((r) => r.engine === 'llama.cpp' && r.threads === threads && !r.error)?.rows.find((x) => x.N === N)?.tps;
  for (const r of report.runs) {
    if (r.error) {
      lines.push(`| ${r.policy} | ${r.threads} | — | **failed**: ${r.error.replaceAll('|', '/')} | | | | | | | | | | | | | | | | |`);
      continue;
    }
    for (const x of r.rows) {
      const ctx = x.startPosition + steps / 2;
      const kv = x.fetchedBytesPerToken ?? ctx * rowKV * h.layers; // llama.cpp: full attention
      const partial = x.selectionBytesPerToken ?? x.partialBytesPerToken ?? 0; // older reports: InfiniGen's partial keys only
      const total = report.info.weightBytesPerToken + kv + partial;
      const bound = (bw[Math.max(...bwThreads.filter((t) => t <= r.threads))] * 1e9) / total;
      x.bytesPerToken = total;
      x.bound = bound;
      const b = x.breakdown;
      const vs = r.engine === 'llama.cpp' ? undefined : llamaTps(r.threads, x.N);
      const specCell = b ? `${fmt(b.speculation)}${b.speculationOnMainThread ? ' (main)' : ''}` : '—';
      lines.push(`| ${r.policy} | ${r.threads} | ${x.N} | ${fmt(x.tps, 2)} | ${fmt(x.medianTps, 2)} | ${vs ? `${fmt(x.tps / vs, 2)}x` : '—'} | ${fmt(x.fetchRatio, 3)} | ${mib(report.info.weightBytesPerToken)} | ${mib(kv)} | ${mib(partial)} | ${mib(total)} | ${fmt(bound, 2)} | ${fmt((100 * x.tps) / bound, 0)}% | ${specCell} | ${fmt(b?.wait)} | ${fmt(b?.attention)} | ${fmt(b?.dense)} | ${fmt(b?.other)} | ${fmt(b?.total ?? 1000 / x.tps)} | ${mib(r.peakRssBytes)} |`);
    }
  }
  if (opts.offload) {
    // offload beside in place (the same fixture, threads and N)
    const off = ['| policy | threads | N | in place tok/s | offload tok/s | offload / in place | crossed KiB/token (timed steps) | first step after the fill: ms, MiB crossed | row buffer MiB |', '|---|---|---|---|---|---|---|---|---|'];
    for (const r of report.runs) {
      if (r.error || !String(r.policy).endsWith('+offload')) continue;
      const base = report.runs.find((b) => !b.error && b.policy === r.policy.replace('+offload', '') && b.threads === r.threads);
      for (const x of r.rows) {
        const b = base?.rows.find((y) => y.N === x.N);
        off.push(`| ${r.policy.replace('+offload', '')} | ${r.threads} | ${x.N} | ${b ? fmt(b.tps, 2) : '—'} | ${fmt(x.tps, 2)} | ${b ? `${fmt(x.tps / b.tps, 2)}x` : '—'} | ${fmt(x.crossedBytesPerToken / 1024, 1)} | ${fmt(x.firstStep?.ms, 0)}, ${mib(x.firstStep?.crossedBytes)} | ${mib(x.rowBufferBytes)} |`);
      }
    }
    console.log('');
    console.log('### offload vs in place (CPU provider)');
    console.log('');
    console.log(off.join('\n'));
  }
  const loadAfter = loadavg();
  console.log('');
  console.log(`### long context — ${opts.type}, dim ${h.dim}, ${h.layers} layers, ${h.heads} heads / ${h.kvHeads} KV heads; fetch cap ${cap}; ${steps} decode steps per N`);
  console.log('');
  console.log(lines.join('\n'));
  console.log('');
  for (const f of report.llamaFill?.fill ?? []) if (f.skipped) console.log(`llama.cpp N=${f.N}: not run (${f.skipped})`);
  console.log(`Filling: llama.cpp prefilled seeded random ids once per fixture up to each N, saved the sequence state and loaded it in every timed run${opts.fill === 'random' ? `; Longhand prefilled the first ${REAL_PREFIX} for real and appended seeded random K/V rows for the rest (decode cost depends on the row count, not the values)` : '; so did Longhand'}. InfiniGen's speculation runs on a native side thread while the next layer's dense stage runs ("wait": the main thread waiting for it, the part not hidden) when the machine has a core beyond the run's threads, else inline, split over the run's threads (its time marked "(main)"); infinigen@side-thread / infinigen@inline force one.`);
  console.log(`Note: the fixture's weights are random, so attention is diffuse and no policy finds a few dominant tokens: the fetch cap (${cap}) decides how many rows the sparse policies fetch, not the scores. Numbers on a real model differ.`);
  console.log(bwLine);
  for (const t of bwThreads.filter((t) => t > 1)) {
    if (bw[t] < bw[1]) console.log(`Warning: the ${t}-thread probe read less than the 1-thread one (${fmt(bw[t], 2)} < ${fmt(bw[1], 2)} GB/s): something else had the cores, so the ${t}-thread shares of bound read high.`);
  }
  console.log(`load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${loadAfter.map((x) => x.toFixed(2)).join(' ')}; ${((Date.now() - started.getTime()) / 1000).toFixed(0)} s in all`);
  if (opts.json) {
    writeFileSync(opts.json, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`wrote ${opts.json}`);
  }
}

// ─── --family gemma3 ─────────────────────────────────────────────────────────────────────────

/**
 * Gemma-3-like shape for long contexts: Gemma 3's real layer pattern (5 window layers : 1 global,
 * window 1024 as the 4B's, q/k norms, sandwich norms, GeGLU, per-layer RoPE, tied 262,144 vocabulary)
 * at a width where a real prefill of 32,768 tokens takes minutes on 2 cores, not an hour.
 */
const GEMMA_LONG = { dim: 512, layers: 12, heads: 4, kvHeads: 2, headDim: 128, ffn: 2048, window: 1024 };

/** "7/16" ids equal from the start (with the first difference), or — when either is missing. */
function agreement(a, b) {
  if (!Array.isArray(a) || !Array.isArray(b)) return '—';
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i === n ? `${i}/${n}` : `${i}/${n} (step ${i}: ${a[i]} vs ${b[i]})`;
}

async function parentGemma() {
  if (opts['kv-heads'] !== undefined || opts.offload) throw new Error('--family gemma3: --kv-heads and --offload are for the llama family');
  if (opts.fill !== undefined && opts.fill !== 'prefill') throw new Error('--family gemma3 fills by prefill only (the prefill speed at each N is what its table reports)');
  const shape = { ...GEMMA_LONG, layers: positiveInt(opts.layers ?? `${GEMMA_LONG.layers}`, '--layers'), window: positiveInt(opts.window ?? `${GEMMA_LONG.window}`, '--window') };
  const contexts = (opts.contexts ?? '8192,16384,32768').split(',').map((s) => positiveInt(s, '--contexts')).sort((a, b) => a - b);
  const threadList = opts.threads.split(',').map((s) => positiveInt(s, '--threads'));
  const policies = (opts.policies ?? 'full').split(',').map((s) => s.trim()).filter(Boolean);
  const cap = Number(opts.cap);
  if (!(cap > 0 && cap <= 1)) throw new Error(`--cap must be in (0, 1], got ${opts.cap}`);
  const steps = positiveInt(opts.steps, '--steps');
  const maxN = contexts[contexts.length - 1];
  const started = new Date();
  const loadBefore = loadavg();
  console.log(`long-context bench (gemma3) ${started.toISOString()}: ${opts.type}, shape ${JSON.stringify(shape)}, contexts ${contexts.join(',')}, threads ${threadList.join(',')}, policies ${policies.join(',')} + llama.cpp, ${steps} steps; load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'longhand-long-gemma-'));
  const cacheDir = mkdtempSync(join(tmpdir(), 'longhand-long-skew-'));
  const report = { started: started.toISOString(), family: 'gemma3', shape, contexts, cap, steps, runs: [] };
  try {
    const path = join(dir, `long-gemma3-${opts.type}-d${shape.dim}-L${shape.layers}-w${shape.window}.gguf`);
    const w0 = performance.now();
    const args = ['gemma', path, '--preset', 'gemma3-4b', '--type', opts.type, '--dim', `${shape.dim}`, '--layers', `${shape.layers}`, '--heads', `${shape.heads}`, '--kv-heads', `${shape.kvHeads}`, '--head-dim', `${shape.headDim}`, '--ffn', `${shape.ffn}`, '--window', `${shape.window}`, '--context', `${Math.max(32768, maxN + steps + 64)}`];
    const write = opts.dir !== undefined && existsSync(path) ? { status: 0, reused: true } : spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'test/fixtures/cli.ts'), ...args], { cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 24 });
    if (write.status !== 0) throw new Error(`writing the fixture failed: ${write.stderr}`);
    console.log(write.reused ? `reusing ${path}` : `wrote ${path} in ${((performance.now() - w0) / 1000).toFixed(0)} s`);
    const info = await runChild(['inspect', '--model', path]);
    if (info.error) throw new Error(`inspect: ${info.error}`);
    report.info = info;
    for (const threads of threadList) {
      const common = ['--model', path, '--threads', `${threads}`, '--contexts', contexts.join(','), '--steps', `${steps}`, '--vocab', `${info.hyper.vocab}`, '--bos', `${info.bos}`];
      for (const policy of policies) {
        const r = await runChild(['ours', ...common, '--policy', policy, '--cap', `${cap}`, '--cache-dir', cacheDir, '--fill', 'prefill']);
        if (r.error) r.policy = policy;
        r.threads = threads;
        console.log(`${policy} ${threads}t: ${r.error ?? r.rows.map((x) => `N=${x.N} prefill ${fmt(x.fillTps)} tok/s, decode ${fmt(x.tps, 2)} tok/s`).join('; ')}`);
        report.runs.push(r);
      }
      const l = await runChild(['llama-prefill', ...common], { tsx: false });
      if (l.error) l.policy = 'llama.cpp (full)';
      l.threads = threads;
      console.log(`llama.cpp ${threads}t: ${l.error ?? l.rows.map((x) => `N=${x.N} prefill ${fmt(x.fillTps)} tok/s, decode ${fmt(x.tps, 2)} tok/s`).join('; ')}`);
      report.runs.push(l);
    }
  } finally {
    rmSync(cacheDir, { recursive: true, force: true });
    if (!opts.keep && opts.dir === undefined) rmSync(dir, { recursive: true, force: true });
    else console.log(`kept the fixture in ${dir}`);
  }

  const h = report.info.hyper;
  const llamaRun = (threads) => report.runs.find((r) => r.engine === 'llama.cpp' && r.threads === threads && !r.error);
  const lines = [];
  lines.push('| engine / policy | threads | N | prefill: tokens | prefill tok/s | vs llama.cpp | decode tok/s | median-step tok/s | vs llama.cpp (median) | greedy ids = llama.cpp | peak RSS MiB |');
  lines.push('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of report.runs) {
    if (r.error) {
      lines.push(`| ${r.policy} | ${r.threads} | — | **failed**: ${r.error.replaceAll('|', '/')} | | | | | | | |`);
      continue;
    }
    const ref = r.engine === 'llama.cpp' ? undefined : llamaRun(r.threads);
    for (const x of r.rows) {
      const y = ref?.rows.find((z) => z.N === x.N);
      lines.push(`| ${r.engine === 'llama.cpp' ? 'llama.cpp' : `Longhand ${r.policy}`} | ${r.threads} | ${x.N} | ${x.fillTokens} | ${fmt(x.fillTps)} | ${y ? `${fmt(x.fillTps / y.fillTps, 2)}x` : '—'} | ${fmt(x.tps, 2)} | ${fmt(x.medianTps, 2)} | ${y ? `${fmt(x.medianTps / y.medianTps, 2)}x` : '—'} | ${y ? agreement(x.ids, y.ids) : '—'} | ${mib(r.peakRssBytes)} |`);
    }
  }
  // KV memory, both allocated when the context is made (for the largest N + steps)
  const rowBytes = h.kvHeads * h.headDim * 2 * 2; // fp16 K and V, one token, one layer
  const mem = [];
  mem.push('| engine | what | layers | slots (cells) per layer | MiB |');
  mem.push('|---|---|---|---|---|');
  // the first policy's pool (--policies full,...: full's; InfiniGen's adds its partial key rows)
  const ours = report.runs.find((r) => r.engine === 'longhand' && !r.error);
  const kv = ours?.rows[ours.rows.length - 1]?.kv;
  let ourTotal;
  if (kv) {
    ourTotal = kv.ringBytes + kv.globalBytes + kv.checkpointBytes;
    mem.push(`| Longhand | window layers' rings | ${kv.windowLayers} | ${kv.ringSlots ?? '—'} | ${fmt(kv.ringBytes / 2 ** 20, 2)} |`);
    mem.push(`| Longhand | global layers' rows | ${kv.globalLayers} | ${kv.globalSlots ?? '—'} | ${fmt(kv.globalBytes / 2 ** 20, 2)} |`);
    mem.push(`| Longhand | ring checkpoints (${kv.checkpoints} held after the last N) | — | — | ${fmt(kv.checkpointBytes / 2 ** 20, 2)} |`);
    mem.push(`| Longhand | **KV total** (policy ${ours.policy}: rings + global rows + checkpoints; whole pool buffer ${fmt(kv.poolBytes / 2 ** 20, 2)} MiB) | ${h.layers} | — | **${fmt(ourTotal / 2 ** 20, 2)}** |`);
  }
  const lr = report.runs.find((r) => r.engine === 'llama.cpp' && !r.error);
  let llamaTotal;
  if (lr) {
    const caches = [...lr.kvCaches].sort((a, b) => b.cells - a.cells);
    llamaTotal = caches.reduce((acc, c) => acc + c.bytes, 0);
    caches.forEach((c, i) => mem.push(`| llama.cpp | ${caches.length > 1 ? (i === 0 ? 'non-SWA cache (global layers)' : 'SWA cache (window layers)') : 'KV cache'} | ${c.layers} | ${c.cells} | ${fmt(c.bytes / 2 ** 20, 2)} |`));
    mem.push(`| llama.cpp | **KV total** (context ${lr.contextSize}; state size after each N: ${lr.rows.map((x) => `${x.N}: ${mib(x.stateSize)} MiB`).join(', ')}) | ${caches.reduce((acc, c) => acc + c.layers, 0)} | — | **${fmt(llamaTotal / 2 ** 20, 2)}** |`);
    if (caches.length === 0) mem.push('| llama.cpp | (no KV cache line in its log) | | | |');
  }
  const context = lr?.contextSize ?? maxN + steps + 64;
  mem.push(`| either | every layer full (no rings; llama.cpp --swa-full) at ${context} tokens | ${h.layers} | ${context} | ${fmt((h.layers * context * rowBytes) / 2 ** 20, 2)} |`);
  const loadAfter = loadavg();
  console.log('');
  console.log(`### long context, Gemma-3-like — ${opts.type}, dim ${h.dim}, ${h.layers} layers (5 window : 1 global, window ${shape.window}), ${h.heads} heads / ${h.kvHeads} KV heads, head_dim ${h.headDim}, ffn ${h.ffn}, vocab ${h.vocab}; ${steps} decode steps per N`);
  console.log('');
  console.log(lines.join('\n'));
  console.log('');
  console.log('KV memory (allocated when the context is made, for the largest N + the steps):');
  console.log('');
  console.log(mem.join('\n'));
  console.log('');
  if (ourTotal !== undefined && llamaTotal) console.log(`Longhand's KV / llama.cpp's: ${fmt(ourTotal / llamaTotal, 3)}x`);
  console.log(`How: both engines prefill the same seeded random ids to each N in turn (the prefill column: the tokens from the previous N + steps up to this N), then decode ${steps} greedy steps, each feeding its own argmax (ids compared from the start of each N's steps). Longhand: createModelRunner(context ${maxN + steps + 8}, fp16 KV, prefill chunk 128); its KV figures from runner.kvLayers() (slots · bytes per row per layer, by kind) and runner.ringCheckpointBytes. llama.cpp: node-llama-cpp, context ${context}, batch 512, no flash attention, f16 KV, swaFullCache false (its default); its KV figures are the "llama_kv_cache: size = … MiB (… cells, … layers …)" lines llama.cpp logs when the context is made (captured through node-llama-cpp's logger): the non-SWA cache holds the context's cells for the global layers, the SWA cache pad256(window + n_ubatch) cells for the window layers (src/llama-kv-cache-iswa.cpp); "state size" is LlamaContext.stateSize (llama_state_get_size: the serialized state, the cells in use plus logits).`);
  console.log(`load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${loadAfter.map((x) => x.toFixed(2)).join(' ')}; ${((Date.now() - started.getTime()) / 1000).toFixed(0)} s in all`);
  if (opts.json) {
    writeFileSync(opts.json, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`wrote ${opts.json}`);
  }
}

async function child() {
  const path = opts.model;
  if (!path) throw new Error('--model is required in child mode');
  if (opts.child === 'inspect') return childInspect(path);
  const threads = positiveInt(opts.threads, '--threads');
  const contexts = opts.contexts.split(',').map((s) => positiveInt(s, '--contexts')).sort((a, b) => a - b);
  const steps = positiveInt(opts.steps, '--steps');
  const vocab = positiveInt(opts.vocab, '--vocab');
  const bos = Number(opts.bos);
  if (opts.child === 'ours') return childOurs(path, opts.policy, threads, contexts, steps, Number(opts.cap), opts['cache-dir'], vocab, bos, opts.fill, opts.offload);
  if (opts.child === 'llama-fill') return childLlamaFill(path, threads, contexts, steps, vocab, bos, opts['state-dir'], positiveInt(opts['bytes-per-token'], '--bytes-per-token'));
  if (opts.child === 'llama') return childLlama(path, threads, contexts, steps, opts['state-dir']);
  if (opts.child === 'llama-prefill') return childLlamaPrefill(path, threads, contexts, steps, vocab, bos);
  throw new Error(`unknown child ${opts.child}`);
}

try {
  await (opts.child ? child() : parent());
} catch (error) {
  console.error(`long-context: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
}
