// The engine supervisor's rules, under Node with a fake utility process and fake ports:
// typed crash reasons, capped restarts with backoff, no restart after an out-of-memory or a
// model that crashed the host twice while loading, in-flight requests rejected with the reason.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { parseEngineRequest, type EngineEvent, type EngineRequest } from '../../app/common/protocol.ts';
import type { EngineStatus } from '../../app/common/window-api.ts';
import { classifyExit, EngineSupervisor, type HostProcess, type PortLike, type SupervisorOptions } from '../../app/main/engine-supervisor.ts';
import type { FakePort, FakeUtilityProcess} from './fake-electron.ts';
import { fake, MessageChannelMain, resetFake, utilityProcess } from './fake-electron.ts';

const quiet = () => undefined;

function harness(options: Partial<SupervisorOptions> & { readyOnConnect?: boolean } = {}) {
  /** Per fork: client name → the host's end of that connection, and what the host received. */
  const hosts: Array<{ ports: Map<string, FakePort>; received: unknown[] }> = [];
  let readyOnConnect = options.readyOnConnect ?? true;
  fake.onHostMessage = (child, message, transfer) => {
    const port = transfer[0];
    const { client } = message as { client: string };
    if (!port) return;
    let host = hosts[fake.forks.indexOf(child)];
    if (!host) hosts[fake.forks.indexOf(child)] = host = { ports: new Map(), received: [] };
    host.ports.set(client, port);
    port.on('message', ({ data }: { data: unknown }) => host!.received.push(data));
    port.start();
    if (readyOnConnect) port.postMessage({ kind: 'ready', protocol: 1, pid: child.pid });
  };
  const supervisor = new EngineSupervisor({
    fork: () => utilityProcess.fork('/app/out/engine/host.mjs', [], { serviceName: 'Longhand engine' }) as unknown as HostProcess,
    createChannel: () => new MessageChannelMain() as unknown as { port1: PortLike; port2: PortLike },
    log: quiet,
    ...options,
  });
  const statuses: EngineStatus[] = [];
  supervisor.onStatus((status) => statuses.push(status));
  const events: EngineEvent[] = [];
  const child = (index = fake.forks.length - 1): FakeUtilityProcess => fake.forks[index]!;
  /** The host process dies; Electron's child-process-gone says `reason`. */
  const crash = (reason = 'crashed', exitCode = 139) => {
    supervisor.noteProcessGone({ reason, exitCode });
    child().exit(exitCode);
  };
  const lastStatus = () => statuses.at(-1)!;
  return {
    supervisor,
    statuses,
    events,
    child,
    crash,
    lastStatus,
    hosts,
    setReadyOnConnect: (value: boolean) => (readyOnConnect = value),
    connectWindow: (id = 'w1') => supervisor.addClient(id, (event) => events.push(event)),
    /** The host answers on the connection of window `id` of the latest fork. */
    answer: (event: EngineEvent, id = 'w1') => hosts.at(-1)!.ports.get(id)!.postMessage(event),
  };
}

const generate = (requestId: string): EngineRequest => ({ kind: 'generate', requestId, prompt: { text: 'Once' }, params: { maxTokens: 4, stopStrings: [], stopOnEos: true, reusePrefix: true, sampling: { temperature: 0, topK: 40, topP: 0.95, minP: 0.05, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64 } } });
const load = (requestId: string, modelPath: string): EngineRequest => parseEngineRequest({ kind: 'load', requestId, options: { modelPath } });
const tokenize = (requestId: string): EngineRequest => ({ kind: 'tokenize', requestId, text: 'hi', addSpecial: true });

beforeEach(() => {
  resetFake();
  vi.useFakeTimers();
  vi.setSystemTime(1_000_000);
});
afterEach(() => vi.useRealTimers());

