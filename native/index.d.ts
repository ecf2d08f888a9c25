// Types of native/index.js, the one module that loads the compiled addon.
// Every function throws NativeError (app/common/errors.ts) on failure, with `code`:
//   NATIVE_NOT_BUILT      the binary is missing, does not load, or is stale
//   NATIVE_BAD_ARGUMENT   wrong type, out-of-range number, wrong array length, freed pool/file
//   NATIVE_OUT_OF_MEMORY  an allocation failed, a budget larger than RAM, or a full KV pool
//   NATIVE_IO             a file could not be opened or mapped (details: path, errno)
//   NATIVE_INTERNAL       a bug in Longhand's native code
// Native failures never crash the process.
import type { NativeError as NativeErrorClass } from '../app/common/errors.ts';

export declare const NativeError: typeof NativeErrorClass;

/** Absolute path of build/Release/longhand.node. */
export declare const ADDON_PATH: string;

/** The raw binding; use the functions below instead. */
export interface NativeBinding {
  readonly abiVersion: number;
  readonly attentionKernel: string;
}

/** Loads (and, for the default path, caches) the addon; throws NATIVE_NOT_BUILT with the rebuild command. */
export declare function loadAddon(path?: string): NativeBinding;

/** True when the addon loads. Never throws. */
export declare function isNativeAvailable(): boolean;

/** 'avx512' where the CPU has AVX-512 F/BW/VL/DQ (and AVX2+FMA+F16C), else 'avx2-fma-f16c' where it has AVX2+FMA+F16C, else 'portable'. */
export declare function attentionKernel(): string;

export interface MapFileOptions {
  /** Copy into a V8-owned buffer even where external buffers are allowed (tests the Electron path). */
  copy?: boolean;
}

/** A model file mapped privately (stray writes are copy-on-write, the file never changes). */
export interface MappedFile {
  /** The file's bytes. External memory under Node; a copy under Electron's V8 memory cage. Detached (byteLength 0) after close(). */
  readonly buffer: ArrayBuffer;
  /** File size in bytes; 0 after close(). */
  readonly byteLength: number;
  /** true when `buffer` points at the mapping itself, false when it is a copy. */
  readonly external: boolean;
  readonly closed: boolean;
  /** Detaches `buffer`, then unmaps. Idempotent. Also done at environment teardown. */
  close(): void;
  /**
   * Drops the pages holding bytes [offset, offset + length) from the process (madvise
   * MADV_DONTNEED over the whole pages covering the range): resident memory falls, and a later read
   * faults them in again from the file. Returns the bytes advised; 0 (doing nothing) for a copy.
   * NATIVE_BAD_ARGUMENT after close() or for a range past the end.
   */
  release(offset: number, length: number): number;
  /**
   * Gives the process its own anonymous copy of the pages holding bytes [offset, offset + length)
   * (a write fault per page on the private mapping), same bytes at the same addresses: pages left
   * to the page cache are scanned by reclaim and slow a weight pass 3–10x now and then. Resident
   * memory is unchanged; `release` still drops the copy. Split over up to `threads` threads
   * (default 1). Returns the bytes covered; 0 (doing nothing) for a copy.
   * NATIVE_BAD_ARGUMENT after close() or for a range past the end.
   */
  own(offset: number, length: number, threads?: number): number;
}

/** Maps `path`. NATIVE_IO when it cannot be opened/mapped or is not a regular file. */
export declare function mapFile(path: string, options?: MapFileOptions): MappedFile;

/** A GGUF tensor repacked for com.microsoft MatMulNBits (native/src/gguf_repack.h has the layouts). */
export interface NativeRepacked {
  bits: 4 | 8;
  blockSize: 16 | 32;
  /** uint8 [N, K/blockSize, blockSize·bits/8] */
  b: Uint8Array;
  /** float32 [N · K/blockSize] */
  scales: Float32Array;
  /** packed like b, one per block; null when the type uses the op's default (Q8_0, Q4_0) */
  zeroPoints: Uint8Array | null;
  /** float32 [N · K/32] min terms; null for types without one */
  mins: Float32Array | null;
}

/**
 * Repacks a GGUF tensor [n out, k in] of ggml type `ggmlType` (Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7,
 * Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14) from its raw bytes on up to `threads` (1..64) threads, bit for
 * bit what app/engine/onnx/gguf-repack.ts computes. NATIVE_BAD_ARGUMENT for another type, k not a
 * multiple of 32, n·k not whole blocks, or `raw` not exactly the tensor's bytes.
 */
export declare function repackGguf(ggmlType: number, raw: Uint8Array, n: number, k: number, threads: number): NativeRepacked;

/**
 * Fixes glibc malloc's mmap threshold at `bytes` (4096 .. 32 MiB): blocks at least that big are
 * mapped on their own and return to the system when freed. glibc's default raises the threshold
 * after each such free, so weight-sized blocks that onnxruntime frees after prepacking (and the
 * activations of a prefill chunk) stay in the heap: measured 13 MiB more per 56 MiB layer session.
 * Process-wide; returns false (doing nothing) where the C library is not glibc. The runner no longer
 * sets it (every large allocation then maps fresh pages: slower loads and prefill); see mallocTrim.
 */
export declare function setMallocMmapThreshold(bytes: number): boolean;

/**
 * glibc's malloc_trim(0): every free block of the heaps (not only their tops) goes back to the
 * system. The runner calls it after each stage's session is created, so the weights onnxruntime
 * frees after prepacking leave RSS while glibc keeps its default, adaptive mmap threshold (large
 * activations reused from the heap rather than mapped afresh every run). True if memory was
 * released; false where none was or the C library is not glibc.
 */
export declare function mallocTrim(): boolean;

/** One Vulkan physical device as the loader reports it (src/vulkan_adapters.h). */
export interface VulkanDevice {
  name: string;
  /** PCI vendor id (0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel) or a Khronos id (0x1ae0 Google: SwiftShader; 0x10005 Mesa: lavapipe) */
  vendorId: number;
  deviceId: number;
  apiVersion: number;
  driverVersion: number;
  /** VkPhysicalDeviceType: 0 other, 1 integrated GPU, 2 discrete GPU, 3 virtual GPU, 4 CPU (a software rasteriser) */
  type: number;
  shaderFloat16: boolean;
  storageBuffer16Bit: boolean;
  /** false: a Vulkan 1.0 device, whose 16-bit features were not read */
  featuresKnown: boolean;
}

