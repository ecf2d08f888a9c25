// The forward pass against the plain float64 reference forward (test/support/reference-forward.ts)
// on fixture models of every family and weight type, teacher-forced over 64 tokens in chunks of
// 24 (so chunk boundaries are crossed). Quantised files are compared with the reference run on
// their dequantised weights, so the only difference is the int8 activations of the native kernels
// and of MatMulNBits' accuracy_level 4; accuracy_level 0 (onnxruntime) is checked to be as tight as fp32.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadModel } from '../model/load-model.ts';
import { fixtureSet } from '../../../test/fixtures/index.ts';
import { logSoftmax, referenceForward } from '../../../test/support/reference-forward.ts';
import { createModelRunner, type DenseEngine } from './model-runner.ts';

const dir = join(tmpdir(), 'longhand-forward-fixtures');
mkdirSync(dir, { recursive: true });
const set = fixtureSet(dir);

const TOKENS = 64;
const ids = Array.from({ length: TOKENS }, (_, i) => (i * 37 + 11) % 400);

interface Agreement {
  maxAbs: number; // max |Δ logit|
  maxRef: number; // max |logit| of the reference
  meanKl: number; // mean over positions of KL(reference ‖ ours)
  top1: number; // share of positions with the same argmax
}

async function compare(path: string, accuracyLevel: 0 | 4 = 4, dense: DenseEngine = 'auto'): Promise<Agreement> {
  const model = await loadModel(path);
  try {
    const expected = referenceForward(model).logits(ids);
    const runner = await createModelRunner(model, { kvType: 'fp32', prefillChunk: 24, contextLength: 128, accuracyLevel, dense });
    if (dense !== 'auto') expect(runner.dense.engine).toBe(dense);
    const got = await runner.prefill(ids, undefined, { allLogits: true });
    await runner.dispose();
    const V = model.hyper.vocabSize;
    let maxAbs = 0;
    let maxRef = 0;
    let kl = 0;
    let same = 0;
    for (let t = 0; t < TOKENS; t++) {
      const ref = expected[t]!;
      const ours = got.subarray(t * V, (t + 1) * V);
      const lr = logSoftmax(ref);
      const lo = logSoftmax(ours);
      let a = 0;
      let b = 0;
      for (let j = 0; j < V; j++) {
        maxAbs = Math.max(maxAbs, Math.abs(ours[j]! - ref[j]!));
        maxRef = Math.max(maxRef, Math.abs(ref[j]!));
        kl += Math.exp(lr[j]!) * (lr[j]! - lo[j]!);
        if (ref[j]! > ref[a]!) a = j;
        if (ours[j]! > ours[b]!) b = j;
      }
      if (a === b) same++;
    }
    return { maxAbs, maxRef, meanKl: kl / TOKENS, top1: same / TOKENS };
  } finally {
    model.close();
  }
}

const report = (label: string, a: Agreement): void =>
  console.log(`${label}: max |Δlogit| ${a.maxAbs.toExponential(2)} (max |logit| ${a.maxRef.toFixed(3)}), mean KL ${a.meanKl.toExponential(2)}, top-1 ${(a.top1 * 100).toFixed(1)}%`);

// Tolerances. Float weights: fp32 arithmetic vs float64, |Δlogit| <= 1e-4 · (1 + max|logit|).
// Quantised, accuracy_level 4: activations rounded to int8 per 32-block before each matmul
// (relative error ~0.4 % per dot product): mean KL < 1e-4 and |Δlogit| <= 2e-2 · max|logit|.
const FLOAT_TOL = (a: Agreement): number => 1e-4 * (1 + a.maxRef);

describe('forward pass vs the float64 reference forward (64 tokens, teacher-forced)', () => {
  for (const kind of ['mha', 'gqa'] as const) {
    for (const type of ['F32', 'F16'] as const) {
      it(`llama ${kind.toUpperCase()} ${type}`, async () => {
        const a = await compare(set.gguf[kind][type]);
        report(`llama ${kind} ${type}`, a);
        expect(a.maxAbs).toBeLessThanOrEqual(FLOAT_TOL(a));
        expect(a.top1).toBe(1);
      });
    }
    for (const type of ['Q8_0', 'Q4_0', 'Q4_K'] as const) {
      it(`llama ${kind.toUpperCase()} ${type} (native int8 activations; MatMulNBits accuracy_level 4; and 0)`, async () => {
        // the native dense stages (C++ over the file's blocks) and onnxruntime's MatMulNBits both
        // round the activations to int8 per block: the same bounds
        for (const dense of ['native', 'onnx'] as const) {
          const a = await compare(set.gguf[kind][type], 4, dense);
          report(`llama ${kind} ${type} ${dense} acc4`, a);
          expect(a.meanKl).toBeLessThan(1e-4);
          expect(a.maxAbs).toBeLessThanOrEqual(2e-2 * a.maxRef + 1e-4);
        }
        // accuracy level 0 (fp32 activations) is onnxruntime's alone: 'auto' takes it
        const exact = await compare(set.gguf[kind][type], 0);
        report(`llama ${kind} ${type} acc0`, exact);
        expect(exact.maxAbs).toBeLessThanOrEqual(FLOAT_TOL(exact));
      });
    }
  }

  const others: [string, () => string][] = [
    ['qwen2 with q/k/v bias (GGUF F16, neox RoPE)', () => set.gguf.qwen2Bias],
    ['llama GQA with tied embeddings (GGUF F16)', () => set.gguf.tied],
    ['Hugging Face llama F32 (neox RoPE)', () => set.hf.llama],
    ['Hugging Face qwen2 F16 (bias, tied)', () => set.hf.qwen2],
    ['Hugging Face mistral BF16, 3 shards', () => set.hf.mistral],
    ['Hugging Face OPT F16 (LayerNorm, learned positions, ReLU, biases)', () => set.hf.opt],
  ];
  for (const [label, path] of others) {
    it(label, async () => {
      const a = await compare(path());
      report(label, a);
      expect(a.maxAbs).toBeLessThanOrEqual(FLOAT_TOL(a));
      expect(a.top1).toBe(1);
    });
  }
});
