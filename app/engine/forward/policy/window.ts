// A sliding window (ARCHITECTURE.md §3, §6): every KV head of a layer attends its newest `window`
// tokens, the current one included — exactly what a model's sliding-window layer computes (a key
// at position p is visible to the query at position t when t − window < p ≤ t; llama.cpp's
// standard SWA mask). The plan gives it to a family's sliding-window layers whatever policy the
// user picked; as a user's policy it is StreamingLLM without sinks. Without a fixed `window` it
// keeps the step's budget (⌊fetchCap·N⌋ past tokens, InfiniGen's cap) like the other comparison
// policies, so they compare at the same fetch ratio.
//
// The slots are the positions while nothing is evicted (this policy never runs with an evicting
// pool: registry.ts), except on a ring (a model's window layer, native kv_pool.h "Rings"): there
// the newest rows are slots (ringStart + row) % capacity, listed oldest first, so attention reads
// them in position order as over the full rows (the same bits).
import { ListPolicy } from './selection-lists.ts';

export class WindowPolicy extends ListPolicy {
  readonly name = 'window';

  /** Past tokens a step with N candidates attends (the current token comes on top). */
  pastTokens(N: number): number {
    const w = this.settings.window;
    return w === undefined ? this.budgetFor(N) : Math.min(N, Math.max(0, w - 1));
  }

  protected choose(layer: number, _q: Float32Array, N: number): Int32Array[] {
    const past = this.pastTokens(N);
    const out = this.output(layer, past);
    if (this.pool.isRing(layer)) {
      // the ring holds the current token as its newest row (length − 1), the past ones before it
      const rows = this.pool.length(layer);
      const start = this.pool.ringStart(layer);
      const cap = this.pool.layerCapacityTokens(layer);
      if (rows - 1 < past) throw new RangeError(`window: layer ${layer}'s ring holds ${rows - 1} past tokens, ${past} needed`);
      for (let i = 0; i < past; i++) out[i] = (start + rows - 1 - past + i) % cap;
    } else for (let i = 0; i < past; i++) out[i] = N - past + i;
    const one = out.subarray(0, past);
    return Array.from({ length: this.kvHeadsOf(layer) }, () => one);
  }
}
