// Qwen3's dense stages in C++: the llama family's native stages (llama-native.ts) with the per-head
// q/k RMSNorm weights of each layer handed to native/src/dense_stage.h (qNorm, kNorm), and, where a
// stage speculates for layer s+1, that layer's q norm (qSpecNorm), so the speculative query is
// layer s+1's q as that layer computes it. The linear weights are the llama family's.
import type { ModelWeights } from '../weights.ts';
import { createLlamaNativeStages, type StageConfigExtra } from './llama-native.ts';
import type { NativeStageOptions, NativeStages } from './native-stage.ts';
import { blk } from './stage-graph.ts';

export { llamaLinearNames as qwen3LinearNames } from './llama-native.ts';

/** What Qwen3's attention adds to stage s: its q/k norms (and layer s+1's q norm where the stage speculates). Qwen3-MoE shares it. */
export function qwen3QkNorms(weights: ModelWeights): StageConfigExtra {
  const L = weights.model.hyper.layers;
  return (s, speculates) => {
    if (s === L) return {};
    return {
      qNorm: weights.vector(blk(s, 'attn_q_norm.weight')),
      kNorm: weights.vector(blk(s, 'attn_k_norm.weight')),
      ...(speculates ? { qSpecNorm: weights.vector(blk(s + 1, 'attn_q_norm.weight')) } : {}),
    };
  };
}

/** L + 1 native Qwen3 stages over `weights`' mapped file. */
export function createQwen3NativeStages(weights: ModelWeights, options: NativeStageOptions): NativeStages {
  return createLlamaNativeStages(weights, options, qwen3QkNorms(weights));
}
