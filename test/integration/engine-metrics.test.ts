// Metrics events through the real host: sampled while tokens stream and once at the end, with
// InfiniGen's per-layer selection figures when that policy is loaded.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StepMetrics } from '../../app/common/protocol.ts';
import { EngineClient } from '../../app/engine/client.ts';
import { haveSharedModel, STORIES_260K } from '../support/models.ts';

describe.runIf(haveSharedModel())('engine metrics on stories260K', () => {
  const cache = mkdtempSync(join(tmpdir(), 'longhand-cache-'));
  let engine: EngineClient;
  beforeAll(async () => {
    engine = await EngineClient.start({ env: { ...process.env, XDG_CACHE_HOME: cache } });
  });
  afterAll(async () => {
    await engine?.close();
    rmSync(cache, { recursive: true, force: true });
  });

  async function collect(maxTokens: number): Promise<StepMetrics[]> {
    const metrics: StepMetrics[] = [];
    for await (const event of engine.generate({ text: 'Once upon a time' }, { maxTokens, sampling: { temperature: 0 } as never })) {
      if (event.kind === 'metrics') metrics.push(event.metrics);
    }
    return metrics;
  }

  it('full attention: every layer reads every row', async () => {
    const info = await engine.load({ modelPath: STORIES_260K, contextLength: 512, threads: 1 });
    expect(info.policy).toBe('full');
    const metrics = await collect(60);
    const last = metrics.at(-1)!;
    expect(last).toMatchObject({ step: 60, policy: 'full', fetchRatio: 1, contextTokens: 5 + 59 });
    // 5 layers · 4 KV heads · 8 dims · K and V · 2 bytes (fp16) per token
    expect(last.bytesMovedPerToken).toBe(64 * 5 * 4 * 8 * 2 * 2);
    expect(last.layers).toHaveLength(5);
    expect(last.memory.poolBytes).toBeGreaterThan(0);
    expect(last.memory.rssBytes).toBeGreaterThan(0);
  });

  it('infinigen: sparse layers fetch a share of the context; dense layers everything', async () => {
    const info = await engine.load({ modelPath: STORIES_260K, contextLength: 512, threads: 1, policy: 'infinigen', inspect: true, infinigen: { alpha: 5, fetchCap: 0.2, denseLayers: 2 } });
    expect(info.policy).toBe('infinigen');
    const metrics = await collect(120);
    const last = metrics.at(-1)!;
    expect(last.policy).toBe('infinigen');
    const [l0, l1, ...sparse] = last.layers;
    expect(l0!.selected).toBe(l0!.candidates);
    expect(l1!.selected).toBe(l1!.candidates);
    for (const layer of sparse) {
      expect(layer.selected).toBeLessThanOrEqual(Math.floor(0.2 * layer.candidates));
      expect(layer.recall).not.toBeNull();
      // the heatmap's positions: the selected tokens of the step, ascending, inside the context
      expect(layer.positions!.length).toBeGreaterThan(0);
      expect(layer.positions!.length).toBeLessThanOrEqual(4 * layer.selected);
      expect([...layer.positions!].sort((a, b) => a - b)).toEqual(layer.positions);
      expect(layer.positions!.at(-1)!).toBeLessThan(last.contextTokens);
    }
    expect(l0!.positions).toBeUndefined();
    expect(last.fetchRatio).toBeLessThan(1);
    expect(last.reuseHitRate).not.toBeNull();
    expect(last.recall).toBeGreaterThan(0);
  });

  it.each(['streaming', 'h2o', 'quest', 'oracle'] as const)('%s: sparse layers keep a fixed share of the context', async (policy) => {
    const info = await engine.load({ modelPath: STORIES_260K, contextLength: 512, threads: 1, policy, sparse: { fetchCap: 0.25 } });
    expect(info.policy).toBe(policy);
    const last = (await collect(80)).at(-1)!;
    expect(last.policy).toBe(policy);
    for (const layer of last.layers.slice(2)) {
      expect(layer.selected).toBeGreaterThan(0);
      // quest keeps whole 16-token pages, so it may exceed the share by less than a page
      expect(layer.selected).toBeLessThanOrEqual(Math.floor(0.25 * layer.candidates) + (policy === 'quest' ? 16 : 0));
    }
    expect(last.fetchRatio).toBeLessThan(1);
  });

  it('refuses a policy the pool budget cannot run with a typed error (snapkv evicts nothing)', async () => {
    await expect(engine.load({ modelPath: STORIES_260K, policy: 'snapkv', poolBudgetBytes: 1 << 20 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/poolBudgetBytes/) });
  });
});

describe.runIf(haveSharedModel())('a pool budget smaller than the full cache', () => {
  it('still generates, evicts, stays within budget and says so in the metrics', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'longhand-cache-'));
    const engine = await EngineClient.start({ env: { ...process.env, XDG_CACHE_HOME: cache } });
    try {
      // full cache at 1,100 tokens: 640 bytes of fp16 K/V per token (+ bookkeeping); a quarter of it
      const budget = 220_352;
      await engine.load({ modelPath: STORIES_260K, contextLength: 1100, threads: 1, policy: 'infinigen', poolBudgetBytes: budget });
      let last: StepMetrics | undefined;
      let tokens = 0;
      for await (const event of engine.generate({ text: 'Once upon a time' }, { maxTokens: 600, stopOnEos: false, sampling: { temperature: 0 } })) {
        if (event.kind === 'metrics') last = event.metrics;
        if (event.kind === 'token') tokens++;
      }
      expect(tokens).toBe(600);
      expect(last!.memory.poolBytes).toBeLessThanOrEqual(budget);
      expect(last!.evictions).toBeGreaterThan(0);
      // the KV in RAM is what the pool holds, not the whole context
      expect(last!.memory.kvUsedBytes).toBeLessThanOrEqual(budget);
      expect(last!.contextTokens).toBe(4 + 600);
    } finally {
      await engine.close();
      rmSync(cache, { recursive: true, force: true });
    }
  });
});
