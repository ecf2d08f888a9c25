// Atomic file replacement: write a temp file in the same folder, fsync it, rename it over the
// target, then fsync the folder (best effort). A crash leaves either the old file or the new one,
// plus at worst a stray temp file whose name starts with '.' and ends with '.tmp' — readers skip
// those, and the next write of the same file sweeps nothing else.
import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** The temp-file name for `target`: hidden, unique per write, recognisable (isTempName). */
export function tempNameFor(target: string): string {
  return join(dirname(target), `.${basename(target)}.${process.pid}-${randomBytes(6).toString('hex')}.tmp`);
}

export function isTempName(name: string): boolean {
  return name.startsWith('.') && name.endsWith('.tmp');
}

export async function writeFileAtomic(target: string, data: string | Uint8Array): Promise<void> {
  const dir = dirname(target);
  await mkdir(dir, { recursive: true });
  const temp = tempNameFor(target);
  const handle = await open(temp, 'wx', 0o600);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } catch (error) {
    await handle.close().catch(() => {});
    await rm(temp, { force: true });
    throw error;
  }
  await handle.close();
  try {
    await rename(temp, target);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  await syncDir(dir);
}

/** fsync a folder so the rename itself is durable (not possible on Windows: skipped there). */
async function syncDir(dir: string): Promise<void> {
  if (process.platform === 'win32') return;
  try {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch {
    // some file systems refuse fsync on a folder; the data itself is already synced
  }
}
