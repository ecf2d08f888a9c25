// Navigation, new windows, external links and permissions are locked down (app/main/security.ts).
import type { Session, WebContents } from 'electron';
import { beforeEach, describe, expect, it } from 'vitest';
import { CONTENT_SECURITY_POLICY, denyAllPermissions, hardenWebContents, isAllowedExternalUrl, openExternalSafely, SECURE_WEB_PREFERENCES } from '../../app/main/security.ts';
import { FakeWebContents, resetFake, session, shell, fake } from './fake-electron.ts';

beforeEach(() => resetFake());
const quiet = () => undefined;

describe('isAllowedExternalUrl / openExternalSafely', () => {
  it.each([
    'https://huggingface.co/TheBloke',
    'https://www.github.com/ggml-org/llama.cpp',
    'https://arxiv.org/abs/2406.19707',
  ])('allows %s', (url) => expect(isAllowedExternalUrl(url)).toBe(true));

  it.each([
    ['http: (not https)', 'http://huggingface.co/'],
    ['file:', 'file:///etc/passwd'],
    ['javascript:', 'javascript:alert(1)'],
    ['data:', 'data:text/html,<script>alert(1)</script>'],
    ['a host not on the allowlist', 'https://evil.example/'],
    ['a look-alike host', 'https://huggingface.co.evil.example/'],
    ['a suffix that is not a subdomain', 'https://nothuggingface.co/'],
    ['credentials in the URL', 'https://user:pw@huggingface.co/'],
    ['a non-default port', 'https://huggingface.co:8443/'],
    ['app: itself', 'app://longhand/index.html'],
    ['garbage', 'not a url'],
  ])('refuses %s', (_why, url) => {
    expect(isAllowedExternalUrl(url)).toBe(false);
    expect(openExternalSafely(shell, url, quiet)).toBe(false);
    expect(fake.opened).toEqual([]);
  });

  it('opens an allowed link through shell.openExternal', () => {
    expect(openExternalSafely(shell, 'https://huggingface.co/x', quiet)).toBe(true);
    expect(fake.opened).toEqual(['https://huggingface.co/x']);
  });
});

describe('hardenWebContents', () => {
  const harden = () => {
    const contents = new FakeWebContents();
    hardenWebContents(contents as unknown as WebContents, shell, quiet);
    return contents;
  };

  it('blocks navigation, even to the app origin, and opens only allowed https links outside', () => {
    const contents = harden();
    expect(contents.fire('will-navigate', { url: 'https://evil.example/' })).toBe(true);
    expect(contents.fire('will-navigate', { url: 'file:///etc/passwd' })).toBe(true);
    expect(contents.fire('will-navigate', { url: 'app://longhand/other.html' })).toBe(true);
    expect(contents.fire('will-navigate', { url: 'https://huggingface.co/model' })).toBe(true);
    expect(fake.opened).toEqual(['https://huggingface.co/model']);
  });

  it('blocks redirects, subframe navigation and <webview>', () => {
    const contents = harden();
    expect(contents.fire('will-redirect', { url: 'https://evil.example/' })).toBe(true);
    expect(contents.fire('will-frame-navigate', { url: 'https://evil.example/', isMainFrame: false })).toBe(true);
    expect(contents.fire('will-attach-webview', {})).toBe(true);
  });

  it('denies every new window', () => {
    const contents = harden();
    expect(contents.windowOpenHandler?.({ url: 'https://evil.example/' })).toEqual({ action: 'deny' });
    expect(contents.windowOpenHandler?.({ url: 'app://longhand/index.html' })).toEqual({ action: 'deny' });
    expect(contents.windowOpenHandler?.({ url: 'https://github.com/' })).toEqual({ action: 'deny' });
    expect(fake.opened).toEqual(['https://github.com/']);
  });
});

describe('permissions and preferences', () => {
  it('denies every permission request and check', () => {
    const s = session.defaultSession;
    denyAllPermissions(s as unknown as Session);
    for (const permission of ['media', 'notifications', 'geolocation', 'clipboard-read', 'openExternal', 'fullscreen']) {
      let granted: boolean | undefined;
      s.permissionRequestHandler?.({}, permission, (value: boolean) => (granted = value));
      expect(granted, permission).toBe(false);
      expect(s.permissionCheckHandler?.({}, permission, 'app://longhand', {})).toBe(false);
    }
    expect(s.devicePermissionHandler?.({})).toBe(false);
  });

  it('sets the security-relevant web preferences explicitly', () => {
    expect(SECURE_WEB_PREFERENCES).toMatchObject({ contextIsolation: true, sandbox: true, nodeIntegration: false, nodeIntegrationInWorker: false, nodeIntegrationInSubFrames: false, webSecurity: true, allowRunningInsecureContent: false, webviewTag: false });
    expect(Object.isFrozen(SECURE_WEB_PREFERENCES)).toBe(true);
    expect(CONTENT_SECURITY_POLICY).toBe("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'");
  });
});
