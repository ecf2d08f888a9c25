#!/usr/bin/env node
// `npm start`: the desktop app when the Electron runtime is present, browser mode otherwise.
//
// The electron package's own download is disabled at install time (its host is unreachable on
// our CI machines, and an install must never fail on it). So on first start we try that
// download once; where it cannot be had we say so plainly and start browser mode instead.
// Either way the window UI (renderer/dist) is built first when it is missing or older than its
// sources (app/server/renderer-build.ts), so a fresh clone's first start shows the app.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(import.meta.url), '..', '..');
const require = createRequire(import.meta.url);
const electronDir = join(root, 'node_modules', 'electron');

/** The Electron binary's path, or undefined while the runtime has not been downloaded. */
export function electronBinary() {
  const pathFile = join(electronDir, 'path.txt');
  if (!existsSync(pathFile)) return undefined;
  const binary = join(electronDir, 'dist', readFileSync(pathFile, 'utf8').trim());
  return existsSync(binary) ? binary : undefined;
}

/** Runs electron's own installer once; returns the reason when the download is impossible. */
function fetchElectron() {
  if (!existsSync(join(electronDir, 'install.js'))) return 'the electron package is not installed (run npm ci)';
  console.log('Longhand: fetching the Electron runtime (first start only)…');
  const result = spawnSync(process.execPath, [join(electronDir, 'install.js')], { cwd: electronDir, encoding: 'utf8', timeout: 180_000 });
  if (result.status === 0 && electronBinary()) return undefined;
  const output = `${result.stderr ?? ''}${result.stdout ?? ''}`;
  const firstLine = output.split('\n').find((line) => /error|fail|ENOTFOUND|EAI_AGAIN|ECONN/i.test(line)) ?? output.split('\n')[0] ?? '';
  return result.error?.message ?? (firstLine.trim() || `the installer exited with ${result.status}`);
}

function startBrowserMode() {
  const serve = join(root, 'app', 'server', 'serve.ts');
  if (!existsSync(serve)) {
    console.log('Longhand: browser mode is not built yet in this version (see README, "What works so far"). Nothing was started.');
    return 3;
  }
  const child = spawn(process.execPath, [join(root, 'bin', 'longhand.mjs'), 'serve', '--open', ...process.argv.slice(2)], { stdio: 'inherit' });
  child.on('exit', (code) => process.exit(code ?? 1));
  return undefined;
}

function startElectron(binary) {
  const { bundleMain } = require(join(root, 'scripts', 'bundle-main.cjs'));
  const entry = bundleMain(root);
  const child = spawn(binary, [entry, ...process.argv.slice(2)], { stdio: 'inherit' });
  child.on('exit', (code) => process.exit(code ?? 1));
}

/**
 * Builds the window UI when it needs it. Returns false (after saying why) when the start must not
 * go on: a failed build, or no UI at all for the desktop window, which has no fallback page.
 */
async function prepareRenderer(forElectron) {
  const { register } = await import('tsx/esm/api');
  register();
  const { ensureRenderer, RendererBuildError, BUILD_HINT } = await import('../app/server/renderer-build.ts');
  try {
    const result = await ensureRenderer({ root });
    if (forElectron && result.state === 'impossible' && !result.kept) {
      console.error(`Longhand: the desktop window has no UI to show; ${BUILD_HINT}, then npm start again.`);
      return false;
    }
    return true;
  } catch (error) {
    if (!(error instanceof RendererBuildError)) throw error;
    console.error(`Longhand: ${error.message}`);
    return false;
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  let binary = electronBinary();
  let reason;
  if (!binary) {
    reason = fetchElectron();
    binary = electronBinary();
  }
  if (!binary) {
    console.log(`Longhand: the Electron runtime is not available (${reason ?? 'unknown reason'}).`);
    console.log('Longhand: starting browser mode instead: the same app served on 127.0.0.1 in your browser.');
  }
  if (!(await prepareRenderer(binary !== undefined))) process.exit(1);
  if (binary) startElectron(binary);
  else {
    const code = startBrowserMode();
    if (code !== undefined) process.exitCode = code;
  }
}
