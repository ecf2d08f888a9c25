// `longhand inspect` end to end: the real bin, the real reference model, a real process.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';

const BIN = join(PROJECT_ROOT, 'bin', 'longhand.mjs');
const scratch = mkdtempSync(join(tmpdir(), 'longhand-inspect-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function longhand(...args: string[]) {
  return spawnSync(process.execPath, [BIN, ...args], { cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 60_000 });
}

describe.runIf(haveSharedModel())('longhand inspect on stories260K', () => {
  it('reports the shape, vocabulary and a memory estimate as JSON', () => {
    const result = longhand('inspect', STORIES_260K, '--json', '--context', '512');
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    const report = JSON.parse(result.stdout);
    expect(report).toMatchObject({
      format: 'gguf', architecture: 'llama', hiddenSize: 64, layers: 5, heads: 8, kvHeads: 4, headDim: 8,
      ffnSize: 172, vocabSize: 512, trainedContext: 2048,
    });
    // 260,032 parameters in the README, plus the separate copy of the embedding as output (512·64)
    expect(report.parameters).toBe(260_032 + 512 * 64);
    // fp16 K and V rows: 2 · 5 layers · 4 KV heads · 8 dims · 2 bytes = 640 bytes per token
    expect(report.memory.kvFullBytes).toBe(640 * 512);
    // ⌊0.3 · 8⌋ = 2 partial columns · 5 · 4 · 2 bytes = 80 bytes per token
    expect(report.memory.partialKeyBytes).toBe(80 * 512);
    expect(report.memory.fitsInfinigen).toBe(true);
    expect(typeof report.chatTemplate).toBe('boolean');
  });

  it('prints a readable table without --json', () => {
    const result = longhand('inspect', STORIES_260K);
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/dim 64, 5 layers, 8 heads, 4 KV heads, head dim 8/);
    expect(result.stdout).toMatch(/vocabulary\s+512/);
    expect(result.stdout).toMatch(/memory at 2048 tokens of context/);
  });
});

describe('longhand inspect errors', () => {
  it('names a missing file in one line and exits 1', () => {
    const result = longhand('inspect', join(scratch, 'nope.gguf'));
    expect(result.status).toBe(1);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
    expect(result.stderr).toMatch(/MODEL_NOT_FOUND/);
  });

  it('names a corrupt file in one line and exits 1', () => {
    const bad = join(scratch, 'bad.gguf');
    writeFileSync(bad, Buffer.from('GGUF\x03\x00\x00\x00garbage', 'latin1'));
    const result = longhand('inspect', bad);
    expect(result.status).toBe(1);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
    expect(result.stderr).toMatch(/MODEL_TRUNCATED/);
  });

  it('rejects bad arguments with exit code 2', () => {
    for (const args of [['inspect'], ['inspect', 'a', '--context', '-3'], ['inspect', 'a', '--bogus'], ['nonsense']]) {
      const result = longhand(...args);
      expect(result.status, args.join(' ')).toBe(2);
      expect(result.stderr.length, args.join(' ')).toBeGreaterThan(0);
    }
  });
});
