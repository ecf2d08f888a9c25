// Electron main process (supervisor). For now it opens one locked-down window that says
// which parts of Longhand work in this version; the engine host, the app:// protocol, the
// renderer and IPC arrive with the desktop-app issue. Security defaults are already fixed
// in one constant so nothing later can forget them.
import { app, BrowserWindow } from 'electron';
import { SECURE_WEB_PREFERENCES } from './security.ts';

const PLACEHOLDER_PAGE = `<!doctype html><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>Longhand</title>
<body style="font: 15px system-ui; margin: 3em; max-width: 40em">
<h1>Longhand</h1>
<p>The desktop window is not built yet in this version. Use the command line:
<code>npx longhand inspect &lt;model.gguf&gt;</code>.</p>
</body>`;

app.enableSandbox();
app.whenReady().then(() => {
  const window = new BrowserWindow({ width: 900, height: 640, webPreferences: SECURE_WEB_PREFERENCES });
  window.webContents.setWindowOpenHandler(() => ({ action: 'deny' }));
  window.webContents.on('will-navigate', (event) => event.preventDefault());
  void window.loadURL(`data:text/html;charset=utf-8,${encodeURIComponent(PLACEHOLDER_PAGE)}`);
});
app.on('window-all-closed', () => app.quit());
