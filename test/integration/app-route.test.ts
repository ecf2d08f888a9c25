// POST /api/app end to end: the real `longhand serve` with --data-dir, spoken to with fetch and
// the run's token (the same JSON the browser bridge sends). Documents, settings (a corrupt file
// left before start), the model library, models.inspect on the reference model, a download from
// a local server, and the error answers {error: {code, message}} with their statuses.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SettingsSchema } from '../../app/common/app-api.ts';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../support/models.ts';

const BIN = `${PROJECT_ROOT}/bin/longhand.mjs`;

let child: ChildProcessWithoutNullStreams;
let dataDir: string;
let home: string;
let base = '';
let token = '';
let files: Server;
let filesBase = '';
const payload = randomBytes(64 * 1024);

function firstLine(proc: ChildProcessWithoutNullStreams, timeoutMs = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`no URL line after ${timeoutMs} ms; stderr: ${err}`)), timeoutMs);
    proc.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    proc.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const newline = out.indexOf('\n');
      if (newline >= 0) {
        clearTimeout(timer);
        resolve(out.slice(0, newline));
      }
    });
    proc.once('exit', (code) => reject(new Error(`serve exited with ${code}; stderr: ${err}`)));
  });
}

/** POSTs one app request; answers the status and the parsed body. */
async function app(body: unknown, headers: Record<string, string> = { Authorization: `Bearer ${token}` }) {
  const res = await fetch(`${base}/api/app`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: res.status, body: JSON.parse(await res.text()) };
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'longhand-app-route-'));
  home = mkdtempSync(join(tmpdir(), 'longhand-app-route-home-'));
  writeFileSync(join(dataDir, 'settings.json'), '{"policy": "full", "alpha": ');
  files = createServer((req, res) => {
    if (req.url !== '/files/tiny.gguf') {
      res.writeHead(404);
      return res.end();
    }
    res.writeHead(200, { 'Content-Length': payload.length });
    res.end(payload);
  });
  await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
  filesBase = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
  // HOME points at an empty folder so models.scan looks at nothing of this machine's.
  child = spawn(process.execPath, [BIN, 'serve', '--port', '0', '--data-dir', dataDir], { env: { ...process.env, HOME: home, HF_HOME: '', HF_HUB_CACHE: '', OLLAMA_MODELS: '' } });
  const url = new URL(await firstLine(child));
  base = url.origin;
  token = url.searchParams.get('token')!;
});

afterAll(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  files?.closeAllConnections();
  await new Promise((resolve) => files?.close(resolve));
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(home, { recursive: true, force: true });
});

