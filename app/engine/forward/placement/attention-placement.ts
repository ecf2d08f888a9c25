// Where attention runs (ARCHITECTURE.md §3): the one interface of the step loop's attention, so
// that any row policy runs under any placement. Two exist: in place on the CPU over the pool's rows
// (in-place.ts) and on a device over a row buffer that receives only the rows it lacks
// (device-rows.ts). A prompt chunk's causal attention always runs in place, natively.
import type { RowPolicy } from '../policy/row-policy.ts';
import type { StepTrace } from '../step-trace.ts';

export interface AttentionPlacement {
  /**
   * true: it reads a policy's lists (select) rather than rows the policy gathered itself, so the loop
   * settles a layer's selection before the next layer's prefetch is queued (one job to wait for).
   */
  readonly readsLists: boolean;
  /** The pool appended into slots first..first+count−1 of `layer` (any chunk). */
  appended(layer: number, first: number, count: number): void;
  /** A prompt chunk's causal attention of T queries q [T, heads·d] into out [T, heads·d] (in place, natively). */
  attendPrompt(layer: number, q: Float32Array, T: number, out: Float32Array): void;
  /** A decode step's attention of q [heads·d] over every stored row of `layer` into out. */
  attendAll(layer: number, q: Float32Array, out: Float32Array): Promise<void> | void;
  /** A decode step's attention over the policy's rows of `layer` (N past tokens) and the current token. */
  attendSelected(layer: number, policy: RowPolicy, q: Float32Array, N: number, out: Float32Array): Promise<void> | void;
  /** After the policy's figures of `layer`: what this placement measured itself (bytes crossed, hits, misses, times). */
  figures(layer: number, trace: StepTrace, waitedMs: number): void;
  /** After a decode step's last layer. */
  endStep(position: number): void;
  /** The pool no longer holds what the placement mirrors (reset, truncate, import, rollback). */
  clear(): void;
  /** Bytes the placement holds beside the pool (the device's row buffer). */
  readonly bufferBytes: number;
  dispose(): Promise<void>;
}
