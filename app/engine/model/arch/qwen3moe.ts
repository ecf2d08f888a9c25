// Qwen3-MoE (GGUF `qwen3moe`, Hugging Face Qwen3MoeForCausalLM): Qwen3's attention tensors (its
// per-head q/k norms, its own head size) and, instead of the dense MLP, a router and three 3-D expert
// tensors per layer, as llama.cpp's llama_model_qwen3moe loads them:
//
//   blk.N.ffn_gate_inp.weight    [experts, hidden]              the router (kept F32 by the converter and llama-quantize)
//   blk.N.ffn_gate_exps.weight   [experts, expertFfn, hidden]   every expert's gate rows, expert e at rows e·expertFfn ..
//   blk.N.ffn_up_exps.weight     [experts, expertFfn, hidden]
//   blk.N.ffn_down_exps.weight   [experts, hidden, expertFfn]
//
// Shapes outermost-first (ggml's ne reversed). The converter stacks the Hugging Face folder's
// per-expert mlp.experts.{e}.{gate,up,down}_proj into these; reading a folder is not done yet
// (issue 31), so canonicalName knows the attention and norm tensors only.
import type { ModelHyperparameters } from '../types.ts';
import { mapName, type ArchTensorTable, type ExpectedTensor } from './base.ts';
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
