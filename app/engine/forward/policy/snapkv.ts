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
//
// Prompt and decode queries are kept apart: a decode step's query never overwrites a prompt's, so
// after any decode a cut back to the prompt's end still finds the window a fresh prefill of the
// prompt would have (a decoded token is never reused by prefix reuse: its later layers attended a
// subset). A cut lands exactly where the `window` prompt queries before it are kept: in the ring
// (the latest prompt's end) or in a checkpoint of them taken at a prompt chunk end
// (state-checkpoints.ts, for an edit further back); resumePoint says where, and a snapshot holds them.
import { UsageError } from '../../../common/errors.ts';
import { snapkvCompress } from '../../../../native/index.js';
import { layerRows, type PolicyContext, type PolicySequenceState } from './row-policy.ts';
import { ListPolicy } from './selection-lists.ts';
import { SNAPKV_WINDOW, type SparsePolicyOptions } from './selection-settings.ts';
import { StateCheckpoints } from './state-checkpoints.ts';

export class SnapkvPolicy extends ListPolicy {
  readonly name = 'snapkv';
  /** the observation window: queries kept, and at most the ones that vote */
  private readonly obsWindow: number;
  /** [layer] the last `window` prompt queries by position modulo window [window, heads·d], and their positions (−1: none) */
  private readonly obsQ: Float32Array[] = [];
  private readonly obsPos: Int32Array[] = [];
  /** [layer] the same for the decoded tokens' queries (a later prompt's window may reach back over them) */
  private readonly decodeQ: Float32Array[] = [];
  private readonly decodePos: Int32Array[] = [];
  /** [layer] where the latest prompt ended (the prompt is slots 0..promptEnd−1) */
  private readonly promptEnd: number[] = [];
  /** [layer] per KV head the kept prompt slots, and the promptEnd they were chosen for (−1: stale) */
  private readonly kept: Int32Array[][] = [];
  private readonly keptFor: number[] = [];
  /** prompt chunk end E → per selecting layer the prompt queries of positions E − w..E − 1 [w, heads·d], w = min(window, E) */
  private readonly checkpoints = new StateCheckpoints<Float32Array[]>();

  constructor(options: SparsePolicyOptions, ctx: PolicyContext) {
    super(options, ctx);
    this.obsWindow = this.settings.window ?? SNAPKV_WINDOW;
    if (this.obsWindow < 1) throw new UsageError(`snapkv: window must be ≥ 1, got ${this.obsWindow}`, { field: 'window' });
    const { layers, heads } = ctx.shape;
    for (let l = 0; l < layers; l++) {
      this.obsQ.push(new Float32Array(this.obsWindow * heads * layerRows(ctx.shape, l).headDim));
      this.obsPos.push(new Int32Array(this.obsWindow).fill(-1));
      this.decodeQ.push(new Float32Array(this.obsWindow * heads * layerRows(ctx.shape, l).headDim));
      this.decodePos.push(new Int32Array(this.obsWindow).fill(-1));
      this.promptEnd.push(0);
      this.kept.push([]);
      this.keptFor.push(-1);
    }
  }

  protected choose(layer: number, q: Float32Array, N: number): Int32Array[] {
    const P = this.promptEnd[layer]!;
    if (this.keptFor[layer] !== P) this.compressPrompt(layer, P);
    this.keepQuery(layer, this.decodeQ[layer]!, this.decodePos[layer]!, q, 0, N); // a later, shorter prompt's window may reach back to here
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
    for (let i = Math.max(0, T - this.obsWindow); i < T; i++) this.keepQuery(layer, this.obsQ[layer]!, this.obsPos[layer]!, q, i, p0 + i);
    this.promptEnd[layer] = p0 + T;
    this.keptFor[layer] = -1;
    // the chunk ran through every selecting layer: keep its end's window for a cut back to here
    const end = p0 + T;
    if (layer === this.selectingLayers().at(-1) && this.ringExactAt(end)) this.checkpoints.take(end, () => this.selectingLayers().map((l) => this.windowBefore(l, end)));
  }

