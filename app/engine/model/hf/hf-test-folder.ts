// Test-only: writes small Hugging Face model folders (config.json, tokenizer files, safetensors
// single-file or sharded) with seeded random weights. Tensor names are written out by hand here,
// independently of arch/, so the tests check the name tables rather than reuse them.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SafetensorsDType } from '../safetensors/dtype.ts';
import { encodeSafetensors, randomValues, seededRandom, type WriterTensor } from '../safetensors/safetensors-test-writer.ts';

export type TestFamily = 'llama' | 'mistral' | 'qwen2' | 'opt';

export interface TestFolderOptions {
  family: TestFamily;
  dtype?: SafetensorsDType;
  shards?: number; // 1 → model.safetensors; more → index + model-0000x-of-0000y.safetensors
  seed?: number;
  tied?: boolean;
  /** Extra or replaced config keys (undefined deletes a key). */
  config?: Record<string, unknown>;
  /** Edit the tensor list before writing. */
  editTensors?: (tensors: WriterTensor[]) => WriterTensor[];
  /** Drop 'model.' from every name. */
  noModelPrefix?: boolean;
  tokenizer?: boolean;
  tokenizerConfig?: Record<string, unknown>;
}

export const SIZES = { hidden: 16, layers: 2, heads: 4, kvHeads: 2, ffn: 24, vocab: 32, context: 64 };

export function baseConfig(family: TestFamily, tied: boolean): Record<string, unknown> {
  const { hidden, layers, heads, kvHeads, ffn, vocab, context } = SIZES;
  if (family === 'opt') {
    return {
      architectures: ['OPTForCausalLM'],
      model_type: 'opt',
      hidden_size: hidden,
      num_hidden_layers: layers,
      num_attention_heads: heads,
      ffn_dim: ffn,
      vocab_size: vocab,
      max_position_embeddings: context,
      do_layer_norm_before: true,
      word_embed_proj_dim: hidden,
      activation_function: 'relu',
      enable_bias: true,
    };
  }
  const architectures = { llama: 'LlamaForCausalLM', mistral: 'MistralForCausalLM', qwen2: 'Qwen2ForCausalLM' }[family];
  return {
    architectures: [architectures],
    model_type: family,
    hidden_size: hidden,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    intermediate_size: ffn,
    vocab_size: vocab,
    max_position_embeddings: context,
    rms_norm_eps: 1e-6,
    rope_theta: 500000,
    hidden_act: 'silu',
    tie_word_embeddings: tied,
  };
}

