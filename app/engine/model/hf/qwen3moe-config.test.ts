// config.json of Qwen3MoeForCausalLM (qwen3moe-config.ts): the experts read, and the folders whose
// MLP Longhand would not compute as llama.cpp does refused by name.
import { describe, expect, it } from 'vitest';
import { QWEN3MOE_TEST_MODEL, qwen3moeHfConfig } from '../../../../test/fixtures/families/qwen3moe.ts';
import { parseHfConfig } from './config.ts';

const config = qwen3moeHfConfig({ ...QWEN3MOE_TEST_MODEL, dtype: 'F32' });
const parse = (patch: Record<string, unknown>) => parseHfConfig(JSON.stringify({ ...config, ...patch }));

describe('Qwen3MoeForCausalLM config.json', () => {
  it('reads the experts: num_experts, num_experts_per_tok, moe_intermediate_size', () => {
    expect(parse({}).moe).toEqual({ experts: 16, expertsUsed: 4, expertFfn: 256, normTopK: true });
    expect(parse({}).architecture).toBe('qwen3moe');
  });

  it.each([
    [{ norm_topk_prob: false }, 'norm_topk_prob'],
    [{ mlp_only_layers: [1] }, 'mlp_only_layers'],
    [{ decoder_sparse_step: 2 }, 'decoder_sparse_step'],
  ])('refuses %j with MODEL_UNSUPPORTED_ARCHITECTURE naming it', (patch, key) => {
    expect(() => parse(patch)).toThrow(expect.objectContaining({ code: 'MODEL_UNSUPPORTED_ARCHITECTURE', message: expect.stringContaining(key) }));
  });

  it('refuses more experts per token than experts, and a missing expert count, as bad values', () => {
    expect(() => parse({ num_experts_per_tok: 17 })).toThrow(expect.objectContaining({ code: 'MODEL_BAD_VALUE', message: expect.stringContaining('num_experts_per_tok') }));
    expect(() => parse({ num_experts: undefined })).toThrow(expect.objectContaining({ message: expect.stringContaining('num_experts') }));
  });
});
