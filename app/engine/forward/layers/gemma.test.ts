// Gemma 2 and Gemma 3 hyperparameters → LayerSpecs, from GGUF keys (as llama.cpp reads them) and
// from config.json (what the converter writes from it): which layers slide, their RoPE, scale,
// soft-caps, q/k norms, the tanh GELU, sandwich norms; bad values are typed errors.
import { describe, expect, it } from 'vitest';
import { parseHfConfig } from '../../model/hf/config.ts';
import { gemmaAttentionScale, gemmaGgufHyper, slidingPattern, type GgufKeys } from '../../model/gguf/gemma-keys.ts';
import type { ModelHyperparameters } from '../../model/types.ts';
import { familyOf } from './families.ts';
import type { AttentionSpec } from './layer-spec.ts';

function keys(values: Record<string, unknown>): GgufKeys {
  return {
    float: (k, fallback) => (values[k] as number | undefined) ?? fallback,
    int: (k, fallback) => (values[k] as number | undefined) ?? fallback,
    raw: (k) => values[k],
    bad: (k, message) => {
      throw new Error(`${k}: ${message}`);
    },
  };
}

const base: ModelHyperparameters = {
  architecture: 'gemma3', family: 'gemma3', hiddenSize: 2560, layers: 34, heads: 8, kvHeads: 4, headDim: 256, ffnSize: 10240, vocabSize: 262144,
  contextLength: 131072, normEps: 1e-6, ropeTheta: 1e6, ropeLayout: 'neox', ropeScaling: { kind: 'linear', factor: 8 }, qkvBias: false, tiedEmbeddings: true,
};

