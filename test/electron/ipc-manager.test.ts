// Every IPC message is checked for its sender and payload before a handler runs.
import type { WebContents } from 'electron';
import { beforeEach, describe, expect, it } from 'vitest';
import type { AppRequest } from '../../app/common/app-api.ts';
import type { EngineEvent, EngineRequest } from '../../app/common/protocol.ts';
import type { PortLike } from '../../app/main/engine-supervisor.ts';
import { IPC } from '../../app/main/ipc-channels.ts';
import { IpcManager, type EngineBackend } from '../../app/main/ipc-manager.ts';
import type { FakePort} from './fake-electron.ts';
import { FakeFrame, FakeWebContents, ipcMain, MessageChannelMain, resetFake } from './fake-electron.ts';

function setup() {
  const handled: AppRequest[] = [];
  const sent: Array<{ id: string; request: EngineRequest }> = [];
  const clients = new Map<string, (event: EngineEvent) => void>();
  let restarts = 0;
  const logs: string[] = [];
  const engine: EngineBackend = {
    status: { state: 'ready', pid: 7 },
    addClient: (id, deliver) => void clients.set(id, deliver),
    removeClient: (id) => void clients.delete(id),
    send: (id, request) => void sent.push({ id, request }),
    restart: async () => void restarts++,
    onStatus: () => () => undefined,
  };
  const manager = new IpcManager({
    ipcMain: ipcMain as unknown as ConstructorParameters<typeof IpcManager>[0]['ipcMain'],
    engine,
    appRequests: async (request) => {
      handled.push(request);
      return request.kind === 'documents.list' ? [] : { ok: 1 };
    },
    dialogs: { chooseModel: async () => '/m.gguf', exportDocument: async () => ({ saved: false }) },
    createChannel: () => new MessageChannelMain() as unknown as { port1: PortLike; port2: unknown },
    log: (message) => logs.push(message),
  });
  const window = new FakeWebContents('app://longhand/index.html');
  manager.addWindow(window as unknown as WebContents);
  return { manager, window, handled, sent, clients, logs, restarts: () => restarts };
}

beforeEach(() => resetFake());

const LIST = { kind: 'documents.list' };

describe('IpcManager: senders', () => {
  it('lets the known window main frame on app://longhand through', async () => {
    const s = setup();
    expect(await ipcMain.invoke(IPC.appRequest, s.window, s.window.mainFrame, LIST)).toEqual({ ok: true, value: [] });
    expect(s.handled).toEqual([{ kind: 'documents.list' }]);
  });

  const refusedSenders: Array<[string, (s: ReturnType<typeof setup>) => { sender: FakeWebContents; frame: FakeFrame | null }]> = [
    ['another webContents', () => { const other = new FakeWebContents('app://longhand/index.html'); return { sender: other, frame: other.mainFrame }; }],
    ['a subframe of the window', (s) => ({ sender: s.window, frame: new FakeFrame('app://longhand/frame.html', s.window.mainFrame) })],
    ['a frame that is not the main frame', (s) => ({ sender: s.window, frame: new FakeFrame('app://longhand/index.html') })],
    ['a foreign origin in the main frame', (s) => { s.window.mainFrame.url = 'https://evil.example/'; return { sender: s.window, frame: s.window.mainFrame }; }],
    ['a file: page', (s) => { s.window.mainFrame.url = 'file:///tmp/x.html'; return { sender: s.window, frame: s.window.mainFrame }; }],
    ['another app:// host', (s) => { s.window.mainFrame.url = 'app://evil/index.html'; return { sender: s.window, frame: s.window.mainFrame }; }],
    ['a frame that is gone', (s) => ({ sender: s.window, frame: null })],
    ['a destroyed window', (s) => { s.window.destroyed = true; return { sender: s.window, frame: s.window.mainFrame }; }],
  ];

  it.each(refusedSenders)('refuses %s before any handler runs, with a typed error and a log line', async (_why, make) => {
    const s = setup();
    const { sender, frame } = make(s);
    for (const [channel, args] of [[IPC.appRequest, [LIST]], [IPC.engineRestart, []], [IPC.chooseModel, []], [IPC.exportDocument, [{ title: 't', text: 'x', format: 'txt' }]]] as const) {
      const answer = await ipcMain.invoke(channel, sender, frame, ...args);
      expect(answer).toEqual({ ok: false, error: { code: 'IPC_FORBIDDEN', message: expect.stringMatching(/did not come from a Longhand window/) } });
    }
    ipcMain.sendFrom(IPC.engineConnect, sender, frame);
    expect(sender.posted).toEqual([]);
    expect(s.handled).toEqual([]);
    expect(s.restarts()).toBe(0);
    expect(s.clients.size).toBe(0);
    expect(s.logs.some((line) => line.includes('unknown sender'))).toBe(true);
  });

  it('forgets a window once it is destroyed', async () => {
    const s = setup();
    s.window.destroy();
    expect(await ipcMain.invoke(IPC.appRequest, s.window, s.window.mainFrame, LIST)).toMatchObject({ ok: false });
  });
});

