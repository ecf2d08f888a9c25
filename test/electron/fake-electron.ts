// A small hand-written fake of the `electron` module, enough to run app/main and app/preload
// under Node: `vi.mock('electron', () => import('./fake-electron.ts'))`. Objects are event
// emitters that record what the code under test did; `resetFake()` starts a test clean.
import { EventEmitter } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// ── message ports ───────────────────────────────────────────────────────────────────────────

export class FakePort extends EventEmitter {
  other: FakePort | undefined;
  started = false;
  closed = false;
  private queue: Array<{ data: unknown; ports: FakePort[] }> = [];
  /** DOM-style handler (the preload's side). Setting it starts the port, as in a browser. */
  private domHandler: ((event: { data: unknown }) => void) | null = null;

  get onmessage(): ((event: { data: unknown }) => void) | null {
    return this.domHandler;
  }
  set onmessage(handler: ((event: { data: unknown }) => void) | null) {
    this.domHandler = handler;
    this.start();
  }

  postMessage(data: unknown, transfer: FakePort[] = []): void {
    if (this.closed || !this.other || this.other.closed) return;
    this.other.receive({ data: structuredClone(data), ports: transfer });
  }

  start(): void {
    this.started = true;
    const queued = this.queue.splice(0);
    for (const event of queued) this.dispatch(event);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.emit('close');
    const other = this.other;
    if (other && !other.closed) {
      other.closed = true;
      other.emit('close');
    }
  }

  private receive(event: { data: unknown; ports: FakePort[] }): void {
    if (!this.started) this.queue.push(event);
    else this.dispatch(event);
  }

  private dispatch(event: { data: unknown; ports: FakePort[] }): void {
    this.emit('message', event);
    this.domHandler?.(event);
  }
}

export class MessageChannelMain {
  readonly port1 = new FakePort();
  readonly port2 = new FakePort();
  constructor() {
    this.port1.other = this.port2;
    this.port2.other = this.port1;
    fake.channels.push(this);
  }
}

// ── frames, webContents, windows ────────────────────────────────────────────────────────────

export class FakeFrame {
  constructor(
    public url: string,
    public parent: FakeFrame | null = null,
  ) {}
  get origin(): string {
    return new URL(this.url).origin;
  }
}

let nextId = 1;

export class FakeWebContents extends EventEmitter {
  readonly id = nextId++;
  readonly mainFrame: FakeFrame;
  destroyed = false;
  windowOpenHandler: ((details: { url: string }) => { action: 'allow' | 'deny' }) | undefined;
  readonly sent: Array<{ channel: string; args: unknown[] }> = [];
  readonly posted: Array<{ channel: string; message: unknown; ports: FakePort[] }> = [];

  constructor(url = 'app://longhand/index.html') {
    super();
    this.mainFrame = new FakeFrame(url);
    fake.webContents.push(this);
    fake.app.emit('web-contents-created', {}, this);
  }

  isDestroyed(): boolean {
    return this.destroyed;
  }
  send(channel: string, ...args: unknown[]): void {
    this.sent.push({ channel, args });
  }
  postMessage(channel: string, message: unknown, ports: FakePort[] = []): void {
    this.posted.push({ channel, message, ports });
  }
  setWindowOpenHandler(handler: (details: { url: string }) => { action: 'allow' | 'deny' }): void {
    this.windowOpenHandler = handler;
  }
  destroy(): void {
    this.destroyed = true;
    this.emit('destroyed');
  }
  /** Emits a navigation-like event and says whether a listener prevented it. */
  fire(event: string, details: Record<string, unknown> = {}): boolean {
    let prevented = false;
    this.emit(event, { ...details, preventDefault: () => (prevented = true) });
    return prevented;
  }
}

export class BrowserWindow extends EventEmitter {
  static fromWebContents(contents: FakeWebContents): BrowserWindow | null {
    return fake.windows.find((window) => window.webContents === contents) ?? null;
  }
  readonly webContents: FakeWebContents;
  loadedUrl: string | undefined;
  maximized = false;
  bounds: { x: number; y: number; width: number; height: number };

