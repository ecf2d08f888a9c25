// The gemma2.* / gemma3.* keys of a GGUF file → GemmaHyperparameters, read as llama.cpp's loader
// reads them (src/models/gemma2.cpp, gemma3.cpp load_arch_hparams):
//
//   attention.sliding_window          window in tokens. Gemma 2: default 4096. Gemma 3: absent or 0
//                                     means no sliding-window layers at all
//   attention.sliding_window_pattern  an integer period p (layer ℓ is local iff ℓ mod p < p − 1;
//                                     Gemma 2 default 2, Gemma 3 default 6; the converter writes
//                                     none for either) or a per-layer array of booleans (true: local)
//   rope.freq_base_swa                θ of the local layers. Gemma 3: default 10 000, no scaling;
//                                     Gemma 2: default the global θ, with the global scaling
//   attn_logit_softcapping            Gemma 2 only (default 50); Gemma 3 has no attention soft-cap
//   final_logit_softcapping           Gemma 2 default 30; Gemma 3 default none
//   attention scale                   not in the file: 1/√head_dim, except the 27B sizes (Gemma 2:
//                                     46 layers, Gemma 3: 62), where query_pre_attn_scalar was
//                                     hidden/heads; llama.cpp decides by the layer count, so do we
import type { GemmaHyperparameters, ModelHyperparameters } from '../types.ts';

/** What gemmaGgufHyper needs of the file (gguf-model.ts's checked readers). */
export interface GgufKeys {
  /** A number stored as any numeric type, or `fallback` when absent. */
  float(key: string, fallback: number): number;
  /** A non-negative integer, or `fallback` when absent. */
  int(key: string, fallback: number): number;
  /** The raw value (arrays as typed arrays or JS arrays), or undefined. */
  raw(key: string): unknown;
  /** Throws the loader's typed MODEL_BAD_VALUE naming `key`. */
  bad(key: string, message: string): never;
}

export const GEMMA_GGUF_ARCHITECTURES = ['gemma2', 'gemma3'] as const;
export type GemmaGgufArchitecture = (typeof GEMMA_GGUF_ARCHITECTURES)[number];

/** Which layers are local, as llama.cpp's set_swa_pattern(period) makes them (dense_first false). */
export function slidingPattern(layers: number, period: number): boolean[] {
  return Array.from({ length: layers }, (_, l) => period === 0 || l % period < period - 1);
}

/** 1/√head_dim as llama.cpp computes it for Gemma, or 1/√(hidden/heads) for the 27B layer counts. */
export function gemmaAttentionScale(hyper: Pick<ModelHyperparameters, 'hiddenSize' | 'heads' | 'headDim' | 'layers'>, architecture: GemmaGgufArchitecture): number {
  const is27b = architecture === 'gemma2' ? hyper.layers === 46 : hyper.layers === 62;
  if (!is27b) return 1 / Math.sqrt(hyper.headDim);
  return Math.fround(1 / Math.fround(Math.sqrt(Math.trunc(hyper.hiddenSize / hyper.heads))));
}

export function gemmaGgufHyper(keys: GgufKeys, architecture: GemmaGgufArchitecture, base: ModelHyperparameters): GemmaHyperparameters {
  const k = (suffix: string): string => `${architecture}.${suffix}`;
  const gemma2 = architecture === 'gemma2';
  const window = keys.int(k('attention.sliding_window'), gemma2 ? 4096 : 0);
  let slidingLayers: boolean[];
  if (window === 0) {
    if (gemma2) keys.bad(k('attention.sliding_window'), 'a Gemma 2 sliding window of 0 tokens');
    slidingLayers = new Array<boolean>(base.layers).fill(false);
  } else {
    const pattern = keys.raw(k('attention.sliding_window_pattern'));
    if (pattern !== undefined && typeof pattern !== 'number' && typeof pattern !== 'bigint') {
      const list = Array.from(pattern as ArrayLike<unknown>);
      if (list.length !== base.layers || !list.every((v) => typeof v === 'boolean')) keys.bad(k('attention.sliding_window_pattern'), `a period or ${base.layers} booleans (one per layer)`);
      slidingLayers = list as boolean[];
    } else {
      slidingLayers = slidingPattern(base.layers, keys.int(k('attention.sliding_window_pattern'), gemma2 ? 2 : 6));
    }
  }
  const localTheta = keys.float(k('rope.freq_base_swa'), gemma2 ? (base.ropeTheta ?? 10000) : 10000);
  if (!(localTheta > 0 && Number.isFinite(localTheta))) keys.bad(k('rope.freq_base_swa'), `a positive θ, not ${localTheta}`);
  const attnSoftcap = gemma2 ? keys.float(k('attn_logit_softcapping'), 50) : 0;
  const finalSoftcap = keys.float(k('final_logit_softcapping'), gemma2 ? 30 : 0);
  for (const [key, v] of [[k('attn_logit_softcapping'), attnSoftcap], [k('final_logit_softcapping'), finalSoftcap]] as const) {
    if (!(v >= 0 && Number.isFinite(v))) keys.bad(key, `a soft-cap >= 0, not ${v}`);
  }
  return {
    window,
    slidingLayers,
    localRope: { theta: localTheta, scaling: gemma2 ? base.ropeScaling : undefined },
    attentionScale: gemmaAttentionScale(base, architecture),
    attnSoftcap,
    finalSoftcap,
    qkNorm: !gemma2,
  };
}
