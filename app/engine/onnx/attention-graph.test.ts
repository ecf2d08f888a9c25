// The offload attention graph's per-layer arguments (scale, soft-cap, sinks): run on the CPU provider
// against a plain attention in JS; left out, the graph is today's, byte for byte.
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';

import { mulberry32 } from '../../../test/fixtures/rng.ts';
import { buildAttentionGraph, type AttentionGraphShape } from './attention-graph.ts';
import { OnnxError } from './errors.ts';
import { sessionOptions } from './session.ts';

/** Seeded values uniform on [−2, 2). */
function values(n: number, seed: number): Float32Array {
  const u = mulberry32(seed);
  return Float32Array.from({ length: n }, () => (u() - 0.5) * 4);
}

// softmax(q·k·scale (capped), sinks in the normaliser)·v over buffer rows idx[g] of each KV head
function plain(shape: AttentionGraphShape, q: Float32Array, k: Float32Array, v: Float32Array, idx: Int32Array, n: number): Float64Array {
  const { heads, kvHeads, headDim: d } = shape;
  const group = heads / kvHeads;
  const scale = shape.scale ?? 1 / Math.sqrt(d);
  const out = new Float64Array(heads * d);
  for (let h = 0; h < heads; h++) {
    const g = Math.floor(h / group);
    const s: number[] = [];
    for (let t = 0; t < n; t++) {
      const r = idx[g * n + t]!;
      let dot = 0;
      for (let i = 0; i < d; i++) dot += q[h * d + i]! * k[r * d + i]!;
      let x = dot * scale;
      if (shape.softcap) x = shape.softcap * Math.tanh(x / shape.softcap);
      s.push(x);
    }
    const m = Math.max(...s, shape.sinks ? shape.sinks[h]! : -Infinity);
    let z = shape.sinks ? Math.exp(shape.sinks[h]! - m) : 0;
    for (const x of s) z += Math.exp(x - m);
    for (let t = 0; t < n; t++) {
      const r = idx[g * n + t]!;
      for (let i = 0; i < d; i++) out[h * d + i] = out[h * d + i]! + (Math.exp(s[t]! - m) / z) * v[r * d + i]!;
    }
  }
  return out;
}

