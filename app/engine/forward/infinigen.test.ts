// Policy 'infinigen' on stories260K (llama, 5 layers, 8 query / 4 KV heads, head dim 8, p = 2):
//  - alpha huge + fetchCap 1 selects everything: greedy ids AND logits equal 'full' exactly
//    (the attention over staged rows is bit-identical to full attention then);
//  - skew calibration: self-generated from BOS when the prompt is short, cached per model hash,
//    read back from the cache, recomputed on request;
//  - accuracy at realistic knobs: a ~400-token text written greedily by 'full', teacher-forced
//    through both policies: top-1 agreement, perplexity ratio, mean fetch ratio (printed);
//  - per-step stats: fetch ratio, bytes, reuse hits, timings, recall (inspect), gather overlapping ORT.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGgufModel } from '../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { haveSharedModel, loadReferenceRuns, STORIES_260K } from '../../../test/support/models.ts';
import { argmax, logSoftmax } from '../../../test/support/reference-forward.ts';
import { createModelRunner, type StepStats, type ModelRunner } from './model-runner.ts';

const have = haveSharedModel();

describe.skipIf(!have)("policy 'infinigen' on stories260K", () => {
  let model: LoadedModel;
  let full: ModelRunner;
  let cacheDir: string;
  const prompt = have ? loadReferenceRuns().find((r) => r.prompt === 'Once upon a time')!.promptIds : [];
  let text: number[] = []; // prompt + 400 greedy tokens of 'full'
  const fullLogits: Float32Array[] = []; // [step] logits after text[0..prompt+i]

  beforeAll(async () => {
    model = loadGgufModel(STORIES_260K);
    cacheDir = mkdtempSync(path.join(os.tmpdir(), 'longhand-ig-'));
    full = await createModelRunner(model, { contextLength: 512 });
    let logits = await full.prefill(prompt);
    text = [...prompt];
    for (let i = 0; i < 400; i++) {
      fullLogits.push(logits);
      const id = argmax(logits);
      text.push(id);
      logits = await full.decode(id);
    }
  });

  afterAll(async () => {
    await full?.dispose();
    model?.close();
    rmSync(cacheDir, { recursive: true, force: true });
  });

  /** Teacher-forces `text` after the prompt; returns logits per step and the step stats. */
  async function teacherForce(r: ModelRunner): Promise<{ logits: Float32Array[]; stats: StepStats[] }> {
    r.reset();
    let l = await r.prefill(prompt);
    const logits: Float32Array[] = [];
    const stats: StepStats[] = [];
    for (let i = prompt.length; i < text.length; i++) {
      logits.push(l);
      l = await r.decode(text[i]!);
      const s = r.lastStepStats();
      if (s) stats.push(s);
    }
    return { logits, stats };
  }

  it('calibrates on self-generated text for a short prompt, caches A per model hash, reads it back, recalibrates on request', async () => {
    const a = await createModelRunner(model, { contextLength: 512, policy: 'infinigen', infinigen: { cacheDir } });
    await a.prefill(prompt);
    expect(a.skewSource).toBe('self-generated');
    expect(a.position).toBe(prompt.length); // the calibration run is forgotten
    await a.dispose();
    const b = await createModelRunner(model, { contextLength: 512, policy: 'infinigen', infinigen: { cacheDir } });
    await b.prefill(prompt);
    expect(b.skewSource).toBe('cache');
    await b.dispose();
    const c = await createModelRunner(model, { contextLength: 512, policy: 'infinigen', infinigen: { cacheDir, recalibrate: true } });
    await c.prefill(text.slice(0, 300)); // a long prompt calibrates on itself
    expect(c.skewSource).toBe('prompt');
    await c.dispose();
  });

  it('alpha huge, fetchCap 1: greedy ids and logits equal full exactly', async () => {
    const r = await createModelRunner(model, { contextLength: 512, policy: 'infinigen', infinigen: { cacheDir, alpha: 1e30, fetchCap: 1 } });
    let logits = await r.prefill(prompt);
    for (let i = 0; i < 200; i++) {
      expect(Buffer.from(logits.buffer).equals(Buffer.from(fullLogits[i]!.buffer)), `step ${i}`).toBe(true);
      const id = argmax(logits);
      expect(id).toBe(text[prompt.length + i]);
      logits = await r.decode(id);
      const s = r.lastStepStats()!;
      expect(s.fetchRatio).toBe(1);
    }
    await r.dispose();
  });

  it('accuracy vs full over a 400-token self-generated text (teacher-forced), alpha 2..8', async () => {
    const rows: string[] = [];
    const results: Record<number, { agree: number; pplRatio: number; fetch: number }> = {};
    const settings: [number, number][] = [[2, 0.3], [3, 0.3], [4, 0.3], [5, 0.3], [6, 0.3], [8, 0.3], [5, 1]];
    for (const [alpha, partialRatio] of settings) {
      const r = await createModelRunner(model, { contextLength: 512, policy: 'infinigen', infinigen: { cacheDir, alpha, partialRatio } });
      const { logits, stats } = await teacherForce(r);
      await r.dispose();
      let agree = 0;
      let nllFull = 0;
      let nllIg = 0;
      for (let i = 0; i < logits.length; i++) {
        const next = text[prompt.length + i]!;
        if (argmax(logits[i]!) === argmax(fullLogits[i]!)) agree++;
        nllIg -= logSoftmax(logits[i]!)[next]!;
        nllFull -= logSoftmax(fullLogits[i]!)[next]!;
      }
      const fetch = stats.reduce((a, s) => a + s.fetchRatio, 0) / stats.length;
      const pplRatio = Math.exp((nllIg - nllFull) / logits.length);
      results[partialRatio === 1 ? -alpha : alpha] = { agree: agree / logits.length, pplRatio, fetch };
      const hit = stats.reduce((a, s) => a + s.hits, 0) / Math.max(1, stats.reduce((a, s) => a + s.hits + s.misses, 0));
      rows.push(`alpha ${alpha}, r ${partialRatio}${partialRatio === 1 ? ' (control: exact scores, the cap alone)' : ''}: top-1 agreement ${(100 * agree / logits.length).toFixed(1)}%, perplexity ratio ${pplRatio.toFixed(4)}, mean fetch ratio (sparse layers) ${(100 * fetch).toFixed(1)}%, reuse hit rate ${(100 * hit).toFixed(1)}%`);
    }
    console.log(`infinigen vs full, stories260K, ${text.length - prompt.length} teacher-forced tokens, r 0.3 (p 2 of 8), cap 0.2, denseLayers 2:\n  ${rows.join('\n  ')}`);
    // Bounds we meet (measured: alpha 5 → 87.8% / 1.19 at 17% fetch). Far from the 97% / 2%:
    // with head dim 8, r 0.3 keeps 2 columns, and a 512-token model leaves little to skip.
    for (const a of [2, 3, 4, 5, 6, 8]) expect(results[a]!.fetch).toBeLessThanOrEqual(0.2 + 1e-9);
    expect(results[5]!.agree).toBeGreaterThanOrEqual(0.85);
    expect(results[5]!.pplRatio).toBeLessThanOrEqual(1.25);
    expect(results[8]!.agree).toBeGreaterThanOrEqual(results[2]!.agree); // a wider margin fetches more and agrees more
  });

  it('per-step stats: selected, candidates, bytes, reuse, timings, recall under inspect; the gather overlaps the ORT stage', async () => {
    const r = await createModelRunner(model, { contextLength: 512, policy: 'infinigen', infinigen: { cacheDir, inspect: true } });
    await r.prefill(prompt);
    let id = text[prompt.length]!;
    let s: StepStats | undefined;
    let overlapped = 0;
    let sparseLayers = 0;
    const recalls: number[] = [];
    for (let i = 0; i < 150; i++) {
      await r.decode(id);
      id = text[prompt.length + i + 1]!;
      s = r.lastStepStats()!;
      expect(s.layers.length).toBe(5);
      for (const l of s.layers) {
        expect(l.candidates).toBe(s.position);
        if (l.dense) {
          expect(l.selected).toBe(l.candidates);
          continue;
        }
        sparseLayers++;
        expect(l.selected).toBeLessThanOrEqual(Math.max(1, Math.floor(0.2 * l.candidates + 1e-9)));
        expect(l.hits + l.misses).toBe(4 * l.selected);
        expect(l.bytes).toBe(l.misses * 2 * 8 * 2);
        recalls.push(l.recall!);
        // the job started before the ORT stage of this layer ended: they ran at the same time
        if (l.jobStartNs! < l.stageEndNs!) overlapped++;
      }
    }
    const last = s!.layers.find((l) => !l.dense)!;
    console.log(
      `step at position ${s!.position}: layer ${last.layer}: n ${last.selected} of ${last.candidates}, hits ${last.hits}, misses ${last.misses}, ` +
        `spec ${last.speculationMs.toFixed(4)} ms, gather ${last.gatherMs.toFixed(4)} ms, wait ${last.waitMs.toFixed(4)} ms, attention ${last.attentionMs.toFixed(4)} ms; ` +
        `begin ${last.beginNs} ns, job ${last.jobStartNs}..${last.jobEndNs} ns, ORT stage ${last.stageStartNs}..${last.stageEndNs} ns; ` +
        `job started before its ORT stage ended in ${overlapped} of ${sparseLayers} layer-steps; mean recall ${(recalls.reduce((a, b) => a + b, 0) / recalls.length).toFixed(4)}`,
    );
    expect(Math.min(...recalls)).toBeGreaterThan(0);
    expect(Math.max(...recalls)).toBeLessThanOrEqual(1 + 1e-9);
    expect(overlapped).toBeGreaterThan(0);
    await r.dispose();
  });

  it('rejects OPT-only misuse and bad knobs; truncate and reset keep working', async () => {
    await expect(createModelRunner(model, { policy: 'infinigen', infinigen: { fetchCap: 0 } })).rejects.toThrow(/fetchCap/);
    const r = await createModelRunner(model, { contextLength: 512, policy: 'infinigen', infinigen: { cacheDir } });
    await r.prefill(prompt);
    for (let i = 0; i < 20; i++) await r.decode(text[prompt.length + i]!);
    r.truncate(prompt.length + 5);
    const a = await r.decode(text[prompt.length + 5]!);
    expect(a.length).toBe(r.vocabSize);
    r.reset();
    await r.prefill(prompt);
    await r.decode(text[prompt.length]!);
    await r.dispose();
  });
});
