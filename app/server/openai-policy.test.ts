// The `longhand` extension field of the OpenAI-compatible API: a request's KV policy and knobs
// reach the engine (real `longhand serve --policy snapkv --budget 1000`, real HTTP on 127.0.0.1,
// stories260K); the answer names the policy that ran and the switch time; bad values are a 400
// naming the field; a request without the field runs the policy the server loaded.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveSharedModel, PROJECT_ROOT, STORIES_260K } from '../../test/support/models.ts';
import { firstLine } from '../../test/support/serve-client.ts';

const BIN = `${PROJECT_ROOT}/bin/longhand.mjs`;

describe.runIf(haveSharedModel())('OpenAI API: longhand.policy per request', () => {
  let child: ChildProcessWithoutNullStreams;
  let base: string;
  let token: string;
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${base}${path}`, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, body: JSON.parse(await res.text()) };
  };
  const ask = { prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };

  beforeAll(async () => {
    child = spawn(process.execPath, [BIN, 'serve', '--model', STORIES_260K, '--port', '0', '--context', '256', '--threads', '1', '--policy', 'snapkv', '--budget', '1000'], { cwd: PROJECT_ROOT, stdio: 'pipe' });
    const match = /^http:\/\/127\.0\.0\.1:(\d+)\/\?token=([A-Za-z0-9_-]{32})$/.exec(await firstLine(child));
    if (!match) throw new Error('unexpected first line of longhand serve');
    base = `http://127.0.0.1:${match[1]}`;
    token = match[2]!;
  });

  afterAll(() => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
  });

  it('completions and chat pass the policy through; the answer names it; bad knobs are a 400 naming the field', async () => {
    const snap = await post('/v1/completions', ask); // the loaded policy (serve --policy snapkv)
    expect(snap.status).toBe(200);
    expect(snap.body.longhand.policy).toBe('snapkv');
    expect(snap.body.longhand.timings.policySwitchMs).toBeUndefined();

    const full = await post('/v1/completions', { ...ask, longhand: { policy: 'full' } });
    expect(full.status).toBe(200);
    expect(full.body.longhand.policy).toBe('full');
    expect(full.body.longhand.timings.policySwitchMs).toBeGreaterThan(0);
    expect(full.body.choices[0].text).toBe(snap.body.choices[0].text); // budget 1000 keeps the whole prompt: the same text

    const chat = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, longhand: { policy: 'streaming', sparse: { window: 8 } } });
    expect(chat.status).toBe(200);
    expect(chat.body.longhand.policy).toBe('streaming');

    const bad = await post('/v1/completions', { ...ask, longhand: { policy: 'snapkv', sparse: { poolKernel: 4 } } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.param).toBe('longhand.sparse.poolKernel');
    expect((await post('/v1/completions', { ...ask, longhand: { policy: 'lru' } })).body.error.param).toBe('longhand.policy');

    const back = await post('/v1/completions', ask); // no extension: the loaded policy and knobs again
    expect(back.body.longhand.policy).toBe('snapkv');
    expect(back.body.longhand.timings.policySwitchMs).toBeGreaterThan(0);
    expect(back.body.choices[0].text).toBe(snap.body.choices[0].text);
  });
});
