// The oracle (ARCHITECTURE.md §6; measurement only): per KV head the budget slots of the largest
// true attention mass of this step's query, from the native logits over every past slot run through
// oracle() of app/engine/kv/policies-reference.ts itself. It reads every key each step, which no
// real policy can afford: it bounds what a selection of that budget could recover.
import { attentionScores } from '../../../../native/index.js';
import { oracle } from '../../kv/policies-reference.ts';
import { layerRows, type PolicyContext } from './row-policy.ts';
import { ListPolicy } from './selection-lists.ts';
import type { SparsePolicyOptions } from './selection-settings.ts';

export class OraclePolicy extends ListPolicy {
  readonly name = 'oracle';
  /** [heads, contextLength] scratch for the logits */
  private readonly scores: Float32Array;

  constructor(options: SparsePolicyOptions, ctx: PolicyContext) {
    super(options, ctx);
    this.scores = new Float32Array(ctx.shape.heads * ctx.shape.contextLength);
  }

  protected choose(layer: number, q: Float32Array, N: number): Int32Array[] {
    const { heads } = this.shape;
    const { kvHeads } = layerRows(this.shape, layer);
    const budget = this.budgetFor(N);
    const sc = this.scores.subarray(0, heads * N);
    if (N > 0) attentionScores(this.pool, layer, q, heads, sc, N, this.attention[layer]);
    return oracle(sc, { heads, kvHeads, N }, { budget });
  }
}
