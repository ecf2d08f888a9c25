// Electron's path for load progress, under Node with the fake electron module: the preload's
// window API → the IPC manager (with the remote relay, as index.ts wires it) → the engine
// supervisor → a fake engine host that answers a load with loadProgress events and then
// `loaded`. The page sees every figure in order, before `loaded`; figures that do not match the
// protocol are dropped by the supervisor and never reach the page.
import type { WebContents } from 'electron';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import type { EngineEvent, ModelInfo } from '../../app/common/protocol.ts';
import { EngineSupervisor, type HostProcess, type PortLike } from '../../app/main/engine-supervisor.ts';
import { IPC } from '../../app/main/ipc-channels.ts';
import { IpcManager } from '../../app/main/ipc-manager.ts';
import { RemoteRelay } from '../../app/main/remote-relay.ts';
import type { LonghandDesktopApi } from '../../app/preload/index.ts';
import { fake, FakeWebContents, ipcMain, ipcRenderer, MessageChannelMain, resetFake, utilityProcess, type FakePort } from './fake-electron.ts';

vi.mock('electron', () => import('./fake-electron.ts'));

const MODEL: ModelInfo = {
  path: '/models/tiny.gguf', format: 'gguf', architecture: 'llama', family: 'llama', layers: 2, heads: 4, kvHeads: 2, headDim: 16, hiddenSize: 64, vocabSize: 512,
  trainedContext: 2048, contextLength: 2048, device: 'cpu', threads: 2, kvType: 'fp16', policy: 'full', chatTemplate: true, loadMs: 12,
};

/** What the fake host sends for a load: a figure per stage (one of them malformed), then loaded. */
function answerLoad(port: FakePort, requestId: string): void {
  port.postMessage({ kind: 'loadProgress', requestId, done: 1, total: 3 });
  port.postMessage({ kind: 'loadProgress', requestId, done: 2, total: 0 }); // total must be positive
  port.postMessage({ kind: 'loadProgress', requestId, done: 2, total: 3 });
  port.postMessage({ kind: 'loadProgress', requestId, done: 3, total: 3 });
  port.postMessage({ kind: 'loaded', requestId, model: MODEL });
}

let api: LonghandDesktopApi;
const logs: string[] = [];

beforeAll(async () => {
  resetFake();
  fake.onHostMessage = (child, message, transfer) => {
    const port = transfer[0];
    const { kind, client } = message as { kind?: string; client?: string };
    if (kind !== 'connect' || !port) return;
    port.on('message', ({ data }: { data: unknown }) => {
      const request = data as { kind: string; requestId: string };
      if (request.kind === 'load') answerLoad(port, request.requestId);
    });
    port.start();
    if (client === 'supervisor') port.postMessage({ kind: 'ready', protocol: 1, pid: child.pid });
  };
  const createChannel = () => new MessageChannelMain() as unknown as { port1: PortLike; port2: PortLike };
  const engine = new EngineSupervisor({
    fork: () => utilityProcess.fork('/app/out/engine/host.mjs', [], { serviceName: 'Longhand engine' }) as unknown as HostProcess,
    createChannel,
    log: (line) => logs.push(line),
  });
  engine.start();
  const ipc = new IpcManager({
    ipcMain: ipcMain as unknown as ConstructorParameters<typeof IpcManager>[0]['ipcMain'],
    engine,
    appRequests: async () => undefined,
    dialogs: { chooseModel: async () => null, exportDocument: async () => ({ saved: false }) },
    createChannel,
    remote: new RemoteRelay({ config: async () => undefined, log: (line) => logs.push(line) }),
    log: (line) => logs.push(line),
  });
  const window = new FakeWebContents('app://longhand/index.html');
  ipc.addWindow(window as unknown as WebContents);

  await import('../../app/preload/index.ts');
  api = fake.exposed.get('longhand') as LonghandDesktopApi;
  // The preload asked for its engine port (ipcRenderer.send): carry that to main, and main's port back.
  expect(ipcRenderer.sent).toEqual([{ channel: IPC.engineConnect, args: [] }]);
  ipcMain.sendFrom(IPC.engineConnect, window, window.mainFrame);
  const handed = window.posted.find((p) => p.channel === IPC.enginePort)!;
  ipcRenderer.emit(IPC.enginePort, { ports: handed.ports });
});

describe('Electron IPC: load progress', () => {
  it('reaches the page in order, before loaded; a malformed figure is dropped on the way', async () => {
    const events: EngineEvent[] = [];
    const loaded = new Promise<void>((resolve) => {
      api.onEngineEvent((event) => {
        events.push(event);
        if (event.kind === 'loaded') resolve();
      });
    });
    api.engineSend({ kind: 'load', requestId: 'load-1', options: { modelPath: MODEL.path } });
    await loaded;
    expect(events).toEqual([
      { kind: 'loadProgress', requestId: 'load-1', done: 1, total: 3 },
      { kind: 'loadProgress', requestId: 'load-1', done: 2, total: 3 },
      { kind: 'loadProgress', requestId: 'load-1', done: 3, total: 3 },
      { kind: 'loaded', requestId: 'load-1', model: MODEL },
    ]);
    expect(logs).toContain('[engine] dropped an event that does not match the protocol');
  });
});
