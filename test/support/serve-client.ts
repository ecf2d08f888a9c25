// Helpers for tests that run the real `longhand serve`: its first stdout line (the URL with the
// run's token), a minimal WebSocket client for /ws, and the reference text they compare with.
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { loadReferenceRuns } from './models.ts';

/** llama.cpp's first `n` greedy pieces for "Once upon a time", as text. */
export function referenceText(n: number): string {
  const run = loadReferenceRuns().find((r) => r.prompt === 'Once upon a time')!;
  return run.generatedPieces.slice(0, n).join('').replaceAll('\u2581', ' ');
}

/** The first line `longhand serve` prints: the URL with the token. */
export function firstLine(child: ChildProcessWithoutNullStreams, timeoutMs = 90_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`no URL line after ${timeoutMs} ms; stderr: ${err}`)), timeoutMs);
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const newline = out.indexOf('\n');
      if (newline >= 0) {
        clearTimeout(timer);
        resolve(out.slice(0, newline).trim());
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code} before printing a URL; stderr: ${err}`));
    });
  });
}

/** A minimal WebSocket client: handshake, masked text frames out, unmasked frames in. */
export async function wsConnect(port: number, headers: Record<string, string>): Promise<{ status: number; send: (value: unknown) => void; next: () => Promise<string>; socket: Socket }> {
  const socket = connect({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const key = randomBytes(16).toString('base64');
  const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  socket.write(`GET /ws HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n${extra}\r\n`);
  let buffer = Buffer.alloc(0);
  let status = 0;
  const messages: string[] = [];
  const waiters: ((text: string) => void)[] = [];
  const status$ = new Promise<number>((resolve) => {
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      if (status === 0) {
        const end = buffer.indexOf('\r\n\r\n');
        if (end < 0) return;
        status = Number(/^HTTP\/1\.1 (\d+)/.exec(buffer.subarray(0, end).toString())![1]);
        buffer = buffer.subarray(end + 4);
        resolve(status);
      }
      while (buffer.length >= 2) {
        let length = buffer[1]! & 0x7f;
        let offset = 2;
        if (length === 126) {
          if (buffer.length < 4) return;
          length = buffer.readUInt16BE(2);
          offset = 4;
        } else if (length === 127) {
          if (buffer.length < 10) return;
          length = Number(buffer.readBigUInt64BE(2));
          offset = 10;
        }
        if (buffer.length < offset + length) return;
        const opcode = buffer[0]! & 0x0f;
        const text = buffer.subarray(offset, offset + length).toString('utf8');
        buffer = buffer.subarray(offset + length);
        if (opcode !== 1) continue;
        const waiter = waiters.shift();
        if (waiter) waiter(text);
        else messages.push(text);
      }
    });
    socket.once('close', () => resolve(status));
  });
  const send = (value: unknown) => {
    const payload = Buffer.from(JSON.stringify(value));
    const mask = randomBytes(4);
    const header = payload.length < 126 ? Buffer.from([0x81, 0x80 | payload.length]) : Buffer.from([0x81, 0x80 | 126, payload.length >> 8, payload.length & 0xff]);
    const masked = Buffer.from(payload.map((byte, i) => byte ^ mask[i & 3]!));
    socket.write(Buffer.concat([header, mask, masked]));
  };
  const next = () => (messages.length > 0 ? Promise.resolve(messages.shift()!) : new Promise<string>((resolve) => waiters.push(resolve)));
  return { status: await status$, send, next, socket };
}
