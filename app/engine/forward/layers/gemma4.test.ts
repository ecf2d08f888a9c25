// Gemma 4's layer list from GGUF metadata and from a Hugging Face config, on the layer pattern the
// real models have (4 window : 1 global, the last S layers KV-shared) at tiny sizes: per-layer head
// dims and KV heads, proportional RoPE on the global layers, and which layer each shared layer reads
// (llama-model.cpp's rule: the last window / global layer before the shared block).
import { describe, expect, it } from 'vitest';
import { ModelFileError } from '../../../common/errors.ts';
import { gemma4ConfigFromGguf, gemma4ConfigFromHf, gemma4Layers } from './gemma4.ts';
import { gemma4Hyperparameters } from '../../model/arch/gemma4.ts';
import { kvOwner, kvRowShapes, ownsKv, ropeFrequencies, type AttentionSpec } from './layer-spec.ts';
import { ropeInvFreq } from '../../onnx/ops.ts';
import { kvBytesPerToken } from '../../model/memory-estimate.ts';
import { parseHfConfig } from '../../model/hf/config.ts';
import type { ModelHyperparameters } from '../../model/types.ts';

const L = 10;
const pattern = Array.from({ length: L }, (_, l) => l % 5 !== 4); // global: 4, 9
const ropeFreqs = Float32Array.from({ length: 16 }, (_, i) => (i < 4 ? 1 : 1e30)); // global head 32: a quarter rotated

function meta(extra: Record<string, unknown> = {}): Map<string, unknown> {
  return new Map<string, unknown>(
    Object.entries({
      'gemma4.block_count': L,
      'gemma4.embedding_length': 64,
      'gemma4.attention.sliding_window_pattern': pattern,
      'gemma4.attention.sliding_window': 8,
      'gemma4.attention.head_count': 4,
      'gemma4.attention.head_count_kv': Uint32Array.from(pattern, (w) => (w ? 2 : 1)),
      'gemma4.attention.key_length': 32,
      'gemma4.attention.value_length': 32,
      'gemma4.attention.key_length_swa': 16,
      'gemma4.attention.value_length_swa': 16,
      'gemma4.rope.dimension_count': 32,
      'gemma4.rope.dimension_count_swa': 16,
      'gemma4.rope.freq_base': 1_000_000,
      'gemma4.rope.freq_base_swa': 10_000,
      'gemma4.attention.shared_kv_layers': 5,
      'gemma4.feed_forward_length': Uint32Array.from({ length: L }, (_, l) => (l < 5 ? 96 : 192)),
      'gemma4.final_logit_softcapping': 30,
      'gemma4.attention.layer_norm_rms_epsilon': 1e-6,
      'gemma4.embedding_length_per_layer_input': 8,
      ...extra,
    }),
  );
}