  /** Forgets the queries from n on; a cut into a layer's prompt makes the prompt end at n. */
  override truncate(n: number): void {
    super.truncate(n);
    this.checkpoints.truncate(n);
    const saved = n > 0 && !this.ringExactAt(n) ? this.checkpoints.get(n) : undefined;
    for (let l = 0; l < this.shape.layers; l++) {
      for (const pos of [this.obsPos[l]!, this.decodePos[l]!]) for (let i = 0; i < pos.length; i++) if (pos[i]! >= n) pos[i] = -1;
      // the kept set depends on slots and queries < promptEnd only: a cut above it changes nothing
      if (n < this.promptEnd[l]!) {
        this.promptEnd[l] = n;
        this.keptFor[l] = -1;
      }
    }
    // a cut further back than the ring reaches, at a checkpoint: the ring gets that window back
    if (saved) {
      this.selectingLayers().forEach((l, i) => {
        this.obsPos[l]!.fill(-1);
        const rows = Math.min(this.obsWindow, n);
        for (let r = 0; r < rows; r++) this.keepQuery(l, this.obsQ[l]!, this.obsPos[l]!, saved[i]!, r, n - rows + r);
      });
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
      const q = this.storedQuery(layer, p);
      if (q === undefined) return undefined;
      out.set(q, (p - from) * w);
    }
    return out;
  }

  /**
   * The largest position <= n where a cut leaves the window a fresh prefill of the first n tokens
   * would have: every selecting layer keeps the prompt queries of the `window` positions before it
   * (0 always qualifies).
   */
  resumePoint(n: number): number {
    if (this.ringExactAt(n)) return n;
    const saved = this.checkpoints.atOrBefore(n) ?? 0;
    // a cut at m > 0 needs position m − 1's query: try the positions after each one in the ring, newest first
    const candidates = new Set<number>();
    for (const l of this.selectingLayers()) for (const p of this.obsPos[l]!) if (p >= 0 && p + 1 < n && p + 1 > saved) candidates.add(p + 1);
    for (const m of [...candidates].sort((a, b) => b - a)) if (this.ringExactAt(m)) return m;
    return saved;
  }

  stateLayers(): number[] {
    return [...this.selectingLayers()];
  }

  /** Per selecting layer the prompt queries of positions n − w..n − 1 (w = min(window, n)) as [w, heads·d]; n must be a resumePoint. */
  exportState(n: number): PolicySequenceState {
    if (this.resumePoint(n) !== n) throw new RangeError(`snapkv: position ${n} is not exact (resume point ${this.resumePoint(n)})`);
    const width = this.shape.heads * this.shape.headDim; // the widest layer's (PolicyShape.headDim is the largest): rows are padded to it
    const rows = Math.min(this.obsWindow, n);
    const layers = this.selectingLayers();
    const data = new Float32Array(layers.length * rows * width); // [layers, rows, heads·d]
    const saved = this.ringExactAt(n) ? undefined : this.checkpoints.get(n);
    // layers may differ in head dim (Gemma 4): each row padded to the widest layer's heads·d
    layers.forEach((l, i) => {
      const own = saved ? saved[i]! : this.windowBefore(l, n); // [rows, heads·d_ℓ]
      const w = this.rowWidth(l);
      for (let r = 0; r < rows; r++) data.set(own.subarray(r * w, (r + 1) * w), (i * rows + r) * width);
    });
    return { policy: this.name, layers: [...layers], rows, width, data };
  }

