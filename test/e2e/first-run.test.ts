// A newcomer's first run (issue 34), end to end and building nothing beforehand: a clean copy of
// the tree as a clone has it (git's files, no renderer/dist; node_modules and the native build are
// linked in, as `npm ci` would have made them), started the way `npm start` starts it where the
// Electron runtime cannot be downloaded. The start itself must build the window UI; then Chromium
// must show the Writer, load stories260K from the Models view (the Library listing it with its
// size) and stream a Continue. The Writer's screenshot goes to test-results/e2e/first-run-writer.png.
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';
import { CHROMIUM, CHROMIUM_ARGS, editor, haveChromium, loadModel, nav, stat, typeDocument, VIEWPORT, waitForStop } from './browser.ts';

const RESULTS = join(PROJECT_ROOT, 'test-results', 'e2e');
const CONTEXT_TOKENS = 1024;
const URL_LINE = /http:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]+/;

/** The files a clone of this tree would hold: tracked ones still present, plus new ones git does not ignore. */
function cloneFiles(): string[] | undefined {
  const listed = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: PROJECT_ROOT, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (listed.status !== 0) {
    const message = `git ls-files failed in ${PROJECT_ROOT} (${listed.error?.message ?? listed.stderr.trim()}); the first-run e2e test needs a git checkout and is skipped`;
    if (process.env.CI) throw new Error(`${message}; CI must have one`);
    console.warn(`SKIP: ${message}`);
    return undefined;
  }
  return listed.stdout.split('\0').filter((path) => path !== '' && existsSync(join(PROJECT_ROOT, path)) && lstatSync(join(PROJECT_ROOT, path)).isFile());
}

const files = haveChromium('first-run') && haveSharedModel() ? cloneFiles() : undefined;

describe.skipIf(!files)('first run: npm start from a clean copy, in Chromium', () => {
  let tmp: string;
  let copy: string;
  let start: ChildProcessWithoutNullStreams | undefined;
  let stdout = '';
  let stderr = '';
  let url: string;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    mkdirSync(RESULTS, { recursive: true });
    tmp = mkdtempSync(join(tmpdir(), 'longhand-e2e-first-run-'));
    copy = join(tmp, 'longhand');
    for (const path of files!) {
      mkdirSync(dirname(join(copy, path)), { recursive: true });
      copyFileSync(join(PROJECT_ROOT, path), join(copy, path));
    }
    // What `npm ci` leaves beside the sources: the packages and the native addon (its install step).
    symlinkSync(join(PROJECT_ROOT, 'node_modules'), join(copy, 'node_modules'), 'dir');
    mkdirSync(join(copy, 'native'), { recursive: true });
    symlinkSync(join(PROJECT_ROOT, 'native', 'build'), join(copy, 'native', 'build'), 'dir');
    expect(existsSync(join(copy, 'renderer', 'src', 'main.tsx'))).toBe(true);
    expect(existsSync(join(copy, 'renderer', 'dist'))).toBe(false);

    // npm start = node scripts/start.mjs. The Electron download is pointed at a closed local port
    // (it fails fast and the same everywhere), so start.mjs falls back to browser mode.
    const home = join(tmp, 'home');
    start = spawn(process.execPath, [join(copy, 'scripts', 'start.mjs')], {
      cwd: copy,
      detached: true, // its own process group: start.mjs and the server it starts end together
      env: { ...process.env, HOME: home, XDG_CONFIG_HOME: join(tmp, 'config'), XDG_DATA_HOME: join(tmp, 'data-home'), XDG_CACHE_HOME: join(tmp, 'cache'), ELECTRON_MIRROR: 'http://127.0.0.1:9/', electron_config_cache: join(tmp, 'electron-cache'), ELECTRON_SKIP_BINARY_DOWNLOAD: '', BROWSER: 'true' },
    });
    start.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no browser-mode URL within 150 s; stdout:\n${stdout}\nstderr:\n${stderr}`)), 150_000);
      start!.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        const match = URL_LINE.exec(stdout);
        if (match) {
          clearTimeout(timer);
          resolve(match[0]);
        }
      });
      start!.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`npm start exited (${code}) before browser mode started; stdout:\n${stdout}\nstderr:\n${stderr}`));
      });
    });

    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 60_000 });
    page = await (await browser.newContext({ viewport: VIEWPORT, deviceScaleFactor: 1 })).newPage();
    page.setDefaultTimeout(30_000);
    page.on('pageerror', (error) => pageErrors.push(error.message));
  }, 240_000);

  afterAll(async () => {
    await browser?.close().catch(() => {});
    if (start?.pid && start.exitCode === null) {
      const exited = new Promise((resolve) => start!.once('exit', resolve));
      process.kill(-start.pid, 'SIGTERM');
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
      if (start.exitCode === null) process.kill(-start.pid, 'SIGKILL');
    }
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  }, 30_000);

  it('npm start says it falls back to browser mode and builds the window UI itself', () => {
    expect(stdout).toContain('the Electron runtime is not available');
    expect(stdout).toContain('starting browser mode');
    expect(stdout).toContain('Longhand: building the window UI (renderer/dist is missing');
    expect(existsSync(join(copy, 'renderer', 'dist', 'index.html'))).toBe(true);
  });

  it('the printed URL shows the Writer, not a "not built" page', async () => {
    const response = await page.goto(url);
    expect(response?.status()).toBe(200);
    await page.waitForURL((address) => !address.search.includes('token='));
    expect(await nav(page, 'Writer').getAttribute('aria-current')).toBe('page');
    await expect.poll(() => editor(page).isVisible()).toBe(true);
    expect(await page.getByRole('button', { name: 'Continue writing' }).count()).toBe(1);
    expect(await page.textContent('body')).not.toContain('not built');
    await page.screenshot({ path: join(RESULTS, 'first-run-writer.png') });
  });

  it('loads stories260K from the Models view; the Library lists it as recent with its size', async () => {
    await loadModel(page, CONTEXT_TOKENS, STORIES_260K);
    const row = page.getByRole('region', { name: 'Library' }).getByRole('row').filter({ hasText: 'stories260K.gguf' });
    await expect.poll(() => row.count(), { timeout: 15_000 }).toBe(1);
    const cells = await row.getByRole('cell').allTextContents();
    // Name, Type, Architecture (read from its header), Size, Source; stories260K.gguf is 1,185,376 bytes
    expect(cells).toEqual(['stories260K.gguf', 'gguf', 'llama', '1.13 MiB', 'recent']);
  });

  it('Continue writing streams text into the suggestion', async () => {
    await typeDocument(page, 'Once upon a time, there was a little girl named Lily.');
    await page.getByLabel('Max tokens').fill('40');
    await page.getByRole('button', { name: 'Continue writing' }).click();
    const suggestion = page.getByRole('region', { name: 'Suggested text' });
    await expect.poll(async () => ((await suggestion.textContent()) ?? '').trim().length, { timeout: 60_000 }).toBeGreaterThan(0);
    expect(await waitForStop(page)).toMatch(/^(token limit|end of text)$/);
    expect(Number(await stat(page, 'tokens').textContent())).toBeGreaterThan(0);
    await page.screenshot({ path: join(RESULTS, 'first-run-streamed.png') });
    expect(pageErrors).toEqual([]);
  });
});
