// The inspector's views of a model with sliding-window layers (issue 30), in the real browser: the
// real `longhand serve` (no model needed), the built renderer, Debian's Chromium through
// playwright-core. A recorded run of a Gemma-3-like model (5 window layers of 16 tokens : 1 global,
// layer kinds and the KV bytes split by kind as the engine reports them) is loaded from a file; the
// token map marks each layer row window or global, the recall table says each layer's kind, and the
// Memory view shows the window layers' rings + checkpoints as their own part. Screenshots go to
// test-results/e2e/window-*.png.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatBytes } from '../../renderer/src/ui/format.ts';
import { PROJECT_ROOT } from '../support/models.ts';
import { haveChromium, openApp, type AppSession } from './browser.ts';

const RESULTS = join(PROJECT_ROOT, 'test-results', 'e2e');
const enabled = haveChromium('window-layers');

const KINDS = [...Array.from({ length: 5 }, () => ({ kind: 'window', window: 16 })), { kind: 'global' }];
const BY_KIND = { window: 5 * 63 * 256, global: 340 * 256, checkpoints: 2 * 5 * 15 * 256 };

/** A run of 300 prompt + 40 generated tokens with 8 samples: window layers fetch their last 15 positions, the global layer sinks + a spread. */
function gemmaLikeRun(): string {
  const prompt = 300;
  const lines = [JSON.stringify({ record: 'longhand.run/1', requestId: 'gemma-like', policy: 'streaming', contextLength: 512, promptIds: Array.from({ length: prompt }, (_, i) => 3 + (i % 300)), pieces: Array.from({ length: prompt }, (_, i) => ` w${i % 97}`), tokens: Array.from({ length: 40 }, (_, i) => [5 + i, ` g${i}`]), kvLayers: KINDS })];
  for (let k = 1; k <= 8; k++) {
    const step = k * 5;
    const context = prompt + step;
    const layers = KINDS.map((kind, layer) => {
      const positions = kind.kind === 'window' ? Array.from({ length: 15 }, (_, i) => context - 16 + i) : [0, 1, 2, 3, ...Array.from({ length: 20 }, (_, i) => 10 + i * 14)];
      return { layer, selected: positions.length, candidates: context - 1, bytesMoved: positions.length * 256, reuseHits: 0, reuseMisses: positions.length, recall: kind.kind === 'window' ? 1 : 0.8, oracleRecall: kind.kind === 'window' ? 1 : 0.9, speculationMs: 0, gatherMs: 0, attentionMs: 0, positions };
    });
    const memory = { weightsBytes: 4e6, poolBytes: 3e5, poolBudgetBytes: 3e5, kvUsedBytes: BY_KIND.window + BY_KIND.global, partialKeyBytes: 0, stagedBytes: 0, rssBytes: 2e7, kvByKind: BY_KIND };
    lines.push(JSON.stringify({ requestId: 'gemma-like', step, contextTokens: context, contextLength: 512, policy: 'streaming', tokensPerS: 10, fetchRatio: 0.1, bytesMovedPerToken: 0, reuseHitRate: null, recall: 0.97, evictions: 0, timing: { denseMs: 1, attentionMs: 1, speculationMs: 0, gatherMs: 0, otherMs: 0 }, memory, layers }));
  }
  return `${lines.join('\n')}\n`;
}

describe.skipIf(!enabled)('inspector: window and global layers in the browser', () => {
  let app: AppSession | undefined;
  const page = () => app!.page;
  const inspector = () => page().getByRole('region', { name: 'Inspector' });
  const tab = async (name: string) => {
    await inspector().getByRole('tab', { name }).click();
    return inspector().getByRole('tabpanel', { name: `${name} view` });
  };

  beforeAll(async () => {
    mkdirSync(RESULTS, { recursive: true });
    app = await openApp('window', { width: 1280, height: 1200 });
  }, 300_000);

  afterAll(async () => {
    await app?.close();
  }, 30_000);

  it('token map rows, recall table and Memory view say which layers are window and which global', async () => {
    const file = join(app!.tmp, 'gemma-like.jsonl');
    writeFileSync(file, gemmaLikeRun());
    await page().getByRole('navigation', { name: 'Sections' }).getByRole('button', { name: 'Inspector', exact: true }).click();
    await inspector().getByLabel('JSON lines file').setInputFiles(file);

    const map = await tab('Token map');
    await expect.poll(() => map.getByLabel('Token map summary').textContent()).toContain('5 window (16) + 1 global layers');
    const labels = map.getByLabel('Token map layers');
    expect(await labels.locator('[data-kind="window"]').allTextContents()).toEqual(['layer 0 · window 16', 'layer 1 · window 16', 'layer 2 · window 16', 'layer 3 · window 16', 'layer 4 · window 16']);
    expect(await labels.locator('[data-kind="global"]').allTextContents()).toEqual(['layer 5 · global']);
    await map.screenshot({ path: join(RESULTS, 'window-token-map.png') });

    const recall = await tab('Recall');
    const table = recall.getByLabel('Recall averages');
    expect(await table.locator('tr[data-kind="window"]').count()).toBe(5);
    expect(await table.getByLabel('Recall layer 5').getAttribute('data-kind')).toBe('global');
    expect(await table.getByLabel('Recall layer 5').textContent()).toContain('global');
    await recall.screenshot({ path: join(RESULTS, 'window-recall.png') });

    const memory = await tab('Memory');
    await expect.poll(() => memory.locator('td[data-part="window"]').textContent()).toBe(formatBytes(BY_KIND.window + BY_KIND.checkpoints));
    expect(await memory.locator('td[data-part="kv"]').textContent()).toBe(formatBytes(BY_KIND.global));
    expect(await memory.getByText('KV rows, window layers (rings + checkpoints)').count()).toBeGreaterThan(0);
    await memory.screenshot({ path: join(RESULTS, 'window-memory.png') });
    expect(app!.pageErrors).toEqual([]);
  }, 120_000);
});
