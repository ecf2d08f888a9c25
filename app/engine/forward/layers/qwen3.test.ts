// The Qwen3 family's declarations, held to what llama.cpp's qwen3.cpp and Qwen3's config.json say:
// layer specs (q/k norm, head_dim independent of hidden/heads, NeoX RoPE at the file's base), the
// tensor table (attn_q_norm / attn_k_norm [headDim], q 2048 wide for Qwen3-0.6B's hidden 1024) with
// its typed refusals, config.json → the same hyperparameters as the GGUF, the memory figures from
// the specs, and the onnx stage graph's speculative query against its own q (same ops, the next
// layer's weights) on the converter-written fixture.
import { describe, expect, it } from 'vitest';
import { ModelFileError } from '../../../common/errors.ts';
import { qwen3GgufFixture, qwen3HfConfig, QWEN3_TEST_MODEL } from '../../../../test/fixtures/families/qwen3.ts';
import { checkTensors } from '../../model/arch/base.ts';
import { QWEN3_TENSORS } from '../../model/arch/qwen3.ts';
import { parseHfConfig } from '../../model/hf/config.ts';
import { loadModel } from '../../model/load-model.ts';
import { estimateMemory, kvBytesPerToken } from '../../model/memory-estimate.ts';
import type { ModelHyperparameters, TensorView } from '../../model/types.ts';
import { ropeRows } from '../../onnx/ops.ts';
import { createSession } from '../../onnx/session.ts';
import { stageRope } from '../graphs.ts';
import { ModelWeights } from '../weights.ts';
import { familyOf } from './families.ts';
import { ropeFrequencies } from './layer-spec.ts';
import { QWEN3_FAMILY } from './qwen3.ts';
import { qwen3StageGraph } from './qwen3-graph.ts';

/** Qwen/Qwen3-0.6B's config.json as the loader sees it. */
const QWEN3_06B = parseHfConfig(
  JSON.stringify({ ...qwen3HfConfig({ hidden: 1024, layers: 28, heads: 16, kvHeads: 8, headDim: 128, ffn: 3072, context: 40960, tied: true, seed: 1, dtype: 'BF16' }) }),
);

/** Views with the right shapes and no bytes: for the tensor table's checks. */
function views(hyper: ModelHyperparameters, patch: (name: string, shape: readonly number[]) => readonly number[] | undefined = (_, s) => s): Map<string, TensorView> {
  const out = new Map<string, TensorView>();
  for (const t of QWEN3_TENSORS.expectedTensors(hyper)) {
    const shape = patch(t.name, t.shape);
    if (shape === undefined) continue;
    out.set(t.name, { name: t.name, dtype: 'F32', shape, elements: shape.reduce((a, b) => a * b, 1), bytes: () => new Uint8Array(0), toFloat32: () => new Float32Array(0) });
  }
  return out;
}