describe('gemma4 layers', () => {
  it('window and global layers get their own head dim, KV heads, RoPE base and dims; shared layers read layers 3 and 4', () => {
    const specs = gemma4Layers(gemma4ConfigFromGguf('tiny.gguf', meta(), ropeFreqs));
    const a = specs.map((s) => s.attention as AttentionSpec);
    expect(a.map((x) => x.headDim)).toEqual([16, 16, 16, 16, 32, 16, 16, 16, 16, 32]);
    expect(a.map((x) => x.kvHeads)).toEqual([2, 2, 2, 2, 1, 2, 2, 2, 2, 1]);
    expect(a.map((x) => x.window)).toEqual([8, 8, 8, 8, undefined, 8, 8, 8, 8, undefined]);
    expect(a.map((x) => x.rope!.base)).toEqual([1e4, 1e4, 1e4, 1e4, 1e6, 1e4, 1e4, 1e4, 1e4, 1e6]);
    expect(a.map((x) => x.kvSource)).toEqual([undefined, undefined, undefined, undefined, undefined, 3, 3, 3, 3, 4]);
    expect(a.every((x) => x.scale === 1 && x.qkNorm && x.softcap === 0)).toBe(true);
    expect(specs.map((s) => s.ffn.kind === 'dense' && s.ffn.size)).toEqual([96, 96, 96, 96, 96, 192, 192, 192, 192, 192]);
    expect(specs.map(ownsKv)).toEqual([true, true, true, true, true, false, false, false, false, false]);
    expect(specs.map((_, l) => kvOwner(specs, l))).toEqual([0, 1, 2, 3, 4, 3, 3, 3, 3, 4]);
    expect(kvRowShapes(specs).slice(3, 6)).toEqual([{ kvHeads: 2, headDim: 16 }, { kvHeads: 1, headDim: 32 }, undefined]);
  });

  it('the global layers rotate a quarter of the head at θ^(−2i/headDim) and leave the other pairs still (proportional RoPE)', () => {
    const global = gemma4Layers(gemma4ConfigFromGguf('tiny.gguf', meta(), ropeFreqs))[4]!.attention as AttentionSpec;
    const inv = ropeInvFreq(ropeFrequencies(global)!);
    expect(inv.length).toBe(16); // pairs (i, i + 16) over the whole 32-dim head
    for (let i = 0; i < 4; i++) expect(inv[i]).toBeCloseTo(1 / 1e6 ** ((2 * i) / 32), 15);
    for (let i = 4; i < 16; i++) expect(inv[i]! * 1e5).toBeLessThan(1e-20); // 100K positions turn it < 1e-20 rad
  });

  it('a Hugging Face config gives the same layers as the GGUF the converter writes from it', () => {
    const hf = {
      architectures: ['Gemma4ForConditionalGeneration'],
      text_config: {
        num_hidden_layers: L,
        hidden_size: 64,
        layer_types: pattern.map((w) => (w ? 'sliding_attention' : 'full_attention')),
        sliding_window: 8,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        num_global_key_value_heads: 1,
        head_dim: 16,
        global_head_dim: 32,
        rope_parameters: { full_attention: { rope_type: 'proportional', rope_theta: 1_000_000, partial_rotary_factor: 0.25 }, sliding_attention: { rope_type: 'default', rope_theta: 10_000 } },
        num_kv_shared_layers: 5,
        intermediate_size: 96,
        use_double_wide_mlp: true,
        final_logit_softcapping: 30,
        rms_norm_eps: 1e-6,
        hidden_size_per_layer_input: 8,
      },
    };
    const fromHf = gemma4ConfigFromHf('config.json', hf);
    const fromGguf = gemma4ConfigFromGguf('tiny.gguf', meta(), ropeFreqs);
    expect(gemma4Layers(fromHf)).toEqual(gemma4Layers(fromGguf));
    expect({ ...fromHf, ropeFreqFactors: undefined }).toEqual({ ...fromGguf, ropeFreqFactors: undefined });
    expect(fromHf.ropeFreqFactors).toEqual(Array.from(ropeFreqs)); // the float32 values the converter writes

    // config.json as the loader reads it: the text_config of Gemma4ForConditionalGeneration, with
    // per-layer embeddings (E2B/E4B) or without (31B-like)
    const text = { ...hf.text_config, max_position_embeddings: 4096, vocab_size: 262144 };
    expect(parseHfConfig(JSON.stringify({ ...hf, text_config: text })).gemma4!.perLayerInput).toBe(8);
    const hyper = parseHfConfig(JSON.stringify({ ...hf, text_config: { ...text, hidden_size_per_layer_input: 0 } }));
    expect(hyper).toMatchObject({ architecture: 'gemma4', layers: L, heads: 4, kvHeads: 2, headDim: 32, contextLength: 4096, vocabSize: 262144, tiedEmbeddings: true });
    expect(gemma4Layers(hyper.gemma4!)).toEqual(gemma4Layers({ ...fromGguf, perLayerInput: 0 }));
  });

  it('refuses a mixture-of-experts Gemma 4 by name, and a shared block that would read a layer of the other kind', () => {
    expect(() => gemma4ConfigFromGguf('moe.gguf', meta({ 'gemma4.expert_count': 128 }), ropeFreqs)).toThrow(/mixture-of-experts.*26B-A4B.*E2B, E4B, 31B/);
    const wrong = pattern.map((_, l) => l % 5 !== 3); // layer 4 (first − 1) is a window layer now
    expect(() => gemma4ConfigFromGguf('odd.gguf', meta({ 'gemma4.attention.sliding_window_pattern': wrong }), ropeFreqs)).toThrow(ModelFileError);
    expect(() => gemma4ConfigFromGguf('short.gguf', meta(), ropeFreqs.subarray(0, 8))).toThrow(/rope_freqs.weight has 8 values for 16/);
    expect(() => gemma4ConfigFromHf('config.json', { num_experts: 128 })).toThrow(/mixture-of-experts/);
  });

  it('the loader settles attn_v and layer_output_scale from the tensors, and refuses what it does not run by name', () => {
    const owners = Array.from({ length: L }, (_, l) => l < 5); // layers 5..9 read layers 3 and 4
    // every owning layer has attn_v but the global layer 4 (v = k); layer_output_scale everywhere
    const has = (t: string): boolean => t !== 'blk.4.attn_v.weight' && t !== 'output.weight';
    const hyper = gemma4Hyperparameters('31b-like.gguf', meta({ 'gemma4.embedding_length_per_layer_input': 0 }), ropeFreqs, has, { contextLength: 4096, vocabSize: 100 });
    expect(hyper.gemma4!.valueProjection).toEqual(owners.map((own, l) => own && l !== 4));
    expect(hyper.gemma4!.outputScale).toBe(true);
    expect(hyper).toMatchObject({ architecture: 'gemma4', heads: 4, kvHeads: 2, headDim: 32, ffnSize: 192, tiedEmbeddings: true });
    // per-layer embeddings (E2B/E4B) are read from GGUF; a layer_output_scale on some layers only and query heads that differ are refused
    expect(gemma4Hyperparameters('e2b.gguf', meta(), ropeFreqs, () => true, { contextLength: 4096, vocabSize: 100 }).gemma4!.perLayerInput).toBe(8);
    const someScales = (t: string): boolean => !t.startsWith('blk.7.layer_output_scale');
    expect(() => gemma4Hyperparameters('odd.gguf', meta({ 'gemma4.embedding_length_per_layer_input': 0 }), ropeFreqs, someScales, { contextLength: 4096, vocabSize: 100 })).toThrow(/layer_output_scale.weight is in some layers only/);
    const heads = Uint32Array.from({ length: L }, (_, l) => (l === 0 ? 8 : 4));
    expect(() => gemma4Hyperparameters('heads.gguf', meta({ 'gemma4.embedding_length_per_layer_input': 0, 'gemma4.attention.head_count': heads }), ropeFreqs, () => true, { contextLength: 4096, vocabSize: 100 })).toThrow(/head_count differs between layers/);
  });

  it('the memory figure per token counts the layers with rows of their own only, each at its own shape', () => {
    const specs = gemma4Layers(gemma4ConfigFromGguf('tiny.gguf', meta(), ropeFreqs));
    const hyper = { layers: L, kvHeads: 2, headDim: 16 } as ModelHyperparameters; // not read: the specs say
    // fp16: 4 window layers × 2 heads × 2·16·2 bytes + 1 global layer × 1 head × 2·32·2; the 5 shared layers: 0
    expect(kvBytesPerToken(hyper, 'fp16', specs)).toBe(4 * 2 * 64 + 1 * 128);
  });
});
