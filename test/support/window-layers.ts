// A test-only model with sliding-window layers, before a family that has them is merged: the llama
// family's LayerSpecs with every layer but each `every`-th one given a window (Gemma 3's 5 local :
// 1 global when every = 6). The weights, stages and RoPE stay llama's; only what attention sees
// changes (the kernels mask by window, the pool keeps a ring), so a ring is held against the same
// model keeping every row. Call the returned function to put the family back.
import { vi } from 'vitest';
import { LLAMA_FAMILY } from '../../app/engine/forward/layers/llama.ts';
import type { LayerSpec } from '../../app/engine/forward/layers/layer-spec.ts';

/** Layer l is global when (l + 1) % every === 0, else a window layer of `window` tokens. */
export function windowPattern(specs: readonly LayerSpec[], every: number, window: number): LayerSpec[] {
  return specs.map((spec, l) => {
    if ((l + 1) % every === 0 || spec.attention.kind !== 'attention') return spec;
    return { ...spec, attention: { ...spec.attention, window } };
  });
}

/** Gives the llama family's layers the window pattern until the returned function runs. */
export function withWindowLayers(every: number, window: number): () => void {
  const original = LLAMA_FAMILY.layers;
  const spy = vi.spyOn(LLAMA_FAMILY, 'layers').mockImplementation((hyper) => windowPattern(original(hyper), every, window));
  return () => spy.mockRestore();
}
