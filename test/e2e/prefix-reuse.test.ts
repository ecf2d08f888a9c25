// Prefix reuse and document snapshots end to end (issue 10): the real `longhand serve` on
// stories260K with its own data folder, the built renderer, Debian's Chromium through
// playwright-core. A user writes a long draft and presses Continue twice (the second reuses the
// whole prompt but its last token), reloads the page, and Continues again after the engine's
// in-memory sequence was made another document's (a second document generated in between) — the
// draft's cache comes back from its snapshot — and once more after the engine process itself was
// killed and restarted through the banner's Restart engine (a fresh process reads the snapshot).
// Then Settings shows the snapshots and clears them, and the Inspector compares full and streaming
// over the cached prefix. Numbers are read from what the page shows and checked against the
// prompt's own token count; screenshots go to test-results/e2e/ and, for the README set, to
// assets/screenshots/ (LONGHAND_UPDATE_SCREENSHOTS=1).
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureRenderer } from '../../app/server/renderer-build.ts';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';
import { firstLine } from '../support/serve-client.ts';
import { CHROMIUM, CHROMIUM_ARGS, spawnServe, stopServe, editor, haveChromium, nav, stat, VIEWPORT } from './browser.ts';

// page.evaluate callbacks run in Chromium; the root tsconfig has no DOM lib.
interface PageElement {
  value: string;
  setSelectionRange(start: number, end: number): void;
  dispatchEvent(event: Event): boolean;
}

const RESULTS = join(PROJECT_ROOT, 'test-results', 'e2e');
const README_SCREENSHOTS = join(PROJECT_ROOT, 'assets', 'screenshots');
const README_SET = ['writer-reuse', 'writer-restored', 'settings-snapshots', 'inspector-compare-reuse'];
const CONTEXT_TOKENS = 4096;
const CONTINUE_TOKENS = 24;
/** The long draft: the summarise fixture twice (about 2,300 stories260K tokens). */
const FIXTURE = readFileSync(join(PROJECT_ROOT, 'test', 'e2e', 'fixtures', 'long-story.txt'), 'utf8').trim();
const LONG_DRAFT = `${FIXTURE}\n\n${FIXTURE}`;
const OTHER_DRAFT = 'Tom had a small green boat. Every day he sailed it on the pond behind his house.';

const enabled = haveChromium('prefix-reuse') && haveSharedModel();


async function screenshot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(RESULTS, `${name}.png`) });
}

/** "reused N of M prompt tokens" → {reused, prompt}. */
function parseReuse(text: string): { reused: number; prompt: number } {
  const match = /^reused ([\d,]+) of ([\d,]+) prompt tokens/.exec(text);
  if (!match) throw new Error(`not a reuse line: '${text}'`);
  return { reused: Number(match[1]!.replaceAll(',', '')), prompt: Number(match[2]!.replaceAll(',', '')) };
}

/** "42 ms" / "12.3 s" → ms. */
function parseMs(text: string): number {
  const match = /^([\d.]+) (ms|s)$/.exec(text.trim());
  if (!match) throw new Error(`not a time: '${text}'`);
  return Number(match[1]) * (match[2] === 's' ? 1000 : 1);
}

interface ContinueFigures {
  reused: number;
  prompt: number;
  ttftMs: number;
  /** The whole "Prompt cache" figure: reuse, restore, drop, save. */
  cache: string;
}

