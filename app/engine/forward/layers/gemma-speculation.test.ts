// InfiniGen on Gemma 3: the stage before a global layer (here stage 4, a window layer, before layer
// 5, global) outputs q̃ for the global layer: its input's attention norm, layer 5's W_q, layer 5's
// q norm per head and layer 5's RoPE (θ 1e6 with linear ×8), not layer 4's (θ 1e4). Checked against
// a plain JS computation for both dense engines; the same q̃ with layer 4's RoPE must be far off,
// so the check sees the difference.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { gemmaFixtureSet, GEMMA3_FIXTURE } from '../../../../test/fixtures/families/gemma.ts';
import { loadModel } from '../../model/load-model.ts';
import type { TensorData } from '../../onnx/graph-builder.ts';
import { ropeRows, type RopeFrequencies } from '../../onnx/ops.ts';
import { createSession } from '../../onnx/session.ts';
import { ModelWeights } from '../weights.ts';
import { familyOf } from './families.ts';
import { ropeFrequencies, type AttentionSpec } from './layer-spec.ts';

const dir = join(tmpdir(), 'longhand-gemma-fixtures');
mkdirSync(dir, { recursive: true });

const T = 3;
const P0 = 37;

function rmsNormRow(x: Float32Array, w: Float32Array, eps: number): Float32Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const s = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * s * w[i]!);
}

/** q̃ of layer `n` from the residual rows h [T, d] as the model defines it (gemma.ts), with RoPE `freq`. */
function referenceQSpec(w: ModelWeights, h: Float32Array, layerIn: number, n: number, freq: RopeFrequencies): Float32Array {
  const hyper = w.model.hyper;
  const { hiddenSize: d, heads, headDim: hd, normEps: eps } = hyper;
  const norm = w.vector(`blk.${layerIn}.attn_norm.weight`);
  const wq = w.view(`blk.${n}.attn_q.weight`).toFloat32(); // [heads·hd, d]
  const qNorm = w.vector(`blk.${n}.attn_q_norm.weight`);
  const { cos, sin } = ropeRows(freq, P0, T);
  const out = new Float32Array(T * heads * hd);
  for (let t = 0; t < T; t++) {
    const x = rmsNormRow(h.subarray(t * d, (t + 1) * d), norm, eps);
    for (let head = 0; head < heads; head++) {
      const q = new Float32Array(hd);
      for (let i = 0; i < hd; i++) {
        let s = 0;
        const row = (head * hd + i) * d;
        for (let j = 0; j < d; j++) s += wq[row + j]! * x[j]!;
        q[i] = s;
      }
      const qn = rmsNormRow(q, qNorm, eps);
      for (let i = 0; i < hd / 2; i++) {
        const c = cos[t * (hd / 2) + i]!, s = sin[t * (hd / 2) + i]!;
        const a = qn[i]!, b = qn[i + hd / 2]!;
        out[(t * heads + head) * hd + i] = a * c - b * s;
        out[(t * heads + head) * hd + i + hd / 2] = a * s + b * c;
      }
    }
  }
  return out;
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

describe('Gemma 3: the stage before a global layer speculates its query', () => {
  it('q̃ of layer 5 (global) from stage 4 (window) has layer 5’s q norm and RoPE, native and onnx', async () => {
    const set = gemmaFixtureSet(dir, GEMMA3_FIXTURE);
    const model = await loadModel(set.gguf.F32);
    try {
      const hyper = model.hyper;
      const family = familyOf(hyper);
      const specs = family.layers(hyper);
      const s = 4;
      expect(specs[s]!.attention.kind === 'attention' && specs[s]!.attention.window).toBe(GEMMA3_FIXTURE.window);
      expect((specs[s + 1]!.attention as AttentionSpec).window).toBeUndefined();
      const own = ropeFrequencies(specs[s]!.attention as AttentionSpec)!;
      const next = ropeFrequencies(specs[s + 1]!.attention as AttentionSpec)!;
      const rows = (f: RopeFrequencies): { cos: TensorData; sin: TensorData } => {
        const { cos, sin } = ropeRows(f, P0, T);
        return { cos: { elemType: 'float32', dims: [T, cos.length / T], data: cos }, sin: { elemType: 'float32', dims: [T, sin.length / T], data: sin } };
      };
      let seed = 7;
      const rand = (n: number, scale: number): Float32Array => Float32Array.from({ length: n }, () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32 - 0.5) * scale);
      const d = hyper.hiddenSize;
      const qw = hyper.heads * hyper.headDim;
      const feeds: Record<string, TensorData> = {
        h: { elemType: 'float32', dims: [1, T, d], data: rand(T * d, 8) },
        attn: { elemType: 'float32', dims: [1, T, qw], data: rand(T * qw, 1) },
        pos: { elemType: 'int64', dims: [1, T], data: BigInt64Array.from({ length: T }, (_, i) => BigInt(i)) },
        rope_cos: rows(own).cos,
        rope_sin: rows(own).sin,
        spec_rope_cos: rows(next).cos,
        spec_rope_sin: rows(next).sin,
      };
      const w = new ModelWeights(model, 4);
      const speculates = Array.from({ length: hyper.layers + 1 }, () => true);
      const native = family.nativeStages.kind === 'native' ? family.nativeStages.create(w, { threads: 1, speculates, onProgress: undefined }) : undefined;
      expect(native).toBeDefined();
      expect(native!.graphs[s]!.inputs).toContain('spec_rope_cos');
      const graph = family.onnxStage(w, s, { speculateNext: true });
      expect(graph.inputs).toContain('spec_rope_cos');
      const session = await createSession(graph.model, { label: graph.name });
      const pick = (inputs: readonly string[]): Record<string, TensorData> => Object.fromEntries(inputs.map((k) => [k, feeds[k]!]));
      const outputs = {
        native: await native!.sessions[s]!.run(pick(native!.graphs[s]!.inputs)),
        onnx: await session.run(pick(graph.inputs)),
      };
      for (const [engine, out] of Object.entries(outputs)) {
        const hNext = out.h_next!.data as Float32Array;
        const qSpec = out.q_spec!.data as Float32Array;
        const want = referenceQSpec(w, hNext, s, s + 1, next);
        const wrongRope = referenceQSpec(w, hNext, s, s + 1, own);
        const err = maxDiff(qSpec, want);
        const scale = maxDiff(want, new Float32Array(want.length));
        console.log(`q̃ of layer ${s + 1} from stage ${s} (${engine}): max |Δ| ${err.toExponential(2)} of max |q̃| ${scale.toFixed(2)}; with layer ${s}'s RoPE it would be off by ${maxDiff(wrongRope, want).toFixed(2)}`);
        expect(err).toBeLessThan(1e-3 * scale);
        expect(maxDiff(wrongRope, want)).toBeGreaterThan(0.1 * scale);
      }
      await session.release();
      for (const x of native!.sessions) await x.release();
    } finally {
      model.close();
    }
  }, 300_000);
});
