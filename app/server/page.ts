// GET / and the renderer's static files. When the renderer has been built
// (renderer/dist/index.html) it is served from there; otherwise (only when this copy cannot build
// it: renderer-build.ts) a small honest page says so and what to run.
// Everything goes out with a strict CSP, no referrer (the page URL may carry the token) and no caching.
import { existsSync, readFileSync, statSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { dirname, extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export const RENDERER_DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'renderer', 'dist');

export const PAGE_HEADERS: Record<string, string> = {
  'Content-Security-Policy': "default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'",
  'Referrer-Policy': 'no-referrer',
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Cache-Control': 'no-store',
};

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.map': 'application/json; charset=utf-8',
};

const FALLBACK_PAGE = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Longhand</title></head>
<body>
<h1>Longhand</h1>
<p>Longhand browser mode — the window UI is not built yet; the API is at /v1
(GET /v1/models, POST /v1/completions, POST /v1/chat/completions; metrics at /metrics).</p>
<p>To build it, run <code>npm ci</code> (it installs vite, a dev dependency), then <code>npm run build:renderer</code>, and start again
(<code>npm start</code> or <code>longhand serve</code> build it themselves whenever vite is installed).</p>
<p>API clients send the header Authorization: Bearer &lt;token&gt;, with the token from the URL that longhand serve printed.</p>
</body>
</html>
`;

/** Sends the page; `extraHeaders` carries the session cookie on the first visit. */
export function sendPage(res: ServerResponse, extraHeaders: Record<string, string>, dist = RENDERER_DIST): void {
  const index = join(dist, 'index.html');
  const body = existsSync(index) ? readFileSync(index) : Buffer.from(FALLBACK_PAGE);
  res.writeHead(200, { ...PAGE_HEADERS, 'Content-Type': TYPES['.html']!, 'Content-Length': body.length, ...extraHeaders });
  res.end(body);
}

/** A file under renderer/dist for `pathname`, or undefined (no such file, or outside the folder). */
export function staticFile(pathname: string, dist = RENDERER_DIST): { body: Buffer; type: string } | undefined {
  let decoded: string;
  try {
    decoded = decodeURIComponent(pathname);
  } catch {
    return undefined;
  }
  if (decoded.includes('\0')) return undefined;
  const path = normalize(join(dist, decoded));
  if (!path.startsWith(dist + sep)) return undefined;
  if (!existsSync(path) || !statSync(path).isFile()) return undefined;
  return { body: readFileSync(path), type: TYPES[extname(path).toLowerCase()] ?? 'application/octet-stream' };
}