describe.skipIf(!enabled)('prefix reuse and document snapshots (longhand serve + Chromium)', () => {
  let tmp: string;
  let dataDir: string;
  let server: ChildProcessWithoutNullStreams | undefined;
  let serverLog = '';
  let url: string;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];
  /** Prompt tokens of the long draft as the engine counted them (the first Continue). */
  let draftTokens = 0;
  const figures: Record<string, ContinueFigures> = {};

  const serverAddress = () => {
    const match = /^http:\/\/127\.0\.0\.1:(\d+)\/\?token=(.+)$/.exec(url)!;
    return { port: Number(match[1]), token: match[2]! };
  };
  const health = async (): Promise<{ engine: { state: string; pid?: number } }> => {
    const { port, token } = serverAddress();
    return (await (await fetch(`http://127.0.0.1:${port}/health`, { headers: { Authorization: `Bearer ${token}` } })).json()) as { engine: { state: string; pid?: number } };
  };
  /** Snapshot files the engine wrote in the data folder (`<document id>.lhkv`; an atomic write's temp files excluded). */
  const snapshotFiles = (): string[] => {
    const dir = join(dataDir, 'kv-snapshots');
    return existsSync(dir) ? readdirSync(dir).filter((name) => /^[A-Za-z0-9_-]+\.lhkv$/.test(name)) : [];
  };

  async function loadModel(): Promise<void> {
    await nav(page, 'Models').click();
    await page.getByLabel('Model path').fill(STORIES_260K);
    await page.getByLabel('Context (tokens)').fill(String(CONTEXT_TOKENS));
    await page.getByRole('button', { name: 'Load', exact: true }).click();
    const loaded = page.getByRole('region', { name: 'Loaded model' });
    await expect.poll(async () => (await loaded.isVisible()) && ((await loaded.textContent()) ?? '').includes(`${CONTEXT_TOKENS.toLocaleString('en-US')} of`), { timeout: 60_000 }).toBe(true);
  }

  async function typeDocument(text: string, title: string): Promise<void> {
    await nav(page, 'Writer').click();
    await editor(page).fill(text);
    await editor(page).evaluate((el: PageElement) => {
      el.setSelectionRange(el.value.length, el.value.length);
      el.dispatchEvent(new Event('select', { bubbles: true }));
    });
    await page.getByLabel('Title').fill(title);
    await expect.poll(() => page.getByRole('status', { name: 'Save state' }).textContent(), { timeout: 30_000 }).toBe('Saved');
  }

  /** Continue writing with the caret at the end of the draft; resolves with the finished generation's figures. */
  async function continueOnce(label: string): Promise<ContinueFigures> {
    await nav(page, 'Writer').click();
    await page.getByLabel('Max tokens').fill(String(CONTINUE_TOKENS));
    await page.getByRole('button', { name: 'Continue writing' }).click();
    await expect.poll(async () => (await stat(page, 'stop').textContent()) ?? '', { timeout: 90_000 }).toMatch(/^(token limit|end of text)$/);
    await expect.poll(() => stat(page, 'cache').count()).toBe(1);
    const cache = (await stat(page, 'cache').textContent()) ?? '';
    const { reused, prompt } = parseReuse((await stat(page, 'reuse').textContent()) ?? '');
    const result = { reused, prompt, ttftMs: parseMs((await stat(page, 'ttft').textContent()) ?? ''), cache };
    figures[label] = result;
    console.log(`e2e prefix reuse, ${label}: ${cache}; TTFT ${result.ttftMs} ms`);
    return result;
  }

  async function reject(): Promise<void> {
    await page.getByRole('button', { name: 'Reject' }).click();
    await expect.poll(() => page.getByRole('region', { name: 'Suggestion' }).count()).toBe(0);
  }

  beforeAll(async () => {
    mkdirSync(RESULTS, { recursive: true });
    tmp = mkdtempSync(join(tmpdir(), 'longhand-e2e-reuse-'));
    dataDir = join(tmp, 'data');
    await ensureRenderer();
    server = spawnServe(tmp, ['--data-dir', dataDir]);
    server.stderr.on('data', (chunk: Buffer) => (serverLog += chunk.toString()));
    url = await firstLine(server);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 60_000 });
    const context = await browser.newContext({ viewport: VIEWPORT, deviceScaleFactor: 1 });
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
    console.log(`e2e prefix reuse figures: ${JSON.stringify(figures)}`);
  }, 30_000);

  it('Continue twice on a long draft: the first prefills it all, the second reuses all of it but the last token', async () => {
    await loadModel();
    await typeDocument(LONG_DRAFT, 'Long draft');
    const first = await continueOnce('first Continue');
    draftTokens = first.prompt;
    // The draft really is long, and a fresh engine had nothing to reuse.
    expect(draftTokens).toBeGreaterThan(1500);
    expect(first.reused).toBe(0);
    expect(first.cache).toContain('snapshot saved');
    await reject();

    const second = await continueOnce('second Continue');
    // The same prompt again: every token but the last (whose logits pick the first new token)
    // comes from the cache, and the prefill is one token instead of ~2,300.
    expect(second.prompt).toBe(draftTokens);
    expect(second.reused).toBe(draftTokens - 1);
    expect(second.cache).not.toContain('restored from snapshot');
    expect(second.ttftMs).toBeLessThan(first.ttftMs);
    await stat(page, 'cache').scrollIntoViewIfNeeded();
    await screenshot(page, 'writer-reuse');
    await reject();
    expect(snapshotFiles()).toHaveLength(1);
  }, 240_000);

  it('reload the page, generate for another document, back to the draft: its cache is restored from the snapshot', async () => {
    await page.reload();
    await nav(page, 'Writer').click();
    await expect.poll(() => editor(page).inputValue(), { timeout: 30_000 }).toBe(LONG_DRAFT);
    // The engine's in-memory sequence becomes another document's.
    await page.getByRole('button', { name: 'New document' }).click();
    await typeDocument(OTHER_DRAFT, 'Other document');
    const other = await continueOnce('other document');
    // Its prompt shares no more than the first token or so with the draft's.
    expect(other.reused).toBeLessThan(5);
    await reject();
    await expect.poll(() => snapshotFiles().length).toBe(2);

    await page.getByRole('complementary', { name: 'Documents' }).getByRole('button', { name: /^Long draft/ }).click();
    await expect.poll(() => editor(page).inputValue()).toBe(LONG_DRAFT);
    const restored = await continueOnce('after reload, restored');
    expect(restored.cache).toMatch(/restored from snapshot in [\d.]+ (ms|s)/);
    expect(restored.prompt).toBe(draftTokens);
    expect(restored.reused).toBe(draftTokens - 1);
    expect(restored.ttftMs).toBeLessThan(figures['first Continue']!.ttftMs);
    await stat(page, 'cache').scrollIntoViewIfNeeded();
    await screenshot(page, 'writer-restored');
    await reject();
    expect(pageErrors).toEqual([]);
  }, 240_000);

  it('the engine process killed and restarted (Restart engine): the fresh process restores the snapshot', async () => {
    const pid = (await health()).engine.pid!;
    process.kill(pid, 'SIGKILL');
    const banner = page.getByRole('alert', { name: 'Engine status' });
    await banner.waitFor({ state: 'visible', timeout: 30_000 });
    await banner.getByRole('button', { name: 'Restart engine' }).click();
    await expect.poll(async () => (await banner.count()) + (await page.getByRole('status', { name: 'Engine status' }).count()), { timeout: 60_000, interval: 50 }).toBe(0);
    const after = await health();
    expect(after.engine.state).toBe('ready');
    expect(after.engine.pid).not.toBe(pid);

    const fresh = await continueOnce('after engine restart, restored');
    expect(fresh.cache).toMatch(/restored from snapshot in [\d.]+ (ms|s)/);
    expect(fresh.prompt).toBe(draftTokens);
    expect(fresh.reused).toBe(draftTokens - 1);
    await reject();
  }, 240_000);

  it('a Rewrite in between (a prompt of its own, no document) does not cost the draft its snapshot', async () => {
    await nav(page, 'Writer').click();
    const sentence = LONG_DRAFT.indexOf('.') + 1;
    // Select the first sentence; a key up (Shift: it moves nothing) makes the Writer read the selection.
    await editor(page).evaluate((el: PageElement, end: number) => el.setSelectionRange(0, end), sentence);
    await editor(page).press('Shift');
    await page.getByRole('button', { name: 'Rewrite selection' }).click();
    await expect.poll(async () => (await stat(page, 'stop').textContent()) ?? '', { timeout: 90_000 }).toMatch(/^(token limit|end of text)$/);
    const rewrite = (await stat(page, 'cache').textContent()) ?? '';
    console.log(`e2e prefix reuse, rewrite: ${rewrite}`);
    // The rewrite's prompt wraps the sentence in an instruction: it shares almost nothing with the draft's.
    expect(parseReuse(rewrite).reused).toBeLessThan(5);
    await reject();
    // The caret back at the end of the draft, Continue: the engine holds the rewrite's sequence,
    // so the draft's cache must come from its snapshot, not from a prefill of ~2,300 tokens.
    await editor(page).evaluate((el: PageElement) => el.setSelectionRange(el.value.length, el.value.length));
    await editor(page).press('Shift');
    const back = await continueOnce('after a rewrite, restored');
    expect(back.cache).toMatch(/restored from snapshot in [\d.]+ (ms|s)/);
    expect(back.reused).toBe(draftTokens - 1);
    await reject();
  }, 240_000);

  it('Inspector: Compare full and streaming over the draft reuses its cached prefix on both sides', async () => {
    await nav(page, 'Inspector').click();
    const compare = page.getByRole('region', { name: 'Compare policies' });
    await compare.getByRole('button', { name: "Use the Writer's draft" }).click();
    expect(await compare.getByLabel('Compare prompt').inputValue()).toBe(LONG_DRAFT);
    await compare.getByLabel('Compare tokens').fill('32');
    await compare.getByLabel('Policy A').selectOption('full');
    await compare.getByLabel('Policy B').selectOption('streaming');
    await compare.getByRole('button', { name: 'Compare', exact: true }).click();
    await expect.poll(() => compare.getByLabel('Compare result').count(), { timeout: 120_000 }).toBe(1);
    expect(await compare.getByRole('alert').count()).toBe(0);
    await compare.getByLabel('Compare result').scrollIntoViewIfNeeded();
    await screenshot(page, 'inspector-compare-reuse');
    const a = parseReuse((await compare.locator('[data-stat="reuse-a"]').textContent()) ?? '');
    const b = parseReuse((await compare.locator('[data-stat="reuse-b"]').textContent()) ?? '');
    // A finds the Writer's last sequence (the same draft), B the one A left (same prompt ids, full's exact tokens).
    expect(a).toEqual({ reused: draftTokens - 1, prompt: draftTokens });
    expect(b).toEqual({ reused: draftTokens - 1, prompt: draftTokens });
    const ttftA = parseMs((await compare.locator('[data-stat="ttft-a"]').textContent()) ?? '');
    const ttftB = parseMs((await compare.locator('[data-stat="ttft-b"]').textContent()) ?? '');
    const divergence = (await compare.locator('[data-stat="divergence"]').textContent()) ?? '';
    console.log(`e2e compare full vs streaming over the cached draft: A ${JSON.stringify(a)} TTFT ${ttftA} ms, B ${JSON.stringify(b)} TTFT ${ttftB} ms, agreement ${await compare.locator('[data-stat="agreement"]').textContent()}, first divergence ${divergence}`);
    // Prefill is dense under every policy, so the first token (from the last prompt token's
    // logits) is the same under full and streaming; a reused prefix must not change that.
    expect(divergence).not.toBe('token 0');

    // full → infinigen needs another pool layout: B says the cache was dropped, and why.
    await compare.getByLabel('Policy B').selectOption('infinigen');
    await compare.getByRole('button', { name: 'Compare', exact: true }).click();
    await expect.poll(async () => (await compare.getByRole('button', { name: 'Compare', exact: true }).isEnabled()) && (await compare.getByLabel('Compare result').count()) === 1, { timeout: 120_000 }).toBe(true);
    const dropped = (await compare.locator('[data-stat="reuse-b"]').textContent()) ?? '';
    console.log(`e2e compare full vs infinigen: B ${dropped}`);
    expect(dropped).toMatch(/^reused 0 of [\d,]+ prompt tokens · cache dropped: the policy switch needed a new cache/);
  }, 240_000);

  it('Settings: the snapshots on disk, their size, and Clear', async () => {
    await nav(page, 'Settings').click();
    const panel = page.getByRole('region', { name: 'Document snapshots' });
    const onDisk = snapshotFiles();
    expect(onDisk.length).toBe(2);
    await expect.poll(() => panel.locator('[data-stat="snapshot-count"]').textContent()).toBe(String(onDisk.length));
    const bytes = onDisk.reduce((sum, name) => sum + statSync(join(dataDir, 'kv-snapshots', name)).size, 0);
    console.log(`e2e snapshots: ${onDisk.length} files, ${bytes} bytes on disk; panel says ${await panel.locator('[data-stat="snapshot-bytes"]').textContent()} of ${await panel.locator('[data-stat="snapshot-cap"]').textContent()}`);
    expect(bytes).toBeGreaterThan(0);
    expect(await panel.locator('[data-stat="snapshot-cap"]').textContent()).toBe('2.00 GiB');
    expect(await panel.textContent()).toContain(join(dataDir, 'kv-snapshots'));
    await panel.scrollIntoViewIfNeeded();
    await screenshot(page, 'settings-snapshots');

    await panel.getByRole('button', { name: 'Clear snapshots' }).click();
    await expect.poll(() => panel.locator('[data-stat="snapshot-count"]').textContent()).toBe('0');
    expect(snapshotFiles()).toEqual([]);
    expect(pageErrors).toEqual([]);
  }, 120_000);
});
