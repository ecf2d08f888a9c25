// `longhand serve --data-dir D` gives its engine host the snapshot folder D/kv-snapshots, and a
// restarted engine (the window's Restart) gets the same folder and the cap the window set before:
// the real CLI in a child process, spoken to over /ws like the renderer does.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SNAPSHOT_CAP_BYTES } from '../../app/common/protocol.ts';
import { PROJECT_ROOT } from '../support/models.ts';
import { firstLine, wsConnect } from '../support/serve-client.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- frames are poked into freely
type Frame = Record<string, any>;

describe('longhand serve: the engine host snapshot folder', () => {
  let tmp: string;
  let server: ChildProcessWithoutNullStreams;
  let port: number;
  let token: string;

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'longhand-serve-snapshots-'));
    const env = { ...process.env, HOME: join(tmp, 'home'), XDG_DATA_HOME: join(tmp, 'xdg') };
    server = spawn(process.execPath, [join(PROJECT_ROOT, 'bin', 'longhand.mjs'), 'serve', '--port', '0', '--data-dir', join(tmp, 'data')], { cwd: PROJECT_ROOT, env });
    const match = /^http:\/\/127\.0\.0\.1:(\d+)\/\?token=(.+)$/.exec(await firstLine(server))!;
    port = Number(match[1]);
    token = match[2]!;
  }, 60_000);

  afterAll(async () => {
    if (server?.exitCode === null) {
      const exited = new Promise((resolve) => server.once('exit', resolve));
      server.kill('SIGTERM');
      await exited;
    }
    rmSync(tmp, { recursive: true, force: true });
  });

  it('is <data dir>/kv-snapshots, with the default cap; the cap set before a restart holds after it', async () => {
    const ws = await wsConnect(port, { Authorization: `Bearer ${token}` });
    expect(ws.status).toBe(101);
    const frames: Frame[] = [];
    const next = async (match: (f: Frame) => boolean): Promise<Frame> => {
      for (;;) {
        const seen = frames.find(match);
        if (seen) return seen;
        frames.push(JSON.parse(await ws.next()) as Frame);
      }
    };
    const dir = join(tmp, 'data', 'kv-snapshots');
    try {
      ws.send({ kind: 'snapshots', requestId: 's1', action: 'stats' });
      expect((await next((f) => f.requestId === 's1')).stats).toEqual({ enabled: true, dir, count: 0, bytes: 0, capBytes: DEFAULT_SNAPSHOT_CAP_BYTES });
      expect(existsSync(dir)).toBe(true);

      ws.send({ kind: 'snapshots', requestId: 's2', action: 'setCap', capBytes: 5 * 1024 ** 2 });
      expect((await next((f) => f.requestId === 's2')).stats).toMatchObject({ capBytes: 5 * 1024 ** 2 });
      expect(JSON.parse(readFileSync(join(tmp, 'data', 'kv-snapshots.json'), 'utf8'))).toEqual({ capBytes: 5 * 1024 ** 2 });

      ws.send({ kind: 'restartEngine', requestId: 'r1' });
      await next((f) => f.kind === 'engineStatus' && f.status.state === 'ready');
      ws.send({ kind: 'snapshots', requestId: 's3', action: 'stats' });
      expect((await next((f) => f.requestId === 's3')).stats).toEqual({ enabled: true, dir, count: 0, bytes: 0, capBytes: 5 * 1024 ** 2 });

      // A window cannot point the host elsewhere: a path is no field of the request.
      ws.send({ kind: 'snapshots', requestId: 's4', action: 'stats', dir: '/tmp' });
      expect(await next((f) => f.requestId === 's4')).toMatchObject({ kind: 'error', error: { code: 'PROTOCOL_BAD_MESSAGE' } });
    } finally {
      ws.socket.destroy();
    }
  }, 60_000);
});
