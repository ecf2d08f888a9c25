// StreamingLLM (ARCHITECTURE.md §6): the first `sinks` tokens (attention sinks) and a recent window,
// the same slots for every KV head and nothing kept across steps. The selection runs natively
// (native/src/policy_select.h) by exactly the rule of streaming() in app/engine/kv/
// policies-reference.ts, the oracle of its tests. Default window: the step's budget less the sinks.
import { selectStreaming } from '../../../../native/index.js';
import { ListPolicy } from './selection-lists.ts';

export class StreamingPolicy extends ListPolicy {
  readonly name = 'streaming';

  protected choose(layer: number, _q: Float32Array, N: number): Int32Array[] {
    const s = this.settings;
    const budget = this.budgetFor(N);
    const window = s.window ?? Math.max(0, budget - Math.min(s.sinks, budget));
    const out = this.output(layer, N);
    const one = out.subarray(0, selectStreaming(N, s.sinks, window, out));
    return Array.from({ length: this.kvHeadsOf(layer) }, () => one);
  }
}
