// Gemma 2 and Gemma 3 (GGUF `gemma2`/`gemma3`, Hugging Face Gemma2ForCausalLM, Gemma3ForCausalLM
// text-only), what llama.cpp's src/models/gemma2.cpp and gemma3.cpp compute:
//   - layers alternate between a sliding window and global attention (hyper.gemma.slidingLayers:
//     Gemma 2 every other layer from layer 0, Gemma 3 five local then one global); the window
//     layers get the `window` row policy whatever the user picked (policy/plan.ts), the global
//     layers the chosen one
//   - RoPE (NeoX pairs) per layer: the local layers their own θ (Gemma 3: 10 000, unscaled), the
//     global layers the file's θ and scaling (Gemma 3 4B+: 1 000 000, linear ×8)
//   - q·k scaled by 1/√head_dim (or 1/√query_pre_attn_scalar); Gemma 2 soft-caps the attention
//     logits (50) and the final logits (30); Gemma 3 RMS-normalises each q and k head before RoPE
//   - sandwich norms: RMSNorm before and after attention and before and after the MLP
//   - GeGLU with the tanh GELU; the embedding rows scaled by √hidden (in fp32, as llama.cpp)
// The stages are built by the shared builders here (gemma-graph.ts, gemma-native.ts), so another
// family with Gemma's layers (Gemma 4) declares its specs and reuses them.
import { GEMMA2_TENSORS, GEMMA3_TENSORS } from '../../model/arch/gemma.ts';
import type { ArchTensorTable } from '../../model/arch/base.ts';
import type { ModelHyperparameters } from '../../model/types.ts';
import type { ModelFamily } from './family.ts';
import { gemmaStageGraph } from './gemma-graph.ts';
import { createGemmaNativeStages, gemmaLinearNames } from './gemma-native.ts';
import type { LayerSpec, RopeSpec } from './layer-spec.ts';
import { LonghandError } from '../../../common/errors.ts';

/** hyper.gemma, or a typed error for hyperparameters built without it. */
export function gemmaHyper(hyper: ModelHyperparameters): NonNullable<ModelHyperparameters['gemma']> {
  if (hyper.gemma === undefined) throw new LonghandError('MODEL_BAD_VALUE', `${hyper.family}: the Gemma hyperparameters (window, layer pattern, soft-caps) are missing`, { architecture: hyper.architecture });
  return hyper.gemma;
}

/** What each layer of a Gemma 2 / Gemma 3 model computes. */
export function gemmaLayers(hyper: ModelHyperparameters): LayerSpec[] {
  const g = gemmaHyper(hyper);
  const globalRope: RopeSpec = { base: hyper.ropeTheta ?? 10000, dims: hyper.headDim, layout: 'neox', scaling: hyper.ropeScaling };
  const localRope: RopeSpec = { base: g.localRope.theta, dims: hyper.headDim, layout: 'neox', scaling: g.localRope.scaling };
  const make = (sliding: boolean): LayerSpec => ({
    attention: {
      kind: 'attention',
      heads: hyper.heads,
      kvHeads: hyper.kvHeads,
      headDim: hyper.headDim,
      scale: g.attentionScale,
      window: sliding ? g.window : undefined,
      sinks: false,
      rope: sliding ? localRope : globalRope,
      qkNorm: g.qkNorm,
      softcap: g.attnSoftcap,
    },
    ffn: { kind: 'dense', size: hyper.ffnSize, gated: true, activation: 'gelu_tanh' },
    norm: { kind: 'rms', placement: 'sandwich', eps: hyper.normEps },
  });
  // two objects, shared by the layers of each kind (shared code may compare them cheaply)
  const local = make(true);
  const global = make(false);
  return g.slidingLayers.map((sliding) => (sliding ? local : global));
}

function gemmaFamily(architecture: 'gemma2' | 'gemma3', name: string, tensors: ArchTensorTable): ModelFamily {
  return {
    architecture,
    name,
    tensors,
    layers: gemmaLayers,
    // llama.cpp: ggml_scale(inpL, sqrtf(n_embd)): the fp32 square root
    embedding: (hyper) => ({ tokenTable: 'token_embd.weight', positions: undefined, scale: Math.fround(Math.sqrt(hyper.hiddenSize)) }),
    contextLimit: () => undefined,
    policyRefusal: () => undefined,
    onnxStage: (w, s, opts) => gemmaStageGraph(w, s, opts, gemmaLayers(w.model.hyper), gemmaHyper(w.model.hyper).finalSoftcap),
    nativeStages: { kind: 'native', linearNames: gemmaLinearNames, create: (weights, options) => createGemmaNativeStages(weights, options, gemmaLayers(weights.model.hyper), gemmaHyper(weights.model.hyper).finalSoftcap) },
  };
}

export const GEMMA2_FAMILY: ModelFamily = gemmaFamily('gemma2', 'Gemma 2', GEMMA2_TENSORS);
export const GEMMA3_FAMILY: ModelFamily = gemmaFamily('gemma3', 'Gemma 3', GEMMA3_TENSORS);