/** HF tensor names and shapes for the test sizes. */
export function hfTensorShapes(family: TestFamily, tied: boolean): [string, number[]][] {
  const { hidden: d, layers, heads, kvHeads, ffn, vocab, context } = SIZES;
  const out: [string, number[]][] = [];
  if (family === 'opt') {
    out.push(['model.decoder.embed_tokens.weight', [vocab, d]], ['model.decoder.embed_positions.weight', [context + 2, d]]);
    for (let l = 0; l < layers; l++) {
      const p = `model.decoder.layers.${l}.`;
      for (const proj of ['q_proj', 'k_proj', 'v_proj', 'out_proj']) out.push([`${p}self_attn.${proj}.weight`, [d, d]], [`${p}self_attn.${proj}.bias`, [d]]);
      out.push([`${p}self_attn_layer_norm.weight`, [d]], [`${p}self_attn_layer_norm.bias`, [d]]);
      out.push([`${p}fc1.weight`, [ffn, d]], [`${p}fc1.bias`, [ffn]], [`${p}fc2.weight`, [d, ffn]], [`${p}fc2.bias`, [d]]);
      out.push([`${p}final_layer_norm.weight`, [d]], [`${p}final_layer_norm.bias`, [d]]);
    }
    out.push(['model.decoder.final_layer_norm.weight', [d]], ['model.decoder.final_layer_norm.bias', [d]]);
    if (!tied) out.push(['lm_head.weight', [vocab, d]]);
    return out;
  }
  const headDim = d / heads;
  out.push(['model.embed_tokens.weight', [vocab, d]]);
  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}.`;
    out.push([`${p}input_layernorm.weight`, [d]]);
    out.push([`${p}self_attn.q_proj.weight`, [heads * headDim, d]]);
    out.push([`${p}self_attn.k_proj.weight`, [kvHeads * headDim, d]]);
    out.push([`${p}self_attn.v_proj.weight`, [kvHeads * headDim, d]]);
    if (family === 'qwen2') {
      out.push([`${p}self_attn.q_proj.bias`, [heads * headDim]], [`${p}self_attn.k_proj.bias`, [kvHeads * headDim]], [`${p}self_attn.v_proj.bias`, [kvHeads * headDim]]);
    }
    out.push([`${p}self_attn.o_proj.weight`, [d, heads * headDim]]);
    out.push([`${p}post_attention_layernorm.weight`, [d]]);
    out.push([`${p}mlp.gate_proj.weight`, [ffn, d]], [`${p}mlp.up_proj.weight`, [ffn, d]], [`${p}mlp.down_proj.weight`, [d, ffn]]);
  }
  out.push(['model.norm.weight', [d]]);
  if (!tied) out.push(['lm_head.weight', [vocab, d]]);
  return out;
}

export interface TestFolder {
  folder: string;
  config: Record<string, unknown>;
  tensors: WriterTensor[];
  files: string[];
}

export function makeTempDir(label = 'longhand-hf-'): string {
  return mkdtempSync(join(tmpdir(), label));
}

export function writeTestFolder(options: TestFolderOptions, folder: string = makeTempDir()): TestFolder {
  const { family, dtype = 'F32', shards = 1, seed = 1, tied = false } = options;
  mkdirSync(folder, { recursive: true });
  const config: Record<string, unknown> = { ...baseConfig(family, tied), ...options.config };
  for (const [key, value] of Object.entries(options.config ?? {})) if (value === undefined) delete config[key];
  const random = seededRandom(seed);
  let tensors: WriterTensor[] = hfTensorShapes(family, tied).map(([name, shape]) => ({
    name: options.noModelPrefix ? name.replace(/^model\./, '') : name,
    dtype,
    shape,
    values: randomValues(random, shape.reduce((a, b) => a * b, 1), 2),
  }));
  if (options.editTensors) tensors = options.editTensors(tensors);
  writeFileSync(join(folder, 'config.json'), JSON.stringify(config, null, 2));
  if (options.tokenizer !== false) writeFileSync(join(folder, 'tokenizer.json'), JSON.stringify({ version: '1.0', model: { type: 'BPE', vocab: {}, merges: [] } }));
  if (options.tokenizerConfig !== undefined) writeFileSync(join(folder, 'tokenizer_config.json'), JSON.stringify(options.tokenizerConfig));
  const files = writeShards(folder, tensors, shards);
  return { folder, config, tensors, files };
}

/** Writes tensors as one file or as `shards` files plus the index; returns file names. */
export function writeShards(folder: string, tensors: WriterTensor[], shards: number): string[] {
  if (shards <= 1) {
    writeFileSync(join(folder, 'model.safetensors'), encodeSafetensors(tensors, { format: 'pt' }));
    return ['model.safetensors'];
  }
  const pad = (n: number): string => String(n).padStart(5, '0');
  const files: string[] = [];
  const weightMap: Record<string, string> = {};
  const per = Math.ceil(tensors.length / shards);
  for (let s = 0; s < shards; s++) {
    const name = `model-${pad(s + 1)}-of-${pad(shards)}.safetensors`;
    const part = tensors.slice(s * per, (s + 1) * per);
    writeFileSync(join(folder, name), encodeSafetensors(part, { format: 'pt' }));
    for (const tensor of part) weightMap[tensor.name] = name;
    files.push(name);
  }
  writeFileSync(join(folder, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }, null, 2));
  return files;
}
