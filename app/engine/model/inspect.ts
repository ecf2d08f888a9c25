// `longhand inspect`: what a model file is and what it will cost, without running it.
import { FAMILIES } from '../forward/layers/families.ts';
import type { LayerSpec } from '../forward/layers/layer-spec.ts';
import { estimateMemory, type KvElementType, type MemoryEstimate, type WeightSummary } from './memory-estimate.ts';
import type { LoadedModel, ModelHyperparameters, TensorDType } from './types.ts';

export interface ModelReport {
  path: string;
  format: LoadedModel['format'];
  architecture: ModelHyperparameters['architecture'];
  family: string;
  parameters: number;
  hiddenSize: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  ffnSize: number;
  vocabSize: number;
  trainedContext: number;
  ropeTheta: number | null;
  normEps: number;
  tiedEmbeddings: boolean;
  qkvBias: boolean;
  /** Tensor count and stored bytes per element type. */
  weightTypes: Partial<Record<TensorDType, { tensors: number; bytes: number }>>;
  chatTemplate: boolean;
  memory: MemoryEstimate;
  /**
   * A mixture-of-experts model: experts per layer, per token, and one expert's width (the MLP;
   * ffnSize is then unused); the bytes of every expert tensor (router included) and what one token
   * reads of them (per layer the router and expertsUsed experts' rows: the native stages' count).
   */
  moe?: { experts: number; expertsUsed: number; expertFfn: number; expertBytes: number; expertBytesPerToken: number };
}

export function summariseWeights(model: LoadedModel): { summary: WeightSummary; types: ModelReport['weightTypes']; parameters: number } {
  const types: ModelReport['weightTypes'] = {};
  const bytesByType: WeightSummary['bytesByType'] = {};
  let parameters = 0;
  let storedBytes = 0;
  for (const tensor of model.tensors.values()) {
    const bytes = tensor.bytes().byteLength;
    const entry = (types[tensor.dtype] ??= { tensors: 0, bytes: 0 });
    entry.tensors += 1;
    entry.bytes += bytes;
    bytesByType[tensor.dtype] = (bytesByType[tensor.dtype] ?? 0) + bytes;
    parameters += tensor.elements;
    storedBytes += bytes;
  }
  const expertBytes = model.hyper.moe ? expertFigures(model, model.hyper.moe).expertBytes : 0;
  return { summary: { bytesByType, storedBytes, ...(expertBytes > 0 ? { expertBytes } : {}) }, types, parameters };
}

/** Bytes of the expert tensors (ffn_gate_inp, ffn_*_exps, a folder's per-expert ones) and one token's share of them. */
function expertFigures(model: LoadedModel, moe: NonNullable<ModelHyperparameters['moe']>): { expertBytes: number; expertBytesPerToken: number } {
  let expertBytes = 0;
  let perToken = 0;
  for (const [name, tensor] of model.tensors) {
    const bytes = tensor.bytes().byteLength;
    if (name.endsWith('.ffn_gate_inp.weight')) {
      expertBytes += bytes;
      perToken += bytes; // every token reads the whole router
    } else if (/\.ffn_(gate|up|down)_exps\.(\d+\.)?weight$/.test(name)) {
      // (not gpt-oss's expert biases: the stages hold their own copy, no step reads them from the file)
      expertBytes += bytes;
      // k of E experts: k/E of a stacked tensor, or of a layer's E per-expert tensors (a folder) together
      perToken += (bytes / moe.experts) * moe.expertsUsed;
    }
  }
  return { expertBytes, expertBytesPerToken: perToken };
}

export function inspectModel(
  model: LoadedModel,
  options: { contextTokens?: number; kvType?: KvElementType; freeBytes?: number; totalBytes?: number } = {},
): ModelReport {
  const { hyper } = model;
  const { summary, types, parameters } = summariseWeights(model);
  const contextTokens = options.contextTokens ?? hyper.contextLength;
  return {
    path: model.path,
    format: model.format,
    architecture: hyper.architecture,
    family: hyper.family,
    parameters,
    hiddenSize: hyper.hiddenSize,
    layers: hyper.layers,
    heads: hyper.heads,
    kvHeads: hyper.kvHeads,
    headDim: hyper.headDim,
    ffnSize: hyper.ffnSize,
    vocabSize: hyper.vocabSize,
    trainedContext: hyper.contextLength,
    ropeTheta: hyper.ropeTheta ?? null,
    normEps: hyper.normEps,
    tiedEmbeddings: hyper.tiedEmbeddings,
    qkvBias: hyper.qkvBias,
    weightTypes: types,
    chatTemplate: model.chatTemplate !== undefined && model.chatTemplate.length > 0,
    ...(hyper.moe ? { moe: { experts: hyper.moe.experts, expertsUsed: hyper.moe.expertsUsed, expertFfn: hyper.moe.expertFfn, ...expertFigures(model, hyper.moe) } } : {}),
    memory: estimateMemory(hyper, summary, contextTokens, { ...options, layers: familyLayers(hyper) }),
  };
}

/** The family's layer specs (window layers, KV heads per layer), or undefined for an architecture no family runs. */
export function familyLayers(hyper: ModelHyperparameters): LayerSpec[] | undefined {
  const family = Object.hasOwn(FAMILIES, hyper.architecture) ? FAMILIES[hyper.architecture] : undefined;
  return family?.layers(hyper);
}
