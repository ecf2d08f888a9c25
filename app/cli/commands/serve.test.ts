// `longhand serve` without --model, as a newcomer starts it: the API says, with a typed error,
// how to load a model instead of failing vaguely. Needs no model file.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../../test/support/models.ts';
import { firstLine } from '../../../test/support/serve-client.ts';

describe('longhand serve without a model', () => {
  let child: ChildProcessWithoutNullStreams;
  let tmp: string;
  let base: string;
  let token: string;
  const post = (path: string, body: unknown) => fetch(`${base}${path}`, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'longhand-serve-no-model-'));
    child = spawn(process.execPath, [join(PROJECT_ROOT, 'bin', 'longhand.mjs'), 'serve', '--port', '0', '--data-dir', join(tmp, 'data')], { cwd: PROJECT_ROOT, env: { ...process.env, HOME: tmp } });
    const url = await firstLine(child);
    const match = /^(http:\/\/127\.0\.0\.1:\d+)\/\?token=([\w-]+)$/.exec(url);
    if (!match) throw new Error(`unexpected first line: ${url}`);
    base = match[1]!;
    token = match[2]!;
  });

  afterAll(() => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  for (const [path, body] of [
    ['/v1/completions', { prompt: 'Once upon a time', max_tokens: 8 }],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Hello' }], stream: true }],
  ] as const) {
    it(`${path} answers 503 engine_not_loaded saying how to load a model`, async () => {
      const response = await post(path, body);
      expect(response.status).toBe(503);
      expect(response.headers.get('content-type')).toMatch(/^application\/json/);
      const { error } = (await response.json()) as { error: { message: string; type: string; code: string; param: null } };
      expect(error.code).toBe('engine_not_loaded');
      expect(error.type).toBe('service_unavailable');
      expect(error.param).toBeNull();
      expect(error.message).toMatch(/^no model is loaded\./);
      expect(error.message).toContain('Models view');
      expect(error.message).toContain('longhand serve --model PATH');
    });
  }

  it('still refuses a bad request with 400 before looking for a model', async () => {
    const response = await post('/v1/completions', { max_tokens: 'many' });
    expect(response.status).toBe(400);
  });

  it('/v1/models is an empty list and /health says no model is loaded', async () => {
    const models = await fetch(`${base}/v1/models`, { headers: { Authorization: `Bearer ${token}` } });
    expect(models.status).toBe(200);
    expect(await models.json()).toEqual({ object: 'list', data: [] });
    const health = await fetch(`${base}/health`, { headers: { Authorization: `Bearer ${token}` } });
    expect(await health.json()).toMatchObject({ status: 'ok', model_loaded: false });
  });
});
