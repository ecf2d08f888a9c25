// A Hugging Face model folder → LoadedModel:
//   config.json → hyperparameters; safetensors checkpoint (single or sharded) → tensors renamed to
//   canonical names (arch/) and checked against the hyperparameters; tokenizer.json; chat template.
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { ModelFileError } from '../../../common/errors.ts';
import { canonicalTensors, checkTensors, type ArchTensorTable } from '../arch/base.ts';
import { GEMMA2_TENSORS, GEMMA3_TENSORS, shiftedNorms } from '../arch/gemma.ts';
import { GEMMA4_TENSORS, gemma4HfTensors } from '../arch/gemma4.ts';
import { LLAMA_TENSORS } from '../arch/llama.ts';
import { OPT_TENSORS } from '../arch/opt.ts';
import { PHI3_TENSORS, phi3Views } from '../arch/phi3.ts';
import { QWEN3_TENSORS } from '../arch/qwen3.ts';
import { QWEN3MOE_HF_TENSORS } from '../arch/qwen3moe.ts';
import { QWEN35_TENSORS } from '../arch/qwen35.ts';
import { GPT_OSS_TENSORS } from '../arch/gpt-oss.ts';
import { QWEN35MOE_TENSORS } from '../arch/qwen35moe.ts';
import { openSafetensorsCheckpoint } from '../safetensors/checkpoint.ts';
import type { Architecture, LoadedModel, ModelHyperparameters } from '../types.ts';
import { readHfConfig } from './config.ts';
import { findChatTemplate, findTokenizer } from './tokenizer-files.ts';

export const ARCH_TABLES: Readonly<Record<Architecture, ArchTensorTable>> = { llama: LLAMA_TENSORS, opt: OPT_TENSORS, phi3: PHI3_TENSORS, gemma2: GEMMA2_TENSORS, gemma3: GEMMA3_TENSORS, gemma4: GEMMA4_TENSORS, qwen3: QWEN3_TENSORS, qwen3moe: QWEN3MOE_HF_TENSORS, qwen35: QWEN35_TENSORS, 'gpt-oss': GPT_OSS_TENSORS, qwen35moe: QWEN35MOE_TENSORS };

/** Loads a Hugging Face folder (config.json + safetensors + tokenizer.json). */
export function loadHfModel(folder: string): LoadedModel {
  const path = resolve(folder);
  if (!existsSync(path) || !statSync(path).isDirectory()) {
    throw new ModelFileError('MODEL_NOT_FOUND', folder, 'is not a model folder (expected config.json, *.safetensors, tokenizer.json)');
  }
  let hyper = readHfConfig(path);
  const tokenizer = findTokenizer(path);
  const chatTemplate = findChatTemplate(path);
  const table = ARCH_TABLES[hyper.architecture];
  const checkpoint = openSafetensorsCheckpoint(path);
  try {
    let tensors = canonicalTensors(table, checkpoint.tensors, folder);
    // Gemma's RMSNorm multiplies by (1 + w): hold w + 1, as the GGUF converter writes it (arch/gemma.ts)
    if (hyper.gemma !== undefined) tensors = shiftedNorms(tensors);
    // Gemma 4: rope_freqs from the config, v_proj / layer_scalar / lm_head from the tensors present (arch/gemma4.ts)
    if (hyper.gemma4 !== undefined) ({ hyper, tensors } = gemma4HfTensors(folder, hyper, tensors));
    hyper = settleTiedEmbeddings(hyper, tensors.has('output.weight'));
    checkTensors(table, hyper, tensors, folder);
    let weightBytes = 0;
    for (const view of tensors.values()) weightBytes += view.bytes().length;
    let closed = false;
    const model: LoadedModel = {
      format: 'safetensors',
      path,
      hyper,
      tensors,
      tokenizer,
      chatTemplate,
      weightBytes,
      close() {
        if (closed) return;
        closed = true;
        checkpoint.close();
      },
    };
    // Phi-3's fused tensors as the stages read them (views; weightBytes counted the file's tensors)
    return hyper.architecture === 'phi3' ? phi3Views(model) : model;
  } catch (error) {
    checkpoint.close();
    throw error;
  }
}

/**
 * OPT checkpoints usually omit lm_head.weight (it is the embedding): absence means tied.
 * Llama-family configs state tie_word_embeddings and the weights must agree (checkTensors).
 */
function settleTiedEmbeddings(hyper: ModelHyperparameters, hasOutput: boolean): ModelHyperparameters {
  if (hyper.architecture === 'opt') return { ...hyper, tiedEmbeddings: !hasOutput };
  return hyper;
}
