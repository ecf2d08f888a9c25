// npm start without an Electron runtime must say so and fall back to browser mode; the
// Electron entry must bundle with the security defaults in it.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../test/support/models.ts';

describe('npm start', () => {
  it('falls back to browser mode with a clear message when Electron cannot be fetched', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'longhand-electron-cache-'));
    // A mirror on a closed local port makes the download fail fast and the same everywhere.
    const child = spawn(process.execPath, [join(PROJECT_ROOT, 'scripts', 'start.mjs')], {
      cwd: PROJECT_ROOT,
      detached: true, // its own process group: start.mjs and the server it starts end together
      env: { ...process.env, ELECTRON_MIRROR: 'http://127.0.0.1:9/', electron_config_cache: cache, ELECTRON_SKIP_BINARY_DOWNLOAD: '', BROWSER: 'true' },
    });
    let stdout = '';
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no browser-mode URL within 60 s; stdout so far:\n${stdout}`)), 60_000);
        child.stdout.on('data', (chunk: Buffer) => {
          stdout += chunk.toString();
          const match = /http:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]+/.exec(stdout);
          if (match) {
            clearTimeout(timer);
            resolve(match[0]);
          }
        });
        child.on('exit', (code) => reject(new Error(`start.mjs exited (${code}) before browser mode started; stdout:\n${stdout}`)));
      });
      expect(stdout).toContain('the Electron runtime is not available');
      expect(stdout).toContain('starting browser mode');
      // the browser-mode server answers on loopback with its token
      const response = await fetch(url);
      expect(response.status).toBe(200);
    } finally {
      if (child.pid) process.kill(-child.pid, 'SIGTERM');
      rmSync(cache, { recursive: true, force: true });
    }
  });

  it('bundles the Electron main process with the locked-down web preferences', () => {
    const require = createRequire(import.meta.url);
    const { bundleMain } = require('./bundle-main.cjs') as { bundleMain: (root: string) => string };
    const bundled = readFileSync(bundleMain(PROJECT_ROOT), 'utf8');
    expect(bundled).toMatch(/contextIsolation: true/);
    expect(bundled).toMatch(/sandbox: true/);
    expect(bundled).toMatch(/nodeIntegration: false/);
    expect(bundled).toContain('enableSandbox()');
    expect(bundled).toContain('require("electron")');
  });
});
