// The engine host's test-only fault hook through EngineClient: refused (PROTOCOL_BAD_MESSAGE,
// the process lives on) without LONGHAND_TEST_FAULTS=1 in the host's env, and a real native
// fault with it, reported as ENGINE_CRASHED naming the signal. Needs no model.
import { afterEach, describe, expect, it } from 'vitest';
import { TEST_FAULTS_ENV } from '../../app/common/protocol.ts';
import { EngineClient } from '../../app/engine/client.ts';

describe('engine host test fault hook', () => {
  const started: EngineClient[] = [];
  const start = async (enabled: boolean) => {
    const env = { ...process.env };
    delete env[TEST_FAULTS_ENV];
    if (enabled) env[TEST_FAULTS_ENV] = '1';
    const engine = await EngineClient.start({ env });
    started.push(engine);
    return engine;
  };
  afterEach(async () => {
    await Promise.all(started.splice(0).map((engine) => engine.close()));
  });

  it('is refused as an unknown request without LONGHAND_TEST_FAULTS=1, and the host lives on', async () => {
    const engine = await start(false);
    await expect(engine.testFault('segv')).rejects.toMatchObject({ code: 'PROTOCOL_BAD_MESSAGE', message: expect.stringContaining('kind') });
    expect(engine.exited).toBeUndefined();
    // still serving: a request that needs no model gets its typed answer
    await expect(engine.tokenize('Once')).rejects.toMatchObject({ code: 'ENGINE_NOT_LOADED' });
  });

  it.each([
    ['segv', 'SIGSEGV'],
    ['abort', 'SIGABRT'],
  ] as const)('with the variable, %s kills the host with %s and in-flight requests get ENGINE_CRASHED', async (fault, signal) => {
    const engine = await start(true);
    const exits: string[] = [];
    engine.onExit((exit) => exits.push(String(exit.signal)));
    const exit = await engine.testFault(fault);
    expect(exit).toMatchObject({ code: null, signal });
    expect(exit.error).toMatchObject({ code: 'ENGINE_CRASHED', details: { signal } });
    expect(exit.error.message).toBe(`the engine process crashed with ${signal} (a fault in native code)`);
    expect(exits).toEqual([signal]);
    await expect(engine.tokenize('Once')).rejects.toMatchObject({ code: 'ENGINE_CRASHED' });
  });
});