/**
 * The physical devices of the Vulkan loader `library` (dlopen'ed as given: a file name is searched
 * the way the dynamic loader searches, LD_LIBRARY_PATH included; default 'libvulkan.so.1'). What
 * onnxruntime's WebGPU provider (Dawn, on Vulkan under Linux) chooses among. A machine without a
 * loader or a driver answers with `step` != 0 and `error` saying why (1 no loader, 2 a loader
 * function missing, 3 vkCreateInstance failed, 4 enumeration failed); it does not throw.
 */
export declare function vulkanDevices(library?: string): { devices: VulkanDevice[]; error: string | null; step: number };

export interface KvPoolOptions {
  /** Upper bound for the pool's one allocation, in bytes (integer, >= one token's bytes). */
  budgetBytes: number;
  layers: number; // 1..1024
  kvHeads: number; // 1..1024
  headDim: number; // 1..1024
  /**
   * Element type of the K/V rows (default 'fp16'; 'fp32' doubles the bytes, for exact comparisons;
   * 'int8' halves them: one fp32 scale max|x|/127 per row, values rounded to nearest even, a row
   * with a NaN/Inf element stored as a NaN row).
   */
  kvType?: KvType;
  /** p of InfiniGen's partial key rows (0..headDim, default 0 = none). Adds 2·p bytes per token and KV head. */
  partialDim?: number;
  /**
   * Evict instead of failing when a layer is full (ARCHITECTURE.md §5): the victim is the slot with
   * the smallest prefetch counter (ties: oldest) outside the first `sinks` positions and the `recent`
   * newest tokens; the new token takes its slot. Counters: +1 per KV head whose speculation selects
   * the slot, halved every `ageEvery` speculated steps of the layer. Adds 5 bytes per token and layer.
   * The budget must hold more than sinks + recent tokens. truncate(n) then forgets positions >= n.
   */
  eviction?: { sinks: number; recent: number; ageEvery: number };
  /**
   * One token capacity per layer (length `layers`), all in the pool's one allocation: an entry > 0 is
   * that layer's slots exactly (a sliding-window layer needs only its window); 0 shares what the budget
   * leaves after the fixed layers equally among the 0 entries. Left out: every layer the same capacity,
   * and byteLength, bytesPerToken and the snapshot layout exactly as without this option. Each layer
   * follows the pool's rules on its own: full without `eviction` is NATIVE_OUT_OF_MEMORY, with it the
   * layer evicts (each layer's capacity must exceed sinks + recent); a ring (ringLayers) wraps instead.
   * NATIVE_BAD_ARGUMENT when the fixed layers (plus one token in every shared layer) do not fit budgetBytes.
   */
  layerCapacity?: number[];
  /**
   * One flag per layer: true makes the layer a ring (a sliding-window layer, native/src/kv_pool.h
   * "Rings"): once it holds its layerCapacity entry of tokens (which must be > 0), each append
   * overwrites its oldest token, so it keeps its newest tokens only; every slot keeps its position and
   * attention walks the ring oldest first (the same bits as over every token). Not with `eviction`.
   * A ring's rows: row 0 is the oldest token held, in slot (ringStart(layer) + row) % layerCapacityTokens(layer).
   */
  ringLayers?: boolean[];
  /**
   * Default true: on Linux a pool of 2 MiB or more starts on a 2 MiB boundary and is advised
   * madvise(MADV_HUGEPAGE), so with transparent huge pages in 'madvise' (or 'always') mode its rows sit
   * on 2 MiB pages and scattered row reads miss the TLB far less. false: plain 4 KiB pages (benchmarks).
   */
  hugePages?: boolean;
}

export type KvType = 'fp16' | 'fp32' | 'int8';

/**
 * The KV cache in native memory: per layer and KV head, fp16 K and V rows and each slot's token
 * position. One mmap per pool; nothing allocates per token. Call free() when the model unloads
 * (environment teardown frees it too). After free(), every method but free() throws NATIVE_BAD_ARGUMENT.
 */
