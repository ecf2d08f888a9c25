// The questions shared code asks of a model's layer specs, on hand-made lists: a layer without KV
// in the middle (a hybrid model's linear-attention layer), layers that differ (Gemma 3's local and
// global layers), and the RoPE frequencies a layer's spec stands for.
import { describe, expect, it } from 'vitest';
import { ropeInvFreq } from '../../onnx/ops.ts';
import {
  ATTENTION_FIELDS,
  defaultScale,
  hasKv,
  isDefaultScale,
  checkLayerSpecs,
  kvLayers,
  kvOwner,
  kvRowShapes,
  nextKvLayer,
  ownsKv,
  ropeFrequencies,
  uniformAttention,
  type AttentionSpec,
  type LayerSpec,
} from './layer-spec.ts';

const attention: AttentionSpec = {
  kind: 'attention',
  heads: 8,
  kvHeads: 2,
  headDim: 64,
  scale: defaultScale(64),
  window: undefined,
  sinks: false,
  rope: { base: 10000, dims: 64, layout: 'neox', scaling: undefined },
  qkNorm: false,
  softcap: 0,
};
const global: LayerSpec = { attention, ffn: { kind: 'dense', size: 256, gated: true, activation: 'silu' }, norm: { kind: 'rms', placement: 'pre', eps: 1e-6 } };
const noKv: LayerSpec = { ...global, attention: { kind: 'none' } };
const local: LayerSpec = { ...global, attention: { ...attention, window: 512, rope: { ...attention.rope!, base: 10000 } } };
const moe: LayerSpec = { ...global, ffn: { kind: 'moe', experts: 8, topK: 2, expertSize: 128, gated: true, activation: 'silu', sharedExperts: 0 } };

