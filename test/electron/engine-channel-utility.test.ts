// The host side of utilityProcess: ports main sends become engine channels that serveEngine
// serves. End to end with the supervisor: renderer-side request → main → "host" → answer.
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { EngineEvent } from '../../app/common/protocol.ts';
import type { EngineStatus } from '../../app/common/window-api.ts';
import type { EngineCore } from '../../app/engine/host/engine-core.ts';
import { serveEngine, type EngineChannel } from '../../app/engine/host/serve.ts';
import { acceptUtilityConnections, type ParentPortLike } from '../../app/engine/host/utility-channel.ts';
import { EngineSupervisor, type HostProcess, type PortLike } from '../../app/main/engine-supervisor.ts';
import type { FakePort} from './fake-electron.ts';
import { FakeUtilityProcess, MessageChannelMain, resetFake } from './fake-electron.ts';

const core: EngineCore = {
  load: async () => {
    throw new Error('not in this test');
  },
  unload: async () => undefined,
  tokenize: (text) => [...text].map((char) => char.charCodeAt(0)),
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
  // Two document snapshots of 300 bytes until cleared.
  configureSnapshots: async ({ dir, capBytes }) => ({ dir, count: 0, bytes: 0, capBytes }),
  snapshotStats: async () => ({ dir: '/data/kv-snapshots', count: snapshotCount, bytes: snapshotCount * 150, capBytes: 1000 }),
  clearSnapshots: async () => {
    snapshotCount = 0;
    return { dir: '/data/kv-snapshots', count: 0, bytes: 0, capBytes: 1000 };
  },
};
let snapshotCount = 2;

/** A utility process whose "host" runs in this process: parentPort is an emitter. */
function inProcessHost(pid: number): HostProcess {
  const child = new FakeUtilityProcess('host.mjs', [], {});
  child.pid = pid;
  const parentPort = new EventEmitter();
  acceptUtilityConnections(parentPort as unknown as ParentPortLike, (channel) => serveEngine(channel as unknown as EngineChannel, core, pid));
  child.postMessage = (message: unknown, transfer: FakePort[] = []) => void parentPort.emit('message', { data: message, ports: transfer });
  return child as unknown as HostProcess;
}

describe('engine-channel-utility', () => {
  it('serves each connected port and ignores other parent messages', () => {
    resetFake();
    const parentPort = new EventEmitter();
    const served: string[] = [];
    acceptUtilityConnections(parentPort as unknown as ParentPortLike, (channel) => served.push(channel.client));
    const { port2 } = new MessageChannelMain();
    parentPort.emit('message', { data: { kind: 'hello' }, ports: [port2] });
    parentPort.emit('message', { data: { kind: 'connect', client: 'x' }, ports: [] });
    parentPort.emit('message', { data: { kind: 'connect', client: 'w1' }, ports: [port2] });
    expect(served).toEqual(['w1']);
  });

  it('carries a request from a window through the supervisor to serveEngine and back', async () => {
    resetFake();
    const supervisor = new EngineSupervisor({
      fork: () => inProcessHost(4242),
      createChannel: () => new MessageChannelMain() as unknown as { port1: PortLike; port2: PortLike },
      log: () => undefined,
    });
    const statuses: EngineStatus[] = [];
    supervisor.onStatus((status) => statuses.push(status));
    const events: EngineEvent[] = [];
    supervisor.addClient('w1', (event) => events.push(event));
    supervisor.start();
    expect(statuses.at(-1)).toEqual({ state: 'ready', pid: 4242 });
    supervisor.send('w1', { kind: 'tokenize', requestId: 't1', text: 'ab', addSpecial: false });
    supervisor.send('w1', { kind: 'unload', requestId: 'u1' });
    supervisor.send('w1', { kind: 'snapshots', requestId: 's1', action: 'stats' });
    supervisor.send('w1', { kind: 'snapshots', requestId: 's2', action: 'clear' });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(events).toEqual([
      { kind: 'tokenized', requestId: 't1', ids: [97, 98] },
      { kind: 'unloaded', requestId: 'u1' },
      { kind: 'snapshots', requestId: 's1', stats: { enabled: true, dir: '/data/kv-snapshots', count: 2, bytes: 300, capBytes: 1000 } },
      { kind: 'snapshots', requestId: 's2', stats: { enabled: true, dir: '/data/kv-snapshots', count: 0, bytes: 0, capBytes: 1000 } },
    ]);
    supervisor.stop();
  });
});
