// The renderer's origin: app://longhand/ serves the built renderer (renderer/dist) and nothing
// else. Never file://: a custom standard + secure scheme gives the page a real origin for the
// CSP, and this handler decides exactly which bytes it can load.
import { readFile, realpath, stat } from 'node:fs/promises';
import { extname, isAbsolute, relative, resolve, sep } from 'node:path';
import { APP_HOST, APP_SCHEME } from './ipc-channels.ts';
import { CONTENT_SECURITY_POLICY } from './security.ts';

/** For protocol.registerSchemesAsPrivileged, before the app is ready. */
export const APP_SCHEME_PRIVILEGES = Object.freeze({
  scheme: APP_SCHEME,
  privileges: { standard: true, secure: true, supportFetchAPI: true, codeCache: true, stream: true },
});

const MIME_TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.ico': 'image/x-icon',
  '.woff': 'font/woff',
  '.woff2': 'font/woff2',
  '.ttf': 'font/ttf',
  '.otf': 'font/otf',
  '.wasm': 'application/wasm',
  '.pdf': 'application/pdf',
  '.bcmap': 'application/octet-stream', // pdf.js character maps
  '.pfb': 'application/octet-stream', // pdf.js standard fonts
};

export function mimeTypeOf(path: string): string {
  return MIME_TYPES[extname(path).toLowerCase()] ?? 'application/octet-stream';
}

/** Headers on every app:// response, errors included. */
export function securityHeaders(contentType: string): Record<string, string> {
  return {
    'Content-Type': contentType,
    'Content-Security-Policy': CONTENT_SECURITY_POLICY,
    'X-Content-Type-Options': 'nosniff',
    'Cross-Origin-Opener-Policy': 'same-origin',
    'Cross-Origin-Resource-Policy': 'same-origin',
    'Referrer-Policy': 'no-referrer',
    'Cache-Control': 'no-cache',
  };
}

function errorResponse(status: number, text: string): Response {
  return new Response(`${status} ${text}`, { status, headers: securityHeaders('text/plain; charset=utf-8') });
}

/**
 * Maps an app:// URL to a file under `root`, or says why not. Refuses other hosts, bad percent
 * encodings, NUL bytes, backslashes and anything that resolves outside `root` (`..` in any
 * encoding). `/` is index.html.
 */
export function resolveAppPath(root: string, url: string): { path: string } | { status: number; reason: string } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { status: 400, reason: 'bad URL' };
  }
  if (parsed.protocol !== `${APP_SCHEME}:` || parsed.host !== APP_HOST) return { status: 404, reason: 'unknown host' };
  let pathname: string;
  try {
    pathname = decodeURIComponent(parsed.pathname);
  } catch {
    return { status: 400, reason: 'bad percent-encoding' };
  }
  if (pathname.includes('\0') || pathname.includes('\\')) return { status: 400, reason: 'bad character in path' };
  if (pathname.split('/').some((segment) => segment === '..')) return { status: 403, reason: 'path traversal' };
  if (pathname === '/' || pathname === '') pathname = '/index.html';
  const base = resolve(root);
  const path = resolve(base, `.${pathname}`);
  const inside = relative(base, path);
  if (inside === '' || inside.startsWith(`..${sep}`) || inside === '..' || isAbsolute(inside)) return { status: 403, reason: 'path traversal' };
  return { path };
}

/**
 * The handler for protocol.handle('app', …). `root` is the built renderer folder. GET and HEAD
 * only; symlinks may not lead out of `root`; every response carries the CSP.
 */
export function createAppProtocolHandler(root: string, log: (message: string) => void = console.warn): (request: Request) => Promise<Response> {
  let realRoot: Promise<string> | undefined;
  return async (request) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') return errorResponse(405, 'Method Not Allowed');
    const target = resolveAppPath(root, request.url);
    if ('status' in target) {
      if (target.status === 403 || target.status === 400) log(`[app://] refused ${request.url}: ${target.reason}`);
      return errorResponse(target.status, target.reason);
    }
    try {
      // the root first: a pending realpath(root) left behind by a failing realpath(target) would
      // reject with nobody awaiting it (seen when renderer/dist did not exist yet)
      const rootReal = await (realRoot ??= realpath(root));
      const real = await realpath(target.path);
      const inside = relative(rootReal, real);
      if (inside.startsWith('..') || isAbsolute(inside)) {
        log(`[app://] refused ${request.url}: a link that leads outside the renderer folder`);
        return errorResponse(403, 'path traversal');
      }
      if (!(await stat(real)).isFile()) return errorResponse(404, 'Not Found');
      const body = request.method === 'HEAD' ? null : await readFile(real);
      return new Response(body, { status: 200, headers: securityHeaders(mimeTypeOf(real)) });
    } catch {
      realRoot = undefined; // the folder may appear later (a renderer build finishing)
      return errorResponse(404, 'Not Found');
    }
  };
}
