// Dense decoding benchmark: Longhand's engine against llama.cpp (node-llama-cpp) on the same GGUF
// file, same threads, in one run. Not part of `npm test`.
//
//   node --import tsx bench/dense.mjs [--family llama|qwen3|gemma3|phi3] [--types Q8_0,Q4_0]
//        [--layers N] [--threads 1,2] [--kv-heads 32] [--steps 32] [--quick] [--keep] [--json FILE]
//        [--dir DIR] [--dense auto|native|onnx] [--cpu-level portable|avx2|avx512|amx]
//
// --family (issue 30): llama (default: the shape below), or a family at a realistic shape written
// by its own fixture writer with its real tokenizer (test/fixtures/cli.ts → families/*.ts):
//   qwen3  Qwen3-4B-like: hidden 2560, 36 layers, 32 heads / 8 KV heads, head_dim 128, ffn 9728,
//          vocab 151936, tied (preset qwen3-4b)
//   gemma3 Gemma-3-4B-like: hidden 2560, 34 layers (5 window layers : 1 global, window 1024),
//          8 heads / 4 KV heads, head_dim 256, ffn 10240, vocab 262144, tied (preset gemma3-4b)
//   phi3   Phi-4-mini-like: hidden 3072, 32 layers, 24 heads / 8 KV heads, partial RoPE 0.75,
//          LongRoPE, ffn 8192, vocab 200064, tied (preset phi-4-mini)
// Their default types are Q4_K_M,Q8_0 (gemma3: F32, F16, Q8_0, Q4_K_M, Q6_K). --layers N cuts the
// depth (any family; the table header says so in capitals); --quick is a tiny shape of the same
// pattern (qwen3: hidden 512, 4 layers, 4/2 heads; gemma3: the test preset, hidden 256, 8 layers,
// window 16; phi3: phi-4-mini-small, hidden 256, 4 layers), the real vocabulary kept. The decode
// rows add the greedy ids of each engine compared from the first step (same prompt, each feeding
// its own argmax), and the bound counts a window layer's KV rows as at most its window.
// Smoke runs (each ~1 min on 2 busy cores):
//   node --import tsx bench/dense.mjs --family qwen3 --quick --types Q4_K_M,Q8_0 --threads 1 --steps 8
//   node --import tsx bench/dense.mjs --family gemma3 --quick --types Q4_K_M,Q8_0 --threads 1 --steps 8
//   node --import tsx bench/dense.mjs --family phi3 --quick --types Q4_K_M,Q8_0 --threads 1 --steps 8
// Full tables (bench/README.md gives the times):
//   node --import tsx bench/dense.mjs --family qwen3 --json qwen3.json
//   node --import tsx bench/dense.mjs --family gemma3 --json gemma3.json
//   node --import tsx bench/dense.mjs --family phi3 --json phi3.json
//
// --dense: who runs our dense stages (model-runner.ts): 'auto' (default: the native C++ stages over
// the file's blocks where every type has kernels, else onnxruntime), or one forced; each table says
// which ran.
//
// Types: F32, F16, Q8_0, Q4_0, Q4_K (every matrix that type) and Q4_K_M, Q5_K_M, Q6_K (the
// per-tensor mix llama-quantize makes, test/fixtures/quant-mix.ts: the files users download). Each
// table's header gives the file's bytes per tensor type. With --quick, ffn 1408 is not a multiple of
// 256, so ffn_down takes llama-quantize's fallbacks (Q5_0 / Q5_1 / Q8_0), and plain Q4_K cannot be
// written at all.
//
// For each type it writes a Llama-style fixture (dim 2048, 16 layers, 32 heads, ffn 5632, vocab
// 32000; --quick: dim 512, 4 layers, 8 heads, ffn 1408, vocab 4000) into os.tmpdir() (deleted at
// the end unless --keep), then for each thread count runs each engine in a FRESH child process,
// one after the other: prefill of a 512-token prompt (timed), `steps` greedy decode steps at 512
// tokens of context (timed), a prefill up to 2,048 tokens (timed, reported as "fill"), `steps`
// decode steps at 2,048 (timed), then the child's peak RSS. Load is timed from opening the file to a
// runnable context, as wall seconds and as CPU seconds of all the child's threads (other work on
// the cores inflates the first, hardly the second), with the peak RSS reached by then. The prompt
// is the same for both engines: BOS, then random vocabulary ids from a fixed seed. Each decode step
// feeds the engine's own greedy (argmax) token.
//
// Bandwidth bound: bytes read per decode token = every tensor of the file as stored except the
// token embedding (one row per token; it counts when it is also the LM head), plus the fp16 KV
// cache at that context (layers · kvHeads · headDim · 2 (K,V) · 2 bytes · context). Divided into
// the measured read bandwidth (native measureReadBandwidth, best of a pass before and one after
// the engines, the best over 1..threads threads) that gives a tokens/s upper bound; each
// engine's decode is shown as % of it. Decode is also shown as the median step and the 10th-percentile
// (fast) step: other processes on the cores come in bursts that the mean absorbs; every step's ms is
// in the --json output.
//
// --cpu-level LEVEL (issue 35) runs both engines at one instruction-set level on a host that has
// more: Longhand through LONGHAND_CPU_LEVEL (native/src/cpu_level.h: every kernel choice capped at
// LEVEL; set for this process and so for every child; onnxruntime, when it runs the dense stages,
// chooses its own kernels and is not capped), llama.cpp through the CPU backend variant
// of that level from node-llama-cpp's package (test/support/llama-cpu-level.mjs: avx2 = ggml's
// haswell build). Without it, a LONGHAND_CPU_LEVEL in the environment is taken as the level (both
// engines), else each engine runs the best the CPU has. The run prints the host's instruction sets
// (/proc/cpuinfo), and each table which kernels ran: Longhand's level, dense kernel per weight type
// and attention kernel; llama.cpp's CPU backend features (llama.systemInfo).
//
// Compute bound (prefill, fill): multiply-accumulates per token of the weight matrices (every
// layer's, plus the LM head once per prompt: both engines compute logits for the last token only),
// each type's MACs divided by its dot kernel's one-thread peak on this host at the run's level
// (native measureDotPeak: a weight tile in cache, the prefill token block passing over it, best of
// 5 passes before the engines), times the threads. Attention is left out (another kernel; ~2% of a
// 512-token prefill's MACs at dim 2048, ~8% at --quick's dim 512). Shown as % of that bound for both engines; '—' where a
// type has no native kernel (none of llama-quantize's Q5_0 / Q5_1 / Q8_0 fallbacks now: they all have kernels).
//
// --dir DIR keeps the fixtures there and reuses the ones an earlier run left (their names give type,
// shape and KV heads).
//
// Children: `--child inspect|ours|llama`; they print one line `RESULT {json}` on stdout.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SELF = fileURLToPath(import.meta.url);
const PROMPT = 512;
const LONG = 2048;
const CONTEXT = LONG + 64;
const SEED = 20240611;
const CHILD_TIMEOUT_MS = 20 * 60 * 1000;
const TYPES = ['Q8_0', 'Q4_0', 'Q4_K', 'F16', 'F32', 'Q4_K_M', 'Q5_K_M', 'Q6_K'];

