// Attention in place on the CPU (the default placement): the native kernels read the pool's rows
// where they are. Every row of a layer (attendCausal), a policy's slot lists (attendSlots), or the
// rows a policy gathered itself (InfiniGen's staged rows, attendInPlace). Nothing crosses to a
// device; the policy's figures say what would have. Each layer's scale, window and soft-cap go with
// every call (attention-args.ts).
import { attendCausal, attendSlots, type AttentionArgs, type KvPool } from '../../../../native/index.js';
import type { RowPolicy } from '../policy/row-policy.ts';
import type { AttentionPlacement } from './attention-placement.ts';
import { packSlotLists } from '../policy/slot-lists.ts';

/** the native attention calls' most threads (native LH_MAX_ATTENTION_THREADS) */
const MAX_ATTENTION_THREADS = 64;

export class InPlaceAttention implements AttentionPlacement {
  readonly readsLists = false;
  readonly bufferBytes = 0;
  /** native attention threads: a prefill chunk's queries, or one decode query's KV heads, are spread over them */
  private readonly threads: number;
  /** [layer] the layer is a ring (a sliding-window layer, native kv_pool.h "Rings") */
  private readonly rings: boolean[];

  constructor(
    private readonly pool: KvPool,
    private readonly heads: number,
    threads: number,
    /** [layer] the layer's scale, window, soft-cap where not the defaults (attention-args.ts) */
    private readonly args: readonly (AttentionArgs | undefined)[] = [],
  ) {
    this.threads = Math.min(threads, MAX_ATTENTION_THREADS);
    this.rings = Array.from({ length: pool.layers }, (_, l) => pool.isRing(l));
  }

  appended(): void {}

  attendPrompt(layer: number, q: Float32Array, _T: number, out: Float32Array): void {
    attendCausal(this.pool, layer, q, this.heads, out, this.threads, this.args[layer]);
  }

  attendAll(layer: number, q: Float32Array, out: Float32Array): void {
    attendCausal(this.pool, layer, q, this.heads, out, this.threads, this.args[layer]);
  }

  attendSelected(layer: number, policy: RowPolicy, q: Float32Array, N: number, out: Float32Array): void {
    if (policy.attendInPlace) {
      policy.attendInPlace(layer, q, out, this.threads);
      return;
    }
    // the current token's slot: its position, or where a ring (a window layer) put it
    const { slots, offsets } = packSlotLists(policy.select(layer, q, N), this.rings[layer] ? this.pool.lastSlot(layer) : N);
    attendSlots(this.pool, layer, q, this.heads, slots, offsets, out, this.threads, this.args[layer]);
  }

  figures(): void {}

  endStep(): void {}

  clear(): void {}

  async dispose(): Promise<void> {}
}
