import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { SafetensorsDType } from '../safetensors/dtype.ts';
import { floatToBf16Bits, floatToHalfBits } from '../safetensors/safetensors-test-writer.ts';
import { parseHfConfig } from './config.ts';
import { SIZES, baseConfig, makeTempDir, writeTestFolder, type TestFamily } from './hf-test-folder.ts';
import { loadHfModel } from './load.ts';

const root = makeTempDir('longhand-hf-load-');
let counter = 0;
const fresh = (): string => join(root, String(counter++));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** What a stored value reads back as, computed without the reader's code. */
function stored(dtype: SafetensorsDType, value: number): number {
  if (dtype === 'F32') return Math.fround(value);
  if (dtype === 'BF16') return new Float32Array(new Uint32Array([floatToBf16Bits(value) << 16]).buffer)[0]!;
  const h = floatToHalfBits(value);
  const exp = (h >> 10) & 0x1f;
  const sign = h & 0x8000 ? -1 : 1;
  return exp === 0 ? sign * (h & 0x3ff) * 2 ** -24 : sign * (1 + (h & 0x3ff) / 1024) * 2 ** (exp - 15);
}

const LLAMA_NAMES: Record<string, string> = {
  'model.embed_tokens.weight': 'token_embd.weight',
  'model.norm.weight': 'output_norm.weight',
  'lm_head.weight': 'output.weight',
  'model.layers.1.self_attn.q_proj.weight': 'blk.1.attn_q.weight',
  'model.layers.1.self_attn.k_proj.weight': 'blk.1.attn_k.weight',
  'model.layers.1.self_attn.v_proj.weight': 'blk.1.attn_v.weight',
  'model.layers.1.self_attn.o_proj.weight': 'blk.1.attn_output.weight',
  'model.layers.0.mlp.gate_proj.weight': 'blk.0.ffn_gate.weight',
  'model.layers.0.mlp.up_proj.weight': 'blk.0.ffn_up.weight',
  'model.layers.0.mlp.down_proj.weight': 'blk.0.ffn_down.weight',
  'model.layers.0.input_layernorm.weight': 'blk.0.attn_norm.weight',
  'model.layers.0.post_attention_layernorm.weight': 'blk.0.ffn_norm.weight',
};
const OPT_NAMES: Record<string, string> = {
  'model.decoder.embed_tokens.weight': 'token_embd.weight',
  'model.decoder.embed_positions.weight': 'position_embd.weight',
  'model.decoder.final_layer_norm.weight': 'output_norm.weight',
  'model.decoder.final_layer_norm.bias': 'output_norm.bias',
  'model.decoder.layers.1.self_attn_layer_norm.weight': 'blk.1.attn_norm.weight',
  'model.decoder.layers.1.self_attn_layer_norm.bias': 'blk.1.attn_norm.bias',
  'model.decoder.layers.1.self_attn.q_proj.bias': 'blk.1.attn_q.bias',
  'model.decoder.layers.1.self_attn.k_proj.weight': 'blk.1.attn_k.weight',
  'model.decoder.layers.1.self_attn.v_proj.weight': 'blk.1.attn_v.weight',
  'model.decoder.layers.1.self_attn.out_proj.bias': 'blk.1.attn_output.bias',
  'model.decoder.layers.0.final_layer_norm.weight': 'blk.0.ffn_norm.weight',
  'model.decoder.layers.0.fc1.weight': 'blk.0.ffn_up.weight',
  'model.decoder.layers.0.fc2.bias': 'blk.0.ffn_down.bias',
};

