// The step loop over layers that differ in KV heads, head dim and RoPE, with KV-shared layers
// (Gemma 4's pattern, ARCHITECTURE.md §3): the real StepLoop, LayeredKvPool, in-place placement and
// per-layer plan (the window policy on window layers), with stand-in dense stages — stage s emits
// layer s's q/k/v from its input rows — so that what the loop itself must get right per layer is
// checked exactly: each stage is fed its own layer's RoPE rows, each layer's attention runs over
// the rows it should (its own or its source's, its window, its width), a shared layer appends
// nothing, and decode steps agree with a plain attention written out here.
import { describe, expect, it } from 'vitest';
import { createLayeredKvPool, type KvPool } from '../../../native/index.js';
import type { TensorView } from '../model/types.ts';
import { ropeRows, type RopeFrequencies } from '../onnx/ops.ts';
import type { TensorData } from '../onnx/graph-builder.ts';
import { EmbeddingTable } from './embedding.ts';
import type { StageGraph } from './graphs.ts';
import { kvOwner, ownsKv, ropeFrequencies, type AttentionSpec, type LayerSpec } from './layers/layer-spec.ts';
import type { StageRunner } from './native-stages.ts';
import { layerAttentionArgs } from './placement/attention-args.ts';
import { InPlaceAttention } from './placement/in-place.ts';
import { createComparisonPolicy } from './policy/comparison.ts';
import { FullPolicy } from './policy/full.ts';
import { planLayers } from './policy/plan.ts';
import type { PolicyShape } from './policy/row-policy.ts';
import { StepLoop } from './step.ts';

const HEADS = 4;
const D = 6; // hidden size
const VOCAB = 5;
const WINDOW = 3;
const global = { base: 1e6, dims: 16, layout: 'neox' as const, scaling: undefined, freqFactors: [1, 1, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30] };
const local = { base: 1e4, dims: 8, layout: 'neox' as const, scaling: undefined };
const att = (kvHeads: number, headDim: number, rope: AttentionSpec['rope'], window: number | undefined, kvSource?: number): AttentionSpec => ({
  kind: 'attention',
  heads: HEADS,
  kvHeads,
  headDim,
  scale: 1,
  window,
  sinks: false,
  rope,
  qkNorm: true,
  softcap: 0,
  ...(kvSource !== undefined ? { kvSource } : {}),
});
const layer = (a: AttentionSpec): LayerSpec => ({ attention: a, ffn: { kind: 'dense', size: 8, gated: true, activation: 'gelu_tanh' }, norm: { kind: 'rms', placement: 'sandwich', eps: 1e-6 } });
// window (2 KV heads × 8), global (1 × 16, proportional RoPE), then two layers reading layers 0 and 1
const specs: LayerSpec[] = [layer(att(2, 8, local, WINDOW)), layer(att(1, 16, global, undefined)), layer(att(2, 8, local, WINDOW, 0)), layer(att(1, 16, global, undefined, 1))];
const L = specs.length;
const A = (l: number): AttentionSpec => specs[l]!.attention as AttentionSpec;

/** A deterministic value of (what, layer, position, index) in [−1, 1). */
function val(what: number, l: number, p: number, i: number): number {
  let s = (what * 7919 + l * 104729 + p * 1299709 + i * 15485863) >>> 0 || 1;
  for (let r = 0; r < 3; r++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
  }
  return s / 2 ** 31 - 1;
}

/** Stand-in stage s: records its feeds; outputs layer s's q (and k, v where it owns rows) for the chunk's positions, read from its `pos` feed offset by the chunk start. */
class Stage implements StageRunner {
  feeds: Record<string, TensorData>[] = [];
  p0 = 0;
  constructor(private readonly s: number) {}
  async run(feeds: Readonly<Record<string, TensorData>>): Promise<Record<string, TensorData>> {
    // copies: a decode step's attention output is one buffer the loop reuses layer after layer
    this.feeds.push(Object.fromEntries(Object.entries(feeds).map(([k, t]) => [k, { ...t, data: t.data.slice() } as TensorData])));
    const T = (feeds.h!.dims[1] as number) ?? 1;
    if (this.s === L) return { logits: { elemType: 'float32', dims: [1, 1, VOCAB], data: new Float32Array(VOCAB) } };
    const a = A(this.s);
    const f = (what: number, width: number): TensorData => ({ elemType: 'float32', dims: [1, T, width], data: Float32Array.from({ length: T * width }, (_, j) => val(what, this.s, this.p0 + Math.floor(j / width), j % width)) });
    return {
      q: f(1, HEADS * a.headDim),
      ...(ownsKv(specs[this.s]!) ? { k: f(2, a.kvHeads * a.headDim), v: f(3, a.kvHeads * a.headDim) } : {}),
      h_next: { elemType: 'float32', dims: [1, T, D], data: new Float32Array(T * D) },
    };
  }
  async release(): Promise<void> {}
}

/** Attention of layer l's query at position p over positions 0..p of the rows it reads, written out. */
function reference(l: number, p: number): Float32Array {
  const a = A(l);
  const o = kvOwner(specs, l)!;
  const d = a.headDim;
  const out = new Float32Array(HEADS * d);
  for (let h = 0; h < HEADS; h++) {
    const g = Math.floor(h / (HEADS / a.kvHeads));
    const seen: number[] = [];
    for (let j = 0; j <= p; j++) if (a.window === undefined || p - j < a.window) seen.push(j);
    const scores = seen.map((j) => {
      let dot = 0;
      for (let i = 0; i < d; i++) dot += val(1, l, p, h * d + i) * val(2, o, j, g * d + i);
      return dot * a.scale;
    });
    const max = Math.max(...scores);
    const w = scores.map((s) => Math.exp(s - max));
    const sum = w.reduce((x, y) => x + y, 0);
    seen.forEach((j, n) => {
      for (let i = 0; i < d; i++) out[h * d + i]! += (w[n]! / sum) * val(3, o, j, g * d + i);
    });
  }
  return out;
}

