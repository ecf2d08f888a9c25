// The one IPC manager (STYLE.md, after Electron Fiddle and Mattermost): every message from a
// renderer passes two checks before any handler runs —
//   1. the sender: a webContents of a window this manager knows, its main frame (never a
//      subframe), showing the app's own origin app://longhand;
//   2. the payload: parsed with the app/common schemas (parseAppRequest, parseEngineRequest) or
//      the small schemas below.
// Whatever fails is logged and answered with a typed {code, message} (invokes) or an engine
// `error` event (engine port), or dropped (one-way sends). Handlers only ever see parsed values.
import type { IpcMain, IpcMainEvent, IpcMainInvokeEvent, MessagePortMain, WebContents } from 'electron';
import { z } from 'zod';
import type { AppRequest } from '../common/app-api.ts';
import { parseAppRequest } from '../common/app-api.ts';
import { LonghandError, type ErrorCode } from '../common/errors.ts';
import { parseEngineRequest, type EngineEvent, type EngineRequest } from '../common/protocol.ts';
import type { EngineStatus } from '../common/window-api.ts';
import type { PortLike } from './engine-supervisor.ts';
import type { RemoteRoute } from './remote-relay.ts';
import { IPC, type ExportRequest, type ExportResult, type IpcResult } from './ipc-channels.ts';
import { isAppUrl } from './security.ts';

/** What the manager needs of the supervisor (EngineSupervisor fits). */
export interface EngineBackend {
  readonly status: EngineStatus;
  addClient(id: string, deliver: (event: EngineEvent) => void): void;
  removeClient(id: string): void;
  send(id: string, request: EngineRequest): void;
  restart(): Promise<void>;
  onStatus(listener: (status: EngineStatus) => void): () => void;
}

export interface DialogBackend {
  chooseModel(contents: WebContents): Promise<string | null>;
  exportDocument(contents: WebContents, request: ExportRequest): Promise<ExportResult>;
}

export interface IpcManagerOptions {
  ipcMain: Pick<IpcMain, 'handle' | 'on' | 'removeHandler' | 'removeAllListeners'>;
  engine: EngineBackend;
  /** Answers one app request (documents, settings, models, downloads). */
  appRequests: (request: AppRequest) => Promise<unknown>;
  dialogs: DialogBackend;
  createChannel: () => { port1: PortLike; port2: unknown };
  /**
   * Generations through a remote endpoint when the settings say so (remote-relay.ts): each
   * connection gets a router that answers remote generates itself and forwards the rest.
   */
  remote?: { open(deliver: (event: EngineEvent) => void, forward: (request: EngineRequest) => void): RemoteRoute };
  log?: (message: string) => void;
}

/** The sender a message came from, as far as the checks need it. */
type SenderEvent = Pick<IpcMainEvent | IpcMainInvokeEvent, 'sender' | 'senderFrame'>;

export const ExportRequestSchema = z.strictObject({
  title: z.string().max(200),
  text: z.string().max(20_000_000),
  format: z.enum(['txt', 'md']),
});

/** No payload at all (the preload sends none for these). */
const NoPayloadSchema = z.tuple([]);

export class IpcRejection extends LonghandError {
  constructor(code: ErrorCode, message: string) {
    super(code, message);
    this.name = 'IpcRejection';
  }
}

export class IpcManager {
  private readonly windows = new Set<WebContents>();
  /** The current engine client of each window (a reload connects anew). */
  private readonly connections = new Map<WebContents, string>();
  private sequence = 0;
  private readonly log: (message: string) => void;
  private readonly disposeStatus: () => void;

  constructor(private readonly options: IpcManagerOptions) {
    this.log = options.log ?? ((message) => console.warn(message));
    const { ipcMain } = options;

    this.handle(IPC.appRequest, (args) => {
      if (args.length !== 1) throw new IpcRejection('PROTOCOL_BAD_MESSAGE', 'bad app request: expected one request object');
      return parseAppRequest(args[0]);
    }, (request) => options.appRequests(request));
    this.handle(IPC.engineRestart, noPayload, () => options.engine.restart());
    this.handle(IPC.chooseModel, noPayload, (_none, event) => options.dialogs.chooseModel(event.sender));
    this.handle(IPC.exportDocument, (args) => {
      const parsed = z.tuple([ExportRequestSchema]).safeParse(args);
      if (!parsed.success) throw new IpcRejection('PROTOCOL_BAD_MESSAGE', `bad export request: ${parsed.error.issues[0]?.message ?? 'does not match'}`);
      return parsed.data[0];
    }, (request, event) => options.dialogs.exportDocument(event.sender, request));

    ipcMain.on(IPC.engineConnect, (event, ...args) => {
      if (!this.checkSender(event, IPC.engineConnect)) return;
      if (!NoPayloadSchema.safeParse(args).success) {
        this.log(`[ipc] dropped ${IPC.engineConnect}: unexpected payload`);
        return;
      }
      this.connectEngine(event.sender);
    });

    this.disposeStatus = options.engine.onStatus((status) => {
      for (const contents of this.windows) if (!contents.isDestroyed()) contents.send(IPC.engineStatus, status);
    });
  }

