// The application menu. File: Open Model…, New Document, Save As…, Quit; Edit: the standard
// roles; View: reload and devtools only in development (never in a packaged build).
import type { MenuItemConstructorOptions } from 'electron';

export interface MenuActions {
  openModel(): void;
  newDocument(): void;
  saveAs(): void;
  quit(): void;
}

export function buildMenuTemplate(options: { isPackaged: boolean; platform: NodeJS.Platform; appName: string; actions: MenuActions }): MenuItemConstructorOptions[] {
  const { actions, isPackaged } = options;
  const mac = options.platform === 'darwin';
  const template: MenuItemConstructorOptions[] = [];
  if (mac) {
    template.push({
      label: options.appName,
      submenu: [{ role: 'about' }, { type: 'separator' }, { role: 'hide' }, { role: 'hideOthers' }, { role: 'unhide' }, { type: 'separator' }, { label: `Quit ${options.appName}`, accelerator: 'Cmd+Q', click: () => actions.quit() }],
    });
  }
  template.push({
    label: '&File',
    submenu: [
      { id: 'open-model', label: 'Open Model…', accelerator: 'CmdOrCtrl+O', click: () => actions.openModel() },
      { id: 'new-document', label: 'New Document', accelerator: 'CmdOrCtrl+N', click: () => actions.newDocument() },
      { id: 'save-as', label: 'Save As…', accelerator: 'CmdOrCtrl+Shift+S', click: () => actions.saveAs() },
      ...(mac ? [] : ([{ type: 'separator' }, { id: 'quit', label: 'Quit', accelerator: 'Ctrl+Q', click: () => actions.quit() }] satisfies MenuItemConstructorOptions[])),
    ],
  });
  template.push({
    label: '&Edit',
    submenu: [{ role: 'undo' }, { role: 'redo' }, { type: 'separator' }, { role: 'cut' }, { role: 'copy' }, { role: 'paste' }, { role: 'pasteAndMatchStyle' }, { role: 'delete' }, { role: 'selectAll' }],
  });
  const view: MenuItemConstructorOptions[] = [{ role: 'resetZoom' }, { role: 'zoomIn' }, { role: 'zoomOut' }, { type: 'separator' }, { role: 'togglefullscreen' }];
  if (!isPackaged) view.unshift({ role: 'reload' }, { role: 'forceReload' }, { role: 'toggleDevTools' }, { type: 'separator' });
  template.push({ label: '&View', submenu: view });
  template.push({ label: '&Window', role: 'windowMenu' });
  return template;
}
