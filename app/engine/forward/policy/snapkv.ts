// SnapKV (ARCHITECTURE.md §6): the prompt's KV is compressed once by an observation window. The
// last `window` queries of the context are kept here (from observePrompt, and from select for
// decoded tokens, so a later prompt shorter than the window still has a full window). At the first
// decode step after a prompt, per layer, their logits over the whole prompt go through the rule
// once, natively (native/src/policy_select.h, exactly snapkv() of app/engine/kv/
// policies-reference.ts, the oracle of its tests): votes summed over the window, max-pooled over
// `poolKernel` neighbours, the top slots per KV head kept with the window itself. Every later step
// attends the kept prompt slots + every token after the prompt, as in the SnapKV paper.
//
// The budget ⌊fetchCap·P⌋ is spent once, on the prompt of P tokens (the window included); tokens
// generated after it are always attended. A later prompt (a continued conversation) recomputes over
// the whole context; a truncate into the prompt invalidates the kept set.
import { UsageError } from '../../../common/errors.ts';
import { snapkvCompress } from '../../../../native/index.js';
import { layerRows, type PolicyContext } from './row-policy.ts';
import { ListPolicy } from './selection-lists.ts';
import { SNAPKV_WINDOW, type SparsePolicyOptions } from './selection-settings.ts';

export class SnapkvPolicy extends ListPolicy {
  readonly name = 'snapkv';
  /** the observation window: queries kept, and at most the ones that vote */
  private readonly obsWindow: number;
  /** [layer] the last `window` queries by position modulo window [window, heads·d], and their positions (−1: none) */
  private readonly obsQ: Float32Array[] = [];
  private readonly obsPos: Int32Array[] = [];
  /** [layer] where the latest prompt ended (the prompt is slots 0..promptEnd−1) */
  private readonly promptEnd: number[] = [];
  /** [layer] per KV head the kept prompt slots, and the promptEnd they were chosen for (−1: stale) */
  private readonly kept: Int32Array[][] = [];
  private readonly keptFor: number[] = [];

  constructor(options: SparsePolicyOptions, ctx: PolicyContext) {
    super(options, ctx);
    this.obsWindow = this.settings.window ?? SNAPKV_WINDOW;
    if (this.obsWindow < 1) throw new UsageError(`snapkv: window must be ≥ 1, got ${this.obsWindow}`, { field: 'window' });
    const { layers, heads } = ctx.shape;
    for (let l = 0; l < layers; l++) {
      this.obsQ.push(new Float32Array(this.obsWindow * heads * layerRows(ctx.shape, l).headDim));
      this.obsPos.push(new Int32Array(this.obsWindow).fill(-1));
      this.promptEnd.push(0);
      this.kept.push([]);
      this.keptFor.push(-1);
    }
  }

  protected choose(layer: number, q: Float32Array, N: number): Int32Array[] {
    const P = this.promptEnd[layer]!;
    if (this.keptFor[layer] !== P) this.compressPrompt(layer, P);
    this.keepQuery(layer, q, 0, N); // a later, shorter prompt's window may reach back to here
    const kept = this.kept[layer]!;
    const after = Math.max(0, N - P);
    let total = 0;
    for (const prompt of kept) total += prompt.length + after;
    const out = this.output(layer, total);
    const lists: Int32Array[] = [];
    let o = 0;
    for (const prompt of kept) {
      out.set(prompt, o);
      for (let j = P, i = o + prompt.length; j < N; j++, i++) out[i] = j;
      lists.push(out.subarray(o, o + prompt.length + after));
      o += prompt.length + after;
    }
    return lists;
  }

  /** Keeps the window's queries; the prompt now ends at p0 + T, so the kept set is stale. */
  protected override observeChunk(layer: number, q: Float32Array, p0: number, T: number): void {
    for (let i = Math.max(0, T - this.obsWindow); i < T; i++) this.keepQuery(layer, q, i, p0 + i);
    this.promptEnd[layer] = p0 + T;
    this.keptFor[layer] = -1;
  }

