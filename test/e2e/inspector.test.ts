// The cache inspector end to end (issue 13): the real `longhand serve` on kjv-llama-hd64, the
// built renderer, Debian's Chromium through playwright-core. From the Inspector's A/B tab a user
// compares infinigen (A) and h2o (B) over a held-out passage (Jonah 1, not in the model's training
// text), 300 greedy tokens each — once with the inspector closed (the Writer on screen while it
// runs) and once with the token map open and updating — then opens every view of run A, hovers a
// token and checks the tooltip against the exported metrics JSON, reads the recall, memory and A/B
// tables against the same file, clears the inspector and loads the file back (offline), and
// finally loads a synthetic 32,768-position run and measures the token map's frames per second
// while the pointer sweeps it (reported; timings are benches, not tests). Screenshots go to test-results/e2e/ and, with
// LONGHAND_UPDATE_SCREENSHOTS=1, to assets/screenshots/inspector-*.png.
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LayerMetrics, StepMetrics } from '../../app/common/protocol.ts';
import { ensureRenderer } from '../../app/server/renderer-build.ts';
import { haveSharedModel, KJV_EVAL_DIR, KJV_HD64, PROJECT_ROOT } from '../support/models.ts';
import { firstLine } from '../support/serve-client.ts';
import { spawnServe, stopServe } from './browser.ts';

// page.evaluate callbacks run in Chromium; the root tsconfig has no DOM lib.
interface PageRect { left: number; top: number; width: number; height: number }
interface PageCanvas { getBoundingClientRect(): PageRect; dispatchEvent(event: unknown): boolean }
declare const document: { querySelector(selector: string): PageCanvas | null };
declare const MouseEvent: new (type: string, init: Record<string, unknown>) => unknown;
declare function requestAnimationFrame(callback: (now: number) => void): number;

const CHROMIUM = process.env.LONGHAND_CHROMIUM ?? '/usr/bin/chromium';
const RESULTS = join(PROJECT_ROOT, 'test-results', 'e2e');
const README_SCREENSHOTS = join(PROJECT_ROOT, 'assets', 'screenshots');
const README_SET = ['inspector-token-map', 'inspector-token-map-steps', 'inspector-attention', 'inspector-recall', 'inspector-memory', 'inspector-ab', 'inspector-32k'];
const VIEWPORT = { width: 1280, height: 1500 };
const CONTEXT_TOKENS = 2048;
const TOKENS = 300;
/** A held-out passage: Jonah 1, its first ~2,000 characters (about 600 tokens). */
const PASSAGE = haveSharedModel(KJV_HD64) ? readFileSync(join(KJV_EVAL_DIR, 'jonah-1.txt'), 'utf8').slice(0, 2000) : '';

const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-default-apps', '--disable-extensions', '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1'];

function haveChromium(): boolean {
  if (existsSync(CHROMIUM)) return true;
  const message = `Chromium missing at ${CHROMIUM} (install Debian's 'chromium' package, or set LONGHAND_CHROMIUM); the inspector e2e tests are skipped`;
  if (process.env.CI) throw new Error(`${message}; CI must have it`);
  console.warn(`SKIP: ${message}`);
  return false;
}

const enabled = haveChromium() && haveSharedModel(KJV_HD64);

const nav = (page: Page, label: string) => page.getByRole('navigation', { name: 'Sections' }).getByRole('button', { name: label, exact: true });

interface RunLine { record: string; requestId: string; policy: string; promptIds: number[]; pieces: string[]; tokens: [number, string, [number, number][]?][] }
type SampleLine = StepMetrics & { requestId: string };
interface Export { runs: RunLine[]; samples: (id: string) => SampleLine[] }

function parseExport(text: string): Export {
  const objects = text.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
  return {
    runs: objects.filter((o) => o.record === 'longhand.run/1') as unknown as RunLine[],
    samples: (id) => objects.filter((o) => o.record === undefined && o.requestId === id) as unknown as SampleLine[],
  };
}
const layerOf = (s: StepMetrics, layer: number): LayerMetrics | undefined => s.layers.find((l) => l.layer === layer);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const pct = (v: number) => `${(v * 100).toFixed(1)}%`;

