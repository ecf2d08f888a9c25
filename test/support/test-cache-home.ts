// Vitest global setup: removes the run's cache folder (vitest.config.ts made it) when the run ends.
// A folder the caller named with LONGHAND_TEST_CACHE_HOME is theirs and stays.
import { rmSync } from 'node:fs';

export default function setup(): () => void {
  return () => {
    const made = process.env.LONGHAND_TEST_CACHE_MADE;
    if (made) rmSync(made, { recursive: true, force: true });
  };
}
