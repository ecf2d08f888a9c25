// InfiniGen on Qwen3.5: the stage of linear layer 2 outputs q̃ for attention layer 3 from its own
// input: layer 2's attention norm, the QUERY half of layer 3's gated W_q (each head's first headDim
// rows; the second are its output gate), layer 3's q norm per head and partial NeoX RoPE over the
// first 16 of 64 dimensions (the rows fed as spec_rope_*, the linear layer has none of its own).
// Checked against a plain JS computation; the same with the gate half must be far off, so the check
// sees which half was taken.
import { describe, expect, it } from 'vitest';
import { qwen35GgufFixture } from '../../../../test/fixtures/families/qwen35.ts';
import { loadModel } from '../../model/load-model.ts';
import type { TensorData } from '../../onnx/graph-builder.ts';
import { ropeRows, type RopeFrequencies } from '../../onnx/ops.ts';
import { createSession } from '../../onnx/session.ts';
import { ModelWeights } from '../weights.ts';
import { isNativeAvailable } from '../../../../native/index.js';
import { familyOf } from './families.ts';
import { ropeFrequencies, type AttentionSpec } from './layer-spec.ts';

const T = 3;
const P0 = 37;

function rmsNormRow(x: Float32Array, w: Float32Array, eps: number): Float32Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const s = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * s * w[i]!);
}