export interface KvPool {
  /** Slots (tokens) per layer that the budget holds; with layerCapacity, the largest layer's. */
  readonly capacityTokens: number;
  /** Slots of `layer` (capacityTokens for every layer without layerCapacity). */
  layerCapacityTokens(layer: number): number;
  /** Whether `layer` is a ring (ringLayers). */
  isRing(layer: number): boolean;
  /** Slot of a ring's row 0 (its oldest token); 0 for a plain layer. */
  ringStart(layer: number): number;
  /** Empties one layer (its memory stays): a ring's checkpoint is imported into it. Not on evicting pools. */
  clearLayer(layer: number): void;
  /**
   * exportLayer() for rows [first, first + tokens) of `layer` (a ring's rows are in position order from
   * its oldest): `out` is snapshotLayerBytes(tokens) bytes. A ring's checkpoint and snapshot section.
   */
  exportRows(layer: number, first: number, tokens: number, out: Uint8Array): void;
  /** Bytes of the allocation (<= budgetBytes). */
  readonly byteLength: number;
  /** Bytes one token costs over all layers and KV heads. */
  readonly bytesPerToken: number;
  readonly layers: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly freed: boolean;
  readonly kvType: KvType;
  /** p of the partial key rows (0: none). */
  readonly partialDim: number;
  /**
   * Per-layer shape questions. A native pool answers kvHeads / headDim / partialDim, true and `layer`
   * for every layer; a LayeredKvPool (createLayeredKvPool) answers per layer, and its kvHeads /
   * headDim / partialDim (and snapshotLayerBytes without a layer) throw NATIVE_BAD_ARGUMENT when its
   * layers differ there, naming the per-layer question to ask instead.
   */
  layerKvHeads(layer: number): number;
  layerHeadDim(layer: number): number;
  layerPartialDim(layer: number): number;
  /** Whether `layer` keeps rows of its own (false: a KV-shared layer, or a layer without rows; appends to it are refused). */
  owns(layer: number): boolean;
  /** The layer whose rows `layer` reads (itself when it owns rows). */
  kvSource(layer: number): number;
  /**
   * Sets layer's projection A[:, C] for every KV head: proj fp32 [kvHeads, headDim, partialDim]; rebuilds the
   * partial rows (fp16 of stored K · A[:, C]) of every stored slot. From then on append() writes them too.
   */
  setPartialProjection(layer: number, proj: Float32Array): void;
  /** One partial key row as fp32 [partialDim]. */
  readPartialK(layer: number, kvHead: number, slot: number): Float32Array;
  /** Stores one token's rows in `layer`: k and v are fp32 [kvHeads * headDim], stored as kvType. Returns the slot. Full pool: NATIVE_OUT_OF_MEMORY. */
  append(layer: number, k: Float32Array, v: Float32Array, position: number): number;
  /**
   * Stores T tokens' rows in `layer` in one call: k and v are fp32 [T * kvHeads * headDim], token i
   * at position firstPosition + i. All or nothing (a full pool changes nothing: NATIVE_OUT_OF_MEMORY).
   * Returns the slot of the first token.
   */
  appendBatch(layer: number, k: Float32Array, v: Float32Array, firstPosition: number): number;
  /** Every layer keeps at most its first `tokens` slots (the rest are forgotten; memory stays). */
  truncate(tokens: number): void;
  /** Tokens stored in `layer`. */
  length(layer: number): number;
  /** One stored key row as fp32 [headDim] (for tests and inspection; int8 rows dequantised: scale * q). */
  readK(layer: number, kvHead: number, slot: number): Float32Array;
  /** One stored value row as fp32 [headDim]. */
  readV(layer: number, kvHead: number, slot: number): Float32Array;
  /** The token position stored in a slot. */
  position(layer: number, slot: number): number;
  /** Forgets every token of every layer; keeps the memory. */
  reset(): void;
  /**
   * Bytes of one layer's packed snapshot section for `tokens` slots (0..capacityTokens): K rows
   * [kvHeads, tokens, headDim] then V rows of the same shape, as the pool's raw elements (fp16 bits,
   * fp32 or int8); int8 pools only: K scales [kvHeads, tokens] fp32, then V scales; last, positions
   * [tokens] int32. Little-endian, no padding. Partial key rows are not included (import rebuilds them).
   */
  snapshotLayerBytes(tokens: number, layer?: number): number;
  /**
   * Packs slots [0, tokens) of `layer` (tokens <= length(layer)) into `out`, whose byteLength must be
   * snapshotLayerBytes(tokens) (any byteOffset). NATIVE_BAD_ARGUMENT for an evicting or freed pool.
   */
  exportLayer(layer: number, tokens: number, out: Uint8Array): void;
  /**
   * The inverse of exportLayer() into an EMPTY layer (length 0): `data` is exactly
   * snapshotLayerBytes(tokens) bytes (any byteOffset), tokens <= layerCapacityTokens(layer), positions >= 0 and
   * strictly increasing. Sets length(layer) = tokens and, when the layer's partial projection is set,
   * rebuilds the imported slots' partial key rows (as setPartialProjection does). NATIVE_BAD_ARGUMENT,
   * with nothing changed, for a non-empty layer, a wrong size, bad positions, or an evicting or freed pool.
   */
  importLayer(layer: number, tokens: number, data: Uint8Array): void;
  /** Created with `eviction`. */
  readonly evicting: boolean;
  /** The mapping is 2 MiB aligned and the kernel accepted madvise(MADV_HUGEPAGE) (whether THP then backs it is the kernel's choice). */
  readonly hugePages: boolean;
  /** Tokens evicted from `layer` since creation/reset (evicting pools). */
  evictions(layer: number): number;
  /** Sum of evictions over layers (0 for a pool without eviction). */
  evictionsTotal(): number;
  /** Slot of the latest appended token of `layer` (-1: none). */
  lastSlot(layer: number): number;
  /** The position the layer's latest append evicted, or -1 (evicting pools). */
  lastEvicted(layer: number): number;
  /** Prefetch counter of a slot (evicting pools). */
  counter(layer: number, slot: number): number;
  /** Unmaps now. Idempotent. */
  free(): void;
  /** Same as free(). */
  dispose(): void;
}

export declare function createKvPool(options: KvPoolOptions): KvPool;

/** One layer of a LayeredKvPool: its row shape (and InfiniGen's p for it), or the earlier layer whose rows it reads. */
/** A layer's rows: a shape of its own, an earlier layer's (kvSource), or none at all (a linear-attention layer: its questions are refused, owns() is false, its snapshot section is 0 bytes). */
export type LayeredKvPoolLayer = { kvHeads: number; headDim: number; partialDim?: number } | { kvSource: number } | { rows: 'none' };

export interface LayeredKvPoolOptions {
  /** [layer] each model layer's rows: layers of one shape share one native pool, a kvSource layer has none. */
  layerShapes: LayeredKvPoolLayer[];
  /** Exactly one of: slots every owning layer holds (its layerCapacity entry when > 0)... */
  tokens?: number;
  /** ...or the byte bound of all the groups' allocations, split in proportion to what a token costs each. */
  budgetBytes?: number;
  kvType?: KvType;
  eviction?: { sinks: number; recent: number; ageEvery: number };
  /** [layer] as KvPoolOptions.layerCapacity, by model layer (entries of KV-shared layers are ignored). */
  layerCapacity?: number[];
  /**
   * [layer] as KvPoolOptions.ringLayers, by model layer (a ring needs its layerCapacity entry > 0 and
   * `tokens`, not a budget; entries of KV-shared layers are ignored: such a layer reads its source's
   * ring, and isRing / ringStart / lastSlot / layerCapacityTokens of it answer the source's).
   */
  ringLayers?: boolean[];
  hugePages?: boolean;
}

