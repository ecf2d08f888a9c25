// What a model will cost in memory before anyone loads it: weights as the engine will hold
// them, the KV cache at a given context for the full cache and for InfiniGen's defaults, and
// whether that fits in the memory this machine has free right now.
import { freemem, totalmem } from 'node:os';
import { LonghandError } from '../../common/errors.ts';
import { linearStateFloats, ownsKv, type LayerSpec } from '../forward/layers/layer-spec.ts';
import { stateCheckpointCount, type StateCheckpointOptions } from '../forward/linear-attention.ts';
import { ringCheckpointCount, ringSlots, windowRingLayers, type RingCheckpointOptions } from '../kv/ring-checkpoints.ts';
import type { ModelHyperparameters, TensorDType } from './types.ts';

/** InfiniGen's defaults (ARCHITECTURE.md §4): partial-key ratio r and the fetch cap per step. */
export const INFINIGEN_DEFAULTS = { partialRatio: 0.3, fetchCap: 0.1 } as const;

/** Bytes per stored KV element. fp16 rows are the pool's default. */
export const KV_ELEMENT_BYTES = { fp16: 2, fp32: 4, int8: 1 } as const;
export type KvElementType = keyof typeof KV_ELEMENT_BYTES;

/** int8 rows carry one fp32 scale each (max|x|/127; native/src/kv_pool.h, "int8 rows"). */
export const KV_INT8_SCALE_BYTES = 4;

/** Bytes of one stored K (or V) row of `headDim` elements, its int8 scale included. */
export function kvRowBytes(kvType: KvElementType, headDim: number): number {
  return headDim * KV_ELEMENT_BYTES[kvType] + (kvType === 'int8' ? KV_INT8_SCALE_BYTES : 0);
}

/**
 * On the CPU provider ORT widens fp16/bf16 weights to fp32 (measured: no gain from fp16 there),
 * so those weights occupy twice their stored size; quantised blocks stay packed (MatMulNBits).
 */
const CPU_RESIDENT_FACTOR: Record<TensorDType, number> = {
  F32: 1, F16: 2, BF16: 2, Q8_0: 1, Q4_0: 1, Q4_1: 1, Q5_0: 1, Q5_1: 1, Q4_K: 1, Q5_K: 1, Q6_K: 1, MXFP4: 1,
};

export interface WeightSummary {
  /** Stored bytes per element type, as in the file. */
  bytesByType: Partial<Record<TensorDType, number>>;
  storedBytes: number;
  /**
   * Of storedBytes, a mixture-of-experts model's expert tensors (routers and the stacked or
   * per-expert ffn tensors): the native stages read them in place from the mapped file, so they
   * are page cache, not a copy — but a step's routed experts must be in RAM or it reads the disk.
   */
  expertBytes?: number;
}

export interface MemoryEstimate {
  contextTokens: number;
  kvType: KvElementType;
  /** Weights as the CPU engine holds them (a mixture-of-experts model's experts included, see expertBytes). */
  weightsBytes: number;
  /** Of weightsBytes, the expert tensors read in place from the mapped file (0 without experts). */
  expertBytes: number;
  /**
   * Full K and V rows for every layer with KV and each of its KV heads at `contextTokens`; a
   * sliding-window layer only its ring's (kv/ring-checkpoints.ts).
   */
  kvFullBytes: number;
  /** Per layer with KV: its kind and what the pool gives it (the pool's own arithmetic, see kvLayerEstimates). */
  kvLayers: KvLayerEstimate[];
  /** The KV-shared layers (Gemma 4): they keep no rows and attend `source`'s (no bytes of their own). */
  kvSharedLayers: { layer: number; source: number; kind: 'global' | 'window' }[];
  /** The KV memory the engine takes under 'full': every layer's pool bytes + the rings' checkpoints. */
  kvPoolBytes: number;
  /**
   * The linear-attention layers' recurrent state (Qwen3.5): float32 matrices and convolution tails of
   * one sequence, twice (the state and the running chunk's rollback copy; forward/linear-attention.ts),
   * whatever the context. 0 for a model without such layers. Part of both totals.
   */
  recurrentStateBytes: number;
  /** The most bytes that state's checkpoints take (one state each, stateCheckpointCount of them by default); part of both totals. */
  recurrentCheckpointBytes: number;
  /** InfiniGen keeps the full KV in RAM, plus one partial key row per token (⌊r·d⌋ columns). */
  partialKeyBytes: number;
  /** Rows staged for the compute device: the fetch cap's share of the context, all layers. */
  stagedKvBytes: number;
  totalFullBytes: number; // weights + full KV
  totalInfinigenBytes: number; // weights + full KV + partial keys + staged rows
  freeBytes: number;
  totalBytes: number;
  fitsFull: boolean;
  fitsInfinigen: boolean;
  /** The largest context (tokens) whose InfiniGen footprint fits in free memory. */
  maxContextThatFits: number;
  /** Offload mode (issue 14): what sits on the compute device, apart from what stays in host RAM. */
  offload: OffloadMemory;
}