/**
 * The model families, each written by its own fixture writer through test/fixtures/cli.ts with the
 * family's real tokenizer (qwen3, gemma3, phi3) and a realistic shape; `quick` is a tiny shape of the
 * same pattern for smoke runs. `writerArgs(type, layers)` are cli.ts's arguments after the output path
 * (layers: the --layers override, or undefined); `layers` is the realistic shape's depth (the header
 * says when --layers cut it).
 */
const FAMILIES = {
  llama: {
    label: 'Llama-style (dim 2048, 16 layers, 32 heads, ffn 5632, vocab 32000)',
    quickLabel: 'Llama-style quick (dim 512, 4 layers, 8 heads, ffn 1408, vocab 4000)',
    types: TYPES,
    layers: 16,
    quickLayers: 4,
    defaultTypes: 'Q8_0,Q4_0',
  },
  qwen3: {
    label: 'Qwen3-4B-like (hidden 2560, 36 layers, 32 heads / 8 KV heads, head_dim 128, ffn 9728, vocab 151936, tied)',
    quickLabel: 'Qwen3 quick (hidden 512, 4 layers, 4 heads / 2 KV heads, head_dim 128, ffn 1536, vocab 151936, tied)',
    types: ['F32', 'F16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q4_K_M', 'Q5_K_M', 'Q6_K'],
    defaultTypes: 'Q4_K_M,Q8_0',
    layers: 36,
    quickLayers: 4,
    writerArgs: (type, layers, quick) => [
      '--arch', 'qwen3', '--type', type,
      ...(quick ? ['--preset', 'qwen3-tiny', '--dim', '512', '--layers', '4', '--heads', '4', '--kv-heads', '2', '--head-dim', '128', '--ffn', '1536'] : ['--preset', 'qwen3-4b']),
      ...(layers ? ['--layers', `${layers}`] : []),
    ],
  },
  gemma3: {
    label: 'Gemma-3-4B-like (hidden 2560, 34 layers: 5 local (window 1024) : 1 global, 8 heads / 4 KV heads, head_dim 256, ffn 10240, vocab 262144, tied)',
    quickLabel: 'Gemma 3 quick (hidden 256, 8 layers: 5 local (window 16) : 1 global, 4 heads / 2 KV heads, head_dim 64, ffn 512, vocab 262144, tied)',
    types: ['F32', 'F16', 'Q8_0', 'Q4_K_M', 'Q6_K'],
    defaultTypes: 'Q4_K_M,Q8_0',
    layers: 34,
    quickLayers: 8,
    // the quick preset states context 1024; the runs need 2,112 positions (both engines accept more than the file's context)
    writerArgs: (type, layers, quick) => ['--type', type, '--preset', quick ? 'gemma3' : 'gemma3-4b', '--context', '32768', ...(layers ? ['--layers', `${layers}`] : [])],
    command: 'gemma',
  },
  phi3: {
    label: 'Phi-4-mini-like (hidden 3072, 32 layers, 24 heads / 8 KV heads, head_dim 128, partial RoPE 0.75, LongRoPE, ffn 8192, vocab 200064, tied)',
    quickLabel: 'Phi-4-mini quick (phi-4-mini-small: hidden 256, 4 layers, 4 heads / 2 KV heads, ffn 512, vocab 200064, tied)',
    types: ['F32', 'F16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q4_K_M', 'Q5_K_M', 'Q6_K'],
    defaultTypes: 'Q4_K_M,Q8_0',
    layers: 32,
    quickLayers: 4,
    writerArgs: (type, layers, quick) => ['--arch', 'phi3', '--type', type, '--preset', quick ? 'phi-4-mini-small' : 'phi-4-mini', ...(layers ? ['--layers', `${layers}`] : [])],
  },
};

const { values: opts } = parseArgs({
  options: {
    family: { type: 'string', default: 'llama' },
    types: { type: 'string' },
    threads: { type: 'string', default: '1,2' },
    'kv-heads': { type: 'string' },
    layers: { type: 'string' },
    steps: { type: 'string' },
    quick: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    json: { type: 'string' },
    dir: { type: 'string' },
    'bandwidth-mib': { type: 'string', default: '512' },
    dense: { type: 'string', default: 'auto' },
    'cpu-level': { type: 'string' },
    // child mode
    child: { type: 'string' },
    model: { type: 'string' },
    vocab: { type: 'string' },
    bos: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});

// ─── shared helpers ──────────────────────────────────────────────────────────────────────────

/** BOS, then `n - 1` ids in [0, vocab) from a xorshift32 with a fixed seed (same in every child). */
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

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** The 10th percentile (nearest rank) of step times: the engine's speed when nothing else ran. */
function p10(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil(0.1 * s.length) - 1)];
}

function argmax(logits) {
  let best = 0;
  for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
  return best;
}

/** The k largest logits as [id, logit] pairs, largest first. */
function topK(logits, k) {
  const top = [];
  for (let j = 0; j < logits.length; j++) {
    if (top.length === k && logits[j] <= top[k - 1][1]) continue;
    let i = Math.min(top.length, k - 1);
    top[i] = [j, logits[j]];
    while (i > 0 && top[i][1] > top[i - 1][1]) {
      [top[i], top[i - 1]] = [top[i - 1], top[i]];
      i--;
    }
  }
  return top;
}

