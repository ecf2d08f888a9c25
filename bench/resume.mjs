// Resuming long documents (issue 10): prefix reuse on a second Continue, KV snapshot restore against
// prefilling, and a policy switch that keeps the cache — Longhand against llama.cpp (node-llama-cpp)
// on the same GGUF file, same threads, in one run. Not part of `npm test`.
//
//   node --import tsx bench/resume.mjs [--threads 1,2] [--draft 4096] [--suggest 16]
//        [--snapshot-tokens 16384] [--prefill-tokens 2048] [--snapshot-fill random|prefill]
//        [--skip-llama] [--model PATH | --type Q8_0 --dim 2048 --layers 16 --heads 32 --kv-heads 32
//        --ffn 5632 --vocab 32000] [--prefill-chunk N] [--drop-caches] [--dir DIR] [--keep] [--json FILE]
//
// Fixture: the shape of bench/long-context.mjs (dim 2048, 16 layers, 32 heads / 32 KV heads, ffn 5632,
// vocab 32000, Q8_0, 953 M parameters), written by test/fixtures/cli.ts into os.tmpdir() and deleted
// at the end (unless --keep/--dir). --model PATH runs on an existing file instead (e.g.
// ../shared/models/kjv-llama-hd64.gguf with small lengths, to check the script quickly).
// Prompts are BOS then seeded random ids; sampling is greedy. Longhand runs in-process through
// createEngineCore() (the engine host's core: prefix reuse, saveSnapshot/loadSnapshot, policy
// switches exactly as the app gets them), fp16 KV, the engine's default prefill chunk.
//
// Children, one at a time, each a fresh process printing one `RESULT {json}` line:
//   continue (ours, llama) per thread count: Continue 1 on the draft (full prefill, --suggest greedy
//     tokens), Continue 2 on draft + suggestion (the cached prefix reused; llama.cpp:
//     sequence.adaptStateToTokens then evaluate the rest on the same LlamaContextSequence). TTFT =
//     wall time from the request to the first token. Ours then switches full → streaming → full
//     (Continue 3 and 4, each on the previous prompt + its suggestion): timings.policySwitchMs and
//     the reuse counts from done.cache.
//   make (ours, llama) once, at the highest thread count: a sequence of --snapshot-tokens tokens and
//     its snapshot file. Ours with --snapshot-fill random (default): the first 512 ids prefilled for
//     real, the rest seeded random K/V rows (runner.appendRandomContextForBenchmark; the core does
//     not expose its runner, so this child builds a runner and writes the file with
//     saveSequenceSnapshot and the identity the core computes — a restore costs the same whatever
//     the rows hold); --snapshot-fill prefill prefills all of them through the core and saves with
//     core.saveSnapshot. llama.cpp has no such shortcut: it prefills every token for real (timed per
//     chunk, so that child also gives llama.cpp's real prefill time at that thread count) and saves
//     with sequence.saveStateToFile.
//   restore (ours, llama) per thread count: prefill segment A (the first --prefill-tokens ids, from
//     an empty cache); cold restore (the file dropped from the page cache first: posix_fadvise
//     DONTNEED via `dd iflag=nocache`, or `echo 3 > /proc/sys/vm/drop_caches` with --drop-caches),
//     a second cold one, a warm one (page cache); TTFT of one new token after the restore; prefill
//     segment B (the last --prefill-tokens positions: cache cut back to N − P, P new ids). The
//     prefill of N is then estimated as N/P · (A + B)/2 (per-token cost is affine in the position:
//     weights constant, attention linear), unless P ≥ N (measured).
// The parent also measures the disk: the snapshot file read cold (buffered, after DONTNEED),
// with O_DIRECT, and from the page cache (dd, 8 MiB blocks), sha256 speed, and memory read bandwidth.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SELF = fileURLToPath(import.meta.url);
const SEED = 20240611;
const CHILD_TIMEOUT_MS = 60 * 60 * 1000;
const REAL_PREFIX = 512; // --snapshot-fill random: ids prefilled for real before the random rows

const { values: opts } = parseArgs({
  options: {
    threads: { type: 'string', default: '1,2' },
    draft: { type: 'string', default: '4096' },
    suggest: { type: 'string', default: '16' },
    'snapshot-tokens': { type: 'string', default: '16384' },
    'prefill-tokens': { type: 'string', default: '2048' },
    'snapshot-fill': { type: 'string', default: 'random' },
    'skip-llama': { type: 'boolean', default: false },
    model: { type: 'string' },
    type: { type: 'string', default: 'Q8_0' },
    dim: { type: 'string', default: '2048' },
    layers: { type: 'string', default: '16' },
    heads: { type: 'string', default: '32' },
    'kv-heads': { type: 'string', default: '32' },
    ffn: { type: 'string', default: '5632' },
    vocab: { type: 'string', default: '32000' },
    'prefill-chunk': { type: 'string' },
    'drop-caches': { type: 'boolean', default: false },
    'bandwidth-mib': { type: 'string', default: '512' },
    dir: { type: 'string' },
    keep: { type: 'boolean', default: false },
    json: { type: 'string' },
    help: { type: 'boolean', default: false },
    // child mode
    child: { type: 'string' },
    bos: { type: 'string' },
    file: { type: 'string' },
    context: { type: 'string' },
  },
});

const USAGE = `usage: node --import tsx bench/resume.mjs [options]

  --threads 1,2            thread counts (each engine, each count, in its own child)
  --draft 4096             draft tokens of the first Continue
  --suggest 16             greedy tokens per Continue (the "suggestion")
  --snapshot-tokens 16384  tokens in the snapshot / llama.cpp state
  --prefill-tokens 2048    prefill segment length P: prefill of N estimated from the first P and
                           the last P positions (N/P · (A+B)/2); P >= N measures the whole prefill
  --snapshot-fill random   random: 512 real tokens + seeded random K/V rows (fast); prefill: real
  --skip-llama             Longhand only
  --model PATH             run on this GGUF (not deleted) instead of writing the fixture
  --type Q8_0 --dim 2048 --layers 16 --heads 32 --kv-heads 32 --ffn 5632 --vocab 32000
                           fixture shape (the default is the 953 M-param fixture of long-context.mjs)
  --prefill-chunk N        Longhand's prefill chunk (default: the engine's)
  --drop-caches            cold reads after 'sync; echo 3 > /proc/sys/vm/drop_caches' (whole
                           machine) instead of posix_fadvise(DONTNEED) on the one file
  --bandwidth-mib 512      buffer of the memory read-bandwidth measurement
  --dir DIR / --keep       where the fixture and snapshots go / keep them
  --json FILE              every number`;

