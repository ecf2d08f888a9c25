// The forward pass on the second reference model, kjv-llama-hd64.gguf (a Llama trained on the KJV
// Bible: head dim 64, GQA 4 query / 2 KV heads, 6 layers, byte-fallback BPE SentencePiece vocab of
// 2048; shared/models/README.md), against llama.cpp:
//   - our tokenizer gives llama.cpp's promptIds for every prompt of kjv-reference-greedy.json and
//     decodes its generated ids to its generatedText;
//   - policy 'full', fp32 KV: every greedy id of every run (200/200, 200/200, 100/100) and the first
//     8 steps' top-5 log-probabilities within 1e-3 (the stories260K bound, stories.test.ts); fp16 KV:
//     the ids up to the reference's own kvF16AgreesToStep, log-probabilities within 1e-2;
//   - llama.cpp itself (node-llama-cpp, F32 KV) teacher-forced over 256 tokens of the Ruth run, on
//     the F32 file and on F16 / Q8_0 conversions of it (test/support/convert-gguf.ts), with bounds
//     per weight type like llama-cpp.test.ts's, stated with what was measured.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertGguf } from '../../../test/support/convert-gguf.ts';
import { disposeLlamaCpp, llamaCppLogProbs, maxAbsLogProbDiffTopK, meanKl } from '../../../test/support/llama-cpp-reference.ts';
import { haveSharedModel, KJV_HD64, KJV_REFERENCE_GREEDY, loadReferenceRuns, type ReferenceRun } from '../../../test/support/models.ts';
import { argmax, logSoftmax, referenceForward } from '../../../test/support/reference-forward.ts';
import { loadGgufModel } from '../model/gguf/gguf-model.ts';
import { loadModel } from '../model/load-model.ts';
import { createTokenizer } from '../model/tokenizer/tokenizer.ts';
import type { LoadedModel } from '../model/types.ts';
import { createModelRunner, type ModelRunner } from './model-runner.ts';

const have = haveSharedModel(KJV_HD64) && haveSharedModel(KJV_REFERENCE_GREEDY);
const runs: ReferenceRun[] = have ? loadReferenceRuns(KJV_REFERENCE_GREEDY) : [];

/** Greedy run of the reference's length: ids, and the log-softmax of the first `keep` steps. */
async function greedy(r: ModelRunner, run: ReferenceRun, keep: number): Promise<{ ids: number[]; logprobs: Float64Array[] }> {
  r.reset();
  const steps = run.generatedIds.length;
  let logits = await r.prefill(run.promptIds);
  const ids: number[] = [];
  const logprobs: Float64Array[] = [];
  for (let i = 0; i < steps; i++) {
    if (i < keep) logprobs.push(logSoftmax(logits));
    const best = argmax(logits);
    ids.push(best);
    if (i < steps - 1) logits = await r.decode(best);
  }
  return { ids, logprobs };
}

/** Largest |Δ log p| over the reference's top-5 of its recorded steps; also checks the top-5 order. */
function top5Gap(run: ReferenceRun, logprobs: Float64Array[], checkOrder: boolean): number {
  let worst = 0;
  for (const step of run.steps) {
    const lp = logprobs[step.step]!;
    for (const t of step.top) worst = Math.max(worst, Math.abs(lp[t.id]! - t.logprob));
    if (checkOrder) expect(step.top.map((t) => t.id)).toEqual([...lp.keys()].sort((a, b) => lp[b]! - lp[a]!).slice(0, 5));
  }
  return worst;
}

