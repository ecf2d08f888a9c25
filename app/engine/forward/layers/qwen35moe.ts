// The Qwen3.5-MoE family (GGUF `qwen35moe`), as llama.cpp's src/models/qwen35moe.cpp computes it:
// Qwen3.5's hybrid layers (qwen35.ts: Gated DeltaNet linear attention, gated full attention every
// full_attention_interval-th layer) with a mixture of experts in every layer in place of the dense
// MLP: softmax over the router's logits, the top expert_used_count experts, their weights
// renormalised to sum 1 (build_moe_ffn with norm_w true), each a SwiGLU MLP; plus one shared
// SwiGLU expert every token runs, scaled by σ(x·ffn_gate_inp_shexp) and added to the routed sum.
//
// As Qwen3-MoE, the experts run on the native dense stages only (qwen3moe.ts says why onnxruntime
// graphs of them are not built): a file the native stages cannot run is refused with the reason.
import { isNativeAvailable, type DenseStageMatrix } from '../../../../native/index.js';
import { LonghandError } from '../../../common/errors.ts';
import { QWEN35MOE_TENSORS } from '../../model/arch/qwen35moe.ts';
import type { LoadedModel, ModelHyperparameters } from '../../model/types.ts';
import type { ModelWeights } from '../weights.ts';
import type { ModelFamily } from './family.ts';
import type { LayerSpec } from './layer-spec.ts';
import { KERNEL_TYPES, kernelsRefuse, type NativeStageOptions, type NativeStages } from './native-stage.ts';
import { qwen35Layers } from './qwen35.ts';
import { createQwen35NativeStages, qwen35LinearNames } from './qwen35-native.ts';
import { blk } from './stage-graph.ts';

/** Why Qwen3.5-MoE has no onnxruntime stages (the message of the typed refusal). */
export const QWEN35MOE_ONNX_REFUSAL =
  'Qwen3.5-MoE runs on the native dense stages only: onnxruntime graphs of its mixture-of-experts layers are not built (each would hold every expert repacked and compute all of them)';

function qwen35moeLayers(hyper: ModelHyperparameters): LayerSpec[] {
  const moe = hyper.moe;
  if (moe === undefined) throw new LonghandError('MODEL_MISSING_METADATA', 'qwen35moe hyperparameters without their experts (expert_count, expert_used_count)');
  return qwen35Layers(hyper, { kind: 'moe', experts: moe.experts, topK: moe.expertsUsed, expertSize: moe.expertFfn, gated: true, activation: 'silu', sharedExperts: 1 });
}

/** Per layer: the router, the expert tensors and the shared expert's matrices. */
const MOE_MATRICES = ['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'];

/** The linear weights of a Qwen3.5-MoE model: Qwen3.5's mixers and head, the experts and the shared expert. */
export function qwen35moeLinearNames(model: LoadedModel): string[] {
  const names = qwen35LinearNames(model, false);
  for (let l = 0; l < model.hyper.layers; l++) for (const m of MOE_MATRICES) names.push(blk(l, m));
  return names;
}

/** A 2-D or stacked 3-D weight as the rows the kernels read: [a, b, cols] → a·b rows. */
function rowsView(weights: ModelWeights, name: string): DenseStageMatrix {
  const v = weights.view(name);
  const cols = v.shape.at(-1)!;
  return { data: v.bytes(), type: KERNEL_TYPES[v.dtype]!.id, rows: v.elements / cols, cols };
}

/** L + 1 native Qwen3.5-MoE stages: Qwen3.5's with each layer's experts and shared expert (views of the mapped file, nothing copied). */
export function createQwen35moeNativeStages(weights: ModelWeights, options: NativeStageOptions): NativeStages {
  const moe = weights.model.hyper.moe!;
  return createQwen35NativeStages(weights, options, (p) => ({
    experts: moe.experts,
    expertsUsed: moe.expertsUsed,
    expertFfn: moe.expertFfn,
    normTopK: moe.normTopK,
    router: rowsView(weights, blk(p, 'ffn_gate_inp.weight')),
    gateExps: rowsView(weights, blk(p, 'ffn_gate_exps.weight')),
    upExps: rowsView(weights, blk(p, 'ffn_up_exps.weight')),
    downExps: rowsView(weights, blk(p, 'ffn_down_exps.weight')),
    sharedFfn: moe.sharedFfn ?? weights.model.hyper.ffnSize,
    shexpGate: rowsView(weights, blk(p, 'ffn_gate_shexp.weight')),
    shexpUp: rowsView(weights, blk(p, 'ffn_up_shexp.weight')),
    shexpDown: rowsView(weights, blk(p, 'ffn_down_shexp.weight')),
    shexpGateInp: weights.vector(blk(p, 'ffn_gate_inp_shexp.weight')),
  }));
}

export const QWEN35MOE_FAMILY: ModelFamily = {
  architecture: 'qwen35moe',
  name: 'Qwen3.5-MoE',
  tensors: QWEN35MOE_TENSORS,
  layers: qwen35moeLayers,
  embedding: () => ({ tokenTable: 'token_embd.weight', positions: undefined, scale: 1 }),
  contextLimit: () => undefined,
  policyRefusal: () => undefined,
  onnxStage: (w) => {
    const native = isNativeAvailable() ? kernelsRefuse(w.model, qwen35moeLinearNames(w.model), {}) : 'the native addon is not built';
    throw new LonghandError('MODEL_UNSUPPORTED_ARCHITECTURE', `${w.model.path}: ${QWEN35MOE_ONNX_REFUSAL}${native === undefined ? '' : `, and they cannot run this file: ${native}`}`, {
      architecture: 'qwen35moe',
      ...(native === undefined ? {} : { whyNotNative: native }),
    });
  },
  nativeStages: { kind: 'native', linearNames: qwen35moeLinearNames, create: (weights, options: NativeStageOptions) => createQwen35moeNativeStages(weights, options) },
};