// ─── helpers ─────────────────────────────────────────────────────────────────────────────────

function xorshiftIds(n, vocab, seed) {
  const ids = [];
  let s = seed >>> 0 || 1;
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
/** BOS then seeded random ids (the same as the other benches' prompts). */
const promptIds = (n, vocab, bos) => [bos, ...xorshiftIds(n - 1, vocab, SEED)];
/** n new ids, the first differing from `avoid` (so a prompt diverges exactly there). */
function freshIds(n, vocab, seed, avoid) {
  const ids = xorshiftIds(n, vocab, seed);
  if (ids.length > 0 && ids[0] === avoid) ids[0] = (ids[0] + 1) % vocab;
  return ids;
}
function positiveInt(text, name) {
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${text}`);
  return n;
}
const result = (obj) => process.stdout.write(`RESULT ${JSON.stringify(obj)}\n`);
const peakRss = () => process.resourceUsage().maxRSS * 1024;
const note = (line) => process.stderr.write(`[resume] ${line}\n`);

/** Drops `file` from the page cache (or the whole cache with --drop-caches); returns the bytes still resident. */
function dropFromCache(file, global) {
  if (global) {
    const r = spawnSync('sh', ['-c', 'sync && echo 3 > /proc/sys/vm/drop_caches'], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`drop_caches failed: ${r.stderr}`);
  } else {
    spawnSync('sync', [file]);
    const r = spawnSync('dd', [`if=${file}`, 'iflag=nocache', 'count=0'], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`dd iflag=nocache failed: ${r.stderr}`);
  }
  return residentBytes(file);
}
function residentBytes(file) {
  const r = spawnSync('fincore', ['-b', '-n', '-o', 'RES', file], { encoding: 'utf8' });
  const n = Number(r.stdout?.trim());
  return r.status === 0 && Number.isFinite(n) ? n : null;
}

// ─── children: Longhand ──────────────────────────────────────────────────────────────────────

async function engine(path, threads, contextLength) {
  const { createEngineCore } = await import('../app/engine/engine.ts');
  const { GenerateParamsSchema, LoadOptionsSchema } = await import('../app/common/protocol.ts');
  const core = createEngineCore((line) => note(`engine: ${line}`));
  const info = await core.load(LoadOptionsSchema.parse({ modelPath: path, threads, contextLength, kvType: 'fp16', ...(opts['prefill-chunk'] ? { prefillChunk: positiveInt(opts['prefill-chunk'], '--prefill-chunk') } : {}) }));
  /** One generation: TTFT = wall time from the request to the first token. */
  const run = async (ids, params) => {
    const out = [];
    let done;
    let ttftMs;
    const t0 = performance.now();
    const p = GenerateParamsSchema.parse({ stopOnEos: false, sampling: { temperature: 0 }, ...params });
    for await (const e of core.generate({ ids }, p, new AbortController().signal)) {
      if (e.kind === 'token') {
        if (out.length === 0) ttftMs = performance.now() - t0;
        out.push(e.id);
      } else if (e.kind === 'done') done = e;
    }
    const wallMs = performance.now() - t0;
    if (!done || done.error || out.length === 0) throw new Error(`generation failed: ${JSON.stringify(done?.error ?? done?.stopReason)}`);
    return { ids: out, ttftMs, wallMs, engineTtftMs: done.timings.ttftMs, prefillMs: done.timings.prefillMs, policySwitchMs: done.timings.policySwitchMs, cache: done.cache, policy: done.policy, promptTokens: ids.length };
  };
  return { core, info, run };
}

async function childOursContinue(path, threads, draftN, suggest, vocab, bos) {
  const { core, run } = await engine(path, threads, draftN + 4 * suggest + 64);
  const draft = promptIds(draftN, vocab, bos);
  const steps = [];
  const c1 = await run(draft, { maxTokens: suggest });
  steps.push({ step: 'first Continue', ...c1 });
  const p2 = [...draft, ...c1.ids];
  const c2 = await run(p2, { maxTokens: suggest });
  steps.push({ step: 'second Continue', ...c2 });
  // policy switches with the cache kept: full → streaming → full
  const p3 = [...p2, ...c2.ids];
  const c3 = await run(p3, { maxTokens: suggest, policy: 'streaming' });
  steps.push({ step: 'switch full → streaming', ...c3 });
  const p4 = [...p3, ...c3.ids];
  const c4 = await run(p4, { maxTokens: suggest, policy: 'full' });
  steps.push({ step: 'switch streaming → full', ...c4 });
  await core.unload();
  result({ engine: 'longhand', threads, steps: steps.map(({ ids, ...s }) => ({ ...s, suggestion: ids })), peakRssBytes: peakRss() });
}

async function childOursMake(path, threads, N, file, vocab, bos, fill, context) {
  const ids = promptIds(N, vocab, bos);
  if (fill === 'prefill') {
    const { core, run } = await engine(path, threads, context);
    const g = await run(ids, { maxTokens: 1 });
    const saved = await core.saveSnapshot(file);
    await core.unload();
    result({ engine: 'longhand', threads, fill: 'prefill', tokens: saved.tokens, prefillMs: g.prefillMs, saveMs: saved.ms, bytes: saved.bytes, peakRssBytes: peakRss() });
    return;
  }
  const { loadModel } = await import('../app/engine/model/load-model.ts');
  const { createModelRunner } = await import('../app/engine/forward/model-runner.ts');
  const { CachedSequence } = await import('../app/engine/forward/cached-sequence.ts');
  const { saveSequenceSnapshot } = await import('../app/engine/forward/sequence-snapshot.ts');
  const { modelSha256 } = await import('../app/engine/forward/policy/infinigen-state.ts');
  const model = await loadModel(path);
  const h = model.hyper;
  const runner = await createModelRunner(model, { threads, contextLength: context, kvType: 'fp16', policy: 'full' });
  const real = Math.min(N, REAL_PREFIX);
  const t0 = performance.now();
  await runner.prefill(ids.slice(0, real));
  const prefillMs = performance.now() - t0;
  const t1 = performance.now();
  if (N > real) runner.appendRandomContextForBenchmark(N - real, SEED + N);
  const randomMs = performance.now() - t1;
  const sequence = new CachedSequence(runner);
  sequence.adoptRestored(ids); // the runner's pool holds N rows; these are their ids
  const s0 = performance.now();
  const sha = await modelSha256(model);
  const hashMs = performance.now() - s0;
  // the identity createEngineCore's snapshot calls compute for a 'full' load (engine.ts identity())
  const identity = { modelSha256: sha, architecture: h.architecture, layers: h.layers, heads: h.heads, kvHeads: h.kvHeads, headDim: h.headDim, vocabSize: h.vocabSize, kvType: runner.kvType, policy: runner.policy, knobs: {} };
  const w0 = performance.now();
  const { tokens, bytes } = await saveSequenceSnapshot(file, sequence, identity);
  const saveMs = performance.now() - w0;
  await runner.dispose();
  model.close();
  result({ engine: 'longhand', threads, fill: `prefill ${real} + random ${N - real}`, tokens, realPrefillMs: prefillMs, randomMs, modelHashMs: hashMs, saveMs, bytes, peakRssBytes: peakRss() });
}

/** Raw reads of `file` from the page cache: plain fh.read in 8 MiB chunks, and every section read + sha256-checked (the restore's reader, no import). */
async function warmReadPasses(file) {
  const { openSnapshotFile } = await import('../app/engine/kv/snapshot-file.ts');
  const fh = await open(file, 'r');
  const buf = Buffer.allocUnsafe(8 << 20);
  const r0 = performance.now();
  let total = 0;
  for (;;) {
    const { bytesRead } = await fh.read(buf, 0, buf.length, total);
    if (bytesRead === 0) break;
    total += bytesRead;
  }
  const readMs = performance.now() - r0;
  await fh.close();
  const reader = await openSnapshotFile(file);
  const s0 = performance.now();
  let into;
  for (const s of reader.sections) {
    if (!into || into.byteLength !== s.bytes) into = new Uint8Array(s.bytes);
    await reader.readSection(s.name, into);
  }
  const readCheckMs = performance.now() - s0;
  await reader.close();
  return { bytes: total, readMs, readCheckMs };
}

async function childOursRestore(path, threads, N, P, file, vocab, bos, context, globalDrop) {
  const { core, run } = await engine(path, threads, context);
  const ids = promptIds(N, vocab, bos);
  const out = { engine: 'longhand', threads, tokens: N, segment: Math.min(P, N) };
  // prefill segment A: the first P ids from an empty cache
  const a = await run(ids.slice(0, Math.min(P, N)), { maxTokens: 1, reusePrefix: false });
  out.prefillA = { tokens: Math.min(P, N), ms: a.prefillMs, wallMs: a.wallMs };
  // the first snapshot call after a load hashes the model file (the snapshot's identity): pay it here
  const tiny = join(dirname(file), `identity-${process.pid}.lhkv`);
  const w = await core.saveSnapshot(tiny);
  out.identitySave = { tokens: w.tokens, bytes: w.bytes, ms: w.ms };
  rmSync(tiny, { force: true });
  const restores = [];
  for (const kind of ['cold', 'cold', 'warm']) {
    const resident = kind === 'cold' ? dropFromCache(file, globalDrop) : residentBytes(file);
    const r = await core.loadSnapshot(file);
    restores.push({ kind, residentBefore: resident, tokens: r.tokens, bytes: r.bytes, ms: r.ms, mbPerS: r.bytes / 1e6 / (r.ms / 1000) });
  }
  out.restores = restores;
  out.warmPasses = await warmReadPasses(file);
  // a Continue right after the restore: N reused, one new token prefilled
  const after = await run([...ids, ...freshIds(1, vocab, SEED + 7, -1)], { maxTokens: 1 });
  out.afterRestore = { ttftMs: after.ttftMs, cache: after.cache };
  if (P < N) {
    // prefill segment B: the cache cut back to N − P, then P new ids at positions N − P .. N
    const b = await run([...ids.slice(0, N - P), ...freshIds(P, vocab, SEED + 11, ids[N - P])], { maxTokens: 1 });
    out.prefillB = { tokens: b.cache.prefilledTokens, reused: b.cache.reusedTokens, ms: b.prefillMs, wallMs: b.wallMs };
    out.prefillEstimateMs = (N / P) * ((a.prefillMs + b.prefillMs) / 2);
    out.prefillEstimated = true;
  } else {
    out.prefillEstimateMs = a.prefillMs;
    out.prefillEstimated = false;
  }
  await core.unload();
  out.peakRssBytes = peakRss();
  result(out);
}

// ─── children: llama.cpp ─────────────────────────────────────────────────────────────────────

async function llamaSequence(path, threads, contextSize) {
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
  // larger than what we feed: with contextSize == tokens llama.cpp would shift (drop the start)
  const context = await model.createContext({ contextSize, threads, batchSize: 512, flashAttention: false });
  if (context.contextSize < contextSize) throw new Error(`llama.cpp made a context of ${context.contextSize}, ${contextSize} asked`);
  const sequence = context.getSequence();
  const contextShift = { strategy: () => { throw new Error('llama.cpp: context shift requested'); } };
  const greedy = { generateNext: { token: true, options: { temperature: 0 } } };
  /** Evaluates `tokens` after the sequence's state and returns the greedy next token. */
  const next = async (tokens) => {
    const items = tokens.map((t, i) => (i === tokens.length - 1 ? [t, greedy] : t));
    const res = await sequence.controlledEvaluate(items, { contextShift });
    const tok = res[tokens.length - 1]?.next.token;
    if (tok === undefined || tok === null) throw new Error('llama.cpp returned no next token');
    return tok;
  };
  const dispose = async () => {
    await context.dispose();
    await model.dispose();
    await llama.dispose();
  };
  return { sequence, context, next, contextShift, dispose };
}

async function childLlamaContinue(path, threads, draftN, suggest, vocab, bos) {
  const { sequence, next, dispose } = await llamaSequence(path, threads, draftN + 4 * suggest + 64);
  /** A Continue on the same sequence: keep the common prefix (at most prompt − 1), evaluate the rest. */
  const cont = async (prompt) => {
    const t0 = performance.now();
    await sequence.adaptStateToTokens(prompt, false); // erases from the first token that differs
    if (sequence.nextTokenIndex >= prompt.length) await sequence.eraseContextTokenRanges([{ start: prompt.length - 1, end: sequence.nextTokenIndex }]);
    const reused = sequence.nextTokenIndex;
    let tok = await next(prompt.slice(reused));
    const ttftMs = performance.now() - t0;
    const ids = [tok];
    while (ids.length < suggest) ids.push((tok = await next([tok])));
    return { ttftMs, wallMs: performance.now() - t0, cache: { reusedTokens: reused, prefilledTokens: prompt.length - reused }, promptTokens: prompt.length, ids };
  };
  const draft = promptIds(draftN, vocab, bos);
  const c1 = await cont(draft);
  const c2 = await cont([...draft, ...c1.ids]);
  await dispose();
  result({ engine: 'llama.cpp', threads, steps: [{ step: 'first Continue', ...c1 }, { step: 'second Continue', ...c2 }].map(({ ids, ...s }) => ({ ...s, suggestion: ids })), peakRssBytes: peakRss() });
}

async function childLlamaMake(path, threads, N, P, file, vocab, bos, context) {
  const { sequence, contextShift, dispose } = await llamaSequence(path, threads, context);
  const ids = promptIds(N, vocab, bos);
  const chunks = [];
  const t0 = performance.now();
  for (let at = 0; at < N; at += P) {
    const c0 = performance.now();
    await sequence.evaluateWithoutGeneratingNewTokens(ids.slice(at, Math.min(N, at + P)), { contextShift });
    chunks.push({ from: at, to: Math.min(N, at + P), ms: performance.now() - c0 });
    note(`llama.cpp prefill ${Math.min(N, at + P)}/${N}: ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  }
  const prefillMs = performance.now() - t0;
  if (sequence.nextTokenIndex !== N) throw new Error(`llama.cpp holds ${sequence.nextTokenIndex} tokens, ${N} evaluated`);
  const s0 = performance.now();
  const { fileSize } = await sequence.saveStateToFile(file);
  const saveMs = performance.now() - s0;
  await dispose();
  result({ engine: 'llama.cpp', threads, fill: 'prefill', tokens: N, prefillMs, chunks, saveMs, bytes: fileSize, peakRssBytes: peakRss() });
}

