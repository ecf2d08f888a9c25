// Quest (ARCHITECTURE.md §6): the stored keys are cut into pages of `pageSize` slots, each with its
// element-wise key bounds; a step scores each page by the largest logit its bounds allow for the
// query and attends the `topPages` best pages per KV head. The selection runs natively (native/src/
// policy_select.h) by exactly the rule of quest() in app/engine/kv/policies-reference.ts, the
// oracle of its tests.
//
// The bounds are the state kept across steps, extended natively from where they stopped: chunk by
// chunk in a prompt (observePrompt), and to the N candidates before each selection. Default pages:
// max(1, round(budget / pageSize)), every page when the budget covers the context.
import { questExtendBounds, selectQuest } from '../../../../native/index.js';
import { pageCount } from '../../kv/policies-reference.ts';
import { layerRows, type PolicyContext } from './row-policy.ts';
import { ListPolicy } from './selection-lists.ts';
import type { SparsePolicyOptions } from './selection-settings.ts';

export class QuestPolicy extends ListPolicy {
  readonly name = 'quest';
  /** pages of a full context */
  private readonly maxPages: number;
  /** [layer] element-wise key bounds [kvHeads, maxPages, d] */
  private readonly pageMin: Float32Array[] = [];
  private readonly pageMax: Float32Array[] = [];
  /** [layer] the bounds cover slots 0..bounded−1 */
  private readonly bounded: number[] = [];

  constructor(options: SparsePolicyOptions, ctx: PolicyContext) {
    super(options, ctx);
    const { layers, contextLength: C } = ctx.shape;
    this.maxPages = pageCount(C, this.settings.pageSize);
    for (let l = 0; l < layers; l++) {
      const { kvHeads, headDim: d } = layerRows(ctx.shape, l);
      this.pageMin.push(new Float32Array(kvHeads * this.maxPages * d).fill(Infinity));
      this.pageMax.push(new Float32Array(kvHeads * this.maxPages * d).fill(-Infinity));
      this.bounded.push(0);
    }
  }

  protected choose(layer: number, q: Float32Array, N: number): Int32Array[] {
    const { heads } = this.shape;
    const { kvHeads, headDim: d } = layerRows(this.shape, layer);
    const s = this.settings;
    const budget = this.budgetFor(N);
    this.extendBounds(layer, N);
    const pages = pageCount(N, s.pageSize);
    const topPages = s.topPages ?? (budget >= N ? pages : Math.max(1, Math.round(budget / s.pageSize)));
    const out = this.output(layer, kvHeads * Math.min(N, topPages * s.pageSize));
    selectQuest(q, heads, kvHeads, d, this.pageMin[layer]!, this.pageMax[layer]!, this.maxPages, N, s.pageSize, topPages, out, this.offsets, this.shape.threads ?? 1);
    return this.views(out, layer);
  }

  /** The chunk's rows are in the pool (and in cache): bound them now, not all at the first decode step. */
  protected override observeChunk(layer: number, _q: Float32Array, p0: number, T: number): void {
    this.extendBounds(layer, p0 + T);
  }

  override truncate(n: number): void {
    super.truncate(n);
    const { layers } = this.shape;
    const P = this.maxPages;
    for (let l = 0; l < layers; l++) {
      const { kvHeads, headDim: d } = layerRows(this.shape, l);
      // bounds cannot be undone token by token: drop the pages from the one holding slot n on
      const firstPage = Math.floor(Math.min(n, this.bounded[l]!) / this.settings.pageSize);
      for (let g = 0; g < kvHeads; g++) {
        this.pageMin[l]!.fill(Infinity, (g * P + firstPage) * d, (g + 1) * P * d);
        this.pageMax[l]!.fill(-Infinity, (g * P + firstPage) * d, (g + 1) * P * d);
      }
      this.bounded[l] = firstPage * this.settings.pageSize;
    }
  }

  /** As a prompt would have (observePrompt): the first timed step does not pay for bounding 0..N−1. */
  appendedWithoutForward(N: number): void {
    for (let l = this.denseLayers; l < this.shape.layers; l++) this.extendBounds(l, N);
  }

  /** The page bounds of layer ℓ cover slots 0..N−1 (extended from where they stopped). */
  private extendBounds(layer: number, N: number): void {
    if (N <= this.bounded[layer]!) return;
    questExtendBounds(this.pool, layer, this.pageMin[layer]!, this.pageMax[layer]!, this.maxPages, this.settings.pageSize, this.bounded[layer]!, N);
    this.bounded[layer] = N;
  }
}