describe('the Qwen3 family', () => {
  it('config.json of Qwen3-0.6B: architecture qwen3, head_dim 128 (q 2048 wide on a hidden size of 1024), NeoX RoPE at θ 1e6, tied', () => {
    expect(QWEN3_06B).toMatchObject({ architecture: 'qwen3', family: 'qwen3', hiddenSize: 1024, heads: 16, kvHeads: 8, headDim: 128, ropeLayout: 'neox', ropeTheta: 1_000_000, normEps: 1e-6, qkvBias: false, tiedEmbeddings: true, vocabSize: 151936 });
    expect(familyOf(QWEN3_06B)).toBe(QWEN3_FAMILY);
  });

  it('every layer: global GQA attention with q/k norm, scale 1/√128, NeoX RoPE over all 128 dims; SwiGLU; pre RMSNorm', () => {
    const layers = QWEN3_FAMILY.layers(QWEN3_06B);
    expect(layers).toHaveLength(28);
    for (const spec of layers) {
      expect(spec.attention).toEqual({ kind: 'attention', heads: 16, kvHeads: 8, headDim: 128, scale: 1 / Math.sqrt(128), window: undefined, sinks: false, rope: { base: 1_000_000, dims: 128, layout: 'neox', scaling: undefined }, qkNorm: true, softcap: 0 });
      expect(spec.ffn).toEqual({ kind: 'dense', size: 3072, gated: true, activation: 'silu' });
      expect(spec.norm).toEqual({ kind: 'rms', placement: 'pre', eps: 1e-6 });
    }
    // the RoPE the specs stand for is the one the stages are fed
    expect(ropeFrequencies(layers[0]!.attention as Extract<(typeof layers)[0]['attention'], { kind: 'attention' }>)).toEqual(stageRope(QWEN3_06B));
    for (const policy of ['full', 'infinigen', 'h2o', 'streaming', 'quest', 'snapkv', 'oracle']) expect(QWEN3_FAMILY.policyRefusal(policy)).toBeUndefined();
    expect(QWEN3_FAMILY.nativeStages.kind).toBe('native');
  });

  it('the KV figures count kvHeads·headDim per layer, not hidden', () => {
    // 28 layers × (K + V) × 8 KV heads × 128 × 2 bytes = 112 KiB per token at fp16
    expect(kvBytesPerToken(QWEN3_06B, 'fp16', QWEN3_FAMILY.layers(QWEN3_06B))).toBe(28 * 2 * 8 * 128 * 2);
    const estimate = estimateMemory(QWEN3_06B, { bytesByType: { BF16: 1 }, storedBytes: 1 }, 1000, { freeBytes: 2 ** 36, totalBytes: 2 ** 36, kvType: 'fp16', layers: QWEN3_FAMILY.layers(QWEN3_06B) });
    expect(estimate).toEqual(estimateMemory(QWEN3_06B, { bytesByType: { BF16: 1 }, storedBytes: 1 }, 1000, { freeBytes: 2 ** 36, totalBytes: 2 ** 36, kvType: 'fp16' }));
  });

  it('tensor table: q [heads·headDim, hidden], attn_output [hidden, heads·headDim], q/k norms [headDim]; a missing or misshapen norm is refused by name', () => {
    const table = new Map(QWEN3_TENSORS.expectedTensors(QWEN3_06B).map((t) => [t.name, t.shape]));
    expect(table.get('blk.0.attn_q.weight')).toEqual([2048, 1024]);
    expect(table.get('blk.0.attn_k.weight')).toEqual([1024, 1024]);
    expect(table.get('blk.0.attn_output.weight')).toEqual([1024, 2048]);
    expect(table.get('blk.27.attn_q_norm.weight')).toEqual([128]);
    expect(table.get('blk.27.attn_k_norm.weight')).toEqual([128]);
    expect(table.has('output.weight')).toBe(false); // tied
    expect(QWEN3_TENSORS.canonicalName('model.layers.3.self_attn.q_norm.weight')).toBe('blk.3.attn_q_norm.weight');
    expect(QWEN3_TENSORS.canonicalName('model.layers.3.self_attn.k_norm.weight')).toBe('blk.3.attn_k_norm.weight');
    expect(() => checkTensors(QWEN3_TENSORS, QWEN3_06B, views(QWEN3_06B), 'ok')).not.toThrow();
    const refusal = (patch: Parameters<typeof views>[1]): ModelFileError => {
      try {
        checkTensors(QWEN3_TENSORS, QWEN3_06B, views(QWEN3_06B, patch), 'qwen3');
      } catch (error) {
        return error as ModelFileError;
      }
      throw new Error('accepted');
    };
    const missing = refusal((name, shape) => (name === 'blk.5.attn_k_norm.weight' ? undefined : shape));
    expect(missing).toBeInstanceOf(ModelFileError);
    expect(missing.code).toBe('MODEL_MISSING_TENSOR');
    expect(missing.details).toMatchObject({ tensor: 'blk.5.attn_k_norm.weight' });
    // a q norm over the whole q row (hidden/heads-style head size) is not Qwen3's
    const wide = refusal((name, shape) => (name === 'blk.0.attn_q_norm.weight' ? [2048] : shape));
    expect(wide.code).toBe('MODEL_SHAPE_MISMATCH');
    expect(wide.details).toMatchObject({ tensor: 'blk.0.attn_q_norm.weight', expected: '[128]', actual: '[2048]' });
  });

  it('the converter-written GGUF and its folder read to the same hyperparameters (head_dim from attention.key_length)', async () => {
    const gguf = await loadModel(qwen3GgufFixture('F32'));
    try {
      expect(gguf.hyper).toMatchObject({ architecture: 'qwen3', family: 'qwen3', hiddenSize: 256, heads: 4, kvHeads: 2, headDim: 128, ffnSize: 512, vocabSize: 151936, ropeLayout: 'neox', ropeTheta: 1_000_000, qkvBias: false, tiedEmbeddings: true });
      const fromConfig = parseHfConfig(JSON.stringify(qwen3HfConfig({ ...QWEN3_TEST_MODEL, dtype: 'F32' })));
      expect({ ...fromConfig, normEps: Math.fround(fromConfig.normEps) }).toEqual(gguf.hyper);
    } finally {
      gguf.close();
    }
  });

  it("onnx stage 0's speculative query is layer 1's q computed by the same ops: equal to stage 0's q with layer 1's weights swapped in", async () => {
    const model = await loadModel(qwen3GgufFixture('F32'));
    try {
      const w = new ModelWeights(model, 4);
      const T = 5;
      const h = new Float32Array(T * 256).map((_, i) => Math.sin(i * 0.37));
      const { cos, sin } = ropeRows(stageRope(model.hyper), 7, T);
      const feeds = {
        h: { elemType: 'float32' as const, dims: [1, T, 256], data: h },
        pos: { elemType: 'int64' as const, dims: [1, T], data: BigInt64Array.from({ length: T }, (_, i) => BigInt(i)) },
        rope_cos: { elemType: 'float32' as const, dims: [T, 64], data: cos },
        rope_sin: { elemType: 'float32' as const, dims: [T, 64], data: sin },
      };
      const spec = await createSession(qwen3StageGraph(w, 0, { speculateNext: true }).model);
      const out = await spec.run(feeds);
      await spec.release();
      // the same stage built over a model whose layer 0 holds layer 1's q projection and q norm
      const swapped = new Map(model.tensors);
      swapped.set('blk.0.attn_q.weight', model.tensors.get('blk.1.attn_q.weight')!);
      swapped.set('blk.0.attn_q_norm.weight', model.tensors.get('blk.1.attn_q_norm.weight')!);
      const asLayer1 = await createSession(qwen3StageGraph(new ModelWeights({ ...model, tensors: swapped }, 4), 0, {}).model);
      const q1 = await asLayer1.run(feeds);
      await asLayer1.release();
      expect(Array.from(out.q_spec!.data as Float32Array)).toEqual(Array.from(q1.q!.data as Float32Array));
      expect(Array.from(out.q!.data as Float32Array)).not.toEqual(Array.from(q1.q!.data as Float32Array));
    } finally {
      model.close();
    }
  });
});
