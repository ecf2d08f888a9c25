// The on-demand window UI build: staleness, "impossible" copies, a real vite build of a tiny
// renderer, a failed build that leaves the old one in place, concurrent starts, a stale lock.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BUILD_HINT, ensureRenderer, PROJECT_ROOT, RendererBuildError, rendererStaleness, viteEntry } from './renderer-build.ts';

const base = mkdtempSync(join(tmpdir(), 'longhand-renderer-build-'));
afterAll(() => rmSync(base, { recursive: true, force: true }));
let count = 0;

const CONFIG = `import { fileURLToPath } from 'node:url';
export default { root: fileURLToPath(new URL('.', import.meta.url)), base: './', logLevel: 'warn', build: { outDir: 'dist', emptyOutDir: true } };
`;

/** A project with a tiny renderer; `withVite` links this checkout's node_modules into it. */
function project(options: { withVite?: boolean; main?: string } = {}): string {
  const root = join(base, `p${count++}`);
  mkdirSync(join(root, 'renderer', 'src'), { recursive: true });
  writeFileSync(join(root, 'package.json'), '{"type":"module","private":true}');
  writeFileSync(join(root, 'renderer', 'index.html'), '<!doctype html><html><head><title>tiny</title></head><body><div id="root"></div><script type="module" src="./src/main.js"></script></body></html>\n');
  writeFileSync(join(root, 'renderer', 'src', 'main.js'), options.main ?? "document.getElementById('root').textContent = 'tiny renderer';\n");
  writeFileSync(join(root, 'renderer', 'vite.config.ts'), CONFIG);
  if (options.withVite) symlinkSync(join(PROJECT_ROOT, 'node_modules'), join(root, 'node_modules'), 'dir');
  return root;
}

/** Sets a file's times `seconds` from now. */
function age(path: string, seconds: number): void {
  const when = new Date(Date.now() + seconds * 1000);
  utimesSync(path, when, when);
}

function fakeDist(root: string, html = '<!doctype html><title>old build</title>'): string {
  mkdirSync(join(root, 'renderer', 'dist'), { recursive: true });
  const index = join(root, 'renderer', 'dist', 'index.html');
  writeFileSync(index, html);
  return index;
}

describe('rendererStaleness', () => {
  it('says missing without dist, fresh when dist is newest, and names the newer source otherwise', () => {
    const root = project();
    expect(rendererStaleness(root)).toBe('renderer/dist is missing');
    const index = fakeDist(root);
    age(index, 60);
    expect(rendererStaleness(root)).toBeUndefined();
    age(join(root, 'renderer', 'src', 'main.js'), 120);
    expect(rendererStaleness(root)).toBe(`renderer/dist is older than ${join('renderer', 'src', 'main.js')}`);
    age(index, 180);
    writeFileSync(join(root, 'package-lock.json'), '{}'); // a dependency change rebuilds too
    age(join(root, 'package-lock.json'), 240);
    expect(rendererStaleness(root)).toBe('renderer/dist is older than package-lock.json');
  });

  it('is fresh in a copy that ships dist without sources (a packaged app)', () => {
    const root = join(base, `p${count++}`);
    mkdirSync(root);
    fakeDist(root);
    expect(rendererStaleness(root)).toBeUndefined();
  });
});

describe('ensureRenderer when a build is impossible', () => {
  it('says what to run and reports no kept build when vite is not installed', async () => {
    const root = project();
    expect(viteEntry(root)).toEqual({ impossible: expect.stringContaining('vite is not installed') });
    const lines: string[] = [];
    const result = await ensureRenderer({ root, log: (line) => lines.push(line) });
    expect(result).toMatchObject({ state: 'impossible', kept: false });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(BUILD_HINT);
    expect(existsSync(join(root, 'renderer', 'dist'))).toBe(false);
  });

  it('keeps serving an older build when the sources are gone', async () => {
    const root = project({ withVite: true });
    rmSync(join(root, 'renderer', 'index.html'));
    const index = fakeDist(root);
    age(index, -3600);
    age(join(root, 'renderer', 'src', 'main.js'), 0);
    expect(viteEntry(root)).toEqual({ impossible: expect.stringContaining('renderer/index.html') });
    const lines: string[] = [];
    expect(await ensureRenderer({ root, log: (line) => lines.push(line) })).toMatchObject({ state: 'impossible', kept: true });
    expect(lines[0]).toContain('serving the older build');
    expect(readFileSync(index, 'utf8')).toContain('old build');
  });
});