describe('IpcManager: payloads', () => {
  it.each([
    ['an unknown kind', [{ kind: 'fs.readFile', path: '/etc/passwd' }]],
    ['an extra key', [{ kind: 'documents.list', path: '/etc' }]],
    ['a bad document id', [{ kind: 'documents.get', id: '../../etc/passwd' }]],
    ['a wrong type', [{ kind: 'settings.save', settings: { policy: 42 } }]],
    ['a non-https download', [{ kind: 'downloads.start', url: 'file:///etc/passwd' }]],
    ['no payload', []],
    ['two payloads', [LIST, LIST]],
    ['a string', ['documents.list']],
    ['null', [null]],
  ])('rejects an app request with %s before the handler runs', async (_why, args) => {
    const s = setup();
    const answer = await ipcMain.invoke(IPC.appRequest, s.window, s.window.mainFrame, ...args);
    expect(answer).toEqual({ ok: false, error: { code: 'PROTOCOL_BAD_MESSAGE', message: expect.any(String) } });
    expect(s.handled).toEqual([]);
    expect(s.logs.some((line) => line.startsWith('[ipc] rejected'))).toBe(true);
  });

  it('rejects a payload on channels that take none, and a bad export request', async () => {
    const s = setup();
    expect(await ipcMain.invoke(IPC.engineRestart, s.window, s.window.mainFrame, { now: true })).toMatchObject({ ok: false, error: { code: 'PROTOCOL_BAD_MESSAGE' } });
    expect(await ipcMain.invoke(IPC.chooseModel, s.window, s.window.mainFrame, '/etc')).toMatchObject({ ok: false });
    expect(await ipcMain.invoke(IPC.exportDocument, s.window, s.window.mainFrame, { title: 't', text: 'x', format: 'exe' })).toMatchObject({ ok: false });
    expect(await ipcMain.invoke(IPC.exportDocument, s.window, s.window.mainFrame, { title: 't', text: 'x', format: 'md', path: '/etc/passwd' })).toMatchObject({ ok: false });
    expect(s.restarts()).toBe(0);
    expect(await ipcMain.invoke(IPC.engineRestart, s.window, s.window.mainFrame)).toEqual({ ok: true, value: undefined });
    expect(s.restarts()).toBe(1);
    expect(await ipcMain.invoke(IPC.chooseModel, s.window, s.window.mainFrame)).toEqual({ ok: true, value: '/m.gguf' });
  });

  it('passes a handler failure back as {code, message}', async () => {
    const s = setup();
    ipcMain.handlers.clear();
    ipcMain.removeAllListeners();
    const manager = new IpcManager({
      ipcMain: ipcMain as never,
      engine: { status: { state: 'starting' }, addClient: () => undefined, removeClient: () => undefined, send: () => undefined, restart: async () => undefined, onStatus: () => () => undefined },
      appRequests: async () => {
        throw Object.assign(new Error('no such document'), { code: 'MODEL_NOT_FOUND' });
      },
      dialogs: { chooseModel: async () => null, exportDocument: async () => ({ saved: false }) },
      createChannel: () => new MessageChannelMain() as never,
      log: () => undefined,
    });
    manager.addWindow(s.window as unknown as WebContents);
    expect(await ipcMain.invoke(IPC.appRequest, s.window, s.window.mainFrame, { kind: 'documents.get', id: 'a-1' })).toEqual({ ok: false, error: { code: 'MODEL_NOT_FOUND', message: 'no such document' } });
  });
});

describe('IpcManager: the engine port', () => {
  const connect = (s: ReturnType<typeof setup>) => {
    ipcMain.sendFrom(IPC.engineConnect, s.window, s.window.mainFrame);
    const posted = s.window.posted.at(-1)!;
    expect(posted.channel).toBe(IPC.enginePort);
    expect(posted.ports).toHaveLength(1);
    const page = posted.ports[0] as FakePort;
    const received: unknown[] = [];
    page.on('message', ({ data }: { data: unknown }) => received.push(data));
    page.start();
    return { page, received };
  };

  it('hands the page one port and the current status', () => {
    const s = setup();
    connect(s);
    expect(s.window.sent).toContainEqual({ channel: IPC.engineStatus, args: [{ state: 'ready', pid: 7 }] });
    expect(s.clients.size).toBe(1);
  });

  it('passes valid engine requests to the supervisor, parsed (defaults filled in)', () => {
    const s = setup();
    const { page } = connect(s);
    page.postMessage({ kind: 'generate', requestId: 'g1', prompt: { text: 'Once' } });
    expect(s.sent).toHaveLength(1);
    expect(s.sent[0]!.request).toMatchObject({ kind: 'generate', requestId: 'g1', params: { maxTokens: 256 } });
  });

  it.each([
    ['an unknown kind', { kind: 'exec', requestId: 'x1', command: 'rm -rf /' }, 'x1'],
    ['a missing requestId', { kind: 'unload' }, ''],
    ['an extra key', { kind: 'unload', requestId: 'u1', force: true }, 'u1'],
    ['a bad prompt', { kind: 'generate', requestId: 'g2', prompt: { html: '<script>' } }, 'g2'],
    ['not an object', 'load /etc/passwd', ''],
  ])('answers an engine request with %s with a PROTOCOL_BAD_MESSAGE error and never forwards it', (_why, message, requestId) => {
    const s = setup();
    const { page, received } = connect(s);
    page.postMessage(message);
    expect(s.sent).toEqual([]);
    expect(received).toEqual([{ kind: 'error', requestId, error: { code: 'PROTOCOL_BAD_MESSAGE', message: expect.stringMatching(/^bad request/), details: {} } }]);
  });

  it('delivers the supervisor events to the page, and a reload replaces the connection', () => {
    const s = setup();
    const first = connect(s);
    const [firstId] = [...s.clients.keys()];
    s.clients.get(firstId!)!({ kind: 'unloaded', requestId: 'u1' });
    expect(first.received).toEqual([{ kind: 'unloaded', requestId: 'u1' }]);
    connect(s);
    expect([...s.clients.keys()]).not.toContain(firstId);
    expect(s.clients.size).toBe(1);
    first.page.close(); // the old page's port closing must not remove the new connection
    expect(s.clients.size).toBe(1);
  });
});
