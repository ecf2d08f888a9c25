// Which rows of the pool a layer attends (ARCHITECTURE.md §3, §6): the one interface every KV
// policy of the forward pass implements, one file per policy beside this one, and registry.ts to
// make them and to say whether a switch can keep the cached state.
//
// The step loop (step.ts) calls a layer's policy in this order; a prompt chunk is dense under every
// policy, so only observePrompt runs for it:
//
//   decode step:  sparseStep() once ─► per layer ℓ:
//                   prefetch(ℓ+1, q̃)      layer ℓ+1's selection may start now (InfiniGen's speculation)
//                   [append k, v of the current token to the pool]
//                   selects(ℓ) ? select(ℓ, q, N) ─► the placement attends [lists, current slot N]
//                                                    (or attendInPlace, rows the policy gathered itself)
//                              : the placement attends every row
//                   attended(ℓ, q, N)      bookkeeping (H2O's mass)
//                   figures(ℓ, trace)      the layer's figures into the step trace
//   prompt chunk: observePrompt(ℓ, q, p0, T) after the chunk's causal attention of layer ℓ
//
// A policy keeps its state per layer for every layer it was made for; the lists it returns are
// per KV head, ascending slots among 0..N−1, never the current token (the placement adds it). They
// stay valid until the policy's next select() of that layer.
import type { AttentionArgs, KvPool } from '../../../../native/index.js';
import type { StepTrace } from '../step-trace.ts';

export interface RowPolicy {
  readonly name: string;
  /** Layers below this attend to every row (they are measured as dense). */
  readonly denseLayers: number;
  /**
   * Whether the coming decode step selects rows at all (false: every layer attends every row and
   * the step reports no figures; InfiniGen before its columns are chosen).
   */
  sparseStep(): boolean;
  /** Layer ℓ of a sparse step selects rows (false: it attends every row). */
  selects(layer: number): boolean;
  /** Starts choosing layer ℓ's rows from a speculative query q̃ [heads·d] (policies that speculate). */
  prefetch?(layer: number, qSpec: Float32Array): void;
  /**
   * Waits until layer ℓ's rows are chosen; returns the ms waited. A placement that reads the lists
   * has the loop call it before the next layer's prefetch, so that the wait covers one job only.
   */
  settle?(layer: number): number;
  /** Per KV head the slots among 0..N−1 layer ℓ attends this step; q: [heads·d], the real query. */
  select(layer: number, q: Float32Array, N: number): Int32Array[];
  /**
   * In-place attention over rows the policy gathered itself (InfiniGen's staged rows) into out
   * [heads·d]; a policy without it has its lists attended by the placement.
   */
  attendInPlace?(layer: number, q: Float32Array, out: Float32Array, threads: number): void;
  /** After layer ℓ attended [its lists, current slot N]. */
  attended?(layer: number, q: Float32Array, N: number): void;
  /** Writes layer ℓ's figures for this step (selected, candidates, hits, misses, bytes, times). */
  figures(layer: number, N: number, trace: StepTrace): void;
  /** A prompt chunk of T tokens at p0 ran layer ℓ densely (its rows appended); q: [T, heads·d]. */
  observePrompt?(layer: number, q: Float32Array, p0: number, T: number): void;
  /** The latest selection of a layer (per KV head, ascending; empty before one). */
  selection(layer: number): readonly Int32Array[];
  /** The cache keeps its first n tokens (n = 0: it was reset). */
  truncate(n: number): void;
  /**
   * The largest position <= n where a cut leaves this policy's own state as a fresh prefill of the
   * first n tokens would make it (H2O's mass, SnapKV's window queries); absent: any position.
   */
  resumePoint?(n: number): number;
  /** The policy's own state at n (a resumePoint of it) for a snapshot; absent: it keeps none beyond the rows. */
  exportState?(n: number): PolicySequenceState;
  /** Takes exportState's result after the pool was given the snapshot's n tokens (a RangeError when it does not fit). */
  importState?(n: number, state: PolicySequenceState): void;
  /** The layers whose state exportState writes and importState needs (ascending). */
  stateLayers?(): number[];
  /** The pool now holds N tokens appended without a forward pass (the long-context benchmark's rows). */
  appendedWithoutForward?(N: number): void;
  /**
   * A sequence state the policy keeps in step with every chunk (InfiniGen's column energies): the
   * runner feeds it, and keeps it across a switch to a policy without one so a switch back is exact.
   */
  readonly sequence?: ChunkObserver;
  /** Before a prompt of `tokens` tokens at `start` (InfiniGen: find or calibrate its skew). */
  beforePrompt?(tokens: number, start: number, runner: PromptRunner): Promise<void>;
  /** After every prompt (InfiniGen: choose the partial columns over the sequence). */
  afterPrompt?(): Promise<void>;
  /** A prompt failed or was aborted: true when the chunks that ran must go too (a calibration on it was running). */
  abortPrompt?(): boolean;
  /** Waits for work in flight before the pool is read or changed outside a step (InfiniGen's queued jobs). */
  drain?(): void;
  /** Gives back native resources (the speculator). */
  free?(): void;
}

