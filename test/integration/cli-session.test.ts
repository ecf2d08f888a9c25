// `longhand generate --save-session / --load-session` end to end (issue 10 (b)): each generation is
// a fresh process (the real bin, host, engine and model). A snapshot restored in a new process gives
// token for token the text of a fresh run of the same prompt, with the reused tokens reported; a
// damaged snapshot or one of another model or KV type is refused with its typed reason and the
// prompt is prefilled instead, again giving the fresh run's text.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EngineClient } from '../../app/engine/client.ts';
import { SESSION_FILES_ENV } from '../../app/common/protocol.ts';
import { haveSharedModel, KJV_EVAL_DIR, KJV_HD64, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';

const BIN = join(PROJECT_ROOT, 'bin', 'longhand.mjs');
const dir = mkdtempSync(join(tmpdir(), 'longhand-session-'));
const env = { ...process.env, XDG_CACHE_HOME: join(dir, 'cache') }; // InfiniGen's skew file: shared by the runs
const longhand = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args], { cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 120_000, env });

interface Out {
  promptIds: number[];
  tokenIds: number[];
  text: string;
  cache: { reusedTokens: number; prefilledTokens: number; source: string };
  savedSession?: { tokens: number; bytes: number };
}

function generate(model: string, prompt: string, ...extra: string[]): { out: Out; stderr: string } {
  const r = longhand('generate', '--model', model, '--prompt', prompt, '--max-tokens', '24', '--temperature', '0', '--context', '1024', '--threads', '1', '--json', ...extra);
  expect(r.status, r.stderr).toBe(0);
  return { out: JSON.parse(r.stdout) as Out, stderr: r.stderr };
}

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('session files are a CLI-only request', () => {
  it('a host started without LONGHAND_SESSION_FILES=1 (every host that serves windows) refuses a path as an unknown request', async () => {
    const { [SESSION_FILES_ENV]: _, ...without } = process.env;
    const client = await EngineClient.start({ env: without });
    try {
      const error = await client.sessionFile('save', join(dir, 'should-not-exist.lhkv')).catch((e: unknown) => e);
      expect((error as { code?: string }).code).toBe('PROTOCOL_BAD_MESSAGE');
      expect(() => statSync(join(dir, 'should-not-exist.lhkv'))).toThrow();
    } finally {
      await client.close();
    }
  });
});

const MODELS = [
  { name: 'stories260K', model: STORIES_260K, prompt: 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high. The ball flew over the fence and into the garden of an old man.' },
  { name: 'kjv-llama-hd64', model: KJV_HD64, prompt: haveSharedModel(KJV_HD64) ? readFileSync(join(KJV_EVAL_DIR, 'ruth-3.txt'), 'utf8').slice(0, 700) : '' },
];

for (const m of MODELS) {
  describe.runIf(haveSharedModel(m.model))(`longhand generate sessions on ${m.name}`, () => {
    for (const flags of [[], ['--kv-type', 'int8'], ['--policy', 'infinigen', '--fetch-cap', '0.2']]) {
      it(`restores a saved session in a fresh process (${flags.join(' ') || 'full, fp16'}) and equals a fresh run`, () => {
        const file = join(dir, `${m.name}-${flags.join('') || 'full'}.lhkv`);
        const first = generate(m.model, m.prompt, ...flags, '--save-session', file);
        expect(first.out.savedSession!.tokens).toBeGreaterThan(0);
        expect(statSync(file).size).toBe(first.out.savedSession!.bytes);
        const next = m.prompt + first.out.text;
        const restored = generate(m.model, next, ...flags, '--load-session', file);
        expect(restored.stderr).toMatch(/loaded session .*: \d+ tokens/);
        // the snapshot holds the exact prefix: the prompt (and, under full, the generated tokens but the last)
        expect(restored.out.cache.reusedTokens).toBeGreaterThan(first.out.promptIds.length / 2);
        expect(restored.out.cache.reusedTokens).toBeLessThanOrEqual(first.out.savedSession!.tokens);
        const fresh = generate(m.model, next, ...flags);
        expect(fresh.out.cache.reusedTokens).toBe(0);
        expect(restored.out.promptIds).toEqual(fresh.out.promptIds);
        expect(restored.out.tokenIds).toEqual(fresh.out.tokenIds);
      });
    }

    it('refuses a damaged snapshot, another KV type and another model with typed reasons, then prefills and equals a fresh run', () => {
      const good = join(dir, `${m.name}-good.lhkv`);
      generate(m.model, m.prompt, '--save-session', good);
      const fresh = generate(m.model, m.prompt);

      const flipped = join(dir, `${m.name}-flipped.lhkv`);
      copyFileSync(good, flipped);
      const bytes = readFileSync(flipped);
      bytes[bytes.length - 100]! ^= 0x40; // inside the last section
      writeFileSync(flipped, bytes);
      const damaged = generate(m.model, m.prompt, '--load-session', flipped);
      expect(damaged.stderr).toMatch(/SNAPSHOT_CORRUPT: .*prefilled instead/);
      expect(damaged.out.cache.reusedTokens).toBe(0);
      expect(damaged.out.tokenIds).toEqual(fresh.out.tokenIds);

      const kvType = generate(m.model, m.prompt, '--kv-type', 'int8', '--load-session', good);
      expect(kvType.stderr).toMatch(/SNAPSHOT_MISMATCH: .*KV type/);

      const other = MODELS.find((o) => o.model !== m.model)!;
      if (haveSharedModel(other.model)) {
        const wrongModel = generate(other.model, m.prompt, '--load-session', good);
        expect(wrongModel.stderr).toMatch(/SNAPSHOT_MISMATCH: .*model file/);
        expect(wrongModel.out.cache.reusedTokens).toBe(0);
      }
      const missing = generate(m.model, m.prompt, '--load-session', join(dir, 'nope.lhkv'));
      expect(missing.stderr).toMatch(/SNAPSHOT_UNREADABLE/);
      expect(missing.out.tokenIds).toEqual(fresh.out.tokenIds);

      // a session that cannot be written: the text still comes out, the reason is named, the exit is 1
      const nowhere = join(dir, 'no-such-folder', 'x.lhkv');
      const r = longhand('generate', '--model', m.model, '--prompt', m.prompt, '--max-tokens', '24', '--temperature', '0', '--context', '1024', '--threads', '1', '--json', '--save-session', nowhere);
      expect(r.status).toBe(1);
      const unsaved = JSON.parse(r.stdout) as Out & { sessionError?: { code: string; message: string } };
      expect(unsaved.tokenIds).toEqual(fresh.out.tokenIds);
      expect(unsaved.savedSession).toBeUndefined();
      expect(unsaved.sessionError?.code).toBe('SNAPSHOT_UNWRITABLE');
      expect(r.stderr).toMatch(/the session was not saved: SNAPSHOT_UNWRITABLE: .*the folder does not exist/);
    });
  });
}
