// The only module that loads the compiled addon (native/build/Release/longhand.node).
// Typed by ./index.d.ts. Everything else imports this file, never the .node binary.
//
// Errors: every native failure is thrown as NativeError (app/common/errors.ts) with `code`
// NATIVE_BAD_ARGUMENT | NATIVE_OUT_OF_MEMORY | NATIVE_IO | NATIVE_INTERNAL, and a missing or
// unloadable binary as NATIVE_NOT_BUILT. Under tsx or Vitest (how the engine, CLI and tests run)
// the class is app/common's own; plain `node` cannot import a .ts file, so there a local class
// with the same name, fields and toJSON() stands in (instanceof app/common's class is then false).
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LayeredKvPool, LayeredSpeculator } from './kv-pool-layers.js';

const require = createRequire(import.meta.url);

/** Where `npm run build:native` puts the addon. */
export const ADDON_PATH = join(dirname(fileURLToPath(import.meta.url)), 'build', 'Release', 'longhand.node');

/** Must equal kAbiVersion in src/addon.cc; a different number means a stale binary. */
const ABI_VERSION = 20;

const REBUILD_HINT = 'Rebuild it with `npm run build:native` (needs python3, make and g++).';

const FallbackNativeError = class NativeError extends Error {
  constructor(code, message, details = {}) {
    super(message);
    this.name = 'NativeError';
    this.code = code;
    this.details = details;
  }

  toJSON() {
    return { code: this.code, message: this.message, details: this.details };
  }
};

let NativeErrorClass = FallbackNativeError;
try {
  ({ NativeError: NativeErrorClass } = await import('../app/common/errors.ts'));
} catch {
  // plain node without a TypeScript loader: keep the stand-in
}

/** The error class this module throws (app/common's NativeError when TypeScript is loadable). */
export const NativeError = NativeErrorClass;

let cached;

/**
 * Loads the addon from `path` (default: ADDON_PATH, cached). Throws NativeError NATIVE_NOT_BUILT,
 * naming the path, the cause and the rebuild command, when the file is missing, does not load
 * (wrong platform, missing symbol) or was built from other sources (ABI version mismatch).
 */
export function loadAddon(path = ADDON_PATH) {
  if (path === ADDON_PATH && cached !== undefined) return cached;
  let binding;
  try {
    binding = require(path);
  } catch (cause) {
    // a LONGHAND_CPU_LEVEL the addon refused as it loaded: the binary is fine, the setting is not
    if (cause?.code === 'NATIVE_BAD_ARGUMENT' && cause?.details?.variable === CPU_LEVEL_ENV) throw new NativeErrorClass(cause.code, cause.message, cause.details);
    const reason = cause instanceof Error ? cause.message.split('\n')[0] : String(cause);
    throw new NativeErrorClass('NATIVE_NOT_BUILT', `The native addon is not built or does not load: ${path} (${reason}). ${REBUILD_HINT}`, {
      path,
      reason,
    });
  }
  if (binding === null || typeof binding !== 'object' || binding.abiVersion !== ABI_VERSION) {
    const found = binding?.abiVersion;
    throw new NativeErrorClass(
      'NATIVE_NOT_BUILT',
      `The native addon at ${path} is stale (ABI version ${String(found)}, this code needs ${ABI_VERSION}). ${REBUILD_HINT}`,
      { path, found: typeof found === 'number' ? found : null, expected: ABI_VERSION },
    );
  }
  binding.setErrorFactory((code, message, details) => new NativeErrorClass(code, message, details));
  addUniformLayerQuestions(binding.KvPool);
  if (path === ADDON_PATH) cached = binding;
  return binding;
}

/**
 * The per-layer questions a LayeredKvPool answers (kv-pool-layers.js), answered by a native pool
 * too, where every layer has the pool's shape and its own rows: callers ask per layer either way.
 */