  /** Forgets the queries from n on; a cut into a layer's prompt makes the prompt end at n. */
  override truncate(n: number): void {
    super.truncate(n);
    for (let l = 0; l < this.shape.layers; l++) {
      const pos = this.obsPos[l]!;
      for (let i = 0; i < pos.length; i++) if (pos[i]! >= n) pos[i] = -1;
      // the kept set depends on slots and queries < promptEnd only: a cut above it changes nothing
      if (n < this.promptEnd[l]!) {
        this.promptEnd[l] = n;
        this.keptFor[l] = -1;
      }
    }
  }

  /**
   * The pool's N tokens (the benchmark's random rows) are prompt with no stored queries: the next
   * step keeps the newest budget tokens of 0..N−1 (the rule's case without a window) instead of
   * attending every one of them.
   */
  appendedWithoutForward(N: number): void {
    for (let l = 0; l < this.shape.layers; l++) {
      this.promptEnd[l] = N;
      this.keptFor[l] = -1;
    }
  }

  /** The kept prompt slots of a layer per KV head (ascending), once computed for the current prompt. */
  keptPrompt(layer: number): { promptEnd: number; window: number; kept: Int32Array[] } | undefined {
    if (this.keptFor[layer] !== this.promptEnd[layer]) return undefined;
    return { promptEnd: this.promptEnd[layer]!, window: this.obsWindow, kept: this.kept[layer]! };
  }

  /** The stored queries of positions from..to−1 as [to − from, heads·d]; undefined when one is not stored. */
  storedQueries(layer: number, from: number, to: number): Float32Array | undefined {
    if (to - from > this.obsWindow || from > to) return undefined;
    const w = this.shape.heads * layerRows(this.shape, layer).headDim;
    const out = new Float32Array((to - from) * w);
    for (let p = from; p < to; p++) {
      const at = p % this.obsWindow;
      if (this.obsPos[layer]![at] !== p) return undefined;
      out.set(this.obsQ[layer]!.subarray(at * w, (at + 1) * w), (p - from) * w);
    }
    return out;
  }

  /** Stores row `row` of q ([rows, heads·d]) as the query of position `pos`. */
  private keepQuery(layer: number, q: Float32Array, row: number, pos: number): void {
    const w = this.shape.heads * layerRows(this.shape, layer).headDim;
    const at = pos % this.obsWindow;
    this.obsQ[layer]!.set(q.subarray(row * w, (row + 1) * w), at * w);
    this.obsPos[layer]![at] = pos;
  }

  /**
   * The kept prompt slots of `layer` for a prompt of P tokens. The window is the run of stored
   * queries ending at P − 1 (at most `window`, and at most the budget, so the window alone never
   * exceeds it); their logits over slots 0..P−1 (native, the causal mask applied) go through the
   * rule. A prompt within the budget keeps everything; without any stored query (a truncate into
   * the prompt, then no prompt) the newest tokens are kept.
   */
  private compressPrompt(layer: number, P: number): void {
    const { heads } = this.shape;
    const { kvHeads, headDim: d } = layerRows(this.shape, layer);
    const budget = this.budgetFor(P);
    const all = Int32Array.from({ length: P }, (_, j) => j);
    let kept: Int32Array[];
    if (budget >= P) kept = Array.from({ length: kvHeads }, () => all.slice());
    else {
      const pos = this.obsPos[layer]!;
      let w = 0;
      while (w < Math.min(this.obsWindow, budget) && pos[(P - 1 - w) % this.obsWindow] === P - 1 - w) w++;
      if (w === 0) kept = Array.from({ length: kvHeads }, () => all.slice(P - budget));
      else {
        const width = heads * d;
        const obs = new Float32Array(w * width); // [w, heads·d] the window's queries, oldest first
        for (let i = 0; i < w; i++) {
          const at = (P - w + i) % this.obsWindow;
          obs.set(this.obsQ[layer]!.subarray(at * width, (at + 1) * width), i * width);
        }
        const slots = new Int32Array(kvHeads * budget); // [kvHeads, budget]
        const off = new Int32Array(kvHeads + 1);
        snapkvCompress(this.pool, layer, obs, heads, P, w, budget, this.settings.poolKernel, slots, off, this.attention[layer]);
        kept = Array.from({ length: kvHeads }, (_, g) => slots.slice(off[g]!, off[g + 1]!));
      }
    }
    this.kept[layer] = kept;
    this.keptFor[layer] = P;
  }
}
