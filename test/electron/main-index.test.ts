// app/main/index.ts wired against the fake electron module: the whole start-up, end to end.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SNAPSHOT_DIR_ENV } from '../../app/common/protocol.ts';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { IPC } from '../../app/main/ipc-channels.ts';
import { CONTENT_SECURITY_POLICY, SECURE_WEB_PREFERENCES } from '../../app/main/security.ts';
import { windowStatePath } from '../../app/main/window-state.ts';
import type { BrowserWindow} from './fake-electron.ts';
import { FakeWebContents, fake, ipcMain, resetFake, session } from './fake-electron.ts';

vi.mock('electron', () => import('./fake-electron.ts'));

let window: BrowserWindow;

beforeAll(async () => {
  resetFake();
  fake.onHostMessage = (child, message, transfer) => {
    const port = transfer[0];
    if ((message as { kind?: string }).kind !== 'connect' || !port) return;
    port.start();
    port.postMessage({ kind: 'ready', protocol: 1, pid: child.pid });
  };
  await import('../../app/main/index.ts');
  await new Promise((resolve) => setTimeout(resolve, 0)); // whenReady().then(onReady)
  window = fake.windows[0]!;
});

describe('Electron main start-up', () => {
  it('registers app:// as privileged before ready and enables the sandbox', () => {
    expect(fake.privilegedSchemes).toEqual([expect.objectContaining({ scheme: 'app', privileges: expect.objectContaining({ standard: true, secure: true }) })]);
    expect(fake.app.sandboxEnabled).toBe(true);
  });

  it('serves the renderer through app:// with the CSP', async () => {
    const handler = fake.protocolHandlers.get('app')!;
    const response = await handler(new Request('app://longhand/../../etc/passwd'));
    expect(response.status).toBeGreaterThanOrEqual(400);
    expect(response.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
  });

  it('denies permissions on the default session', () => {
    let granted: boolean | undefined;
    session.defaultSession.permissionRequestHandler?.({}, 'media', (value: boolean) => (granted = value));
    expect(granted).toBe(false);
  });

  it('opens one window with the locked-down preferences and the preload, on app://longhand', () => {
    expect(fake.windows).toHaveLength(1);
    const prefs = window.options.webPreferences as Record<string, unknown>;
    expect(prefs).toMatchObject(SECURE_WEB_PREFERENCES);
    expect(String(prefs.preload)).toMatch(/out[\\/]preload[\\/]index\.cjs$/);
    expect(window.loadedUrl).toBe('app://longhand/index.html');
  });

  it('starts the engine host in a named utility process and reports ready', () => {
    expect(fake.forks).toHaveLength(1);
    expect(fake.forks[0]!.modulePath).toMatch(/out[\\/]engine[\\/]host\.mjs$/);
    expect(fake.forks[0]!.options).toMatchObject({ serviceName: 'Longhand engine' });
  });

  it('names the document snapshot folder for the host: kv-snapshots beside the documents in userData', () => {
    const env = fake.forks[0]!.options.env as Record<string, string | undefined>;
    expect(env[SNAPSHOT_DIR_ENV]).toBe(join(fake.app.getPath('userData'), 'kv-snapshots'));
    // The rest of the environment is passed on.
    expect(env.PATH).toBe(process.env.PATH);
  });

  it('hands the window an engine port on request, and its status', () => {
    ipcMain.sendFrom(IPC.engineConnect, window.webContents, window.webContents.mainFrame);
    expect(window.webContents.posted.map((p) => p.channel)).toEqual([IPC.enginePort]);
    expect(window.webContents.sent).toContainEqual({ channel: IPC.engineStatus, args: [{ state: 'ready', pid: fake.forks[0]!.pid }] });
  });

  it('reports the host reason from child-process-gone', async () => {
    fake.app.emit('child-process-gone', {}, { type: 'Utility', serviceName: 'Longhand engine', reason: 'oom', exitCode: 0 });
    fake.forks[0]!.exit(0);
    expect(window.webContents.sent.at(-1)).toEqual({ channel: IPC.engineStatus, args: [expect.objectContaining({ state: 'crashed', reason: 'oom', willRestart: false })] });
  });

  it('registers a handler for every invoke channel', () => {
    expect([...ipcMain.handlers.keys()].sort()).toEqual([IPC.appRequest, IPC.chooseModel, IPC.engineRestart, IPC.exportDocument].sort());
  });

  it('hardens any other webContents that appears', () => {
    const stray = new FakeWebContents('app://longhand/index.html');
    expect(stray.fire('will-navigate', { url: 'https://evil.example/' })).toBe(true);
    expect(stray.windowOpenHandler?.({ url: 'https://evil.example/' })).toEqual({ action: 'deny' });
  });

  it('builds the menu: File with Open Model, New Document, Save As, Quit; devtools when not packaged', () => {
    const template = (fake.menu as { template: Array<{ label?: string; submenu?: Array<{ label?: string; role?: string }> }> }).template;
    const file = template.find((item) => item.label === '&File')!;
    expect(file.submenu!.map((item) => item.label).filter(Boolean)).toEqual(['Open Model…', 'New Document', 'Save As…', 'Quit']);
    const view = template.find((item) => item.label === '&View')!;
    expect(view.submenu!.map((item) => item.role)).toContain('toggleDevTools');
  });

  it('remembers the window state in userData when the window closes', () => {
    window.bounds = { x: 30, y: 40, width: 1111, height: 777 };
    window.emit('close');
    expect(JSON.parse(readFileSync(windowStatePath(fake.app.userData), 'utf8'))).toEqual({ width: 1111, height: 777, x: 30, y: 40, maximized: false });
  });
});