/**
 * Offload mode's split (app/engine/forward/placement/offload-attention.ts). The row buffer holds fp16 rows for an
 * fp16 pool and fp32 rows otherwise (int8 rows are dequantised), per layer and KV head.
 */
export interface OffloadMemory {
  /** device: the dense graphs' weights (initializers on the provider), as the engine holds them */
  deviceWeightsBytes: number;
  /** device: the row buffer under 'full' (every layer holds every slot) */
  deviceRowBufferFullBytes: number;
  /**
   * device: the row buffer under InfiniGen with rowUpdate 'host' (the CPU provider): its dense layers
   * hold every slot, the sparse ones ⌈fetchCap·context⌉ + 2 rows per KV head (more if a selection
   * needs them). rowUpdate 'graph' (other providers) holds every slot, as under 'full'.
   */
  deviceRowBufferInfinigenBytes: number;
  /** host: the KV pool (full rows; InfiniGen adds the partial keys, which stay on the host) */
  hostKvBytes: number;
  hostKvInfinigenBytes: number;
}

/** One layer's KV as the pool will hold it. */
export interface KvLayerEstimate {
  layer: number;
  /** 'window': a sliding-window layer, kept as a ring; 'global': every token */
  kind: 'global' | 'window';
  window?: number;
  kvHeads: number;
  headDim: number;
  /** slots the pool gives the layer (the context, or the ring's) */
  slots: number;
  /** K and V rows of those slots (int8 scales included) */
  rowBytes: number;
  /** the layer's pool bytes: rows + the position of every slot (+ partial key rows when asked) */
  poolBytes: number;
  /** the layer's share of the ring checkpoints (window layers; kv/ring-checkpoints.ts) */
  checkpointBytes: number;
}

/** Bytes the KV pool gives one layer of `slots` slots (native/src/kv_pool.h layout, alignment padding aside). */
export function poolLayerBytes(kvHeads: number, headDim: number, kvType: KvElementType, slots: number, partialDim = 0): number {
  const slots8 = Math.ceil(slots / 8) * 8; // partial rows come in tiles of 8 slots
  return kvHeads * (slots * (2 * kvRowBytes(kvType, headDim) + 4) + slots8 * 2 * partialDim);
}

/**
 * Per layer with KV, what the pool holds at a context of `contextTokens` (forward/model-runner.ts
 * builds the pool by the same rule): a global layer every token, a sliding-window layer its ring,
 * and its share of the ring checkpoints (w − 1 rows each, at most `max` of them).
 */
