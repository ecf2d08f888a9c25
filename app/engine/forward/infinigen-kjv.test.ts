// InfiniGen on kjv-llama-hd64 (head dim 64, GQA 4/2), every denseLayers the accuracy table reports
// (0, 1, 2 of 6 layers). denseLayers 0 has no layer before layer 0 to speculate from: layer 0 selects
// with its own query (it used to fail with NATIVE_BAD_ARGUMENT, the speculator never having begun
// layer 0). With cap 1 and an α no score gap reaches, every token is selected, so the logits must be
// full's (the same rows in the same order).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveSharedModel, KJV_HD64, KJV_REFERENCE_GREEDY, loadReferenceRuns } from '../../../test/support/models.ts';
import { loadModel } from '../model/load-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { createModelRunner } from './model-runner.ts';

const have = haveSharedModel(KJV_HD64) && haveSharedModel(KJV_REFERENCE_GREEDY);

describe.skipIf(!have)('InfiniGen on kjv-llama-hd64 at denseLayers 0, 1, 2', () => {
  let model: LoadedModel;
  let ids: number[];
  const dir = mkdtempSync(join(tmpdir(), 'longhand-ig-kjv-'));
  beforeAll(async () => {
    model = await loadModel(KJV_HD64);
    const run = loadReferenceRuns(KJV_REFERENCE_GREEDY)[0]!;
    ids = [...run.promptIds, ...run.generatedIds].slice(0, 120);
  });
  afterAll(() => {
    model?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Prefill the first 9 ids, then decode the rest teacher-forced; the logits of every step and the last step's figures. */
  async function decodeAll(options: Parameters<typeof createModelRunner>[1]) {
    const r = await createModelRunner(model, options);
    await r.prefill(ids.slice(0, 9));
    const logits: Float32Array[] = [];
    for (let t = 9; t < ids.length; t++) logits.push((await r.decode(ids[t]!)).slice());
    const stats = r.lastStepStats();
    await r.dispose();
    return { logits, stats };
  }

  it.each([0, 1, 2])('denseLayers %i: everything selected (cap 1, α 1e9) gives full\'s logits; at cap 0.2 layers >= denseLayers fetch <= 20%', async (denseLayers) => {
    const full = await decodeAll({ kvType: 'fp32', contextLength: 256 });
    const all = await decodeAll({ kvType: 'fp32', contextLength: 256, policy: 'infinigen', infinigen: { alpha: 1e9, fetchCap: 1, denseLayers, cacheDir: dir } });
    let worst = 0;
    for (let s = 0; s < full.logits.length; s++) for (let j = 0; j < full.logits[s]!.length; j++) worst = Math.max(worst, Math.abs(full.logits[s]![j]! - all.logits[s]![j]!));
    expect(worst).toBeLessThan(1e-4);
    const sparse = await decodeAll({ kvType: 'fp32', contextLength: 256, policy: 'infinigen', infinigen: { alpha: 5, fetchCap: 0.2, denseLayers, cacheDir: dir } });
    const layers = sparse.stats!.layers;
    expect(layers.map((l) => l.dense)).toEqual([0, 1, 2, 3, 4, 5].map((l) => l < denseLayers));
    for (const l of layers) if (!l.dense) expect(l.selected).toBeLessThanOrEqual(Math.floor(0.2 * l.candidates));
    console.log(`denseLayers ${denseLayers}: all-selected max |Δ logit| vs full ${worst.toExponential(2)}; last step fetch per sparse layer ${layers.filter((l) => !l.dense).map((l) => l.fetchRatio.toFixed(3)).join(' ')}`);
  });

  it('speculation inline (the job inside begin(), on the runner\'s threads) gives the side thread\'s logits bit for bit and the same selections', async () => {
    const run = async (speculation: 'side-thread' | 'inline', threads: number) => {
      const r = await createModelRunner(model, { kvType: 'fp16', contextLength: 256, threads, policy: 'infinigen', infinigen: { alpha: 5, fetchCap: 0.2, denseLayers: 1, cacheDir: dir, speculation } });
      const placement = r.speculationPlacement;
      await r.prefill(ids.slice(0, 40));
      const logits: Float32Array[] = [];
      const selected: string[] = [];
      for (let t = 40; t < ids.length; t++) {
        logits.push((await r.decode(ids[t]!)).slice());
        selected.push(JSON.stringify(Array.from({ length: 6 }, (_, l) => r.selectedPositions(l))));
      }
      const sparse = r.lastStepStats()!.layers.filter((l) => !l.dense);
      await r.dispose();
      return { logits, selected, placement, sparse };
    };
    const side = await run('side-thread', 2);
    expect(side.placement).toBe('side-thread');
    for (const threads of [1, 2]) {
      const inline = await run('inline', threads);
      expect(inline.placement).toBe('inline');
      expect(inline.selected).toEqual(side.selected);
      for (let s = 0; s < side.logits.length; s++) expect(Buffer.from(inline.logits[s]!.buffer)).toEqual(Buffer.from(side.logits[s]!.buffer));
      // inline: begin() returned after the job, so attend() never waits for it
      for (const l of inline.sparse) expect(l.waitMs).toBeLessThan(0.5);
    }
    expect(side.sparse.some((l) => l.selected < l.candidates)).toBe(true); // a real selection, not everything
  });
});
