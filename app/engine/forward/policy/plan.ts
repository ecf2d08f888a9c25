// The per-layer plan of row policies (ARCHITECTURE.md §3), built once at load and again at a policy
// switch: a layer with a sliding window attends its window whatever policy the user picked (that is
// what the model computes there); every other layer with KV runs the chosen policy.
import { UsageError } from '../../../common/errors.ts';
import type { LayerSpec } from '../layers/layer-spec.ts';
import type { RowPolicy } from './row-policy.ts';

/**
 * [layer] the policy of each layer. `windowPolicy(w)` makes (or reuses) the policy of the layers
 * with window w. `sharedPolicy`, when given, runs the global layers that read another layer's K/V
 * (kvSource) instead of the chosen one (InfiniGen: such a layer has no partial keys of its own to
 * speculate over, so it attends densely). A linear-attention layer has no rows and the step loop
 * never asks its entry (it runs the layer's recurrence instead): it holds the chosen policy so every
 * layer has one. A layer with no attention of any kind is refused with a typed error naming it.
 */
export function planLayers(specs: readonly LayerSpec[], chosen: RowPolicy, windowPolicy: (window: number) => RowPolicy, sharedPolicy?: RowPolicy): RowPolicy[] {
  const byWindow = new Map<number, RowPolicy>();
  return specs.map((spec, l) => {
    const a = spec.attention;
    if (a.kind === 'linear') return chosen;
    if (a.kind !== 'attention') throw new UsageError(`layer ${l} has no attention (no KV rows): the forward pass runs attention layers only`, { field: 'model', layer: l });
    if (a.window === undefined) return a.kvSource !== undefined && sharedPolicy ? sharedPolicy : chosen;
    let p = byWindow.get(a.window);
    if (!p) byWindow.set(a.window, (p = windowPolicy(a.window)));
    return p;
  });
}
