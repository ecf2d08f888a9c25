// Document snapshots as the host sets them up: the folder comes from the process that starts the
// host (LONGHAND_SNAPSHOT_DIR: Electron main passes <userData>/kv-snapshots, browser mode
// <data dir>/kv-snapshots, beside documents/), never from a window; the size cap a window sets is
// kept beside the folder (<folder>.json) so it survives engine restarts and app starts.
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { LonghandError } from '../../common/errors.ts';
import { DEFAULT_SNAPSHOT_CAP_BYTES, SNAPSHOT_DIR_ENV, type SnapshotStatsPayload } from '../../common/protocol.ts';
import type { EngineCore, SnapshotStats } from './engine-core.ts';

/** The file that holds a folder's cap: `<folder>.json`, `{ "capBytes": N }`. */
export function capFile(dir: string): string {
  return `${resolve(dir)}.json`;
}

/** The cap saved for `dir`, or the default when none was saved (or the file is unreadable). */
export async function readCap(dir: string): Promise<number> {
  let text: string;
  try {
    text = await readFile(capFile(dir), 'utf8');
  } catch {
    return DEFAULT_SNAPSHOT_CAP_BYTES;
  }
  try {
    const capBytes = (JSON.parse(text) as { capBytes?: unknown } | null)?.capBytes;
    if (typeof capBytes === 'number' && Number.isSafeInteger(capBytes) && capBytes >= 0) return capBytes;
  } catch {
    // a damaged file: the default
  }
  return DEFAULT_SNAPSHOT_CAP_BYTES;
}

/** Saves the cap atomically (a temp file renamed over the old one). */
export async function writeCap(dir: string, capBytes: number): Promise<void> {
  const file = capFile(dir);
  const temp = `${file}.${process.pid}-${Math.random().toString(36).slice(2, 10)}.tmp`;
  await mkdir(resolve(dir, '..'), { recursive: true });
  try {
    await writeFile(temp, `${JSON.stringify({ capBytes })}\n`, { mode: 0o600 });
    await rename(temp, file);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

/** The figures a window sees (the core's, with `enabled`). */
export function statsPayload(stats: SnapshotStats): SnapshotStatsPayload {
  return { enabled: stats.dir !== undefined, dir: stats.dir ?? null, count: stats.count, bytes: stats.bytes, capBytes: stats.capBytes };
}

/**
 * What a `snapshots` request does on the core. setCap keeps the folder (the core's own) and saves
 * the cap for the next start; a host without a folder refuses it.
 */
export class SnapshotSettings {
  constructor(
    private readonly core: Pick<EngineCore, 'configureSnapshots' | 'snapshotStats' | 'clearSnapshots'>,
    private readonly log: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
  ) {}

  /**
   * Configures the core from the environment (once per process, before any request is served).
   * Never rejects: a folder that cannot be used leaves snapshots off and says why on stderr.
   */
  async start(env: NodeJS.ProcessEnv = process.env): Promise<void> {
    const dir = env[SNAPSHOT_DIR_ENV];
    if (!dir) return;
    try {
      await mkdir(dir, { recursive: true });
      await this.core.configureSnapshots({ dir: resolve(dir), capBytes: await readCap(dir) });
    } catch (error) {
      this.log(`[engine host] document snapshots are off: ${error instanceof Error ? error.message : String(error)}`);
      try {
        await this.core.configureSnapshots({ dir: undefined, capBytes: 0 });
      } catch {
        // a core that cannot even turn them off keeps none either
      }
    }
  }

  async handle(action: 'stats' | 'setCap' | 'clear', capBytes: number | undefined): Promise<SnapshotStatsPayload> {
    switch (action) {
      case 'stats':
        return statsPayload(await this.core.snapshotStats());
      case 'clear':
        return statsPayload(await this.core.clearSnapshots());
      case 'setCap': {
        if (capBytes === undefined) throw new LonghandError('BAD_ARGUMENT', 'setCap needs capBytes (a whole number of bytes, 0 or more)', { field: 'capBytes' });
        const { dir } = await this.core.snapshotStats();
        if (dir === undefined) throw new LonghandError('BAD_ARGUMENT', 'this engine keeps no document snapshots, so it has no size cap to set', { field: 'capBytes' });
        const stats = await this.core.configureSnapshots({ dir, capBytes });
        await writeCap(dir, capBytes);
        return statsPayload(stats);
      }
    }
  }
}
