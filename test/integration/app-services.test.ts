// The app services on their own (app/server/services): documents, settings, the model library
// over fake LM Studio / Hugging Face / Ollama trees, and downloads against a real HTTP server on
// 127.0.0.1 (Range, a server that ignores Range, a slow one for pause/resume, sha256 checks).
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SettingsSchema, type DownloadState } from '../../app/common/app-api.ts';
import { LonghandError } from '../../app/common/errors.ts';
import { writeFileAtomic } from '../../app/server/services/atomic-write.ts';
import { createAppServices, INSPECT_UNAVAILABLE } from '../../app/server/services/app-services.ts';
import { defaultDataDir } from '../../app/server/services/data-dir.ts';
import { DocumentStore, isNotFound } from '../../app/server/services/documents.ts';
import { DownloadManager, fileNameFromUrl } from '../../app/server/services/downloads.ts';
import { scanModels } from '../../app/server/services/model-library.ts';
import { SettingsStore } from '../../app/server/services/settings.ts';

const roots: string[] = [];
const locked: string[] = [];
function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `longhand-${prefix}-`));
  roots.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of locked) chmodSync(dir, 0o755);
  for (const dir of roots) rmSync(dir, { recursive: true, force: true });
});

async function rejection(promise: Promise<unknown>): Promise<LonghandError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(LonghandError);
    return error as LonghandError;
  }
  throw new Error('expected a rejection');
}

// ── documents ─────────────────────────────────────────────────────────────────────────────────

describe('documents', () => {
  it('saves, lists newest first with word counts, gets and deletes', async () => {
    const store = new DocumentStore(tempDir('docs'));
    expect(await store.list()).toEqual([]);
    expect(await store.save({ id: 'a-1', title: 'First', text: 'one two three', updatedAt: 1000 })).toEqual({ updatedAt: 1000 });
    await store.save({ id: 'b-2', title: 'Second', text: '  four\nfive  ', updatedAt: 3000 });
    await store.save({ id: 'c-3', title: 'Third', text: '', updatedAt: 2000 });
    expect(await store.list()).toEqual([
      { id: 'b-2', title: 'Second', updatedAt: 3000, words: 2 },
      { id: 'c-3', title: 'Third', updatedAt: 2000, words: 0 },
      { id: 'a-1', title: 'First', updatedAt: 1000, words: 3 },
    ]);
    expect(await store.get('a-1')).toEqual({ id: 'a-1', title: 'First', text: 'one two three', updatedAt: 1000 });
    await store.save({ id: 'a-1', title: 'First, again', text: 'x', updatedAt: 4000 });
    expect((await store.list())[0]).toEqual({ id: 'a-1', title: 'First, again', updatedAt: 4000, words: 1 });
    expect(await store.delete('a-1')).toEqual({ deleted: true });
    expect(await store.delete('a-1')).toEqual({ deleted: false });
    const missing = await rejection(store.get('a-1'));
    expect(missing.code).toBe('BAD_ARGUMENT');
    expect(isNotFound(missing)).toBe(true);
    expect(missing.message).toContain("'a-1'");
  });

  it('writes atomically: only <id>.json files remain, no temp files', async () => {
    const dataDir = tempDir('docs');
    const store = new DocumentStore(dataDir);
    await Promise.all(Array.from({ length: 20 }, (_, i) => store.save({ id: `d-${i % 4}`, title: `t${i}`, text: 'word '.repeat(i), updatedAt: i })));
    expect(readdirSync(join(dataDir, 'documents')).sort()).toEqual(['d-0.json', 'd-1.json', 'd-2.json', 'd-3.json']);
    for (const id of ['d-0', 'd-1', 'd-2', 'd-3']) expect((await store.get(id)).id).toBe(id); // whole JSON, whichever write won
  });

  it('survives a crash mid-write: a leftover temp file is ignored and the old document stays', async () => {
    const dataDir = tempDir('docs');
    const store = new DocumentStore(dataDir);
    await store.save({ id: 'draft', title: 'Kept', text: 'the saved text', updatedAt: 10 });
    // What a crash between write and rename leaves: a half-written hidden temp file.
    writeFileSync(join(dataDir, 'documents', '.draft.json.999-abcdef.tmp'), '{"id":"draft","title":"Lo');
    writeFileSync(join(dataDir, 'documents', 'notes.txt'), 'not a document');
    expect(await store.list()).toEqual([{ id: 'draft', title: 'Kept', updatedAt: 10, words: 3 }]);
    expect((await store.get('draft')).text).toBe('the saved text');
    await store.save({ id: 'draft', title: 'Kept', text: 'newer', updatedAt: 11 });
    expect((await store.get('draft')).text).toBe('newer');
  });

  it('refuses ids that could name another path', async () => {
    const store = new DocumentStore(tempDir('docs'));
    for (const id of ['../settings', 'a/b', 'A', '', 'x'.repeat(65)]) expect((await rejection(store.get(id))).code).toBe('BAD_ARGUMENT');
    expect((await rejection(store.delete('../../etc/passwd'))).code).toBe('BAD_ARGUMENT');
  });

  it('writeFileAtomic leaves no temp file when the write fails', async () => {
    const dir = tempDir('atomic');
    mkdirSync(join(dir, 'target-is-a-folder'));
    await expect(writeFileAtomic(join(dir, 'target-is-a-folder'), 'x')).rejects.toThrow();
    expect(readdirSync(dir)).toEqual(['target-is-a-folder']);
  });
});