function positiveInt(text, name) {
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${text}`);
  return n;
}

function result(obj) {
  process.stdout.write(`RESULT ${JSON.stringify(obj)}\n`);
}

const peakRss = () => process.resourceUsage().maxRSS * 1024;

/** User + system CPU seconds of this process (all its threads) since `from`: a load's cost that other work on the cores does not inflate the way it does wall time. */
const cpuSeconds = (from) => {
  const d = process.cpuUsage(from);
  return (d.user + d.system) / 1e6;
};

// ─── children ────────────────────────────────────────────────────────────────────────────────

/** Shape and the bytes a decode token reads from the weights, from the file's tensor sizes. */
async function childInspect(path) {
  const { loadModel } = await import('../app/engine/model/load-model.ts');
  const model = await loadModel(path);
  try {
    let weightBytes = 0;
    let embedBytes = 0;
    let parameters = 0;
    const dtypes = {};
    // multiply-accumulates per token by weight type: every layer matrix once per token (layerMacs),
    // the LM head (output.weight, or token_embd when tied) once per prompt (headMacs)
    const layerMacs = {};
    const headMacs = {};
    const tied = !model.tensors.has('output.weight');
    for (const [name, t] of model.tensors) {
      const n = t.bytes().byteLength;
      parameters += t.elements;
      dtypes[t.dtype] = (dtypes[t.dtype] ?? 0) + n;
      if (name === 'token_embd.weight') embedBytes = n;
      else weightBytes += n;
      if (name === 'output.weight' || (tied && name === 'token_embd.weight')) headMacs[t.dtype] = (headMacs[t.dtype] ?? 0) + t.elements;
      else if (name.startsWith('blk.') && t.shape.length === 2 && t.shape[0] > 1 && t.shape[1] > 1) layerMacs[t.dtype] = (layerMacs[t.dtype] ?? 0) + t.elements;
    }
    const h = model.hyper;
    const bosMeta = model.tokenizer.kind === 'gguf' ? model.tokenizer.metadata.get('tokenizer.ggml.bos_token_id') : undefined;
    result({
      hyper: { dim: h.hiddenSize, layers: h.layers, heads: h.heads, kvHeads: h.kvHeads, headDim: h.headDim, ffn: h.ffnSize, vocab: h.vocabSize },
      architecture: h.architecture,
      // sliding-window layers (Gemma): they read at most `window` rows a decode step
      window: h.gemma?.window,
      slidingLayers: h.gemma?.slidingLayers,
      fileWeightBytes: model.weightBytes,
      parameters,
      dtypes,
      embedBytes,
      tied,
      // per decode token: all tensors but the embedding (one row), unless it doubles as the LM head
      weightBytesPerToken: weightBytes + (tied ? embedBytes : 0),
      layerMacs,
      headMacs,
      bos: bosMeta === undefined ? 1 : Number(bosMeta),
    });
  } finally {
    model.close();
  }
}

function perCall(t) {
  const c = Math.max(1, t.calls);
  return {
    embedding: t.embedding / c,
    layerGraphs: t.layerGraphs / c,
    headGraph: t.headGraph / c,
    append: t.append / c,
    attention: t.attention / c,
    other: t.other / c,
    total: t.total / c,
    calls: t.calls,
  };
}

async function childOurs(path, threads, vocab, bos, steps, dense) {
  const { loadModel } = await import('../app/engine/model/load-model.ts');
  const { createModelRunner } = await import('../app/engine/forward/model-runner.ts');
  const ids = promptIds(LONG, vocab, bos);
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const model = await loadModel(path);
  const runner = await createModelRunner(model, { threads, contextLength: CONTEXT, kvType: 'fp16', prefillChunk: 128, dense });
  const loadSeconds = (performance.now() - t0) / 1000;
  const loadCpuSeconds = cpuSeconds(cpu0);
  const loadPeakRssBytes = peakRss();
  // which level and kernels this process's addon chose (LONGHAND_CPU_LEVEL from the parent)
  const { cpuLevel } = await import('../native/index.js');
  const kernels = cpuLevel();
  // warm-up (first runs of each graph allocate)
  await runner.prefill(ids.slice(0, 16));
  for (let i = 0; i < 3; i++) await runner.decode(ids[16 + i]);
  runner.reset();

  const decodeRun = async (logits) => {
    runner.resetTimings();
    const stepMs = [];
    const ids = []; // the greedy id fed at each step (compared with llama.cpp's)
    const top5 = []; // our 5 best [id, logit] at each step: how close llama.cpp's id was where they differ
    const a = performance.now();
    let untimed = 0;
    for (let i = 0; i < steps; i++) {
      const u = performance.now();
      top5.push(topK(logits, 5)); // outside the step's time (and the run's)
      untimed += performance.now() - u;
      const s = performance.now();
      const id = argmax(logits);
      ids.push(id);
      logits = await runner.decode(id);
      stepMs.push(performance.now() - s);
    }
    const ms = performance.now() - a - untimed;
    return { logits, ids, top5, tps: (steps * 1000) / ms, medianTps: 1000 / median(stepMs), p10Tps: 1000 / p10(stepMs), stepMs, breakdown: perCall(runner.timings()) };
  };

  runner.resetTimings();
  let a = performance.now();
  let logits = await runner.prefill(ids.slice(0, PROMPT));
  const prefillMs = performance.now() - a;
  const prefillBreakdown = perCall(runner.timings());
  const d512 = await decodeRun(logits);
  const fillFrom = runner.position;
  a = performance.now();
  logits = await runner.prefill(ids.slice(fillFrom, LONG));
  const fillMs = performance.now() - a;
  if (runner.position !== LONG) throw new Error(`ours: position ${runner.position} after the fill, expected ${LONG}`);
  const d2048 = await decodeRun(logits);
  const out = {
    engine: 'longhand',
    threads,
    kernels,
    loadSeconds,
    loadCpuSeconds,
    loadPeakRssBytes,
    dense: runner.dense,
    graphWeightBytes: runner.graphWeightBytes,
    poolBytes: runner.poolBytes,
    prefillTps: (PROMPT * 1000) / prefillMs,
    prefillBreakdown,
    fillTps: ((LONG - fillFrom) * 1000) / fillMs,
    fillTokens: LONG - fillFrom,
    decode512Tps: d512.tps,
    decode512MedianTps: d512.medianTps,
    decode512P10Tps: d512.p10Tps,
    decode512StepMs: d512.stepMs,
    decode512Ids: d512.ids,
    decode512Top5: d512.top5,
    decode512Breakdown: d512.breakdown,
    decode2048Tps: d2048.tps,
    decode2048MedianTps: d2048.medianTps,
    decode2048P10Tps: d2048.p10Tps,
    decode2048StepMs: d2048.stepMs,
    decode2048Ids: d2048.ids,
    decode2048Top5: d2048.top5,
    decode2048Breakdown: d2048.breakdown,
    finalPosition: runner.position,
  };
  await runner.dispose();
  model.close();
  out.peakRssBytes = peakRss();
  result(out);
}

async function childLlama(path, threads, vocab, bos, steps, level) {
  const { forceLlamaCpuLevel, llamaCpuFeatures } = await import('../test/support/llama-cpu-level.mjs');
  const forced = level === undefined ? undefined : forceLlamaCpuLevel(level);
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const ids = promptIds(LONG, vocab, bos);
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  // the features the loaded CPU backend variant was built with (ggml picks the best-scoring one)
  const cpuBackend = { level: level ?? 'best', variants: forced?.variants, features: llamaCpuFeatures(llama.systemInfo) };
  const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
  const context = await model.createContext({ contextSize: CONTEXT, threads, batchSize: 512, flashAttention: false });
  const loadSeconds = (performance.now() - t0) / 1000;
  const loadCpuSeconds = cpuSeconds(cpu0);
  const loadPeakRssBytes = peakRss();
  if (context.contextSize <= LONG + steps + 1) throw new Error(`llama.cpp made a context of ${context.contextSize}`);
  const sequence = context.getSequence();
  // A full context would make node-llama-cpp silently erase the cache start and go on: fail instead.
  const contextShift = {
    strategy: () => {
      throw new Error('llama.cpp: context shift requested');
    },
  };
  const greedy = { generateNext: { token: true, options: { temperature: 0 } } };
  /** Evaluates `tokens`, the last one with a greedy next token; returns that token. */
  const evaluate = async (tokens) => {
    const items = tokens.map((t, i) => (i === tokens.length - 1 ? [t, greedy] : t));
    const res = await sequence.controlledEvaluate(items, { contextShift });
    const next = res[tokens.length - 1]?.next.token;
    if (next === undefined || next === null) throw new Error('llama.cpp returned no next token');
    return next;
  };
  const decodeRun = async (tok) => {
    const stepMs = [];
    const ids = [];
    const a = performance.now();
    for (let i = 0; i < steps; i++) {
      const s = performance.now();
      ids.push(tok);
      tok = await evaluate([tok]);
      stepMs.push(performance.now() - s);
    }
    const ms = performance.now() - a;
    return { tok, ids, tps: (steps * 1000) / ms, medianTps: 1000 / median(stepMs), p10Tps: 1000 / p10(stepMs), stepMs };
  };
  // warm-up
  let tok = await evaluate(ids.slice(0, 16));
  for (let i = 0; i < 3; i++) tok = await evaluate([tok]);
  await sequence.clearHistory();
  if (sequence.nextTokenIndex !== 0) throw new Error(`llama.cpp: ${sequence.nextTokenIndex} tokens left after clearHistory`);

  let a = performance.now();
  tok = await evaluate(ids.slice(0, PROMPT));
  const prefillMs = performance.now() - a;
  const d512 = await decodeRun(tok);
  const fillFrom = sequence.nextTokenIndex;
  if (fillFrom !== PROMPT + steps) throw new Error(`llama.cpp: ${fillFrom} tokens after decode, expected ${PROMPT + steps}`);
  a = performance.now();
  tok = await evaluate(ids.slice(fillFrom, LONG));
  const fillMs = performance.now() - a;
  if (sequence.nextTokenIndex !== LONG) throw new Error(`llama.cpp: ${sequence.nextTokenIndex} tokens after the fill, expected ${LONG}`);
  const d2048 = await decodeRun(tok);
  const out = {
    engine: 'llama.cpp',
    threads,
    cpuBackend,
    loadSeconds,
    loadCpuSeconds,
    loadPeakRssBytes,
    contextSize: context.contextSize,
    prefillTps: (PROMPT * 1000) / prefillMs,
    fillTps: ((LONG - fillFrom) * 1000) / fillMs,
    fillTokens: LONG - fillFrom,
    decode512Tps: d512.tps,
    decode512MedianTps: d512.medianTps,
    decode512P10Tps: d512.p10Tps,
    decode512StepMs: d512.stepMs,
    decode512Ids: d512.ids,
    decode2048Tps: d2048.tps,
    decode2048MedianTps: d2048.medianTps,
    decode2048P10Tps: d2048.p10Tps,
    decode2048StepMs: d2048.stepMs,
    decode2048Ids: d2048.ids,
    finalPosition: sequence.nextTokenIndex,
  };
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  out.peakRssBytes = peakRss();
  result(out);
}

// ─── parent ──────────────────────────────────────────────────────────────────────────────────

/** Runs this file as a child; resolves with its RESULT object, or { error }. */
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

const CPU_LEVELS = ['portable', 'avx2', 'avx512', 'amx'];
// the GGML type ids of the weight types the native dot kernels have (native/src/quant_dot.h)
const GGML_TYPE_IDS = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 8, Q4_K: 12, Q5_K: 13, Q6_K: 14 };
// the /proc/cpuinfo flags that decide which kernels either engine can run
const ISA_FLAGS = ['sse4_2', 'avx', 'avx2', 'fma', 'f16c', 'bmi2', 'avx_vnni', 'avx512f', 'avx512bw', 'avx512vl', 'avx512dq', 'avx512_vnni', 'avx512_vbmi', 'avx512_bf16', 'amx_tile', 'amx_int8', 'amx_bf16'];

/** The host's CPU model and which of ISA_FLAGS it has (Linux /proc/cpuinfo; 'unknown' elsewhere). */
function hostIsa() {
  try {
    const text = readFileSync('/proc/cpuinfo', 'utf8');
    const model = /^model name\s*:\s*(.+)$/m.exec(text)?.[1]?.trim() ?? 'unknown CPU';
    const flags = new Set((/^flags\s*:\s*(.+)$/m.exec(text)?.[1] ?? '').split(/\s+/));
    return { model, flags: ISA_FLAGS.filter((f) => flags.has(f)) };
  } catch {
    return { model: 'unknown CPU', flags: [] };
  }
}

/** Longhand's kernels, from native cpuLevel(): "level avx2 (forced; the CPU runs avx512), attention avx2-fma-f16c, dense Q4_K avx2, ...". */
function describeKernels(k, types) {
  if (!k) return '?';
  const dense = Object.entries(k.dense).filter(([t]) => types === undefined || types.includes(t));
  return `level ${k.level}${k.forced ? ` (forced; the CPU runs ${k.cpu})` : ''}, attention ${k.attention}, dense ${dense.map(([t, i]) => `${t} ${i ?? 'none'}`).join(', ')}`;
}

/** llama.cpp's CPU backend, from the llama child: "level avx2: AVX AVX2 F16C FMA ...". */
function describeLlamaBackend(b) {
  if (!b) return '?';
  return `${b.level === 'best' ? 'the best variant for this CPU' : `level ${b.level} (variants ${b.variants?.join(', ')})`}: ${b.features.join(' ')}`;
}

/** Each native dot kernel's one-thread peak (native measureDotPeak) at this process's level: { type: { kernel, tokens, macsPerSecond } }. */
function measureDotPeaks(native) {
  const out = {};
  for (const [name, id] of Object.entries(GGML_TYPE_IDS)) out[name] = native.measureDotPeak(id, 5);
  return out;
}

/**
 * Prefill tokens/s the dot kernels allow on `threads` threads for a `tokens`-token prompt: the
 * layers' MACs per token plus the LM head's once, each type's at its kernel's peak. Undefined when
 * a type has no native kernel.
 */
function computeBound(info, peaks, threads, tokens) {
  let seconds = 0;
  for (const [macs, per] of [[info.layerMacs, 1], [info.headMacs, tokens]]) {
    for (const [type, n] of Object.entries(macs ?? {})) {
      const peak = peaks[type]?.macsPerSecond;
      if (!(peak > 0)) return undefined;
      seconds += n / per / (peak * threads);
    }
  }
  return seconds > 0 ? 1 / seconds : undefined;
}

function measureBandwidth(loadAddonModule, threadList, mib) {
  const out = {};
  for (const t of threadList) out[t] = loadAddonModule.measureReadBandwidth(mib * 2 ** 20, 5, t);
  return out;
}

const fmt = (x, d = 1) => (x === undefined || x === null || !Number.isFinite(x) ? '—' : x.toFixed(d));
const mib = (b) => (b === undefined ? '—' : `${(b / 2 ** 20).toFixed(0)} MiB`);
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}x` : '—');
const pct = (x, bound) => (Number.isFinite(x) && bound > 0 ? ` (${((100 * x) / bound).toFixed(0)}%)` : '');
/** The file's bytes per tensor type, largest first: "Q4_K 380 MiB (71%), Q6_K 150 MiB (28%), F32 0 MiB (0%)". */
const dtypeMix = (dtypes) => {
  const total = Object.values(dtypes).reduce((a, b) => a + b, 0);
  return Object.entries(dtypes)
    .sort((a, b) => b[1] - a[1])
    .map(([t, n]) => `${t} ${mib(n)} (${((100 * n) / total).toFixed(0)}%)`)
    .join(', ');
};