describe.skipIf(!have)('kjv-llama-hd64 (head dim 64, GQA) vs llama.cpp', () => {
  let model: LoadedModel;
  let r32: ModelRunner;
  let r16: ModelRunner;
  const dir = mkdtempSync(join(tmpdir(), 'longhand-kjv-'));

  beforeAll(async () => {
    model = await loadModel(KJV_HD64);
    r32 = await createModelRunner(model, { kvType: 'fp32', contextLength: 1024 });
    r16 = await createModelRunner(model, { kvType: 'fp16', contextLength: 1024 });
  });
  afterAll(async () => {
    await r32?.dispose();
    await r16?.dispose();
    model?.close();
    await disposeLlamaCpp();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the model is the one the README describes: 6 layers, 4 q / 2 kv heads of 64, vocab 2048, interleaved RoPE', () => {
    const h = model.hyper;
    expect([h.layers, h.heads, h.kvHeads, h.headDim, h.vocabSize, h.ropeLayout]).toEqual([6, 4, 2, 64, 2048, 'interleaved']);
    expect(runs.map((r) => r.generatedIds.length)).toEqual([200, 200, 100]);
  });

  it("the tokenizer reproduces llama.cpp's promptIds (BOS, leading space, byte-fallback BPE) and decodes its generated ids to its text", async () => {
    const tokenizer = await createTokenizer(model.tokenizer);
    for (const run of runs) {
      expect(tokenizer.encode(run.prompt, { addSpecial: true }), JSON.stringify(run.prompt.slice(0, 40))).toEqual(run.promptIds);
      expect(tokenizer.decode(run.generatedIds)).toBe(run.generatedText);
    }
    // a character outside the vocabulary's pieces goes through the <0xXX> byte tokens (ids 3..258)
    const bytes = tokenizer.encode('\u00e9', { addSpecial: false }).filter((id) => id >= 3 && id < 259);
    expect(bytes.map((id) => id - 3)).toEqual([0xc3, 0xa9]);
  });

  for (const run of runs) {
    const label = JSON.stringify(run.prompt.length > 40 ? `${run.prompt.slice(0, 40)}…` : run.prompt);
    it(`full, fp32 KV: ${run.generatedIds.length}/${run.generatedIds.length} greedy ids from ${label} equal llama.cpp's; top-5 logprobs of steps 0..7 within 1e-3`, async () => {
      const { ids, logprobs } = await greedy(r32, run, run.steps.length);
      const first = ids.findIndex((id, i) => id !== run.generatedIds[i]);
      expect(first, 'first step that differs from llama.cpp').toBe(-1);
      const worst = top5Gap(run, logprobs, true);
      console.log(`kjv fp32 KV ${label}: ${ids.length} ids equal; max |Δ logprob| over the top-5 of steps 0..7 = ${worst.toExponential(2)}`);
      expect(worst).toBeLessThan(1e-3);
    });

    it(`full, fp16 KV: greedy ids from ${label} equal llama.cpp's up to its kvF16AgreesToStep; top-5 logprobs within 1e-2`, async () => {
      const { ids, logprobs } = await greedy(r16, run, run.steps.length);
      const agree = run.kvF16AgreesToStep ?? 0;
      expect(ids.slice(0, agree)).toEqual(run.generatedIds.slice(0, agree));
      const worst = top5Gap(run, logprobs, false);
      console.log(`kjv fp16 KV ${label}: ids equal to step ${agree}; max |Δ logprob| over the top-5 of steps 0..7 = ${worst.toExponential(2)}`);
      expect(worst).toBeLessThan(1e-2);
    });
  }

  // Teacher-forced next-token distributions over 256 tokens of the Ruth run, ours (fp32 KV) vs
  // llama.cpp (F32 KV) on the same file. Measured 2026-12-03: F32 KL 2.1e-12, top-5 1.7e-5 (fp32
  // sums in another order, logits up to ~20 on a trained model; the random fixtures' 1e-5 is too
  // tight here, so 1e-4 as llama-cpp-reference.test.ts allows on stories260K); F16 3.4e-8 / 1.2e-3
  // (llama.cpp rounds activations to fp16 for F16 weights; we match the float64 reference to 6e-6);
  // Q8_0 3.1e-5 / 5.0e-2: both engines round activations to 8 bits, each its own way, and each is
  // as far from the exactly dequantised float64 reference forward (llama.cpp 3.2e-5 / 7.5e-2, ours
  // 3.3e-5 / 5.1e-2), so for Q8_0 the bound is ~3x the measure and ours must be no further from the
  // float64 reference than llama.cpp is (x1.5).
  const BOUNDS = { F32: { kl: 1e-9, top5: 1e-4 }, F16: { kl: 1e-7, top5: 3e-3 }, Q8_0: { kl: 1.5e-4, top5: 0.15 } } as const;
  it.each(['F32', 'F16', 'Q8_0'] as const)('%s weights: mean KL and top-5 |Δ log p| vs llama.cpp over 256 teacher-forced tokens', async (type) => {
    const ruth = runs[2]!;
    const ids = [...ruth.promptIds, ...ruth.generatedIds].slice(0, 256);
    let path = KJV_HD64;
    if (type !== 'F32') {
      path = join(dir, `kjv-${type}.gguf`);
      convertGguf(KJV_HD64, path, type);
    }
    const reference = await llamaCppLogProbs(path, ids, { kvType: 'f32', threads: 1 });
    const m = type === 'F32' ? model : await loadModel(path);
    try {
      const runner = await createModelRunner(m, { kvType: 'fp32', contextLength: 512, prefillChunk: 64 });
      const logits = await runner.prefill(ids, undefined, { allLogits: true });
      await runner.dispose();
      const V = m.hyper.vocabSize;
      const ours = ids.map((_, t) => logSoftmax(logits.subarray(t * V, (t + 1) * V)));
      const kl = meanKl(reference.logProbs, ours);
      const top5 = maxAbsLogProbDiffTopK(reference.logProbs, ours, 5);
      console.log(`kjv ${type}: mean KL(llama.cpp ‖ ours) ${kl.toExponential(2)}, max top-5 |Δ log p| ${top5.toExponential(2)} over ${ids.length} positions`);
      expect(kl).toBeLessThan(BOUNDS[type].kl);
      expect(top5).toBeLessThan(BOUNDS[type].top5);
      if (type === 'Q8_0') {
        const gguf = loadGgufModel(path);
        const exact = referenceForward(gguf).logits(ids).map((l) => logSoftmax(l));
        gguf.close();
        const theirs = meanKl(exact, reference.logProbs);
        const mine = meanKl(exact, ours);
        console.log(`kjv Q8_0: mean KL from the float64 reference forward (exact dequantisation): llama.cpp ${theirs.toExponential(2)}, ours ${mine.toExponential(2)}`);
        expect(mine).toBeLessThan(1.5 * theirs);
      }
    } finally {
      if (m !== model) m.close();
    }
  });
});