describe('loadHfModel', () => {
  const families: TestFamily[] = ['llama', 'mistral', 'qwen2', 'opt'];
  const dtypes: SafetensorsDType[] = ['F32', 'F16', 'BF16'];
  for (const family of families) {
    for (const dtype of dtypes) {
      for (const shards of [1, 3]) {
        it(`${family} ${dtype} ${shards === 1 ? 'single file' : `${shards} shards`}: hyperparameters, names, exact values`, () => {
          const written = writeTestFolder({ family, dtype, shards, seed: counter + 1 }, fresh());
          const model = loadHfModel(written.folder);
          try {
            const { hyper } = model;
            expect(model.format).toBe('safetensors');
            expect(hyper.family).toBe(family);
            expect(hyper.architecture).toBe(family === 'opt' ? 'opt' : 'llama');
            expect(hyper).toMatchObject({ hiddenSize: SIZES.hidden, layers: SIZES.layers, heads: SIZES.heads, ffnSize: SIZES.ffn, vocabSize: SIZES.vocab, contextLength: SIZES.context, headDim: SIZES.hidden / SIZES.heads });
            if (family === 'opt') {
              expect(hyper).toMatchObject({ kvHeads: SIZES.heads, normEps: 1e-5, positionOffset: 2, qkvBias: true, tiedEmbeddings: false });
              expect(hyper.ropeLayout).toBeUndefined();
            } else {
              expect(hyper).toMatchObject({ kvHeads: SIZES.kvHeads, normEps: 1e-6, ropeTheta: 500000, ropeLayout: 'neox', qkvBias: family === 'qwen2', tiedEmbeddings: false });
            }
            expect(model.tensors.size).toBe(written.tensors.length);
            const names = family === 'opt' ? OPT_NAMES : LLAMA_NAMES;
            const byHfName = new Map(written.tensors.map((t) => [t.name, t]));
            let bytes = 0;
            for (const [hfName, canonical] of Object.entries(names)) {
              const view = model.tensors.get(canonical);
              expect(view, canonical).toBeDefined();
              expect(view!.name).toBe(canonical);
              expect(view!.dtype).toBe(dtype);
              expect(view!.shape).toEqual(byHfName.get(hfName)!.shape);
            }
            for (const tensor of written.tensors) bytes += tensor.values.length * (dtype === 'F32' ? 4 : 2);
            expect(model.weightBytes).toBe(bytes);
            // every value of every tensor, exactly
            const canonicalOf = (hf: string): string => Object.entries(names).find(([k]) => k === hf)?.[1] ?? '';
            let compared = 0;
            for (const tensor of written.tensors) {
              const canonical = canonicalOf(tensor.name);
              if (canonical === '') continue;
              compared++;
              const got = model.tensors.get(canonical)!.toFloat32();
              const want = Float32Array.from(tensor.values, (v) => stored(dtype, v));
              expect(got).toEqual(want);
            }
            expect(compared).toBe(Object.keys(names).length);
            if (family === 'qwen2') expect(model.tensors.get('blk.1.attn_k.bias')!.shape).toEqual([SIZES.kvHeads * 4]);
            expect(model.tokenizer).toEqual({ kind: 'tokenizer.json', path: join(written.folder, 'tokenizer.json') });
            expect(model.chatTemplate).toBeUndefined();
          } finally {
            model.close();
          }
          expect(() => model.tensors.get('token_embd.weight')!.bytes()).toThrow(/closed/);
          model.close(); // idempotent
        });
      }
    }
  }

  it('reads tied embeddings per config (qwen2) and by absence (opt); names without model. prefix', () => {
    const qwen = loadHfModel(writeTestFolder({ family: 'qwen2', tied: true, noModelPrefix: true }, fresh()).folder);
    expect(qwen.hyper.tiedEmbeddings).toBe(true);
    expect(qwen.tensors.has('output.weight')).toBe(false);
    expect(qwen.tensors.has('blk.0.attn_q.bias')).toBe(true);
    qwen.close();
    const opt = loadHfModel(writeTestFolder({ family: 'opt', tied: true, editTensors: (ts) => ts.map((t) => ({ ...t, name: t.name.replace(/^model\./, '') })) }, fresh()).folder);
    expect(opt.hyper.tiedEmbeddings).toBe(true);
    expect(opt.tensors.has('position_embd.weight')).toBe(true);
    opt.close();
  });

  it('OPT without biases (enable_bias false)', () => {
    const model = loadHfModel(
      writeTestFolder({ family: 'opt', config: { enable_bias: false }, editTensors: (ts) => ts.filter((t) => !/(proj|fc\d)\.bias$/.test(t.name)) }, fresh()).folder,
    );
    expect(model.hyper.qkvBias).toBe(false);
    expect(model.tensors.has('blk.0.attn_q.bias')).toBe(false);
    expect(model.tensors.has('blk.0.attn_norm.bias')).toBe(true);
    model.close();
  });

  it('ignores tensors the architecture does not use', () => {
    const model = loadHfModel(
      writeTestFolder({ family: 'llama', editTensors: (ts) => [...ts, { name: 'model.layers.0.self_attn.rotary_emb.inv_freq', dtype: 'F32', shape: [2], values: [1, 2] }] }, fresh()).folder,
    );
    expect([...model.tensors.keys()].some((name) => name.includes('inv_freq'))).toBe(false);
    model.close();
  });

  it('finds chat templates and the tokenizer config', () => {
    const a = writeTestFolder({ family: 'llama', tokenizerConfig: { chat_template: '{{ messages }}' } }, fresh());
    const model = loadHfModel(a.folder);
    expect(model.chatTemplate).toBe('{{ messages }}');
    expect(model.tokenizer).toEqual({ kind: 'tokenizer.json', path: join(a.folder, 'tokenizer.json'), configPath: join(a.folder, 'tokenizer_config.json') });
    model.close();
    const named = [{ name: 'tool_use', template: 'T' }, { name: 'default', template: 'D' }];
    const b = loadHfModel(writeTestFolder({ family: 'llama', tokenizerConfig: { chat_template: named } }, fresh()).folder);
    expect(b.chatTemplate).toBe('D');
    b.close();
    const c = writeTestFolder({ family: 'llama', tokenizerConfig: { chat_template: 'old' } }, fresh());
    writeFileSync(join(c.folder, 'chat_template.jinja'), 'new');
    const cm = loadHfModel(c.folder);
    expect(cm.chatTemplate).toBe('new');
    cm.close();
  });
});

