// runner.appendRandomContextForBenchmark (bench/long-context.mjs --fill random): it really adds
// rows — the position and every layer's pool length move, decode over them runs and its attention
// sees them (the logits change), InfiniGen's candidates count them — it is seeded (same seed, same
// logits), and it refuses what it cannot do (past the context, an evicting pool).
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGgufModel } from '../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { haveSharedModel, STORIES_260K } from '../../../test/support/models.ts';
import { createModelRunner } from './model-runner.ts';

const have = haveSharedModel();

describe.skipIf(!have)('appendRandomContextForBenchmark', () => {
  let model: LoadedModel;
  let cacheDir: string;
  beforeAll(() => {
    model = loadGgufModel(STORIES_260K);
    cacheDir = mkdtempSync(path.join(os.tmpdir(), 'longhand-fill-'));
  });
  afterAll(() => {
    model?.close();
    rmSync(cacheDir, { recursive: true, force: true });
  });

  it('adds seeded rows that decode attends over; infinigen counts them as candidates', async () => {
    const prompt = [1, 403, 407, 261, 378, 186, 42, 17];
    const logitsAfter = async (seed: number | undefined, policy: 'full' | 'infinigen') => {
      const r = await createModelRunner(model, { contextLength: 1024, policy, infinigen: { cacheDir, fetchCap: 0.1 } });
      try {
        await r.prefill(prompt);
        if (seed !== undefined) r.appendRandomContextForBenchmark(600, seed);
        const logits = await r.decode(13);
        return { logits, position: r.position, stats: r.lastStepStats() };
      } finally {
        await r.dispose();
      }
    };
    const plain = await logitsAfter(undefined, 'full');
    const a = await logitsAfter(7, 'full');
    const b = await logitsAfter(7, 'full');
    const c = await logitsAfter(8, 'full');
    expect(plain.position).toBe(prompt.length + 1);
    expect(a.position).toBe(prompt.length + 600 + 1);
    expect(Array.from(a.logits)).toEqual(Array.from(b.logits)); // seeded
    const diff = (x: Float32Array, y: Float32Array) => x.reduce((m, v, i) => Math.max(m, Math.abs(v - y[i]!)), 0);
    expect(diff(a.logits, plain.logits)).toBeGreaterThan(1e-3); // the rows are attended
    expect(diff(a.logits, c.logits)).toBeGreaterThan(1e-6); // and the seed decides them
    const ig = await logitsAfter(7, 'infinigen');
    const sparse = ig.stats!.layers.filter((l) => !l.dense);
    expect(sparse.length).toBeGreaterThan(0);
    for (const l of sparse) {
      expect(l.candidates).toBe(prompt.length + 600);
      expect(l.selected).toBeLessThanOrEqual(Math.floor(0.1 * l.candidates));
    }
  });

  it('refuses to pass the context length or to fill an evicting pool', async () => {
    const r = await createModelRunner(model, { contextLength: 64 });
    await r.prefill([1, 2, 3]);
    expect(() => r.appendRandomContextForBenchmark(62, 1)).toThrow(RangeError);
    expect(r.position).toBe(3);
    await r.dispose();
    const e = await createModelRunner(model, { contextLength: 256, poolBudgetBytes: 64 * 5 * 4 * 8 * 2 * 2 * 4 });
    expect(() => e.appendRandomContextForBenchmark(10, 1)).toThrow(/eviction/);
    await e.dispose();
  });
});
