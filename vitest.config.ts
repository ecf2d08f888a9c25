import { mkdtempSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vitest/config';

// One runner for every TypeScript test. Tests sit next to the code they test (`*.test.ts`);
// end-to-end and integration tests live under test/. The native C++ tests run separately
// from scripts/test.mjs because they are a compiled executable, not a JS module.
// Two projects: node (everything under app/, native/, test/, scripts/) and renderer (React
// component tests, `renderer/**/*.test.tsx` and `renderer/**/*.test.ts`, on happy-dom).
// The engine keeps caches under $XDG_CACHE_HOME/longhand (model digests, InfiniGen skews, the
// stage cache: ~2 GB per 1 GB model). Tests, and the engine hosts and CLIs they start (children
// inherit the environment), get one folder per run instead of the user's ~/.cache: nothing a run
// writes survives it, and no entry left by older code is read. Tests that need a cache of their own
// still set XDG_CACHE_HOME themselves.
const testCacheHome = process.env.LONGHAND_TEST_CACHE_HOME ?? mkdtempSync(join(tmpdir(), 'longhand-test-cache-'));
if (!process.env.LONGHAND_TEST_CACHE_HOME) process.env.LONGHAND_TEST_CACHE_MADE = testCacheHome; // removed at the end (test-cache-home.ts)

const shared = {
  setupFiles: ['test/support/no-network.ts'],
  env: { XDG_CACHE_HOME: testCacheHome },
  pool: 'forks' as const,
  testTimeout: 60_000,
  hookTimeout: 120_000,
};

// Test files in parallel: vitest's default (cores - 1) gives a 2-core machine one worker, yet most
// test files spend much of their time single-threaded (writing fixtures, tokenising, waiting on a
// child process); two workers there ran test/ in 331 s instead of 480 s. Fixtures shared between
// files are written under a per-process name and renamed into place (test/fixtures/write-once.ts).
const maxWorkers = Math.max(2, availableParallelism() - 1);

export default defineConfig({
  test: {
    maxWorkers,
    globalSetup: ['test/support/test-cache-home.ts'],
    projects: [
      {
        test: {
          ...shared,
          name: 'node',
          include: ['app/**/*.test.ts', 'native/**/*.test.ts', 'test/**/*.test.ts', 'scripts/**/*.test.ts'],
          exclude: ['node_modules/**', 'native/build/**'],
          environment: 'node',
        },
      },
      {
        plugins: [react()],
        test: {
          ...shared,
          name: 'renderer',
          include: ['renderer/**/*.test.ts', 'renderer/**/*.test.tsx'],
          exclude: ['node_modules/**', 'renderer/dist/**'],
          environment: 'happy-dom',
          setupFiles: [...shared.setupFiles, 'renderer/src/test/setup.ts'],
          testTimeout: 20_000,
        },
      },
    ],
  },
});
