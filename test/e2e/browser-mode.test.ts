// Browser mode end to end: the real `longhand serve` on stories260K, the built renderer, and a real
// Chromium driven by playwright-core (never a downloaded browser: Debian's /usr/bin/chromium).
// One page walks the app as a user would (Models → Load, Writer → Continue/Accept/Stop, the other
// views), then the same page measures the renderer while the engine streams (long tasks, metrics
// render rate), and a second, CSP-less page checks that hostile text stays text.
// Screenshots of each view go to test-results/e2e/ (gitignored); LONGHAND_UPDATE_SCREENSHOTS=1
// copies them to assets/screenshots/ for the README.
import { spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureRenderer } from '../../app/server/renderer-build.ts';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';
import { firstLine, wsConnect } from '../support/serve-client.ts';
import { CHROMIUM, CHROMIUM_ARGS, spawnServe, stopServe, editor, haveChromium, loadModel, nav, stat, typeDocument, VIEWPORT, waitForStop } from './browser.ts';

// The callbacks passed to page.evaluate/addInitScript run in Chromium. The root tsconfig has no
// DOM lib, so the few browser globals they touch are declared here, module-scoped: they do not
// leak into any other file's types.
interface PageElement {
  outerHTML: string;
  innerHTML: string;
  textContent: string | null;
  value: string;
  setSelectionRange(start: number, end: number): void;
  dispatchEvent(event: Event): boolean;
}
declare const window: Record<string, unknown>;
declare const document: {
  querySelector(selectors: string): PageElement | null;
  querySelectorAll(selectors: string): Iterable<PageElement>;
  getElementById(id: string): PageElement | null;
  createElement(tag: string): PageElement;
};
declare class MutationObserver {
  constructor(callback: () => void);
  observe(target: PageElement, options: { subtree?: boolean; childList?: boolean; characterData?: boolean }): void;
  disconnect(): void;
}
declare class PerformanceObserver {
  constructor(callback: (list: { getEntries(): { startTime: number; duration: number }[] }) => void);
  observe(options: { type: string; buffered?: boolean }): void;
}

const BIN = join(PROJECT_ROOT, 'bin', 'longhand.mjs');
const RESULTS = join(PROJECT_ROOT, 'test-results', 'e2e');
const README_SCREENSHOTS = join(PROJECT_ROOT, 'assets', 'screenshots');
/** The screenshots the README shows (LONGHAND_UPDATE_SCREENSHOTS=1 refreshes assets/screenshots/). */
const README_SET = ['models', 'writer', 'summarise', 'inspector', 'settings'];
const CONTEXT_TOKENS = 4096;
/** Tokens of the measured generation (the brief: a 300-token run). */
const PERF_TOKENS = 300;
/** A long task is > 50 ms by definition; on a loaded 2-core CI box we allow up to this. */
const LONG_TASK_LIMIT_MS = 200;
/** Summarise runs on a short context so the fixture overflows it. */
const SUMMARISE_CONTEXT = 512;
const SUMMARY_TOKENS = 48;
const FIXTURE = join(PROJECT_ROOT, 'test', 'e2e', 'fixtures', 'long-story.txt');
const DRAFT = 'Once upon a time, there was a little girl named Lily. She lived in a small town by the sea.';

const HOSTILE = [
  'Hostile text follows.',
  '<script>window.__pwned=1</script>',
  '<img src=x onerror="window.__pwned=2">',
  '<svg onload="window.__pwned=3"><circle r="1"/></svg>',
  '<a href="javascript:window.__pwned=4">click me</a>',
  '<a href="data:text/html,<script>window.__pwned=5</script>">data link</a>',
  'javascript:window.__pwned=6',
].join('\n');

const enabled = haveChromium('browser-mode') && haveSharedModel();

// ── helpers ─────────────────────────────────────────────────────────────────────────────────

async function screenshot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(RESULTS, `${name}.png`) });
}

/** Elements that must never come out of untrusted text, anywhere in the app's DOM. */
async function injectedElements(page: Page): Promise<string[]> {
  return page.evaluate(() => [...document.querySelectorAll('#root script, #root img, #root svg, #root a, #root iframe, #root object, #root embed')].map((el) => el.outerHTML.slice(0, 80)));
}

interface Frame {
  t: number;
  kind: string;
}

// ── the tests ───────────────────────────────────────────────────────────────────────────────