describe('EngineSupervisor: start', () => {
  it('forks the host as a named utility process and reports ready with its pid', () => {
    const h = harness();
    h.supervisor.start();
    expect(fake.forks).toHaveLength(1);
    expect(h.child().options).toMatchObject({ serviceName: 'Longhand engine' });
    expect(h.statuses).toEqual([{ state: 'starting' }, { state: 'ready', pid: h.child().pid }]);
  });

  it('relays requests to the host and events back, on one port per window', () => {
    const h = harness();
    h.supervisor.start();
    h.connectWindow();
    h.supervisor.send('w1', tokenize('t1'));
    expect(h.hosts[0]!.received).toEqual([tokenize('t1')]);
    h.answer({ kind: 'tokenized', requestId: 't1', ids: [1, 2] });
    expect(h.events).toEqual([{ kind: 'tokenized', requestId: 't1', ids: [1, 2] }]);
  });

  it('drops host events that do not match the protocol', () => {
    const h = harness();
    h.supervisor.start();
    h.connectWindow();
    h.answer({ kind: 'bogus' } as unknown as EngineEvent);
    expect(h.events).toEqual([]);
  });
});

describe('EngineSupervisor: crashes and restarts', () => {
  it('restarts after a crash with exponential backoff and stops after 3 restarts within 60 s', () => {
    const h = harness();
    h.supervisor.start();
    const delays = [500, 1000, 2000];
    for (const [index, delay] of delays.entries()) {
      h.crash('crashed');
      expect(h.lastStatus()).toMatchObject({ state: 'crashed', reason: 'crashed', willRestart: true });
      vi.advanceTimersByTime(delay - 1);
      expect(fake.forks).toHaveLength(index + 1);
      vi.advanceTimersByTime(1);
      expect(fake.forks).toHaveLength(index + 2);
      expect(h.statuses.at(-2)).toEqual({ state: 'restarting', attempt: index + 1 });
      expect(h.lastStatus()).toMatchObject({ state: 'ready' });
    }
    h.crash('crashed');
    expect(h.lastStatus()).toMatchObject({ state: 'crashed', reason: 'crashed', willRestart: false });
    expect((h.lastStatus() as { message: string }).message).toMatch(/crashed 4 times within 60 s; it is not restarted automatically/);
    vi.advanceTimersByTime(120_000);
    expect(fake.forks).toHaveLength(4);
  });

  it('forgets crashes older than 60 s', () => {
    const h = harness();
    h.supervisor.start();
    for (let i = 0; i < 6; i++) {
      h.crash('crashed');
      expect(h.lastStatus()).toMatchObject({ willRestart: true });
      vi.advanceTimersByTime(61_000);
      expect(h.statuses.at(-2)).toEqual({ state: 'restarting', attempt: 1 });
    }
  });

  it('never restarts after an out-of-memory', () => {
    const h = harness();
    h.supervisor.start();
    h.crash('oom', 0);
    expect(h.lastStatus()).toEqual({ state: 'crashed', reason: 'oom', willRestart: false, message: expect.stringMatching(/ran out of memory.*not restarted automatically/) });
    vi.advanceTimersByTime(60_000);
    expect(fake.forks).toHaveLength(1);
  });

  it('treats a V8 heap-limit fatal error as out-of-memory', () => {
    const h = harness();
    h.supervisor.start();
    h.child().emit('error', 'FatalError', 'Reached heap limit Allocation failed - JavaScript heap out of memory', '{}');
    h.child().exit(134);
    vi.advanceTimersByTime(200); // the settle delay for child-process-gone
    expect(h.lastStatus()).toMatchObject({ state: 'crashed', reason: 'oom', willRestart: false });
  });

  it('reports a killed host as killed and restarts it', () => {
    const h = harness();
    h.supervisor.start();
    h.crash('killed', 9);
    expect(h.lastStatus()).toMatchObject({ state: 'crashed', reason: 'killed', willRestart: true, message: expect.stringMatching(/was killed/) });
  });

  it('reports a host that exits before it is ready as launch-failed', () => {
    const h = harness({ readyOnConnect: false });
    h.supervisor.start();
    h.child().exit(1);
    vi.advanceTimersByTime(200); // no child-process-gone came: classified from what is known
    expect(h.lastStatus()).toMatchObject({ state: 'crashed', reason: 'launch-failed', message: 'The engine could not start (exit code 1).' });
  });

  it('reports a fork that throws as launch-failed', () => {
    const h = harness({
      fork: () => {
        throw new Error('ENOENT: out/engine/host.mjs');
      },
    });
    h.supervisor.start();
    expect(h.lastStatus()).toMatchObject({ state: 'crashed', reason: 'launch-failed', message: expect.stringContaining('ENOENT') });
  });

  it('kills a host that never says ready and reports launch-failed', () => {
    const h = harness({ readyOnConnect: false, readyTimeoutMs: 5_000 });
    h.supervisor.start();
    vi.advanceTimersByTime(5_000);
    expect(h.child().killed).toBe(true);
    return Promise.resolve().then(() => {
      vi.advanceTimersByTime(200);
      expect(h.lastStatus()).toMatchObject({ state: 'crashed', reason: 'launch-failed', message: expect.stringMatching(/did not start in time/) });
    });
  });

  it('waits for child-process-gone details that come after the exit', () => {
    const h = harness();
    h.supervisor.start();
    h.child().exit(0);
    expect(h.lastStatus()).toMatchObject({ state: 'ready' }); // not classified yet
    h.supervisor.noteProcessGone({ reason: 'oom', exitCode: 0 });
    expect(h.lastStatus()).toMatchObject({ state: 'crashed', reason: 'oom' });
  });

  it('does not restart after the same model crashed the host twice while loading', () => {
    const h = harness();
    h.supervisor.start();
    h.connectWindow();
    h.supervisor.send('w1', load('l1', '/models/big.gguf'));
    h.crash('crashed');
    expect(h.lastStatus()).toMatchObject({ willRestart: true, message: 'The engine crashed while loading big.gguf (exit code 139).' });
    vi.advanceTimersByTime(500);
    expect(h.lastStatus()).toMatchObject({ state: 'ready' });
    h.supervisor.send('w1', load('l2', '/models/big.gguf'));
    h.crash('crashed');
    expect(h.lastStatus()).toMatchObject({ state: 'crashed', willRestart: false, message: expect.stringMatching(/Loading big\.gguf crashed the engine twice/) });
    vi.advanceTimersByTime(60_000);
    expect(fake.forks).toHaveLength(2);
  });

  it('forgets a model load crash once that model loads', () => {
    const h = harness();
    h.supervisor.start();
    h.connectWindow();
    h.supervisor.send('w1', load('l1', '/models/m.gguf'));
    h.crash('crashed');
    vi.advanceTimersByTime(61_000);
    h.supervisor.send('w1', load('l2', '/models/m.gguf'));
    h.answer({ kind: 'loaded', requestId: 'l2', model: { path: '/models/m.gguf', format: 'gguf', architecture: 'llama', family: 'llama', layers: 1, heads: 1, kvHeads: 1, headDim: 8, hiddenSize: 8, vocabSize: 32, trainedContext: 128, contextLength: 128, device: 'cpu', threads: 1, kvType: 'fp16', policy: 'full', chatTemplate: false, loadMs: 1 } });
    h.supervisor.send('w1', load('l3', '/models/m.gguf'));
    h.crash('crashed');
    expect(h.lastStatus()).toMatchObject({ willRestart: true });
  });
});

