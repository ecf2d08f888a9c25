// llama.cpp as a teacher-forced reference: full-vocabulary distributions from node-llama-cpp,
// checked against llama.cpp's own greedy reference run (shared/models/reference-greedy.json) and
// against the TypeScript float64 reference forward, on stories260K and on fixture GGUF files.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGgufModel } from '../../app/engine/model/gguf/gguf-model.ts';
import { SMALL_GGUF, writeLlamaGguf } from '../fixtures/index.ts';
import { mulberry32 } from '../fixtures/rng.ts';
import { disposeLlamaCpp, klDivergence, llamaCppLogProbs, maxAbsLogProbDiffTopK, meanKl, topK } from './llama-cpp-reference.ts';
import { haveSharedModel, loadReferenceRuns, STORIES_260K } from './models.ts';
import { logSoftmax, referenceForward } from './reference-forward.ts';

afterAll(async () => {
  await disposeLlamaCpp();
});

/** Log-probabilities of the TypeScript reference forward (float64) for the same ids. */
function referenceLogProbs(path: string, ids: readonly number[]): Float64Array[] {
  const model = loadGgufModel(path);
  try {
    return referenceForward(model).logits(ids).map((logits) => logSoftmax(logits));
  } finally {
    model.close();
  }
}

/** Σ exp over a row, in float64. */
function probabilitySum(row: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i] as number);
  return sum;
}

/** Logs a figure so the run shows it (vitest prints console output per test). */
function report(label: string, value: number): void {
  console.log(`llama-cpp-reference: ${label} = ${value.toExponential(3)}`);
}

describe('comparison helpers', () => {
  const a = Float32Array.from([Math.log(0.5), Math.log(0.25), Math.log(0.25)]);
  const b = Float32Array.from([Math.log(0.25), Math.log(0.5), Math.log(0.25)]);

  it('klDivergence: zero for identical distributions, the closed form otherwise, invariant to a constant shift', () => {
    expect(klDivergence(a, a)).toBe(0);
    // 0.5 ln 2 + 0.25 ln 0.5 = 0.25 ln 2
    expect(klDivergence(a, b)).toBeCloseTo(0.25 * Math.log(2), 7);
    // unnormalised inputs are renormalised first
    expect(klDivergence(a.map((x) => x + 3), b.map((x) => x - 1))).toBeCloseTo(0.25 * Math.log(2), 6);
  });

  it('klDivergence: reference tokens at probability 0 (underflow) are ignored; ours at 0 where the reference is not gives Infinity', () => {
    const withZero = Float32Array.from([0, -Infinity]);
    expect(klDivergence(withZero, Float32Array.from([Math.log(0.9), Math.log(0.1)]))).toBeCloseTo(-Math.log(0.9), 6);
    expect(klDivergence(Float32Array.from([Math.log(0.9), Math.log(0.1)]), withZero)).toBe(Infinity);
  });

  it('meanKl averages over positions; maxAbsLogProbDiffTopK looks at the reference top-k only', () => {
    expect(meanKl([a, a], [a, b])).toBeCloseTo(0.125 * Math.log(2), 7);
    expect(() => meanKl([a], [a, b])).toThrow(/positions/);
    const ours = Float32Array.from([Math.log(0.5) + 0.01, Math.log(0.25) - 0.02, Math.log(0.25) + 5]);
    expect(maxAbsLogProbDiffTopK([a], [ours], 1)).toBeCloseTo(0.01, 6);
    expect(maxAbsLogProbDiffTopK([a], [ours], 2)).toBeCloseTo(0.02, 6);
    expect(maxAbsLogProbDiffTopK([a], [ours], 3)).toBeCloseTo(5, 5);
    // ties go to the lower id
    expect(topK(Float32Array.from([1, 3, 3, -Infinity, 2]), 4)).toEqual([1, 2, 4, 0]);
  });
});