  constructor(readonly options: Record<string, unknown>) {
    super();
    this.webContents = new FakeWebContents('about:blank');
    this.bounds = { x: Number(options.x ?? 10), y: Number(options.y ?? 10), width: Number(options.width ?? 800), height: Number(options.height ?? 600) };
    fake.windows.push(this);
  }
  loadURL(url: string): Promise<void> {
    this.loadedUrl = url;
    this.webContents.mainFrame.url = url;
    return Promise.resolve();
  }
  maximize(): void {
    this.maximized = true;
  }
  isMaximized(): boolean {
    return this.maximized;
  }
  isMinimized(): boolean {
    return false;
  }
  isFullScreen(): boolean {
    return false;
  }
  isDestroyed(): boolean {
    return false;
  }
  getNormalBounds() {
    return { ...this.bounds };
  }
  show(): void {}
  focus(): void {}
  restore(): void {}
  reload(): void {}
}

// ── ipc ─────────────────────────────────────────────────────────────────────────────────────

type Handler = (event: unknown, ...args: unknown[]) => unknown;

class FakeIpcMain extends EventEmitter {
  readonly handlers = new Map<string, Handler>();
  handle(channel: string, handler: Handler): void {
    if (this.handlers.has(channel)) throw new Error(`a handler for ${channel} is already registered`);
    this.handlers.set(channel, handler);
  }
  removeHandler(channel: string): void {
    this.handlers.delete(channel);
  }
  /** What ipcRenderer.invoke from `sender` (its `frame`) would get. */
  async invoke(channel: string, sender: FakeWebContents, frame: FakeFrame | null, ...args: unknown[]): Promise<unknown> {
    const handler = this.handlers.get(channel);
    if (!handler) throw new Error(`no handler for ${channel}`);
    return handler({ sender, senderFrame: frame }, ...args);
  }
  /** What ipcRenderer.send from `sender` would do. */
  sendFrom(channel: string, sender: FakeWebContents, frame: FakeFrame | null, ...args: unknown[]): void {
    this.emit(channel, { sender, senderFrame: frame }, ...args);
  }
}

class FakeIpcRenderer extends EventEmitter {
  readonly sent: Array<{ channel: string; args: unknown[] }> = [];
  readonly invoked: Array<{ channel: string; args: unknown[] }> = [];
  answer: (channel: string, args: unknown[]) => unknown = () => ({ ok: true, value: null });
  send(channel: string, ...args: unknown[]): void {
    this.sent.push({ channel, args });
  }
  invoke(channel: string, ...args: unknown[]): Promise<unknown> {
    this.invoked.push({ channel, args });
    return Promise.resolve(this.answer(channel, args));
  }
}

// ── utility process ─────────────────────────────────────────────────────────────────────────

export class FakeUtilityProcess extends EventEmitter {
  pid: number | undefined = 40_000 + fake.forks.length;
  readonly messages: Array<{ message: unknown; transfer: FakePort[] }> = [];
  killed = false;
  constructor(
    readonly modulePath: string,
    readonly args: string[],
    readonly options: Record<string, unknown>,
  ) {
    super();
  }
  postMessage(message: unknown, transfer: FakePort[] = []): void {
    this.messages.push({ message, transfer });
    fake.onHostMessage?.(this, message, transfer);
  }
  kill(): boolean {
    this.killed = true;
    queueMicrotask(() => this.exit(0));
    return true;
  }
  exit(code: number): void {
    this.pid = undefined;
    this.emit('exit', code);
  }
}

// ── the module's exports ────────────────────────────────────────────────────────────────────

class FakeApp extends EventEmitter {
  sandboxEnabled = false;
  isPackaged = false;
  quitCalled = false;
  userData = '';
  enableSandbox(): void {
    this.sandboxEnabled = true;
  }
  whenReady(): Promise<void> {
    return Promise.resolve();
  }
  getPath(name: string): string {
    if (name === 'userData') return this.userData;
    return join(this.userData, name);
  }
  getName(): string {
    return 'Longhand';
  }
  requestSingleInstanceLock(): boolean {
    return true;
  }
  quit(): void {
    this.quitCalled = true;
  }
}

