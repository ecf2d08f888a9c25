import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { HEAP_TUNABLE, withHeapTunables } from './heap-tunables.ts';
import { engineEnv } from '../../server/services/data-dir.ts';

describe('withHeapTunables', () => {
  it('adds glibc.malloc.hugetlb=1 and keeps the other tunables and variables', () => {
    expect(withHeapTunables({ A: '1' })).toEqual({ A: '1', GLIBC_TUNABLES: HEAP_TUNABLE });
    expect(withHeapTunables({ GLIBC_TUNABLES: 'glibc.malloc.arena_max=2' }).GLIBC_TUNABLES).toBe(`glibc.malloc.arena_max=2:${HEAP_TUNABLE}`);
  });

  it('leaves a hugetlb setting the user chose alone, and does not change its argument', () => {
    const env = { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=0' };
    expect(withHeapTunables(env).GLIBC_TUNABLES).toBe('glibc.malloc.hugetlb=0');
    withHeapTunables({ B: '2' });
    expect(env).toEqual({ GLIBC_TUNABLES: 'glibc.malloc.hugetlb=0' });
  });

  it('is in the environment engineEnv gives the engine host', () => {
    expect(engineEnv('/tmp/data', { PATH: '/bin' }).GLIBC_TUNABLES).toBe(HEAP_TUNABLE);
  });

  it('reaches a forked process (glibc reads it at start)', () => {
    const seen = execFileSync(process.execPath, ['-e', 'process.stdout.write(process.env.GLIBC_TUNABLES ?? "")'], { env: withHeapTunables({ PATH: process.env.PATH }), encoding: 'utf8' });
    expect(seen).toBe(HEAP_TUNABLE);
  });
});