/** A seeded synthetic run of `positions` positions: sinks, a recent window and a random fifth per sparse layer. */
function syntheticRun(positions: number, generated: number, samples: number): string {
  let s = 12345;
  const rand = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const prompt = positions - generated;
  const lines = [JSON.stringify({ record: 'longhand.run/1', requestId: 'synthetic-32k', policy: 'infinigen', contextLength: positions, promptIds: Array.from({ length: prompt }, (_, i) => (i === 0 ? 1 : 3 + (i % 2000))), pieces: Array.from({ length: prompt }, (_, i) => (i === 0 ? '<s>' : ` w${i % 97}`)), tokens: Array.from({ length: generated }, (_, i) => [5 + i, ` g${i}`]) })];
  for (let k = 0; k < samples; k++) {
    const step = Math.round(((k + 1) * generated) / samples);
    const context = prompt + step;
    const layers = Array.from({ length: 6 }, (_, layer) => {
      const base = { layer, selected: context, candidates: context, bytesMoved: 0, reuseHits: 0, reuseMisses: 0, recall: null as number | null, speculationMs: 0, gatherMs: 0, attentionMs: 0 };
      if (layer < 2) return base;
      const set = new Set<number>([0, 1, 2, 3]);
      for (let p = context - 513; p < context - 1; p++) set.add(p);
      while (set.size < Math.floor(0.2 * context)) set.add(Math.floor(rand() * (context - 1)));
      const positionsList = [...set].sort((a, b) => a - b);
      return { ...base, selected: positionsList.length, recall: 0.6 + 0.3 * rand(), oracleRecall: 0.95, positions: positionsList };
    });
    lines.push(JSON.stringify({ requestId: 'synthetic-32k', step, contextTokens: context, contextLength: positions, policy: 'infinigen', tokensPerS: 10, fetchRatio: 0.2, bytesMovedPerToken: 0, reuseHitRate: null, recall: 0.7, evictions: 0, timing: { denseMs: 1, attentionMs: 1, speculationMs: 0, gatherMs: 0, otherMs: 0 }, memory: { weightsBytes: 4e7, poolBytes: 1e8, poolBudgetBytes: 1e8, kvUsedBytes: context * 6144, partialKeyBytes: context * 456, stagedBytes: 1e6, rssBytes: 3e8 }, layers }));
  }
  return lines.join('\n') + '\n';
}