// ── settings ──────────────────────────────────────────────────────────────────────────────────

describe('settings', () => {
  const defaults = SettingsSchema.parse({});

  it('a missing file is the defaults, without a warning; save then get round-trips', async () => {
    const dataDir = tempDir('settings');
    const store = new SettingsStore(dataDir);
    expect(await store.get()).toEqual({ settings: defaults, warning: null });
    const changed = { ...defaults, policy: 'infinigen' as const, alpha: 4, theme: 'dark' as const, lastModelPath: '/models/x.gguf' };
    expect(await store.save(changed)).toEqual({ settings: changed });
    expect(await store.get()).toEqual({ settings: changed, warning: null });
    expect(readdirSync(dataDir)).toEqual(['settings.json']);
  });

  it.each([
    ['not JSON', '{"policy": "full",'],
    ['invalid values', JSON.stringify({ policy: 'nope', alpha: 5 })],
    ['unknown keys', JSON.stringify({ policy: 'full', fontSize: 3 })],
  ])('a corrupt file (%s) falls back to the defaults, is moved aside and warns', async (_what, content) => {
    const dataDir = tempDir('settings');
    writeFileSync(join(dataDir, 'settings.json'), content);
    const store = new SettingsStore(dataDir, () => 1234);
    const { settings, warning } = await store.get();
    expect(settings).toEqual(defaults);
    expect(warning).toContain('defaults');
    expect(warning).toContain('settings.json.bad-1234');
    expect(readdirSync(dataDir)).toEqual(['settings.json.bad-1234']);
    expect(readFileSync(join(dataDir, 'settings.json.bad-1234'), 'utf8')).toBe(content);
    // The next read is clean: the bad file no longer stands in the way.
    expect(await store.get()).toEqual({ settings: defaults, warning: null });
  });

  it('the default data folder follows XDG_DATA_HOME', () => {
    expect(defaultDataDir({ XDG_DATA_HOME: '/xdg' }, '/home/u', 'linux')).toBe('/xdg/longhand');
    expect(defaultDataDir({}, '/home/u', 'linux')).toBe('/home/u/.local/share/longhand');
    expect(defaultDataDir({ XDG_DATA_HOME: 'relative' }, '/home/u', 'linux')).toBe('/home/u/.local/share/longhand');
  });
});

// ── model library ─────────────────────────────────────────────────────────────────────────────

