// The test-only fault hook: with LONGHAND_TEST_FAULTS=1 at load it kills the process with a real
// SIGSEGV or SIGABRT; without it the hook is absent and testFault() throws a typed error. The
// faults run in child processes (plain node loading native/index.js) so this test survives them.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { NativeError as CommonNativeError } from '../app/common/errors.ts';
import { TEST_FAULTS_ENV, testFault, testFaultsEnabled } from './index.js';

const INDEX_URL = new URL('./index.js', import.meta.url).href;
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Runs `node -e` that imports the facade and calls testFault(kind); env var set or removed. */
function runChild(kind: string, enabled: boolean) {
  const env = { ...process.env };
  delete env[TEST_FAULTS_ENV];
  if (enabled) env[TEST_FAULTS_ENV] = '1';
  const script = `
    const m = await import(${JSON.stringify(INDEX_URL)});
    try { m.testFault(${JSON.stringify(kind)}); console.log('returned'); }
    catch (e) { console.log(JSON.stringify({ name: e.name, code: e.code, message: e.message })); }`;
  return spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, env, encoding: 'utf8', timeout: 30_000 });
}

describe('native test fault hook', () => {
  it('is absent from this process (no LONGHAND_TEST_FAULTS) and refuses with NATIVE_BAD_ARGUMENT', () => {
    expect(process.env[TEST_FAULTS_ENV]).toBeUndefined();
    expect(testFaultsEnabled()).toBe(false);
    let caught: unknown;
    try {
      testFault('segv');
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(CommonNativeError);
    expect((caught as CommonNativeError).code).toBe('NATIVE_BAD_ARGUMENT');
    expect((caught as CommonNativeError).message).toContain('LONGHAND_TEST_FAULTS=1');
  });

  it('kills the process with SIGSEGV for segv and SIGABRT for abort when enabled', () => {
    const segv = runChild('segv', true);
    expect(segv.signal, segv.stderr).toBe('SIGSEGV');
    expect(segv.stdout).not.toContain('returned');
    const abort = runChild('abort', true);
    expect(abort.signal, abort.stderr).toBe('SIGABRT');
  });

  it('rejects an unknown kind with NATIVE_BAD_ARGUMENT, and does nothing without the variable', () => {
    const bad = runChild('bus', true);
    expect(bad.status).toBe(0);
    expect(JSON.parse(bad.stdout)).toMatchObject({ code: 'NATIVE_BAD_ARGUMENT', message: expect.stringContaining("'bus'") });
    const off = runChild('segv', false);
    expect(off.signal).toBeNull();
    expect(JSON.parse(off.stdout)).toMatchObject({ code: 'NATIVE_BAD_ARGUMENT', message: expect.stringContaining('LONGHAND_TEST_FAULTS') });
  });
});
