import { defineConfig } from 'vitest/config';

// One runner for every TypeScript test. Tests sit next to the code they test (`*.test.ts`);
// end-to-end and integration tests live under test/. The native C++ tests run separately
// from scripts/test.mjs because they are a compiled executable, not a JS module.
export default defineConfig({
  test: {
    include: ['app/**/*.test.ts', 'native/**/*.test.ts', 'test/**/*.test.ts', 'scripts/**/*.test.ts'],
    exclude: ['node_modules/**', 'native/build/**'],
    environment: 'node',
    setupFiles: ['test/support/no-network.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
