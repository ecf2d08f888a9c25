// The dense ops as ONNX graphs against reference-ops.ts, and the pre-attention part of one Llama
// layer (RMSNorm -> q/k/v -> RoPE) as the engine will build it.

import { describe, expect, it } from 'vitest';

import type { RopeLayout } from '../model/types.ts';
import { fromFloat16Array, toFloat16Array } from './float16.ts';
import { GraphBuilder } from './graph-builder.ts';
import { dequantizeNBits, quantizeNBits } from './matmul-nbits.ts';
import { addRopeCaches, addRopeInputs, layerNorm, linear, reluMlp, rmsNorm, ROPE_INPUTS, rope, ropeInvFreq, ropeRows, ropeTables, skipRmsNorm, swigluMlp, type LinearF32 } from './ops.ts';
import * as ref from './reference-ops.ts';
import { createSession } from './session.ts';
import { maxAbsDiff, randomArray } from './test-helpers.ts';

const TOL = 1e-5;

function f32Linear(outF: number, inF: number, seed: number, withBias = false): LinearF32 {
  const w: LinearF32 = { kind: 'f32', outFeatures: outF, inFeatures: inF, weight: randomArray(outF * inF, seed, 1 / Math.sqrt(inF)) };
  if (withBias) w.bias = randomArray(outF, seed + 1000, 0.1);
  return w;
}

async function runGraph(g: GraphBuilder, feeds: Parameters<Awaited<ReturnType<typeof createSession>>['run']>[0]): Promise<Record<string, Float32Array>> {
  const session = await createSession(g.toModel(), { intraOpThreads: 1, label: g.name });
  const out = await session.run(feeds);
  await session.release();
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, v.data as Float32Array]));
}