export function kvLayerEstimates(
  hyper: ModelHyperparameters,
  contextTokens: number,
  options: { kvType?: KvElementType; layers?: readonly LayerSpec[]; prefillChunk?: number; windowRings?: boolean; ringCheckpoints?: RingCheckpointOptions; partialDim?: number } = {},
): KvLayerEstimate[] {
  const kvType = options.kvType ?? 'fp16';
  const chunk = options.prefillChunk ?? 128;
  const partialDim = options.partialDim ?? 0;
  const shapes = kvLayerShapes(hyper, options.layers);
  // the runner's rule (windowRingLayers): rings where they are smaller than the context, in a plain
  // pool and in a layered one (Gemma 4's mixed row shapes; its KV-shared layers keep no rows)
  const ringOf = new Map(options.layers !== undefined && options.windowRings !== false ? windowRingLayers(options.layers, chunk, contextTokens).map((r) => [r.layer, r.window]) : []);
  const ringWindow = (layer: number): number | undefined => ringOf.get(layer);
  const largest = Math.max(0, ...shapes.map(({ layer }) => ringWindow(layer) ?? 0));
  const max = options.ringCheckpoints?.max ?? ringCheckpointCount(contextTokens, largest);
  return shapes.map(({ layer, kvHeads, headDim }) => {
    const spec = options.layers?.[layer]?.attention;
    const window = spec?.kind === 'attention' ? spec.window : undefined;
    const ring = ringWindow(layer) !== undefined;
    const slots = ring ? ringSlots(window!, chunk, contextTokens) : contextTokens;
    // a checkpoint section: (w − 1) rows of K and V, int8 scales, one position each (kv_pool.h snapshots)
    const checkpointBytes = ring ? max * (window! - 1) * (kvHeads * 2 * kvRowBytes(kvType, headDim) + 4) : 0;
    return {
      layer,
      kind: window !== undefined ? 'window' : 'global',
      ...(window !== undefined ? { window } : {}),
      kvHeads,
      headDim,
      slots,
      rowBytes: slots * kvHeads * 2 * kvRowBytes(kvType, headDim),
      poolBytes: poolLayerBytes(kvHeads, headDim, kvType, slots, partialDim),
      checkpointBytes,
    };
  });
}

/** The KV rows of one layer that keeps them: its KV heads and their width. */
interface KvLayerShape {
  layer: number;
  kvHeads: number;
  headDim: number;
}

/**
 * The layers that keep K and V rows, with their shape: from the family's layer specs when given
 * (forward/layers: a layer without attention keeps none, layers may differ), else every layer as
 * the hyperparameters say (what every family declares today, so the figures are the same).
 */
function kvLayerShapes(hyper: ModelHyperparameters, layers: readonly LayerSpec[] | undefined): KvLayerShape[] {
  if (layers === undefined) return Array.from({ length: hyper.layers }, (_, layer) => ({ layer, kvHeads: hyper.kvHeads, headDim: hyper.headDim }));
  const out: KvLayerShape[] = [];
  layers.forEach((spec, layer) => {
    // a KV-shared layer (kvSource) reads another layer's rows and keeps none
    if (ownsKv(spec)) out.push({ layer, kvHeads: spec.attention.kvHeads, headDim: spec.attention.headDim });
  });
  return out;
}

/** Bytes of one copy of the linear-attention layers' state (LinearAttentionState holds it and a rollback copy). */
function recurrentBytes(layers: readonly LayerSpec[] | undefined): number {
  let floats = 0;
  for (const spec of layers ?? []) if (spec.attention.kind === 'linear') floats += linearStateFloats(spec.attention);
  return 4 * floats;
}

export function kvBytesPerToken(hyper: ModelHyperparameters, kvType: KvElementType = 'fp16', layers?: readonly LayerSpec[]): number {
  // K and V: per layer with KV, kvHeads rows of headDim elements each (+ one scale per int8 row)
  let bytes = 0;
  for (const { kvHeads, headDim } of kvLayerShapes(hyper, layers)) bytes += 2 * kvHeads * kvRowBytes(kvType, headDim);
  return bytes;
}

export function partialKeyBytesPerToken(hyper: ModelHyperparameters, partialRatio: number = INFINIGEN_DEFAULTS.partialRatio, layers?: readonly LayerSpec[]): number {
  // Partial keys are fp16: per layer with KV, (kvHeads, ⌊r·d⌋)
  let bytes = 0;
  for (const { kvHeads, headDim } of kvLayerShapes(hyper, layers)) bytes += kvHeads * Math.floor(partialRatio * headDim) * KV_ELEMENT_BYTES.fp16;
  return bytes;
}

