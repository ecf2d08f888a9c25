// Electron's security checklist in one place (STYLE.md "Security defaults"): the web
// preferences every window gets, the renderer's CSP, permission denial, navigation and
// window-open lockdown, and the one path to open an external link.
import type { Session, Shell, WebContents } from 'electron';
import { APP_HOST, APP_SCHEME } from './ipc-channels.ts';

// Every window is created with these (plus its preload path). Nothing may override them.
export const SECURE_WEB_PREFERENCES = Object.freeze({
  contextIsolation: true,
  sandbox: true,
  nodeIntegration: false,
  nodeIntegrationInWorker: false,
  nodeIntegrationInSubFrames: false,
  webSecurity: true,
  allowRunningInsecureContent: false,
  experimentalFeatures: false,
  webviewTag: false,
  navigateOnDragDrop: false,
  safeDialogs: true,
  spellcheck: false,
});

/** Sent as a response header on every app:// response (never a <meta> tag the page could drop). */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** Hosts whose https pages a link in the window may open in the user's browser. */
export const EXTERNAL_HOST_ALLOWLIST: readonly string[] = Object.freeze([
  'huggingface.co',
  'github.com',
  'arxiv.org',
  'lmstudio.ai',
  'ollama.com',
  'electronjs.org',
]);

/** True when `url` is the app's own origin (app://longhand/...). */
export function isAppUrl(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.protocol === `${APP_SCHEME}:` && parsed.host === APP_HOST;
  } catch {
    return false;
  }
}

/**
 * The one check for external links: https only, no credentials, default port, and a host on
 * the allowlist (or a subdomain of one). Everything else is refused.
 */
export function isAllowedExternalUrl(url: string, allowlist: readonly string[] = EXTERNAL_HOST_ALLOWLIST): boolean {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return false;
  }
  if (parsed.protocol !== 'https:') return false;
  if (parsed.username !== '' || parsed.password !== '') return false;
  if (parsed.port !== '') return false;
  const host = parsed.hostname.toLowerCase().replace(/\.$/, '');
  return allowlist.some((allowed) => host === allowed || host.endsWith(`.${allowed}`));
}

/** Opens `url` in the user's browser when the check passes; returns whether it did. */
export function openExternalSafely(shell: Pick<Shell, 'openExternal'>, url: string, log: (message: string) => void = console.warn): boolean {
  if (!isAllowedExternalUrl(url)) {
    log(`[security] refused to open an external link: ${truncate(url)}`);
    return false;
  }
  void shell.openExternal(url).catch((error: unknown) => log(`[security] could not open ${truncate(url)}: ${String(error)}`));
  return true;
}

/** Denies every permission request and check (camera, notifications, clipboard-read, …). */
export function denyAllPermissions(session: Pick<Session, 'setPermissionRequestHandler' | 'setPermissionCheckHandler' | 'setDevicePermissionHandler'>): void {
  session.setPermissionRequestHandler((_webContents, _permission, callback) => callback(false));
  session.setPermissionCheckHandler(() => false);
  session.setDevicePermissionHandler(() => false);
}

/**
 * Locks down one webContents: no navigation or redirect away from the page it loaded (links to
 * allowed https sites go to the browser instead), no new windows, no <webview>.
 */
export function hardenWebContents(contents: WebContents, shell: Pick<Shell, 'openExternal'>, log: (message: string) => void = console.warn): void {
  const block = (kind: string) => (event: { preventDefault(): void; url: string }) => {
    event.preventDefault();
    if (!openExternalSafely(shell, event.url, () => undefined)) log(`[security] blocked ${kind} to ${truncate(event.url)}`);
  };
  contents.on('will-navigate', block('navigation'));
  contents.on('will-frame-navigate', (event) => {
    // Subframes (none are expected) may not navigate anywhere; the main frame is handled above.
    if (!event.isMainFrame) {
      event.preventDefault();
      log(`[security] blocked subframe navigation to ${truncate(event.url)}`);
    }
  });
  contents.on('will-redirect', (event) => {
    event.preventDefault();
    log(`[security] blocked redirect to ${truncate(event.url)}`);
  });
  contents.setWindowOpenHandler(({ url }) => {
    openExternalSafely(shell, url, log);
    return { action: 'deny' };
  });
  contents.on('will-attach-webview', (event) => {
    event.preventDefault();
    log('[security] blocked a <webview>');
  });
}

function truncate(url: string): string {
  return url.length > 200 ? `${url.slice(0, 200)}…` : url;
}