/**
 * A KV pool whose layers differ in row shape (KV heads × head dim) or read an earlier layer's rows
 * (Gemma 4): one native pool per distinct shape, each model layer routed to (its group's pool, its
 * index there); every function of this module that takes (pool, layer) routes. byteLength and
 * bytesPerToken are the groups' sums (a KV-shared layer costs nothing); a shared layer's snapshot
 * section is 0 bytes. NATIVE_BAD_ARGUMENT for an inconsistent layer list.
 */
export declare function createLayeredKvPool(options: LayeredKvPoolOptions): KvPool;

/**
 * What a layer's attention computes beyond q·kᵀ (native/src/attention_params.h), the optional last
 * argument of every attention function; left out, or any field left out, is today's attention bit for
 * bit. NATIVE_BAD_ARGUMENT names the field: a scale that is not a finite number > 0, a window that is
 * not an integer in [0, 2^31 − 1], sinks that are not a Float32Array of `heads` finite values, a
 * softcap that is negative or not finite.
 */
export interface AttentionArgs {
  /** multiplies q·k (default 1/sqrt(headDim); Gemma: query_pre_attn_scalar^-0.5) */
  scale?: number;
  /**
   * 0 (default): every row. Else a sliding window: a key at position p takes part for the query at
   * position t iff t − window < p ≤ t (positions as the pool records them per slot; the query is the
   * layer's latest token, and for attendCausal query i the chunk's i-th). Rows outside are not read.
   */
  window?: number;
  /** [heads] one logit per query head that joins the softmax denominator and has no value row (gpt-oss) */
  sinks?: Float32Array;
  /** 0 (default): off. Else each scaled logit s becomes softcap·tanh(s / softcap) before the softmax (Gemma 2). */
  softcap?: number;
}

/**
 * Single-query decode attention over every token of `layer`:
 * q is fp32 [heads * headDim], out is fp32 [heads * headDim] (must not share memory with q);
 * heads is a multiple of pool.kvHeads (GQA); scale 1/sqrt(headDim); stable softmax.
 */
export declare function attend(pool: KvPool, layer: number, q: Float32Array, heads: number, out: Float32Array, attention?: AttentionArgs): void;

/** attend() computed by the scalar C++ reference. */
export declare function attendReference(pool: KvPool, layer: number, q: Float32Array, heads: number, out: Float32Array, attention?: AttentionArgs): void;

/**
 * Causal (prefill) attention: q is fp32 [T * heads * headDim] for the layer's last T tokens (appended
 * already), out the same size (not sharing memory with q). Query i attends every slot up to and
 * including its own: slots 0 .. length(layer) − T + i. T = 1 is exactly attend(). `threads` (1..64,
 * default 1): the queries are spread over that many threads (query i on thread i % threads; the
 * calling thread is one of them), or for T = 1 the KV heads in contiguous ranges (a thread only per
 * 32,768 (token, query head) pairs: starting one costs ~100 us), with the same result bit for bit.
 */
export declare function attendCausal(pool: KvPool, layer: number, q: Float32Array, heads: number, out: Float32Array, threads?: number, attention?: AttentionArgs): void;

/** attendCausal() computed by the scalar C++ reference. */
export declare function attendCausalReference(pool: KvPool, layer: number, q: Float32Array, heads: number, out: Float32Array, attention?: AttentionArgs): void;

/**
 * Single-query decode attention over explicit per-KV-head slot lists (policies streaming, h2o,
 * quest, snapkv, oracle), reading the listed pool rows in place (nothing is copied; the same bits as
 * gathering them first): KV head g's query heads attend slots[offsets[g] .. offsets[g+1]) of `layer`
 * (each < length(layer); the caller includes the current token). offsets: [kvHeads + 1], starting
 * at 0, strictly increasing (no empty list). Lists holding every slot ascending give exactly attend().
 * q, out: fp32 [heads * headDim], not sharing memory. `threads` (1..64, default 1): the KV heads
 * split in contiguous ranges over that many threads (a thread only per 32,768 (listed row, query head)
 * pairs), same bits.
 */
export declare function attendSlots(pool: KvPool, layer: number, q: Float32Array, heads: number, slots: Int32Array, offsets: Int32Array, out: Float32Array, threads?: number, attention?: AttentionArgs): void;

/**
 * Scaled attention logits of one query: out [heads, tokens] = q[h]·K[g][row t] / sqrt(headDim) for the
 * layer's first `tokens` rows (default: all): a plain layer's row t is slot t, a ring's is slot
 * (ringStart(layer) + t) % layerCapacityTokens(layer), its oldest token first. For H2O's accumulated
 * mass, the oracle and recall.
 * attention: its scale replaces 1/sqrt(headDim) and its softcap caps every logit; window and sinks
 * change no logit and are not applied (validated all the same).
 */
export declare function attentionScores(pool: KvPool, layer: number, q: Float32Array, heads: number, out: Float32Array, tokens?: number, attention?: AttentionArgs): void;

/**
 * The offload path's upload (native/src/row_gather.h): for i < count copies the stored K and V rows
 * of (layer, KV head heads[i], slot slots[i]) to row dest[i] of kOut and vOut (row r = elements
 * r·headDim .. (r+1)·headDim). fp16 pools: kOut/vOut are Uint16Array and get the raw fp16 bits (exact);
 * fp32 pools: Float32Array, the values; int8 pools: Float32Array, dequantised (scale · q, as attention
 * reads them). kOut and vOut: the same length, a multiple of headDim, not sharing memory. Everything
 * is checked before anything is written (NATIVE_BAD_ARGUMENT: a head, slot >= length(layer) or dest row
 * out of range). Returns the bytes written to kOut and vOut together (count · 2 · headDim · element bytes).
 */
export declare function gatherRows(pool: KvPool, layer: number, heads: Int32Array, slots: Int32Array, dest: Int32Array, count: number, kOut: Uint16Array | Float32Array, vOut: Uint16Array | Float32Array): number;

// ─── Comparison policies' selection over the pool (native/src/policy_select.h) ─────────────────
// The rules of app/engine/kv/policies-reference.ts (the tests' oracle) in C++: the same inputs give
// the same slots (ties: the lower slot; NaN ranks below everything). The state kept across steps is
// the caller's typed arrays. Selections write per KV head an ascending list into `slots` at
// offsets[g] .. offsets[g+1] (offsets: Int32Array [kvHeads + 1]) and return the total; a list may be
// empty; the current token is never in it.