async function childLlamaRestore(path, threads, N, P, file, vocab, bos, context, globalDrop) {
  const { sequence, next, dispose } = await llamaSequence(path, threads, context);
  const ids = promptIds(N, vocab, bos);
  const out = { engine: 'llama.cpp', threads, tokens: N, segment: Math.min(P, N) };
  const a0 = performance.now();
  await next(ids.slice(0, Math.min(P, N)));
  out.prefillA = { tokens: Math.min(P, N), ms: performance.now() - a0 };
  await sequence.clearHistory();
  const bytes = statSync(file).size;
  const restores = [];
  for (const kind of ['cold', 'cold', 'warm']) {
    const resident = kind === 'cold' ? dropFromCache(file, globalDrop) : residentBytes(file);
    const r0 = performance.now();
    await sequence.loadStateFromFile(file, { acceptRisk: true });
    const ms = performance.now() - r0;
    if (sequence.nextTokenIndex !== N) throw new Error(`llama.cpp restored ${sequence.nextTokenIndex} tokens, ${N} saved`);
    restores.push({ kind, residentBefore: resident, tokens: sequence.nextTokenIndex, bytes, ms, mbPerS: bytes / 1e6 / (ms / 1000) });
  }
  out.restores = restores;
  const t0 = performance.now();
  await next(freshIds(1, vocab, SEED + 7, -1));
  out.afterRestore = { ttftMs: performance.now() - t0, cache: { reusedTokens: N, prefilledTokens: 1 } };
  if (P < N) {
    await sequence.eraseContextTokenRanges([{ start: N - P, end: sequence.nextTokenIndex }]);
    const reused = sequence.nextTokenIndex;
    const b0 = performance.now();
    await next(freshIds(P, vocab, SEED + 11, ids[N - P]));
    out.prefillB = { tokens: P, reused, ms: performance.now() - b0 };
    out.prefillEstimateMs = (N / P) * ((out.prefillA.ms + out.prefillB.ms) / 2);
    out.prefillEstimated = true;
  } else {
    out.prefillEstimateMs = out.prefillA.ms;
    out.prefillEstimated = false;
  }
  await dispose();
  out.peakRssBytes = peakRss();
  result(out);
}

