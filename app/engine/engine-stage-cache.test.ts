// The engine core's use of the stage cache (forward/stage-cache.ts) on stories260K: on by default in
// <XDG_CACHE_HOME>/longhand/stages, the second load comes from it (its entries marked used) and
// generates the same text, says nothing when nothing went wrong,
// LONGHAND_STAGE_CACHE=off turns it off, and bad settings are typed errors.
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, utimesSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerateParamsSchema, LoadOptionsSchema } from '../common/protocol.ts';
import { UsageError } from '../common/errors.ts';
import { haveSharedModel, STORIES_260K } from '../../test/support/models.ts';
import { createEngineCore, stageCacheOptions } from './engine.ts';
import type { EngineCore } from './host/engine-core.ts';
import { GRAPH_FILE, MANIFEST_FILE } from './forward/stage-cache.ts';

const have = haveSharedModel();

async function greedyIds(core: EngineCore): Promise<number[]> {
  const ids: number[] = [];
  const p = GenerateParamsSchema.parse({ maxTokens: 24, stopOnEos: false, sampling: { temperature: 0 } });
  for await (const e of core.generate({ text: 'Once upon a time' }, p, new AbortController().signal)) if (e.kind === 'token') ids.push(e.id);
  return ids;
}

describe('stageCacheOptions', () => {
  it('is on in the engine cache folder by default, off with LONGHAND_STAGE_CACHE=off, capped by LONGHAND_STAGE_CACHE_MAX_BYTES', () => {
    expect(stageCacheOptions({ XDG_CACHE_HOME: '/c' })).toEqual({ dir: path.join('/c', 'longhand') });
    expect(stageCacheOptions({ XDG_CACHE_HOME: '/c', LONGHAND_STAGE_CACHE: 'off' })).toBeUndefined();
    expect(stageCacheOptions({ XDG_CACHE_HOME: '/c', LONGHAND_STAGE_CACHE_MAX_BYTES: '1000' })).toEqual({ dir: path.join('/c', 'longhand'), maxBytes: 1000 });
  });

  it('refuses settings it cannot read', () => {
    expect(() => stageCacheOptions({ LONGHAND_STAGE_CACHE: 'no' })).toThrow(UsageError);
    expect(() => stageCacheOptions({ LONGHAND_STAGE_CACHE_MAX_BYTES: '8G' })).toThrow(/whole number of bytes/);
  });
});

describe.skipIf(!have)('engine: stage cache (stories260K)', () => {
  const logs: string[] = [];
  const core = createEngineCore((line) => logs.push(line));
  let cache: string;
  const saved = { xdg: process.env.XDG_CACHE_HOME, mode: process.env.LONGHAND_STAGE_CACHE };
  const restore = (key: string, value: string | undefined): void => {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  };

  beforeAll(() => {
    cache = mkdtempSync(path.join(os.tmpdir(), 'longhand-engine-stages-'));
    process.env.XDG_CACHE_HOME = cache;
    delete process.env.LONGHAND_STAGE_CACHE;
  });
  afterAll(async () => {
    await core.unload();
    restore('XDG_CACHE_HOME', saved.xdg);
    restore('LONGHAND_STAGE_CACHE', saved.mode);
    rmSync(cache, { recursive: true, force: true });
  });

  it('a second load comes from the cache and writes the same text; off leaves it alone', async () => {
    // onnxruntime's stages: the native ones (the default for this F32 llama) load from the file itself, with no cache
    const load = LoadOptionsSchema.parse({ modelPath: STORIES_260K, threads: 1, contextLength: 128, dense: 'onnx' });
    const stages = path.join(cache, 'longhand', 'stages');
    await core.load(load);
    const first = await greedyIds(core);
    const entries = readdirSync(stages).filter((n) => /^[0-9a-f]{64}$/.test(n));
    expect(entries).toHaveLength(6);
    // a hit marks its entry used (the manifest's mtime, what the LRU cap goes by): set them back, load, look
    // (and the same files: a rebuilt entry would be new ones)
    const past = new Date(Date.now() - 3_600_000);
    for (const e of entries) utimesSync(path.join(stages, e, MANIFEST_FILE), past, past);
    const inodes = entries.map((e) => statSync(path.join(stages, e, GRAPH_FILE)).ino);
    await core.load(load);
    for (const e of entries) expect(statSync(path.join(stages, e, MANIFEST_FILE)).mtimeMs).toBeGreaterThan(past.getTime() + 60_000);
    expect(entries.map((e) => statSync(path.join(stages, e, GRAPH_FILE)).ino)).toEqual(inodes);
    expect(readdirSync(stages).filter((n) => /^[0-9a-f]{64}$/.test(n))).toEqual(entries);
    expect(await greedyIds(core)).toEqual(first);
    expect(logs.filter((l) => l.startsWith('stage cache'))).toEqual([]); // nothing went wrong: nothing said

    process.env.LONGHAND_STAGE_CACHE = 'off';
    rmSync(path.join(cache, 'longhand', 'stages'), { recursive: true, force: true });
    await core.load(load);
    expect(existsSync(stages)).toBe(false);
    expect(await greedyIds(core)).toEqual(first);
  });
});
