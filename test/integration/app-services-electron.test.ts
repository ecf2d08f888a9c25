// The desktop carrier of the app requests: app/main/index.ts (under the fake electron module)
// answers IPC app requests with the same services as browser mode, over userData.
// models.inspect is the one kind main cannot answer (it never imports app/engine): BAD_ARGUMENT.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { SettingsSchema } from '../../app/common/app-api.ts';
import { IPC } from '../../app/main/ipc-channels.ts';
import { INSPECT_UNAVAILABLE } from '../../app/server/services/app-services.ts';
import type { BrowserWindow } from '../electron/fake-electron.ts';
import { fake, ipcMain, resetFake } from '../electron/fake-electron.ts';

vi.mock('electron', () => import('../electron/fake-electron.ts'));

let window: BrowserWindow;
const ask = (request: unknown) => ipcMain.invoke(IPC.appRequest, window.webContents, window.webContents.mainFrame, request);

beforeAll(async () => {
  resetFake();
  await import('../../app/main/index.ts');
  await new Promise((resolve) => setTimeout(resolve, 0)); // whenReady().then(onReady)
  window = fake.windows[0]!;
});

describe('Electron main answers app requests with the shared services', () => {
  it('documents and settings live in userData', async () => {
    const doc = { id: 'desk-1', title: 'Desk', text: 'three little words', updatedAt: 42 };
    expect(await ask({ kind: 'documents.save', document: doc })).toEqual({ ok: true, value: { updatedAt: 42 } });
    expect(existsSync(join(fake.app.userData, 'documents', 'desk-1.json'))).toBe(true);
    expect(await ask({ kind: 'documents.list' })).toEqual({ ok: true, value: [{ id: 'desk-1', title: 'Desk', updatedAt: 42, words: 3 }] });
    expect(await ask({ kind: 'documents.get', id: 'desk-1' })).toEqual({ ok: true, value: doc });
    expect(await ask({ kind: 'documents.get', id: 'gone' })).toEqual({ ok: false, error: { code: 'BAD_ARGUMENT', message: expect.stringContaining('gone') } });
    expect(await ask({ kind: 'settings.get' })).toEqual({ ok: true, value: { settings: SettingsSchema.parse({}), warning: null } });
    expect(await ask({ kind: 'downloads.list' })).toEqual({ ok: true, value: [] });
  });

  it('models.inspect answers BAD_ARGUMENT: inspect runs in browser mode or the CLI', async () => {
    expect(await ask({ kind: 'models.inspect', path: '/m.gguf' })).toEqual({ ok: false, error: { code: 'BAD_ARGUMENT', message: INSPECT_UNAVAILABLE } });
  });

  it('a malformed request never reaches the services', async () => {
    expect(await ask({ kind: 'documents.get', id: '../x' })).toMatchObject({ ok: false, error: { code: 'PROTOCOL_BAD_MESSAGE' } });
  });
});