function addUniformLayerQuestions(KvPool) {
  const proto = KvPool?.prototype;
  if (proto === undefined || typeof proto.layerKvHeads === 'function') return;
  Object.defineProperties(proto, {
    layerKvHeads: { value: function layerKvHeads() { return this.kvHeads; } },
    layerHeadDim: { value: function layerHeadDim() { return this.headDim; } },
    layerPartialDim: { value: function layerPartialDim() { return this.partialDim; } },
    owns: { value: function owns() { return true; } },
    kvSource: { value: function kvSource(layer) { return layer; } },
  });
}

/** [native pool, its layer] that model layer `layer` of `pool` reads (a LayeredKvPool routes; a native pool is itself). */
function route(pool, layer) {
  return pool instanceof LayeredKvPool ? pool.route(layer) : [pool, layer];
}

/** True when the addon loads; never throws. */
export function isNativeAvailable() {
  try {
    loadAddon();
    return true;
  } catch {
    return false;
  }
}

/** Which attention kernel this CPU runs: 'avx512', 'avx2-fma-f16c' or 'portable'. */
export function attentionKernel() {
  return loadAddon().attentionKernel;
}

/** Maps a file (read-only, copy-on-write); see index.d.ts. */
export function mapFile(path, options) {
  const { MappedFile } = loadAddon();
  return options === undefined ? new MappedFile(path) : new MappedFile(path, options);
}

/**
 * Repacks a GGUF block-quantised tensor [n, k] (ggml type id, raw bytes) into MatMulNBits' layout
 * on up to `threads` threads: { bits, blockSize, b, scales, zeroPoints (null: the op's default),
 * mins (null: none) }, the same bits as app/engine/onnx/gguf-repack.ts; see index.d.ts.
 */
export function repackGguf(ggmlType, raw, n, k, threads) {
  return loadAddon().repackGguf(ggmlType, raw, n, k, threads);
}

/** Fixes glibc's mmap threshold at `bytes` (see index.d.ts); false where the C library is not glibc. */
export function setMallocMmapThreshold(bytes) {
  return loadAddon().setMallocMmapThreshold(bytes);
}

/** glibc's malloc_trim(0): free heap memory back to the system (see index.d.ts); false elsewhere or when none was. */
export function mallocTrim() {
  return loadAddon().mallocTrim();
}

/** The Vulkan physical devices the loader `library` (default libvulkan.so.1) lists; see index.d.ts. */
export function vulkanDevices(library = 'libvulkan.so.1') {
  return loadAddon().vulkanDevices(library);
}

/** Creates the KV pool: one allocation of at most `budgetBytes`; see index.d.ts. */
export function createKvPool(options) {
  const { KvPool } = loadAddon();
  return new KvPool(options);
}

/**
 * A KV pool whose layers differ in row shape or read an earlier layer's rows (Gemma 4): one native
 * pool per row shape, routed per layer (kv-pool-layers.js; see index.d.ts).
 */
export function createLayeredKvPool(options) {
  const { KvPool } = loadAddon();
  return new LayeredKvPool((o) => new KvPool(o), (code, message, details) => new NativeErrorClass(code, message, details), options);
}

/** Decode attention of one query token over every token of `layer` in the pool. */
export function attend(pool, layer, q, heads, out, attention) {
  const [p, l] = route(pool, layer);
  loadAddon().attend(p, l, q, heads, out, attention);
}

/** Same as attend(), computed by the scalar C++ reference kernel (for tests and checks). */
export function attendReference(pool, layer, q, heads, out, attention) {
  const [p, l] = route(pool, layer);
  loadAddon().attendReference(p, l, q, heads, out, attention);
}

/**
 * Causal attention of a chunk's T query tokens (q: T * heads * headDim) over `layer`, whose last T
 * tokens are the chunk's own (append them first): query i sees every token up to and including its own.
 */
export function attendCausal(pool, layer, q, heads, out, threads, attention) {
  const [p, l] = route(pool, layer);
  loadAddon().attendCausal(p, l, q, heads, out, threads, attention);
}

/** Same as attendCausal(), computed by the scalar C++ reference kernel. */
export function attendCausalReference(pool, layer, q, heads, out, attention) {
  const [p, l] = route(pool, layer);
  loadAddon().attendCausalReference(p, l, q, heads, out, attention);
}