/** streaming: sinks [0, min(sinks, N)) + the recent window [N − window, N) into out (≥ N elements); returns the count. */
export declare function selectStreaming(N: number, sinks: number, window: number, out: Int32Array): number;

/**
 * h2o, one step: acc Float32Array [kvHeads, C] (accumulated mass), live Uint8Array [kvHeads, C]
 * (1 = still held). Per KV head: the live recent slots (j ≥ N − recent) + the (budget − their count)
 * older live slots of largest acc; every older slot not kept gets live = 0 for good. recent ≤ budget ≤ N ≤ C.
 * slots: ≥ kvHeads·budget elements.
 */
export declare function selectH2o(acc: Float32Array, live: Uint8Array, kvHeads: number, C: number, N: number, budget: number, recent: number, slots: Int32Array, offsets: Int32Array, threads?: number): number;

/**
 * h2o, one query's mass: per query head, softmax of its logits over its KV head's list
 * (slots/offsets as attendSlots takes them, the current token included; empty lists allowed), or
 * over every slot < n without lists (prefill), added to acc [kvHeads, C] (double(acc) + e / sum, rounded to fp32).
 */
export declare function h2oAccumulate(pool: KvPool, layer: number, q: Float32Array, heads: number, acc: Float32Array, C: number, n: number, slots?: Int32Array, offsets?: Int32Array, threads?: number, attention?: AttentionArgs): void;

/** quest: extends pageMin / pageMax [kvHeads, maxPages, headDim] (JS min/max) with the stored key rows of slots from..to−1 (page j / pageSize). */
export declare function questExtendBounds(pool: KvPool, layer: number, pageMin: Float32Array, pageMax: Float32Array, maxPages: number, pageSize: number, from: number, to: number): void;

/**
 * quest, one step: q [heads, d]; bounds [kvHeads, maxPages, d]; the ⌈N / pageSize⌉ pages ranked per
 * KV head by max over the group of (U − max U), U = Σ max(q·min, q·max); the top `topPages` pages'
 * slots < N. slots: ≥ kvHeads·min(N, topPages·pageSize) elements. threads (default 1): the KV heads
 * split over that many threads of the native pool the dense stages use; the same lists.
 */
export declare function selectQuest(q: Float32Array, heads: number, kvHeads: number, d: number, pageMin: Float32Array, pageMax: Float32Array, maxPages: number, N: number, pageSize: number, topPages: number, slots: Int32Array, offsets: Int32Array, threads?: number): number;

/**
 * snapkv, once per prompt of P tokens: obsQ [window, heads, headDim], row i the query of position
 * P − window + i; per KV head the top (budget − window) prefix slots by the pooled votes (max-pool,
 * odd kernel) + the window. window ≤ budget < P ≤ length(layer). slots: ≥ kvHeads·budget elements.
 */
export declare function snapkvCompress(pool: KvPool, layer: number, obsQ: Float32Array, heads: number, P: number, window: number, budget: number, kernel: number, slots: Int32Array, offsets: Int32Array, attention?: AttentionArgs): number;

/**
 * InfiniGen's column energies (ARCHITECTURE.md §4.2) of one layer for a run of `tokens` tokens: for t
 * in order, for each KV head g, qEnergy[g·d + j] += Σ over g's query heads |(q[t, h] · A_g)[j]| and
 * kEnergy[g·d + j] += |(k[t, g] · A_g)[j]|. q fp32 [tokens, heads, d]; k fp32 [tokens, kvHeads, d];
 * a fp32 [kvHeads, d, d] (A_g[i, j] at (g·d + i)·d + j); qEnergy, kEnergy Float64Array [kvHeads·d]
 * (not sharing memory). Products in fp32 (FMA where available), sums in fp64 in token order, so a run
 * split over calls gives the same bits. `reference`: the scalar fp64-product reference, for tests.
 */
export declare function skewEnergy(q: Float32Array, k: Float32Array, tokens: number, heads: number, kvHeads: number, headDim: number, a: Float32Array, qEnergy: Float64Array, kEnergy: Float64Array, reference?: boolean): void;

/**
 * Memory read bandwidth in GB/s (1e9 bytes/s): the fastest of `repeats` passes of a vectorised sum
 * over a buffer of `bytes` (65536 .. 2^36; use several times the last-level cache) allocated and
 * touched once, split over `threads` threads (1 .. 256, default 1). For benchmarks (bench/).
 * NATIVE_BAD_ARGUMENT out of range, NATIVE_OUT_OF_MEMORY when the buffer cannot be allocated.
 */
export declare function measureReadBandwidth(bytes: number, repeats: number, threads?: number): number;

export interface InfinigenNativeKnobs {
  alpha: number;
  /** fetch cap, (0, 1] */
  cap: number;
  denseLayers?: number;
}

export interface SpeculatorOptions extends InfinigenNativeKnobs {
  /** query heads (a multiple of pool.kvHeads) */
  heads: number;
  /** score scale (default 1/sqrt(headDim)) */
  scale?: number;
  /**
   * 0 (default): begin() queues the job to the speculator's own native thread, which overlaps it with
   * the caller's next dense work. 1..64: no such thread; begin() runs the job before it returns, its KV
   * groups split over that many threads of the native pool the dense stages use, and attend() splits its
   * KV heads over them. Same selections and output bits either way.
   */
  inlineThreads?: number;
  /**
   * One attention block per layer (length pool.layers; an undefined entry: the default) for attend(),
   * attendReference() and recall(), copied at creation (sinks included). Per layer at creation, not per
   * call: the decode step then passes nothing more across the JS boundary than it did. The selection's
   * own score scale stays `scale`. recall() applies scale, softcap and window; a sink's share is left out.
   */
  layerAttention?: (AttentionArgs | undefined)[];
}

