// gpt-oss's dense stages in C++: the llama stages (llama-native.ts: q/k/v and attn_output with their
// biases) with each layer's MLP the native mixture of experts in its gpt-oss variant
// (native/src/dense_stage.h): post_attention_norm before it, the router with its bias, top-k of the
// logits then a softmax over the k ('softmax_weight'), SwiGLU-OAI, the experts' biases. The expert
// tensors are 2-D views of the mapped file, read only where routed and never made the process's
// own pages (qwen3moe-native.ts says why).
import type { DenseStageMatrix } from '../../../../native/index.js';
import type { LoadedModel } from '../../model/types.ts';
import type { ModelWeights } from '../weights.ts';
import { createLlamaNativeStages, llamaLinearNames } from './llama-native.ts';
import { KERNEL_TYPES, type NativeStageOptions, type NativeStages } from './native-stage.ts';
import { blk } from './stage-graph.ts';

const MOE_TENSORS = ['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'];

/** The linear weights of a gpt-oss model: the llama family's attention matrices and head, the router and experts. */
export function gptOssLinearNames(model: LoadedModel): string[] {
  const dense = /\.ffn_(gate|up|down)\.weight$/;
  const names = llamaLinearNames(model).filter((n) => !dense.test(n));
  for (let l = 0; l < model.hyper.layers; l++) for (const t of MOE_TENSORS) names.push(blk(l, t));
  return names;
}

/** A 2-D or stacked 3-D weight as the rows the kernels read ([a, b, cols] → a·b rows), with its bias flattened alike. */
function rowsView(weights: ModelWeights, name: string, biasName: string): DenseStageMatrix {
  const v = weights.view(name);
  const cols = v.shape.at(-1)!;
  const bias = weights.optionalVector(biasName);
  return { data: v.bytes(), type: KERNEL_TYPES[v.dtype]!.id, rows: v.elements / cols, cols, ...(bias ? { bias } : {}) };
}

/** L + 1 native gpt-oss stages over `weights`' mapped file. */
export function createGptOssNativeStages(weights: ModelWeights, options: NativeStageOptions): NativeStages {
  const moe = weights.model.hyper.moe!;
  return createLlamaNativeStages(weights, options, undefined, (p) => ({
    ffnNorm: weights.vector(blk(p, 'post_attention_norm.weight')),
    activation: 'swiglu_oai',
    experts: moe.experts,
    expertsUsed: moe.expertsUsed,
    expertFfn: moe.expertFfn,
    normTopK: false,
    gating: 'softmax_weight',
    router: rowsView(weights, blk(p, 'ffn_gate_inp.weight'), blk(p, 'ffn_gate_inp.bias')),
    gateExps: rowsView(weights, blk(p, 'ffn_gate_exps.weight'), blk(p, 'ffn_gate_exps.bias')),
    upExps: rowsView(weights, blk(p, 'ffn_up_exps.weight'), blk(p, 'ffn_up_exps.bias')),
    downExps: rowsView(weights, blk(p, 'ffn_down_exps.weight'), blk(p, 'ffn_down_exps.bias')),
  }));
}
