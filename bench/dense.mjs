// Dense decoding benchmark: Longhand's engine against llama.cpp (node-llama-cpp) on the same GGUF
// file, same threads, in one run. Not part of `npm test`.
//
//   node --import tsx bench/dense.mjs [--family llama|qwen3|gemma3|phi3|qwen3moe|gpt-oss|qwen35|qwen35moe]
//        [--types Q8_0,Q4_0] [--layers N] [--threads 1,2] [--kv-heads 32] [--steps 32] [--long 2048]
//        [--quick] [--keep] [--json FILE] [--dir DIR] [--dense auto|native|onnx]
//        [--cpu-level portable|avx2|avx512|amx]
//
// Mixture-of-experts and hybrid families (issues 31, 32; bench/README.md gives the file sizes and
// the --layers cuts that fit a 24 GB machine):
//   qwen3moe   Qwen3-30B-A3B-like (preset qwen3-30b-a3b): 48 layers, 128 experts top-8 of 768;
//              default types Q4_K_M,MXFP4_MOE
//   gpt-oss    gpt-oss-20b-like (preset gpt-oss-20b): 24 layers alternating window 128 / full, sinks,
//              32 experts top-4 of 2880; types F32, F16, Q8_0, MXFP4_MOE (default)
//   qwen35     Qwen3.5-9B-like (preset qwen3.5-9b): 32 layers, 3 Gated DeltaNet : 1 full; Q4_K,Q8_0
//   qwen35moe  Qwen3.5-35B-A3B-like (preset qwen3.5-35b-a3b): 40 layers, 256 experts top-8 + shared; Q4_K
// For a MoE file the bound counts the dense weights whole and the k routed experts' share of the
// stacked expert tensors (active parameters × bytes per weight), and the table compares it with the
// expert bytes Longhand's stages counted each step (ModelRunner.lastExperts); the peak RSS rows are
// explained under the table. A Gated DeltaNet layer counts its recurrent state in place of KV rows.
// --long N: the second decode context (default 2048; 4096 for issue 31's decode @4096); JSON keys
// decodeLong* hold its numbers.
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
  // mixture-of-experts and hybrid families (issues 31, 32): their full depth does not fit a 24 GB
  // machine at every type, so --layers cuts them (bench/README.md gives the sizes)
  qwen3moe: {
    label: 'Qwen3-30B-A3B-like (hidden 2048, 48 layers, 32 heads / 4 KV heads, head_dim 128, 128 experts, top-8, expert ffn 768, vocab 151936, untied)',
    quickLabel: 'Qwen3-MoE quick (qwen3moe-tiny: hidden 256, 3 layers, 4 heads / 2 KV heads, 16 experts, top-4, expert ffn 256, vocab 151936, tied)',
    types: ['F32', 'F16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q4_K_M', 'Q5_K_M', 'Q6_K', 'MXFP4_MOE'],
    defaultTypes: 'Q4_K_M,MXFP4_MOE',
    layers: 48,
    quickLayers: 3,
    writerArgs: (type, layers, quick) => ['--arch', 'qwen3moe', '--type', type, '--preset', quick ? 'qwen3moe-tiny' : 'qwen3-30b-a3b', ...(layers ? ['--layers', `${layers}`] : [])],
  },
  'gpt-oss': {
    label: 'gpt-oss-20b-like (hidden 2880, 24 layers alternating window 128 / full, 64 heads / 8 KV heads, head_dim 64, sinks, YaRN, 32 experts, top-4, expert ffn 2880, vocab 201088, untied)',
    quickLabel: 'gpt-oss quick (gpt-oss-tiny: hidden 128, 4 layers alternating window 128 / full, 8 heads / 2 KV heads, head_dim 64, 32 experts, top-4, expert ffn 128, vocab 201088)',
    types: ['F32', 'F16', 'Q8_0', 'MXFP4_MOE'],
    defaultTypes: 'MXFP4_MOE',
    layers: 24,
    quickLayers: 4,
    writerArgs: (type, layers, quick) => ['--arch', 'gpt-oss', '--type', type, '--preset', quick ? 'gpt-oss-tiny' : 'gpt-oss-20b', ...(layers ? ['--layers', `${layers}`] : [])],
  },
  qwen35: {
    label: 'Qwen3.5-9B-like (hidden 4096, 32 layers: 3 Gated DeltaNet : 1 gated full attention, 16 heads / 4 KV heads of 256, linear 16 key / 32 value heads of 128, ffn 12288, Qwen3 vocab 151936)',
    quickLabel: 'Qwen3.5 quick (qwen35-tiny: hidden 256, 8 layers: 3 linear : 1 full, 4 heads / 2 KV heads of 64, linear 2 / 4 heads of 64, ffn 512, Qwen3 vocab 151936)',
    types: ['F32', 'F16', 'Q8_0', 'Q4_K'],
    defaultTypes: 'Q4_K,Q8_0',
    layers: 32,
    quickLayers: 8,
    writerArgs: (type, layers, quick) => ['--arch', 'qwen35', '--type', type, '--preset', quick ? 'qwen35-tiny' : 'qwen3.5-9b', ...(layers ? ['--layers', `${layers}`] : [])],
  },
  qwen35moe: {
    label: 'Qwen3.5-35B-A3B-like (hidden 2048, 40 layers: 3 Gated DeltaNet : 1 gated full attention, 16 heads / 2 KV heads of 256, linear 16 / 32 heads of 128, 256 experts, top-8, expert ffn 512 + shared 512, Qwen3 vocab 151936)',
    quickLabel: 'Qwen3.5-MoE quick (qwen35moe-tiny: hidden 256, 8 layers: 3 linear : 1 full, 16 experts, top-4, expert ffn 256 + shared 256, Qwen3 vocab 151936)',
    types: ['F32', 'F16', 'Q8_0', 'Q4_K'],
    defaultTypes: 'Q4_K',
    layers: 40,
    quickLayers: 8,
    writerArgs: (type, layers, quick) => ['--arch', 'qwen35moe', '--type', type, '--preset', quick ? 'qwen35moe-tiny' : 'qwen3.5-35b-a3b', ...(layers ? ['--layers', `${layers}`] : [])],
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
    long: { type: 'string', default: '2048' },
    // child mode
    child: { type: 'string' },
    model: { type: 'string' },
    vocab: { type: 'string' },
    bos: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});