/** Figures of a layer's latest step. Times in ns of CLOCK_MONOTONIC (same clock as process.hrtime.bigint()). */
export interface SpeculatorLayerStats {
  valid: boolean;
  /** tokens per KV head selected (the current token not included) */
  n: number;
  /** N, the candidates */
  candidates: number;
  /** reuse cache, summed over KV heads */
  hits: number;
  misses: number;
  /** K+V bytes read from the pool for misses (what would cross to a device) */
  bytes: number;
  beginNs: number;
  jobStartNs: number;
  jobEndNs: number;
  specNs: number;
  gatherNs: number;
  waitNs: number;
  attnNs: number;
}

/**
 * Per sparse layer ℓ (>= denseLayers) and decode step: begin(ℓ, qSpec) with qSpec fp32 [heads·headDim] (layer ℓ's
 * post-RoPE query computed from layer ℓ−1's input) queues q̃ = qSpec·A[:, C], scoring against the partial keys of
 * slots 0..length(ℓ)−1, selection and the gather of the selected rows into staging on a native thread; append the
 * current token to ℓ, then attend(ℓ, q, out) waits for the job and attends over [gathered rows, current token].
 * Do not truncate/reset/free the pool while jobs are pending: drain() (clearStaging() after a truncate/reset).
 */
export interface Speculator {
  begin(layer: number, qSpec: Float32Array): void;
  /** `threads` (1..64, default 1): the KV heads split over that many threads, same bits */
  attend(layer: number, q: Float32Array, out: Float32Array, threads?: number): void;
  /** attend() by the scalar reference over the same selected rows, read from the pool */
  attendReference(layer: number, q: Float32Array, out: Float32Array): void;
  /** share of the true softmax mass of q over every slot that the selected set + current token covers (mean over heads) */
  recall(layer: number, q: Float32Array): number;
  /** the latest selection of (layer, kvHead), ascending slots */
  selected(layer: number, kvHead: number): Int32Array;
  stats(layer: number): SpeculatorLayerStats;
  drain(): void;
  clearStaging(): void;
  free(): void;
}

export declare function createSpeculator(pool: KvPool, options: SpeculatorOptions): Speculator;

/** A weight as the file holds it: `rows` GGUF rows of `cols` elements of GGML type `type`. */
export interface DenseStageMatrix {
  /** the tensor's bytes in the mapped file (TensorView.bytes()): read in place, never copied */
  data: Uint8Array;
  /** GGML type id: F32 0, F16 1, Q4_0 2, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14 */
  type: number;
  rows: number;
  cols: number;
  /** [rows] */
  bias?: Float32Array;
}

/**
 * Stage `stage` of a llama-family model (dense_stage.h): stage 0 pre(0); 0 < s < L post(s−1) and pre(s);
 * stage L post(L−1) and the LM head. Which matrices it needs follows from that.
 */
