// Browser mode's load progress: the real server (in this process) over the real engine host,
// loading stories260K on the request of one /ws connection. That page sees the host's
// loadProgress figures, `done` rising to `total`, and then `loaded`; another page sees none.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineClient } from '../../app/engine/client.ts';
import { EngineSession } from '../../app/server/engine-session.ts';
import { startServer, type RunningServer } from '../../app/server/serve.ts';
import { haveSharedModel, STORIES_260K } from '../support/models.ts';
import { wsConnect } from '../support/serve-client.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- frames are poked into freely
type Frame = Record<string, any>;

/** Reads frames until one matches `last`; returns all of them, that one included. */
async function framesUntil(next: () => Promise<string>, last: (frame: Frame) => boolean): Promise<Frame[]> {
  const frames: Frame[] = [];
  for (;;) {
    const frame = JSON.parse(await next()) as Frame;
    frames.push(frame);
    if (last(frame)) return frames;
  }
}

describe.runIf(haveSharedModel())('browser-mode server: load progress over /ws', () => {
  let tmp: string;
  let session: EngineSession;
  let server: RunningServer;

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'longhand-load-progress-'));
    session = new EngineSession(await EngineClient.start(), { log: () => undefined });
    server = await startServer({ session, dataDir: join(tmp, 'data'), log: () => undefined });
  });

  afterAll(async () => {
    await server?.close();
    await session?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('sends the page that asked loadProgress frames, done rising to total, before loaded', async () => {
    const auth = { Authorization: `Bearer ${server.token}` };
    const asker = await wsConnect(server.port, auth);
    const bystander = await wsConnect(server.port, auth);
    expect([asker.status, bystander.status]).toEqual([101, 101]);

    asker.send({ kind: 'load', requestId: 'l1', options: { modelPath: STORIES_260K, contextLength: 256, threads: 1 } });
    const frames = await framesUntil(asker.next, (f) => f.requestId === 'l1' && (f.kind === 'loaded' || f.kind === 'error'));
    const loaded = frames.at(-1)!;
    expect(loaded).toMatchObject({ kind: 'loaded', model: { vocabSize: 512, layers: 5 } });

    const progress = frames.filter((f) => f.kind === 'loadProgress');
    expect(progress.length).toBeGreaterThan(1);
    for (const frame of progress) expect(Object.keys(frame).sort()).toEqual(['done', 'kind', 'requestId', 'total']);
    expect(progress.every((f) => f.requestId === 'l1')).toBe(true);
    const total = progress[0]!.total as number;
    expect(progress.every((f) => f.total === total)).toBe(true);
    const done = progress.map((f) => f.done as number);
    for (let i = 1; i < done.length; i++) expect(done[i]!).toBeGreaterThan(done[i - 1]!);
    expect(done.at(-1)).toBe(total);

    // The bystander's frames up to the answer of its own request hold no progress of the load
    // (one TCP stream: anything sent to it for l1 would have come before this answer).
    bystander.send({ kind: 'tokenize', requestId: 't1', text: 'Once', addSpecial: false });
    const seen = await framesUntil(bystander.next, (f) => f.requestId === 't1');
    expect(seen.at(-1)).toMatchObject({ kind: 'tokenized', ids: expect.any(Array) });
    expect(seen.filter((f) => f.kind === 'loadProgress')).toEqual([]);

    asker.socket.destroy();
    bystander.socket.destroy();
  });
});