describe('POST /api/app', () => {
  it('settings: a corrupt file gives the defaults with a warning and a backup; save then get', async () => {
    const first = await app({ kind: 'settings.get' });
    expect(first.status).toBe(200);
    expect(first.body.settings).toEqual(SettingsSchema.parse({}));
    expect(first.body.warning).toMatch(/settings\.json\.bad-\d+/);
    expect(readdirSync(dataDir).filter((name) => name.startsWith('settings.json.bad-'))).toHaveLength(1);
    const changed = { ...first.body.settings, policy: 'infinigen', theme: 'dark' };
    expect(await app({ kind: 'settings.save', settings: changed })).toEqual({ status: 200, body: { settings: changed } });
    expect(await app({ kind: 'settings.get' })).toEqual({ status: 200, body: { settings: changed, warning: null } });
    const invalid = await app({ kind: 'settings.save', settings: { ...changed, alpha: -1 } });
    expect(invalid.status).toBe(400);
    expect(invalid.body.error.code).toBe('PROTOCOL_BAD_MESSAGE');
  });

  it('documents: save, list, get, delete; an unknown id is 404', async () => {
    const doc = { id: 'chapter-1', title: 'Chapter 1', text: 'It was a dark and stormy night.', updatedAt: 1_700_000_000_000 };
    expect(await app({ kind: 'documents.save', document: doc })).toEqual({ status: 200, body: { updatedAt: doc.updatedAt } });
    await app({ kind: 'documents.save', document: { id: 'chapter-2', title: 'Chapter 2', text: 'Later.', updatedAt: doc.updatedAt + 1 } });
    expect(await app({ kind: 'documents.list' })).toEqual({
      status: 200,
      body: [
        { id: 'chapter-2', title: 'Chapter 2', updatedAt: doc.updatedAt + 1, words: 1 },
        { id: 'chapter-1', title: 'Chapter 1', updatedAt: doc.updatedAt, words: 7 },
      ],
    });
    expect(await app({ kind: 'documents.get', id: 'chapter-1' })).toEqual({ status: 200, body: doc });
    expect(JSON.parse(readFileSync(join(dataDir, 'documents', 'chapter-1.json'), 'utf8'))).toEqual(doc);
    expect(await app({ kind: 'documents.delete', id: 'chapter-2' })).toEqual({ status: 200, body: { deleted: true } });
    const missing = await app({ kind: 'documents.get', id: 'chapter-2' });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ error: { code: 'BAD_ARGUMENT', message: expect.stringContaining('chapter-2') } });
  });

  it('a large document (a few MB) fits the body limit', async () => {
    const text = 'word '.repeat(600_000);
    expect((await app({ kind: 'documents.save', document: { id: 'big', title: 'Big', text, updatedAt: 1 } })).status).toBe(200);
    expect((await app({ kind: 'documents.get', id: 'big' })).body.text).toBe(text);
  });

  it('bad requests are 400 with a code; GET is 405', async () => {
    expect(await app({ kind: 'documents.get', id: '../settings' })).toMatchObject({ status: 400, body: { error: { code: 'PROTOCOL_BAD_MESSAGE', message: expect.stringContaining('id') } } });
    expect(await app({ kind: 'no.such.kind' })).toMatchObject({ status: 400, body: { error: { code: 'PROTOCOL_BAD_MESSAGE' } } });
    expect(await app('{not json')).toMatchObject({ status: 400, body: { error: { code: 'PROTOCOL_BAD_MESSAGE' } } });
    expect(await app({ kind: 'downloads.start', url: 'file:///etc/passwd' })).toMatchObject({ status: 400 });
    const get = await fetch(`${base}/api/app`, { headers: { Authorization: `Bearer ${token}` } });
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
  });

  it('applies the same gate as the rest of the server: token, Origin; the page cookie works', async () => {
    expect((await app({ kind: 'documents.list' }, {})).status).toBe(401);
    expect((await app({ kind: 'documents.list' }, { Authorization: 'Bearer wrong' })).status).toBe(401);
    expect((await app({ kind: 'documents.list' }, { Authorization: `Bearer ${token}`, Origin: 'https://evil.example' })).status).toBe(403);
    const page = await fetch(`${base}/?token=${token}`);
    const cookie = page.headers.get('set-cookie')!.split(';')[0]!;
    await page.arrayBuffer();
    const viaCookie = await app({ kind: 'documents.list' }, { Cookie: cookie, Origin: base });
    expect(viaCookie.status).toBe(200);
    expect(Array.isArray(viaCookie.body)).toBe(true);
  });

  it('models.scan answers the recent model; models.inspect reports on it; a missing file is 404', async () => {
    const { body } = await app({ kind: 'settings.get' });
    await app({ kind: 'settings.save', settings: { ...body.settings, lastModelPath: haveSharedModel() ? STORIES_260K : '' } });
    const scan = await app({ kind: 'models.scan' });
    expect(scan.status).toBe(200);
    if (haveSharedModel()) {
      expect(scan.body).toEqual([expect.objectContaining({ path: STORIES_260K, source: 'recent', format: 'gguf' })]);
      const inspect = await app({ kind: 'models.inspect', path: STORIES_260K, contextTokens: 128 });
      expect(inspect.status).toBe(200);
      expect(inspect.body).toMatchObject({ path: STORIES_260K, format: 'gguf', architecture: 'llama', layers: 5, memory: expect.objectContaining({ contextTokens: 128 }) });
    }
    const missing = await app({ kind: 'models.inspect', path: join(home, 'missing.gguf') });
    expect(missing).toMatchObject({ status: 404, body: { error: { code: 'MODEL_NOT_FOUND' } } });
  });

  it('downloads: start, watch the list until done; pause/resume of an unknown id is 404', async () => {
    const started = await app({ kind: 'downloads.start', url: `${filesBase}/files/tiny.gguf` });
    expect(started.status).toBe(200);
    expect(started.body).toMatchObject({ status: 'running', path: join(dataDir, 'models', 'tiny.gguf') });
    let state = started.body;
    for (let i = 0; i < 500 && state.status === 'running'; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      state = (await app({ kind: 'downloads.list' })).body.find((d: { id: string }) => d.id === started.body.id);
    }
    expect(state).toMatchObject({ status: 'done', receivedBytes: payload.length, totalBytes: payload.length });
    expect(readFileSync(join(dataDir, 'models', 'tiny.gguf')).equals(payload)).toBe(true);
    expect(existsSync(join(dataDir, 'models', 'tiny.gguf.part'))).toBe(false);
    expect(await app({ kind: 'downloads.pause', id: 'nope' })).toMatchObject({ status: 404, body: { error: { code: 'BAD_ARGUMENT' } } });
  });
});
