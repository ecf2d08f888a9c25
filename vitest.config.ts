import react from '@vitejs/plugin-react';
import { defineConfig } from 'vitest/config';

// One runner for every TypeScript test. Tests sit next to the code they test (`*.test.ts`);
// end-to-end and integration tests live under test/. The native C++ tests run separately
// from scripts/test.mjs because they are a compiled executable, not a JS module.
// Two projects: node (everything under app/, native/, test/, scripts/) and renderer (React
// component tests, `renderer/**/*.test.tsx` and `renderer/**/*.test.ts`, on happy-dom).
const shared = {
  setupFiles: ['test/support/no-network.ts'],
  pool: 'forks' as const,
  testTimeout: 60_000,
  hookTimeout: 120_000,
};

export default defineConfig({
  test: {
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