describe('Gemma layer patterns', () => {
  it("llama.cpp's set_swa_pattern: Gemma 3 five local then one global, Gemma 2 every other from layer 0", () => {
    expect(slidingPattern(12, 6)).toEqual([true, true, true, true, true, false, true, true, true, true, true, false]);
    expect(slidingPattern(4, 2)).toEqual([true, false, true, false]);
  });

  it('Gemma 3 from GGUF keys: window, local θ 1e4 unscaled, global θ 1e6 ×8, q/k norm, GeGLU tanh, sandwich norms, √d embedding', () => {
    const gemma = gemmaGgufHyper(keys({ 'gemma3.attention.sliding_window': 1024, 'gemma3.rope.freq_base_swa': 10000 }), 'gemma3', base);
    const hyper = { ...base, gemma };
    const specs = familyOf(hyper).layers(hyper);
    const a = specs.map((s) => s.attention as AttentionSpec);
    expect(a.map((x) => x.window)).toEqual(slidingPattern(34, 6).map((s) => (s ? 1024 : undefined)));
    expect(a[0]!.rope).toEqual({ base: 10000, dims: 256, layout: 'neox', scaling: undefined });
    expect(a[5]!.rope).toEqual({ base: 1e6, dims: 256, layout: 'neox', scaling: { kind: 'linear', factor: 8 } });
    expect(a.every((x) => x.qkNorm && x.softcap === 0 && x.scale === 1 / 16)).toBe(true);
    expect(specs[0]!.ffn).toEqual({ kind: 'dense', size: 10240, gated: true, activation: 'gelu_tanh' });
    expect(specs[0]!.norm).toEqual({ kind: 'rms', placement: 'sandwich', eps: 1e-6 });
    expect(familyOf(hyper).embedding(hyper).scale).toBe(Math.fround(Math.sqrt(2560)));
    expect(gemma.finalSoftcap).toBe(0);
  });

  it('Gemma 3 without a window key has no sliding layers; an explicit per-layer pattern is followed', () => {
    expect(gemmaGgufHyper(keys({}), 'gemma3', base).slidingLayers.every((s) => !s)).toBe(true);
    const pattern = Array.from({ length: 34 }, (_, l) => l % 2 === 1);
    expect(gemmaGgufHyper(keys({ 'gemma3.attention.sliding_window': 512, 'gemma3.attention.sliding_window_pattern': pattern }), 'gemma3', base).slidingLayers).toEqual(pattern);
    expect(() => gemmaGgufHyper(keys({ 'gemma3.attention.sliding_window': 512, 'gemma3.attention.sliding_window_pattern': [true] }), 'gemma3', base)).toThrow(/34 booleans/);
  });

  it('Gemma 2 from GGUF keys: default window 4096 and soft-caps 50 / 30, local θ the global one', () => {
    const g2 = { ...base, architecture: 'gemma2' as const, family: 'gemma2', ropeTheta: 10000, ropeScaling: undefined, layers: 26, hiddenSize: 2304, heads: 8, headDim: 256 };
    const gemma = gemmaGgufHyper(keys({}), 'gemma2', g2);
    expect(gemma).toMatchObject({ window: 4096, attnSoftcap: 50, finalSoftcap: 30, qkNorm: false, localRope: { theta: 10000, scaling: undefined } });
    const hyper2 = { ...g2, gemma };
    const specs = familyOf(hyper2).layers(hyper2);
    expect(specs.map((s) => (s.attention as AttentionSpec).window !== undefined)).toEqual(slidingPattern(26, 2));
    expect((specs[1]!.attention as AttentionSpec).softcap).toBe(50);
    expect(() => gemmaGgufHyper(keys({ 'gemma2.attention.sliding_window': 0 }), 'gemma2', g2)).toThrow(/sliding window of 0/);
  });

  it('the 27B sizes scale by 1/√(hidden/heads), as llama.cpp decides by the layer count', () => {
    expect(gemmaAttentionScale({ hiddenSize: 5376, heads: 32, headDim: 128, layers: 62 }, 'gemma3')).toBe(Math.fround(1 / Math.fround(Math.sqrt(168))));
    expect(gemmaAttentionScale({ hiddenSize: 4608, heads: 32, headDim: 128, layers: 46 }, 'gemma2')).toBe(Math.fround(1 / Math.fround(Math.sqrt(144))));
    expect(gemmaAttentionScale({ hiddenSize: 2560, heads: 8, headDim: 256, layers: 34 }, 'gemma3')).toBe(1 / 16);
  });

  it('config.json: layer_types, rope_parameters and query_pre_attn_scalar; an unknown activation is refused', () => {
    const config = {
      architectures: ['Gemma3ForCausalLM'], hidden_size: 640, num_attention_heads: 4, num_key_value_heads: 1, head_dim: 256, num_hidden_layers: 4,
      intermediate_size: 2048, vocab_size: 262144, max_position_embeddings: 32768, sliding_window: 512, query_pre_attn_scalar: 256,
      layer_types: ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'],
      rope_parameters: { full_attention: { rope_type: 'linear', factor: 8, rope_theta: 1e6 }, sliding_attention: { rope_type: 'default', rope_theta: 1e4 } },
      hidden_activation: 'gelu_pytorch_tanh',
    };
    const hyper = parseHfConfig(JSON.stringify(config));
    expect(hyper.architecture).toBe('gemma3');
    expect(hyper.ropeTheta).toBe(1e6);
    expect(hyper.ropeScaling).toEqual({ kind: 'linear', factor: 8 });
    expect(hyper.gemma).toMatchObject({ window: 512, slidingLayers: [true, false, true, false], localRope: { theta: 1e4, scaling: undefined }, attentionScale: 1 / 16, qkNorm: true });
    expect(() => parseHfConfig(JSON.stringify({ ...config, hidden_activation: 'gelu' }))).toThrow(expect.objectContaining({ code: 'MODEL_UNSUPPORTED_ARCHITECTURE' }));
    expect(() => parseHfConfig(JSON.stringify({ ...config, layer_types: ['full_attention'] }))).toThrow(expect.objectContaining({ code: 'MODEL_BAD_VALUE' }));
  });
});