describe('ensureRenderer with vite', () => {
  it('builds a missing dist with one line, then finds it fresh', async () => {
    const root = project({ withVite: true });
    const lines: string[] = [];
    const result = await ensureRenderer({ root, log: (line) => lines.push(line) });
    expect(result).toMatchObject({ state: 'built', reason: 'renderer/dist is missing' });
    expect(lines).toEqual(['Longhand: building the window UI (renderer/dist is missing; takes a few seconds)…']);
    const html = readFileSync(join(root, 'renderer', 'dist', 'index.html'), 'utf8');
    expect(html).toMatch(/<script type="module" crossorigin src="\.\/assets\/index-[\w-]+\.js"><\/script>/);
    expect(await ensureRenderer({ root, log: (line) => lines.push(line) })).toMatchObject({ state: 'fresh' });
    expect(lines).toHaveLength(1);
    // nothing but the (ignored) work folder is left behind: no staging, no lock
    expect(spawnSync('ls', ['-A', join(root, 'renderer', '.longhand-cache')], { encoding: 'utf8' }).stdout.trim()).toBe('');
  });

  it('fails with vite\'s message on a broken source and leaves the previous build in place', async () => {
    const root = project({ withVite: true, main: 'export const broken = ;\n' });
    const index = fakeDist(root);
    age(index, -3600);
    const failure = await ensureRenderer({ root, log: () => {} }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(RendererBuildError);
    expect((failure as Error).message).toMatch(/the window UI build \(vite\) exited with 1; `npm run build:renderer` shows the whole output/);
    expect((failure as Error).message).toMatch(/error during build:[\s\S]*renderer\/src\/main\.js:1:/);
    expect((failure as Error).message).not.toMatch(/^\s+at /m); // the stack stays in error.output
    expect((failure as RendererBuildError).output).toMatch(/^\s+at /m);
    expect(readFileSync(index, 'utf8')).toContain('old build');
    expect(existsSync(join(root, 'renderer', '.longhand-cache', 'build.lock'))).toBe(false);
  });

  it('builds once when two starts race, and takes over the lock of a process that died', async () => {
    const root = project({ withVite: true });
    // a lock left by a start that was killed: its pid no longer runs
    const dead = spawnSync(process.execPath, ['-e', '']).pid;
    mkdirSync(join(root, 'renderer', '.longhand-cache'), { recursive: true });
    writeFileSync(join(root, 'renderer', '.longhand-cache', 'build.lock'), String(dead));
    const lines: string[] = [];
    const results = await Promise.all([ensureRenderer({ root, log: (line) => lines.push(line) }), ensureRenderer({ root, log: (line) => lines.push(line) })]);
    expect(results.map((r) => r.state).sort()).toEqual(['built', 'fresh']);
    expect(lines).toHaveLength(1);
    expect(existsSync(join(root, 'renderer', 'dist', 'index.html'))).toBe(true);
  });

  it('gives up on a live lock after the timeout, naming the file', async () => {
    const root = project({ withVite: true });
    mkdirSync(join(root, 'renderer', '.longhand-cache'), { recursive: true });
    const lock = join(root, 'renderer', '.longhand-cache', 'build.lock');
    writeFileSync(lock, String(process.pid)); // this very process: alive
    await expect(ensureRenderer({ root, log: () => {}, lockTimeoutMs: 300 })).rejects.toThrow(/another process \(\d+\) has been building the window UI for over 0\.3 s; if none runs, delete .*build\.lock/);
    rmSync(lock);
  });
});
