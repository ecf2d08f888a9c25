// InfiniGen on gpt-oss, held against the reference rule (issue 31: "InfiniGen's accuracy on the
// gpt-oss-like fixture with sinks equals the reference rule's"), as infinigen-diagnose.test.ts holds
// it on kjv-llama-hd64:
//   - the reference: a TypeScript gpt-oss forward pass (gpt-oss-capture.ts: biases, window layers,
//     the sink logit in every softmax's denominator, SwiGLU-OAI experts with top-4 softmax routing,
//     YaRN) computes the engine's logits; the same pass without the sink term does not;
//   - from the q, k and speculation queries it records, the reference rule (select-reference.ts via
//     infinigen-diagnose.ts: skew from the prompt's queries, the partial columns, the α/cap count,
//     the group's top-n) gives per InfiniGen layer the share of true attention mass its selection
//     covers; the engine's InfiniGen under `inspect` (its native speculator, the sinks in its
//     attention) must report the same share per layer, within 1.5 points. InfiniGen selects on the
//     full layers (1 and 3); the window layers run their band whatever the policy.
// The recall counts the tokens' mass only (the sink is attended by every selection: native/index.d.ts
// Speculator.recall); the sinks still decide it, through every earlier layer's output.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { gptOssGgufFixture } from '../../../test/fixtures/families/gpt-oss.ts';
import { createModelRunner } from '../forward/model-runner.ts';
import { SkewCalibrator } from '../kv/skew.ts';
import { loadModel } from '../model/load-model.ts';
import { createTokenizer } from '../model/tokenizer/tokenizer.ts';
import { teacherForce } from './accuracy.ts';
import { GptOssCapturer } from './gpt-oss-capture.ts';
import { columnsFromCapture, diagnoseText, partialCount, type HeadFigures } from './infinigen-diagnose.ts';

const TEXT =
  '<|start|>user<|message|>' +
  'The old lighthouse keeper climbed the spiral stairs every evening, counting each of the one hundred and twelve steps, and wrote in his log what the sea had done that day. '.repeat(8) +
  '<|end|><|start|>assistant';

const dir = mkdtempSync(join(tmpdir(), 'longhand-gpt-oss-ig-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('InfiniGen on gpt-oss against the reference rule', () => {
  it("the reference pass computes the engine's logits (with its sinks; without them it does not), and InfiniGen's recall per layer is the reference rule's within 1.5 points", async () => {
    const model = await loadModel(gptOssGgufFixture('F32'));
    try {
      const tokenizer = await createTokenizer(model.tokenizer);
      const prompt = tokenizer.encode(TEXT, { parseSpecial: true });
      expect(prompt.length).toBeGreaterThanOrEqual(260); // the engine calibrates its skew on a prompt of >= 256 tokens
      const P = prompt.length;
      // the text: the prompt and 24 greedy tokens of `full`
      const full = await createModelRunner(model, { kvType: 'fp32', contextLength: 512, prefillChunk: 64 });
      const ids = [...prompt];
      let logits = await full.prefill(prompt);
      for (let i = 0; i < 24; i++) {
        let best = 0;
        for (let j = 1; j < logits.length; j++) if (logits[j]! > logits[best]!) best = j;
        ids.push(best);
        logits = await full.decode(best);
      }
      full.reset();
      const engineLogits = await full.prefill(ids, undefined, { allLogits: true });
      await full.dispose();
      const V = model.hyper.vocabSize;
      const at = [P - 1, ids.length - 1];
      const capturer = new GptOssCapturer(model, 512);
      const capture = capturer.run(ids, { logitsAt: at });
      // without the sink term (over the prompt only: the gap is already there at its end)
      const noSinks = capturer.run(ids.slice(0, P), { logitsAt: [P - 1], sinks: false });
      const gap = (c: Map<number, Float32Array>): number => {
        let worst = 0;
        for (const t of c.keys()) {
          const ours = c.get(t)!;
          for (let i = 0; i < V; i++) worst = Math.max(worst, Math.abs(ours[i]! - engineLogits[t * V + i]!));
        }
        return worst;
      };
      const withGap = gap(capture.logitsAt);
      const withoutGap = gap(noSinks.logitsAt);
      console.log(`gpt-oss reference pass vs the engine: max |Δ logit| ${withGap.toExponential(2)} with the sinks, ${withoutGap.toExponential(2)} without (positions ${at.join(', ')}; without: ${P - 1})`);
      expect(withGap).toBeLessThan(1e-3);
      expect(withoutGap).toBeGreaterThan(1e-1);

      // the reference rule on the reference pass's queries and keys, skew and columns from the prompt
      const { layers, heads, kvHeads, headDim } = model.hyper;
      const cal = new SkewCalibrator(layers, kvHeads, heads, headDim);
      for (let l = 0; l < layers; l++) cal.addQueries(l, capture.q[l]!.subarray(0, P * heads * headDim), P);
      const skew = cal.finish();
      const cols = columnsFromCapture(capture, skew, 0.3, P);
      const acc: HeadFigures[] = diagnoseText(capture, skew, cols, partialCount(0.3, headDim), { alpha: 5, cap: 0.2, denseLayers: 1, prefill: P });
      const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 512, prefillChunk: 64, policy: 'infinigen', infinigen: { alpha: 5, fetchCap: 0.2, denseLayers: 1, inspect: true, cacheDir: dir, recalibrate: true } });
      const engine = new Float64Array(layers);
      const counted = new Float64Array(layers);
      let fetch = 0;
      await teacherForce(runner, ids, { prefillTokens: P }, (_i, _l, stats) => {
        for (const s of stats!.layers) {
          if (s.dense || s.recall === undefined) continue;
          engine[s.layer] = engine[s.layer]! + s.recall;
          counted[s.layer] = counted[s.layer]! + 1;
          fetch += s.fetchRatio;
        }
      });
      await runner.dispose();
      const sparse = [...counted.keys()].filter((l) => counted[l]! > 0);
      expect(sparse).toEqual([1, 3]);
      for (const l of sparse) {
        const rows = acc.filter((f) => f.layer === l);
        const ours = rows.reduce((a, f) => a + f.recall.infinigen / f.steps, 0) / rows.length;
        const theirs = engine[l]! / counted[l]!;
        console.log(`gpt-oss layer ${l}: InfiniGen recall, reference rule ${(100 * ours).toFixed(2)}%, engine ${(100 * theirs).toFixed(2)}% (mean fetch ratio ${(fetch / counted.reduce((a, b) => a + b, 0)).toFixed(3)})`);
        expect(Math.abs(ours - theirs)).toBeLessThan(0.015);
      }
    } finally {
      model.close();
    }
  }, 300_000);
});