describe.skipIf(!haveSharedModel())('llama.cpp reference on stories260K', () => {
  const runs = haveSharedModel() ? loadReferenceRuns() : [];

  for (const run of runs) {
    it(`prompt ${JSON.stringify(run.prompt)}: top-5 log-probabilities of steps 0..7 match reference-greedy.json (1e-4), full vocabulary at every position`, async () => {
      const ids = [...run.promptIds, ...run.generatedIds.slice(0, 8)];
      const { logProbs, vocabSize, underflowed } = await llamaCppLogProbs(STORIES_260K, ids);
      expect(vocabSize).toBe(512);
      expect(logProbs).toHaveLength(ids.length);
      for (const row of logProbs) {
        expect(row).toHaveLength(512);
        expect(Math.abs(probabilitySum(row) - 1)).toBeLessThan(1e-3);
      }
      expect(underflowed).toBe(0);
      expect(run.steps).toHaveLength(8);
      let maxDiff = 0;
      for (const step of run.steps) {
        const row = logProbs[run.promptIds.length - 1 + step.step] as Float32Array;
        const top = topK(row, 5);
        expect(top).toEqual(step.top.map((entry) => entry.id));
        for (const [i, entry] of step.top.entries()) maxDiff = Math.max(maxDiff, Math.abs((row[top[i] as number] as number) - entry.logprob));
        // the greedy choice is the argmax
        expect(top[0]).toBe(step.chosen);
      }
      report(`stories260K ${JSON.stringify(run.prompt)} max |Δ logprob| top-5 vs reference-greedy.json`, maxDiff);
      expect(maxDiff).toBeLessThan(1e-4);
    });
  }

  // measured: F32 KV mean KL 1.1e-13, top-5 |Δ| 5.9e-6; F16 KV mean KL 1.7e-7, top-5 |Δ| 7.0e-3
  it('agrees with the TypeScript float64 reference forward over 40 positions (mean KL < 1e-5; F32 KV < 1e-9), F32 and F16 KV cache', async () => {
    const run = runs[0];
    if (run === undefined) throw new Error('reference-greedy.json has no runs');
    const ids = [...run.promptIds, ...run.generatedIds].slice(0, 40);
    const ours = referenceLogProbs(STORIES_260K, ids);
    const f32 = await llamaCppLogProbs(STORIES_260K, ids, { kvType: 'f32' });
    expect(f32.logProbs).toHaveLength(40);
    const kl = meanKl(f32.logProbs, ours);
    const top5 = maxAbsLogProbDiffTopK(f32.logProbs, ours, 5);
    report('stories260K mean KL(llama.cpp F32 KV ‖ TS reference), 40 positions', kl);
    report('stories260K max |Δ logprob| top-5 (F32 KV)', top5);
    expect(kl).toBeLessThan(1e-9);
    expect(top5).toBeLessThan(1e-4);

    const f16 = await llamaCppLogProbs(STORIES_260K, ids, { kvType: 'f16' });
    const klF16 = meanKl(f16.logProbs, ours);
    report('stories260K mean KL(llama.cpp F16 KV ‖ TS reference), 40 positions', klF16);
    report('stories260K max |Δ logprob| top-5 (F16 KV)', maxAbsLogProbDiffTopK(f16.logProbs, ours, 5));
    expect(klF16).toBeLessThan(1e-5);
  });

  it('handles a single id; rejects a context without a free cell beyond the ids and ids outside the vocabulary', async () => {
    const single = await llamaCppLogProbs(STORIES_260K, [1]);
    expect(single.logProbs).toHaveLength(1);
    expect(topK(single.logProbs[0] as Float32Array, 1)).toEqual([403]);
    await expect(llamaCppLogProbs(STORIES_260K, [1, 2, 3], { contextSize: 3 })).rejects.toThrow(/contextSize/);
    await expect(llamaCppLogProbs(STORIES_260K, [1, 512])).rejects.toThrow(/outside the vocabulary/);
    await expect(llamaCppLogProbs(STORIES_260K, [])).rejects.toThrow(/no token ids/);
  });
});

describe('llama.cpp reference on fixture GGUF files (random weights)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'longhand-llama-cpp-ref-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  // the same options as fixtureSet()'s gguf.gqa.F32 and gguf.mha.Q8_0, written alone
  const base = { dim: SMALL_GGUF.dim, layers: SMALL_GGUF.layers, heads: SMALL_GGUF.heads, ffn: SMALL_GGUF.ffn, context: SMALL_GGUF.context, vocab: SMALL_GGUF.vocab, seed: SMALL_GGUF.seed };
  const random = mulberry32(77);
  const ids = [1, ...Array.from({ length: 39 }, () => 3 + Math.floor(random() * (SMALL_GGUF.vocab - 3)))];

  // measured: mean KL 1.3e-14, |Δ logprob| ≤ 5.6e-7 over every token
  it('gqa F32: mean KL vs the TypeScript reference forward < 1e-9 over 40 positions', async () => {
    const path = join(dir, 'llama-gqa-f32.gguf');
    writeLlamaGguf(path, { ...base, kvHeads: 2, type: 'F32' });
    const { logProbs, vocabSize } = await llamaCppLogProbs(path, ids, { threads: 2 });
    expect(vocabSize).toBe(SMALL_GGUF.vocab);
    expect(logProbs).toHaveLength(ids.length);
    for (const row of logProbs) expect(Math.abs(probabilitySum(row) - 1)).toBeLessThan(1e-3);
    const ours = referenceLogProbs(path, ids);
    const kl = meanKl(logProbs, ours);
    report('fixture gqa F32 mean KL(llama.cpp ‖ TS reference)', kl);
    const all = maxAbsLogProbDiffTopK(logProbs, ours, SMALL_GGUF.vocab);
    report('fixture gqa F32 max |Δ logprob| top-5', maxAbsLogProbDiffTopK(logProbs, ours, 5));
    report('fixture gqa F32 max |Δ logprob| all tokens', all);
    expect(kl).toBeLessThan(1e-9);
    expect(all).toBeLessThan(1e-5);
  });

  // measured: mean KL 4.5e-6, top-5 |Δ logprob| 8.3e-3 (the reference forward dequantises the
  // weights exactly; llama.cpp also rounds the activations to q8_0 in its dot products)
  it('mha Q8_0: mean KL vs the TypeScript reference forward < 1e-4', async () => {
    const path = join(dir, 'llama-mha-q8_0.gguf');
    writeLlamaGguf(path, { ...base, kvHeads: 4, type: 'Q8_0' });
    const { logProbs } = await llamaCppLogProbs(path, ids, { threads: 2 });
    const ours = referenceLogProbs(path, ids);
    const kl = meanKl(logProbs, ours);
    report('fixture mha Q8_0 mean KL(llama.cpp ‖ TS reference)', kl);
    report('fixture mha Q8_0 max |Δ logprob| top-5', maxAbsLogProbDiffTopK(logProbs, ours, 5));
    report('fixture mha Q8_0 max |Δ logprob| all tokens', maxAbsLogProbDiffTopK(logProbs, ours, SMALL_GGUF.vocab));
    expect(kl).toBeLessThan(1e-4);
  });
});