export interface DenseStageConfig {
  stage: number;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  ffn: number;
  vocab: number;
  eps: number;
  /** 0 neox (pairs i, i + headDim/2), 1 interleaved (2i, 2i + 1) */
  ropeLayout: 0 | 1;
  /** dimensions of each head RoPE rotates (default headDim; fewer: partial rotary, the rest pass through); even */
  rotaryDim?: number;
  /** the dense workers a run splits its matmuls over (1..64) */
  threads: number;
  /** 'amx': avx512, with AMX-INT8 tiles in the prefill of Q4_0, Q8_0 and the K-quants (CPUs with AMX; others have no 'amx') */
  impl?: 'auto' | 'scalar' | 'avx2' | 'avx512' | 'amx';
  /** [hidden]: attn_norm of layer `stage`, or output_norm at stage L */
  norm: Float32Array;
  /** [hidden], stage > 0: ffn_norm of layer stage − 1 */
  ffnNorm?: Float32Array;
  attnOutput?: DenseStageMatrix;
  ffnGate?: DenseStageMatrix;
  ffnUp?: DenseStageMatrix;
  ffnDown?: DenseStageMatrix;
  q?: DenseStageMatrix;
  k?: DenseStageMatrix;
  v?: DenseStageMatrix;
  /** layer stage + 1's attn_q (InfiniGen's speculative query) */
  qSpec?: DenseStageMatrix;
  /** [headDim], stage < L: per-head RMSNorm weights of q and k before RoPE (Qwen3, Gemma 3); both or neither */
  qNorm?: Float32Array;
  kNorm?: Float32Array;
  /** [headDim]: layer stage + 1's q norm, required with qNorm when the stage has qSpec */
  qSpecNorm?: Float32Array;
  lmHead?: DenseStageMatrix;
  /** Gemma-style layers (dense_stage.h): [hidden] norms of the attention's and the MLP's outputs, stage > 0 */
  attnPostNorm?: Float32Array;
  ffnPostNorm?: Float32Array;
  /** the MLP gate's nonlinearity (default 'silu'); 'gelu_tanh': GeGLU; 'swiglu_oai': gpt-oss's clamped SwiGLU (min(g, 7)·σ(1.702·min(g, 7))·(clamp(u, ±7) + 1)) */
  activation?: 'silu' | 'gelu_tanh' | 'swiglu_oai';
  /** stage L: logits ← c·tanh(logits / c); 0 or absent: none */
  finalSoftcap?: number;
  /**
   * Gemma 4 (native/src/dense_stage.h): layers differ in head dim. headDim / kvHeads / rotaryDim are
   * layer `stage`'s; attnHeadDim layer stage − 1's (attn's width heads·attnHeadDim and attnOutput's
   * columns; default headDim); specHeadDim and specRotaryDim layer stage + 1's (qSpec, qSpecNorm and
   * the spec RoPE rows; default headDim and rotaryDim, or specHeadDim when only that is given).
   */
  attnHeadDim?: number;
  specHeadDim?: number;
  specRotaryDim?: number;
  /** the layer reads an earlier layer's K/V: no k, v, kNorm (run outputs q, qSpec, hNext only) */
  kvShared?: boolean;
  /** v is k's projection before k's norm (no attn_v; v left out) */
  valueFromKey?: boolean;
  /** [headDim]: per-head RMSNorm of v (Gemma 4: ones, the norm has no weight) */
  vNorm?: Float32Array;
  /** stage > 0: the layer's output (residual included) times this (layer_output_scale) */
  outputScale?: number;
  /**
   * P of the per-layer embeddings (E2B/E4B). Stage 0: pleModelProj [layers·P, hidden] and pleProjNorm
   * [P]; run takes pleTok [T, layers·P] and outputs ple [T, layers·P]. Stage > 0: pleInpGate
   * [P, hidden], pleProj [hidden, P], plePostNorm [hidden]; run takes ple [T, P] (layer stage − 1's).
   */
  pleDim?: number;
  pleModelProj?: DenseStageMatrix;
  pleProjNorm?: Float32Array;
  pleInpGate?: DenseStageMatrix;
  pleProj?: DenseStageMatrix;
  plePostNorm?: Float32Array;
  /**
   * Mixture of experts (stage > 0, native/src/dense_stage.h): layer stage − 1's MLP is `expertsUsed`
   * of `experts` SwiGLU experts of width `expertFfn`, picked per token by softmax over router
   * [experts, hidden] (ffn_gate_inp), weights renormalised over the picks when normTopK. The expert
   * tensors are the file's 3-D ones as 2-D views: gateExps / upExps [experts·expertFfn, hidden],
   * downExps [experts·hidden, expertFfn]; only routed experts' rows are read. ffnGate/Up/Down absent.
   * Or each an array of `experts` matrices, one per expert ([expertFfn, hidden] / [hidden, expertFfn]):
   * a Hugging Face folder's experts, tensors of their own (all three arrays, or none).
   */
  experts?: number;
  expertsUsed?: number;
  expertFfn?: number;
  normTopK?: boolean;
  /**
   * 'softmax' (default): softmax over every logit, the k largest probabilities. 'softmax_weight'
   * (gpt-oss): the k largest logits (router bias added), a softmax over those k (normTopK off). The
   * router's and the experts' biases ride on their matrices: gateExps/upExps bias [experts·expertFfn],
   * downExps bias [experts·hidden], expert e's at e·rows (stacked tensors only).
   */
  gating?: 'softmax' | 'softmax_weight';
  router?: DenseStageMatrix;
  gateExps?: DenseStageMatrix | DenseStageMatrix[];
  upExps?: DenseStageMatrix | DenseStageMatrix[];
  downExps?: DenseStageMatrix | DenseStageMatrix[];
  /**
   * A shared expert beside the routed ones (Qwen3.5-MoE): every token runs the SwiGLU MLP shexpGate /
   * shexpUp [sharedFfn, hidden], shexpDown [hidden, sharedFfn], scaled by σ(x·shexpGateInp [hidden]).
   */
  sharedFfn?: number;
  shexpGate?: DenseStageMatrix;
  shexpUp?: DenseStageMatrix;
  shexpDown?: DenseStageMatrix;
  shexpGateInp?: Float32Array;
  /**
   * Qwen3.5 (native/src/dense_stage.h): qGated, every attn_q (q, qSpec) holds per head its query then
   * its gate ([heads·2·headDim, hidden]; run outputs gate beside q); attnGated (stage > 0), attn ⊙ σ(gate)
   * before attnOutput (run takes gate); attnCols (stage > 0), attn's width when layer stage − 1 is a
   * linear layer (its valueHeads·headDim: attnOutput is its ssm_out).
   */
  qGated?: boolean;
  attnGated?: boolean;
  attnCols?: number;
  /**
   * A linear-attention layer's stage (stage < L, Qwen3.5): no q, k, v; run outputs linQkv
   * [T, (2·linKeyHeads + linValueHeads)·linHeadDim], linZ [T, linValueHeads·linHeadDim], linBeta
   * (σ applied) and linDecay (softplus(alpha + linDt)·linA) [T, linValueHeads], and qSpec when given.
   */
  linKeyHeads?: number;
  linValueHeads?: number;
  linHeadDim?: number;
  linQkv?: DenseStageMatrix;
  linZ?: DenseStageMatrix;
  linBeta?: DenseStageMatrix;
  linAlpha?: DenseStageMatrix;
  linDt?: Float32Array;
  linA?: Float32Array;
}

export interface DenseStageInputs {
  tokens: number;
  /** [tokens, hidden] */
  h: Float32Array;
  /** [tokens, heads·headDim], stage > 0 */
  attn?: Float32Array;
  /** [tokens, rotaryDim/2] each, stage < L */
  ropeCos?: Float32Array;
  ropeSin?: Float32Array;
  /** [tokens, headDim/2] each: layer stage + 1's rows for qSpec when its RoPE differs (absent: ropeCos/ropeSin) */
  specRopeCos?: Float32Array;
  specRopeSin?: Float32Array;
  /** stage L: the token rows to compute logits for */
  rows?: Uint32Array;
  /** stage 0 with pleDim: [tokens, layers·pleDim] the per-layer token rows */
  pleTok?: Float32Array;
  /** stage > 0 with pleDim: [tokens, pleDim] layer stage − 1's per-layer input */
  ple?: Float32Array;
  /** stage > 0 with attnGated: [tokens, heads·headDim] layer stage − 1's gate */
  gate?: Float32Array;
}

export interface DenseStageOutputs {
  q?: Float32Array;
  k?: Float32Array;
  v?: Float32Array;
  qSpec?: Float32Array;
  hNext?: Float32Array;
  /** [rows, vocab] */
  logits?: Float32Array;
  /** stage 0 with pleDim: [tokens, layers·pleDim] */
  ple?: Float32Array;
  /** qGated, an attention layer: [tokens, heads·headDim] the gate halves of W_q */
  gate?: Float32Array;
  /** a linear-attention layer's stage: what gatedDeltaNet reads */
  linQkv?: Float32Array;
  linZ?: Float32Array;
  linBeta?: Float32Array;
  linDecay?: Float32Array;
  /** a mixture-of-experts stage: [tokens, expertsUsed] the experts each token ran, largest weight first */
  routed?: Uint32Array;
  /** [tokens, expertsUsed] their weights */
  routedWeights?: Float32Array;
  /** bytes of expert weights the run read: the router and each routed expert's gate, up, down rows once */
  expertBytes?: number;
}

