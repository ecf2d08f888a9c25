// The pool's byte budget with eviction on stories260K (ARCHITECTURE.md §5): a 1,000-token greedy
// generation under policy 'infinigen' with a quarter of the full cache's bytes completes, evicts,
// and the pool never grows past the budget (figures printed); a prompt longer than the budget's
// capacity is prefilled by evicting (counted), under 'full'; the comparison policies refuse a budget.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGgufModel } from '../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { haveSharedModel, loadReferenceRuns, STORIES_260K } from '../../../test/support/models.ts';
import { argmax } from '../../../test/support/reference-forward.ts';
import { createModelRunner } from './model-runner.ts';

const have = haveSharedModel();
const CONTEXT = 1100;

describe.skipIf(!have)('KV pool byte budget with eviction on stories260K', () => {
  let model: LoadedModel;
  let cacheDir: string;
  let fullBytes = 0;
  const prompt = have ? loadReferenceRuns().find((r) => r.prompt === 'Once upon a time')!.promptIds : [];
  let generated: number[] = [];

  beforeAll(async () => {
    model = loadGgufModel(STORIES_260K);
    cacheDir = mkdtempSync(path.join(os.tmpdir(), 'longhand-evict-'));
    const probe = await createModelRunner(model, { contextLength: CONTEXT, policy: 'infinigen', infinigen: { cacheDir } });
    fullBytes = probe.poolBytes;
    await probe.dispose();
  });

  afterAll(() => {
    model?.close();
    rmSync(cacheDir, { recursive: true, force: true });
  });

  it("'infinigen', budget = 1/4 of the full cache: 1,000 greedy tokens, evictions > 0, pool within budget", async () => {
    const budget = Math.floor(fullBytes / 4);
    const r = await createModelRunner(model, { contextLength: CONTEXT, policy: 'infinigen', infinigen: { cacheDir }, poolBudgetBytes: budget });
    try {
      expect(r.poolBytes).toBeLessThanOrEqual(budget);
      expect(r.poolCapacityTokens).toBeLessThan(CONTEXT / 4 + 1);
      const t0 = performance.now();
      let logits = await r.prefill(prompt);
      const ids: number[] = [];
      let fetch = 0;
      let sparseSteps = 0;
      let lastTotal = 0;
      for (let i = 0; i < 1000; i++) {
        const id = argmax(logits);
        ids.push(id);
        logits = await r.decode(id);
        expect(r.poolBytes).toBeLessThanOrEqual(budget);
        const s = r.lastStepStats();
        if (s?.evictions) {
          expect(s.evictions.total).toBeGreaterThanOrEqual(lastTotal);
          lastTotal = s.evictions.total;
          fetch += s.fetchRatio;
          sparseSteps++;
        }
      }
      const ms = performance.now() - t0;
      generated = ids;
      const perLayer = r.evictions();
      const total = perLayer.reduce((a, b) => a + b, 0);
      console.log(
        'budgeted infinigen run',
        JSON.stringify({ fullCacheBytes: fullBytes, budget, poolBytes: r.poolBytes, capacityTokens: r.poolCapacityTokens, position: r.position, evictionsPerLayer: perLayer, evictionsTotal: total, meanFetchRatio: +(fetch / Math.max(1, sparseSteps)).toFixed(3), ms: Math.round(ms) }),
      );
      expect(r.position).toBe(prompt.length + 1000);
      expect(total).toBeGreaterThan(0);
      expect(lastTotal).toBe(total);
      // every layer holds exactly its capacity and has evicted the rest
      for (const n of perLayer) expect(n).toBe(prompt.length + 1000 - r.poolCapacityTokens);
      expect(new Set(ids).size).toBeGreaterThan(20); // still writing text, not one id
    } finally {
      await r.dispose();
    }
  });

  it("'full', a prompt longer than the budget's capacity: prefill evicts oldest-first outside sinks + window, counted", async () => {
    const budget = Math.floor(fullBytes / 4);
    const r = await createModelRunner(model, { contextLength: CONTEXT, poolBudgetBytes: budget });
    try {
      const long = [...prompt, ...generated].slice(0, 600);
      const cap = r.poolCapacityTokens;
      expect(long.length).toBeGreaterThan(cap);
      const logits = await r.prefill(long);
      expect(logits.length).toBe(r.vocabSize);
      expect(r.position).toBe(long.length);
      expect(r.poolBytes).toBeLessThanOrEqual(budget);
      for (const n of r.evictions()) expect(n).toBe(long.length - cap);
      await r.decode(argmax(logits));
      for (const n of r.evictions()) expect(n).toBe(long.length + 1 - cap);
      r.truncate(long.length);
      expect(r.position).toBe(long.length);
      r.reset();
      expect(r.evictions().every((n) => n === 0)).toBe(true);
    } finally {
      await r.dispose();
    }
  });

  it('the comparison policies refuse a budget (not supported yet)', async () => {
    await expect(createModelRunner(model, { contextLength: CONTEXT, policy: 'h2o', poolBudgetBytes: 1 << 20 })).rejects.toThrow(/poolBudgetBytes/);
  });
});
