// The test run's cache folder (vitest.config.ts): the engine's caches must not land in the user's.
import { homedir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

describe('test cache home', () => {
  it("XDG_CACHE_HOME is this run's folder (or LONGHAND_TEST_CACHE_HOME), never ~/.cache", () => {
    const home = process.env.XDG_CACHE_HOME;
    expect(home).toBeDefined();
    expect(home!.startsWith(join(homedir(), '.cache'))).toBe(false);
    if (process.env.LONGHAND_TEST_CACHE_HOME) expect(home).toBe(process.env.LONGHAND_TEST_CACHE_HOME);
    else expect(home).toMatch(/longhand-test-cache-[^/]+$/);
  });
});