describe('parseHfConfig', () => {
  const parse = (family: TestFamily, extra: Record<string, unknown>): ReturnType<typeof parseHfConfig> => {
    const config: Record<string, unknown> = { ...baseConfig(family, false), ...extra };
    for (const [key, value] of Object.entries(extra)) if (value === undefined) delete config[key];
    return parseHfConfig(JSON.stringify(config));
  };

  it('defaults: kv heads = heads, rope_theta 10000, eps 1e-5, head_dim = hidden / heads', () => {
    const hyper = parse('llama', { num_key_value_heads: undefined, rope_theta: undefined, rms_norm_eps: undefined, tie_word_embeddings: undefined });
    expect(hyper).toMatchObject({ kvHeads: 4, ropeTheta: 10000, normEps: 1e-5, headDim: 4, tiedEmbeddings: false });
    expect(hyper.ropeScaling).toBeUndefined();
  });

  it('explicit head_dim and rope scaling', () => {
    expect(parse('mistral', { head_dim: 8 }).headDim).toBe(8);
    expect(
      parse('llama', { rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 } }).ropeScaling,
    ).toEqual({ kind: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 });
    expect(parse('llama', { rope_scaling: { type: 'linear', factor: 2 } }).ropeScaling).toEqual({ kind: 'linear', factor: 2 });
    expect(parse('llama', { rope_scaling: null }).ropeScaling).toBeUndefined();
  });

  it('rejects what it cannot run, naming the reason', () => {
    const expectCode = (fn: () => unknown, code: string, text: RegExp): void => {
      expect(fn).toThrow(text);
      try {
        fn();
      } catch (error) {
        expect((error as { code: string }).code).toBe(code);
      }
    };
    expectCode(() => parse('llama', { rope_scaling: { rope_type: 'yarn', factor: 4 } }), 'MODEL_UNSUPPORTED_ARCHITECTURE', /yarn/);
    expectCode(() => parse('opt', { do_layer_norm_before: false }), 'MODEL_UNSUPPORTED_ARCHITECTURE', /do_layer_norm_before/);
    expectCode(() => parse('opt', { word_embed_proj_dim: 8 }), 'MODEL_UNSUPPORTED_ARCHITECTURE', /word_embed_proj_dim 8/);
    expectCode(() => parse('opt', { activation_function: 'gelu' }), 'MODEL_UNSUPPORTED_ARCHITECTURE', /gelu/);
    expectCode(() => parse('llama', { hidden_act: 'gelu' }), 'MODEL_UNSUPPORTED_ARCHITECTURE', /gelu/);
    expectCode(() => parse('llama', { num_key_value_heads: 3 }), 'MODEL_BAD_VALUE', /num_key_value_heads/);
    expectCode(() => parse('llama', { hidden_size: 18 }), 'MODEL_BAD_VALUE', /hidden_size/);
    expectCode(() => parse('llama', { num_hidden_layers: -1 }), 'MODEL_BAD_VALUE', /num_hidden_layers must be a positive integer/);
    expectCode(() => parse('llama', { vocab_size: '32' }), 'MODEL_BAD_VALUE', /vocab_size/);
    expectCode(() => parse('llama', { rope_scaling: { rope_type: 'llama3', factor: 8 } }), 'MODEL_MISSING_METADATA', /rope_scaling\.low_freq_factor/);
    expectCode(() => parse('llama', { architectures: undefined }), 'MODEL_MISSING_METADATA', /architectures/);
    expectCode(() => parse('llama', { architectures: 'LlamaForCausalLM' }), 'MODEL_BAD_VALUE', /architectures/);
  });
});