describe.skipIf(!enabled)('cache inspector on kjv-llama-hd64 (longhand serve + Chromium)', () => {
  let tmp: string;
  let server: ChildProcessWithoutNullStreams | undefined;
  let serverLog = '';
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];
  let exported: Export;
  let exportPath: string;
  const figures: Record<string, unknown> = {};

  let url = '';
  const inspector = () => page.getByRole('region', { name: 'Inspector' });
  /** Generations the server finished (its /metrics counter: the WebSocket relay counts the window's too). */
  const generationsDone = async (): Promise<number> => {
    const match = /^http:\/\/127\.0\.0\.1:(\d+)\/\?token=(.+)$/.exec(url)!;
    const text = await (await fetch(`http://127.0.0.1:${match[1]}/metrics`, { headers: { Authorization: `Bearer ${match[2]}` } })).text();
    return [...text.matchAll(/^longhand_generations_total\{[^}]*\} (\d+)/gm)].reduce((a, m) => a + Number(m[1]), 0);
  };
  const tab = async (name: string) => {
    await inspector().getByRole('tab', { name }).click();
    return inspector().getByRole('tabpanel', { name: `${name} view` });
  };
  const compare = () => inspector().getByRole('region', { name: 'Compare policies' });
  const shot = async (target: Locator, name: string) => {
    await target.screenshot({ path: join(RESULTS, `${name}.png`) });
  };

  /** Compare infinigen vs h2o over the passage; `closed`: the Writer is on screen while it runs. Returns A's and B's decode tokens/s. */
  async function runCompare(closed: boolean): Promise<{ a: number; b: number }> {
    await nav(page, 'Inspector').click();
    await tab('A/B');
    await compare().getByLabel('Compare prompt').fill(PASSAGE);
    await compare().getByLabel('Compare tokens').fill(String(TOKENS));
    await compare().getByLabel('Policy A').selectOption('infinigen');
    await compare().getByLabel('Policy B').selectOption('h2o');
    const before = await generationsDone();
    await compare().getByRole('button', { name: 'Compare', exact: true }).click();
    if (closed) {
      // the inspector store runs the comparison wherever the user is: stay on the Writer until both sides are done
      await nav(page, 'Writer').click();
      await expect.poll(() => generationsDone(), { timeout: 240_000, interval: 250 }).toBeGreaterThanOrEqual(before + 2);
    } else {
      // the token map of the run in progress stays on screen, redrawn as samples arrive
      await tab('Token map');
      await expect.poll(() => generationsDone(), { timeout: 240_000, interval: 250 }).toBeGreaterThanOrEqual(before + 2);
    }
    await nav(page, 'Inspector').click();
    await tab('A/B');
    await expect.poll(async () => (await compare().getByLabel('Compare result').count()) === 1 && (await compare().getByRole('button', { name: 'Compare', exact: true }).isEnabled()), { timeout: 240_000, interval: 250 }).toBe(true);
    expect(await compare().getByRole('alert').count()).toBe(0);
    const rate = async (side: string) => Number((await compare().locator(`[data-stat="rate-${side}"]`).textContent()) ?? 'NaN');
    return { a: await rate('a'), b: await rate('b') };
  }

  beforeAll(async () => {
    mkdirSync(RESULTS, { recursive: true });
    tmp = mkdtempSync(join(tmpdir(), 'longhand-e2e-inspector-'));
    await ensureRenderer();
    server = spawnServe(tmp, ['--data-dir', join(tmp, 'data')]);
    server.stderr.on('data', (chunk: Buffer) => (serverLog += chunk.toString()));
    url = await firstLine(server);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 60_000 });
    const context = await browser.newContext({ viewport: VIEWPORT, deviceScaleFactor: 1, acceptDownloads: true });
    page = await context.newPage();
    page.setDefaultTimeout(30_000);
    page.on('pageerror', (error) => pageErrors.push(error.message));
    expect((await page.goto(url))?.status()).toBe(200);
    await page.waitForURL((address) => !address.search.includes('token='));
  }, 180_000);

  afterAll(async () => {
    await browser?.close().catch(() => {});
    await stopServe(server);
    if (serverLog && process.env.LONGHAND_E2E_VERBOSE) console.log(serverLog);
    if (tmp) rmSync(tmp, { recursive: true, force: true });
    if (process.env.LONGHAND_UPDATE_SCREENSHOTS && existsSync(RESULTS)) {
      mkdirSync(README_SCREENSHOTS, { recursive: true });
      for (const name of README_SET) if (existsSync(join(RESULTS, `${name}.png`))) copyFileSync(join(RESULTS, `${name}.png`), join(README_SCREENSHOTS, `${name}.png`));
    }
    console.log(`e2e inspector figures: ${JSON.stringify(figures)}`);
  }, 30_000);

  it('300 tokens of infinigen vs h2o over a held-out passage, with the inspector closed and then open: both report decode rates (speed: bench/metrics-overhead.mjs)', async () => {
    await nav(page, 'Models').click();
    await page.getByLabel('Model path').fill(KJV_HD64);
    await page.getByLabel('Context (tokens)').fill(String(CONTEXT_TOKENS));
    await page.getByRole('button', { name: 'Load', exact: true }).click();
    const loaded = page.getByRole('region', { name: 'Loaded model' });
    await expect.poll(async () => (await loaded.isVisible()) && ((await loaded.textContent()) ?? '').includes(`${CONTEXT_TOKENS.toLocaleString('en-US')} of`), { timeout: 60_000 }).toBe(true);
    const closed = await runCompare(true);
    const open = await runCompare(false);
    figures.decodeTokensPerS = { closed, open, ratioA: open.a / closed.a, ratioB: open.b / closed.b };
    console.log(`e2e inspector decode tokens/s, closed: infinigen ${closed.a}, h2o ${closed.b}; open (token map updating): infinigen ${open.a}, h2o ${open.b}`);
    // Speed is not asserted here: 300 tokens take under a second, and with the rest of `npm test`
    // running beside it the ratio swings past 20% (CI failed on it). bench/metrics-overhead.mjs has the
    // controlled figure (inspect vs maybe); this test checks that both sides report a decode rate.
    for (const rate of [closed.a, closed.b, open.a, open.b]) expect(rate).toBeGreaterThan(0);
    // the views below read a comparison measured densely (a sample every 2 steps, whatever it costs)
    await compare().getByLabel('Dense measurements').check();
    const dense = await runCompare(false);
    figures.decodeTokensPerS = { ...(figures.decodeTokensPerS as object), dense };
    console.log(`e2e inspector decode tokens/s with dense measurements: infinigen ${dense.a}, h2o ${dense.b}`);

    // export what the inspector holds: the figures every later check compares against
    const [download] = await Promise.all([page.waitForEvent('download'), inspector().getByRole('button', { name: 'Export JSON lines' }).click()]);
    exportPath = join(tmp, 'export.jsonl');
    await download.saveAs(exportPath);
    exported = parseExport(readFileSync(exportPath, 'utf8'));
    const last = exported.runs.slice(-2);
    expect(last.map((r) => r.policy)).toEqual(['infinigen', 'h2o']);
    for (const r of last) expect(r.tokens).toHaveLength(TOKENS);
    expect(last[1]!.promptIds).toEqual(last[0]!.promptIds);
    expect(last[0]!.pieces.join('')).toContain('Now the word of the LORD came unto Jonah');
  }, 600_000);

  it('token map: run A over the passage; hovering a token shows the numbers the exported metrics give', async () => {
    const a = exported.runs.at(-2)!;
    const samples = exported.samples(a.requestId);
    const panel = await tab('Token map');
    const total = a.promptIds.length + a.tokens.length;
    await expect.poll(() => panel.getByLabel('Token map summary').textContent()).toContain(`infinigen · ${total.toLocaleString('en-US')} positions`);
    // the most fetched prompt token of layer 3 among those the text window shows
    const shownFrom = Math.max(0, total - 480);
    let best = shownFrom;
    let bestCount = -1;
    for (let p = shownFrom; p < a.promptIds.length; p++) {
      const n = samples.filter((s) => layerOf(s, 3)?.positions?.includes(p)).length;
      if (n > bestCount) [best, bestCount] = [p, n];
    }
    await panel.locator(`[aria-label="Context text"] [data-pos="${best}"]`).hover();
    const tip = panel.getByRole('tooltip', { name: 'Token details' });
    expect(await tip.locator('[data-field="position"]').textContent()).toBe(String(best));
    expect(await tip.locator('[data-field="id"]').textContent()).toBe(String(a.promptIds[best]));
    for (const layer of [2, 3, 4, 5]) {
      const fetched = samples.filter((s) => layerOf(s, layer)?.positions?.includes(best)).length;
      const of = samples.filter((s) => layerOf(s, layer)?.positions && s.contextTokens - 1 > best).length;
      const row = tip.locator(`tr[data-layer="${layer}"]`);
      expect(await row.locator('[data-field="fetched"]').textContent()).toBe(String(fetched));
      expect(await row.locator('[data-field="of"]').textContent()).toBe(String(of));
    }
    figures.tooltip = { position: best, layer3Fetched: bestCount, samples: samples.length };
    await panel.getByLabel('Context text').scrollIntoViewIfNeeded();
    await shot(panel, 'inspector-token-map');
    // one layer by sampled step: the sinks are columns on the left, the recent window a diagonal on the right
    await panel.getByLabel('Token map rows').selectOption('3');
    await expect.poll(() => panel.getByRole('img', { name: 'Selected positions of layer 3 per sampled step' }).count()).toBe(1);
    await shot(panel, 'inspector-token-map-steps');
    // the true attention of the measured steps: its tooltip figure is the exported mean
    await panel.getByLabel('Token map rows').selectOption('attention');
    await expect.poll(() => panel.getByRole('img', { name: 'True attention mass per position and sparse layer' }).count()).toBe(1);
    const withAttention = samples.filter((s) => layerOf(s, 4)?.attention);
    const top = layerOf(withAttention.at(-1)!, 4)!.attention![0]![0];
    if (top >= shownFrom) {
      await panel.locator(`[aria-label="Context text"] [data-pos="${top}"]`).hover();
      const mass = withAttention.reduce((x, s) => x + (layerOf(s, 4)!.attention!.find(([q]) => q === top)?.[1] ?? 0), 0) / withAttention.length;
      expect(await tip.locator('tr[data-layer="4"] [data-field="attention"]').textContent()).toBe(`true attention ${(mass * 100).toFixed(2)}%`);
    }
    await shot(panel, 'inspector-attention');
    await panel.getByLabel('Token map rows').selectOption('layers');
  }, 120_000);

  it('recall vs oracle: the averages table is the exported samples` means, and the oracle is never below', async () => {
    const a = exported.runs.at(-2)!;
    const samples = exported.samples(a.requestId);
    const panel = await tab('Recall');
    for (const layer of [2, 3, 4, 5]) {
      const rs = samples.map((s) => layerOf(s, layer)?.recall).filter((r): r is number => typeof r === 'number');
      const os = samples.map((s) => layerOf(s, layer)?.oracleRecall).filter((r): r is number => typeof r === 'number');
      expect(rs.length).toBeGreaterThan(100);
      const cells = await panel.getByRole('row', { name: `Recall layer ${layer}` }).getByRole('cell').allTextContents();
      expect(cells.slice(0, 4)).toEqual([String(layer), String(rs.length), pct(mean(rs)), pct(mean(os))]);
      expect(mean(os)).toBeGreaterThanOrEqual(mean(rs));
      figures[`recallLayer${layer}`] = { infinigen: mean(rs), oracle: mean(os), samples: rs.length };
    }
    await shot(panel, 'inspector-recall');
  }, 60_000);

  it('memory over time: the last sample`s parts as exported', async () => {
    const a = exported.runs.at(-2)!;
    const last = exported.samples(a.requestId).at(-1)!.memory;
    const panel = await tab('Memory');
    const table = panel.getByLabel('Memory at the last sample');
    const fmt = async (part: string) => (await table.locator(`[data-part="${part}"]`).textContent()) ?? '';
    expect(await fmt('partial')).toMatch(/^[\d.]+ KiB$/);
    expect(last.partialKeyBytes).toBeGreaterThan(0);
    expect(last.stagedBytes).toBeGreaterThan(0);
    // no pool budget from the Models page: nothing is evicted
    expect(await fmt('evictions')).toBe('0 at 0 sampled steps');
    await shot(panel, 'inspector-memory');
  }, 60_000);

  it('A/B: positions only one side fetched, top-1 agreement and the first divergence, as exported', async () => {
    const [a, b] = exported.runs.slice(-2) as [RunLine, RunLine];
    const panel = await tab('A/B');
    const view = panel.getByLabel('A/B view');
    const bs = exported.samples(b.requestId);
    const nearest = (step: number) => bs.reduce<SampleLine | undefined>((best, x) => (!best || Math.abs(x.step - step) < Math.abs(best.step - step) ? x : best), undefined);
    const limit = a.promptIds.length + TOKENS;
    for (const layer of [2, 3, 4, 5]) {
      let onlyA = 0;
      let onlyB = 0;
      let steps = 0;
      for (const s of exported.samples(a.requestId)) {
        const found = nearest(s.step);
        const other = found && Math.abs(found.step - s.step) <= 4 ? found : undefined;
        const pa = layerOf(s, layer)?.positions;
        const pb = other && layerOf(other, layer)?.positions;
        if (!pa || !pb) continue;
        const setA = new Set(pa.filter((p) => p < limit));
        const setB = new Set(pb.filter((p) => p < limit));
        onlyA += [...setA].filter((p) => !setB.has(p)).length;
        onlyB += [...setB].filter((p) => !setA.has(p)).length;
        steps += 1;
      }
      expect(steps).toBeGreaterThan(100);
      const row = view.getByRole('row', { name: `AB layer ${layer}` });
      expect(await row.locator('[data-ab="onlyA"]').textContent()).toBe((onlyA / steps).toFixed(1));
      expect(await row.locator('[data-ab="onlyB"]').textContent()).toBe((onlyB / steps).toFixed(1));
      figures[`abLayer${layer}`] = { onlyInfinigenPerStep: onlyA / steps, onlyH2oPerStep: onlyB / steps, steps };
    }
    const agree = a.tokens.filter((t, i) => t[2]![0]![0] === b.tokens[i]![2]![0]![0]).length;
    expect(await view.locator('[data-stat="top1"]').textContent()).toBe(`${((agree / TOKENS) * 100).toFixed(1)}% of ${TOKENS} steps`);
    const first = a.tokens.findIndex((t, i) => t[0] !== b.tokens[i]![0]);
    figures.ab = { top1Agreement: agree / TOKENS, firstDivergence: first, kl: await view.locator('[data-stat="kl"]').textContent() };
    if (first >= 0) expect(await view.getByLabel('Text A').locator('.diverge.first').textContent()).toBe(a.tokens[first]![1]);
    // the prefill is dense under both: token 0 comes from the same logits
    expect(first).not.toBe(0);
    await view.scrollIntoViewIfNeeded();
    await shot(view, 'inspector-ab');
  }, 60_000);

  it('export and load back: after Clear, the file gives the same views and numbers offline; a PNG of the view', async () => {
    await inspector().getByRole('button', { name: 'Clear' }).click();
    let panel = await tab('Token map');
    await expect.poll(() => panel.textContent()).toContain('No run recorded yet');
    await inspector().getByLabel('JSON lines file').setInputFiles(exportPath);
    const b = exported.runs.at(-1)!;
    panel = await tab('Token map');
    // the loaded file shows its newest run first: B (h2o); choose A
    await expect.poll(() => panel.getByLabel('Token map summary').textContent()).toContain('h2o');
    const a = exported.runs.at(-2)!;
    await inspector().getByLabel('Run').selectOption(a.requestId);
    await expect.poll(() => panel.getByLabel('Token map summary').textContent()).toContain('infinigen');
    const position = a.promptIds.length + 10;
    await panel.locator(`[aria-label="Context text"] [data-pos="${position}"]`).hover();
    const samples = exported.samples(a.requestId);
    const fetched = samples.filter((s) => layerOf(s, 2)?.positions?.includes(position)).length;
    expect(await panel.getByRole('tooltip').locator('tr[data-layer="2"] [data-field="fetched"]').textContent()).toBe(String(fetched));
    expect(await panel.getByRole('tooltip').locator('[data-field="id"]').textContent()).toBe(String(a.tokens[10]![0]));
    const ab = (await tab('A/B')).getByLabel('A/B view');
    expect(await ab.locator('h3').first().textContent()).toContain(`${a.policy} (A) vs ${b.policy} (B)`);
    const [png] = await Promise.all([page.waitForEvent('download'), inspector().getByRole('button', { name: 'Save PNG' }).click()]);
    const bytes = readFileSync((await png.path())!);
    expect(png.suggestedFilename()).toMatch(/^longhand-metrics-.+\.png$/);
    expect(bytes.subarray(1, 4).toString('latin1')).toBe('PNG');
    expect(bytes.length).toBeGreaterThan(2000);
    expect(pageErrors).toEqual([]);
  }, 120_000);

  it('32,768 positions: the token map builds and stays smooth while the pointer sweeps it (frames per second)', async () => {
    const file = join(tmp, 'synthetic-32k.jsonl');
    const { writeFileSync } = await import('node:fs');
    writeFileSync(file, syntheticRun(32_768, 300, 30));
    const t0 = Date.now();
    await inspector().getByLabel('JSON lines file').setInputFiles(file);
    const panel = await tab('Token map');
    await expect.poll(() => panel.getByLabel('Token map summary').textContent(), { timeout: 60_000 }).toContain('32,768 positions in 1,024 columns');
    const buildMs = Date.now() - t0;
    const fps = await page.evaluate(async () => {
      const canvas = document.querySelector('canvas.token-heat')!;
      const r = canvas.getBoundingClientRect();
      let frames = 0;
      const start = await new Promise<number>((resolve) => requestAnimationFrame(resolve));
      let end = start;
      await new Promise<void>((resolve) => {
        const tick = (now: number) => {
          frames += 1;
          end = now;
          canvas.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + ((frames * 17) % r.width), clientY: r.top + r.height / 2, bubbles: true }));
          if (now - start < 3000) requestAnimationFrame(tick);
          else resolve();
        };
        requestAnimationFrame(tick);
      });
      return (frames * 1000) / (end - start);
    });
    // switching to one layer by step redraws 30 rows x 1,024 columns
    const t1 = Date.now();
    await panel.getByLabel('Token map rows').selectOption('3');
    await expect.poll(() => panel.getByRole('img', { name: 'Selected positions of layer 3 per sampled step' }).count()).toBe(1);
    const switchMs = Date.now() - t1;
    figures.map32k = { fps, buildMs, switchMs };
    console.log(`e2e token map at 32,768 positions: ${fps.toFixed(1)} frames/s while hovering, built in ${buildMs} ms (file load included), layer-by-step view in ${switchMs} ms`);
    // frames per second are reported, not asserted (a loaded CI machine throttles rAF); the sweep must have drawn
    expect(fps).toBeGreaterThan(0);
    expect(await panel.getByLabel('Map cell').textContent()).toMatch(/positions [\d,]+–[\d,]+/);
    await shot(panel, 'inspector-32k');
    expect(pageErrors).toEqual([]);
  }, 180_000);
});
