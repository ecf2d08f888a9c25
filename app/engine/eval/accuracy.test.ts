// Eval logic on stories260K: full vs full is exact (agreement 100%, KL 0, ratio 1); InfiniGen with
// alpha huge and cap 1, streaming with window ≥ context, and h2o/quest/oracle/snapkv with a budget ≥
// the context all equal full exactly; a sparse setting is measurably different (snapkv: on a long
// prompt, since it compresses only the prompt); the CLI prints one JSON object and refuses bad arguments.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../cli/main.ts';
import { createModelRunner, type ModelRunner } from '../forward/model-runner.ts';
import { loadGgufModel } from '../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { haveSharedModel, STORIES_260K } from '../../../test/support/models.ts';
import { argmax, compareWithReference, firstDivergence, referenceLogits } from './accuracy.ts';
import { runnerPolicyOptions } from './run-eval.ts';

const have = haveSharedModel();

describe.skipIf(!have)('eval on stories260K', () => {
  let model: LoadedModel;
  let full: ModelRunner;
  let dir: string;
  const ids: number[] = [1];
  let ref: Float32Array[];

  beforeAll(async () => {
    model = loadGgufModel(STORIES_260K);
    dir = mkdtempSync(path.join(os.tmpdir(), 'longhand-eval-'));
    full = await createModelRunner(model, { contextLength: 256 });
    let l = await full.prefill(ids);
    for (let i = 0; i < 200; i++) {
      const id = argmax(l);
      ids.push(id);
      l = await full.decode(id);
    }
    ref = await referenceLogits(full, ids);
  });

  afterAll(async () => {
    await full?.dispose();
    model?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const exact = (r: { top1Agreement: number; meanKl: number; perplexityRatio: number }) => {
    expect(r.top1Agreement).toBe(1);
    expect(r.meanKl).toBe(0);
    expect(r.perplexityRatio).toBe(1);
  };

  it('full vs full (lockstep and recorded): agreement 100%, KL 0, perplexity ratio 1, fetch 1', async () => {
    const other = await createModelRunner(model, { contextLength: 256 });
    const a = await compareWithReference(other, full, ids, { hyper: model.hyper });
    exact(a);
    expect(a.positions).toBe(ids.length - 8 - 1);
    expect(a.fetchRatio).toBe(1);
    exact(await compareWithReference(other, ref, ids, { hyper: model.hyper }));
    const g = await firstDivergence(full, other, ids.slice(0, 8), 40);
    expect(g.firstDivergence).toBeNull();
    expect(g.reference).toEqual(ids.slice(8, 48));
    await other.dispose();
  });

  it('sparse policies that keep everything equal full exactly', async () => {
    const settings = [
      runnerPolicyOptions('infinigen', { alpha: 1e30, fetchCap: 1, cacheDir: dir }),
      runnerPolicyOptions('streaming', { window: 1000 }),
      runnerPolicyOptions('h2o', { budget: 1000 }),
      runnerPolicyOptions('quest', { budget: 1000 }),
      runnerPolicyOptions('oracle', { fetchCap: 1 }),
      runnerPolicyOptions('snapkv', { budget: 1000 }),
    ];
    for (const s of settings) {
      const r = await createModelRunner(model, { contextLength: 256, ...s });
      const res = await compareWithReference(r, ref, ids, { hyper: model.hyper });
      expect([s.policy, res.top1Agreement, res.meanKl, res.perplexityRatio]).toEqual([s.policy, 1, 0, 1]);
      expect(res.fetchRatio, s.policy).toBe(1);
      await r.dispose();
    }
  });

  it('at a 10% budget every policy fetches ~10% and differs from full', async () => {
    for (const policy of ['infinigen', 'streaming', 'h2o', 'quest', 'oracle'] as const) {
      const r = await createModelRunner(model, { contextLength: 256, ...runnerPolicyOptions(policy, { fetchCap: 0.1, cacheDir: dir }) });
      const res = await compareWithReference(r, ref, ids, { hyper: model.hyper });
      await r.dispose();
      expect(res.fetchRatio, policy).toBeLessThan(policy === 'quest' ? 0.3 : 0.12);
      expect(res.meanKl, policy).toBeGreaterThan(0);
      expect(res.top1Agreement, policy).toBeGreaterThan(0.5);
      expect(res.bytesPerToken).toBeGreaterThan(0);
    }
  });

  it('snapkv at 10% of a 150-token prompt: the prompt compressed, every generated token attended, differs from full', async () => {
    const r = await createModelRunner(model, { contextLength: 256, ...runnerPolicyOptions('snapkv', { fetchCap: 0.1 }) });
    const res = await compareWithReference(r, full, ids, { hyper: model.hyper, prefillTokens: 150 });
    await r.dispose();
    expect(res.positions).toBe(ids.length - 150 - 1);
    // step t keeps ⌊0.1·150⌋ = 15 prompt tokens + t generated of 150 + t: mean over t < 50 ≈ 0.22
    let want = 0;
    for (let t = 0; t < res.positions; t++) want += (15 + t) / (150 + t);
    expect(res.fetchRatio).toBeCloseTo(want / res.positions, 6);
    expect(res.meanKl).toBeGreaterThan(0);
    expect(res.top1Agreement).toBeGreaterThan(0.5);
  });

  it('longhand eval: one JSON object; usage errors exit 2', async () => {
    const text = path.join(dir, 'text.txt');
    writeFileSync(text, 'Once upon a time, there was a little dog named Max. Max liked to run in the park with his friend. '.repeat(3));
    let out = '';
    const io = { out: (t: string) => void (out += t), err: () => {} };
    expect(await main(['eval', '--model', STORIES_260K, '--text-file', text, '--policy', 'streaming', '--budget', '16', '--generate', '10', '--json'], io)).toBe(0);
    const o = JSON.parse(out);
    expect(o.policy).toBe('streaming');
    expect(o.accuracy.positions).toBe(o.tokens - 8 - 1);
    expect(o.generation.reference.length).toBe(10);
    let err = '';
    const io2 = { out: () => {}, err: (t: string) => void (err += t) };
    expect(await main(['eval', '--model', STORIES_260K, '--text-file', text, '--policy', 'lru'], io2)).toBe(2);
    expect(await main(['eval', '--model', STORIES_260K, '--text-file', text, '--policy', 'snapkv', '--pool-kernel', '4'], io2)).toBe(2);
    expect(await main(['eval', '--model', STORIES_260K, '--text-file', text, '--policy', 'h2o', '--fetch-cap', '2'], io2)).toBe(2);
    expect(await main(['eval', '--text-file', text, '--policy', 'h2o'], io2)).toBe(2);
    expect(err).toMatch(/--policy must be one of/);
    expect(err).toMatch(/--pool-kernel must be an odd/);
    out = '';
    expect(await main(['eval', '--model', STORIES_260K, '--text-file', text, '--policy', 'snapkv', '--prefill', '40', '--budget', '12', '--window', '4', '--pool-kernel', '3', '--json'], io)).toBe(0);
    const snap = JSON.parse(out);
    expect(snap.policy).toBe('snapkv');
    expect(snap.knobs).toMatchObject({ budget: 12, window: 4, poolKernel: 3 });
    expect(snap.accuracy.fetchRatio).toBeLessThan(1);
  });
});