describe('model library scan', () => {
  const write = (path: string, bytes: number) => {
    mkdirSync(join(path, '..'), { recursive: true });
    writeFileSync(path, Buffer.alloc(bytes, 1));
  };

  function fakeHome(): { home: string; paths: Record<string, string> } {
    const home = tempDir('home');
    // LM Studio, both places it has used.
    const lms = join(home, '.lmstudio', 'models', 'lmstudio-community', 'Qwen-GGUF');
    write(join(lms, 'qwen-q4_k_m.gguf'), 1000);
    write(join(lms, 'mmproj-qwen-f16.gguf'), 10); // a projector, not a model
    write(join(lms, 'README.md'), 5);
    write(join(home, '.cache', 'lm-studio', 'models', 'old', 'llama', 'llama-q8_0.gguf'), 2000);
    // Hugging Face hub cache: snapshot files are symlinks into blobs/.
    const repo = join(home, '.cache', 'huggingface', 'hub', 'models--org--tiny-llama');
    write(join(repo, 'blobs', 'aaa'), 300);
    write(join(repo, 'blobs', 'bbb'), 400);
    write(join(repo, 'blobs', 'ccc'), 50);
    const snap = join(repo, 'snapshots', '0123456789abcdef');
    mkdirSync(snap, { recursive: true });
    symlinkSync('../../blobs/aaa', join(snap, 'model-00001-of-00002.safetensors'));
    symlinkSync('../../blobs/bbb', join(snap, 'model-00002-of-00002.safetensors'));
    symlinkSync('../../blobs/ccc', join(snap, 'config.json'));
    symlinkSync('..', join(snap, 'loop')); // a symlink loop must not hang the scan
    const ggufRepo = join(home, '.cache', 'huggingface', 'hub', 'models--someone--Tiny-GGUF', 'snapshots', 'rev1');
    write(join(ggufRepo, 'tiny.Q4_0.gguf'), 700);
    write(join(home, '.cache', 'huggingface', 'hub', 'models--org--no-weights', 'snapshots', 'r', 'config.json'), 10); // config only: not a model
    // Ollama: a manifest naming its model blob.
    const digest = 'ab'.repeat(32);
    const ollama = join(home, '.ollama', 'models');
    write(join(ollama, 'blobs', `sha256-${digest}`), 1234);
    mkdirSync(join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'llama3'), { recursive: true });
    writeFileSync(
      join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'llama3', '8b'),
      JSON.stringify({ schemaVersion: 2, layers: [{ mediaType: 'application/vnd.ollama.image.license', digest: `sha256:${'cd'.repeat(32)}`, size: 1 }, { mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${digest}`, size: 1234 }] }),
    );
    writeFileSync(join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'llama3', 'broken'), '{not json');
    mkdirSync(join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'gone'), { recursive: true });
    writeFileSync(join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'gone', 'latest'), JSON.stringify({ layers: [{ mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${'ef'.repeat(32)}` }] }));
    // An unreadable folder is skipped, not fatal.
    mkdirSync(join(home, '.lmstudio', 'models', 'locked'), { mode: 0o000 });
    locked.push(join(home, '.lmstudio', 'models', 'locked'));
    // The recent model, outside every store.
    write(join(home, 'elsewhere', 'recent.gguf'), 99);
    return { home, paths: { lms, snap, ggufRepo, ollamaBlob: join(ollama, 'blobs', `sha256-${digest}`), recent: join(home, 'elsewhere', 'recent.gguf') } };
  }

  it('finds the LM Studio, Hugging Face and Ollama models with sizes and formats, and the recent one first', async () => {
    const { home, paths } = fakeHome();
    const found = await scanModels({ home, env: {}, recentPath: paths.recent! });
    expect(found).toEqual([
      { path: paths.recent, name: 'recent.gguf', source: 'recent', format: 'gguf', bytes: 99 },
      { path: join(paths.lms!, 'qwen-q4_k_m.gguf'), name: 'lmstudio-community/Qwen-GGUF/qwen-q4_k_m.gguf', source: 'lmstudio', format: 'gguf', bytes: 1000 },
      { path: join(home, '.cache', 'lm-studio', 'models', 'old', 'llama', 'llama-q8_0.gguf'), name: 'old/llama/llama-q8_0.gguf', source: 'lmstudio', format: 'gguf', bytes: 2000 },
      { path: paths.snap, name: 'org/tiny-llama', source: 'huggingface', format: 'safetensors', bytes: 700 },
      { path: join(paths.ggufRepo!, 'tiny.Q4_0.gguf'), name: 'someone/Tiny-GGUF/tiny.Q4_0.gguf', source: 'huggingface', format: 'gguf', bytes: 700 },
      { path: paths.ollamaBlob, name: 'llama3:8b', source: 'ollama', format: 'gguf', bytes: 1234 },
    ]);
  });

  it('reads HF_HOME and OLLAMA_MODELS, and stays within its entry bound', async () => {
    const { home } = fakeHome();
    const other = tempDir('home');
    const moved = await scanModels({ home: other, env: { HF_HOME: join(home, '.cache', 'huggingface'), OLLAMA_MODELS: join(home, '.ollama', 'models') } });
    expect(moved.map((m) => m.source).sort()).toEqual(['huggingface', 'huggingface', 'ollama']);
    expect(await scanModels({ home: other, env: {} })).toEqual([]);
    const bounded = await scanModels({ home, env: {}, maxEntries: 2 });
    expect(bounded.length).toBeLessThan(6);
  });
});

// ── downloads ─────────────────────────────────────────────────────────────────────────────────