// the second decode context (--long: 2048 by default, 4096 for the MoE issue's decode @4096) and the context both engines get
const LONG = Number(opts.long);
if (!Number.isInteger(LONG) || LONG <= PROMPT + 64) throw new Error(`--long must be an integer above ${PROMPT + 64}, got ${opts.long}`);
const CONTEXT = LONG + 64;

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

/**
 * Bytes of file-backed pages resident in this process now (Linux /proc/self/status RssFile): the
 * pages of the mapped model file it touched (plus its code's), the part of RSS a mixture-of-experts
 * file's untouched experts stay out of. Undefined where /proc is not.
 */
function rssFileBytes() {
  try {
    const kib = /^RssFile:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
    return kib === undefined ? undefined : Number(kib) * 1024;
  } catch {
    return undefined;
  }
}

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
    const h = model.hyper;
    // mixture of experts: the stacked ffn_*_exps tensors (weights and gpt-oss's biases), of which a
    // token reads expertsUsed of `experts` rows; the routers (ffn_gate_inp), read whole by every token
    const moe = h.moe;
    let expertBytes = 0; // every ffn_*_exps tensor of the file
    let expertBytesPerToken = 0; // what one token reads of them: k/E
    let routerBytes = 0;
    for (const [name, t] of model.tensors) {
      const n = t.bytes().byteLength;
      parameters += t.elements;
      dtypes[t.dtype] = (dtypes[t.dtype] ?? 0) + n;
      const expert = moe !== undefined && /\.ffn_(gate|up|down)_exps\./.test(name);
      if (name === 'token_embd.weight') embedBytes = n;
      else if (expert) {
        expertBytes += n;
        expertBytesPerToken += (n / moe.experts) * moe.expertsUsed;
      } else weightBytes += n;
      if (moe !== undefined && name.endsWith('.ffn_gate_inp.weight')) routerBytes += n;
      if (name === 'output.weight' || (tied && name === 'token_embd.weight')) headMacs[t.dtype] = (headMacs[t.dtype] ?? 0) + t.elements;
      else if (name.startsWith('blk.') && t.shape.length === 2 && t.shape[0] > 1 && t.shape[1] > 1) layerMacs[t.dtype] = (layerMacs[t.dtype] ?? 0) + t.elements;
      // a token multiplies by its k experts' rows of a stacked 3-D expert matrix
      else if (expert && t.shape.length === 3) layerMacs[t.dtype] = (layerMacs[t.dtype] ?? 0) + (t.elements / moe.experts) * moe.expertsUsed;
    }
    // the engine's own count (`longhand inspect`'s moe.expertBytesPerToken: routers + k/E of the expert weights)
    let engineExpertBytesPerToken;
    if (moe !== undefined) {
      const { inspectModel } = await import('../app/engine/model/inspect.ts');
      engineExpertBytesPerToken = inspectModel(model, { contextTokens: CONTEXT }).moe?.expertBytesPerToken;
    }
    // window layers read at most `window` KV rows a decode step (Gemma's local layers, gpt-oss's banded ones)
    const slidingLayers = h.gemma?.slidingLayers ?? (h.gptOss ? Array.from({ length: h.layers }, (_, l) => l % h.gptOss.swaPeriod < h.gptOss.swaPeriod - 1) : undefined);
    const window = h.gemma?.window ?? h.gptOss?.slidingWindow;
    // Gated DeltaNet layers (Qwen3.5) keep no KV rows: a decode step reads (and writes) their f32
    // recurrent state, value heads × head_dim × head_dim, whatever the context
    const la = h.linearAttention;
    const linearLayers = la?.layers;
    const linearStateBytes = la ? la.valueHeads * la.headDim * la.headDim * 4 : 0;
    const bosMeta = model.tokenizer.kind === 'gguf' ? model.tokenizer.metadata.get('tokenizer.ggml.bos_token_id') : undefined;
    result({
      hyper: { dim: h.hiddenSize, layers: h.layers, heads: h.heads, kvHeads: h.kvHeads, headDim: h.headDim, ffn: h.ffnSize, vocab: h.vocabSize },
      architecture: h.architecture,
      // sliding-window layers (Gemma): they read at most `window` rows a decode step
      window,
      slidingLayers,
      linearLayers,
      linearStateBytes,
      moe: moe && { experts: moe.experts, expertsUsed: moe.expertsUsed, expertFfn: moe.expertFfn, sharedFfn: moe.sharedFfn, expertBytes, expertBytesPerToken, routerBytes, engineExpertBytesPerToken },
      fileWeightBytes: model.weightBytes,
      parameters,
      dtypes,
      embedBytes,
      tied,
      // per decode token: all tensors but the embedding (one row), unless it doubles as the LM head;
      // of a MoE's expert tensors the k routed experts' share (the routers are in weightBytes, read whole)
      denseBytesPerToken: weightBytes + (tied ? embedBytes : 0),
      weightBytesPerToken: weightBytes + (tied ? embedBytes : 0) + expertBytesPerToken,
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
  const loadRssFileBytes = rssFileBytes();
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
    const expertBytes = []; // a mixture of experts: expert weight bytes each step read, as the native stages counted them
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
      const e = performance.now();
      const experts = runner.lastExperts();
      if (experts) expertBytes.push(experts.bytes);
      untimed += performance.now() - e;
    }
    const ms = performance.now() - a - untimed;
    return { logits, ids, top5, expertBytes: expertBytes.length ? expertBytes.reduce((x, y) => x + y, 0) / expertBytes.length : undefined, tps: (steps * 1000) / ms, medianTps: 1000 / median(stepMs), p10Tps: 1000 / p10(stepMs), stepMs, breakdown: perCall(runner.timings()) };
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
  const dLong = await decodeRun(logits);
  const out = {
    engine: 'longhand',
    threads,
    kernels,
    loadSeconds,
    loadCpuSeconds,
    loadPeakRssBytes,
    loadRssFileBytes,
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
    decode512ExpertBytes: d512.expertBytes,
    decodeLongTps: dLong.tps,
    decodeLongMedianTps: dLong.medianTps,
    decodeLongP10Tps: dLong.p10Tps,
    decodeLongStepMs: dLong.stepMs,
    decodeLongIds: dLong.ids,
    decodeLongTop5: dLong.top5,
    decodeLongBreakdown: dLong.breakdown,
    decodeLongExpertBytes: dLong.expertBytes,
    finalPosition: runner.position,
  };
  out.endRssFileBytes = rssFileBytes(); // before the model's mapping is released
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
  const loadRssFileBytes = rssFileBytes();
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
  const dLong = await decodeRun(tok);
  const out = {
    engine: 'llama.cpp',
    threads,
    cpuBackend,
    loadSeconds,
    loadCpuSeconds,
    loadPeakRssBytes,
    loadRssFileBytes,
    contextSize: context.contextSize,
    prefillTps: (PROMPT * 1000) / prefillMs,
    fillTps: ((LONG - fillFrom) * 1000) / fillMs,
    fillTokens: LONG - fillFrom,
    decode512Tps: d512.tps,
    decode512MedianTps: d512.medianTps,
    decode512P10Tps: d512.p10Tps,
    decode512StepMs: d512.stepMs,
    decode512Ids: d512.ids,
    decodeLongTps: dLong.tps,
    decodeLongMedianTps: dLong.medianTps,
    decodeLongP10Tps: dLong.p10Tps,
    decodeLongStepMs: dLong.stepMs,
    decodeLongIds: dLong.ids,
    finalPosition: sequence.nextTokenIndex,
  };
  out.endRssFileBytes = rssFileBytes();
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
const GGML_TYPE_IDS = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 8, Q4_K: 12, Q5_K: 13, Q6_K: 14, MXFP4: 39 };
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
  const linear = info.linearLayers ? `, ${info.linearLayers.filter(Boolean).length} Gated DeltaNet layers (f32 state ${(info.linearStateBytes / 1024).toFixed(0)} KiB each) + ${info.linearLayers.filter((x) => !x).length} full attention` : '';
  const moe = info.moe;
  const ffn = moe ? `${moe.experts} experts, top-${moe.expertsUsed}, expert ffn ${moe.expertFfn}${moe.sharedFfn ? ` + shared ${moe.sharedFfn}` : ''}` : `ffn ${h.ffn}`;
  lines.push(`### ${shape.family} ${type} — ${shape.label}${shape.layersCut ? ` CUT TO ${h.layers} OF ${shape.layersCut} LAYERS (--layers)` : ''}`);
  lines.push('');
  lines.push(`File (${info.architecture}): dim ${h.dim}, ${h.layers} layers${windows}${linear}, ${h.heads} heads / ${h.kvHeads} KV heads, head_dim ${h.headDim}, ${ffn}, vocab ${h.vocab}; ${(info.parameters / 1e6).toFixed(0)} M params, file weights ${mib(info.fileWeightBytes)} (${dtypeMix(info.dtypes)}), read per decode token ${mib(info.weightBytesPerToken)} weights + ${linear ? 'KV and recurrent state' : 'KV'}`);
  lines.push('');
  if (moe) {
    lines.push(
      `Mixture of experts: the expert tensors are ${mib(moe.expertBytes)} of the file; a decode token reads ${mib(info.denseBytesPerToken)} of the other weights (attention, norms, routers ${mib(moe.routerBytes)}${moe.sharedFfn ? ', shared experts' : ''}; the LM head; not the embedding) plus ${mib(moe.expertBytesPerToken)} of experts (${moe.expertsUsed} of ${moe.experts} per layer: the active parameters × their bytes per weight) — the bound below. ` +
        `The "expert bytes read per decode token" row is what Longhand's native stages counted each step (ModelRunner.lastExperts().bytes: routers + the routed experts' rows, mean over the steps) against \`longhand inspect\`'s moe.expertBytesPerToken for the file (${mib(moe.engineExpertBytesPerToken)}); llama.cpp's ggml reads the same routed rows (mul_mat_id) but does not report them. ` +
        'Peak RSS: both children report getrusage maxRSS, which counts the pages of the mapped file each process touched. llama.cpp (this build) maps the file with MAP_POPULATE (llama_mmap, prefetch on), so its RSS holds the whole file from load on; Longhand maps it and faults in only what a step reads, so "peak RSS at the end of load" shows the file pages its load touched (not the experts), and the end-of-run peak counts the experts the prompts routed to — after a 512-token prefill nearly all of them — plus the KV cache and buffers. The RssFile rows (Linux) are the file-backed part of RSS alone, at that moment: the resident pages of the model file (plus the code of each runtime), against the size of the file.',
    );
    lines.push('');
  }
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
    lines.push(`| decode @${LONG} (tok/s, % of bound) | ${r.threads} | ${fmt(o.decodeLongTps, 2)}${pct(o.decodeLongTps, b.atLong)} | ${fmt(l.decodeLongTps, 2)}${pct(l.decodeLongTps, b.atLong)} | ${ratio(o.decodeLongTps, l.decodeLongTps)} | ${fmt(b.atLong, 2)} |`);
    lines.push(`| decode @512, median step (tok/s) | ${r.threads} | ${fmt(o.decode512MedianTps, 2)}${pct(o.decode512MedianTps, b.at512)} | ${fmt(l.decode512MedianTps, 2)}${pct(l.decode512MedianTps, b.at512)} | ${ratio(o.decode512MedianTps, l.decode512MedianTps)} | ${fmt(b.at512, 2)} |`);
    lines.push(`| decode @${LONG}, median step (tok/s) | ${r.threads} | ${fmt(o.decodeLongMedianTps, 2)}${pct(o.decodeLongMedianTps, b.atLong)} | ${fmt(l.decodeLongMedianTps, 2)}${pct(l.decodeLongMedianTps, b.atLong)} | ${ratio(o.decodeLongMedianTps, l.decodeLongMedianTps)} | ${fmt(b.atLong, 2)} |`);
    lines.push(`| decode @512, p10 step (tok/s) | ${r.threads} | ${fmt(o.decode512P10Tps, 2)}${pct(o.decode512P10Tps, b.at512)} | ${fmt(l.decode512P10Tps, 2)}${pct(l.decode512P10Tps, b.at512)} | ${ratio(o.decode512P10Tps, l.decode512P10Tps)} | ${fmt(b.at512, 2)} |`);
    lines.push(`| decode @${LONG}, p10 step (tok/s) | ${r.threads} | ${fmt(o.decodeLongP10Tps, 2)}${pct(o.decodeLongP10Tps, b.atLong)} | ${fmt(l.decodeLongP10Tps, 2)}${pct(l.decodeLongP10Tps, b.atLong)} | ${ratio(o.decodeLongP10Tps, l.decodeLongP10Tps)} | ${fmt(b.atLong, 2)} |`);
    lines.push(`| fill ${o.fillTokens ?? l.fillTokens ?? '?'} tokens to ${LONG} (tok/s, % of compute bound) | ${r.threads} | ${fmt(o.fillTps)}${pct(o.fillTps, b.fill)} | ${fmt(l.fillTps)}${pct(l.fillTps, b.fill)} | ${ratio(o.fillTps, l.fillTps)} | ${fmt(b.fill)} |`);
    lines.push(`| greedy ids equal to llama.cpp's, decode @512 | ${r.threads} | ${agreement(o.decode512Ids, l.decode512Ids, o.decode512Top5)} | | | — |`);
    lines.push(`| greedy ids equal to llama.cpp's, decode @${LONG} | ${r.threads} | ${agreement(o.decodeLongIds, l.decodeLongIds, o.decodeLongTop5)} | | | — |`);
    if (info.moe) {
      const expertRow = (ctx, ourBytes) => `| expert bytes read per decode token @${ctx} (MiB; bound: routers + k of E experts) | ${r.threads} | ${ourBytes === undefined ? '—' : fmt(ourBytes / 2 ** 20, 1)} | — | | ${fmt(info.moe.engineExpertBytesPerToken / 2 ** 20, 1)} |`;
      lines.push(expertRow(PROMPT, o.decode512ExpertBytes));
      lines.push(expertRow(LONG, o.decodeLongExpertBytes));
    }
    // Longhand's column (MoE): the same count with the experts as its stages counted them (they include the routers)
    const measured = (experts, kv) => (info.moe && experts !== undefined ? fmt((info.denseBytesPerToken - info.moe.routerBytes + experts + kv) / 2 ** 20, 1) : '');
    lines.push(`| bytes read per decode token @512 (MiB: weights ${fmt(info.weightBytesPerToken / 2 ** 20, 1)} + KV${info.linearLayers ? ' and state' : ''} ${fmt(b.kv512 / 2 ** 20, 1)}) | ${r.threads} | ${measured(o.decode512ExpertBytes, b.kv512)} | | | ${fmt(b.bytesPerToken512 / 2 ** 20, 1)} |`);
    lines.push(`| bytes read per decode token @${LONG} (MiB: weights ${fmt(info.weightBytesPerToken / 2 ** 20, 1)} + KV${info.linearLayers ? ' and state' : ''} ${fmt(b.kvLong / 2 ** 20, 1)}) | ${r.threads} | ${measured(o.decodeLongExpertBytes, b.kvLong)} | | | ${fmt(b.bytesPerTokenLong / 2 ** 20, 1)} |`);
    lines.push(`| peak RSS | ${r.threads} | ${mib(o.peakRssBytes)} | ${mib(l.peakRssBytes)} | ${ratio(o.peakRssBytes, l.peakRssBytes)} | — |`);
    lines.push(`| load (s) | ${r.threads} | ${fmt(o.loadSeconds)} | ${fmt(l.loadSeconds)} | ${ratio(o.loadSeconds, l.loadSeconds)} | — |`);
    lines.push(`| load CPU (s, all threads) | ${r.threads} | ${fmt(o.loadCpuSeconds)} | ${fmt(l.loadCpuSeconds)} | ${ratio(o.loadCpuSeconds, l.loadCpuSeconds)} | — |`);
    lines.push(`| peak RSS at the end of load | ${r.threads} | ${mib(o.loadPeakRssBytes)} | ${mib(l.loadPeakRssBytes)} | ${ratio(o.loadPeakRssBytes, l.loadPeakRssBytes)} | — |`);
    lines.push(`| file pages resident (RssFile) at the end of load | ${r.threads} | ${mib(o.loadRssFileBytes)} | ${mib(l.loadRssFileBytes)} | ${ratio(o.loadRssFileBytes, l.loadRssFileBytes)} | file ${mib(info.fileWeightBytes)} |`);
    lines.push(`| file pages resident (RssFile) after the runs | ${r.threads} | ${mib(o.endRssFileBytes)} | ${mib(l.endRssFileBytes)} | ${ratio(o.endRssFileBytes, l.endRssFileBytes)} | file ${mib(info.fileWeightBytes)} |`);
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
      [LONG, r.ours.decodeLongBreakdown],
    ]) {
      if (!bd) continue;
      lines.push(`| ${r.threads} | ${ctx} | ${fmt(bd.embedding, 2)} | ${fmt(bd.layerGraphs, 2)} | ${fmt(bd.headGraph, 2)} | ${fmt(bd.append, 2)} | ${fmt(bd.attention, 2)} | ${fmt(bd.other, 2)} | ${fmt(bd.total, 2)} |`);
    }
  }
  return lines.join('\n');
}

