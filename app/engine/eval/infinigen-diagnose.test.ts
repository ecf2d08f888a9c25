// The diagnosis instruments of bench/infinigen-diagnose.mjs, on kjv-llama-hd64: the capture forward
// pass must be the engine's model (its logits equal the engine's), the recall figures must reduce to
// the obvious values where the answer is known (everything fetched: 1; all columns and the true
// query: InfiniGen's set is the full-width set), and InfiniGen's recall computed here from the
// reference rule must be what the engine's native speculator reports under `inspect`.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveSharedModel, KJV_HD64, KJV_REFERENCE_GREEDY, loadReferenceRuns } from '../../../test/support/models.ts';
import { createModelRunner } from '../forward/model-runner.ts';
import { SkewCalibrator, type SkewMatrices } from '../kv/skew.ts';
import { loadModel } from '../model/load-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { teacherForce } from './accuracy.ts';
import { AttentionCapturer, type AttentionCapture } from './attention-capture.ts';
import { columnsFromCapture, diagnoseText, partialCount, spearman, type HeadFigures } from './infinigen-diagnose.ts';

describe('spearman', () => {
  it('is 1 for the same order, −1 for the reverse, and ignores monotone rescaling', () => {
    expect(spearman([1, 2, 3, 4], [10, 20, 30, 40])).toBe(1);
    expect(spearman([1, 2, 3, 4], [4, 3, 2, 1])).toBe(-1);
    expect(spearman([0.1, 5, -2], [Math.exp(0.1), Math.exp(5), Math.exp(-2)])).toBe(1);
    // one swap of neighbours among 4: 1 − 6·2/(4·15) = 0.8
    expect(spearman([1, 2, 3, 4], [1, 3, 2, 4])).toBeCloseTo(0.8, 12);
  });
});

const have = haveSharedModel(KJV_HD64) && haveSharedModel(KJV_REFERENCE_GREEDY);

describe.skipIf(!have)('InfiniGen diagnosis instruments on kjv-llama-hd64', () => {
  let model: LoadedModel;
  let capture: AttentionCapture;
  let skew: SkewMatrices;
  let ids: number[];
  const P = 8;
  const dir = mkdtempSync(join(tmpdir(), 'longhand-diag-test-'));

  beforeAll(async () => {
    model = await loadModel(KJV_HD64);
    const ruth = loadReferenceRuns(KJV_REFERENCE_GREEDY)[2]!;
    ids = ruth.promptIds.slice(0, 300);
    capture = new AttentionCapturer(model, 512).run(ids, { logits: true });
    const { layers, heads, kvHeads, headDim } = model.hyper;
    const cal = new SkewCalibrator(layers, kvHeads, heads, headDim);
    for (let l = 0; l < layers; l++) cal.addQueries(l, capture.q[l]!, capture.tokens);
    skew = cal.finish();
  });
  afterAll(() => {
    model?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the capture pass computes the engine's logits (full policy, fp32 KV) within 1e-3", async () => {
    const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 512 });
    const logits = await runner.prefill(ids, undefined, { allLogits: true });
    await runner.dispose();
    let worst = 0;
    for (let i = 0; i < logits.length; i++) worst = Math.max(worst, Math.abs(logits[i]! - capture.logits[i]!));
    console.log(`attention capture: max |Δ logit| vs the engine over ${ids.length} positions = ${worst.toExponential(2)}`);
    expect(worst).toBeLessThan(1e-3);
  });

  it('everything fetched (cap 1, α huge): every recall is 1 and the fetch ratio is 1', () => {
    const p = partialCount(0.3, 64);
    const cols = columnsFromCapture(capture, skew, 0.3, P);
    const acc = diagnoseText(capture, skew, cols, p, { alpha: 1e9, cap: 1, denseLayers: 4, prefill: 200 });
    for (const f of acc) {
      expect(f.fetch / f.steps).toBeCloseTo(1, 12);
      for (const r of Object.values(f.recall)) expect(r / f.steps).toBeCloseTo(1, 9);
    }
  });

  it('all 64 columns and the true query: InfiniGen picks the full-width set, Spearman 1, energy 1; the oracle covers at least as much', () => {
    const cols = columnsFromCapture(capture, skew, 1, P);
    const acc = diagnoseText(capture, skew, cols, 64, { alpha: 5, cap: 0.2, denseLayers: 4, prefill: 200, source: 'true', sampleEvery: 16 });
    for (const f of acc) {
      expect(Math.abs(f.recall.infinigen - f.recall.specFull) / f.steps).toBeLessThan(1e-6);
      expect(Math.abs(f.recall.truePartial - f.recall.specFull) / f.steps).toBeLessThan(1e-6);
      expect(f.spearman.partial / f.sampled).toBeGreaterThan(0.99999);
      expect(f.energy.q / f.steps).toBeCloseTo(1, 5);
    }
    // per KV head the oracle maximises the group's summed mass: so the group's mean recall is >= any other set's
    for (let i = 0; i < acc.length; i += 2) {
      const a = acc[i]!;
      const b = acc[i + 1]!;
      expect(a.recall.oracle + b.recall.oracle).toBeGreaterThanOrEqual(a.recall.infinigen + b.recall.infinigen - 1e-9);
    }
  });

  it("InfiniGen's recall from the reference rule equals the engine's inspect recall per layer (same skew, same columns), within 1.5 points", async () => {
    // the engine calibrates on a prompt of >= 256 tokens itself: prefill the first 260 tokens, so its
    // skew and columns come from the same 260 tokens as ours
    const prompt = 260;
    const { layers, heads, kvHeads, headDim } = model.hyper;
    const cal = new SkewCalibrator(layers, kvHeads, heads, headDim);
    for (let l = 0; l < layers; l++) cal.addQueries(l, capture.q[l]!.subarray(0, prompt * heads * headDim), prompt);
    const promptSkew = cal.finish();
    const cols = columnsFromCapture(capture, promptSkew, 0.3, prompt);
    const acc: HeadFigures[] = diagnoseText(capture, promptSkew, cols, partialCount(0.3, 64), { alpha: 5, cap: 0.2, denseLayers: 2, prefill: prompt });
    const runner = await createModelRunner(model, { contextLength: 512, policy: 'infinigen', infinigen: { alpha: 5, fetchCap: 0.2, denseLayers: 2, inspect: true, cacheDir: dir, recalibrate: true } });
    const engine = new Float64Array(layers);
    let steps = 0;
    await teacherForce(runner, ids, { prefillTokens: prompt }, (_i, _l, stats) => {
      steps++;
      for (const l of stats!.layers) if (!l.dense) engine[l.layer] = engine[l.layer]! + l.recall!;
    });
    await runner.dispose();
    for (let l = 2; l < layers; l++) {
      const rows = acc.filter((f) => f.layer === l);
      const ours = rows.reduce((a, f) => a + f.recall.infinigen / f.steps, 0) / rows.length;
      const theirs = engine[l]! / steps;
      console.log(`layer ${l}: InfiniGen recall, reference rule ${(100 * ours).toFixed(2)}%, engine ${(100 * theirs).toFixed(2)}%`);
      expect(Math.abs(ours - theirs)).toBeLessThan(0.015);
    }
  });
});