describe('downloads', () => {
  const fixture = randomBytes(256 * 1024);
  const fixtureSha = createHash('sha256').update(fixture).digest('hex');
  let server: Server;
  let base = '';
  const ranges: Array<{ path: string; range: string | undefined }> = [];

  /** Serves `body` with Range support unless `ignoreRange`; `slowMs` sends 8 KiB per tick. */
  function serve(req: IncomingMessage, res: ServerResponse, options: { ignoreRange?: boolean; slowMs?: number }): void {
    let start = 0;
    const match = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    if (match && !options.ignoreRange) {
      start = Number(match[1]);
      if (start >= fixture.length) {
        res.writeHead(416, { 'Content-Range': `bytes */${fixture.length}` });
        res.end();
        return;
      }
      res.writeHead(206, { 'Content-Length': fixture.length - start, 'Content-Range': `bytes ${start}-${fixture.length - 1}/${fixture.length}`, 'Accept-Ranges': 'bytes' });
    } else {
      res.writeHead(200, { 'Content-Length': fixture.length });
    }
    if (!options.slowMs) {
      res.end(fixture.subarray(start));
      return;
    }
    let at = start;
    const timer = setInterval(() => {
      if (res.destroyed) return clearInterval(timer);
      const end = Math.min(at + 8192, fixture.length);
      res.write(fixture.subarray(at, end));
      at = end;
      if (at >= fixture.length) {
        clearInterval(timer);
        res.end();
      }
    }, options.slowMs);
    res.on('close', () => clearInterval(timer));
  }

  beforeAll(async () => {
    server = createServer((req, res) => {
      const path = req.url ?? '/';
      ranges.push({ path, range: req.headers.range });
      if (path.startsWith('/range/')) return serve(req, res, {});
      if (path.startsWith('/norange/')) return serve(req, res, { ignoreRange: true });
      if (path.startsWith('/slow/')) return serve(req, res, { slowMs: 10 });
      if (path.startsWith('/redirect/')) {
        res.writeHead(302, { Location: `/range/${path.slice('/redirect/'.length)}` });
        return res.end();
      }
      res.writeHead(404);
      res.end('no such file');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  async function settled(manager: DownloadManager, id: string, timeoutMs = 15_000): Promise<DownloadState> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const state = (await manager.list()).find((d) => d.id === id)!;
      if (state.status !== 'running') return state;
      if (Date.now() > until) throw new Error(`download ${id} still running after ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  it('downloads into <dataDir>/models with the total size, verifies sha256 and renames the .part', async () => {
    const dataDir = tempDir('dl');
    const manager = new DownloadManager(dataDir);
    const started = await manager.start(`${base}/redirect/tiny%20model.gguf`, fixtureSha);
    expect(started).toMatchObject({ status: 'running', path: join(dataDir, 'models', 'tiny_model.gguf'), sha256: fixtureSha, error: null });
    const done = await settled(manager, started.id);
    expect(done).toMatchObject({ status: 'done', receivedBytes: fixture.length, totalBytes: fixture.length, error: null });
    expect(readFileSync(done.path).equals(fixture)).toBe(true);
    expect(readdirSync(join(dataDir, 'models'))).toEqual(['tiny_model.gguf']);
    // The same URL again is the finished download, not a second copy.
    expect(await manager.start(`${base}/redirect/tiny%20model.gguf`)).toMatchObject({ id: started.id, status: 'done' });
  });

  it('pauses mid-way keeping the .part, and resumes with a Range request', async () => {
    const dataDir = tempDir('dl');
    let sawProgress!: () => void;
    const progressed = new Promise<void>((resolve) => (sawProgress = resolve));
    const manager = new DownloadManager(dataDir, { onProgress: (s) => s.receivedBytes > 32 * 1024 && sawProgress() });
    const started = await manager.start(`${base}/slow/slow.gguf`, fixtureSha);
    await progressed;
    const paused = await manager.pause(started.id);
    expect(paused.status).toBe('paused');
    expect(paused.receivedBytes).toBeGreaterThan(0);
    expect(paused.receivedBytes).toBeLessThan(fixture.length);
    expect(paused.totalBytes).toBe(fixture.length);
    const part = readFileSync(join(dataDir, 'models', 'slow.gguf.part'));
    expect(part.length).toBe(paused.receivedBytes);
    expect(part.equals(fixture.subarray(0, part.length))).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(readFileSync(join(dataDir, 'models', 'slow.gguf.part')).length).toBe(paused.receivedBytes); // nothing written while paused

    // A fresh manager (a restart) still knows the paused download.
    const again = new DownloadManager(dataDir);
    expect(await again.list()).toEqual([expect.objectContaining({ id: started.id, status: 'paused', receivedBytes: paused.receivedBytes })]);
    const resumed = await again.resume(started.id);
    expect(resumed.status).toBe('running');
    const done = await settled(again, started.id);
    expect(done).toMatchObject({ status: 'done', receivedBytes: fixture.length, totalBytes: fixture.length });
    expect(readFileSync(done.path).equals(fixture)).toBe(true);
    expect(ranges.filter((r) => r.path === '/slow/slow.gguf').map((r) => r.range)).toEqual([undefined, `bytes=${paused.receivedBytes}-`]);
  });

  it('starts over cleanly when the server ignores Range (200 instead of 206)', async () => {
    const dataDir = tempDir('dl');
    mkdirSync(join(dataDir, 'models'));
    writeFileSync(join(dataDir, 'models', 'whole.gguf.part'), Buffer.alloc(5000, 7)); // stale partial bytes
    const manager = new DownloadManager(dataDir);
    const started = await manager.start(`${base}/norange/whole.gguf`, fixtureSha);
    const done = await settled(manager, started.id);
    expect(done).toMatchObject({ status: 'done', receivedBytes: fixture.length });
    expect(readFileSync(done.path).equals(fixture)).toBe(true);
    expect(ranges.find((r) => r.path === '/norange/whole.gguf')?.range).toBe('bytes=5000-');
  });

  it('a sha256 mismatch fails with a clear error and removes the bad file', async () => {
    const dataDir = tempDir('dl');
    const manager = new DownloadManager(dataDir);
    const wrong = '0'.repeat(64);
    const started = await manager.start(`${base}/range/bad.gguf`, wrong);
    const failed = await settled(manager, started.id);
    expect(failed.status).toBe('failed');
    expect(failed.error).toContain('sha256 mismatch');
    expect(failed.error).toContain(wrong);
    expect(failed.error).toContain(fixtureSha);
    expect(existsSync(join(dataDir, 'models', 'bad.gguf'))).toBe(false);
    expect(existsSync(join(dataDir, 'models', 'bad.gguf.part'))).toBe(false);
  });

  it('an HTTP error fails the download; unknown ids and URLs without a file name are BAD_ARGUMENT', async () => {
    const dataDir = tempDir('dl');
    const manager = new DownloadManager(dataDir);
    const started = await manager.start(`${base}/missing/x.gguf`);
    const failed = await settled(manager, started.id);
    expect(failed).toMatchObject({ status: 'failed' });
    expect(failed.error).toContain('HTTP 404');
    expect((await rejection(manager.pause('nope'))).code).toBe('BAD_ARGUMENT');
    expect(() => fileNameFromUrl(`${base}/`)).toThrow(LonghandError);
    expect(fileNameFromUrl('https://huggingface.co/org/repo/resolve/main/sub/model.Q4_K_M.gguf?download=true')).toBe('model.Q4_K_M.gguf');
    expect(fileNameFromUrl('https://x/%2E%2E%2Fescape.gguf')).toBe('_escape.gguf');
  });
});

// ── the dispatcher ────────────────────────────────────────────────────────────────────────────

describe('createAppServices', () => {
  it('answers each kind through the services; without an inspect function models.inspect is BAD_ARGUMENT', async () => {
    const dataDir = tempDir('services');
    const home = tempDir('home');
    mkdirSync(join(home, 'm'));
    writeFileSync(join(home, 'm', 'recent.gguf'), 'GGUF');
    const services = createAppServices({ dataDir, home, env: {} });
    await services.answer({ kind: 'documents.save', document: { id: 'x', title: 'T', text: 'a b', updatedAt: 5 } });
    expect(await services.answer({ kind: 'documents.list' })).toEqual([{ id: 'x', title: 'T', updatedAt: 5, words: 2 }]);
    expect(await services.answer({ kind: 'documents.get', id: 'x' })).toMatchObject({ text: 'a b' });
    const { settings } = await services.answer({ kind: 'settings.get' });
    await services.answer({ kind: 'settings.save', settings: { ...settings, lastModelPath: join(home, 'm', 'recent.gguf') } });
    expect(await services.answer({ kind: 'models.scan' })).toEqual([{ path: join(home, 'm', 'recent.gguf'), name: 'recent.gguf', source: 'recent', format: 'gguf', bytes: 4 }]);
    const inspect = await rejection(services.answer({ kind: 'models.inspect', path: '/x.gguf' }));
    expect(inspect).toMatchObject({ code: 'BAD_ARGUMENT', message: INSPECT_UNAVAILABLE });
    expect(await services.answer({ kind: 'downloads.list' })).toEqual([]);
    expect(await services.answer({ kind: 'documents.delete', id: 'x' })).toEqual({ deleted: true });
    await services.close();
  });
});
