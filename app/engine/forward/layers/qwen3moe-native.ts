// Qwen3-MoE's dense stages in C++: Qwen3's stages (its q/k norms: qwen3-native.ts) with each layer's
// MLP replaced by its mixture of experts (native/src/dense_stage.h): the router ffn_gate_inp and the
// 3-D expert tensors handed over as 2-D views of the mapped file ([experts·rows, cols]: expert e's
// rows are a contiguous run), or, from a Hugging Face folder, each expert's own tensors as a list
// of views; either way a step reads only the routed experts' rows and nothing is copied.
// The expert tensors are not made the process's own pages at load (ownTensors, which the attention
// matrices get): they are most of the file and a step touches a few of them; the page cache keeps
// what routing reads (issue 31's "no copy of the expert tensors at load").
import type { DenseStageMatrix } from '../../../../native/index.js';
import { expertTensorName } from '../../model/arch/qwen3moe.ts';
import type { LoadedModel } from '../../model/types.ts';
import type { ModelWeights } from '../weights.ts';
import { createLlamaNativeStages, llamaLinearNames } from './llama-native.ts';
import { KERNEL_TYPES, type NativeStageOptions, type NativeStages } from './native-stage.ts';
import { qwen3QkNorms } from './qwen3-native.ts';
import { blk } from './stage-graph.ts';

/** Per layer: the router and the expert tensors (what kernelsRefuse checks, with the attention's matrices). */
const MOE_TENSORS = ['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'];

/** Whether the file stacks each layer's experts into 3-D tensors (GGUF), or holds each expert's on its own (a Hugging Face folder). */
function stacked(model: LoadedModel): boolean {
  return model.tensors.has(blk(0, 'ffn_gate_exps.weight'));
}

/** The linear weights of a Qwen3-MoE model: Qwen3's without the dense MLP, with the router and experts. */
export function qwen3moeLinearNames(model: LoadedModel): string[] {
  const dense = /\.ffn_(gate|up|down)\.weight$/;
  const names = llamaLinearNames(model).filter((n) => !dense.test(n));
  const perExpert = !stacked(model);
  for (let l = 0; l < model.hyper.layers; l++) {
    for (const t of MOE_TENSORS) {
      const which = /^ffn_(gate|up|down)_exps/.exec(t)?.[1] as 'gate' | 'up' | 'down' | undefined;
      if (perExpert && which !== undefined) for (let e = 0; e < model.hyper.moe!.experts; e++) names.push(expertTensorName(l, which, e));
      else names.push(blk(l, t));
    }
  }
  return names;
}

/** A 2-D or stacked 3-D weight as the rows the kernels read: [a, b, cols] → a·b rows. */
function rowsView(weights: ModelWeights, name: string): DenseStageMatrix {
  const v = weights.view(name);
  const cols = v.shape.at(-1)!;
  return { data: v.bytes(), type: KERNEL_TYPES[v.dtype]!.id, rows: v.elements / cols, cols };
}

/** L + 1 native Qwen3-MoE stages over `weights`' mapped file. */
export function createQwen3moeNativeStages(weights: ModelWeights, options: NativeStageOptions): NativeStages {
  const moe = weights.model.hyper.moe!;
  const perExpert = !stacked(weights.model);
  // the stacked tensor's rows, or (a folder) one view per expert
  const experts = (p: number, which: 'gate' | 'up' | 'down'): DenseStageMatrix | DenseStageMatrix[] =>
    perExpert ? Array.from({ length: moe.experts }, (_, e) => rowsView(weights, expertTensorName(p, which, e))) : rowsView(weights, blk(p, `ffn_${which}_exps.weight`));
  return createLlamaNativeStages(weights, options, qwen3QkNorms(weights), (p) => ({
    experts: moe.experts,
    expertsUsed: moe.expertsUsed,
    expertFfn: moe.expertFfn,
    normTopK: moe.normTopK,
    router: rowsView(weights, blk(p, 'ffn_gate_inp.weight')),
    gateExps: experts(p, 'gate'),
    upExps: experts(p, 'up'),
    downExps: experts(p, 'down'),
  }));
}