/**
 * How many of our greedy ids `a` and llama.cpp's `b` agree from the start: "32/32", or "7/32 (step
 * 7: 123 vs 456, which our logits rank #2, 0.031 below)" from our top-5 at that step (`top5`):
 * a near-tie there is two correct engines breaking it differently, a wide gap is a difference.
 */
function agreement(a, b, top5) {
  if (!Array.isArray(a) || !Array.isArray(b)) return '—';
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  if (i === n) return `${i}/${n}`;
  const top = top5?.[i];
  const rank = top ? top.findIndex(([id]) => id === b[i]) : -1;
  const where = !top ? '' : rank < 0 ? ', not in our top 5' : `, which our logits rank #${rank + 1}, ${(top[0][1] - top[rank][1]).toFixed(3)} below`;
  return `${i}/${n} (step ${i}: ${a[i]} vs ${b[i]}${where})`;
}

function table(type, info, runs, bounds, shape, peaks) {
  const lines = [];
  const h = info.hyper;
  const windows = info.slidingLayers ? `, ${info.slidingLayers.filter(Boolean).length} window layers (window ${info.window}) + ${info.slidingLayers.filter((x) => !x).length} global` : '';
  lines.push(`### ${shape.family} ${type} — ${shape.label}${shape.layersCut ? ` CUT TO ${h.layers} OF ${shape.layersCut} LAYERS (--layers)` : ''}`);
  lines.push('');
  lines.push(`File (${info.architecture}): dim ${h.dim}, ${h.layers} layers${windows}, ${h.heads} heads / ${h.kvHeads} KV heads, head_dim ${h.headDim}, ffn ${h.ffn}, vocab ${h.vocab}; ${(info.parameters / 1e6).toFixed(0)} M params, file weights ${mib(info.fileWeightBytes)} (${dtypeMix(info.dtypes)}), read per decode token ${mib(info.weightBytesPerToken)} weights + KV`);
  lines.push('');
  const engines = [...new Set(runs.map((r) => (r.ours.dense ? (r.ours.dense.engine === 'native' ? `native (${r.ours.dense.kernel})` : `onnxruntime${r.ours.dense.whyNotNative ? ` (${r.ours.dense.whyNotNative})` : ''}`) : '?')))];
  lines.push(`Longhand's dense stages: ${engines.join(', ')}`);
  lines.push('');
  const matrixTypes = [...new Set([...Object.keys(info.layerMacs ?? {}), ...Object.keys(info.headMacs ?? {})])];
  const ours = runs.find((r) => r.ours.kernels)?.ours.kernels;
  const llamaBackend = runs.find((r) => r.llama.cpuBackend)?.llama.cpuBackend;
  // onnxruntime's MLAS picks its kernels by cpuid itself: LONGHAND_CPU_LEVEL does not reach it
  const onnx = runs.some((r) => r.ours.dense?.engine === 'onnx') ? ' (but the dense stages ran on onnxruntime, whose kernels the level does not cap: only attention and the KV path ran at it)' : '';
  lines.push(`Kernels: Longhand ${describeKernels(ours, matrixTypes)}${onnx}; llama.cpp CPU backend ${describeLlamaBackend(llamaBackend)}`);
  lines.push('');
  lines.push(`Compute bound (prefill, fill): matrix MACs per token ${(Object.values(info.layerMacs ?? {}).reduce((a, b) => a + b, 0) / 1e6).toFixed(1)} M (+ LM head ${(Object.values(info.headMacs ?? {}).reduce((a, b) => a + b, 0) / 1e6).toFixed(1)} M once) over the dot kernels' one-thread peak × threads: ${matrixTypes.map((t) => (peaks[t] ? `${t} ${(peaks[t].macsPerSecond / 1e9).toFixed(1)} GMAC/s (${peaks[t].kernel})` : `${t} no kernel`)).join(', ')}`);
  lines.push('');
  lines.push('| metric | threads | Longhand | llama.cpp | ratio ours/llama | bound |');
  lines.push('|---|---|---|---|---|---|');
  for (const r of runs) {
    const o = r.ours;
    const l = r.llama;
    const b = bounds[r.threads];
    lines.push(`| prefill 512 (tok/s, % of compute bound) | ${r.threads} | ${fmt(o.prefillTps)}${pct(o.prefillTps, b.prefill)} | ${fmt(l.prefillTps)}${pct(l.prefillTps, b.prefill)} | ${ratio(o.prefillTps, l.prefillTps)} | ${fmt(b.prefill)} |`);
    lines.push(`| decode @512 (tok/s, % of bound) | ${r.threads} | ${fmt(o.decode512Tps, 2)}${pct(o.decode512Tps, b.at512)} | ${fmt(l.decode512Tps, 2)}${pct(l.decode512Tps, b.at512)} | ${ratio(o.decode512Tps, l.decode512Tps)} | ${fmt(b.at512, 2)} |`);
    lines.push(`| decode @2048 (tok/s, % of bound) | ${r.threads} | ${fmt(o.decode2048Tps, 2)}${pct(o.decode2048Tps, b.at2048)} | ${fmt(l.decode2048Tps, 2)}${pct(l.decode2048Tps, b.at2048)} | ${ratio(o.decode2048Tps, l.decode2048Tps)} | ${fmt(b.at2048, 2)} |`);
    lines.push(`| decode @512, median step (tok/s) | ${r.threads} | ${fmt(o.decode512MedianTps, 2)}${pct(o.decode512MedianTps, b.at512)} | ${fmt(l.decode512MedianTps, 2)}${pct(l.decode512MedianTps, b.at512)} | ${ratio(o.decode512MedianTps, l.decode512MedianTps)} | ${fmt(b.at512, 2)} |`);
    lines.push(`| decode @2048, median step (tok/s) | ${r.threads} | ${fmt(o.decode2048MedianTps, 2)}${pct(o.decode2048MedianTps, b.at2048)} | ${fmt(l.decode2048MedianTps, 2)}${pct(l.decode2048MedianTps, b.at2048)} | ${ratio(o.decode2048MedianTps, l.decode2048MedianTps)} | ${fmt(b.at2048, 2)} |`);
    lines.push(`| decode @512, p10 step (tok/s) | ${r.threads} | ${fmt(o.decode512P10Tps, 2)}${pct(o.decode512P10Tps, b.at512)} | ${fmt(l.decode512P10Tps, 2)}${pct(l.decode512P10Tps, b.at512)} | ${ratio(o.decode512P10Tps, l.decode512P10Tps)} | ${fmt(b.at512, 2)} |`);
    lines.push(`| decode @2048, p10 step (tok/s) | ${r.threads} | ${fmt(o.decode2048P10Tps, 2)}${pct(o.decode2048P10Tps, b.at2048)} | ${fmt(l.decode2048P10Tps, 2)}${pct(l.decode2048P10Tps, b.at2048)} | ${ratio(o.decode2048P10Tps, l.decode2048P10Tps)} | ${fmt(b.at2048, 2)} |`);
    lines.push(`| fill ${o.fillTokens ?? l.fillTokens ?? '?'} tokens to 2048 (tok/s, % of compute bound) | ${r.threads} | ${fmt(o.fillTps)}${pct(o.fillTps, b.fill)} | ${fmt(l.fillTps)}${pct(l.fillTps, b.fill)} | ${ratio(o.fillTps, l.fillTps)} | ${fmt(b.fill)} |`);
    lines.push(`| greedy ids equal to llama.cpp's, decode @512 | ${r.threads} | ${agreement(o.decode512Ids, l.decode512Ids, o.decode512Top5)} | | | — |`);
    lines.push(`| greedy ids equal to llama.cpp's, decode @2048 | ${r.threads} | ${agreement(o.decode2048Ids, l.decode2048Ids, o.decode2048Top5)} | | | — |`);
    lines.push(`| peak RSS | ${r.threads} | ${mib(o.peakRssBytes)} | ${mib(l.peakRssBytes)} | ${ratio(o.peakRssBytes, l.peakRssBytes)} | — |`);
    lines.push(`| load (s) | ${r.threads} | ${fmt(o.loadSeconds)} | ${fmt(l.loadSeconds)} | ${ratio(o.loadSeconds, l.loadSeconds)} | — |`);
    lines.push(`| load CPU (s, all threads) | ${r.threads} | ${fmt(o.loadCpuSeconds)} | ${fmt(l.loadCpuSeconds)} | ${ratio(o.loadCpuSeconds, l.loadCpuSeconds)} | — |`);
    lines.push(`| peak RSS at the end of load | ${r.threads} | ${mib(o.loadPeakRssBytes)} | ${mib(l.loadPeakRssBytes)} | ${ratio(o.loadPeakRssBytes, l.loadPeakRssBytes)} | — |`);
  }
  const errors = runs.flatMap((r) => [r.ours.error && `Longhand, ${r.threads} thread(s): ${r.ours.error}`, r.llama.error && `llama.cpp, ${r.threads} thread(s): ${r.llama.error}`]).filter(Boolean);
  if (errors.length) lines.push('', ...errors.map((e) => `**failed** ${e}`));
  lines.push('');
  lines.push(`Longhand per decode step (ms): ${type}`);
  lines.push('');
  lines.push('| threads | context | embedding | layerGraphs | headGraph | append | attention | other | total |');
  lines.push('|---|---|---|---|---|---|---|---|---|');
  for (const r of runs) {
    for (const [ctx, bd] of [
      ['prefill 512 (per 128-token chunk)', r.ours.prefillBreakdown],
      [512, r.ours.decode512Breakdown],
      [2048, r.ours.decode2048Breakdown],
    ]) {
      if (!bd) continue;
      lines.push(`| ${r.threads} | ${ctx} | ${fmt(bd.embedding, 2)} | ${fmt(bd.layerGraphs, 2)} | ${fmt(bd.headGraph, 2)} | ${fmt(bd.append, 2)} | ${fmt(bd.attention, 2)} | ${fmt(bd.other, 2)} | ${fmt(bd.total, 2)} |`);
    }
  }
  return lines.join('\n');
}

