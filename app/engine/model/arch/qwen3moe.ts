// Qwen3-MoE (GGUF `qwen3moe`, Hugging Face Qwen3MoeForCausalLM): Qwen3's attention tensors (its
// per-head q/k norms, its own head size) and, instead of the dense MLP, a router and three 3-D expert
// tensors per layer, as llama.cpp's llama_model_qwen3moe loads them:
//
//   blk.N.ffn_gate_inp.weight    [experts, hidden]              the router (kept F32 by the converter and llama-quantize)
//   blk.N.ffn_gate_exps.weight   [experts, expertFfn, hidden]   every expert's gate rows, expert e at rows e·expertFfn ..
//   blk.N.ffn_up_exps.weight     [experts, expertFfn, hidden]
//   blk.N.ffn_down_exps.weight   [experts, hidden, expertFfn]
//
// Shapes outermost-first (ggml's ne reversed). A Hugging Face folder holds each expert as tensors
// of its own (model.layers.N.mlp.experts.{e}.{gate,up,down}_proj.weight, which the converter stacks
// into the above) and the router as mlp.gate.weight: QWEN3MOE_HF_TENSORS names expert e's as
// blk.N.ffn_{gate,up,down}_exps.{e}.weight, and the native stages read each where it lies (nothing
// is stacked, so nothing is copied: forward/layers/qwen3moe-native.ts).
import type { ModelHyperparameters } from '../types.ts';
import { mapName, type ArchTensorTable, type ExpectedTensor, type NameTables } from './base.ts';
import { QWEN3_NAMES, QWEN3_TENSORS } from './qwen3.ts';

/** The dense MLP's tensors, which a Qwen3-MoE layer does not have. */
const DENSE_MLP = /^blk\.\d+\.ffn_(gate|up|down)\.weight$/;

export const QWEN3MOE_TENSORS: ArchTensorTable = {
  architecture: 'qwen3moe',
  canonicalName: (hfName) => mapName(QWEN3_NAMES, hfName),
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const moe = hyper.moe;
    if (moe === undefined) throw new Error('qwen3moe hyperparameters without their experts');
    const out = QWEN3_TENSORS.expectedTensors(hyper).filter((t) => !DENSE_MLP.test(t.name));
    const { experts: E, expertFfn: F } = moe;
    const d = hyper.hiddenSize;
    for (let l = 0; l < hyper.layers; l++) {
      out.push(
        { name: `blk.${l}.ffn_gate_inp.weight`, shape: [E, d] },
        { name: `blk.${l}.ffn_gate_exps.weight`, shape: [E, F, d] },
        { name: `blk.${l}.ffn_up_exps.weight`, shape: [E, F, d] },
        { name: `blk.${l}.ffn_down_exps.weight`, shape: [E, d, F] },
      );
    }
    return out;
  },
};

/** Qwen3's names plus the router (the experts' names carry their index: hfExpertName). */
const QWEN3MOE_HF_NAMES: NameTables = { ...QWEN3_NAMES, layer: { ...QWEN3_NAMES.layer, 'mlp.gate.weight': 'ffn_gate_inp.weight' } };

const HF_EXPERT = /^(?:model\.)?layers\.(0|[1-9][0-9]{0,5})\.mlp\.experts\.(0|[1-9][0-9]{0,5})\.(gate|up|down)_proj\.weight$/;

/** The canonical name of expert e's slice of a stacked tensor: blk.N.ffn_gate_exps.{e}.weight. */
export function expertTensorName(layer: number, which: 'gate' | 'up' | 'down', expert: number): string {
  return `blk.${layer}.ffn_${which}_exps.${expert}.weight`;
}

/** A Hugging Face Qwen3-MoE folder's tensors: each expert's gate, up and down a tensor of its own. */
export const QWEN3MOE_HF_TENSORS: ArchTensorTable = {
  architecture: 'qwen3moe',
  canonicalName(hfName) {
    const m = HF_EXPERT.exec(hfName);
    if (m !== null) return expertTensorName(Number(m[1]), m[3] as 'gate' | 'up' | 'down', Number(m[2]));
    return mapName(QWEN3MOE_HF_NAMES, hfName);
  },
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const stacked = /^blk\.\d+\.ffn_(gate|up|down)_exps\.weight$/;
    const out = QWEN3MOE_TENSORS.expectedTensors(hyper).filter((t) => !stacked.test(t.name));
    const { experts: E, expertFfn: F } = hyper.moe!;
    const d = hyper.hiddenSize;
    for (let l = 0; l < hyper.layers; l++) {
      for (let e = 0; e < E; e++) {
        out.push({ name: expertTensorName(l, 'gate', e), shape: [F, d] }, { name: expertTensorName(l, 'up', e), shape: [F, d] }, { name: expertTensorName(l, 'down', e), shape: [d, F] });
      }
    }
    return out;
  },
};
