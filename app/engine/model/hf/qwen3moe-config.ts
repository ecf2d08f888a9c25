// config.json of Qwen3MoeForCausalLM → the experts of ModelHyperparameters (the attention keys are
// Qwen3's, read by config.ts's llama reader): num_experts, num_experts_per_tok, moe_intermediate_size
// and norm_topk_prob (transformers' Qwen3MoeConfig default false; the released models say true, and
// llama.cpp renormalises whatever the folder says, so a GGUF of a folder saying false would differ:
// that folder is refused rather than run one way here and another there). Layers that keep a dense
// MLP (mlp_only_layers, decoder_sparse_step > 1) are refused: every Qwen3-MoE release has experts in
// every layer, and llama.cpp's qwen3moe loader expects them in every layer too.
import type { MoeHyperparameters } from '../types.ts';
import type { ConfigReader } from './config.ts';

export function qwen3moeHfExperts(read: ConfigReader): MoeHyperparameters {
  const experts = read.positiveInt('num_experts');
  const expertsUsed = read.positiveInt('num_experts_per_tok');
  if (expertsUsed > experts) throw read.bad('num_experts_per_tok', `at most num_experts (${experts})`, expertsUsed);
  const expertFfn = read.positiveInt('moe_intermediate_size');
  if (!read.bool('norm_topk_prob', false)) read.unsupported('norm_topk_prob: false (llama.cpp renormalises the top-k weights of every qwen3moe file, so Longhand does too)');
  const dense = read.optional('mlp_only_layers');
  if (dense !== undefined && !(Array.isArray(dense) && dense.length === 0)) read.unsupported('mlp_only_layers (layers with a dense MLP among the expert layers)');
  if (read.positiveInt('decoder_sparse_step', 1) !== 1) read.unsupported('decoder_sparse_step other than 1 (experts only in some layers)');
  return { experts, expertsUsed, expertFfn, normTopK: true };
}
