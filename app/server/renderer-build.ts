// The window UI's build, on demand: `npm start` (both carriers) and `longhand serve` call
// ensureRenderer() before they serve renderer/dist, so a fresh clone's first start shows the app
// instead of a "not built" page, and an edited renderer is rebuilt on the next start.
//   fresh       renderer/dist/index.html is at least as new as every source below: nothing to do
//   built       it was missing or older: one line is logged, vite builds it (about a second)
//   impossible  no renderer sources in this copy, or vite (a dev dependency) is not installed:
//               the caller serves what exists (or the fallback page) and says what to run
// A failed build throws RendererBuildError with vite's own last lines. The build goes to a staging
// folder and replaces dist only when it succeeded, under a lock file, so concurrent starts (tests
// start several servers at once) build once and never serve a half-written folder.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** This checkout (or the copy this file was loaded from). */
export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Everything the bundle is made from (app/common reaches the renderer as types only, so it is not here). */
export const RENDERER_SOURCES = ['renderer/src', 'renderer/index.html', 'renderer/vite.config.ts', 'renderer/tsconfig.json', 'package-lock.json'];
const REQUIRED_SOURCES = ['renderer/src', 'renderer/index.html', 'renderer/vite.config.ts'];
/** Lock file and staging folders; `.longhand-cache/` is in .gitignore. */
const WORK_DIR = join('renderer', '.longhand-cache');
const BUILD_TIMEOUT_MS = 300_000;
const POLL_MS = 100;

/** What to run by hand when a start cannot build the UI itself. */
export const BUILD_HINT = 'run `npm ci` (it installs vite, a dev dependency), then `npm run build:renderer`';

export type RendererState =
  | { state: 'fresh'; dist: string }
  | { state: 'built'; dist: string; reason: string; ms: number }
  /** `kept`: an older build is still there and will be served. */
  | { state: 'impossible'; dist: string; reason: string; kept: boolean };

export interface EnsureRendererOptions {
  /** The project root (default: this checkout). */
  root?: string;
  /** The one line said before a build, and the line about an impossible one. */
  log?: (line: string) => void;
  /** How long to wait for another process's build (default 300 s). */
  lockTimeoutMs?: number;
}

/** A build that was possible and failed (or timed out, or left no index.html). */
export class RendererBuildError extends Error {
  constructor(
    message: string,
    /** vite's output, whole. */
    readonly output: string,
  ) {
    super(message);
    this.name = 'RendererBuildError';
  }
}

/** Newest modification time under `path` (a file or a folder, walked whole); 0 when absent. */
function newest(path: string): { mtimeMs: number; file: string } {
  if (!existsSync(path)) return { mtimeMs: 0, file: path };
  const stat = statSync(path);
  let best = { mtimeMs: stat.mtimeMs, file: path };
  if (stat.isDirectory()) {
    for (const entry of readdirSync(path)) {
      const inner = newest(join(path, entry));
      if (inner.mtimeMs > best.mtimeMs) best = inner;
    }
  }
  return best;
}

/** Why renderer/dist needs a build ('missing', or the newer source that says so); undefined when it is fresh. */
export function rendererStaleness(root: string = PROJECT_ROOT): string | undefined {
  const index = join(root, 'renderer', 'dist', 'index.html');
  if (!existsSync(index)) return 'renderer/dist is missing';
  const built = statSync(index).mtimeMs;
  const source = RENDERER_SOURCES.map((path) => newest(join(root, path))).reduce((a, b) => (b.mtimeMs > a.mtimeMs ? b : a));
  return source.mtimeMs > built ? `renderer/dist is older than ${relative(root, source.file)}` : undefined;
}

/** vite's command-line entry for this root, or why a build is impossible here. */
export function viteEntry(root: string = PROJECT_ROOT): { entry: string } | { impossible: string } {
  const missing = REQUIRED_SOURCES.filter((path) => !existsSync(join(root, path)));
  if (missing.length > 0) return { impossible: `this copy has no renderer sources (${missing.join(', ')})` };
  try {
    const manifest = createRequire(join(root, 'package.json')).resolve('vite/package.json');
    const bin = (JSON.parse(readFileSync(manifest, 'utf8')) as { bin?: string | Record<string, string> }).bin;
    const path = typeof bin === 'string' ? bin : bin?.vite;
    if (!path) return { impossible: 'the installed vite names no command-line entry' };
    return { entry: join(dirname(manifest), path) };
  } catch {
    return { impossible: 'vite is not installed (npm ci --omit=dev leaves it out)' };
  }
}