export interface DenseStage {
  run(inputs: DenseStageInputs): DenseStageOutputs;
  /** the least of its matrices' kernel implementations */
  readonly impl: 'scalar' | 'avx2' | 'avx512' | 'amx' | 'auto';
  free(): void;
}

/** The dot kernels DenseStage runs for weights of GGML type `ggmlType` on this CPU; null: none (the ONNX path then). */
export declare function denseKernel(ggmlType: number): 'amx' | 'avx512' | 'avx2' | 'scalar' | null;

/** NATIVE_BAD_ARGUMENT when a shape, a byte size or a type without kernels does not fit. */
export declare function createDenseStage(config: DenseStageConfig): DenseStage;

export interface GatedDeltaNetArgs {
  keyHeads: number;
  valueHeads: number;
  headDim: number;
  convKernel: number;
  eps: number;
  tokens: number;
  /** [tokens, (2·keyHeads + valueHeads)·headDim] */
  qkv: Float32Array;
  /** [tokens, valueHeads·headDim] */
  z: Float32Array;
  /** [tokens, valueHeads] σ applied */
  beta: Float32Array;
  /** [tokens, valueHeads] log of the per-token decay */
  decay: Float32Array;
  /** [C, convKernel] */
  conv: Float32Array;
  /** [headDim] */
  norm: Float32Array;
  /** [valueHeads·headDim² + (convKernel − 1)·C], advanced in place (linear-attention.ts's layout) */
  state: Float32Array;
  /** [tokens, valueHeads·headDim] written */
  out: Float32Array;
  /** tokens per chunk of the chunked form: 0 or absent its default (64), 1 token by token */
  chunk?: number;
  threads: number;
}

/**
 * One linear-attention layer's mixer over a chunk of tokens (native/src/gated_delta_net.h: the causal
 * convolution, the gated delta rule, the gated RMSNorm). NATIVE_BAD_ARGUMENT on a wrong size.
 */
export declare function gatedDeltaNet(args: GatedDeltaNetArgs): void;

export interface NativeSelectInput {
  heads: number;
  kvHeads: number;
  p: number;
  slots: number;
  qPartial: Float32Array;
  kPartial: Float32Array;
  candidates: Uint8Array;
  scale: number;
}

/** The native selection rule on explicit inputs (compare with selectInfinigen of app/engine/kv/select-reference.ts). */
export declare function selectInfinigenNative(
  layer: number,
  input: NativeSelectInput,
  knobs: InfinigenNativeKnobs,
): { selected: Int32Array[]; n: number; candidateCount: number; counts: Int32Array };

/** The instruction-set levels of the native kernels, each including the ones before it. */
export type CpuLevelName = 'portable' | 'avx2' | 'avx512' | 'amx';

/**
 * The environment variable that caps every kernel choice of the addon at a level (native/src/cpu_level.h),
 * read once as the addon loads: an AVX-512 or AMX host then runs exactly the kernels of an AVX2 CPU
 * (bench/dense.mjs --cpu-level). Unset or empty: no cap. An unknown name, or a level this CPU lacks,
 * makes loading the addon throw NativeError NATIVE_BAD_ARGUMENT with details { variable, value,
 * reason: 'unknown-level' | 'cpu-lacks-level', cpuLevel }.
 */
export declare const CPU_LEVEL_ENV: 'LONGHAND_CPU_LEVEL';

export interface CpuLevelInfo {
  /** the level the kernels run at: the lower of LONGHAND_CPU_LEVEL's and the CPU's */
  level: CpuLevelName;
  /** the CPU's own level (AVX-512 means F/BW/VL/DQ; AMX means AMX-TILE + AMX-INT8 usable by this process) */
  cpu: CpuLevelName;
  /** true when LONGHAND_CPU_LEVEL put `level` below `cpu` */
  forced: boolean;
  /** attention's kernel (attentionKernel()): 'avx512' | 'avx2-fma-f16c' | 'portable' */
  attention: string;
  /** the dot kernels DenseStage runs per GGML weight type ('amx': AVX512's with AMX tiles in prefill; MXFP4, Q4_1, Q5_0 and Q5_1 have none, AVX512's there) */
  dense: Record<'F32' | 'F16' | 'Q4_0' | 'Q4_1' | 'Q5_0' | 'Q5_1' | 'Q8_0' | 'Q4_K' | 'Q5_K' | 'Q6_K' | 'MXFP4', 'amx' | 'avx512' | 'avx2' | 'scalar' | null>;
}

/** Which level and which kernels this process's addon runs. */
export declare function cpuLevel(): CpuLevelInfo;

export interface DotPeak {
  /** the kernels measured: the ones DenseStage runs for the type (denseKernel) */
  kernel: 'amx' | 'avx512' | 'avx2' | 'scalar';
  /** tokens per call (dense_stage's prefill block: 64, AMX 256) */
  tokens: number;
  /** weight elements × tokens (multiply-accumulates) per second, one thread, best pass */
  macsPerSecond: number;
}

/**
 * The dot kernels' compute peak on one thread for GGML type `ggmlType` (native/src/quant_dot_peak.h:
 * a 32 × 2048 weight tile in cache, a token block passing over it; best of `repeats` passes, 1 .. 100,
 * default 5; each ~2e8 MACs). For bench/'s prefill compute bound. NATIVE_BAD_ARGUMENT: a type
 * without kernels, repeats out of range.
 */
export declare function measureDotPeak(ggmlType: number, repeats?: number): DotPeak;

/** The environment variable that, set to 1 before the addon loads, exports the fault hook. */
export declare const TEST_FAULTS_ENV: 'LONGHAND_TEST_FAULTS';

export type TestFaultKind = 'segv' | 'abort';

/** True when the addon was loaded with LONGHAND_TEST_FAULTS=1 and so has testFault(). */
export declare function testFaultsEnabled(): boolean;

/**
 * Test only: kills the calling process with a real native fault, 'segv' (a write through a null
 * pointer: SIGSEGV) or 'abort' (SIGABRT). Without LONGHAND_TEST_FAULTS=1 at load, and for any
 * other kind, throws NativeError NATIVE_BAD_ARGUMENT instead. Never returns normally.
 */
export declare function testFault(kind: TestFaultKind): never;