type PermissionRequestHandler = (contents: unknown, permission: string, callback: (granted: boolean) => void, details?: unknown) => void;
type PermissionCheck = (...args: unknown[]) => boolean;

class FakeSession {
  permissionRequestHandler: PermissionRequestHandler | undefined;
  permissionCheckHandler: PermissionCheck | undefined;
  devicePermissionHandler: PermissionCheck | undefined;
  constructor(readonly protocol: unknown) {}
  setPermissionRequestHandler(handler: PermissionRequestHandler): void {
    this.permissionRequestHandler = handler;
  }
  setPermissionCheckHandler(handler: PermissionCheck): void {
    this.permissionCheckHandler = handler;
  }
  setDevicePermissionHandler(handler: PermissionCheck): void {
    this.devicePermissionHandler = handler;
  }
}

export const fake = {
  app: new FakeApp(),
  windows: [] as BrowserWindow[],
  webContents: [] as FakeWebContents[],
  channels: [] as MessageChannelMain[],
  forks: [] as FakeUtilityProcess[],
  privilegedSchemes: [] as unknown[],
  protocolHandlers: new Map<string, (request: Request) => Promise<Response> | Response>(),
  opened: [] as string[],
  menu: undefined as unknown,
  openDialogResult: { canceled: true, filePaths: [] as string[] },
  saveDialogResult: { canceled: true, filePath: '' },
  exposed: new Map<string, unknown>(),
  onHostMessage: undefined as undefined | ((child: FakeUtilityProcess, message: unknown, transfer: FakePort[]) => void),
};

export const app = fake.app;
export const ipcMain = new FakeIpcMain();
export const ipcRenderer = new FakeIpcRenderer();

export const protocol = {
  registerSchemesAsPrivileged(schemes: unknown[]): void {
    fake.privilegedSchemes.push(...schemes);
  },
  handle(scheme: string, handler: (request: Request) => Promise<Response> | Response): void {
    fake.protocolHandlers.set(scheme, handler);
  },
};

export const session = { defaultSession: new FakeSession(protocol) };

export const shell = {
  openExternal(url: string): Promise<void> {
    fake.opened.push(url);
    return Promise.resolve();
  },
};

export const utilityProcess = {
  fork(modulePath: string, args: string[] = [], options: Record<string, unknown> = {}): FakeUtilityProcess {
    const child = new FakeUtilityProcess(modulePath, args, options);
    fake.forks.push(child);
    return child;
  },
};

export const dialog = {
  showOpenDialog: (..._args: unknown[]) => Promise.resolve(fake.openDialogResult),
  showSaveDialog: (..._args: unknown[]) => Promise.resolve(fake.saveDialogResult),
};

export const Menu = {
  buildFromTemplate: (template: unknown) => ({ template }),
  setApplicationMenu: (menu: unknown) => void (fake.menu = menu),
};

export const screen = {
  getAllDisplays: () => [{ workArea: { x: 0, y: 0, width: 1920, height: 1080 } }],
};

export const contextBridge = {
  exposeInMainWorld(key: string, api: unknown): void {
    fake.exposed.set(key, api);
  },
};

/** Starts a test clean: new temp userData, nothing recorded. */
export function resetFake(): void {
  fake.app.removeAllListeners();
  fake.app.userData = mkdtempSync(join(tmpdir(), 'longhand-userdata-'));
  fake.app.isPackaged = false;
  fake.windows.length = 0;
  fake.webContents.length = 0;
  fake.channels.length = 0;
  fake.forks.length = 0;
  fake.privilegedSchemes.length = 0;
  fake.protocolHandlers.clear();
  fake.opened.length = 0;
  fake.menu = undefined;
  fake.exposed.clear();
  fake.onHostMessage = undefined;
  ipcMain.removeAllListeners();
  ipcMain.handlers.clear();
  ipcRenderer.removeAllListeners();
  ipcRenderer.sent.length = 0;
  ipcRenderer.invoked.length = 0;
}
resetFake();

export default { app, BrowserWindow, MessageChannelMain, ipcMain, ipcRenderer, protocol, session, shell, utilityProcess, dialog, Menu, screen, contextBridge };
