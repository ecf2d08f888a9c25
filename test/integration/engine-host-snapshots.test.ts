// The engine host's document snapshot plumbing (app/engine/host/snapshot-settings.ts, serve.ts):
// the folder comes from LONGHAND_SNAPSHOT_DIR, the cap a window sets is saved beside it and read
// at the next start, `snapshots` requests answer the folder's figures. The core here keeps its
// snapshots as real files in a temp folder (count and bytes read from the disk), so the figures
// the host reports are the folder's, not numbers this test wrote down.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_SNAPSHOT_CAP_BYTES, SNAPSHOT_DIR_ENV, type CacheReport, type EngineEvent } from '../../app/common/protocol.ts';
import { EngineClient } from '../../app/engine/client.ts';
import type { EngineCore, SnapshotStats } from '../../app/engine/host/engine-core.ts';
import { serveEngine } from '../../app/engine/host/serve.ts';
import { capFile, SnapshotSettings } from '../../app/engine/host/snapshot-settings.ts';
import { haveSharedModel, STORIES_260K } from '../support/models.ts';

type SnapshotCore = Pick<EngineCore, 'configureSnapshots' | 'snapshotStats' | 'clearSnapshots'>;

/** A core whose snapshots are the *.lhkv files in its folder; over the cap the oldest go. */
function diskCore(): SnapshotCore & { configured: { dir: string | undefined; capBytes: number }[] } {
  let dir: string | undefined;
  let capBytes = 0;
  const files = () => (dir ? readdirSync(dir).filter((name) => name.endsWith('.lhkv')) : []);
  const stats = (): SnapshotStats => ({ dir, count: files().length, bytes: files().reduce((sum, name) => sum + statSync(join(dir!, name)).size, 0), capBytes });
  const configured: { dir: string | undefined; capBytes: number }[] = [];
  return {
    configured,
    async configureSnapshots(options) {
      configured.push(options);
      dir = options.dir;
      capBytes = options.capBytes;
      // Least recently written first, until the folder fits.
      const byAge = files().sort((a, b) => statSync(join(dir!, a)).mtimeMs - statSync(join(dir!, b)).mtimeMs);
      while (stats().bytes > capBytes && byAge.length > 0) rmSync(join(dir!, byAge.shift()!));
      return stats();
    },
    snapshotStats: async () => stats(),
    async clearSnapshots() {
      for (const name of files()) rmSync(join(dir!, name));
      return stats();
    },
  };
}

/** serveEngine over an in-process channel: send a request, await the answer for its id. */
function host(core: SnapshotCore, options: Parameters<typeof serveEngine>[3] = {}) {
  const events: EngineEvent[] = [];
  let handler: (message: unknown) => void = () => undefined;
  const full: EngineCore = {
    load: async () => {
      throw new Error('not in this test');
    },
    unload: async () => undefined,
    tokenize: (text) => [...text].map((c) => c.charCodeAt(0)),
    // eslint-disable-next-line require-yield -- never generates here
    generate: async function* () {
      throw new Error('not in this test');
    },
    saveSnapshot: async () => {
      throw new Error('not in this test');
    },
    loadSnapshot: async () => {
      throw new Error('not in this test');
    },
    ...core,
  };
  serveEngine({ send: (event) => events.push(event), onMessage: (h) => (handler = h) }, full, 1, options);
  const ask = async (message: Record<string, unknown>): Promise<EngineEvent> => {
    handler(message);
    for (let i = 0; i < 200; i++) {
      const answer = events.find((e) => 'requestId' in e && e.requestId === message.requestId);
      if (answer) return answer;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    throw new Error(`no answer to ${String(message.requestId)}`);
  };
  return { events, ask, send: (message: unknown) => handler(message) };
}

let tmp: string;
let dir: string;
const quiet: string[] = [];
const log = (line: string) => void quiet.push(line);

beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'longhand-snapshots-'));
  dir = join(tmp, 'data', 'kv-snapshots');
  quiet.length = 0;
});
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

