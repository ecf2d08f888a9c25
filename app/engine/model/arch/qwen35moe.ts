// Qwen3.5-MoE (GGUF `qwen35moe`): Qwen3.5's hybrid layers (arch/qwen35.ts: linear attention and
// gated full attention) with, in every layer, a mixture of experts in place of the dense MLP, as
// llama.cpp's llama_model_qwen35moe loads it (src/models/qwen35moe.cpp):
//
//   routed experts  ffn_gate_inp [E, d] (the router), ffn_gate_exps / ffn_up_exps [E, F, d],
//                   ffn_down_exps [E, d, F]                           (F = expert_feed_forward_length)
//   shared expert   ffn_gate_inp_shexp [d] (one logit per token: σ of it scales the expert),
//                   ffn_gate_shexp / ffn_up_shexp [Fs, d], ffn_down_shexp [d, Fs]
//                   (Fs = expert_shared_feed_forward_length)
//
// (The converter may fuse gate and up into ffn_gate_up_exps; llama.cpp reads either. The fused
// form is not read here yet: such a file is refused by the tensor check, naming ffn_gate_exps.)
import type { ModelHyperparameters } from '../types.ts';
import type { ArchTensorTable, ExpectedTensor } from './base.ts';
import { QWEN35_TENSORS } from './qwen35.ts';

/** The dense MLP's tensors, which a Qwen3.5-MoE layer does not have. */
const DENSE_MLP = /^blk\.\d+\.ffn_(gate|up|down)\.weight$/;

export const QWEN35MOE_TENSORS: ArchTensorTable = {
  architecture: 'qwen35moe',
  canonicalName: () => undefined,
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[] {
    const moe = hyper.moe;
    if (moe === undefined) throw new Error('qwen35moe hyperparameters without their experts');
    const out = QWEN35_TENSORS.expectedTensors(hyper).filter((t) => !DENSE_MLP.test(t.name));
    const { experts: E, expertFfn: F } = moe;
    const Fs = moe.sharedFfn ?? hyper.ffnSize;
    const d = hyper.hiddenSize;
    for (let l = 0; l < hyper.layers; l++) {
      const b = `blk.${l}.`;
      out.push(
        { name: `${b}ffn_gate_inp.weight`, shape: [E, d] },
        { name: `${b}ffn_gate_exps.weight`, shape: [E, F, d] },
        { name: `${b}ffn_up_exps.weight`, shape: [E, F, d] },
        { name: `${b}ffn_down_exps.weight`, shape: [E, d, F] },
        { name: `${b}ffn_gate_inp_shexp.weight`, shape: [d] },
        { name: `${b}ffn_gate_shexp.weight`, shape: [Fs, d] },
        { name: `${b}ffn_up_shexp.weight`, shape: [Fs, d] },
        { name: `${b}ffn_down_shexp.weight`, shape: [d, Fs] },
      );
    }
    return out;
  },
};
