// The preload: the only bridge between the sandboxed renderer and the rest of Longhand. It
// exposes `window.longhand`, a LonghandWindowApi (app/common/window-api.ts) plus the desktop
// intents of DesktopApiExtras — functions only, never ipcRenderer, a port or anything of node.
//
// Engine traffic goes over a MessagePort that main hands this page (IPC.enginePort) after the
// page asks for it (IPC.engineConnect); requests made before it arrives wait here. Main checks
// every request and relays it to the engine host; when the host dies, main answers each
// request in flight with an ENGINE_CRASHED `error` event and reports the reason as a status.
// App requests are invokes on the shared channel names; a refusal comes back as {code, message}.
//
// Sandboxed preloads may only require 'electron': scripts/bundle-main.cjs bundles this file
// (and the channel names) into out/preload/index.cjs.
import { contextBridge, ipcRenderer } from 'electron';
import type { AppRequestInput, AppResponses } from '../common/app-api.ts';
import type { EngineEvent, EngineRequestInput } from '../common/protocol.ts';
import type { EngineStatus, LonghandWindowApi } from '../common/window-api.ts';
import { IPC, type DesktopApiExtras, type ExportRequest, type ExportResult, type IpcResult, type MenuCommand } from '../main/ipc-channels.ts';

export type LonghandDesktopApi = LonghandWindowApi & DesktopApiExtras;

type Listener<T> = (value: T) => void;

function listenerSet<T>() {
  const listeners = new Set<Listener<T>>();
  return {
    add(listener: Listener<T>): () => void {
      listeners.add(listener);
      return () => void listeners.delete(listener);
    },
    emit(value: T): void {
      for (const listener of [...listeners]) {
        try {
          listener(value);
        } catch (error) {
          console.error('[longhand] a listener threw', error);
        }
      }
    },
  };
}

/** The page's end of its engine channel (a DOM MessagePort). */
interface PagePort {
  postMessage(message: unknown): void;
  start(): void;
  close(): void;
  onmessage: ((event: { data: unknown }) => void) | null;
}

/** A typed refusal as the page sees it. */
export interface ApiError {
  code: string;
  message: string;
}

async function invoke<T>(channel: string, ...args: unknown[]): Promise<T> {
  const result = (await ipcRenderer.invoke(channel, ...args)) as IpcResult<T> | undefined;
  if (result && result.ok === true) return result.value;
  const error: ApiError = result && result.ok === false ? { code: String(result.error.code), message: String(result.error.message) } : { code: 'INTERNAL', message: 'no answer from the main process' };
  throw error;
}

export function createDesktopApi(): LonghandDesktopApi {
  const engineEvents = listenerSet<EngineEvent>();
  const statusEvents = listenerSet<EngineStatus>();
  const menuEvents = listenerSet<MenuCommand>();
  let port: PagePort | undefined;
  let waiting: EngineRequestInput[] = [];
  let lastStatus: EngineStatus | undefined;

  ipcRenderer.on(IPC.enginePort, (event) => {
    const next = event.ports[0] as unknown as PagePort | undefined;
    if (!next) return;
    port?.close();
    port = next;
    port.onmessage = (message) => engineEvents.emit(message.data as EngineEvent);
    port.start();
    const queued = waiting;
    waiting = [];
    for (const request of queued) port.postMessage(request);
  });
  ipcRenderer.on(IPC.engineStatus, (_event, status: EngineStatus) => {
    lastStatus = status;
    statusEvents.emit(status);
  });
  ipcRenderer.on(IPC.menuCommand, (_event, command: MenuCommand) => menuEvents.emit(command));
  ipcRenderer.send(IPC.engineConnect);

  const api: LonghandDesktopApi = {
    host: 'electron',
    engineSend(request) {
      if (port) port.postMessage(request);
      else waiting.push(request);
    },
    onEngineEvent: (listener) => engineEvents.add(listener),
    onEngineStatus(listener) {
      const off = statusEvents.add(listener);
      if (lastStatus) listener(lastStatus);
      return off;
    },
    restartEngine: () => invoke<void>(IPC.engineRestart),
    app: <K extends AppRequestInput['kind']>(request: Extract<AppRequestInput, { kind: K }>) => invoke<AppResponses[K]>(IPC.appRequest, request),
    chooseModel: () => invoke<string | null>(IPC.chooseModel),
    exportDocument: (request: ExportRequest) => invoke<ExportResult>(IPC.exportDocument, request),
    onMenuCommand: (listener) => menuEvents.add(listener),
  };
  return Object.freeze(api);
}

contextBridge.exposeInMainWorld('longhand', createDesktopApi());