export function residentWeightBytes(weights: WeightSummary): number {
  let bytes = 0;
  for (const [dtype, stored] of Object.entries(weights.bytesByType) as [TensorDType, number][]) {
    bytes += stored * CPU_RESIDENT_FACTOR[dtype];
  }
  return bytes;
}

export function estimateMemory(
  hyper: ModelHyperparameters,
  weights: WeightSummary,
  contextTokens: number,
  options: {
    kvType?: KvElementType;
    freeBytes?: number;
    totalBytes?: number;
    partialRatio?: number;
    fetchCap?: number;
    denseLayers?: number;
    /** The family's layer specs (forward/layers familyOf(hyper).layers(hyper)); default: every layer has hyper's KV heads. */
    layers?: readonly LayerSpec[];
    /** the runner's prefill chunk (a ring's size depends on it; default 128) */
    prefillChunk?: number;
    /** the rings' checkpoints (default every 1024 tokens, ringCheckpointCount of them) */
    ringCheckpoints?: RingCheckpointOptions;
    /** the linear-attention state's checkpoints (default every 1024 tokens, stateCheckpointCount of them) */
    stateCheckpoints?: StateCheckpointOptions;
  } = {},
): MemoryEstimate {
  const kvType = options.kvType ?? 'fp16';
  const partialRatio = options.partialRatio ?? INFINIGEN_DEFAULTS.partialRatio;
  const fetchCap = options.fetchCap ?? INFINIGEN_DEFAULTS.fetchCap;
  const freeBytes = options.freeBytes ?? freemem();
  const totalBytes = options.totalBytes ?? totalmem();

  const weightsBytes = residentWeightBytes(weights);
  const kvPerToken = kvBytesPerToken(hyper, kvType, options.layers);
  const partialPerToken = partialKeyBytesPerToken(hyper, partialRatio, options.layers);
  const stagedPerToken = kvPerToken * fetchCap;

  const kvLayers = kvLayerEstimates(hyper, contextTokens, { kvType, layers: options.layers, prefillChunk: options.prefillChunk, ringCheckpoints: options.ringCheckpoints });
  const rings = kvLayers.some((l) => l.slots < contextTokens);
  // without rings every layer holds the context: the per-token figure, exactly as before
  const kvFullBytes = rings ? kvLayers.reduce((s, l) => s + l.rowBytes + l.checkpointBytes, 0) : kvPerToken * contextTokens;
  const kvPoolBytes = kvLayers.reduce((s, l) => s + l.poolBytes + l.checkpointBytes, 0);
  const partialKeyBytes = partialPerToken * contextTokens;
  const stagedKvBytes = Math.ceil(stagedPerToken * contextTokens);
  const recurrentStateBytes = 2 * recurrentBytes(options.layers);
  const checkpoints = options.stateCheckpoints?.max ?? stateCheckpointCount(contextTokens, options.stateCheckpoints?.every);
  const recurrentCheckpointBytes = recurrentStateBytes > 0 ? checkpoints * recurrentBytes(options.layers) : 0;
  const totalFullBytes = weightsBytes + kvFullBytes + recurrentStateBytes + recurrentCheckpointBytes;
  const totalInfinigenBytes = totalFullBytes + partialKeyBytes + stagedKvBytes;
  const perTokenInfinigen = kvPerToken + partialPerToken + stagedPerToken;
  const maxContextThatFits = Math.max(0, Math.floor((freeBytes - weightsBytes - recurrentStateBytes - recurrentCheckpointBytes) / perTokenInfinigen));
  // offload: one buffer row per (layer with KV, KV head, slot) for K and for V; InfiniGen's dense
  // layers (below denseLayers) hold every slot, the others the fetch cap's rows
  const denseLayers = Math.min(hyper.layers, options.denseLayers ?? 2);
  const sparseRows = Math.min(contextTokens, Math.ceil(fetchCap * contextTokens) + 2);
  let rowBufferFull = 0;
  let rowBufferInfinigen = 0;
  for (const { layer, kvHeads, headDim } of kvLayerShapes(hyper, options.layers)) {
    const bufferRowBytes = 2 * kvHeads * headDim * (kvType === 'fp16' ? 2 : 4);
    rowBufferFull += contextTokens * bufferRowBytes;
    rowBufferInfinigen += (layer < denseLayers ? contextTokens : sparseRows) * bufferRowBytes;
  }
  const offload: OffloadMemory = {
    deviceWeightsBytes: weightsBytes,
    deviceRowBufferFullBytes: rowBufferFull,
    deviceRowBufferInfinigenBytes: rowBufferInfinigen,
    hostKvBytes: kvFullBytes,
    hostKvInfinigenBytes: kvFullBytes + partialKeyBytes,
  };

  return {
    contextTokens,
    kvType,
    weightsBytes,
    expertBytes: weights.expertBytes ?? 0,
    kvFullBytes,
    kvLayers,
    kvSharedLayers: (options.layers ?? []).flatMap((spec, layer) =>
      spec.attention.kind === 'attention' && spec.attention.kvSource !== undefined ? [{ layer, source: spec.attention.kvSource, kind: spec.attention.window !== undefined ? ('window' as const) : ('global' as const) }] : [],
    ),
    kvPoolBytes,
    recurrentStateBytes,
    recurrentCheckpointBytes,
    partialKeyBytes,
    stagedKvBytes,
    totalFullBytes,
    totalInfinigenBytes,
    freeBytes,
    totalBytes,
    fitsFull: totalFullBytes <= freeBytes,
    fitsInfinigen: totalInfinigenBytes <= freeBytes,
    maxContextThatFits,
    offload,
  };
}

