// `longhand generate --offload` end to end (issue 14): the real bin, host, engine and model. Offload
// mode gives the in-place run's greedy ids for full, infinigen and a comparison policy, and its metrics lines report the
// bytes that crossed (bytesCrossedPerToken, per layer bytesCrossed) beside the row buffer's size.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { StepMetricsSchema } from '../../app/common/protocol.ts';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';

const BIN = join(PROJECT_ROOT, 'bin', 'longhand.mjs');
const dir = mkdtempSync(join(tmpdir(), 'longhand-offload-cli-'));
const env = { ...process.env, XDG_CACHE_HOME: join(dir, 'cache') };
const longhand = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args], { cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 120_000, env });

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function generate(...extra: string[]): number[] {
  const r = longhand('generate', '--model', STORIES_260K, '--prompt', 'Once upon a time', '--max-tokens', '40', '--temperature', '0', '--context', '512', '--threads', '1', '--json', ...extra);
  expect(r.status, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as { tokenIds: number[] }).tokenIds;
}

describe.skipIf(!haveSharedModel())('longhand generate --offload', () => {
  for (const policy of ['full', 'infinigen']) {
    it(`${policy}: the in-place ids; metrics carry the bytes crossed`, () => {
      const inPlace = generate('--policy', policy);
      const metrics = join(dir, `${policy}.jsonl`);
      const offload = generate('--policy', policy, '--offload', '--metrics', metrics);
      expect(inPlace).toHaveLength(40);
      expect(offload).toEqual(inPlace);
      const lines = readFileSync(metrics, 'utf8').trim().split('\n').map((l) => StepMetricsSchema.parse(JSON.parse(l)));
      const last = lines[lines.length - 1]!;
      expect(last.bytesCrossedPerToken).toBeGreaterThan(0);
      expect(last.bytesCrossedPerToken).toBe(last.layers.reduce((a, l) => a + l.bytesCrossed!, 0));
      expect(last.memory.rowBufferBytes).toBeGreaterThan(0);
    });
  }

  it('a comparison policy runs with offload: the in-place ids', () => {
    const inPlace = generate('--policy', 'quest');
    expect(generate('--policy', 'quest', '--offload')).toEqual(inPlace);
  });
});