describe('pre-attention of one Llama layer', () => {
  // GQA: 4 query heads, 2 KV heads, head 16, hidden 64; 5 tokens at positions 3..7
  const hidden = 64;
  const heads = 4;
  const kvHeads = 2;
  const headDim = 16;
  const seq = 5;
  const positions = [3, 4, 5, 6, 7];
  const eps = 1e-5;
  const theta = 10000;
  const x = randomArray(seq * hidden, 11, 2);
  const normW = randomArray(hidden, 12, 1).map((v) => 1 + 0.5 * v);
  const wq = f32Linear(heads * headDim, hidden, 13);
  const wk = f32Linear(kvHeads * headDim, hidden, 14);
  const wv = f32Linear(kvHeads * headDim, hidden, 15);

  for (const layout of ['interleaved', 'neox'] as RopeLayout[]) {
    it(`q, k, v match the TypeScript reference within ${TOL} (${layout} RoPE)`, async () => {
      const g = new GraphBuilder(`blk0.pre.${layout}`);
      const h = g.input('h', 'float32', ['batch', 'seq', hidden]);
      const pos = g.input('position_ids', 'int64', ['batch', 'seq']);
      const xn = rmsNorm(g, h, normW, eps, 'blk.0.attn_norm');
      const caches = addRopeCaches(g, { headDim, theta, layout, maxPositions: 64 });
      const q = rope(g, linear(g, xn, wq, 'blk.0.attn_q'), pos, caches, heads, 'blk.0.rope_q');
      const k = rope(g, linear(g, xn, wk, 'blk.0.attn_k'), pos, caches, kvHeads, 'blk.0.rope_k');
      const v = linear(g, xn, wv, 'blk.0.attn_v');
      g.output(g.rename(q, 'q'), 'float32', ['batch', 'seq', heads * headDim]);
      g.output(g.rename(k, 'k'), 'float32', ['batch', 'seq', kvHeads * headDim]);
      g.output(g.rename(v, 'v'), 'float32', ['batch', 'seq', kvHeads * headDim]);

      const out = await runGraph(g, {
        h: { elemType: 'float32', dims: [1, seq, hidden], data: x },
        position_ids: { elemType: 'int64', dims: [1, seq], data: BigInt64Array.from(positions.map(BigInt)) },
      });

      const xr = ref.rmsnorm(x, normW, eps);
      const qr = ref.rope(ref.linear(xr, wq.weight, heads * headDim, hidden), positions, heads, headDim, theta, layout);
      const kr = ref.rope(ref.linear(xr, wk.weight, kvHeads * headDim, hidden), positions, kvHeads, headDim, theta, layout);
      const vr = ref.linear(xr, wv.weight, kvHeads * headDim, hidden);
      expect(maxAbsDiff(out.q!, qr).maxAbs).toBeLessThan(TOL);
      expect(maxAbsDiff(out.k!, kr).maxAbs).toBeLessThan(TOL);
      expect(maxAbsDiff(out.v!, vr).maxAbs).toBeLessThan(TOL);
    });
  }

  it('the same graph in float16 stays within float16 rounding of the reference (|Δ| < 2e-2)', async () => {
    const layout: RopeLayout = 'neox';
    const g = new GraphBuilder('blk0.pre.fp16', { floatType: 'float16' });
    const h = g.input('h', 'float16', [1, 'seq', hidden]);
    const pos = g.input('position_ids', 'int64', [1, 'seq']);
    const xn = rmsNorm(g, h, normW, eps, 'attn_norm');
    const caches = addRopeCaches(g, { headDim, theta, layout, maxPositions: 64 });
    g.output(rope(g, linear(g, xn, wq, 'attn_q'), pos, caches, heads, 'q'), 'float16');
    g.output(rope(g, linear(g, xn, { kind: 'nbits', packed: quantizeNBits(wk.weight, kvHeads * headDim, hidden, 4) }, 'attn_k'), pos, caches, kvHeads, 'k'), 'float16');
    const session = await createSession(g.toModel(), { intraOpThreads: 1 });
    const out = await session.run({
      h: { elemType: 'float16', dims: [1, seq, hidden], data: toFloat16Array(x) },
      position_ids: { elemType: 'int64', dims: [1, seq], data: BigInt64Array.from(positions.map(BigInt)) },
    });
    await session.release();
    expect(out.q!.elemType).toBe('float16');
    const xr = ref.rmsnorm(x, normW, eps);
    const qr = ref.rope(ref.linear(xr, wq.weight, heads * headDim, hidden), positions, heads, headDim, theta, layout);
    const kq = dequantizeNBits(quantizeNBits(wk.weight, kvHeads * headDim, hidden, 4));
    const kr = ref.rope(ref.linear(xr, kq, kvHeads * headDim, hidden), positions, kvHeads, headDim, theta, layout);
    // fp16 keeps 11 significant bits: ~5e-4 relative per rounding, over a 64-term dot product of
    // values up to ~4 in magnitude (4-bit k also quantises its activations: accuracy_level 4).
    // Measured: q 1.0e-3, k 8.1e-3 (fp32 graph: 6e-7) on outputs up to 1.6.
    expect(maxAbsDiff(fromFloat16Array(out.q!.data as Uint16Array), qr).maxAbs).toBeLessThan(2e-2);
    expect(maxAbsDiff(fromFloat16Array(out.k!.data as Uint16Array), kr).maxAbs).toBeLessThan(2e-2);
  });

  it('the two layouts really differ (the test would catch a swapped attribute)', () => {
    const xr = ref.rmsnorm(x, normW, eps);
    const qlin = ref.linear(xr, wq.weight, heads * headDim, hidden);
    const a = ref.rope(qlin, positions, heads, headDim, theta, 'interleaved');
    const b = ref.rope(qlin, positions, heads, headDim, theta, 'neox');
    expect(maxAbsDiff(a, b).maxAbs).toBeGreaterThan(0.01);
  });

  it('RoPE rows fed per run (ropeRows at p0, ids 0..T−1) give the bits of the whole table as initializers', async () => {
    const scaling = { kind: 'llama3' as const, factor: 8, originalContextLength: 32 };
    const freq = { headDim, theta, layout: 'neox' as const, scaling };
    // the rows themselves: ropeTables' rows p0.. bit for bit, at a position past a float32 integer's exactness
    const table = ropeTables({ ...freq, maxPositions: 64 });
    const rows = ropeRows(freq, 3, 5);
    expect(rows.cos).toEqual(table.cos.subarray(3 * 8, 8 * 8));
    expect(rows.sin).toEqual(table.sin.subarray(3 * 8, 8 * 8));
    const far = ropeRows(freq, 20_000_001, 1);
    expect(far.cos[7]).toBe(Math.fround(Math.cos(20_000_001 * ropeInvFreq(freq)[7]!)));
    const graph = (fed: boolean) => {
      const g = new GraphBuilder(`rope.${fed ? 'inputs' : 'table'}`);
      const h = g.input('h', 'float32', [1, 'seq', hidden]);
      const pos = g.input('position_ids', 'int64', [1, 'seq']);
      const caches = fed ? addRopeInputs(g, freq) : addRopeCaches(g, { ...freq, maxPositions: 64 });
      g.output(rope(g, linear(g, h, wq, 'q'), pos, caches, heads, 'q_rope'), 'float32');
      return g;
    };
    const hT = { elemType: 'float32' as const, dims: [1, seq, hidden], data: x };
    const ids = (from: number) => ({ elemType: 'int64' as const, dims: [1, seq], data: BigInt64Array.from({ length: seq }, (_, i) => BigInt(from + i)) });
    const fromTable = await runGraph(graph(false), { h: hT, position_ids: ids(3) });
    const fed = await runGraph(graph(true), {
      h: hT,
      position_ids: ids(0),
      [ROPE_INPUTS.cos]: { elemType: 'float32', dims: [seq, 8], data: rows.cos },
      [ROPE_INPUTS.sin]: { elemType: 'float32', dims: [seq, 8], data: rows.sin },
    });
    const [a, b] = [Object.values(fromTable)[0]!, Object.values(fed)[0]!];
    expect(b).toEqual(a);
    // and a fed row set of other positions does change the result (the inputs are really read)
    const other = ropeRows(freq, 4, 5);
    const shifted = await runGraph(graph(true), {
      h: hT,
      position_ids: ids(0),
      [ROPE_INPUTS.cos]: { elemType: 'float32', dims: [seq, 8], data: other.cos },
      [ROPE_INPUTS.sin]: { elemType: 'float32', dims: [seq, 8], data: other.sin },
    });
    expect(maxAbsDiff(Object.values(shifted)[0]!, a).maxAbs).toBeGreaterThan(1e-3);
  });
});

