// A layer's attention arguments (attention-args.ts) and the in-place placement that passes them:
// defaults pass nothing (today's bits), a window, a scale and a soft-cap reach the native kernels
// (the prompt's causal attention equals the scalar reference with the same arguments, and differs
// from the plain one), per layer.
import { afterAll, describe, expect, it } from 'vitest';
import { attendCausal, attendCausalReference, createKvPool } from '../../../../native/index.js';
import { Gaussian } from '../../kv/test-helpers.ts';
import { globalAttention, type LayerSpec } from '../layers/layer-spec.ts';
import { attentionArgs, layerAttentionArgs } from './attention-args.ts';
import { InPlaceAttention } from './in-place.ts';

const shape = { heads: 4, kvHeads: 2, headDim: 8 };
const layer = (over: Partial<LayerSpec['attention'] & { kind: 'attention' }> = {}): LayerSpec => ({
  attention: { ...globalAttention(shape, undefined), ...over },
  ffn: { kind: 'dense', size: 16, gated: true, activation: 'silu' },
  norm: { kind: 'rms', placement: 'pre', eps: 1e-5 },
});

describe('attentionArgs', () => {
  it('nothing for the defaults; the scale, window and soft-cap a layer sets', () => {
    expect(attentionArgs(layer())).toBeUndefined();
    expect(attentionArgs(layer({ window: 512 }))).toEqual({ window: 512 });
    expect(attentionArgs(layer({ scale: 1 / 16 }))).toEqual({ scale: 1 / 16 });
    expect(attentionArgs(layer({ softcap: 50, window: 4 }))).toEqual({ window: 4, softcap: 50 });
    expect(attentionArgs({ ...layer(), attention: { kind: 'none' } as LayerSpec['attention'] })).toBeUndefined();
    expect(layerAttentionArgs([layer(), layer({ window: 3 })])).toEqual([undefined, { window: 3 }]);
  });
});

describe('InPlaceAttention with per-layer arguments', () => {
  const { heads, kvHeads, headDim: d } = shape;
  const pool = createKvPool({ budgetBytes: 1 << 20, layers: 2, kvHeads, headDim: d, kvType: 'fp32' });
  afterAll(() => pool.free());
  const g = new Gaussian(7);
  const T = 9;
  for (let l = 0; l < 2; l++) pool.appendBatch(l, Float32Array.from(g.fill(T * kvHeads * d)), Float32Array.from(g.fill(T * kvHeads * d)), 0);
  const q = Float32Array.from(g.fill(T * heads * d, 2)); // [T, heads·d]

  it("a layer's window, scale and soft-cap reach attendCausal; a layer without them runs the plain kernel", () => {
    const specs = [layer(), layer({ window: 3, scale: 0.2, softcap: 5 })];
    const placement = new InPlaceAttention(pool, heads, 1, layerAttentionArgs(specs));
    const got = new Float32Array(T * heads * d);
    const want = new Float32Array(T * heads * d);
    placement.attendPrompt(1, q, T, got);
    attendCausalReference(pool, 1, q, heads, want, { window: 3, scale: 0.2, softcap: 5 });
    for (let i = 0; i < got.length; i++) expect(got[i]).toBeCloseTo(want[i]!, 5);
    const plain = new Float32Array(T * heads * d);
    attendCausal(pool, 1, q, heads, plain, 1);
    expect(Math.max(...plain.map((x, i) => Math.abs(x - got[i]!)))).toBeGreaterThan(1e-3);
    // layer 0 keeps the defaults: bit for bit the plain call
    placement.attendPrompt(0, q, T, got);
    attendCausal(pool, 0, q, heads, plain, 1);
    expect(got).toEqual(plain);
  });
});