  /** A snapshot's window queries at n (the pool holds its n tokens): the state a fresh prefill of them leaves. */
  importState(n: number, s: PolicySequenceState): void {
    const width = this.shape.heads * this.shape.headDim; // as exportState pads them
    const layers = this.selectingLayers();
    const missing = layers.filter((l) => !s.layers.includes(l));
    if (s.policy !== this.name) throw new RangeError(`snapkv: the snapshot's policy state is ${s.policy}'s`);
    if (missing.length > 0) throw new RangeError(`snapkv: the snapshot holds no queries for layer(s) ${missing.join(', ')} (written with other denseLayers)`);
    if (s.width !== width || s.rows > n || s.data.length !== s.layers.length * s.rows * width) {
      throw new RangeError(`snapkv: the snapshot's queries are [${s.layers.length}, ${s.rows}, ${s.width}] (${s.data.length} values), expected [·, ≤ ${n}, ${width}]`);
    }
    if (s.rows < Math.min(this.obsWindow, n)) throw new RangeError(`snapkv: the snapshot holds ${s.rows} window queries, this window needs ${Math.min(this.obsWindow, n)}`);
    if (s.data.some((x) => !Number.isFinite(x))) throw new RangeError('snapkv: the snapshot\'s queries hold a non-finite value');
    this.truncate(0);
    const use = Math.min(this.obsWindow, n);
    for (const l of layers) {
      const i = s.layers.indexOf(l);
      const block = s.data.subarray(i * s.rows * width, (i + 1) * s.rows * width); // positions n − rows..n − 1
      const w = this.rowWidth(l);
      const own = new Float32Array(s.rows * w); // the layer's rows without the padding to the widest layer
      for (let r = 0; r < s.rows; r++) own.set(block.subarray(r * width, r * width + w), r * w);
      for (let r = s.rows - use; r < s.rows; r++) this.keepQuery(l, this.obsQ[l]!, this.obsPos[l]!, own, r, n - s.rows + r);
    }
    for (let l = 0; l < this.shape.layers; l++) {
      this.promptEnd[l] = n;
      this.keptFor[l] = -1;
    }
    if (n > 0) this.checkpoints.take(n, () => layers.map((l) => this.windowBefore(l, n)));
  }

  /** heads·d_ℓ: one stored query of layer ℓ (layers may differ in head dim) */
  private rowWidth(layer: number): number {
    return this.shape.heads * layerRows(this.shape, layer).headDim;
  }

  /** Whether every selecting layer's ring keeps the prompt queries of the `window` positions before m. */
  private ringExactAt(m: number): boolean {
    return this.selectingLayers().every((l) => this.promptQueriesBefore(l, m));
  }

  /** A copy of the prompt queries of positions m − w..m − 1 (w = min(window, m)) from a layer's ring, [w, heads·d]; they must be there. */
  private windowBefore(layer: number, m: number): Float32Array {
    const width = this.rowWidth(layer);
    const rows = Math.min(this.obsWindow, m);
    const out = new Float32Array(rows * width);
    for (let r = 0; r < rows; r++) {
      const at = (m - rows + r) % this.obsWindow;
      out.set(this.obsQ[layer]!.subarray(at * width, (at + 1) * width), r * width);
    }
    return out;
  }

  /** Whether layer ℓ keeps the prompt queries of the `window` positions before m (all of them when m < window). */
  private promptQueriesBefore(layer: number, m: number): boolean {
    const pos = this.obsPos[layer]!;
    for (let p = Math.max(0, m - this.obsWindow); p < m; p++) if (pos[p % this.obsWindow] !== p) return false;
    return true;
  }

  /** The stored query of position p ([heads·d], a view), a prompt's or a decoded token's; undefined when none. */
  private storedQuery(layer: number, p: number): Float32Array | undefined {
    if (p < 0) return undefined;
    const w = this.rowWidth(layer);
    const at = p % this.obsWindow;
    if (this.obsPos[layer]![at] === p) return this.obsQ[layer]!.subarray(at * w, (at + 1) * w);
    if (this.decodePos[layer]![at] === p) return this.decodeQ[layer]!.subarray(at * w, (at + 1) * w);
    return undefined;
  }

  /** Stores row `row` of q ([rows, heads·d_ℓ]) as the query of position `pos` in one of layer ℓ's rings (queries [window, heads·d_ℓ], positions [window]). */
  private keepQuery(layer: number, ring: Float32Array, positions: Int32Array, q: Float32Array, row: number, pos: number): void {
    const w = this.rowWidth(layer);
    const at = pos % this.obsWindow;
    ring.set(q.subarray(row * w, (row + 1) * w), at * w);
    positions[at] = pos;
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
      let w = 0;
      while (w < Math.min(this.obsWindow, budget) && this.storedQuery(layer, P - 1 - w) !== undefined) w++;
      if (w === 0) kept = Array.from({ length: kvHeads }, () => all.slice(P - budget));
      else {
        const width = heads * d;
        const obs = new Float32Array(w * width); // [w, heads·d] the window's queries, oldest first
        for (let i = 0; i < w; i++) obs.set(this.storedQuery(layer, P - w + i)!, i * width);
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