async function childInspect(path) {
  const { loadModel } = await import('../app/engine/model/load-model.ts');
  const model = await loadModel(path);
  try {
    const h = model.hyper;
    const bosMeta = model.tokenizer.kind === 'gguf' ? model.tokenizer.metadata.get('tokenizer.ggml.bos_token_id') : undefined;
    result({ hyper: { dim: h.hiddenSize, layers: h.layers, heads: h.heads, kvHeads: h.kvHeads, headDim: h.headDim, ffn: h.ffnSize, vocab: h.vocabSize, context: h.contextLength }, bos: bosMeta === undefined ? 1 : Number(bosMeta) });
  } finally {
    model.close();
  }
}

// ─── parent ──────────────────────────────────────────────────────────────────────────────────

function runChild(args, { tsx = true } = {}) {
  const engine = args[0].startsWith('llama') ? 'llama.cpp' : 'longhand';
  const nodeArgs = [...(tsx ? ['--import', 'tsx'] : []), SELF, '--child', ...args];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, nodeArgs, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => {
      stderr += d;
      for (const line of String(d).split('\n')) if (line.startsWith('[resume] llama.cpp prefill')) console.log(`  ${line.slice(9)}`);
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
      if (code === 0 && line) resolve(JSON.parse(line.slice(7)));
      else resolve({ engine, error: `exit ${code ?? signal}: ${(stderr.trim().split('\n').slice(-6).join(' | ') || stdout.trim().slice(-400)).slice(0, 1200)}` });
    });
  });
}

