// Electron main process: the supervisor of ARCHITECTURE.md §1. One window whose renderer is
// served from app://longhand (never file://), locked down by security.ts; one IPC manager that
// checks every message's sender and payload; the engine host in a utility process, watched by
// EngineSupervisor and connected to the window through MessagePorts:
//
//   renderer ──port──► main (IpcManager: parseEngineRequest) ──port──► engine host (utilityProcess)
//            ◄─────── (EngineSupervisor: tracks requests, relays events) ◄──────
//
// Main relays engine traffic (small messages: tokens, metrics) so that it validates every
// request, knows what was in flight when the host dies, and keeps the window's port across
// engine restarts.
import { app, BrowserWindow, dialog, ipcMain, Menu, MessageChannelMain, protocol, screen, session, shell, utilityProcess } from 'electron';
import type { AppRequest } from '../common/app-api.ts';
import { readRemoteSettings } from '../server/remote-engine.ts';
import { createAppServices, type AppServices } from '../server/services/app-services.ts';
import { engineEnv } from '../server/services/data-dir.ts';
import { APP_SCHEME_PRIVILEGES, createAppProtocolHandler } from './app-protocol.ts';
import { chooseModel, exportDocument } from './dialogs.ts';
import { EngineSupervisor, type HostProcess, type PortLike } from './engine-supervisor.ts';
import { APP_ENTRY_URL, APP_SCHEME, IPC, type MenuCommand } from './ipc-channels.ts';
import { IpcManager } from './ipc-manager.ts';
import { buildMenuTemplate } from './menu.ts';
import { RemoteRelay } from './remote-relay.ts';
import { appLayout, currentMainDir, ENGINE_SERVICE_NAME } from './paths.ts';
import { denyAllPermissions, hardenWebContents, SECURE_WEB_PREFERENCES } from './security.ts';
import { captureWindowState, loadWindowState, MIN_WINDOW_SIZE, saveWindowState } from './window-state.ts';

const layout = appLayout(currentMainDir());
const log = (message: string) => console.warn(message);

let mainWindow: BrowserWindow | undefined;
let supervisor: EngineSupervisor | undefined;
let ipc: IpcManager | undefined;

let appServices: AppServices | undefined;

/**
 * Answers the window's app requests (documents, settings, model library, downloads) with the
 * same services as browser mode, over the userData folder. models.inspect is not among them:
 * it needs app/engine, which main never imports, so it answers BAD_ARGUMENT (INSPECT_UNAVAILABLE).
 */
async function answerAppRequest(request: AppRequest): Promise<unknown> {
  return services().answer(request);
}

function services(): AppServices {
  appServices ??= createAppServices({ dataDir: app.getPath('userData') });
  return appServices;
}

// Before 'ready': the scheme must be privileged (standard + secure) to be a real origin.
protocol.registerSchemesAsPrivileged([APP_SCHEME_PRIVILEGES]);
app.enableSandbox();

// Every webContents, this window's and any other, gets the same lockdown.
app.on('web-contents-created', (_event, contents) => hardenWebContents(contents, shell, log));

if (!app.requestSingleInstanceLock()) {
  app.quit();
} else {
  app.on('second-instance', () => {
    if (!mainWindow) return;
    if (mainWindow.isMinimized()) mainWindow.restore();
    mainWindow.focus();
  });
  void app.whenReady().then(onReady);
}