describe('EngineSupervisor: requests in flight', () => {
  it('answers every request in flight with ENGINE_CRASHED and the reason, and only those', () => {
    const h = harness();
    h.supervisor.start();
    h.connectWindow();
    h.supervisor.send('w1', tokenize('t1'));
    h.supervisor.send('w1', generate('g1'));
    h.supervisor.send('w1', { kind: 'cancel', requestId: 'c1', target: 'g1' });
    h.supervisor.send('w1', { kind: 'snapshots', requestId: 's1', action: 'stats' });
    h.supervisor.send('w1', { kind: 'snapshots', requestId: 's2', action: 'clear' });
    h.answer({ kind: 'tokenized', requestId: 't1', ids: [1] });
    const stats = { enabled: true, dir: '/data/kv-snapshots', count: 1, bytes: 10, capBytes: 100 };
    h.answer({ kind: 'snapshots', requestId: 's1', stats });
    h.crash('crashed');
    // An answered snapshots request is over; the unanswered one (s2) gets the crash.
    expect(h.events).toEqual([
      { kind: 'tokenized', requestId: 't1', ids: [1] },
      { kind: 'snapshots', requestId: 's1', stats },
      { kind: 'error', requestId: 'g1', error: { code: 'ENGINE_CRASHED', message: 'The engine crashed (exit code 139).', details: { reason: 'crashed' } } },
      { kind: 'error', requestId: 's2', error: { code: 'ENGINE_CRASHED', message: 'The engine crashed (exit code 139).', details: { reason: 'crashed' } } },
    ]);
  });

  it('holds requests made while the host restarts and sends them to the new host', () => {
    const h = harness();
    h.supervisor.start();
    h.connectWindow();
    h.crash('crashed');
    h.supervisor.send('w1', tokenize('t2'));
    vi.advanceTimersByTime(500);
    expect(h.hosts[1]!.received).toEqual([tokenize('t2')]);
  });

  it('rejects requests at once when no restart will come', () => {
    const h = harness();
    h.supervisor.start();
    h.connectWindow();
    h.crash('oom', 0);
    h.supervisor.send('w1', tokenize('t3'));
    expect(h.events).toEqual([{ kind: 'error', requestId: 't3', error: { code: 'ENGINE_CRASHED', message: expect.stringMatching(/^The engine is not running: The engine ran out of memory/), details: { reason: 'oom' } } }]);
  });

  it('keeps windows apart: a window only gets its own events', () => {
    const h = harness();
    h.supervisor.start();
    h.connectWindow('w1');
    const other: EngineEvent[] = [];
    h.supervisor.addClient('w2', (event) => other.push(event));
    h.supervisor.send('w1', tokenize('t1'));
    h.answer({ kind: 'tokenized', requestId: 't1', ids: [] }, 'w1');
    expect(other).toEqual([]);
  });
});