/** dd of `file` to /dev/null in 8 MiB blocks: { bytes, s, mbPerS }. */
function ddRead(file, flags = []) {
  const r = spawnSync('dd', [`if=${file}`, 'of=/dev/null', 'bs=8M', ...flags], { encoding: 'utf8' });
  const m = /^(\d+) bytes.* copied, ([\d.e+-]+) s/m.exec(r.stderr ?? '');
  if (r.status !== 0 || !m) return { error: (r.stderr ?? '').trim().slice(-300) };
  const bytes = Number(m[1]);
  const s = Number(m[2]);
  return { bytes, s, mbPerS: bytes / 1e6 / s };
}

function diskBandwidth(file, globalDrop) {
  const residentCold = dropFromCache(file, globalDrop);
  const cold = ddRead(file);
  dropFromCache(file, globalDrop);
  const direct = ddRead(file, ['iflag=direct']);
  ddRead(file); // into the page cache
  const warm = ddRead(file);
  return { file, residentCold, cold, direct, warm };
}

function sha256Speed() {
  const buf = Buffer.alloc(256 << 20, 7);
  const t0 = performance.now();
  createHash('sha256').update(buf).digest();
  const ms = performance.now() - t0;
  return (buf.length / 1e6) / (ms / 1000);
}

const fmt = (x, d = 1) => (x === undefined || x === null || !Number.isFinite(x) ? '—' : x.toFixed(d));
const ms = (x) => (Number.isFinite(x) ? (x >= 10000 ? `${(x / 1000).toFixed(1)} s` : `${x.toFixed(x < 100 ? 1 : 0)} ms`) : '—');
const mb = (b) => (Number.isFinite(b) ? `${(b / 2 ** 20).toFixed(0)} MiB` : '—');
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(a / b < 0.1 ? 3 : 2)}x` : '—');
const pct = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${((100 * a) / b).toFixed(a / b < 0.1 ? 2 : 1)}%` : '—');
const reuse = (c) => (c ? `reused ${c.reusedTokens}, prefilled ${c.prefilledTokens}${c.dropped ? `, dropped: ${c.dropped}` : ''}` : '—');