async function parent() {
  if (opts.help) {
    console.log('usage: node --import tsx bench/dense.mjs [--family llama|qwen3|gemma3|phi3] [--types Q8_0,Q4_0 (llama: any of ' + TYPES.join(', ') + '; default llama Q8_0,Q4_0, the others Q4_K_M,Q8_0)] [--layers N] [--threads 1,2] [--kv-heads 32 (llama)] [--steps 32] [--quick] [--keep] [--json FILE] [--dir DIR] [--bandwidth-mib 512] [--dense auto|native|onnx] [--cpu-level portable|avx2|avx512|amx]');
    return;
  }
  const familyName = opts.family;
  if (!Object.hasOwn(FAMILIES, familyName)) throw new Error(`unknown --family ${familyName}; known: ${Object.keys(FAMILIES).join(', ')}`);
  const family = FAMILIES[familyName];
  const types = (opts.types ?? family.defaultTypes).split(',').map((s) => s.trim());
  for (const t of types) if (!family.types.includes(t)) throw new Error(`unknown type ${t} for ${familyName}; known: ${family.types.join(', ')}`);
  const threadList = opts.threads.split(',').map((s) => positiveInt(s, '--threads'));
  if (opts['kv-heads'] !== undefined && familyName !== 'llama') throw new Error(`--kv-heads is for --family llama; ${familyName} has its model's KV heads`);
  const kvHeadsArg = positiveInt(opts['kv-heads'] ?? '32', '--kv-heads');
  const layersArg = opts.layers === undefined ? undefined : positiveInt(opts.layers, '--layers');
  const steps = positiveInt(opts.steps ?? (opts.quick ? '16' : '32'), '--steps');
  if (LONG + steps + 1 >= CONTEXT) throw new Error(`--steps ${steps}: the context (${CONTEXT}) must exceed ${LONG} + steps + 1`);
  const bwMib = positiveInt(opts['bandwidth-mib'], '--bandwidth-mib');
  const sizes = familyName !== 'llama'
    ? { family: familyName, preset: opts.quick ? family.quickLabel : family.label, ...(layersArg ? { layers: layersArg } : {}) }
    : opts.quick
      ? { dim: 512, layers: layersArg ?? 4, heads: 8, kvHeads: Math.min(kvHeadsArg, 8), ffn: 1408, vocab: 4000 }
      : { dim: 2048, layers: layersArg ?? 16, heads: 32, kvHeads: kvHeadsArg, ffn: 5632, vocab: 32000 };
  if (familyName === 'llama' && sizes.heads % sizes.kvHeads !== 0) throw new Error(`--kv-heads ${sizes.kvHeads} must divide ${sizes.heads} heads`);

  // the level both engines run at: set before the addon loads (here and in every child, which inherit it)
  const cpuLevel = opts['cpu-level'] ?? (process.env.LONGHAND_CPU_LEVEL || undefined);
  if (cpuLevel !== undefined && !CPU_LEVELS.includes(cpuLevel)) throw new Error(`--cpu-level must be one of ${CPU_LEVELS.join(', ')}, got ${cpuLevel}`);
  if (cpuLevel !== undefined) process.env.LONGHAND_CPU_LEVEL = cpuLevel;
  else delete process.env.LONGHAND_CPU_LEVEL;

  const native = await import('../native/index.js');
  const kernels = native.cpuLevel(); // a level this CPU lacks throws here (NATIVE_BAD_ARGUMENT)
  const host = hostIsa();
  const started = new Date();
  const loadBefore = loadavg();
  console.log(`dense bench ${started.toISOString()}: family ${familyName}, types ${types.join(',')}, threads ${threadList.join(',')}, ${opts.quick ? 'QUICK ' : ''}shape ${JSON.stringify(sizes)}, ${steps} decode steps, load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);
  console.log(`host: ${host.model}; instruction sets: ${host.flags.join(' ') || 'unknown'}`);
  console.log(`Longhand kernels: ${describeKernels(kernels)}; llama.cpp: ${cpuLevel === undefined ? 'the best CPU backend variant for this CPU' : `the CPU backend variants of level ${cpuLevel}`}`);
  const bwThreads = [...new Set([1, ...threadList])].sort((a, b) => a - b);
  const bwBefore = measureBandwidth(native, bwThreads, bwMib);
  console.log(`read bandwidth before (GB/s, ${bwMib} MiB, best of 5): ${bwThreads.map((t) => `${t} thread(s) ${fmt(bwBefore[t], 2)}`).join(', ')}`);
  const peaks = measureDotPeaks(native);
  console.log(`dot kernels' one-thread peak (GMAC/s, best of 5): ${Object.entries(peaks).map(([t, p]) => `${t} ${(p.macsPerSecond / 1e9).toFixed(1)} (${p.kernel})`).join(', ')}`);

  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'longhand-dense-'));
  const report = { started: started.toISOString(), quick: opts.quick, sizes, steps, prompt: PROMPT, long: LONG, contextSize: CONTEXT, loadBefore, host, cpuLevel: cpuLevel ?? null, kernels, dotPeaks: peaks, bandwidth: { before: bwBefore }, models: {} };
  const sections = [];
  try {
    for (const type of types) {
      const layersTag = layersArg ? `-L${layersArg}` : '';
      const path = familyName === 'llama'
        ? join(dir, `dense-${opts.quick ? 'quick' : 'full'}-${type}-kv${sizes.kvHeads}${layersTag}.gguf`)
        : join(dir, `dense-${familyName}-${opts.quick ? 'quick' : 'full'}-${type}${layersTag}.gguf`);
      const writerArgs = familyName === 'llama'
        ? ['gguf', path, '--type', type, '--dim', `${sizes.dim}`, '--layers', `${sizes.layers}`, '--heads', `${sizes.heads}`, '--kv-heads', `${sizes.kvHeads}`, '--ffn', `${sizes.ffn}`, '--vocab', `${sizes.vocab}`, '--context', '4096']
        : [family.command ?? 'gguf', path, ...family.writerArgs(type, layersArg, opts.quick)];
      const w0 = performance.now();
      // a fixture kept in --dir by an earlier run (same family, shape and type: the name says so) is reused
      const write = opts.dir !== undefined && existsSync(path) ? { status: 0, reused: true } : spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'test/fixtures/cli.ts'), ...writerArgs], { cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 24 });
      if (write.status !== 0) throw new Error(`writing the ${type} fixture failed: ${write.stderr}`);
      console.log(write.reused ? `${type}: reusing ${path}` : `${type}: wrote ${path} in ${((performance.now() - w0) / 1000).toFixed(0)} s`);
      const info = await runChild(['inspect', '--model', path]);
      if (info.error) throw new Error(`inspecting ${path}: ${info.error}`);
      console.log(`${type}: tensor bytes by type ${dtypeMix(info.dtypes)}`);
      const runs = [];
      for (const threads of threadList) {
        const common = ['--model', path, '--threads', `${threads}`, '--vocab', `${info.hyper.vocab}`, '--bos', `${info.bos}`, '--steps', `${steps}`];
        const ours = await runChild(['ours', ...common, '--dense', opts.dense]);
        console.log(`${type} ${threads} thread(s) Longhand: ${ours.error ?? `prefill ${fmt(ours.prefillTps)} tok/s, decode@512 ${fmt(ours.decode512Tps, 2)}, decode@2048 ${fmt(ours.decode2048Tps, 2)} tok/s, peak RSS ${mib(ours.peakRssBytes)}`}`);
        const llama = await runChild(['llama', ...common, ...(cpuLevel === undefined ? [] : ['--cpu-level', cpuLevel])], { tsx: false });
        console.log(`${type} ${threads} thread(s) llama.cpp: ${llama.error ?? `prefill ${fmt(llama.prefillTps)} tok/s, decode@512 ${fmt(llama.decode512Tps, 2)}, decode@2048 ${fmt(llama.decode2048Tps, 2)} tok/s, peak RSS ${mib(llama.peakRssBytes)}`}`);
        runs.push({ threads, ours, llama });
      }
      report.models[type] = { path, info, runs };
    }
  } finally {
    if (!opts.keep && opts.dir === undefined) rmSync(dir, { recursive: true, force: true });
    else console.log(`kept the fixtures in ${dir}`);
  }

  const bwAfter = measureBandwidth(native, bwThreads, bwMib);
  report.bandwidth.after = bwAfter;
  // the bound for N threads: the best read bandwidth measured with at most N threads
  const bandwidthFor = (n) => Math.max(...bwThreads.filter((t) => t <= n).flatMap((t) => [bwBefore[t], bwAfter[t]]));
  report.bandwidth.used = Object.fromEntries(threadList.map((t) => [t, bandwidthFor(t)]));
  for (const [type, m] of Object.entries(report.models)) {
    const h = m.info.hyper;
    // fp16 K and V rows a decode step reads at `ctx` tokens: every row in a global layer, the window in a window layer
    const kvBytesAt = (ctx) => {
      const rowBytes = h.kvHeads * h.headDim * 2 * 2;
      let rows = 0;
      for (let l = 0; l < h.layers; l++) rows += m.info.slidingLayers?.[l] ? Math.min(ctx, m.info.window) : ctx;
      return rows * rowBytes;
    };
    const bounds = {};
    for (const t of threadList) {
      const bw = bandwidthFor(t) * 1e9;
      const b512 = m.info.weightBytesPerToken + kvBytesAt(PROMPT);
      const b2048 = m.info.weightBytesPerToken + kvBytesAt(LONG);
      bounds[t] = {
        bandwidthGBs: bw / 1e9,
        bytesPerToken512: b512,
        bytesPerToken2048: b2048,
        at512: bw / b512,
        at2048: bw / b2048,
        prefill: computeBound(m.info, peaks, t, PROMPT),
        fill: computeBound(m.info, peaks, t, LONG - PROMPT - steps),
      };
    }
    m.bounds = bounds;
    const fullDepth = opts.quick ? family.quickLayers : family.layers;
    sections.push(table(type, m.info, m.runs, bounds, { family: familyName, label: opts.quick ? family.quickLabel : family.label, layersCut: layersArg !== undefined && layersArg !== fullDepth ? fullDepth : undefined }, peaks));
  }
  const loadAfter = loadavg();
  report.loadAfter = loadAfter;
  report.seconds = (Date.now() - started.getTime()) / 1000;

  console.log('');
  console.log(`host: ${host.model}; instruction sets: ${host.flags.join(' ') || 'unknown'}; run at ${cpuLevel === undefined ? "each engine's best level" : `--cpu-level ${cpuLevel}`}`);
  console.log(`read bandwidth (GB/s; before / after): ${bwThreads.map((t) => `${t} thread(s) ${fmt(bwBefore[t], 2)} / ${fmt(bwAfter[t], 2)}`).join(', ')}; bound uses ${threadList.map((t) => `${t}t ${fmt(bandwidthFor(t), 2)}`).join(', ')}`);
  console.log(`load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${loadAfter.map((x) => x.toFixed(2)).join(' ')}; ${report.seconds.toFixed(0)} s in all`);
  console.log('');
  console.log(sections.join('\n\n'));
  if (opts.json) {
    writeFileSync(opts.json, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`\nwrote ${opts.json}`);
  }
}

async function child() {
  const path = opts.model;
  if (!path) throw new Error('--model is required in child mode');
  if (opts.child === 'inspect') return childInspect(path);
  const threads = positiveInt(opts.threads, '--threads');
  const vocab = positiveInt(opts.vocab, '--vocab');
  const bos = Number(opts.bos);
  const steps = positiveInt(opts.steps, '--steps');
  if (opts.child === 'ours') return childOurs(path, threads, vocab, bos, steps, opts.dense);
  if (opts.child === 'llama') return childLlama(path, threads, vocab, bos, steps, opts['cpu-level']);
  throw new Error(`unknown child ${opts.child}`);
}

try {
  await (opts.child ? child() : parent());
} catch (error) {
  console.error(`dense: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
}