  /** A window whose webContents may talk to main (its main frame, on app://longhand). */
  addWindow(contents: WebContents): void {
    this.windows.add(contents);
    contents.once('destroyed', () => {
      this.windows.delete(contents);
      const id = this.connections.get(contents);
      this.connections.delete(contents);
      if (id) this.options.engine.removeClient(id);
    });
  }

  /** The sender check, on its own (tested directly as well). */
  isTrustedSender(event: SenderEvent): { ok: true } | { ok: false; why: string } {
    const contents = event.sender;
    if (!this.windows.has(contents) || contents.isDestroyed()) return { ok: false, why: 'not a Longhand window' };
    const frame = event.senderFrame;
    if (!frame) return { ok: false, why: 'the frame is gone' };
    if (frame.parent !== null || frame !== contents.mainFrame) return { ok: false, why: 'a subframe' };
    if (!isAppUrl(frame.url)) return { ok: false, why: `origin ${safeOrigin(frame.url)}` };
    return { ok: true };
  }

  dispose(): void {
    this.disposeStatus();
    for (const channel of [IPC.appRequest, IPC.engineRestart, IPC.chooseModel, IPC.exportDocument]) this.options.ipcMain.removeHandler(channel);
    this.options.ipcMain.removeAllListeners(IPC.engineConnect);
  }

  // ── internals ──────────────────────────────────────────────────────────────────────────────

  private checkSender(event: SenderEvent, channel: string): boolean {
    const verdict = this.isTrustedSender(event);
    if (!verdict.ok) this.log(`[ipc] refused ${channel} from an unknown sender (${verdict.why})`);
    return verdict.ok;
  }

  private handle<T>(channel: string, parse: (args: unknown[]) => T, handler: (payload: T, event: IpcMainInvokeEvent) => Promise<unknown>): void {
    this.options.ipcMain.handle(channel, async (event, ...args): Promise<IpcResult<unknown>> => {
      if (!this.checkSender(event, channel)) return failure('IPC_FORBIDDEN', 'refused: the message did not come from a Longhand window');
      let payload: T;
      try {
        payload = parse(args);
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        this.log(`[ipc] rejected ${channel}: ${message}`);
        return failure('PROTOCOL_BAD_MESSAGE', message);
      }
      try {
        return { ok: true, value: await handler(payload, event) };
      } catch (error) {
        if (error instanceof LonghandError) return failure(error.code, error.message);
        const code = (error as { code?: unknown } | null)?.code;
        const message = error instanceof Error ? error.message : String(error);
        this.log(`[ipc] ${channel} failed: ${message}`);
        return failure(typeof code === 'string' ? code : 'INTERNAL', message);
      }
    });
  }

  /** Gives this page a fresh engine channel: one port to the renderer, the other relayed by the supervisor. */
  private connectEngine(contents: WebContents): void {
    const engine = this.options.engine;
    const previous = this.connections.get(contents);
    if (previous) engine.removeClient(previous);
    const id = `window-${contents.id}-${++this.sequence}`;
    this.connections.set(contents, id);
    const { port1, port2 } = this.options.createChannel();
    engine.addClient(id, (event) => port1.postMessage(event));
    const remote = this.options.remote?.open(
      (event) => port1.postMessage(event),
      (request) => engine.send(id, request),
    );
    port1.on('message', ({ data }) => {
      let request: EngineRequest;
      try {
        request = parseEngineRequest(data);
      } catch (error) {
        const requestId = typeof (data as { requestId?: unknown } | null)?.requestId === 'string' ? String((data as { requestId: string }).requestId).slice(0, 128) : '';
        const message = error instanceof Error ? error.message : String(error);
        this.log(`[ipc] rejected an engine request: ${message}`);
        port1.postMessage({ kind: 'error', requestId, error: { code: 'PROTOCOL_BAD_MESSAGE', message, details: {} } } satisfies EngineEvent);
        return;
      }
      if (remote) remote.handle(request);
      else engine.send(id, request);
    });
    port1.on('close', () => {
      remote?.close();
      if (this.connections.get(contents) === id) this.connections.delete(contents);
      engine.removeClient(id);
    });
    port1.start();
    contents.postMessage(IPC.enginePort, null, [port2 as MessagePortMain]);
    contents.send(IPC.engineStatus, engine.status);
  }
}

function noPayload(args: unknown[]): undefined {
  if (!NoPayloadSchema.safeParse(args).success) throw new IpcRejection('PROTOCOL_BAD_MESSAGE', 'this request takes no payload');
  return undefined;
}

function failure(code: string, message: string): IpcResult<never> {
  return { ok: false, error: { code, message } };
}

function safeOrigin(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '(unparseable)';
  }
}
