// H2O, heavy hitters (ARCHITECTURE.md §6): each KV head keeps its `recent` newest slots and, up to
// the budget, the older slots of the largest accumulated softmax mass. The mass is the state kept
// across steps, per KV head summed over its query heads: every prompt query's causal attention
// (observePrompt), then each decode step's attention over the slots it attended (attended, natively
// from the logits of the listed slots only). Evictions are permanent per KV head: an evicted slot
// never returns, as in H2O. The selection runs natively (native/src/policy_select.h) by exactly the
// rule of h2o() in app/engine/kv/policies-reference.ts, the oracle of its tests. Default recent:
// ⌊budget/2⌋.
//
// Prefix reuse and snapshots: after a prompt chunk the mass is the prompt queries' causal mass,
// which is what a fresh prefill of the same tokens computes. A decode step adds mass to (and evicts)
// prompt slots, and a cut back into the prompt cannot take that out, nor the mass of the prompt
// queries after the cut. So the policy keeps copies of the mass at prompt chunk ends
// (state-checkpoints.ts: at most POLICY_CHECKPOINTS, spread out, the latest prompt end always) and a
// cut lands exactly only there, at 0, or where the mass is still a prompt's (no decode step since):
// resumePoint says which, and a snapshot holds the mass at its cut.
import { h2oAccumulate, selectH2o } from '../../../../native/index.js';
import { packSlotLists } from './slot-lists.ts';
import { layerRows, type PolicyContext, type PolicySequenceState } from './row-policy.ts';
import { ListPolicy } from './selection-lists.ts';
import type { SparsePolicyOptions } from './selection-settings.ts';
import { StateCheckpoints } from './state-checkpoints.ts';

export class H2oPolicy extends ListPolicy {
  readonly name = 'h2o';
  /** [layer] accumulated softmax mass [kvHeads, contextLength], summed over the group */
  private readonly acc: Float32Array[] = [];
  /** [layer] 1 = slot still held by the KV head [kvHeads, contextLength] */
  private readonly live: Uint8Array[] = [];
  /**
   * [layer] the mass is a fresh prefill's of positions 0..exactEnd − 1 (no decode step since, no
   * gap); −1: it is not (a decode step added mass or evicted, or a cut landed off a checkpoint)
   */
  private readonly exactEnd: Int32Array;
  /** prompt chunk end E → per selecting layer the mass of slots 0..E − 1 [kvHeads, E] */
  private readonly checkpoints = new StateCheckpoints<Float32Array[]>();

  constructor(options: SparsePolicyOptions, ctx: PolicyContext) {
    super(options, ctx);
    const { layers, contextLength: C } = ctx.shape;
    for (let l = 0; l < layers; l++) {
      const { kvHeads } = layerRows(ctx.shape, l);
      this.acc.push(new Float32Array(kvHeads * C));
      this.live.push(new Uint8Array(kvHeads * C).fill(1));
    }
    this.exactEnd = new Int32Array(layers);
  }

  protected choose(layer: number, _q: Float32Array, N: number): Int32Array[] {
    const { contextLength: C } = this.shape;
    const { kvHeads } = layerRows(this.shape, layer);
    const budget = this.budgetFor(N);
    // H2O evicts for good: selectH2o clears `live` of every older slot it does not keep
    const recent = Math.min(budget, this.settings.window ?? Math.floor(budget / 2));
    const out = this.output(layer, kvHeads * budget);
    selectH2o(this.acc[layer]!, this.live[layer]!, kvHeads, C, N, budget, recent, out, this.offsets, this.shape.threads ?? 1);
    this.exactEnd[layer] = -1;
    return this.views(out, layer);
  }

  /** After layer ℓ attended [its lists, current slot N]: this step's mass goes to the attended slots. */
  attended(layer: number, q: Float32Array, N: number): void {
    const t0 = performance.now();
    const { slots, offsets } = packSlotLists(this.selection(layer), N);
    h2oAccumulate(this.pool, layer, q, this.shape.heads, this.acc[layer]!, this.shape.contextLength, N + 1, slots, offsets, this.shape.threads ?? 1, this.attention[layer]);
    this.exactEnd[layer] = -1;
    this.selectMs += performance.now() - t0;
  }

  /** As H2O does over the prompt: each query's causal attention mass (query i attends 0..p0+i). */
  protected override observeChunk(layer: number, q: Float32Array, p0: number, T: number): void {
    const { heads, contextLength: C } = this.shape;
    const w = heads * layerRows(this.shape, layer).headDim;
    for (let i = 0; i < T; i++) h2oAccumulate(this.pool, layer, q.subarray(i * w, (i + 1) * w), heads, this.acc[layer]!, C, p0 + i + 1, undefined, undefined, this.shape.threads ?? 1, this.attention[layer]);
    this.exactEnd[layer] = this.exactEnd[layer] === p0 ? p0 + T : -1;
    // the chunk ran through every selecting layer: its end is a fresh prefill's, keep a copy
    const end = p0 + T;
    if (layer === this.selectingLayers().at(-1) && this.commonExactEnd() === end) {
      const C = this.shape.contextLength;
      this.checkpoints.take(end, () => this.selectingLayers().map((l) => packMass(this.acc[l]!, layerRows(this.shape, l).kvHeads, C, end)));
    }
  }