async function parent() {
  if (opts.help) {
    console.log('usage: node --import tsx bench/dense.mjs [--family llama|qwen3|gemma3|phi3|qwen3moe|gpt-oss|qwen35|qwen35moe] [--long 2048] [--types Q8_0,Q4_0 (llama: any of ' + TYPES.join(', ') + '; default llama Q8_0,Q4_0, the others Q4_K_M,Q8_0)] [--layers N] [--threads 1,2] [--kv-heads 32 (llama)] [--steps 32] [--quick] [--keep] [--json FILE] [--dir DIR] [--bandwidth-mib 512] [--dense auto|native|onnx] [--cpu-level portable|avx2|avx512|amx]');
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
        ? ['gguf', path, '--type', type, '--dim', `${sizes.dim}`, '--layers', `${sizes.layers}`, '--heads', `${sizes.heads}`, '--kv-heads', `${sizes.kvHeads}`, '--ffn', `${sizes.ffn}`, '--vocab', `${sizes.vocab}`, '--context', `${Math.max(4096, CONTEXT)}`]
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
        const common = ['--model', path, '--threads', `${threads}`, '--vocab', `${info.hyper.vocab}`, '--bos', `${info.bos}`, '--steps', `${steps}`, '--long', `${LONG}`];
        const ours = await runChild(['ours', ...common, '--dense', opts.dense]);
        console.log(`${type} ${threads} thread(s) Longhand: ${ours.error ?? `prefill ${fmt(ours.prefillTps)} tok/s, decode@512 ${fmt(ours.decode512Tps, 2)}, decode@${LONG} ${fmt(ours.decodeLongTps, 2)} tok/s, peak RSS ${mib(ours.peakRssBytes)}`}`);
        const llama = await runChild(['llama', ...common, ...(cpuLevel === undefined ? [] : ['--cpu-level', cpuLevel])], { tsx: false });
        console.log(`${type} ${threads} thread(s) llama.cpp: ${llama.error ?? `prefill ${fmt(llama.prefillTps)} tok/s, decode@512 ${fmt(llama.decode512Tps, 2)}, decode@${LONG} ${fmt(llama.decodeLongTps, 2)} tok/s, peak RSS ${mib(llama.peakRssBytes)}`}`);
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
    // (a Gated DeltaNet layer reads its recurrent state instead, the same bytes at any context)
    const kvBytesAt = (ctx) => {
      const rowBytes = h.kvHeads * h.headDim * 2 * 2;
      let rows = 0;
      let state = 0;
      for (let l = 0; l < h.layers; l++) {
        if (m.info.linearLayers?.[l]) state += m.info.linearStateBytes;
        else rows += m.info.slidingLayers?.[l] ? Math.min(ctx, m.info.window) : ctx;
      }
      return rows * rowBytes + state;
    };
    const bounds = {};
    for (const t of threadList) {
      const bw = bandwidthFor(t) * 1e9;
      const b512 = m.info.weightBytesPerToken + kvBytesAt(PROMPT);
      const bLong = m.info.weightBytesPerToken + kvBytesAt(LONG);
      bounds[t] = {
        bandwidthGBs: bw / 1e9,
        bytesPerToken512: b512,
        bytesPerTokenLong: bLong,
        kv512: kvBytesAt(PROMPT),
        kvLong: kvBytesAt(LONG),
        at512: bw / b512,
        atLong: bw / bLong,
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