/**
 * Decode attention over per-KV-head slot lists (the comparison policies): KV head g attends
 * slots[offsets[g] .. offsets[g+1]); see index.d.ts.
 */
export function attendSlots(pool, layer, q, heads, slots, offsets, out, threads, attention) {
  const [p, l] = route(pool, layer);
  loadAddon().attendSlots(p, l, q, heads, slots, offsets, out, threads, attention);
}

/** Scaled attention logits [heads, tokens] of one query against the layer's first `tokens` slots (default all). */
export function attentionScores(pool, layer, q, heads, out, tokens, attention) {
  const [p, l] = route(pool, layer);
  loadAddon().attentionScores(p, l, q, heads, out, tokens, attention);
}

/**
 * The offload path's upload: copies `count` listed K/V rows of `layer` (KV head heads[i], slot
 * slots[i]) to row dest[i] of kOut / vOut (Uint16Array fp16 bits for fp16 pools, else Float32Array);
 * returns the bytes written. See index.d.ts.
 */
export function gatherRows(pool, layer, heads, slots, dest, count, kOut, vOut) {
  const [p, l] = route(pool, layer);
  return loadAddon().gatherRows(p, l, heads, slots, dest, count, kOut, vOut);
}

// ─── the comparison policies' selection over the pool (native/src/policy_select.h; see index.d.ts) ───

/** streaming: sinks + recent window of N slots into out; returns the count. */
export function selectStreaming(N, sinks, window, out) {
  return loadAddon().selectStreaming(N, sinks, window, out);
}

/** h2o: per KV head recent + heavy hitters by acc among live slots, evicting the older ones not kept; returns the total. */
export function selectH2o(acc, live, kvHeads, C, N, budget, recent, slots, offsets, threads) {
  return loadAddon().selectH2o(acc, live, kvHeads, C, N, budget, recent, slots, offsets, threads);
}

/** h2o: adds one query's softmax mass over each KV head's list (or every slot < n) to acc. */
export function h2oAccumulate(pool, layer, q, heads, acc, C, n, slots, offsets, threads, attention) {
  const [p, l] = route(pool, layer);
  if (slots === undefined) loadAddon().h2oAccumulate(p, l, q, heads, acc, C, n, undefined, undefined, threads, attention);
  else loadAddon().h2oAccumulate(p, l, q, heads, acc, C, n, slots, offsets, threads, attention);
}

/** quest: extends the page bounds with the stored keys of slots from..to−1. */
export function questExtendBounds(pool, layer, pageMin, pageMax, maxPages, pageSize, from, to) {
  const [p, l] = route(pool, layer);
  loadAddon().questExtendBounds(p, l, pageMin, pageMax, maxPages, pageSize, from, to);
}

/** quest: per KV head the slots of the top pages; returns the total. */
export function selectQuest(q, heads, kvHeads, d, pageMin, pageMax, maxPages, N, pageSize, topPages, slots, offsets, threads) {
  return loadAddon().selectQuest(q, heads, kvHeads, d, pageMin, pageMax, maxPages, N, pageSize, topPages, slots, offsets, threads);
}

/** snapkv: the kept prompt slots per KV head for a prompt of P tokens voted by the window's queries; returns the total. */
export function snapkvCompress(pool, layer, obsQ, heads, P, window, budget, kernel, slots, offsets, attention) {
  const [p, l] = route(pool, layer);
  return loadAddon().snapkvCompress(p, l, obsQ, heads, P, window, budget, kernel, slots, offsets, attention);
}

/** InfiniGen's column energies of one layer for a run of tokens (see index.d.ts); adds to qEnergy / kEnergy. */
export function skewEnergy(q, k, tokens, heads, kvHeads, headDim, a, qEnergy, kEnergy, reference = false) {
  loadAddon().skewEnergy(q, k, tokens, heads, kvHeads, headDim, a, qEnergy, kEnergy, reference);
}

/**
 * Measured memory read bandwidth in GB/s (1e9 bytes/s): the fastest of `repeats` passes of a
 * vectorised sum over a `bytes` buffer allocated once, split over `threads` threads (default 1).
 */