function onReady(): void {
  const defaultSession = session.defaultSession;
  denyAllPermissions(defaultSession);
  defaultSession.protocol.handle(APP_SCHEME, createAppProtocolHandler(layout.renderer, log));

  const engine = new EngineSupervisor({
    // Document snapshots beside the autosaved documents (userData/kv-snapshots), for every (re)start.
    fork: () => utilityProcess.fork(layout.engineHost, [], { serviceName: ENGINE_SERVICE_NAME, stdio: 'inherit', env: engineEnv(app.getPath('userData')) }) as unknown as HostProcess,
    createChannel: () => new MessageChannelMain() as unknown as { port1: PortLike; port2: PortLike },
    log,
  });
  supervisor = engine;
  app.on('child-process-gone', (_event, details) => {
    if (details.type === 'Utility' && details.serviceName === ENGINE_SERVICE_NAME) engine.noteProcessGone(details);
  });

  ipc = new IpcManager({
    ipcMain,
    engine,
    appRequests: answerAppRequest,
    dialogs: {
      chooseModel: (contents) => chooseModel(dialog, BrowserWindow.fromWebContents(contents) ?? undefined),
      exportDocument: (contents, request) => exportDocument(dialog, BrowserWindow.fromWebContents(contents) ?? undefined, request, app.getPath('documents')),
    },
    createChannel: () => new MessageChannelMain() as unknown as { port1: PortLike; port2: unknown },
    // Settings → remote: the window's generations go to that endpoint (read before each one).
    remote: new RemoteRelay({ config: () => readRemoteSettings(services().settings.path), log }),
    log,
  });

  const sendMenuCommand = (command: MenuCommand) => mainWindow?.webContents.send(IPC.menuCommand, command);
  Menu.setApplicationMenu(
    Menu.buildFromTemplate(
      buildMenuTemplate({
        isPackaged: app.isPackaged,
        platform: process.platform,
        appName: app.getName(),
        actions: {
          openModel: () => {
            void chooseModel(dialog, mainWindow).then((path) => {
              if (path) sendMenuCommand({ command: 'open-model', path });
            });
          },
          newDocument: () => sendMenuCommand({ command: 'new-document' }),
          saveAs: () => sendMenuCommand({ command: 'save-as' }),
          quit: () => app.quit(),
        },
      }),
    ),
  );

  createWindow();
  engine.start();

  app.on('activate', () => {
    if (!mainWindow) createWindow();
  });
}

function createWindow(): void {
  const userData = app.getPath('userData');
  const state = loadWindowState(
    userData,
    screen.getAllDisplays().map((display) => display.workArea),
    log,
  );
  const window = new BrowserWindow({
    width: state.width,
    height: state.height,
    ...(state.x !== undefined && state.y !== undefined ? { x: state.x, y: state.y } : {}),
    minWidth: MIN_WINDOW_SIZE.width,
    minHeight: MIN_WINDOW_SIZE.height,
    show: false,
    title: 'Longhand',
    webPreferences: { ...SECURE_WEB_PREFERENCES, preload: layout.preload },
  });
  mainWindow = window;
  if (state.maximized) window.maximize();
  window.once('ready-to-show', () => window.show());
  ipc?.addWindow(window.webContents);

  // Remember size, position and maximised state (debounced while dragging, at once on close).
  let saveTimer: ReturnType<typeof setTimeout> | undefined;
  const save = () => {
    if (saveTimer) clearTimeout(saveTimer);
    saveTimer = undefined;
    if (window.isDestroyed() || window.isMinimized() || window.isFullScreen()) return;
    try {
      saveWindowState(userData, captureWindowState(window));
    } catch (error) {
      log(`[window-state] could not save: ${String(error)}`);
    }
  };
  const saveSoon = () => {
    if (saveTimer) clearTimeout(saveTimer);
    saveTimer = setTimeout(save, 500);
  };
  window.on('resize', saveSoon);
  window.on('move', saveSoon);
  window.on('maximize', saveSoon);
  window.on('unmaximize', saveSoon);
  window.on('close', save);
  window.on('closed', () => {
    if (saveTimer) clearTimeout(saveTimer);
    if (mainWindow === window) mainWindow = undefined;
  });

  window.webContents.on('render-process-gone', (_event, details) => {
    log(`[window] the renderer is gone: ${details.reason} (exit ${details.exitCode})`);
    if (details.reason !== 'clean-exit' && !window.isDestroyed()) window.reload();
  });

  void window.loadURL(APP_ENTRY_URL);
}

app.on('window-all-closed', () => {
  if (process.platform !== 'darwin') app.quit();
});
app.on('before-quit', () => {
  supervisor?.stop();
  void appServices?.close(); // pauses downloads; their .part files resume next time
});