function setup(): { step: StepLoop; pool: KvPool; stages: Stage[] } {
  const pool = createLayeredKvPool({ layerShapes: specs.map((s, l) => (ownsKv(s) ? { kvHeads: A(l).kvHeads, headDim: A(l).headDim } : { kvSource: kvOwner(specs, l)! })), tokens: 32, kvType: 'fp32' });
  const stages = Array.from({ length: L + 1 }, (_, s) => new Stage(s));
  const graphs = stages.map((_, s): StageGraph => ({ name: `stage${s}`, model: new Uint8Array(0), weightBytes: 0, inputs: s === L ? ['h', 'attn', 'rows'] : s === 0 ? ['h', 'pos', 'rope_cos', 'rope_sin'] : ['h', 'attn', 'pos', 'rope_cos', 'rope_sin'] }));
  const table = new Float32Array(VOCAB * D);
  const view = { name: 'token_embd.weight', dtype: 'F32', shape: [VOCAB, D], elements: VOCAB * D, bytes: () => new Uint8Array(table.buffer), toFloat32: () => table } as unknown as TensorView;
  const shape: PolicyShape = { layers: L, heads: HEADS, kvHeads: 2, headDim: 16, perLayer: specs.map((_, l) => ({ kvHeads: A(kvOwner(specs, l)!).kvHeads, headDim: A(l).headDim })), contextLength: 32 };
  const attention = layerAttentionArgs(specs);
  const plan = planLayers(specs, new FullPolicy(0), (window) => createComparisonPolicy('window', { window, denseLayers: 0 }, { shape, pool, attention }));
  const ropes: (RopeFrequencies | undefined)[] = specs.map((s) => ropeFrequencies(s.attention as AttentionSpec));
  const step = new StepLoop(
    {
      pool,
      stages,
      graphs,
      input: { tokens: new EmbeddingTable(view), positions: undefined, positionOffset: 0, scale: 1, ropes },
      layers: L,
      heads: HEADS,
      d: D,
      headDims: specs.map((_, l) => A(l).headDim),
      ownsKv: specs.map(ownsKv),
      tokenRowBytes: specs.map((_, l) => A(l).kvHeads * 2 * 4 * A(l).headDim),
      linear: specs.map(() => false),
      attnWidths: specs.map((_, l) => HEADS * A(l).headDim),
      recurrent: undefined,
    },
    plan,
    new InPlaceAttention(pool, HEADS, 1, attention),
  );
  return { step, pool, stages };
}

describe('step loop with per-layer head shapes, RoPE and KV sharing', () => {
  it('feeds each stage its own layer RoPE rows; each layer attends its own or its source rows at its width, in its window', async () => {
    const { step, pool, stages } = setup();
    try {
      const T = 6;
      await step.run([1, 2, 3, 4, 0, 1], 0, { rows: 'last', prompt: true, detached: false, signal: undefined });
      // the shared layers appended nothing: their sources hold the chunk once
      expect([0, 1, 2, 3].map((l) => pool.length(l))).toEqual([T, T, T, T]);
      expect(pool.byteLength).toBeGreaterThan(0);
      for (let s = 0; s < L; s++) {
        const { cos } = ropeRows(ropeFrequencies(A(s))!, 0, T);
        const fed = stages[s]!.feeds[0]!;
        expect(fed.rope_cos!.data).toEqual(cos); // layer s's RoPE: 4 pairs (window) or 8 (global, proportional)
        expect(fed.rope_cos!.dims).toEqual([T, A(s).rope!.dims / 2]);
      }
      // stage s+1 receives layer s's attention, [1, T, heads·headDim(s)]
      for (let l = 0; l < L; l++) {
        const attn = stages[l + 1]!.feeds[0]!.attn!;
        const w = HEADS * A(l).headDim;
        expect(attn.dims).toEqual([1, T, w]);
        for (let t = 0; t < T; t++) {
          const want = reference(l, t);
          const got = (attn.data as Float32Array).subarray(t * w, (t + 1) * w);
          for (let i = 0; i < w; i++) expect(got[i]).toBeCloseTo(want[i]!, 5);
        }
      }
    } finally {
      pool.free();
    }
  });

  it('decode steps: the window layers and the layer sharing their rows see the last 3 positions, the global ones all', async () => {
    const { step, pool, stages } = setup();
    try {
      await step.run([1, 2, 3, 4], 0, { rows: 'last', prompt: true, detached: false, signal: undefined });
      for (let p = 4; p < 9; p++) {
        for (const s of stages) s.p0 = p;
        await step.run([p % VOCAB], p, { rows: 'last', prompt: false, detached: false, signal: undefined });
        for (let l = 0; l < L; l++) {
          const attn = stages[l + 1]!.feeds.at(-1)!.attn!;
          const w = HEADS * A(l).headDim;
          expect(attn.dims).toEqual([1, 1, w]);
          const want = reference(l, p);
          for (let i = 0; i < w; i++) expect((attn.data as Float32Array)[i]).toBeCloseTo(want[i]!, 5);
        }
      }
      expect(pool.length(3)).toBe(9);
    } finally {
      pool.free();
    }
  });
});