export function measureReadBandwidth(bytes, repeats, threads) {
  return threads === undefined ? loadAddon().measureReadBandwidth(bytes, repeats) : loadAddon().measureReadBandwidth(bytes, repeats, threads);
}

/**
 * InfiniGen's speculation worker over a pool with partial key rows (see index.d.ts): begin(layer,
 * qSpec) selects and gathers on a native thread; attend(layer, q, out) runs attention over the
 * gathered rows and the current token.
 */
export function createSpeculator(pool, options) {
  const { Speculator } = loadAddon();
  if (pool instanceof LayeredKvPool) return new LayeredSpeculator((p, o) => new Speculator(p, o), pool, options);
  return new Speculator(pool, options);
}

/**
 * One llama stage's dense work over the mapped file's weights, read in place (dense_stage.h; see
 * index.d.ts): app/engine/forward/native-stages.ts builds them.
 */
/** The dot kernels ('amx' | 'avx512' | 'avx2' | 'scalar') DenseStage runs for a GGML type here, or null when it has none. */
export function denseKernel(ggmlType) {
  return loadAddon().denseKernel(ggmlType);
}

export function createDenseStage(config) {
  const { DenseStage } = loadAddon();
  return new DenseStage(config);
}

/** One linear-attention layer's mixer over a chunk (native/src/gated_delta_net.h; see index.d.ts). */
export function gatedDeltaNet(args) {
  loadAddon().gatedDeltaNet(args);
}

/** The native InfiniGen selection on explicit inputs (the shapes of select-reference.ts), for tests. */
export function selectInfinigenNative(layer, input, knobs) {
  return loadAddon().selectInfinigen(layer, input, knobs);
}

/**
 * The environment variable that caps every kernel choice of the addon (native/src/cpu_level.h):
 * portable | avx2 | avx512 | amx, read once as the addon loads. Unknown names and levels this CPU
 * lacks make loadAddon() throw NATIVE_BAD_ARGUMENT (details.variable, value, reason, cpuLevel).
 */
export const CPU_LEVEL_ENV = 'LONGHAND_CPU_LEVEL';

/** The level the kernels run at, the CPU's own, and the kernels every dispatch chooses (see index.d.ts). */
export function cpuLevel() {
  return loadAddon().cpuLevel();
}

/** The dot kernels' one-thread compute peak for a GGML type (see index.d.ts), for bench/'s prefill bound. */
export function measureDotPeak(ggmlType, repeats) {
  return repeats === undefined ? loadAddon().measureDotPeak(ggmlType) : loadAddon().measureDotPeak(ggmlType, repeats);
}

/** The environment variable that, set to 1 before the addon loads, exports testFault(). */
export const TEST_FAULTS_ENV = 'LONGHAND_TEST_FAULTS';

/** True when this process's addon has the test-only fault hook (LONGHAND_TEST_FAULTS=1 at load). */
export function testFaultsEnabled() {
  return typeof loadAddon().testFault === 'function';
}

/**
 * Test only: kills this process with a real native fault ('segv': a write through a null pointer;
 * 'abort': abort()). Throws NATIVE_BAD_ARGUMENT when the addon was loaded without
 * LONGHAND_TEST_FAULTS=1 (the hook is then not compiled into its exports) or for another kind.
 */
export function testFault(kind) {
  const binding = loadAddon();
  if (typeof binding.testFault !== 'function') {
    // The hook is test-only surface, so it does not bump ABI_VERSION; a binary built before it
    // existed lacks it even with the variable set, and the message says to rebuild.
    const set = process.env[TEST_FAULTS_ENV] === '1';
    throw new NativeErrorClass(
      'NATIVE_BAD_ARGUMENT',
      set
        ? `testFault is missing from the native addon although ${TEST_FAULTS_ENV}=1: the binary predates the hook. ${REBUILD_HINT}`
        : `testFault is a test-only hook: set ${TEST_FAULTS_ENV}=1 in the environment before the native addon loads`,
      { env: TEST_FAULTS_ENV, enabled: set },
    );
  }
  binding.testFault(kind);
}