/**
 * A comparison policy's own sequence state at a cut of n tokens, as a snapshot keeps it: per layer
 * of `layers` a [rows, width] block of float32 (H2O: [kvHeads, n] accumulated mass; SnapKV: [w,
 * heads·d] the queries of positions n − w..n − 1).
 */
export interface PolicySequenceState {
  /** the policy that wrote it ('h2o', 'snapkv') */
  policy: string;
  /** the layers it holds, ascending */
  layers: number[];
  rows: number;
  width: number;
  /** [layers.length, rows, width] */
  data: Float32Array;
}

/** What a policy may ask of the runner before a prompt. */
export interface PromptRunner {
  /** Runs `tokens` greedy tokens from BOS on the empty cache, then empties it again (a self-generated calibration). */
  generateAndForget(tokens: number): Promise<void>;
}

/** Per-chunk rows of the sequence, in position order (InfiniGen's column energies; infinigen-state.ts). */
export interface ChunkObserver {
  /** A prompt chunk of T tokens at p0 starts; observe() keeps its rows until commitChunk. */
  startChunk(p0: number, T: number): void;
  /** One layer's q [T, heads·d] and k [T, kvHeads·d] of the running chunk. */
  observe(layer: number, q: Float32Array, k: Float32Array, T: number): void;
  /** The chunk ran through every layer. */
  commitChunk(): void;
  /** The chunk failed or was aborted: its rows never happened. */
  discardChunk(): void;
  /** The cache keeps its first n tokens. */
  truncate(n: number): void;
  /** The cache was emptied. */
  clearSequence(): void;
  /** The largest position <= n where the cache can be cut with this state exact. */
  resumePoint(n: number): number;
}

/** The KV heads and head dim of the rows one layer attends. */
export interface LayerRowShape {
  kvHeads: number;
  headDim: number;
}

/** What every policy of a runner is made for. */
export interface PolicyShape {
  layers: number;
  heads: number;
  /** every layer's, or, with perLayer, the largest (what buffers shared by the layers are sized by) */
  kvHeads: number;
  /** every layer's, or, with perLayer, the largest */
  headDim: number;
  /**
   * [layer] the rows each layer attends where layers differ (Gemma 4: window and global layers; a
   * KV-shared layer has its source's); undefined: every layer's are kvHeads × headDim. Ask layerRows().
   */
  perLayer?: readonly LayerRowShape[];
  contextLength: number;
  /** the runner's threads: native selections split their KV heads over them (default 1) */
  threads?: number;
  /**
   * [layer] true where the layer attends a sliding window (plan.ts gives it 'window' whatever was
   * picked): no stage speculates a query for it (default: none slides)
   */
  sliding?: readonly boolean[];
}

/** The KV heads and head dim of the rows layer ℓ attends. */
export function layerRows(shape: PolicyShape, layer: number): LayerRowShape {
  return shape.perLayer?.[layer] ?? shape;
}

/** Context a policy is made with. */
export interface PolicyContext {
  shape: PolicyShape;
  pool: KvPool;
  /** [layer] each layer's scale, window, soft-cap where not the defaults (placement/attention-args.ts): selections that compute attention mass use them too */
  attention?: readonly (AttentionArgs | undefined)[];
}
