// The inspector's Routing view end to end (issue 31): the real `longhand serve`, the built
// renderer, Debian's Chromium through playwright-core, and the Qwen3-MoE-like F32 fixture (real
// Qwen3 tokenizer, 3 layers of 16 experts, top 4; test/fixtures/families/qwen3moe.ts) loaded from
// the Models view. A user writes a short draft and presses Continue; the Inspector's Routing tab
// then shows the token × layer map and each layer's expert load. Every figure on the page is
// checked against the run's own routing as the JSON lines export holds it (the engine's routing
// events): the positions routed, each layer's experts used and tokens routed, the busiest expert,
// and a hovered cell's experts. Screenshots go to test-results/e2e/ and, with
// LONGHAND_UPDATE_SCREENSHOTS=1, to assets/screenshots/inspector-routing.png.
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cellExperts, expertLoad, parseRouting, type RunRouting } from '../../renderer/src/features/inspector/routing.ts';
import { qwen3moeGgufFixture } from '../fixtures/families/qwen3moe.ts';
import { PROJECT_ROOT } from '../support/models.ts';
import { haveChromium, loadModel, nav, openApp, typeDocument, waitForStop, type AppSession } from './browser.ts';

// page.evaluate callbacks run in Chromium; the root tsconfig has no DOM lib.
interface PageRect { left: number; top: number; width: number; height: number }

const RESULTS = join(PROJECT_ROOT, 'test-results', 'e2e');
const README_SCREENSHOTS = join(PROJECT_ROOT, 'assets', 'screenshots');
const DRAFT = 'The lighthouse keeper counted the ships that passed each night, and wrote their names in a book that nobody read. One winter';

const enabled = haveChromium('routing');

describe.skipIf(!enabled)('inspector: the routing of a mixture-of-experts model in the browser', () => {
  let app: AppSession | undefined;
  const page = () => app!.page;
  const inspector = () => page().getByRole('region', { name: 'Inspector' });

  beforeAll(async () => {
    mkdirSync(RESULTS, { recursive: true });
    app = await openApp('routing', { width: 1280, height: 1100 });
  }, 300_000);

  afterAll(async () => {
    await app?.close();
  }, 30_000);

  it('a Continue on Qwen3-MoE: the map and the expert load show the run’s routing', async () => {
    await loadModel(page(), 512, qwen3moeGgufFixture('F32'));
    await typeDocument(page(), DRAFT);
    await page().getByRole('button', { name: 'Continue writing' }).click();
    expect(await waitForStop(page())).not.toBe('error');

    await nav(page(), 'Inspector').click();
    await inspector().getByRole('tab', { name: 'Routing' }).click();
    const view = inspector().getByRole('tabpanel', { name: 'Routing view' });
    await expect.poll(() => view.getByLabel('Routing summary').textContent()).toContain('3 layers with experts · 16 experts each, 4 per token');

    // the run as the export writes it: its routing is what the engine's routing events said
    const download = page().waitForEvent('download');
    await inspector().getByRole('button', { name: 'Export JSON lines' }).click();
    const file = join(app!.tmp, 'runs.jsonl');
    await (await download).saveAs(file);
    const runLine = readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>).find((o) => o.record === 'longhand.run/1')!;
    const routing = parseRouting(runLine.routing) as RunRouting;
    const promptTokens = (runLine.promptIds as number[]).length;
    const generated = (runLine.tokens as unknown[]).length;
    expect(generated).toBeGreaterThan(1);
    expect(routing.layers).toEqual([0, 1, 2]);
    // every prompt token and every generated one but the last (sampled, never run) was routed
    const load = expertLoad(routing);
    expect(load.tokens).toBe(promptTokens + generated - 1);
    expect(await view.locator('[data-field="routed"]').first().textContent()).toBe(String(load.tokens));

    const rows = view.getByRole('table', { name: 'Expert load' }).locator('tbody tr');
    expect(await rows.count()).toBe(3);
    for (let li = 0; li < 3; li++) {
      const row = rows.nth(li);
      expect(await row.getAttribute('data-layer')).toBe(String(li));
      expect(await row.locator('[data-field="used"]').textContent()).toBe(`${load.used[li]} of 16`);
      expect(await row.locator('[data-field="routed"]').textContent()).toBe(load.routed[li]!.toLocaleString('en-US'));
      expect(await row.locator('[data-field="busiest"]').textContent()).toContain(`${load.busiest[li]!.expert} (${(load.busiest[li]!.share * 100).toFixed(1)}%)`);
      expect(load.used[li]).toBeGreaterThan(4); // a real router spreads a draft over more experts than one token's four
    }

    // hover the cell of the first generated token in the middle layer
    const canvas = view.getByRole('img', { name: 'Top expert per position and layer' });
    const box = (await canvas.evaluate((el) => (el as unknown as { getBoundingClientRect(): PageRect }).getBoundingClientRect())) as PageRect;
    const positions = Number(await canvas.getAttribute('width'));
    const position = promptTokens;
    await page().mouse.move(box.left + ((position + 0.5) / positions) * box.width, box.top + (1.5 / 3) * box.height);
    const cell = view.getByLabel('Routing cell');
    await expect.poll(() => cell.locator('[data-field="position"]').textContent()).toBe(String(position));
    expect(await cell.locator('[data-field="layer"]').textContent()).toBe('1');
    expect(await cell.locator('[data-field="experts"]').textContent()).toBe(cellExperts(routing, position, 1)!.join(', '));

    await view.screenshot({ path: join(RESULTS, 'inspector-routing.png') });
    if (process.env.LONGHAND_UPDATE_SCREENSHOTS === '1') copyFileSync(join(RESULTS, 'inspector-routing.png'), join(README_SCREENSHOTS, 'inspector-routing.png'));
    expect(app!.pageErrors).toEqual([]);
  }, 240_000);
});