describe('EngineSupervisor: restart on request and stop', () => {
  it('restarts on request even after the cap, rejecting what was in flight', async () => {
    const h = harness();
    h.supervisor.start();
    h.crash('oom', 0);
    h.connectWindow();
    const restarted = h.supervisor.restart();
    await restarted;
    expect(fake.forks).toHaveLength(2);
    expect(h.lastStatus()).toMatchObject({ state: 'ready', pid: h.child().pid });
    h.supervisor.send('w1', generate('g9'));
    const again = h.supervisor.restart();
    expect(h.child(1).killed).toBe(true);
    await again;
    expect(h.events).toContainEqual({ kind: 'error', requestId: 'g9', error: { code: 'ENGINE_CRASHED', message: 'The engine was restarted.', details: { reason: 'killed' } } });
    await Promise.resolve();
    vi.advanceTimersByTime(1000);
    expect(h.statuses.filter((s) => s.state === 'crashed')).toHaveLength(1); // the kill was expected
  });

  it('stop() ends the host without a crash report or a restart', async () => {
    const h = harness();
    h.supervisor.start();
    h.supervisor.stop();
    await Promise.resolve();
    vi.advanceTimersByTime(10_000);
    expect(h.child().killed).toBe(true);
    expect(h.statuses.map((s) => s.state)).toEqual(['starting', 'ready']);
    expect(fake.forks).toHaveLength(1);
  });
});

describe('classifyExit', () => {
  it.each([
    [{ exitCode: 0, gone: { reason: 'oom', exitCode: 0 }, everReady: true }, 'oom'],
    [{ exitCode: 0, gone: { reason: 'memory-eviction', exitCode: 0 }, everReady: true }, 'oom'],
    [{ exitCode: 0xe0000008, everReady: true }, 'oom'],
    [{ exitCode: 9, gone: { reason: 'killed', exitCode: 9 }, everReady: true }, 'killed'],
    [{ exitCode: 139, gone: { reason: 'crashed', exitCode: 139 }, everReady: true }, 'crashed'],
    [{ exitCode: 1, gone: { reason: 'abnormal-exit', exitCode: 1 }, everReady: true }, 'crashed'],
    [{ exitCode: 0, gone: { reason: 'clean-exit', exitCode: 0 }, everReady: true }, 'crashed'],
    [{ exitCode: 1, everReady: true }, 'crashed'],
    [{ exitCode: 1, everReady: false }, 'launch-failed'],
    [{ exitCode: 1, gone: { reason: 'launch-failed', exitCode: 1 }, everReady: false }, 'launch-failed'],
    [{ exitCode: 1, gone: { reason: 'integrity-failure', exitCode: 1 }, everReady: false }, 'launch-failed'],
  ] as const)('%o → %s', (input, reason) => {
    const result = classifyExit(input);
    expect(result.reason).toBe(reason);
    expect(result.message).toMatch(/^The engine /);
  });
});