/** Builds renderer/dist when it is missing or older than its sources; see the file comment. */
export async function ensureRenderer(options: EnsureRendererOptions = {}): Promise<RendererState> {
  const root = options.root ?? PROJECT_ROOT;
  const log = options.log ?? ((line: string) => console.log(line));
  const dist = join(root, 'renderer', 'dist');
  if (rendererStaleness(root) === undefined) return { state: 'fresh', dist };
  const vite = viteEntry(root);
  if ('impossible' in vite) {
    const kept = existsSync(join(dist, 'index.html'));
    log(`Longhand: the window UI cannot be built here: ${vite.impossible}; ${kept ? 'serving the older build in renderer/dist' : 'the page will say so'}. To build it, ${BUILD_HINT}.`);
    return { state: 'impossible', dist, reason: vite.impossible, kept };
  }

  const work = join(root, WORK_DIR);
  const release = await acquireLock(join(work, 'build.lock'), options.lockTimeoutMs ?? BUILD_TIMEOUT_MS);
  try {
    // Another process may have built it while this one waited.
    const reason = rendererStaleness(root);
    if (reason === undefined) return { state: 'fresh', dist };
    log(`Longhand: building the window UI (${reason}; takes a few seconds)…`);
    const started = performance.now();
    const staging = join(work, `staging-${process.pid}`);
    rmSync(staging, { recursive: true, force: true });
    try {
      const out = join(staging, 'dist');
      await runVite(vite.entry, root, out);
      if (!existsSync(join(out, 'index.html'))) throw new RendererBuildError(`the window UI build finished without ${relative(root, join(out, 'index.html'))}`, '');
      // Swap: the old build moves aside (into a folder named dist, which git ignores), the new one in.
      if (existsSync(dist)) {
        mkdirSync(join(staging, 'old'), { recursive: true });
        renameSync(dist, join(staging, 'old', 'dist'));
      }
      renameSync(out, dist);
    } finally {
      rmSync(staging, { recursive: true, force: true });
    }
    return { state: 'built', dist, reason, ms: performance.now() - started };
  } finally {
    release();
  }
}

function runVite(entry: string, root: string, outDir: string): Promise<void> {
  const args = [entry, 'build', '--config', join(root, 'renderer', 'vite.config.ts'), '--outDir', outDir, '--emptyOutDir', '--logLevel', 'warn'];
  return new Promise((resolveBuild, reject) => {
    const child = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NODE_ENV: 'production' } });
    let output = '';
    const collect = (chunk: Buffer) => (output += chunk.toString());
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    const timer = setTimeout(() => child.kill('SIGKILL'), BUILD_TIMEOUT_MS);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new RendererBuildError(`the window UI build could not start: ${error.message}`, output));
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return resolveBuild();
      const tail = buildErrorExcerpt(output);
      const how = signal ? `was killed (${signal}${signal === 'SIGKILL' ? `, over ${BUILD_TIMEOUT_MS / 1000} s?` : ''})` : `exited with ${code}`;
      reject(new RendererBuildError(`the window UI build (vite) ${how}; \`npm run build:renderer\` shows the whole output${tail ? `:\n${tail}` : ''}`, output));
    });
  });
}

/** vite's error without its stack: from "error during build" to the first `at …` line (at most 20 lines). */
export function buildErrorExcerpt(output: string): string {
  const lines = output.trimEnd().split('\n');
  const start = lines.findIndex((line) => /error during build/i.test(line));
  if (start < 0) return lines.slice(-12).join('\n').trim();
  const rest = lines.slice(start);
  const stack = rest.findIndex((line) => /^\s+at /.test(line));
  return rest.slice(0, stack < 0 ? 20 : Math.min(stack, 20)).join('\n').trim();
}

/**
 * An exclusive lock: a file created with O_EXCL that holds the owner's pid. A lock whose owner is
 * gone (a start that was killed mid-build) is taken over; a live one is waited for.
 */
async function acquireLock(path: string, timeoutMs: number): Promise<() => void> {
  mkdirSync(dirname(path), { recursive: true });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      writeFileSync(path, String(process.pid), { flag: 'wx' });
      return () => rmSync(path, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    if (!lockOwnerAlive(path)) {
      try {
        unlinkSync(path);
      } catch {
        // someone else removed or replaced it: try again
      }
      continue;
    }
    if (Date.now() > deadline) throw new RendererBuildError(`another process (${readFileSync(path, 'utf8').trim() || 'pid unknown'}) has been building the window UI for over ${(timeoutMs / 1000).toFixed(timeoutMs < 10_000 ? 1 : 0)} s; if none runs, delete ${path}`, '');
    await new Promise((resolveWait) => setTimeout(resolveWait, POLL_MS));
  }
}

function lockOwnerAlive(path: string): boolean {
  let text: string;
  try {
    text = readFileSync(path, 'utf8').trim();
  } catch {
    return true; // gone or unreadable right now: look again
  }
  const pid = Number(text);
  // An empty file is a lock being written this instant, unless it is old.
  if (!/^\d+$/.test(text) || pid <= 0) return Date.now() - statMtime(path) < 10_000;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'; // alive, another user's
  }
}

function statMtime(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return Date.now();
  }
}
