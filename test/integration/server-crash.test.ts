// Browser mode's crash isolation without a browser: the real server (in this process) over the
// real engine host on stories260K, spoken to over /ws and HTTP. The engine process dies in the
// middle of a generation, by SIGKILL and by a real native fault (the test-only hook, enabled by
// LONGHAND_TEST_FAULTS=1 in the engine's env); the server survives, fails the running and the
// queued generation with ENGINE_CRASHED naming the signal, reports the state to every window,
// answers 503 meanwhile, and on the window's request restarts the engine with the same model.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_FAULTS_ENV } from '../../app/common/protocol.ts';
import { EngineClient } from '../../app/engine/client.ts';
import { EngineSession } from '../../app/server/engine-session.ts';
import { startServer, type RunningServer } from '../../app/server/serve.ts';
import { haveSharedModel, STORIES_260K } from '../support/models.ts';
import { referenceText, wsConnect } from '../support/serve-client.ts';

const CONTEXT = 1024;
/** Longer than the context: the generation runs until the test kills the engine. */
const LONG = 3000;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- frames are poked into freely
type Frame = Record<string, any>;

/** A /ws connection that records every frame and waits for one that matches. */
async function openSocket(port: number, token: string) {
  const ws = await wsConnect(port, { Authorization: `Bearer ${token}` });
  expect(ws.status).toBe(101);
  const frames: Frame[] = [];
  const waiters: Array<{ match: (f: Frame) => boolean; resolve: (f: Frame) => void }> = [];
  void (async () => {
    for (;;) {
      const frame = JSON.parse(await ws.next()) as Frame;
      frames.push(frame);
      for (const waiter of waiters.splice(0)) {
        if (waiter.match(frame)) waiter.resolve(frame);
        else waiters.push(waiter);
      }
    }
  })();
  const waitFor = (match: (f: Frame) => boolean, what: string, timeoutMs = 30_000): Promise<Frame> => {
    const seen = frames.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no frame ${what} within ${timeoutMs} ms; got kinds ${frames.map((f) => f.kind).join(',')}`)), timeoutMs);
      waiters.push({ match, resolve: (f) => (clearTimeout(timer), resolve(f)) });
    });
  };
  return { ...ws, frames, waitFor, close: () => ws.socket.destroy() };
}

describe.runIf(haveSharedModel())('browser-mode server: engine crash and restart', () => {
  const env = { ...process.env, [TEST_FAULTS_ENV]: '1' };
  const start = () => EngineClient.start({ env });
  const logs: string[] = [];
  let tmp: string;
  let session: EngineSession;
  let server: RunningServer;
  let base: string;
  let n = 0;
  const auth = () => ({ Authorization: `Bearer ${server.token}` });
  const complete = (maxTokens = 8) =>
    fetch(`${base}/v1/completions`, { method: 'POST', headers: { ...auth(), 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: maxTokens, temperature: 0 }) });

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'longhand-crash-'));
    session = new EngineSession(await start(), { startEngine: start, log: (line) => logs.push(line) });
    await session.load({ modelPath: STORIES_260K, contextLength: CONTEXT, threads: 1 });
    server = await startServer({ session, dataDir: join(tmp, 'data'), testFaults: true, log: (line) => logs.push(line) });
    base = `http://127.0.0.1:${server.port}`;
  });

  afterAll(async () => {
    await server?.close();
    await session?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  /** Kills the engine mid-generation with `kill`; checks what the windows and the API see; restarts. */
  async function crashAndRestart(kill: (ws: Awaited<ReturnType<typeof openSocket>>) => void, expected: { reason: string; signal: string }) {
    const ws = await openSocket(server.port, server.token);
    const oldPid = session.engine.pid;
    const running = `g${++n}`;
    const queued = `g${++n}`;
    ws.send({ kind: 'generate', requestId: running, prompt: { text: 'Once upon a time' }, params: { maxTokens: LONG, stopOnEos: false, sampling: { temperature: 0.8, seed: 7 } } });
    ws.send({ kind: 'generate', requestId: queued, prompt: { text: 'One day' }, params: { maxTokens: 4 } });
    await ws.waitFor((f) => f.requestId === running && f.kind === 'token' && f.index >= 5, 'token 5');
    const killedAt = performance.now();
    kill(ws);

    // The running generation and the queued one both end with ENGINE_CRASHED naming the signal.
    const runningError = await ws.waitFor((f) => f.requestId === running && f.kind === 'error', 'running error');
    expect(runningError.error.code).toBe('ENGINE_CRASHED');
    expect(runningError.error.message).toContain(expected.signal);
    const crashed = await ws.waitFor((f) => f.kind === 'engineStatus' && f.status.state === 'crashed', 'crashed status');
    const crashMs = performance.now() - killedAt;
    expect(crashed.status).toMatchObject({ reason: expected.reason, willRestart: false });
    expect(crashed.status.message).toContain(expected.signal);
    expect(crashed.status.message).toContain('while generating');
    const queuedError = await ws.waitFor((f) => f.requestId === queued && (f.kind === 'error' || f.kind === 'done'), 'queued answer');
    expect(queuedError).toMatchObject({ kind: 'error', error: { code: 'ENGINE_CRASHED' } });
    expect(queuedError.error.message).toContain(expected.signal);
    expect(ws.frames.filter((f) => f.requestId === running && f.kind === 'done')).toEqual([]);

    // Meanwhile: the API answers 503 with a typed error, tokenize fails the same way, and a
    // window that connects now is told at once.
    const refused = await complete();
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as Frame).error).toMatchObject({ code: 'engine_crashed', message: expect.stringContaining(expected.signal) });
    const health = await fetch(`${base}/health`, { headers: auth() });
    expect(health.status).toBe(503);
    expect((await health.json()) as Frame).toMatchObject({ status: 'engine_crashed', model_loaded: false, engine: { state: 'crashed', reason: expected.reason } });
    ws.send({ kind: 'tokenize', requestId: `t${++n}`, text: 'Once' });
    expect((await ws.waitFor((f) => f.requestId === `t${n}`, 'tokenize answer')).error.code).toBe('ENGINE_CRASHED');
    const late = await openSocket(server.port, server.token);
    expect((await late.waitFor((f) => f.kind === 'engineStatus', 'status on connect')).status).toMatchObject({ state: 'crashed', reason: expected.reason });

    // Restart on request: restarting → the same model announced → ready with a new pid.
    const restartAt = performance.now();
    ws.send({ kind: 'restartEngine', requestId: `r${++n}` });
    await ws.waitFor((f) => f.kind === 'engineStatus' && f.status.state === 'restarting', 'restarting');
    const ready = await ws.waitFor((f) => f.kind === 'engineStatus' && f.status.state === 'ready', 'ready', 60_000);
    const restartMs = performance.now() - restartAt;
    expect(ready.status.pid).not.toBe(oldPid);
    expect(ready.status.pid).toBe(session.engine.pid);
    const readyIndex = ws.frames.indexOf(ready);
    const announced = ws.frames.findLast((f, i) => i < readyIndex && f.kind === 'loaded' && f.requestId === 'server:current-model');
    expect(announced?.model).toMatchObject({ path: STORIES_260K, contextLength: CONTEXT, threads: 1 });
    expect((await late.waitFor((f) => f.kind === 'engineStatus' && f.status.state === 'ready', 'ready on the other window')).status.pid).toBe(ready.status.pid);
    console.log(`crash isolation (${expected.signal}): kill → crashed status ${crashMs.toFixed(0)} ms; restart → ready (model reloaded) ${restartMs.toFixed(0)} ms`);

    // The new engine works: the reference greedy text over /ws and a 200 from the API.
    const after = `g${++n}`;
    ws.send({ kind: 'generate', requestId: after, prompt: { text: 'Once upon a time' }, params: { maxTokens: 12, sampling: { temperature: 0 } } });
    await ws.waitFor((f) => f.requestId === after && f.kind === 'done', 'done after restart');
    const text = ws.frames.filter((f) => f.requestId === after && (f.kind === 'token' || f.kind === 'done')).map((f) => f.text as string).join('');
    expect(text).toBe(referenceText(12));
    const ok = await complete();
    expect(ok.status).toBe(200);
    expect((await fetch(`${base}/health`, { headers: auth() })).status).toBe(200);
    ws.close();
    late.close();
  }

  it('SIGKILL of the engine mid-generation: crashed (killed, SIGKILL), 503 meanwhile, restart reloads the model', async () => {
    await crashAndRestart(() => process.kill(session.engine.pid, 'SIGKILL'), { reason: 'killed', signal: 'SIGKILL' });
  });

  it('a native fault (SIGSEGV through the test hook) mid-generation behaves the same', async () => {
    await crashAndRestart((ws) => ws.send({ kind: 'testFault', requestId: `f${++n}`, fault: 'segv' }), { reason: 'crashed', signal: 'SIGSEGV' });
  });

  it('abort() in native code (SIGABRT) behaves the same', async () => {
    await crashAndRestart((ws) => ws.send({ kind: 'testFault', requestId: `f${++n}`, fault: 'abort' }), { reason: 'crashed', signal: 'SIGABRT' });
  });

  it('a relay without the hook refuses testFault as an unknown request; the engine lives on', async () => {
    const plain = await startServer({ session, dataDir: join(tmp, 'data-plain'), testFaults: false, log: (line) => logs.push(line) });
    try {
      const ws = await openSocket(plain.port, plain.token);
      const pid = session.engine.pid;
      ws.send({ kind: 'testFault', requestId: 'f-off', fault: 'segv' });
      const refused = await ws.waitFor((f) => f.requestId === 'f-off', 'refusal');
      expect(refused).toMatchObject({ kind: 'error', error: { code: 'PROTOCOL_BAD_MESSAGE' } });
      expect(session.status).toEqual({ state: 'ready', pid });
      ws.send({ kind: 'tokenize', requestId: 't-off', text: 'Once', addSpecial: false });
      expect((await ws.waitFor((f) => f.requestId === 't-off', 'tokenized')).kind).toBe('tokenized');
      ws.close();
    } finally {
      await plain.close();
    }
  });

  it('restart while the engine runs replaces it without a crash report', async () => {
    const ws = await openSocket(server.port, server.token);
    const oldPid = session.engine.pid;
    ws.send({ kind: 'restartEngine', requestId: 'r-live' });
    const ready = await ws.waitFor((f) => f.kind === 'engineStatus' && f.status.state === 'ready', 'ready', 60_000);
    expect(ready.status.pid).not.toBe(oldPid);
    expect(ws.frames.filter((f) => f.kind === 'engineStatus').map((f) => f.status.state)).toEqual(['restarting', 'ready']);
    expect(session.model?.contextLength).toBe(CONTEXT);
    ws.close();
  });
});
