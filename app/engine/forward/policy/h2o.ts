// H2O, heavy hitters (ARCHITECTURE.md §6): each KV head keeps its `recent` newest slots and, up to
// the budget, the older slots of the largest accumulated softmax mass. The mass is the state kept
// across steps, per KV head summed over its query heads: every prompt query's causal attention
// (observePrompt), then each decode step's attention over the slots it attended (attended, natively
// from the logits of the listed slots only). Evictions are permanent per KV head: an evicted slot
// never returns, as in H2O. The selection runs natively (native/src/policy_select.h) by exactly the
// rule of h2o() in app/engine/kv/policies-reference.ts, the oracle of its tests. Default recent:
// ⌊budget/2⌋.
import { h2oAccumulate, selectH2o } from '../../../../native/index.js';
import { packSlotLists } from './slot-lists.ts';
import { layerRows, type PolicyContext } from './row-policy.ts';
import { ListPolicy } from './selection-lists.ts';
import type { SparsePolicyOptions } from './selection-settings.ts';

export class H2oPolicy extends ListPolicy {
  readonly name = 'h2o';
  /** [layer] accumulated softmax mass [kvHeads, contextLength], summed over the group */
  private readonly acc: Float32Array[] = [];
  /** [layer] 1 = slot still held by the KV head [kvHeads, contextLength] */
  private readonly live: Uint8Array[] = [];

  constructor(options: SparsePolicyOptions, ctx: PolicyContext) {
    super(options, ctx);
    const { layers, contextLength: C } = ctx.shape;
    for (let l = 0; l < layers; l++) {
      const { kvHeads } = layerRows(ctx.shape, l);
      this.acc.push(new Float32Array(kvHeads * C));
      this.live.push(new Uint8Array(kvHeads * C).fill(1));
    }
  }

  protected choose(layer: number, _q: Float32Array, N: number): Int32Array[] {
    const { contextLength: C } = this.shape;
    const { kvHeads } = layerRows(this.shape, layer);
    const budget = this.budgetFor(N);
    // H2O evicts for good: selectH2o clears `live` of every older slot it does not keep
    const recent = Math.min(budget, this.settings.window ?? Math.floor(budget / 2));
    const out = this.output(layer, kvHeads * budget);
    selectH2o(this.acc[layer]!, this.live[layer]!, kvHeads, C, N, budget, recent, out, this.offsets, this.shape.threads ?? 1);
    return this.views(out, layer);
  }

  /** After layer ℓ attended [its lists, current slot N]: this step's mass goes to the attended slots. */
  attended(layer: number, q: Float32Array, N: number): void {
    const t0 = performance.now();
    const { slots, offsets } = packSlotLists(this.selection(layer), N);
    h2oAccumulate(this.pool, layer, q, this.shape.heads, this.acc[layer]!, this.shape.contextLength, N + 1, slots, offsets, this.shape.threads ?? 1, this.attention[layer]);
    this.selectMs += performance.now() - t0;
  }

  /** As H2O does over the prompt: each query's causal attention mass (query i attends 0..p0+i). */
  protected override observeChunk(layer: number, q: Float32Array, p0: number, T: number): void {
    const { heads, contextLength: C } = this.shape;
    const w = heads * layerRows(this.shape, layer).headDim;
    for (let i = 0; i < T; i++) h2oAccumulate(this.pool, layer, q.subarray(i * w, (i + 1) * w), heads, this.acc[layer]!, C, p0 + i + 1, undefined, undefined, this.shape.threads ?? 1, this.attention[layer]);
  }

  /** Forget what the slots from n on contributed; they are held again (n = 0: a fresh sequence). */
  override truncate(n: number): void {
    super.truncate(n);
    const { layers, contextLength: C } = this.shape;
    for (let l = 0; l < layers; l++) {
      for (let g = 0; g < layerRows(this.shape, l).kvHeads; g++) {
        this.acc[l]!.fill(0, g * C + n, (g + 1) * C);
        this.live[l]!.fill(1, g * C + n, (g + 1) * C);
      }
    }
  }
}