/**
 * Refuses a load that cannot fit before any work starts: weights as held plus the full KV cache
 * at the chosen context against free memory, with the numbers and the largest context that fits.
 */
export function assertFits(estimate: MemoryEstimate, modelName: string, poolBudgetBytes = 0): void {
  // a pool budget smaller than the full cache is all the KV memory the engine will take
  const kvBytes = poolBudgetBytes > 0 ? Math.min(poolBudgetBytes, estimate.kvFullBytes) : estimate.kvFullBytes;
  const neededBytes = estimate.weightsBytes + kvBytes;
  if (neededBytes <= estimate.freeBytes) return;
  const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(2)} GiB`;
  const perToken = estimate.contextTokens > 0 ? estimate.kvFullBytes / estimate.contextTokens : 0;
  const suggested = perToken > 0 ? Math.max(0, Math.floor((estimate.freeBytes - estimate.weightsBytes) / perToken)) : 0;
  const advice = suggested >= 256 ? `a context of ${suggested} tokens would fit` : 'even a short context will not fit: choose a smaller or more quantised model';
  // a mixture-of-experts file: its experts are mapped, not copied, yet each step reads whichever
  // experts the router picks, so they must all stay in RAM (else every step waits on the disk)
  const experts = estimate.expertBytes > 0 ? `. Its experts are ${gib(estimate.expertBytes)} of the weights: read in place from the file, not copied, but any step may route to any of them, so they must stay in RAM (else every step waits on the disk)` : '';
  throw new LonghandError(
    'MEMORY_INSUFFICIENT',
    `${modelName} needs ${gib(neededBytes)} (weights ${gib(estimate.weightsBytes)} + KV cache ${gib(kvBytes)} at ${estimate.contextTokens} tokens) but ${gib(estimate.freeBytes)} is free; ${advice}${experts}`,
    { neededBytes, availableBytes: estimate.freeBytes, contextTokens: estimate.contextTokens, suggestedContext: suggested, ...(estimate.expertBytes > 0 ? { expertBytes: estimate.expertBytes } : {}) },
  );
}
