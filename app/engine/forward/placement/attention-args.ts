// A layer's attention arguments for the native kernels (native/index.d.ts AttentionArgs) from its
// LayerSpec: the scale when it is not the kernels' own 1/√headDim (which they round as float; a
// double 1/√d rounds differently for some head sizes), a sliding window, a soft-cap. Undefined when
// every one is the default, so a model like today's passes nothing and keeps its bits.
import type { AttentionArgs } from '../../../../native/index.js';
import { isDefaultScale, type LayerSpec } from '../layers/layer-spec.ts';

export function attentionArgs(spec: LayerSpec): AttentionArgs | undefined {
  const a = spec.attention;
  if (a.kind !== 'attention') return undefined;
  const args: AttentionArgs = {};
  if (!isDefaultScale(a)) args.scale = a.scale;
  if (a.window !== undefined) args.window = a.window;
  if (a.softcap !== 0) args.softcap = a.softcap;
  return Object.keys(args).length > 0 ? args : undefined;
}

/** [layer] the arguments of every layer (entries undefined where all are defaults). */
export function layerAttentionArgs(specs: readonly LayerSpec[]): (AttentionArgs | undefined)[] {
  return specs.map(attentionArgs);
}