describe('dense ops', () => {
  it('LayerNorm with bias, then Linear with bias', async () => {
    const d = 48;
    const rows = 3;
    const x = randomArray(rows * d, 21, 3);
    const w = randomArray(d, 22).map((v) => 1 + v * 0.3);
    const b = randomArray(d, 23, 0.2);
    const lin = f32Linear(20, d, 24, true);
    const g = new GraphBuilder('ln');
    const xin = g.input('x', 'float32', ['rows', d]);
    g.output(linear(g, layerNorm(g, xin, w, b, 1e-5, 'ln'), lin, 'proj'), 'float32', ['rows', 20]);
    const out = await runGraph(g, { x: { elemType: 'float32', dims: [rows, d], data: x } });
    const expected = ref.linear(ref.layernorm(x, w, b, 1e-5), lin.weight, 20, d, lin.bias);
    expect(maxAbsDiff(out.proj!, expected).maxAbs).toBeLessThan(TOL);
  });

  it('residual add + RMSNorm in one op returns the normed value and the new residual', async () => {
    const d = 64;
    const rows = 3;
    const x = randomArray(rows * d, 51, 2);
    const skip = randomArray(rows * d, 52, 2);
    const w = randomArray(d, 53).map((v) => 1 + 0.5 * v);
    const g = new GraphBuilder('skipnorm');
    const xin = g.input('x', 'float32', [1, rows, d]);
    const sin = g.input('skip', 'float32', [1, rows, d]);
    const { normed, sum } = skipRmsNorm(g, xin, sin, w, 1e-6, 'ffn_norm');
    g.output(normed, 'float32');
    g.output(sum, 'float32');
    const out = await runGraph(g, { x: { elemType: 'float32', dims: [1, rows, d], data: x }, skip: { elemType: 'float32', dims: [1, rows, d], data: skip } });
    const s = x.map((v, i) => v + skip[i]!);
    expect(maxAbsDiff(out[sum]!, s).maxAbs).toBeLessThan(TOL);
    expect(maxAbsDiff(out[normed]!, ref.rmsnorm(s, w, 1e-6)).maxAbs).toBeLessThan(TOL);
  });

  it('SwiGLU MLP and ReLU MLP', async () => {
    const d = 32;
    const ff = 80;
    const rows = 2;
    const x = randomArray(rows * d, 31, 2);
    const gate = f32Linear(ff, d, 32);
    const up = f32Linear(ff, d, 33);
    const down = f32Linear(d, ff, 34);
    const fc1 = f32Linear(ff, d, 35, true);
    const fc2 = f32Linear(d, ff, 36, true);
    const g = new GraphBuilder('mlp');
    const xin = g.input('x', 'float32', ['rows', d]);
    g.output(swigluMlp(g, xin, { gate, up, down }, 'swiglu'), 'float32', ['rows', d]);
    g.output(reluMlp(g, xin, { fc1, fc2 }, 'relu_mlp'), 'float32', ['rows', d]);
    const out = await runGraph(g, { x: { elemType: 'float32', dims: [rows, d], data: x } });
    const gr = ref.linear(x, gate.weight, ff, d);
    const ur = ref.linear(x, up.weight, ff, d);
    const hr = gr.map((v, i) => ref.silu(v) * ur[i]!);
    expect(maxAbsDiff(out['swiglu.down']!, ref.linear(hr, down.weight, d, ff)).maxAbs).toBeLessThan(TOL);
    const h1 = ref.linear(x, fc1.weight, ff, d, fc1.bias).map((v) => Math.max(0, v));
    expect(maxAbsDiff(out['relu_mlp.fc2']!, ref.linear(h1, fc2.weight, d, ff, fc2.bias)).maxAbs).toBeLessThan(TOL);
  });

  it('partial rotary (rotaryDim < headDim) leaves the tail of each head alone', async () => {
    const heads = 2;
    const headDim = 16;
    const rotaryDim = 8;
    const x = randomArray(2 * heads * headDim, 41);
    const g = new GraphBuilder('partial');
    const xin = g.input('x', 'float32', [1, 2, heads * headDim]);
    const pos = g.input('pos', 'int64', [1, 2]);
    const caches = addRopeCaches(g, { headDim, rotaryDim, theta: 10000, layout: 'neox', maxPositions: 8 });
    g.output(rope(g, xin, pos, caches, heads, 'r'), 'float32', [1, 2, heads * headDim]);
    const out = await runGraph(g, { x: { elemType: 'float32', dims: [1, 2, heads * headDim], data: x }, pos: { elemType: 'int64', dims: [1, 2], data: new BigInt64Array([1n, 5n]) } });
    // reference: rotate the first rotaryDim dims of each head as a head of size rotaryDim
    const expected = new Float32Array(x);
    for (let r = 0; r < 2; r++) {
      for (let h = 0; h < heads; h++) {
        const off = r * heads * headDim + h * headDim;
        const rot = ref.rope(x.slice(off, off + rotaryDim), [[1, 5][r]!], 1, rotaryDim, 10000, 'neox');
        expected.set(rot, off);
      }
    }
    expect(maxAbsDiff(out.r!, expected).maxAbs).toBeLessThan(TOL);
  });

  it('Llama 3 frequency scaling keeps high frequencies and divides low ones by the factor', () => {
    const base = ropeInvFreq({ headDim: 128, theta: 500000 });
    const scaled = ropeInvFreq({ headDim: 128, theta: 500000, scaling: { kind: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 } });
    expect(scaled[0]).toBe(base[0]);
    expect(scaled[63]).toBeCloseTo(base[63]! / 8, 15);
  });
});
