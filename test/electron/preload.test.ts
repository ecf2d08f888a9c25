// The preload exposes intent-level functions only, talks to the engine over the port main
// hands it, and turns refusals into {code, message}.
import { beforeAll, describe, expect, it, vi } from 'vitest';
import type { EngineEvent } from '../../app/common/protocol.ts';
import type { EngineStatus } from '../../app/common/window-api.ts';
import { IPC } from '../../app/main/ipc-channels.ts';
import type { LonghandDesktopApi } from '../../app/preload/index.ts';
import { fake, ipcRenderer, MessageChannelMain, resetFake } from './fake-electron.ts';

vi.mock('electron', () => import('./fake-electron.ts'));

let api: LonghandDesktopApi;

beforeAll(async () => {
  resetFake();
  await import('../../app/preload/index.ts');
  api = fake.exposed.get('longhand') as LonghandDesktopApi;
});

describe('preload', () => {
  it('exposes window.longhand with functions and the host name only', () => {
    expect([...fake.exposed.keys()]).toEqual(['longhand']);
    expect(api.host).toBe('electron');
    expect(Object.isFrozen(api)).toBe(true);
    for (const [key, value] of Object.entries(api)) {
      if (key !== 'host') expect(typeof value, key).toBe('function');
    }
    expect(Object.keys(api).sort()).toEqual(['app', 'chooseModel', 'engineSend', 'exportDocument', 'host', 'onEngineEvent', 'onEngineStatus', 'onMenuCommand', 'restartEngine'].sort());
  });

  it('asks main for an engine port once it loads', () => {
    expect(ipcRenderer.sent).toEqual([{ channel: IPC.engineConnect, args: [] }]);
  });

  it('holds engine requests until the port arrives, then speaks over it both ways', () => {
    const events: EngineEvent[] = [];
    const off = api.onEngineEvent((event) => events.push(event));
    api.engineSend({ kind: 'tokenize', requestId: 't1', text: 'hi' });
    const channel = new MessageChannelMain();
    const mainSide: unknown[] = [];
    channel.port1.on('message', ({ data }: { data: unknown }) => mainSide.push(data));
    channel.port1.start();
    ipcRenderer.emit(IPC.enginePort, { ports: [channel.port2] });
    expect(mainSide).toEqual([{ kind: 'tokenize', requestId: 't1', text: 'hi' }]);
    api.engineSend({ kind: 'unload', requestId: 'u1' });
    expect(mainSide).toHaveLength(2);
    channel.port1.postMessage({ kind: 'tokenized', requestId: 't1', ids: [5] });
    expect(events).toEqual([{ kind: 'tokenized', requestId: 't1', ids: [5] }]);
    off();
    channel.port1.postMessage({ kind: 'unloaded', requestId: 'u1' });
    expect(events).toHaveLength(1);
  });

  it('reports engine status, also to late subscribers', () => {
    const crashed: EngineStatus = { state: 'crashed', reason: 'oom', message: 'The engine ran out of memory.', willRestart: false };
    ipcRenderer.emit(IPC.engineStatus, {}, crashed);
    const seen: EngineStatus[] = [];
    api.onEngineStatus((status) => seen.push(status));
    expect(seen).toEqual([crashed]);
  });

  it('sends app requests on the shared channel and returns the value', async () => {
    ipcRenderer.answer = () => ({ ok: true, value: [{ id: 'a' }] });
    await expect(api.app({ kind: 'documents.list' })).resolves.toEqual([{ id: 'a' }]);
    expect(ipcRenderer.invoked.at(-1)).toEqual({ channel: IPC.appRequest, args: [{ kind: 'documents.list' }] });
  });

  it('rejects with {code, message} when main refuses', async () => {
    ipcRenderer.answer = () => ({ ok: false, error: { code: 'PROTOCOL_BAD_MESSAGE', message: 'bad app request: kind: Invalid input' } });
    await expect(api.app({ kind: 'documents.list' })).rejects.toEqual({ code: 'PROTOCOL_BAD_MESSAGE', message: 'bad app request: kind: Invalid input' });
    ipcRenderer.answer = () => undefined;
    await expect(api.restartEngine()).rejects.toEqual({ code: 'INTERNAL', message: 'no answer from the main process' });
  });

  it('relays menu commands', () => {
    const seen: unknown[] = [];
    api.onMenuCommand((command) => seen.push(command));
    ipcRenderer.emit(IPC.menuCommand, {}, { command: 'open-model', path: '/m.gguf' });
    expect(seen).toEqual([{ command: 'open-model', path: '/m.gguf' }]);
  });
});