  /**
   * The cache keeps its first n tokens. At an exact point (see resumePoint) the mass becomes a fresh
   * prefill's of those n tokens and every slot is held again; elsewhere only what the slots from n
   * on contributed is forgotten and they are held again (n = 0: a fresh sequence).
   */
  override truncate(n: number): void {
    super.truncate(n);
    this.checkpoints.truncate(n);
    const { layers, contextLength: C } = this.shape;
    const saved = this.checkpoints.get(n);
    const selecting = new Set(this.selectingLayers());
    let k = 0;
    for (let l = 0; l < layers; l++) {
      const acc = this.acc[l]!;
      const live = this.live[l]!;
      const cp = selecting.has(l) ? saved?.[k++] : undefined;
      const exact = n === 0 || this.exactEnd[l] === n || cp !== undefined;
      for (let g = 0; g < layerRows(this.shape, l).kvHeads; g++) {
        if (cp && this.exactEnd[l] !== n) acc.set(cp.subarray(g * n, (g + 1) * n), g * C);
        acc.fill(0, g * C + n, (g + 1) * C);
        live.fill(1, exact ? g * C : g * C + n, (g + 1) * C);
      }
      this.exactEnd[l] = exact ? n : -1;
    }
  }

  /** The largest position <= n where a cut leaves the mass a fresh prefill's: a kept chunk end, the end of the mass observed since the last exact point, or 0. */
  resumePoint(n: number): number {
    if (this.selectingLayers().length === 0) return n;
    const end = this.commonExactEnd();
    return Math.max(end >= 0 && end <= n ? end : 0, this.checkpoints.atOrBefore(n) ?? 0);
  }

  stateLayers(): number[] {
    return [...this.selectingLayers()];
  }

  /** The mass of slots 0..n − 1 per selecting layer ([kvHeads, n] each); n must be a resumePoint. */
  exportState(n: number): PolicySequenceState {
    if (this.resumePoint(n) !== n) throw new RangeError(`h2o: position ${n} is not exact (resume point ${this.resumePoint(n)})`);
    // layers may differ in KV heads (Gemma 4): each layer's [kvHeads_ℓ, n] in a block of the most
    // (PolicyShape.kvHeads is the largest), the rows past its own left 0
    const { kvHeads, contextLength: C } = this.shape;
    const layers = this.selectingLayers();
    const data = new Float32Array(layers.length * kvHeads * n); // [layers, kvHeads, n]
    const saved = this.checkpoints.get(n);
    layers.forEach((l, i) => {
      if (this.exactEnd[l] === n) data.set(packMass(this.acc[l]!, layerRows(this.shape, l).kvHeads, C, n), i * kvHeads * n);
      else if (saved) data.set(saved[i]!, i * kvHeads * n);
      // n = 0: no mass
    });
    return { policy: this.name, layers: [...layers], rows: kvHeads, width: n, data };
  }

  /** A snapshot's mass at n (the pool holds its n tokens): the state a fresh prefill of them leaves. */
  importState(n: number, s: PolicySequenceState): void {
    const { kvHeads, contextLength: C } = this.shape;
    const layers = this.selectingLayers();
    const missing = layers.filter((l) => !s.layers.includes(l));
    if (s.policy !== this.name) throw new RangeError(`h2o: the snapshot's policy state is ${s.policy}'s`);
    if (missing.length > 0) throw new RangeError(`h2o: the snapshot holds no mass for layer(s) ${missing.join(', ')} (written with other denseLayers)`);
    if (s.rows !== kvHeads || s.width !== n || s.data.length !== s.layers.length * kvHeads * n) {
      throw new RangeError(`h2o: the snapshot's mass is [${s.layers.length}, ${s.rows}, ${s.width}] (${s.data.length} values), expected [·, ${kvHeads}, ${n}]`);
    }
    this.truncate(0);
    const saved: Float32Array[] = [];
    for (const l of layers) {
      const block = s.data.subarray(s.layers.indexOf(l) * kvHeads * n, (s.layers.indexOf(l) + 1) * kvHeads * n);
      if (block.some((x) => !Number.isFinite(x) || x < 0)) throw new RangeError(`h2o: the snapshot's mass of layer ${l} holds a negative or non-finite value`);
      const own = layerRows(this.shape, l).kvHeads; // the block's first rows; exportState pads to kvHeads
      for (let g = 0; g < own; g++) this.acc[l]!.set(block.subarray(g * n, (g + 1) * n), g * C);
      this.exactEnd[l] = n;
      saved.push(block.slice(0, own * n));
    }
    if (n > 0) this.checkpoints.take(n, () => saved);
  }

  /** The exactEnd every selecting layer shares, or −1 when they differ (or one is not exact). */
  private commonExactEnd(): number {
    const layers = this.selectingLayers();
    if (layers.length === 0) return -1;
    const end = this.exactEnd[layers[0]!]!;
    return layers.every((l) => this.exactEnd[l] === end) ? end : -1;
  }
}

/** The mass of slots 0..n − 1 of each KV head, packed [kvHeads, n] (acc: [kvHeads, C]). */
function packMass(acc: Float32Array, kvHeads: number, C: number, n: number): Float32Array {
  const out = new Float32Array(kvHeads * n);
  for (let g = 0; g < kvHeads; g++) out.set(acc.subarray(g * C, g * C + n), g * n);
  return out;
}