/** q̃ of layer n from the residual rows h [T, d] through layer `layerIn`'s norm; `half` 0: the query rows, 1: the gate rows. */
function referenceQSpec(w: ModelWeights, h: Float32Array, layerIn: number, n: number, freq: RopeFrequencies, half: 0 | 1): Float32Array {
  const { hiddenSize: d, heads, headDim: hd, normEps: eps } = w.model.hyper;
  const rot = freq.rotaryDim ?? hd;
  const norm = w.vector(`blk.${layerIn}.attn_norm.weight`);
  const wq = w.model.tensors.get(`blk.${n}.attn_q.weight`)!.toFloat32(); // [heads·2hd, d]
  const qNorm = w.vector(`blk.${n}.attn_q_norm.weight`);
  const { cos, sin } = ropeRows(freq, P0, T);
  const out = new Float32Array(T * heads * hd);
  for (let t = 0; t < T; t++) {
    const x = rmsNormRow(h.subarray(t * d, (t + 1) * d), norm, eps);
    for (let head = 0; head < heads; head++) {
      const q = new Float32Array(hd);
      for (let i = 0; i < hd; i++) {
        let s = 0;
        const row = (head * 2 * hd + half * hd + i) * d;
        for (let j = 0; j < d; j++) s += wq[row + j]! * x[j]!;
        q[i] = s;
      }
      const qn = rmsNormRow(q, qNorm, eps);
      const o = (t * heads + head) * hd;
      for (let i = 0; i < hd; i++) out[o + i] = qn[i]!;
      for (let i = 0; i < rot / 2; i++) {
        const c = cos[t * (rot / 2) + i]!;
        const s = sin[t * (rot / 2) + i]!;
        const a = qn[i]!;
        const b = qn[i + rot / 2]!;
        out[o + i] = a * c - b * s;
        out[o + i + rot / 2] = a * s + b * c;
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

describe('Qwen3.5: the stage of a linear layer speculates the next attention layer’s query', () => {
  it('q̃ of layer 3 from stage 2 is the query half of layer 3’s W_q, its q norm and its partial RoPE (onnx and native stages)', async () => {
    const model = await loadModel(qwen35GgufFixture('F32'));
    try {
      const hyper = model.hyper;
      const family = familyOf(hyper);
      const specs = family.layers(hyper);
      const s = 2;
      expect(specs[s]!.attention.kind).toBe('linear');
      const next = ropeFrequencies(specs[s + 1]!.attention as AttentionSpec)!;
      expect(next.rotaryDim).toBe(16);
      const { cos, sin } = ropeRows(next, P0, T);
      let seed = 11;
      const rand = (n: number, scale: number): Float32Array => Float32Array.from({ length: n }, () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32 - 0.5) * scale);
      const d = hyper.hiddenSize;
      const lin = hyper.linearAttention!;
      const feeds: Record<string, TensorData> = {
        h: { elemType: 'float32', dims: [1, T, d], data: rand(T * d, 8) },
        attn: { elemType: 'float32', dims: [1, T, lin.valueHeads * lin.headDim], data: rand(T * lin.valueHeads * lin.headDim, 1) },
        pos: { elemType: 'int64', dims: [1, T], data: BigInt64Array.from({ length: T }, (_, i) => BigInt(i)) },
        spec_rope_cos: { elemType: 'float32', dims: [T, cos.length / T], data: cos },
        spec_rope_sin: { elemType: 'float32', dims: [T, sin.length / T], data: sin },
      };
      const w = new ModelWeights(model, 4);
      const graph = family.onnxStage(w, s, { speculateNext: true });
      expect(graph.inputs).toEqual(expect.arrayContaining(['spec_rope_cos', 'spec_rope_sin', 'pos']));
      expect(graph.inputs).not.toContain('rope_cos');
      // a linear layer followed by another linear layer has nothing to speculate for
      expect(family.onnxStage(w, 1, { speculateNext: true }).inputs).not.toContain('spec_rope_cos');
      const session = await createSession(graph.model, { label: graph.name });
      const out = await session.run(Object.fromEntries(graph.inputs.map((k) => [k, feeds[k]!])));
      const hNext = out.h_next!.data as Float32Array;
      const qSpec = out.q_spec!.data as Float32Array;
      const want = referenceQSpec(w, hNext, s, s + 1, next, 0);
      const gateHalf = referenceQSpec(w, hNext, s, s + 1, next, 1);
      const err = maxDiff(qSpec, want);
      const scale = maxDiff(want, new Float32Array(want.length));
      console.log(`qwen35 q̃ of layer ${s + 1} from stage ${s}: max |Δ| ${err.toExponential(2)} of max |q̃| ${scale.toFixed(2)}; from the gate half it would be off by ${maxDiff(gateHalf, want).toFixed(2)}`);
      expect(err).toBeLessThan(1e-4 * scale);
      expect(maxDiff(gateHalf, want)).toBeGreaterThan(0.1 * scale);
      await session.release();
      // the native stage (qwen35-native.ts) of the same layer: the same q̃ and the same recurrence inputs
      if (family.nativeStages.kind === 'native' && isNativeAvailable()) {
        const speculates = Array.from({ length: hyper.layers + 1 }, (_, l) => l === s);
        const native = family.nativeStages.create(w, { threads: 1, speculates, onProgress: undefined });
        try {
          expect(native.graphs[s]!.inputs).toEqual(expect.arrayContaining(['spec_rope_cos', 'spec_rope_sin']));
          expect(native.graphs[s]!.inputs).not.toContain('rope_cos');
          const got = await native.sessions[s]!.run(Object.fromEntries(native.graphs[s]!.inputs.map((k) => [k, feeds[k]!])));
          const nativeErr = maxDiff(got.q_spec!.data as Float32Array, want);
          const linGap = Math.max(...['lin_qkv', 'lin_z', 'lin_beta', 'lin_decay', 'h_next'].map((k) => maxDiff(got[k]!.data as Float32Array, out[k]!.data as Float32Array)));
          console.log(`qwen35 q̃ of layer ${s + 1} from native stage ${s}: max |Δ| ${nativeErr.toExponential(2)}; its lin_* and h_next vs onnx's: max |Δ| ${linGap.toExponential(2)}`);
          expect(nativeErr).toBeLessThan(1e-4 * scale);
          expect(linGap).toBeLessThan(1e-4);
        } finally {
          for (const x of native.sessions) await x.release();
        }
      }
    } finally {
      model.close();
    }
  }, 300_000);
});
