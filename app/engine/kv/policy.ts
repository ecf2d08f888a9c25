// The one interface every KV policy fits (ARCHITECTURE.md §6). The engine asks a policy which pool
// slots each KV head of a layer attends to; the reference implementations (reference-policies.ts)
// and the native ones implement the same interface, so tests can run both on the same inputs.
//
// Contract of `select`:
//  - returns [kvHeads] Int32Arrays of slot indices, ascending, each slot a candidate (mask = 1);
//  - never includes the current token: it is not in the pool yet, and the caller always attends it;
//  - deterministic: ties go to the lower slot;
//  - throws UsageError (BAD_ARGUMENT) when an input the policy `needs` is missing or misshapen.
import type { H2oKnobs, OracleKnobs, QuestKnobs, SnapKvKnobs, StreamingKnobs } from './policies-reference.ts';
import type { InfinigenKnobs } from './select-reference.ts';

export type PolicyName = 'full' | 'infinigen' | 'h2o' | 'streaming' | 'quest' | 'snapkv' | 'oracle';

/** Extra inputs a policy reads; the engine computes only what the active policy needs. */
export type PolicyInput = 'partialKeys' | 'pageBounds' | 'accumulatedAttention' | 'trueScores' | 'observationScores';

export interface KnobsOf {
  full: Record<string, never>;
  infinigen: InfinigenKnobs;
  h2o: H2oKnobs;
  streaming: StreamingKnobs;
  quest: QuestKnobs;
  snapkv: SnapKvKnobs;
  oracle: OracleKnobs;
}

/** What one selection sees: one layer at one step (or at the end of prefill for snapkv). */
export interface SelectContext {
  readonly layer: number;
  /** query heads */
  readonly heads: number;
  readonly kvHeads: number;
  /** d */
  readonly headDim: number;
  /** slots in the layer's pool; in token order when nothing was evicted */
  readonly slots: number;
  /** [slots] 1 = holds a candidate token, 0 = empty or evicted */
  readonly candidates: Uint8Array;
  // 'partialKeys' (infinigen)
  /** [heads, p] speculated partial queries */
  readonly qPartial?: Float32Array;
  /** [kvHeads, slots, p] partial key cache */
  readonly kPartial?: Float32Array;
  /** p = ⌊r·d⌋ */
  readonly partialDim?: number;
  /** score scale (1/√d, or 1 when q is pre-scaled) */
  readonly scale?: number;
  // 'pageBounds' (quest)
  /** [heads, d] the full current query, post-RoPE */
  readonly q?: Float32Array;
  /** [kvHeads, pages, d] */
  readonly pageMin?: Float32Array;
  /** [kvHeads, pages, d] */
  readonly pageMax?: Float32Array;
  // 'accumulatedAttention' (h2o)
  /** [kvHeads, slots] accumulated softmax mass, summed over the group's query heads */
  readonly accumulatedAttention?: Float32Array;
  // 'trueScores' (oracle)
  /** [heads, slots] full scaled logits of the current query */
  readonly trueScores?: Float32Array;
  // 'observationScores' (snapkv, prefill only)
  /** [heads, window, slots] scaled logits of the last `window` prompt queries */
  readonly observationScores?: Float32Array;
}

export interface Policy<N extends PolicyName = PolicyName> {
  readonly name: N;
  readonly knobs: Readonly<KnobsOf[N]>;
  /** 'decode': select runs every step for every layer; 'prefill': once at the end of the prompt
   * (its result is the kept set; later tokens are all kept) */
  readonly phase: 'decode' | 'prefill';
  readonly needs: readonly PolicyInput[];
  /** [kvHeads] ascending slots (see the contract above). */
  select(ctx: SelectContext): Int32Array[];
}