describe('engine host: document snapshot settings', () => {
  it('configures the folder from LONGHAND_SNAPSHOT_DIR (creating it) with the 2 GiB default cap, and reports its figures', async () => {
    const core = diskCore();
    const settings = new SnapshotSettings(core, log);
    const h = host(core, { snapshots: settings, ready: settings.start({ [SNAPSHOT_DIR_ENV]: dir }) });
    const stats = await h.ask({ kind: 'snapshots', requestId: 's1', action: 'stats' });
    expect(core.configured).toEqual([{ dir, capBytes: DEFAULT_SNAPSHOT_CAP_BYTES }]);
    expect(DEFAULT_SNAPSHOT_CAP_BYTES).toBe(2 * 1024 ** 3);
    expect(stats).toEqual({ kind: 'snapshots', requestId: 's1', stats: { enabled: true, dir, count: 0, bytes: 0, capBytes: DEFAULT_SNAPSHOT_CAP_BYTES } });
    expect(statSync(dir).isDirectory()).toBe(true);

    writeFileSync(join(dir, 'doc-a.lhkv'), Buffer.alloc(700));
    writeFileSync(join(dir, 'doc-b.lhkv'), Buffer.alloc(500));
    expect((await h.ask({ kind: 'snapshots', requestId: 's2', action: 'stats' })) as unknown).toMatchObject({ stats: { count: 2, bytes: 1200 } });
    expect(quiet).toEqual([]);
  });

  it('setCap applies at once (the oldest snapshot goes), is saved beside the folder and read again by the next host', async () => {
    const core = diskCore();
    const settings = new SnapshotSettings(core, log);
    const h = host(core, { snapshots: settings, ready: settings.start({ [SNAPSHOT_DIR_ENV]: dir }) });
    await h.ask({ kind: 'snapshots', requestId: 's0', action: 'stats' });
    writeFileSync(join(dir, 'old.lhkv'), Buffer.alloc(600));
    const past = new Date(Date.now() - 60_000);
    utimesSync(join(dir, 'old.lhkv'), past, past);
    writeFileSync(join(dir, 'new.lhkv'), Buffer.alloc(400));

    const answer = await h.ask({ kind: 'snapshots', requestId: 's1', action: 'setCap', capBytes: 512 });
    expect(answer).toEqual({ kind: 'snapshots', requestId: 's1', stats: { enabled: true, dir, count: 1, bytes: 400, capBytes: 512 } });
    expect(readdirSync(dir)).toEqual(['new.lhkv']);
    expect(capFile(dir)).toBe(join(tmp, 'data', 'kv-snapshots.json'));
    expect(JSON.parse(readFileSync(capFile(dir), 'utf8'))).toEqual({ capBytes: 512 });

    // A fresh host process (engine restart, next app start) starts with the saved cap.
    const next = diskCore();
    await new SnapshotSettings(next, log).start({ [SNAPSHOT_DIR_ENV]: dir });
    expect(next.configured).toEqual([{ dir, capBytes: 512 }]);
  });

  it('clear deletes every snapshot and answers the empty folder', async () => {
    const core = diskCore();
    const settings = new SnapshotSettings(core, log);
    const h = host(core, { snapshots: settings, ready: settings.start({ [SNAPSHOT_DIR_ENV]: dir }) });
    await h.ask({ kind: 'snapshots', requestId: 's0', action: 'stats' });
    writeFileSync(join(dir, 'a.lhkv'), Buffer.alloc(10));
    writeFileSync(join(dir, 'b.lhkv'), Buffer.alloc(20));
    expect(await h.ask({ kind: 'snapshots', requestId: 's1', action: 'clear' })).toEqual({ kind: 'snapshots', requestId: 's1', stats: { enabled: true, dir, count: 0, bytes: 0, capBytes: DEFAULT_SNAPSHOT_CAP_BYTES } });
    expect(readdirSync(dir)).toEqual([]);
  });

  it('refuses setCap without capBytes, a negative or fractional cap, and a host without a folder', async () => {
    const core = diskCore();
    const settings = new SnapshotSettings(core, log);
    const h = host(core, { snapshots: settings, ready: settings.start({ [SNAPSHOT_DIR_ENV]: dir }) });
    expect(await h.ask({ kind: 'snapshots', requestId: 'a', action: 'setCap' })).toMatchObject({ kind: 'error', error: { code: 'BAD_ARGUMENT', details: { field: 'capBytes' } } });
    expect(await h.ask({ kind: 'snapshots', requestId: 'b', action: 'setCap', capBytes: -1 })).toMatchObject({ kind: 'error', error: { code: 'PROTOCOL_BAD_MESSAGE' } });
    expect(await h.ask({ kind: 'snapshots', requestId: 'c', action: 'setCap', capBytes: 1.5 })).toMatchObject({ kind: 'error', error: { code: 'PROTOCOL_BAD_MESSAGE' } });
    expect(await h.ask({ kind: 'snapshots', requestId: 'd', action: 'rename', capBytes: 1 })).toMatchObject({ kind: 'error', error: { code: 'PROTOCOL_BAD_MESSAGE' } });
    // A window cannot name a folder: the request has no such field.
    expect(await h.ask({ kind: 'snapshots', requestId: 'e', action: 'stats', dir: '/etc' })).toMatchObject({ kind: 'error', error: { code: 'PROTOCOL_BAD_MESSAGE' } });

    const bare = diskCore();
    const off = new SnapshotSettings(bare, log);
    const h2 = host(bare, { snapshots: off, ready: off.start({}) });
    expect(await h2.ask({ kind: 'snapshots', requestId: 'f', action: 'stats' })).toEqual({ kind: 'snapshots', requestId: 'f', stats: { enabled: false, dir: null, count: 0, bytes: 0, capBytes: 0 } });
    expect(await h2.ask({ kind: 'snapshots', requestId: 'g', action: 'setCap', capBytes: 10 })).toMatchObject({ kind: 'error', error: { code: 'BAD_ARGUMENT', message: expect.stringMatching(/keeps no document snapshots/) } });
    expect(bare.configured).toEqual([]);
  });

  it('a folder that cannot be made leaves snapshots off, says why once, and the host still serves', async () => {
    mkdirSync(join(tmp, 'data'), { recursive: true });
    writeFileSync(join(tmp, 'data', 'kv-snapshots'), 'a file where the folder should be');
    const core = diskCore();
    const settings = new SnapshotSettings(core, log);
    const h = host(core, { snapshots: settings, ready: settings.start({ [SNAPSHOT_DIR_ENV]: dir }) });
    expect(await h.ask({ kind: 'snapshots', requestId: 's1', action: 'stats' })).toMatchObject({ stats: { enabled: false, dir: null } });
    expect(await h.ask({ kind: 'tokenize', requestId: 't1', text: 'ab', addSpecial: false })).toEqual({ kind: 'tokenized', requestId: 't1', ids: [97, 98] });
    expect(quiet).toHaveLength(1);
    expect(quiet[0]).toMatch(/document snapshots are off: .*EEXIST|ENOTDIR/);
  });

  it('a core without snapshot support (or one that throws) still serves every other request', async () => {
    const broken = {
      configureSnapshots: () => {
        throw new TypeError('configureSnapshots is not a function');
      },
      snapshotStats: async () => {
        throw new TypeError('snapshotStats is not a function');
      },
      clearSnapshots: async () => ({ dir: undefined, count: 0, bytes: 0, capBytes: 0 }),
    } as unknown as SnapshotCore;
    const settings = new SnapshotSettings(broken, log);
    const h = host(broken, { snapshots: settings, ready: settings.start({ [SNAPSHOT_DIR_ENV]: dir }) });
    expect(await h.ask({ kind: 'tokenize', requestId: 't1', text: 'a', addSpecial: false })).toEqual({ kind: 'tokenized', requestId: 't1', ids: [97] });
    expect(await h.ask({ kind: 'snapshots', requestId: 's1', action: 'stats' })).toMatchObject({ kind: 'error', requestId: 's1', error: { code: 'NATIVE_INTERNAL' } });
    expect(quiet).toEqual(['[engine host] document snapshots are off: configureSnapshots is not a function']);
    // A ready promise that rejects anyway does not stall the queue.
    const h2 = host(diskCore(), { ready: Promise.reject(new Error('boom')) });
    expect(await h2.ask({ kind: 'tokenize', requestId: 't2', text: 'b', addSpecial: false })).toEqual({ kind: 'tokenized', requestId: 't2', ids: [98] });
  });

  it('serves no request before the folder is configured', async () => {
    const core = diskCore();
    let release!: () => void;
    const ready = new Promise<void>((resolve) => (release = resolve));
    const h = host(core, { ready });
    h.send({ kind: 'tokenize', requestId: 't1', text: 'a', addSpecial: false });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(h.events.filter((e) => e.kind === 'tokenized')).toEqual([]);
    release();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(h.events.filter((e) => e.kind === 'tokenized')).toEqual([{ kind: 'tokenized', requestId: 't1', ids: [97] }]);
  });
});

