// app://longhand serves renderer/dist and nothing else, with the CSP on every response.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP_SCHEME_PRIVILEGES, createAppProtocolHandler, resolveAppPath } from '../../app/main/app-protocol.ts';
import { CONTENT_SECURITY_POLICY } from '../../app/main/security.ts';

let base: string;
let root: string;
let handler: (request: Request) => Promise<Response>;
const refused: string[] = [];

beforeAll(() => {
  base = mkdtempSync(join(tmpdir(), 'longhand-app-protocol-'));
  root = join(base, 'renderer', 'dist');
  mkdirSync(join(root, 'assets'), { recursive: true });
  writeFileSync(join(root, 'index.html'), '<!doctype html><title>Longhand</title>');
  writeFileSync(join(root, 'assets', 'app.js'), 'console.log(1)');
  writeFileSync(join(root, 'assets', 'app.css'), 'body{}');
  writeFileSync(join(root, 'assets', 'logo.svg'), '<svg/>');
  writeFileSync(join(root, 'assets', 'pdf.worker.mjs'), '');
  writeFileSync(join(root, 'assets', 'ort.wasm'), '');
  writeFileSync(join(base, 'secret.txt'), 'secret');
  symlinkSync(join(base, 'secret.txt'), join(root, 'assets', 'link.txt'));
  handler = createAppProtocolHandler(root, (message) => refused.push(message));
});
afterAll(() => rmSync(base, { recursive: true, force: true }));

const get = (url: string, method = 'GET') => handler(new Request(url, { method }));

describe('app:// handler', () => {
  it('is registered as a standard, secure scheme', () => {
    expect(APP_SCHEME_PRIVILEGES).toMatchObject({ scheme: 'app', privileges: { standard: true, secure: true } });
  });

  it.each([
    ['app://longhand/', 'text/html; charset=utf-8'],
    ['app://longhand/index.html', 'text/html; charset=utf-8'],
    ['app://longhand/assets/app.js', 'text/javascript; charset=utf-8'],
    ['app://longhand/assets/app.css', 'text/css; charset=utf-8'],
    ['app://longhand/assets/logo.svg', 'image/svg+xml'],
    ['app://longhand/assets/pdf.worker.mjs', 'text/javascript; charset=utf-8'],
    ['app://longhand/assets/ort.wasm', 'application/wasm'],
  ])('serves %s as %s with the CSP', async (url, type) => {
    const response = await get(url);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe(type);
    expect(response.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
    expect(response.headers.get('x-content-type-options')).toBe('nosniff');
  });

  it.each([
    'app://longhand/../../etc/passwd',
    'app://longhand/%2e%2e/%2e%2e/etc/passwd',
    'app://longhand/..%2f..%2f..%2fsecret.txt',
    'app://longhand/assets/..%2f..%2f..%2fsecret.txt',
    'app://longhand/%2E%2E%2F%2E%2E%2Fsecret.txt',
    'app://longhand/..%5c..%5csecret.txt',
    'app://longhand/%252e%252e/%252e%252e/secret.txt',
    'app://longhand/assets/link.txt',
    'app://longhand/index.html%00.js',
    'app://longhand/%E0%A4%A',
    'app://evil/index.html',
  ])('refuses %s without leaking the file, still with the CSP', async (url) => {
    const response = await get(url);
    expect(response.status).toBeGreaterThanOrEqual(400);
    expect(await response.text()).not.toContain('secret');
    expect(response.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
  });

  it('answers a missing file with 404 and other methods with 405', async () => {
    expect((await get('app://longhand/nope.js')).status).toBe(404);
    expect((await get('app://longhand/assets')).status).toBe(404);
    expect((await get('app://longhand/index.html', 'POST')).status).toBe(405);
    expect((await get('app://longhand/index.html', 'HEAD')).status).toBe(200);
  });

  it('resolves paths only inside the root', () => {
    expect(resolveAppPath(root, 'app://longhand/a/b.js')).toEqual({ path: join(root, 'a', 'b.js') });
    expect(resolveAppPath(root, 'app://longhand/a/..%2f..%2f..%2fx')).toMatchObject({ status: 403 });
    expect(resolveAppPath(root, 'app://longhand/a%5c..%5c..%5cx')).toMatchObject({ status: 400 });
  });
});