describe('attention graph arguments', () => {
  const base: AttentionGraphShape = { heads: 8, kvHeads: 2, headDim: 16, rowType: 'float32' };

  it('left out (or undefined), the graph is the one built before the arguments existed', () => {
    const today = buildAttentionGraph(base);
    expect(Buffer.from(buildAttentionGraph({ ...base, scale: undefined, softcap: 0, sinks: undefined })).equals(Buffer.from(today))).toBe(true);
    expect(Buffer.from(buildAttentionGraph(base, 'prefix')).equals(Buffer.from(buildAttentionGraph({ ...base, softcap: 0 }, 'prefix')))).toBe(true);
  });

  for (const [label, extra] of [
    ['default', {}],
    ['scale', { scale: 0.4 }],
    ['softcap', { scale: 0.6, softcap: 1.5 }],
    ['sinks', { sinks: values(8, 5) }],
    ['all three', { scale: 0.3, softcap: 2, sinks: values(8, 6) }],
  ] as [string, Partial<AttentionGraphShape>][]) {
    it(`${label}: gather and prefix variants == plain attention`, async () => {
      const shape = { ...base, ...extra };
      const { heads, kvHeads, headDim: d } = shape;
      const R = 24;
      const n = 7;
      const q = values(heads * d, 1);
      const k = values(R * d, 2);
      const v = values(R * d, 3);
      const idx = Int32Array.from({ length: kvHeads * n }, (_, i) => (i * 5 + 3) % R);
      const gather = await ort.InferenceSession.create(buildAttentionGraph(shape, 'gather'), sessionOptions());
      const got = await gather.run({
        q: new ort.Tensor('float32', q, [1, 1, heads * d]),
        k_rows: new ort.Tensor('float32', k, [R, d]),
        v_rows: new ort.Tensor('float32', v, [R, d]),
        idx: new ort.Tensor('int32', idx, [kvHeads, n]),
      });
      const want = plain(shape, q, k, v, idx, n);
      const attn = got.attn!.data as Float32Array;
      for (let i = 0; i < want.length; i++) expect(Math.abs(attn[i]! - want[i]!)).toBeLessThan(1e-5);
      // prefix: each KV head's buffer rows 0..n−1 of its R / kvHeads
      const prefix = await ort.InferenceSession.create(buildAttentionGraph(shape, 'prefix'), sessionOptions());
      const pr = await prefix.run({
        q: new ort.Tensor('float32', q, [1, 1, heads * d]),
        k_rows: new ort.Tensor('float32', k, [R, d]),
        v_rows: new ort.Tensor('float32', v, [R, d]),
        n: new ort.Tensor('int64', BigInt64Array.of(BigInt(n)), [1]),
      });
      const per = R / kvHeads;
      const pidx = Int32Array.from({ length: kvHeads * n }, (_, i) => Math.floor(i / n) * per + (i % n));
      const pwant = plain(shape, q, k, v, pidx, n);
      const pattn = pr.attn!.data as Float32Array;
      for (let i = 0; i < pwant.length; i++) expect(Math.abs(pattn[i]! - pwant[i]!)).toBeLessThan(1e-5);
      await gather.release();
      await prefix.release();
    });
  }

  it('ragged: each KV head attends only its first lengths[g] entries (the padding weighs nothing), with and without the arguments', async () => {
    for (const extra of [{}, { scale: 0.3, softcap: 2, sinks: values(8, 6) }] as Partial<AttentionGraphShape>[]) {
      const shape = { ...base, ...extra };
      const { heads, kvHeads, headDim: d } = shape;
      const R = 24;
      const n = 7;
      const lengths = [3, 7];
      const q = values(heads * d, 11);
      const k = values(R * d, 12);
      const v = values(R * d, 13);
      // padding entries point at rows with large keys: any weight they kept would show
      const idx = Int32Array.from({ length: kvHeads * n }, (_, i) => (i % n < lengths[Math.floor(i / n)]! ? (i * 5 + 3) % R : 0));
      k.fill(9, 0, d);
      const session = await ort.InferenceSession.create(buildAttentionGraph(shape, 'ragged'), sessionOptions());
      const got = await session.run({
        q: new ort.Tensor('float32', q, [1, 1, heads * d]),
        k_rows: new ort.Tensor('float32', k, [R, d]),
        v_rows: new ort.Tensor('float32', v, [R, d]),
        idx: new ort.Tensor('int32', idx, [kvHeads, n]),
        lengths: new ort.Tensor('int32', Int32Array.from(lengths), [kvHeads, 1, 1]),
      });
      const attn = got.attn!.data as Float32Array;
      const group = heads / kvHeads;
      for (let g = 0; g < kvHeads; g++) {
        // one KV head at a time, its own entries only
        const one = { ...shape, heads: group, kvHeads: 1, ...(shape.sinks ? { sinks: shape.sinks.slice(g * group, (g + 1) * group) } : {}) };
        const want = plain(one, q.subarray(g * group * d, (g + 1) * group * d), k, v, idx.slice(g * n, g * n + lengths[g]!), lengths[g]!);
        for (let i = 0; i < want.length; i++) expect(Math.abs(attn[g * group * d + i]! - want[i]!), `head group ${g}`).toBeLessThan(1e-5);
      }
      await session.release();
    }
  });

  it('refuses a bad scale, softcap or sinks', () => {
    for (const extra of [{ scale: 0 }, { scale: Number.NaN }, { softcap: -1 }, { softcap: Number.POSITIVE_INFINITY }, { sinks: new Float32Array(7) }, { sinks: new Float32Array(8).fill(Number.NaN) }]) {
      expect(() => buildAttentionGraph({ ...base, ...extra })).toThrow(OnnxError);
    }
  });
});