describe.skipIf(!enabled)('browser mode (longhand serve + Chromium)', () => {
  let tmp: string;
  let server: ChildProcessWithoutNullStreams | undefined;
  let serverLog = '';
  let url: string;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  const frames: Frame[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    mkdirSync(RESULTS, { recursive: true });
    tmp = mkdtempSync(join(tmpdir(), 'longhand-e2e-'));
    await ensureRenderer();

    const help = spawnSync(process.execPath, [BIN, 'serve', '--help'], { cwd: PROJECT_ROOT, encoding: 'utf8' }).stdout ?? '';
    const dataDir = help.includes('--data-dir') ? ['--data-dir', join(tmp, 'data')] : [];
    // Whatever the server writes by default (documents, settings, caches) stays in the temp dir.
    // LONGHAND_TEST_FAULTS=1: the crash-isolation test kills the engine with a real native fault.
    server = spawnServe(tmp, ['--model', STORIES_260K, '--context', String(CONTEXT_TOKENS), ...dataDir], { LONGHAND_TEST_FAULTS: '1' });
    server.stderr.on('data', (chunk: Buffer) => (serverLog += chunk.toString()));
    url = await firstLine(server);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=/);

    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 60_000 });
    context = await browser.newContext({ viewport: VIEWPORT, deviceScaleFactor: 1 });
    // Long tasks of the whole page life, and a counter of rendered metrics updates.
    await context.addInitScript(() => {
      const w = window as unknown as { __longTasks: { start: number; duration: number }[] };
      w.__longTasks = [];
      try {
        new PerformanceObserver((list) => {
          for (const entry of list.getEntries()) w.__longTasks.push({ start: entry.startTime, duration: entry.duration });
        }).observe({ type: 'longtask', buffered: true });
      } catch {
        // no longtask support: the test then fails on the missing entries' API, not silently
      }
    });
    page = await context.newPage();
    page.setDefaultTimeout(30_000);
    page.on('pageerror', (error) => pageErrors.push(error.message));
    page.on('websocket', (ws) => {
      ws.on('framereceived', ({ payload }) => {
        if (typeof payload !== 'string') return;
        try {
          frames.push({ t: Date.now(), kind: (JSON.parse(payload) as { kind: string }).kind });
        } catch {
          frames.push({ t: Date.now(), kind: 'unparsed' });
        }
      });
    });
    const response = await page.goto(url);
    expect(response?.status()).toBe(200);
    // main.tsx drops the token from the address bar.
    await page.waitForURL((address) => !address.search.includes('token='));
  }, 180_000);

  afterAll(async () => {
    await browser?.close().catch(() => {});
    await stopServe(server);
    if (tmp) rmSync(tmp, { recursive: true, force: true });
    if (process.env.LONGHAND_UPDATE_SCREENSHOTS && existsSync(RESULTS)) {
      mkdirSync(README_SCREENSHOTS, { recursive: true });
      for (const name of README_SET) if (existsSync(join(RESULTS, `${name}.png`))) copyFileSync(join(RESULTS, `${name}.png`), join(README_SCREENSHOTS, `${name}.png`));
    }
  }, 30_000);

  it('loads stories260K from the Models view and shows its facts', async () => {
    await loadModel(page, CONTEXT_TOKENS);
    const loaded = page.getByRole('region', { name: 'Loaded model' });
    await expect.poll(() => loaded.textContent()).toContain(STORIES_260K);
    const text = (await loaded.textContent()) ?? '';
    expect(text).toMatch(/Architecture\s*llama/);
    expect(text).toContain(`Context${CONTEXT_TOKENS.toLocaleString('en-US')} of`);
    await screenshot(page, 'models');
  });

  it('Writer: Continue writing streams a suggestion with its stats, and Accept inserts it', async () => {
    const prompt = 'Once upon a time, there was a little girl named Lily. She loved to play outside.';
    await typeDocument(page, prompt);
    await page.getByLabel('Title').fill('Lily');
    await page.getByLabel('Max tokens').fill('200');
    await page.getByRole('button', { name: 'Continue writing' }).click();

    const suggestion = page.getByRole('region', { name: 'Suggested text' });
    await expect.poll(async () => ((await suggestion.textContent()) ?? '').length, { timeout: 30_000 }).toBeGreaterThan(0);
    const stop = await waitForStop(page);
    expect(stop).toMatch(/^(token limit|end of text)$/);

    const tokens = Number(await stat(page, 'tokens').textContent());
    expect(tokens).toBeGreaterThan(0);
    expect(tokens).toBeLessThanOrEqual(200);
    expect(await stat(page, 'ttft').textContent()).toMatch(/^\d+(\.\d+)? (ms|s)$/);
    expect(Number(await stat(page, 'rate').textContent())).toBeGreaterThan(0);
    const contextUsed = /^([\d,]+) of ([\d,]+)$/.exec((await stat(page, 'context').textContent()) ?? '');
    expect(contextUsed).not.toBeNull();
    expect(Number(contextUsed![2]!.replaceAll(',', ''))).toBe(CONTEXT_TOKENS);
    expect(Number(contextUsed![1]!.replaceAll(',', ''))).toBeGreaterThan(tokens);
    await screenshot(page, 'writer');

    const suggested = (await suggestion.textContent()) ?? '';
    await page.getByRole('button', { name: 'Accept' }).click();
    await expect.poll(() => suggestion.count()).toBe(0);
    const value = await editor(page).inputValue();
    expect(value.startsWith(prompt)).toBe(true);
    expect(value.slice(prompt.length)).toBe(suggested);
  });

  it('Stop cancels a running generation (stop reason: cancelled)', async () => {
    await typeDocument(page, 'Once upon a time, there was a big dog.');
    await page.getByLabel('Max tokens').fill('3000');
    await page.getByRole('button', { name: 'Continue writing' }).click();
    await expect.poll(async () => Number(await stat(page, 'tokens').textContent()), { timeout: 30_000 }).toBeGreaterThan(10);
    await page.getByRole('button', { name: 'Stop' }).click();
    expect(await waitForStop(page)).toBe('stopped');
    expect(Number(await stat(page, 'tokens').textContent())).toBeLessThan(3000);
    await expect.poll(() => page.getByRole('button', { name: 'Stop' }).isDisabled()).toBe(true);
    await page.getByRole('button', { name: 'Reject' }).click();
  });

  it(`renderer stays responsive while ${PERF_TOKENS} tokens stream: no long task over ${LONG_TASK_LIMIT_MS} ms, metrics ≤ 10/s`, async () => {
    await typeDocument(page, 'Once upon a time, there was a little boy named Tom.');
    await page.getByLabel('Max tokens').fill(String(PERF_TOKENS));
    // Count rendered metrics updates: each one rewrites the Tokens figure.
    await page.evaluate(() => {
      const w = window as unknown as { __statUpdates: number[]; __statObserver?: MutationObserver };
      const tokensNow = () => document.querySelector('[aria-label="Generation stats"] [data-stat="tokens"]')?.textContent ?? null;
      w.__statUpdates = [];
      w.__statObserver?.disconnect();
      // start from the figure the last test left on screen: any mutation in the idle wait (the
      // memory readout) must not count that old figure as an update of this run
      (w as unknown as { __lastTokens?: string | null }).__lastTokens = tokensNow();
      w.__statObserver = new MutationObserver(() => {
        const tokens = tokensNow();
        const last = (w as unknown as { __lastTokens?: string | null }).__lastTokens;
        if (tokens !== null && tokens !== last) {
          w.__statUpdates.push(performance.now());
          (w as unknown as { __lastTokens?: string | null }).__lastTokens = tokens;
        }
      });
      w.__statObserver.observe(document.getElementById('root')!, { subtree: true, childList: true, characterData: true });
    });
    // Baseline: long tasks of the idle page over 2 s, to tell machine load from renderer work.
    const idle0 = await page.evaluate(() => performance.now());
    await page.waitForTimeout(2000);
    const t0 = await page.evaluate(() => performance.now());
    const frameStart = Date.now();
    await page.getByRole('button', { name: 'Continue writing' }).click();
    const stop = await waitForStop(page);
    const t1 = await page.evaluate(() => performance.now());
    const frameEnd = Date.now();
    const tokens = Number(await stat(page, 'tokens').textContent());
    const rate = await stat(page, 'rate').textContent();

    const { longTasks, updates } = await page.evaluate(() => {
      const w = window as unknown as { __longTasks: { start: number; duration: number }[]; __statUpdates: number[]; __statObserver?: MutationObserver };
      w.__statObserver?.disconnect();
      return { longTasks: w.__longTasks, updates: w.__statUpdates };
    });
    const during = longTasks.filter((task) => task.start + task.duration >= t0 && task.start <= t1);
    const idle = longTasks.filter((task) => task.start >= idle0 && task.start < t0);
    const maxLongTask = Math.max(0, ...during.map((task) => task.duration));
    const maxPerSecond = (times: number[]) => Math.max(0, ...times.map((start) => times.filter((t) => t >= start && t < start + 1000).length));
    // The last update is the final figure at `done`, sent whatever the throttle says. Only the run's
    // own updates count (a figure changed before the click is the previous run's).
    const live = updates.filter((t) => t >= t0).slice(0, -1);
    const renderRate = maxPerSecond(live);
    const meanRate = (times: number[]) => (times.length < 2 ? 0 : ((times.length - 1) * 1000) / (times[times.length - 1]! - times[0]!));
    const metricsFrames = frames.filter((f) => f.kind === 'metrics' && f.t >= frameStart && f.t <= frameEnd + 100).map((f) => f.t);
    const wsLive = metricsFrames.slice(0, -1);
    const wsRate = maxPerSecond(wsLive);
    console.log(
      `e2e perf: ${tokens} tokens (${stop}) in ${(t1 - t0).toFixed(0)} ms at ${rate} tokens/s; long tasks during the run: ${during.length}, max ${maxLongTask.toFixed(0)} ms` +
        ` (limit ${LONG_TASK_LIMIT_MS} ms; idle page before it: ${idle.length}, max ${Math.max(0, ...idle.map((task) => task.duration)).toFixed(0)} ms);` +
        ` rendered metrics updates: ${updates.length} (${updates.filter((t) => t < t0).length} before the click, not counted), mean ${meanRate(live).toFixed(1)}/s, max ${renderRate} in any 1 s window;` +
        ` engine metrics frames over /ws: ${metricsFrames.length}, mean ${meanRate(wsLive).toFixed(1)}/s, max ${wsRate} in any 1 s window`,
    );
    await screenshot(page, 'writer-streamed');

    expect(tokens).toBeGreaterThan(0);
    expect(maxLongTask).toBeLessThanOrEqual(LONG_TASK_LIMIT_MS);
    expect(updates.length).toBeGreaterThan(0);
    // ≤ 10 a second: at most one live update per 100 ms of the run (click to stop; the first may come at
    // once), and any 1 s window allowing one update of timer jitter. The count is taken over the run's
    // whole span, not between the first and last frame: a run of 300 tokens lasts ~1 s here, and on a
    // loaded machine the WebSocket hands a few frames over together, so a mean over the frames' own
    // span read 18/s in CI from 10 frames the engine had sent 100 ms apart.
    const allowed = Math.floor((frameEnd - frameStart) / 100) + 1;
    expect(live.length).toBeLessThanOrEqual(allowed);
    expect(renderRate).toBeLessThanOrEqual(11);
    expect(wsLive.length).toBeLessThanOrEqual(allowed);
    expect(wsRate).toBeLessThanOrEqual(11);
    await page.getByRole('button', { name: 'Reject' }).click();
  });

  it('hostile text in the editor and the title stays text (real CSP)', async () => {
    await typeDocument(page, HOSTILE);
    await page.getByLabel('Title').fill('<img src=x onerror="window.__pwned=7">');
    await page.getByLabel('Max tokens').fill('20');
    await page.getByRole('button', { name: 'Continue writing' }).click();
    await waitForStop(page);
    // Give any handler a chance to run.
    await page.waitForTimeout(300);
    expect(await page.evaluate(() => (window as unknown as { __pwned?: unknown }).__pwned)).toBeUndefined();
    expect(await injectedElements(page)).toEqual([]);
    expect(await editor(page).inputValue()).toBe(HOSTILE);
    await page.getByRole('button', { name: 'Reject' }).click();
    // A clean document for the screenshots that follow.
    await typeDocument(page, 'Once upon a time, there was a little girl named Lily.');
    await page.getByLabel('Title').fill('Lily');
  });

  it('hostile model output renders as text even without CSP (routed WebSocket, bypassCSP)', async () => {
    const hostileContext = await browser.newContext({ viewport: VIEWPORT, bypassCSP: true });
    try {
      const hostilePage = await hostileContext.newPage();
      hostilePage.setDefaultTimeout(30_000);
      let injected = false;
      // Pass the engine protocol through, but make the first token of each generation hostile.
      await hostilePage.routeWebSocket(/\/ws$/, (ws) => {
        const upstream = ws.connectToServer();
        upstream.onMessage((message) => {
          if (typeof message === 'string') {
            const event = JSON.parse(message) as { kind: string; index?: number; text?: string };
            if (event.kind === 'token' && event.index === 0) {
              injected = true;
              return ws.send(JSON.stringify({ ...event, text: HOSTILE }));
            }
          }
          ws.send(message);
        });
      });
      // A new context has no cookie yet: open the URL with the token, as a user would.
      await hostilePage.goto(url);
      await loadModel(hostilePage, CONTEXT_TOKENS);
      // The harness can see script running: with CSP bypassed, markup parsed as HTML does execute.
      await hostilePage.evaluate(() => {
        document.createElement('div').innerHTML = '<img src=x onerror="window.__control=1">';
      });
      await expect.poll(() => hostilePage.evaluate(() => (window as unknown as { __control?: number }).__control)).toBe(1);

      await nav(hostilePage, 'Writer').click();
      await hostilePage.getByRole('button', { name: 'New document' }).click();
      await typeDocument(hostilePage, 'Once upon a time');
      await hostilePage.getByLabel('Max tokens').fill('20');
      await hostilePage.getByRole('button', { name: 'Continue writing' }).click();
      await waitForStop(hostilePage);
      expect(injected).toBe(true);
      const suggestion = hostilePage.getByRole('region', { name: 'Suggested text' });
      const shown = (await suggestion.textContent()) ?? '';
      expect(shown.startsWith(HOSTILE)).toBe(true);
      await hostilePage.waitForTimeout(300);
      expect(await hostilePage.evaluate(() => (window as unknown as { __pwned?: unknown }).__pwned)).toBeUndefined();
      expect(await injectedElements(hostilePage)).toEqual([]);
      await hostilePage.screenshot({ path: join(RESULTS, 'hostile-suggestion.png') });

      await hostilePage.getByRole('button', { name: 'Accept' }).click();
      expect((await editor(hostilePage).inputValue()).startsWith(`Once upon a time${HOSTILE}`)).toBe(true);
      expect(await hostilePage.evaluate(() => (window as unknown as { __pwned?: unknown }).__pwned)).toBeUndefined();
      expect(await injectedElements(hostilePage)).toEqual([]);
    } finally {
      await hostileContext.close();
    }
  });

  it('Inspector: live tokens/s and fetch ratio of a Writer generation, 5 layer rows, Compare full vs infinigen (fetch ratio < 1), CSV export', async () => {
    const inspector = page.getByRole('region', { name: 'Inspector', exact: true });
    const spark = (label: string) => inspector.getByTestId(`spark-${label}`);
    const percent = async (label: string) => Number(/^([\d.]+)%$/.exec((await spark(label).textContent()) ?? '')?.[1] ?? NaN);
    const layerRows = inspector.getByRole('table', { name: 'Layers' }).locator('tbody tr');

    // A long Writer generation (full policy, as loaded), watched live from the Inspector.
    await typeDocument(page, 'Once upon a time, there was a little girl named Lily. She loved to play outside.');
    await page.getByLabel('Max tokens').fill('3000');
    await page.getByRole('button', { name: 'Continue writing' }).click();
    await expect.poll(async () => Number(await stat(page, 'tokens').textContent()), { timeout: 30_000 }).toBeGreaterThan(0);
    await nav(page, 'Inspector').click();
    await expect.poll(() => inspector.getByRole('status', { name: 'Inspector state' }).textContent()).toMatch(/^Live: 1 generation running/);
    await expect.poll(async () => Number.parseFloat((await spark('Tokens/s').textContent()) ?? '')).toBeGreaterThan(0);
    await expect.poll(() => percent('Fetch ratio')).toBeGreaterThan(0);
    const liveFull = await percent('Fetch ratio');
    expect(liveFull).toBeLessThanOrEqual(100);
    expect(await inspector.textContent()).toContain('Policy full');
    // stories260K has 5 layers: one row each.
    await expect.poll(() => layerRows.count()).toBe(5);
    // Let a second of samples gather for the sparklines, then picture it live.
    await page.waitForTimeout(1000);
    await screenshot(page, 'inspector-live');
    const liveState = (await inspector.getByRole('status', { name: 'Inspector state' }).textContent()) ?? '';
    const liveRate = (await spark('Tokens/s').textContent()) ?? '';
    await nav(page, 'Writer').click();
    if (await page.getByRole('button', { name: 'Stop' }).isEnabled()) await page.getByRole('button', { name: 'Stop' }).click();
    await waitForStop(page);
    await page.getByRole('button', { name: 'Reject' }).click();

    // Compare full (A) with infinigen (B): each chosen per generation on the loaded model, B on A's prompt.
    await nav(page, 'Inspector').click();
    const compare = inspector.getByRole('region', { name: 'Compare policies' });
    await compare.getByLabel('Compare tokens').fill('256');
    await compare.getByLabel('Policy A').selectOption('full');
    await compare.getByLabel('Policy B').selectOption('infinigen');
    await compare.getByRole('button', { name: 'Compare', exact: true }).click();
    await expect.poll(() => compare.getByLabel('Compare result').count(), { timeout: 120_000 }).toBe(1);
    await expect.poll(() => compare.getByRole('button', { name: 'Compare', exact: true }).isEnabled(), { timeout: 60_000 }).toBe(true);
    expect(await compare.getByRole('alert').count()).toBe(0);
    expect(await compare.locator('[data-stat="agreement"]').textContent()).toMatch(/^\d+(\.\d)?% \(\d+ of \d+\)$/);
    expect(Number.parseFloat((await compare.locator('[data-stat="rate-b"]').textContent()) ?? '')).toBeGreaterThan(0);
    // The newest sample is infinigen's: fewer positions fetched than there are candidates.
    expect(await inspector.textContent()).toContain('Policy infinigen');
    const infinigen = await percent('Fetch ratio');
    console.log(`e2e inspector: live full-policy fetch ratio ${liveFull}%, ${liveRate} tokens/s, state "${liveState}"; infinigen fetch ratio ${infinigen}%, tokens/s ${await spark('Tokens/s').textContent()}, agreement ${await compare.locator('[data-stat="agreement"]').textContent()}`);
    expect(infinigen).toBeGreaterThan(0);
    expect(infinigen).toBeLessThan(100);
    expect(await layerRows.count()).toBe(5);
    // After the comparison the user's own model (full, 4,096) is back.
    await nav(page, 'Models').click();
    await expect.poll(async () => (await page.getByRole('region', { name: 'Loaded model' }).textContent()) ?? '').toContain(`${CONTEXT_TOKENS.toLocaleString('en-US')} of`);
    await nav(page, 'Inspector').click();
    await expect.poll(() => inspector.getByRole('status', { name: 'Inspector state' }).textContent()).toMatch(/^Idle: showing the last samples/);
    await screenshot(page, 'inspector');
    await inspector.getByRole('table', { name: 'Layers' }).scrollIntoViewIfNeeded();
    await screenshot(page, 'inspector-layers');
    await page.getByRole('heading', { name: 'Cache inspector' }).scrollIntoViewIfNeeded();

    // Export CSV: a real download with the header line and one line per kept sample.
    const [download] = await Promise.all([page.waitForEvent('download'), inspector.getByRole('button', { name: 'Export CSV' }).click()]);
    expect(download.suggestedFilename()).toMatch(/^longhand-metrics-.+\.csv$/);
    const csv = readFileSync((await download.path())!, 'utf8');
    const lines = csv.trim().split('\n');
    expect(lines[0]).toMatch(/^receivedAt,requestId,step,contextTokens,contextLength,policy,tokensPerS,fetchRatio,/);
    expect(lines.length).toBeGreaterThan(2);
    expect(lines.some((line) => line.includes(',infinigen,'))).toBe(true);
    expect(lines.some((line) => line.includes(',full,'))).toBe(true);
    expect(pageErrors).toEqual([]);
  });

  it('screenshot of the Settings view', async () => {
    await nav(page, 'Settings').click();
    await expect.poll(() => page.getByRole('region', { name: 'Settings', exact: true }).isVisible()).toBe(true);
    await screenshot(page, 'settings');
    expect(pageErrors).toEqual([]);
  });

  it('Summarise a fixture document with each overflow policy (stop / cut the middle / split)', async () => {
    // A short context makes the fixture (≈1,000 tokens) overflow while each run stays quick.
    await loadModel(page, SUMMARISE_CONTEXT);
    await nav(page, 'Summarise').click();
    const view = page.getByRole('region', { name: 'Summarise', exact: true });
    await view.getByLabel('Open a file').setInputFiles(FIXTURE);
    await expect.poll(() => view.getByLabel('Text to summarise').inputValue()).toBe(readFileSync(FIXTURE, 'utf8'));
    await view.getByLabel('Summary length (max tokens)').fill(String(SUMMARY_TOKENS));
    await expect.poll(() => view.getByLabel('Token count').textContent(), { timeout: 30_000 }).toMatch(new RegExp(`tokens · model context ${SUMMARISE_CONTEXT}`));
    await expect.poll(() => view.getByLabel('Overflow').textContent()).toMatch(/^Over by [\d,]+ tokens/);
    const summariseButton = view.getByRole('button', { name: 'Summarise', exact: true });
    const finished = async () => {
      await expect.poll(() => summariseButton.isEnabled(), { timeout: 60_000 }).toBe(true);
      await expect.poll(() => view.getByLabel('Progress').count(), { timeout: 60_000 }).toBe(0);
    };

    // stop: refused, nothing sent.
    await view.getByRole('radio', { name: /^Stop/ }).check();
    await summariseButton.click();
    await finished();
    await expect.poll(() => view.getByRole('alert').filter({ hasText: 'Nothing was sent' }).count()).toBe(1);
    expect(await view.getByRole('region', { name: 'Summary text' }).count()).toBe(0);

    // truncate-middle: one run over the head and tail, and the cut is shown.
    await view.getByRole('radio', { name: /^Cut the middle/ }).check();
    await summariseButton.click();
    await finished();
    expect(await view.getByLabel('Note').textContent()).toMatch(/tokens were cut from the middle/);
    expect(((await view.getByRole('region', { name: 'Summary text' }).textContent()) ?? '').length).toBeGreaterThan(0);
    await screenshot(page, 'summarise-cut');

    // split: each part, then the combination.
    await view.getByRole('radio', { name: /^Split into parts/ }).check();
    await summariseButton.click();
    await finished();
    const note = (await view.getByLabel('Note').textContent()) ?? '';
    const parts = Number(/summarised in (\d+) parts/.exec(note)?.[1]);
    expect(parts).toBeGreaterThanOrEqual(2);
    // The part summaries stay open when the run ends.
    expect(await view.locator('details', { hasText: `Part summaries (${parts})` }).getAttribute('open')).not.toBeNull();
    for (let i = 1; i <= parts; i++) await expect.poll(() => view.getByRole('region', { name: `Summary of part ${i}` }).isVisible()).toBe(true);
    expect(((await view.getByRole('region', { name: 'Summary text' }).textContent()) ?? '').length).toBeGreaterThan(0);
    // The picture shows the run's note, the part summaries and the combined summary.
    await view.getByLabel('Note').evaluate((el: PageElement) => (el as unknown as { scrollIntoView(options: { block: string }): void }).scrollIntoView({ block: 'start' }));
    await screenshot(page, 'summarise');
    expect(await view.getByRole('alert').count()).toBe(0);
  });

  it('hostile text in a summarised document stays text', async () => {
    await nav(page, 'Summarise').click();
    const view = page.getByRole('region', { name: 'Summarise', exact: true });
    await view.getByLabel('Text to summarise').fill(HOSTILE);
    await view.getByRole('radio', { name: /^Split into parts/ }).check();
    const summariseButton = view.getByRole('button', { name: 'Summarise', exact: true });
    await expect.poll(() => summariseButton.isEnabled()).toBe(true);
    await summariseButton.click();
    await expect.poll(() => view.getByRole('region', { name: 'Summary text' }).count(), { timeout: 60_000 }).toBe(1);
    await expect.poll(() => summariseButton.isEnabled(), { timeout: 60_000 }).toBe(true);
    await page.waitForTimeout(300);
    expect(await page.evaluate(() => (window as unknown as { __pwned?: unknown }).__pwned)).toBeUndefined();
    expect(await injectedElements(page)).toEqual([]);
    expect(await view.getByLabel('Text to summarise').inputValue()).toBe(HOSTILE);
  });
  it('reload the page and find the draft (autosaved through POST /api/app)', async () => {
    await nav(page, 'Writer').click();
    const draft = DRAFT;
    await typeDocument(page, draft);
    await page.getByLabel('Title').fill('Lily and the blue fish');
    await expect.poll(() => page.getByRole('status', { name: 'Save state' }).textContent(), { timeout: 30_000 }).toBe('Saved');
    await page.reload();
    await nav(page, 'Writer').click();
    await expect.poll(() => editor(page).inputValue(), { timeout: 30_000 }).toBe(draft);
    expect(await page.getByLabel('Title').inputValue()).toBe('Lily and the blue fish');
    expect(await page.getByRole('complementary', { name: 'Documents' }).getByRole('button', { name: /^Lily and the blue fish/ }).count()).toBe(1);
    await screenshot(page, 'writer-reloaded');
    expect(pageErrors).toEqual([]);
  });

  // Crash isolation: the engine process dies in the middle of a Writer generation. The page
  // stays alive, the banner names what happened, the draft and the text generated so far stay,
  // and Restart brings back an engine with the same model that generates again.
  const serverAddress = () => {
    const match = /^http:\/\/127\.0\.0\.1:(\d+)\/\?token=(.+)$/.exec(url)!;
    return { port: Number(match[1]), token: match[2]! };
  };
  /** The engine process's pid, from the server's /health (the page never holds the token). */
  const enginePid = async (): Promise<number> => {
    const { port, token } = serverAddress();
    const health = (await (await fetch(`http://127.0.0.1:${port}/health`, { headers: { Authorization: `Bearer ${token}` } })).json()) as { engine: { state: string; pid?: number } };
    expect(health.engine.state).toBe('ready');
    return health.engine.pid!;
  };

  async function crashMidGeneration(label: string, kill: (pid: number) => Promise<void>, expected: { heading: string; signal: string }) {
    await loadModel(page, CONTEXT_TOKENS);
    const draft = `${label}: Once upon a time, there was a brave little bird named Pip.`;
    await typeDocument(page, draft);
    await page.getByLabel('Title').fill(`Crash ${label}`);
    await expect.poll(() => page.getByRole('status', { name: 'Save state' }).textContent(), { timeout: 30_000 }).toBe('Saved');
    await page.getByLabel('Max tokens').fill('3000');
    const pid = await enginePid();
    await page.getByRole('button', { name: 'Continue writing' }).click();
    await expect.poll(async () => Number(await stat(page, 'tokens').textContent()), { timeout: 30_000 }).toBeGreaterThan(10);
    const suggestion = page.getByRole('region', { name: 'Suggested text' });
    const before = (await suggestion.textContent()) ?? '';
    expect(before.length).toBeGreaterThan(0);

    const banner = page.getByRole('alert', { name: 'Engine status' });
    const killedAt = Date.now();
    await kill(pid);
    await banner.waitFor({ state: 'visible', timeout: 30_000 });
    const bannerMs = Date.now() - killedAt;
    expect(await banner.textContent()).toContain(expected.heading);
    expect(await banner.textContent()).toContain(expected.signal);
    expect(await banner.textContent()).toContain('Your drafts are safe.');
    // The page is alive and nothing is lost: the draft in the editor, the streamed text in the
    // suggestion (all of it: it can only have grown since), the generation ended with the error.
    expect(await page.evaluate(() => 6 * 7)).toBe(42);
    expect(await editor(page).inputValue()).toBe(draft);
    const after = (await suggestion.textContent()) ?? '';
    expect(after.startsWith(before)).toBe(true);
    // The suggestion says why it ended (the error sits beside the text, in the Suggestion region).
    await expect.poll(() => page.getByRole('region', { name: 'Suggestion' }).getByRole('alert').textContent({ timeout: 5_000 })).toMatch(new RegExp(expected.signal));
    await screenshot(page, `crash-${label}`);
    // Accept keeps the generated text: the editor and the saved document hold draft + text.
    await page.getByRole('button', { name: 'Accept' }).click();
    await expect.poll(() => editor(page).inputValue()).toBe(draft + after);
    await expect.poll(() => page.getByRole('status', { name: 'Save state' }).textContent(), { timeout: 30_000 }).toBe('Saved');
    const saved = await page.evaluate(async (title: string) => {
      const post = async (body: unknown) => (await fetch('/api/app', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) })).json();
      const list = (await post({ kind: 'documents.list' })) as { id: string; title: string }[];
      const entry = list.find((d) => d.title === title);
      return entry ? ((await post({ kind: 'documents.get', id: entry.id })) as { text: string }).text : null;
    }, `Crash ${label}`);
    expect(saved).toBe(draft + after);

    // Restart: restarting → ready (the banner goes away) with a new engine and the same model.
    const restartAt = Date.now();
    await banner.getByRole('button', { name: 'Restart engine' }).click();
    await expect.poll(async () => (await banner.count()) + (await page.getByRole('status', { name: 'Engine status' }).count()), { timeout: 60_000, interval: 50 }).toBe(0);
    const readyMs = Date.now() - restartAt;
    expect(await enginePid()).not.toBe(pid);
    console.log(`e2e crash isolation (${expected.signal}): kill → banner ${bannerMs} ms; Restart click → ready (model reloaded) ${readyMs} ms; ${after.length} generated characters kept`);
    await nav(page, 'Models').click();
    await expect.poll(async () => (await page.getByRole('region', { name: 'Loaded model' }).textContent()) ?? '').toContain(`${CONTEXT_TOKENS.toLocaleString('en-US')} of`);

    // A new generation works and produces tokens.
    await nav(page, 'Writer').click();
    await page.getByLabel('Max tokens').fill('20');
    await page.getByRole('button', { name: 'Continue writing' }).click();
    expect(await waitForStop(page)).toMatch(/^(token limit|end of text)$/);
    expect(Number(await stat(page, 'tokens').textContent())).toBeGreaterThan(0);
    await page.getByRole('button', { name: 'Reject' }).click();
    expect(pageErrors).toEqual([]);
  }

  it('SIGKILL of the engine mid-generation: the window lives, says so, keeps the text, and Restart brings it back', async () => {
    await crashMidGeneration('sigkill', async (pid) => void process.kill(pid, 'SIGKILL'), { heading: 'The engine was killed', signal: 'SIGKILL' });
  }, 180_000);

  it('a native fault (SIGSEGV) in the engine mid-generation behaves the same', async () => {
    const { port, token } = serverAddress();
    await crashMidGeneration(
      'segv',
      async () => {
        // The test-only hook (the server runs with LONGHAND_TEST_FAULTS=1), over /ws like the page's own requests.
        const ws = await wsConnect(port, { Authorization: `Bearer ${token}` });
        ws.send({ kind: 'testFault', requestId: 'fault-1', fault: 'segv' });
        setTimeout(() => ws.socket.destroy(), 2000).unref();
      },
      { heading: 'The engine crashed', signal: 'SIGSEGV' },
    );
  }, 180_000);

  afterAll(() => {
    if (serverLog && process.env.LONGHAND_E2E_VERBOSE) console.log(serverLog);
  });
});
