// int8 KV rows (kvType 'int8': one fp32 scale per row, native/src/kv_pool.h) on a real trained
// model: teacher-forced over llama.cpp's 200-token greedy references (shared/models), the int8
// runner's predictions against fp32 and fp16 runners (top-1 agreement, mean KL, perplexity), and
// greedy free runs int8 vs fp16. The figures are printed; the bounds say "close to fp16", and a
// second bound says int8 really is a coarser cache than fp16 (its KL vs fp32 is larger).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGgufModel } from '../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { haveSharedModel, loadReferenceRuns, STORIES_260K } from '../../../test/support/models.ts';
import { runEval } from '../eval/run-eval.ts';

const have = haveSharedModel();

describe.skipIf(!have)('int8 KV rows on stories260K', () => {
  let model: LoadedModel;
  const runs = have ? loadReferenceRuns() : [];

  beforeAll(() => {
    model = loadGgufModel(STORIES_260K);
  });
  afterAll(() => model?.close());

  for (const run of runs) {
    const label = JSON.stringify(run.prompt);
    it(`teacher-forced over the 200-token reference from ${label}: int8 stays close to fp32 and fp16 (top-1 >= 97%, KL < 2e-3)`, async () => {
      const ids = run.promptIds.concat(run.generatedIds);
      const int8VsFp32 = await runEval(model, ids, { policy: 'full', kvType: 'int8', referenceKvType: 'fp32' });
      const int8VsFp16 = await runEval(model, ids, { policy: 'full', kvType: 'int8', referenceKvType: 'fp16' });
      const fp16VsFp32 = await runEval(model, ids, { policy: 'full', kvType: 'fp16', referenceKvType: 'fp32' });
      for (const [name, r] of [['int8 vs fp32', int8VsFp32], ['int8 vs fp16', int8VsFp16], ['fp16 vs fp32', fp16VsFp32]] as const) {
        const a = r.accuracy;
        console.log(
          `${label} ${name}: ${a.positions} positions, top-1 agreement ${(100 * a.top1Agreement).toFixed(2)}%, mean KL ${a.meanKl.toExponential(3)} nats, ` +
            `perplexity ${a.perplexity.toFixed(4)} (reference ${a.referencePerplexity.toFixed(4)}), bytes/token ${a.bytesPerToken.toFixed(0)}`,
        );
        expect(r.kvType).toBe(name.slice(0, 4));
      }
      expect(int8VsFp32.accuracy.positions).toBeGreaterThanOrEqual(190);
      for (const r of [int8VsFp32, int8VsFp16]) {
        expect(r.accuracy.top1Agreement).toBeGreaterThanOrEqual(0.97);
        expect(r.accuracy.meanKl).toBeLessThan(2e-3);
        expect(Math.abs(r.accuracy.perplexityRatio - 1)).toBeLessThan(0.01);
      }
      // int8 is coarser than fp16: its distance from fp32 is larger than fp16's (not a disguised fp16 cache)
      expect(int8VsFp32.accuracy.meanKl).toBeGreaterThan(fp16VsFp32.accuracy.meanKl);
      // bytes per token: an int8 row is d + 4 bytes (its scale), an fp16 row 2d (stories260K: d = 8, so 12 vs 16)
      const d = model.hyper.headDim;
      expect(int8VsFp16.accuracy.bytesPerToken).toBeCloseTo((fp16VsFp32.accuracy.bytesPerToken * (d + 4)) / (2 * d), 6);
    }, 120_000);
  }

  it('greedy free run of 200 tokens: int8 follows fp16 for most of the way', async () => {
    const run = runs[0]!;
    const ids = run.promptIds.concat(run.generatedIds);
    const r = await runEval(model, ids, { policy: 'full', kvType: 'int8', referenceKvType: 'fp16', prefillTokens: run.promptIds.length, generate: 200 });
    const g = r.generation!;
    const same = g.candidate.filter((id, i) => id === g.reference[i]).length;
    console.log(`greedy from ${JSON.stringify(run.prompt)}, int8 vs fp16: first divergence ${g.firstDivergence ?? 'none'} of ${g.tokens}, ${same} positions equal`);
    expect(g.tokens).toBe(200);
    expect(g.firstDivergence === null || g.firstDivergence >= 50).toBe(true);
  }, 120_000);
});
