// npm start without an Electron runtime must say so and fall back to browser mode; the
// Electron entry must bundle with the security defaults in it.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../test/support/models.ts';

describe('npm start', () => {
  it('falls back to browser mode with a clear message when Electron cannot be fetched', () => {
    const cache = mkdtempSync(join(tmpdir(), 'longhand-electron-cache-'));
    try {
      // A mirror on a closed local port makes the download fail fast and the same everywhere.
      const result = spawnSync(process.execPath, [join(PROJECT_ROOT, 'scripts', 'start.mjs')], {
        cwd: PROJECT_ROOT,
        encoding: 'utf8',
        timeout: 60_000,
        env: { ...process.env, ELECTRON_MIRROR: 'http://127.0.0.1:9/', electron_config_cache: cache, ELECTRON_SKIP_BINARY_DOWNLOAD: '' },
      });
      expect(result.stdout).toContain('the Electron runtime is not available');
      expect(result.stdout).toContain('starting browser mode');
      expect(result.status).not.toBe(0);
    } finally {
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