// The same plumbing through a real host process and the real engine: the folder from the
// environment, a document's snapshot written after its generation and read back by a fresh process.
describe.runIf(haveSharedModel())('engine host process: document snapshots on stories260K', () => {
  const PROMPT = 'Once upon a time, there was a little girl named Lily. She loved to play in the park with her red ball. One day she saw a big dog.';
  const GREEDY = { temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1 } as never;
  const start = () => EngineClient.start({ env: { ...process.env, [SNAPSHOT_DIR_ENV]: dir } });
  const onDisk = () => readdirSync(dir).filter((name) => /^[A-Za-z0-9_-]+\.lhkv$/.test(name));
  const bytesOnDisk = () => onDisk().reduce((sum, name) => sum + statSync(join(dir, name)).size, 0);

  async function run(engine: EngineClient, params: Record<string, unknown>): Promise<{ ids: number[]; prompt: number; cache: CacheReport | undefined }> {
    const ids: number[] = [];
    let prompt = 0;
    let cache: CacheReport | undefined;
    for await (const event of engine.generate({ text: PROMPT }, { maxTokens: 12, stopOnEos: false, sampling: GREEDY, ...params })) {
      if (event.kind === 'prompt') prompt = event.ids.length;
      if (event.kind === 'token') ids.push(event.id);
      if (event.kind === 'done') cache = event.cache;
    }
    return { ids, prompt, cache };
  }

  it('saves a document after its generation, restores it in a fresh process, keeps the cap across restarts, clears', async () => {
    let engine = await start();
    try {
      expect(await engine.snapshots('stats')).toEqual({ enabled: true, dir, count: 0, bytes: 0, capBytes: DEFAULT_SNAPSHOT_CAP_BYTES });
      await engine.load({ modelPath: STORIES_260K, contextLength: 512 });
      const fresh = await run(engine, { document: 'doc-a' });
      expect(fresh.cache?.snapshot?.saved).toBe(true);
      expect(onDisk()).toHaveLength(1);
      const stats = await engine.snapshots('stats');
      expect(stats).toMatchObject({ enabled: true, count: 1 });
      expect(stats.bytes).toBe(bytesOnDisk());
      expect(stats.bytes).toBeGreaterThan(0);
      const saved = await engine.snapshots('setCap', 64 * 1024 ** 2);
      expect(saved.capBytes).toBe(64 * 1024 ** 2);
    } finally {
      await engine.close();
    }

    // A fresh process: nothing in memory, the snapshot on disk, the cap as it was set.
    engine = await start();
    try {
      expect(await engine.snapshots('stats')).toMatchObject({ count: 1, capBytes: 64 * 1024 ** 2 });
      await engine.load({ modelPath: STORIES_260K, contextLength: 512 });
      const restored = await run(engine, { document: 'doc-a' });
      expect(restored.cache).toMatchObject({ source: 'snapshot', reusedTokens: restored.prompt - 1, prefilledTokens: 1, snapshot: { restored: true } });
      // The restored cache gives the text a fresh prefill gives.
      const again = await run(engine, { reusePrefix: false });
      expect(restored.ids).toEqual(again.ids);

      expect(await engine.snapshots('clear')).toMatchObject({ count: 0, bytes: 0 });
      expect(onDisk()).toEqual([]);
    } finally {
      await engine.close();
    }
  }, 120_000);
});