async function parent() {
  if (opts.help) {
    console.log(USAGE);
    return;
  }
  const threadList = opts.threads.split(',').map((s) => positiveInt(s, '--threads'));
  const draftN = positiveInt(opts.draft, '--draft');
  const suggest = positiveInt(opts.suggest, '--suggest');
  const N = positiveInt(opts['snapshot-tokens'], '--snapshot-tokens');
  const P = Math.min(N, positiveInt(opts['prefill-tokens'], '--prefill-tokens'));
  const fill = opts['snapshot-fill'];
  if (fill !== 'random' && fill !== 'prefill') throw new Error(`--snapshot-fill must be random or prefill, got ${fill}`);
  const llama = !opts['skip-llama'];
  const globalDrop = opts['drop-caches'];
  const bwMib = positiveInt(opts['bandwidth-mib'], '--bandwidth-mib');
  const context = N + Math.max(128, 4 * suggest);
  const maxThreads = Math.max(...threadList);
  const sizes = { type: opts.type, dim: positiveInt(opts.dim, '--dim'), layers: positiveInt(opts.layers, '--layers'), heads: positiveInt(opts.heads, '--heads'), kvHeads: positiveInt(opts['kv-heads'], '--kv-heads'), ffn: positiveInt(opts.ffn, '--ffn'), vocab: positiveInt(opts.vocab, '--vocab') };

  const native = await import('../native/index.js');
  const started = new Date();
  const loadBefore = loadavg();
  console.log(`resume bench ${started.toISOString()}: ${opts.model ?? `fixture ${JSON.stringify(sizes)}`}; threads ${threadList.join(',')}; draft ${draftN}, suggestion ${suggest}, snapshot ${N} (${fill}), prefill segments ${P}${llama ? ' + llama.cpp' : ''}; load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);
  const bwThreads = [...new Set([1, ...threadList])].sort((a, b) => a - b);
  const bw = {};
  for (const t of bwThreads) bw[t] = native.measureReadBandwidth(bwMib * 2 ** 20, 5, t);
  console.log(`memory read bandwidth (GB/s): ${bwThreads.map((t) => `${t}t ${fmt(bw[t], 2)}`).join(', ')}`);
  // can this sandbox drop the page cache? writing 4 only turns the kernel's message off (drops nothing)
  const dropAllowed = spawnSync('sh', ['-c', 'echo 4 > /proc/sys/vm/drop_caches'], { encoding: 'utf8' }).status === 0;

  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'longhand-resume-'));
  const report = { started: started.toISOString(), sizes: opts.model ? undefined : sizes, model: opts.model, threads: threadList, draft: draftN, suggest, snapshotTokens: N, prefillSegment: P, snapshotFill: fill, memoryBandwidthGBs: bw, dropCachesWritable: dropAllowed, coldBy: globalDrop ? 'drop_caches' : 'posix_fadvise(DONTNEED) on the file (dd iflag=nocache)', continue: [], restore: [] };
  const log = (label, r, show) => console.log(`${label}: ${r.error ?? show(r)}`);
  try {
    let path = opts.model;
    if (!path) {
      path = join(dir, `resume-${opts.type}-d${sizes.dim}-l${sizes.layers}.gguf`);
      const w0 = performance.now();
      const write = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'test/fixtures/cli.ts'), 'gguf', path, '--type', opts.type, '--dim', `${sizes.dim}`, '--layers', `${sizes.layers}`, '--heads', `${sizes.heads}`, '--kv-heads', `${sizes.kvHeads}`, '--ffn', `${sizes.ffn}`, '--vocab', `${sizes.vocab}`, '--context', `${Math.max(4096, context, draftN + 4 * suggest + 64)}`], { cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 24 });
      if (write.status !== 0) throw new Error(`writing the fixture failed: ${write.stderr}`);
      console.log(`wrote ${path} (${mb(statSync(path).size)}) in ${((performance.now() - w0) / 1000).toFixed(0)} s`);
    }
    const info = await runChild(['inspect', '--model', path]);
    if (info.error) throw new Error(`inspect: ${info.error}`);
    report.info = info;
    report.modelBytes = statSync(path).size;
    const vocab = `${info.hyper.vocab}`;
    const bos = `${info.bos}`;
    const common = ['--model', path, '--vocab', vocab, '--bos', bos, '--draft', `${draftN}`, '--suggest', `${suggest}`, '--snapshot-tokens', `${N}`, '--prefill-tokens', `${P}`, '--context', `${context}`, ...(opts['prefill-chunk'] ? ['--prefill-chunk', opts['prefill-chunk']] : []), ...(globalDrop ? ['--drop-caches'] : [])];

    // 1 + 4: Continue twice, then the policy switches
    for (const t of threadList) {
      const ours = await runChild(['ours-continue', ...common, '--threads', `${t}`]);
      ours.threads = t;
      log(`Longhand continue ${t}t`, ours, (r) => r.steps.map((s) => `${s.step} TTFT ${ms(s.ttftMs)} (${reuse(s.cache)})`).join('; '));
      report.continue.push(ours);
      if (llama) {
        const l = await runChild(['llama-continue', ...common, '--threads', `${t}`], { tsx: false });
        l.threads = t;
        log(`llama.cpp continue ${t}t`, l, (r) => r.steps.map((s) => `${s.step} TTFT ${ms(s.ttftMs)} (${reuse(s.cache)})`).join('; '));
        report.continue.push(l);
      }
    }

    // 2 + 3: snapshot files, disk, restores
    const ourFile = join(dir, `snapshot-${N}.lhkv`);
    const llamaFile = join(dir, `llama-state-${N}.bin`);
    report.make = {};
    report.make.ours = await runChild(['ours-make', ...common, '--threads', `${maxThreads}`, '--file', ourFile, '--snapshot-fill', fill]);
    log(`Longhand snapshot (${maxThreads}t)`, report.make.ours, (r) => `${r.tokens} tokens, ${mb(r.bytes)}, saved in ${ms(r.saveMs)} (${r.fill})`);
    if (llama) {
      report.make.llama = await runChild(['llama-make', ...common, '--threads', `${maxThreads}`, '--file', llamaFile], { tsx: false });
      log(`llama.cpp state (${maxThreads}t)`, report.make.llama, (r) => `${r.tokens} tokens prefilled in ${ms(r.prefillMs)}, ${mb(r.bytes)}, saved in ${ms(r.saveMs)}`);
    }
    report.disk = {};
    if (existsSync(ourFile)) report.disk.ours = diskBandwidth(ourFile, globalDrop);
    if (llama && existsSync(llamaFile)) report.disk.llama = diskBandwidth(llamaFile, globalDrop);
    report.sha256MBs = sha256Speed();
    for (const [k, d] of Object.entries(report.disk)) console.log(`disk read of the ${k === 'ours' ? 'snapshot' : 'llama.cpp state'} (${mb(d.cold.bytes)}): cold ${fmt(d.cold.mbPerS, 0)} MB/s (resident before: ${d.residentCold ?? '?'} B), O_DIRECT ${fmt(d.direct.mbPerS, 0)} MB/s, page cache ${fmt(d.warm.mbPerS, 0)} MB/s`);
    for (const t of threadList) {
      if (existsSync(ourFile)) {
        const r = await runChild(['ours-restore', ...common, '--threads', `${t}`, '--file', ourFile]);
        r.threads = t;
        log(`Longhand restore ${t}t`, r, (x) => `${x.restores.map((y) => `${y.kind} ${ms(y.ms)}`).join(', ')}; prefill ${N} ${x.prefillEstimated ? '≈' : ''}${ms(x.prefillEstimateMs)}`);
        report.restore.push(r);
      }
      if (llama && existsSync(llamaFile)) {
        const r = await runChild(['llama-restore', ...common, '--threads', `${t}`, '--file', llamaFile], { tsx: false });
        r.threads = t;
        log(`llama.cpp restore ${t}t`, r, (x) => `${x.restores.map((y) => `${y.kind} ${ms(y.ms)}`).join(', ')}; prefill ${N} ${x.prefillEstimated ? '≈' : ''}${ms(x.prefillEstimateMs)}`);
        report.restore.push(r);
      }
    }
  } finally {
    if (!opts.keep && opts.dir === undefined) rmSync(dir, { recursive: true, force: true });
    else console.log(`kept ${dir}`);
  }
  const loadAfter = loadavg();
  report.loadAverage = { before: loadBefore, after: loadAfter };
  printTables(report);
  console.log('');
  console.log(`load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${loadAfter.map((x) => x.toFixed(2)).join(' ')}; ${((Date.now() - started.getTime()) / 1000).toFixed(0)} s in all`);
  if (opts.json) {
    writeFileSync(opts.json, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`wrote ${opts.json}`);
  }
}

function printTables(report) {
  const h = report.info?.hyper;
  const { draft, suggest, snapshotTokens: N, prefillSegment: P } = report;
  const cell = (r) => (r?.error ? `failed: ${r.error.replaceAll('|', '/').slice(0, 200)}` : '—');
  console.log('');
  console.log(`### resume — ${report.model ?? `${report.sizes.type} fixture`}${h ? `: dim ${h.dim}, ${h.layers} layers, ${h.heads} heads / ${h.kvHeads} KV heads, vocab ${h.vocab}` : ''}`);
  console.log('');
  console.log(`**Continue twice on a ${draft}-token draft** (${suggest} greedy tokens each; TTFT = request → first token, wall)`);
  console.log('');
  console.log('| threads | step | Longhand TTFT | Longhand cache | llama.cpp TTFT | llama.cpp cache | Longhand / llama.cpp |');
  console.log('|---|---|---|---|---|---|---|');
  for (const t of report.threads) {
    const o = report.continue.find((r) => r.threads === t && r.engine === 'longhand');
    const l = report.continue.find((r) => r.threads === t && r.engine === 'llama.cpp');
    const errs = report.continue.filter((r) => r.threads === t && r.error);
    for (const e of errs) console.log(`| ${t} | **${e.engine} failed** | ${cell(e)} | | | | |`);
    const os = o?.steps ?? [];
    const ls = l?.steps ?? [];
    for (let i = 0; i < 2; i++) {
      const a = os[i];
      const b = ls[i];
      console.log(`| ${t} | ${a?.step ?? b?.step ?? '—'} (${a?.promptTokens ?? b?.promptTokens ?? '?'} tokens) | ${ms(a?.ttftMs)} | ${reuse(a?.cache)} | ${ms(b?.ttftMs)} | ${reuse(b?.cache)} | ${ratio(a?.ttftMs, b?.ttftMs)} |`);
    }
    console.log(`| ${t} | second / first (target ≤ 5%) | ${pct(os[1]?.ttftMs, os[0]?.ttftMs)} | | ${pct(ls[1]?.ttftMs, ls[0]?.ttftMs)} | | |`);
  }
  console.log('');
  console.log(`**Snapshot restore vs prefill, ${N} tokens** (cold = the file dropped from the page cache first: ${report.coldBy}; warm = from the page cache)`);
  console.log('');
  console.log('| threads | metric | Longhand | llama.cpp | Longhand / llama.cpp |');
  console.log('|---|---|---|---|---|');
  const mk = report.make ?? {};
  const sz = (x) => (x?.bytes ? `${mb(x.bytes)}` : cell(x));
  console.log(`| — | snapshot file (${N} tokens) | ${sz(mk.ours)} | ${sz(mk.llama)} | ${ratio(mk.ours?.bytes, mk.llama?.bytes)} |`);
  console.log(`| ${Math.max(...report.threads)} | save | ${ms(mk.ours?.saveMs)} (${fmt(mk.ours?.bytes / 1e6 / (mk.ours?.saveMs / 1000), 0)} MB/s) | ${ms(mk.llama?.saveMs)} (${fmt(mk.llama?.bytes / 1e6 / (mk.llama?.saveMs / 1000), 0)} MB/s) | ${ratio(mk.ours?.saveMs, mk.llama?.saveMs)} |`);
  if (mk.llama?.prefillMs) console.log(`| ${Math.max(...report.threads)} | llama.cpp's real prefill of ${N} (to make its state) | — | ${ms(mk.llama.prefillMs)} | — |`);
  for (const t of report.threads) {
    const o = report.restore.find((r) => r.threads === t && r.engine === 'longhand');
    const l = report.restore.find((r) => r.threads === t && r.engine === 'llama.cpp');
    for (const e of report.restore.filter((r) => r.threads === t && r.error)) console.log(`| ${t} | **${e.engine} failed** | ${cell(e)} | | |`);
    const seg = (x) => (x ? `${ms(x.prefillA?.ms)} / ${x.prefillB ? ms(x.prefillB.ms) : '—'}` : '—');
    console.log(`| ${t} | prefill segments: first ${P} / last ${P} positions | ${seg(o)} | ${seg(l)} | ${ratio(o?.prefillA?.ms, l?.prefillA?.ms)} / ${ratio(o?.prefillB?.ms, l?.prefillB?.ms)} |`);
    const est = (x) => (x ? `${x.prefillEstimated ? '≈ ' : ''}${ms(x.prefillEstimateMs)}` : '—');
    console.log(`| ${t} | prefill ${N}${(o ?? l)?.prefillEstimated ? ` (estimated: ${N}/${P} · mean of the segments)` : ' (measured)'} | ${est(o)} | ${est(l)} | ${ratio(o?.prefillEstimateMs, l?.prefillEstimateMs)} |`);
    const rs = (x, i) => x?.restores?.[i];
    const rcell = (y) => (y ? `${ms(y.ms)} (${fmt(y.mbPerS, 0)} MB/s)` : '—');
    for (const [i, label] of [[0, 'restore, cold (1st)'], [1, 'restore, cold (2nd)'], [2, 'restore, warm']]) {
      console.log(`| ${t} | ${label} | ${rcell(rs(o, i))} | ${rcell(rs(l, i))} | ${ratio(rs(o, i)?.ms, rs(l, i)?.ms)} |`);
    }
    const best = (x) => (x?.restores ? Math.min(x.restores[0].ms, x.restores[1].ms) : undefined);
    console.log(`| ${t} | prefill / cold restore (best of 2; target ≥ 10x) | ${ratio(o?.prefillEstimateMs, best(o))} | ${ratio(l?.prefillEstimateMs, best(l))} | — |`);
    console.log(`| ${t} | prefill / warm restore | ${ratio(o?.prefillEstimateMs, rs(o, 2)?.ms)} | ${ratio(l?.prefillEstimateMs, rs(l, 2)?.ms)} | — |`);
    console.log(`| ${t} | TTFT of a Continue right after the restore | ${ms(o?.afterRestore?.ttftMs)} (${reuse(o?.afterRestore?.cache)}) | ${ms(l?.afterRestore?.ttftMs)} | ${ratio(o?.afterRestore?.ttftMs, l?.afterRestore?.ttftMs)} |`);
  }
  const d = report.disk ?? {};
  const dcell = (x, k) => (x?.[k]?.mbPerS ? `${fmt(x[k].mbPerS, 0)} MB/s` : '—');
  console.log(`| — | disk read of that file, cold (buffered, dd 8 MiB) | ${dcell(d.ours, 'cold')} | ${dcell(d.llama, 'cold')} | — |`);
  console.log(`| — | disk read, O_DIRECT | ${dcell(d.ours, 'direct')} | ${dcell(d.llama, 'direct')} | — |`);
  console.log(`| — | read from the page cache | ${dcell(d.ours, 'warm')} | ${dcell(d.llama, 'warm')} | — |`);
  for (const t of report.threads) {
    const o = report.restore.find((r) => r.threads === t && r.engine === 'longhand');
    const l = report.restore.find((r) => r.threads === t && r.engine === 'llama.cpp');
    const c = (x, y) => (x?.restores && y ? `${pct(x.restores[1].mbPerS, y.cold?.mbPerS)} of cold, ${pct(x.restores[1].mbPerS, y.direct?.mbPerS)} of O_DIRECT; warm ${pct(x.restores[2].mbPerS, y.warm?.mbPerS)} of page cache` : '—');
    console.log(`| ${t} | restore MB/s vs disk (2nd cold; warm) | ${c(o, d.ours)} | ${c(l, d.llama)} | — |`);
  }
  const o1 = report.restore.find((r) => r.engine === 'longhand' && r.warmPasses);
  if (o1) {
    const wp = o1.warmPasses;
    console.log('');
    console.log(`Where a warm Longhand restore goes (${o1.threads}t, ${mb(wp.bytes)}): plain read of the file from the page cache ${ms(wp.readMs)} (${fmt(wp.bytes / 1e6 / (wp.readMs / 1000), 0)} MB/s); read + sha256 check of every section ${ms(wp.readCheckMs)}; the whole restore (+ import into the pool) ${ms(o1.restores[2].ms)}. sha256 alone: ${fmt(report.sha256MBs, 0)} MB/s on one core; memory read bandwidth ${fmt(report.memoryBandwidthGBs[1], 1)} GB/s (1t). The first snapshot call after a load hashes the model file (${mb(report.modelBytes)}) for the snapshot's identity: ${ms(o1.identitySave?.ms)} here (paid before the restores, not in them).`);
  }
  console.log('');
  console.log('**Policy switch with the cache kept** (Longhand; each step a Continue on the previous prompt + its suggestion)');
  console.log('');
  console.log('| threads | step | prompt tokens | policySwitchMs (target < 1 s) | TTFT | cache |');
  console.log('|---|---|---|---|---|---|');
  for (const t of report.threads) {
    const o = report.continue.find((r) => r.threads === t && r.engine === 'longhand');
    for (const s of (o?.steps ?? []).slice(2)) console.log(`| ${t} | ${s.step} | ${s.promptTokens} | ${fmt(s.policySwitchMs, 2)} ms | ${ms(s.ttftMs)} | ${reuse(s.cache)} |`);
  }
  console.log('');
  const mko = mk.ours;
  console.log(`Notes: Longhand's snapshot was made at ${Math.max(...report.threads)} threads by ${mko?.fill === 'prefill' ? 'prefilling every token through the core (core.saveSnapshot)' : `${mko?.fill ?? '?'} (runner.appendRandomContextForBenchmark; the file written by saveSequenceSnapshot with the core's identity) — restore cost depends on the bytes, not the values`}; llama.cpp's state by a real prefill (sequence.saveStateToFile), restored with sequence.loadStateFromFile into a context of ${N + 128}+ tokens. ${(report.restore[0] ?? {}).prefillEstimated ? `Prefill of ${N} is estimated from two measured segments of ${P} tokens (positions 0–${P} and ${N - P}–${N}, the latter after a restore cut back to ${N - P}), assuming per-token cost affine in position.` : ''} drop_caches writable here: ${report.dropCachesWritable ? 'yes' : 'no'}. Streaming decodes attend a subset, so its tokens are not reused under full (recomputed: see the last row's prefilled count).`);
}

async function child() {
  const path = opts.model;
  if (!path) throw new Error('--model is required in child mode');
  if (opts.child === 'inspect') return childInspect(path);
  const threads = positiveInt(opts.threads, '--threads');
  const vocab = positiveInt(opts.vocab, '--vocab');
  const bos = Number(opts.bos);
  const draftN = positiveInt(opts.draft, '--draft');
  const suggest = positiveInt(opts.suggest, '--suggest');
  const N = positiveInt(opts['snapshot-tokens'], '--snapshot-tokens');
  const P = positiveInt(opts['prefill-tokens'], '--prefill-tokens');
  const context = positiveInt(opts.context, '--context');
  const globalDrop = opts['drop-caches'];
  switch (opts.child) {
    case 'ours-continue':
      return childOursContinue(path, threads, draftN, suggest, vocab, bos);
    case 'llama-continue':
      return childLlamaContinue(path, threads, draftN, suggest, vocab, bos);
    case 'ours-make':
      return childOursMake(path, threads, N, opts.file, vocab, bos, opts['snapshot-fill'], context);
    case 'llama-make':
      return childLlamaMake(path, threads, N, P, opts.file, vocab, bos, context);
    case 'ours-restore':
      return childOursRestore(path, threads, N, P, opts.file, vocab, bos, context, globalDrop);
    case 'llama-restore':
      return childLlamaRestore(path, threads, N, P, opts.file, vocab, bos, context, globalDrop);
    default:
      throw new Error(`unknown child ${opts.child}`);
  }
}

try {
  await (opts.child ? child() : parent());
} catch (error) {
  console.error(`resume: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
}