describe('layer specs', () => {
  it('kvLayers and nextKvLayer skip a layer without KV: the speculation from layer 0 prepares layer 2', () => {
    const specs = [global, noKv, global, noKv, noKv];
    expect(specs.map(hasKv)).toEqual([true, false, true, false, false]);
    expect(kvLayers(specs)).toEqual([0, 2]);
    expect(nextKvLayer(specs, 0)).toBe(2);
    expect(nextKvLayer(specs, 1)).toBe(2);
    expect(nextKvLayer(specs, 2)).toBeUndefined(); // no layer with KV after it
    expect(nextKvLayer(specs, -1)).toBe(0);
    expect(nextKvLayer([global, global, global], 1)).toBe(2);
    expect(kvLayers([])).toEqual([]);
  });

  it('uniformAttention gives the shared attention, or says which layer differs and how', () => {
    expect(uniformAttention([global, global, moe]).shape).toBe(attention); // the feed-forward is not attention
    // a copy with the same values is the same shape (RoPE compared by value; scaling undefined == absent)
    const { scaling: _scaling, ...ropeWithoutScaling } = attention.rope!;
    expect(uniformAttention([global, { ...global, attention: { ...attention, rope: ropeWithoutScaling as AttentionSpec['rope'] } }]).shape).toBe(attention);

    expect(uniformAttention([global, local, global])).toEqual({ reason: 'layer 1 has window 512, layer 0 none' });
    expect(uniformAttention([local, global])).toEqual({ reason: 'layer 1 has window none, layer 0 512' });
    expect(uniformAttention([global, global, noKv]).reason).toBe('layer 2 has no attention (no KV rows), layer 0 has');
    expect(uniformAttention([noKv, global]).reason).toBe('layer 0 has no attention (no KV rows)');
    expect(uniformAttention([]).reason).toBe('the model has no layers');
    const otherBase: LayerSpec = { ...global, attention: { ...attention, rope: { ...attention.rope!, base: 1e6 } } };
    expect(uniformAttention([global, otherBase]).reason).toBe('layer 1 has rope {"base":1000000,"dims":64,"layout":"neox"}, layer 0 {"base":10000,"dims":64,"layout":"neox"}');
    const sinks: LayerSpec = { ...global, attention: { ...attention, sinks: true, softcap: 30 } };
    expect(uniformAttention([global, sinks]).reason).toBe('layer 1 has sinks true, layer 0 false');
  });

  it('uniformAttention on some fields only: what the pool needs (KV heads, head dim) may agree where the rest does not', () => {
    expect(uniformAttention([global, local], ['kvHeads', 'headDim']).shape).toBe(attention);
    expect(uniformAttention([global, { ...global, attention: { ...attention, kvHeads: 4 } }], ['kvHeads', 'headDim']).reason).toBe('layer 1 has kvHeads 4, layer 0 2');
    expect(ATTENTION_FIELDS).toHaveLength(Object.keys(attention).length - 1 + 1); // every field but kind, and the optional kvSource
  });

  it('the default scale is 1/√headDim', () => {
    expect(defaultScale(64)).toBe(0.125);
    expect(isDefaultScale(attention)).toBe(true);
    expect(isDefaultScale({ ...attention, scale: 1 / 16 })).toBe(false);
  });

  it('ropeFrequencies: what ropeRows takes; partial rotary and scaling carried, no RoPE is undefined', () => {
    expect(ropeFrequencies(attention)).toEqual({ headDim: 64, theta: 10000, layout: 'neox' });
    expect(Object.keys(ropeFrequencies(attention)!)).toEqual(['headDim', 'theta', 'layout']);
    const scaling = { kind: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 } as const;
    expect(ropeFrequencies({ ...attention, rope: { base: 5e5, dims: 32, layout: 'interleaved', scaling } })).toEqual({ headDim: 64, theta: 5e5, layout: 'interleaved', rotaryDim: 32, scaling });
    expect(ropeFrequencies({ ...attention, rope: undefined })).toBeUndefined();
  });

  it('a KV-shared layer keeps no pool rows and attends its source: kvOwner, ownsKv, kvRowShapes', () => {
    const big: LayerSpec = { ...global, attention: { ...attention, kvHeads: 1, headDim: 128, rope: { ...attention.rope!, dims: 128 } } };
    const shared: LayerSpec = { ...global, attention: { ...attention, kvSource: 0 } };
    const specs = [global, big, noKv, shared];
    expect(specs.map(ownsKv)).toEqual([true, true, false, false]);
    expect(specs.map(hasKv)).toEqual([true, true, false, true]); // the shared layer still attends
    expect(specs.map((_, l) => kvOwner(specs, l))).toEqual([0, 1, undefined, 0]);
    expect(kvRowShapes(specs)).toEqual([{ kvHeads: 2, headDim: 64 }, { kvHeads: 1, headDim: 128 }, undefined, undefined]);
    expect(() => checkLayerSpecs(specs)).not.toThrow();
  });

  it('checkLayerSpecs names a shared layer whose source is later, has no rows of its own, or another shape', () => {
    const to = (src: number, over: Partial<AttentionSpec> = {}): LayerSpec => ({ ...global, attention: { ...attention, ...over, kvSource: src } });
    expect(() => checkLayerSpecs([global, to(1)])).toThrow('layer 1: kvSource 1 is not an earlier layer');
    expect(() => checkLayerSpecs([global, to(0), to(1)])).toThrow('layer 2: kvSource 1 keeps no rows of its own');
    expect(() => checkLayerSpecs([global, to(0, { headDim: 32 })])).toThrow('layer 1: headDim 32, its kvSource 0 has 64');
    expect(() => checkLayerSpecs([global, to(0, { window: 16 })])).toThrow('layer 1: window 16, its kvSource 0 has none');
    expect(() => checkLayerSpecs([{ ...global, attention: { ...attention, heads: 3 } }])).toThrow('layer 0: 3 query heads cannot be grouped over 2 KV heads');
  });

  it('ropeFrequencies carries per-pair frequency factors (Gemma 4 global layers), and ropeInvFreq divides by them', () => {
    const freqFactors = Array.from({ length: 32 }, (_, i) => (i < 8 ? 1 : 1e30));
    const rope = ropeFrequencies({ ...attention, rope: { ...attention.rope!, freqFactors } })!;
    expect(rope).toEqual({ headDim: 64, theta: 10000, layout: 'neox', freqFactors });
    const inv = ropeInvFreq(rope);
    const plain = ropeInvFreq({ headDim: 64, theta: 10000 });
    for (let i = 0; i < 32; i++) expect(inv[i]).toBe(i < 8 ? plain[i] : plain[i]! / 1e30);
    expect(() => ropeInvFreq({ headDim: 64, theta: 10000, freqFactors: [1, 2] })).toThrow('2 RoPE frequency factors for 32 pairs');
  });
});
