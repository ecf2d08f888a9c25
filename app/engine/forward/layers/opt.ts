// OPT (Hugging Face OPTForCausalLM, pre-LayerNorm variants: model/hf/config.ts refuses the
// others). Every layer the same: multi-head attention (kvHeads == heads) without RoPE, scale
// 1/√headDim (Hugging Face scales q by it before q·k: the same product); an ungated ReLU MLP
// (fc1, fc2); LayerNorm with bias before attention and before the MLP; a bias on every Linear
// (config enable_bias). Positions are a learned table added to the token rows, offset by 2, so a
// sequence cannot run past the trained length. Only policy 'full' runs it (the speculation and the
// comparison policies were written and checked for the llama family), and only on onnxruntime.
import { OPT_TENSORS } from '../../model/arch/opt.ts';
import type { ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { globalAttention, type LayerSpec } from './layer-spec.ts';
import { optStageGraph } from './opt-graph.ts';

/** OPT's learned position table starts its rows at 2 (fairseq reserved the first two). */
const OPT_POSITION_OFFSET = 2;

function optLayers(hyper: ModelHyperparameters): LayerSpec[] {
  const layer: LayerSpec = {
    attention: globalAttention(hyper, undefined),
    ffn: { kind: 'dense', size: hyper.ffnSize, gated: false, activation: 'relu' },
    norm: { kind: 'layer', placement: 'pre', eps: hyper.normEps },
  };
  return Array.from({ length: hyper.layers }, () => layer);
}

export const OPT_FAMILY: ModelFamily = {
  architecture: 'opt',
  name: 'OPT',
  tensors: OPT_TENSORS,
  layers: optLayers,
  embedding: (hyper) => ({ tokenTable: 'token_embd.weight', positions: { table: 'position_embd.weight', offset: hyper.positionOffset ?? OPT_POSITION_OFFSET }, scale: 1 }),
  contextLimit: (hyper) => hyper.contextLength,
  policyRefusal: (policy) => (policy === 'full' ? undefined : `policy '${policy}' supports the llama family only (OPT runs with 'full')`),
  onnxStage: optStageGraph,
  nativeStages: { kind: 'none', reason: 'the opt architecture has no native dense stages' },
};
