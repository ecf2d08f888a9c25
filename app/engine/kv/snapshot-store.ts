// The folder of per-document KV snapshots (issue 10 part 3: "automatic in the Writer and Summarise
// views with a size cap and LRU cleanup in Settings"). One file per document, `<documentId>.lhkv`;
// a file's mtime is its last use (touch() on every save and restore), so the least recently used
// go first when the folder is over its cap. The files themselves are written and read by
// snapshot-file.ts (atomic: a temporary `.<name>.<pid>.<hex>.lhkv-tmp` beside the target).
//
// Only what this store names is ever counted or deleted: files that are not `<id>.lhkv` regular
// files (a user's notes, a symlink, a folder) are ignored, and temporary files are deleted only
// when older than a minute (a younger one may be a write in progress, in this process or another).
import { mkdirSync } from 'node:fs';
import { lstat, readdir, rm, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { UsageError } from '../../common/errors.ts';
import { SNAPSHOT_TEMP_SUFFIX } from './snapshot-file.ts';

/** A document id as the store accepts it: 1..128 of [A-Za-z0-9_-] (safe as a file name everywhere). */
export const DOCUMENT_ID = /^[A-Za-z0-9_-]{1,128}$/;
/** Extension of the store's snapshot files. */
export const SNAPSHOT_EXTENSION = '.lhkv';
/** A temporary file older than this is a leftover of a crashed write. */
export const STALE_TEMP_MS = 60_000;

const SNAPSHOT_FILE = /^([A-Za-z0-9_-]{1,128})\.lhkv$/;
const TEMP_FILE = new RegExp(`^\\..+${SNAPSHOT_TEMP_SUFFIX.replace('.', '\\.')}$`);

interface Entry {
  id: string;
  path: string;
  bytes: number;
  mtimeMs: number;
}

export interface SnapshotStoreStats {
  dir: string;
  /** Snapshot files in the folder. */
  count: number;
  /** Their total size. */
  bytes: number;
  capBytes: number;
}

export class SnapshotStore {
  /** The newest mtime this store has set, so two touches in one clock tick still order. */
  private lastTouchMs = 0;

  constructor(
    readonly dir: string,
    readonly capBytes: number,
  ) {
    if (typeof dir !== 'string' || dir.length === 0 || dir.includes('\0')) throw new UsageError(`SnapshotStore: dir must be a non-empty path, got ${JSON.stringify(dir)}`);
    if (!Number.isSafeInteger(capBytes) || capBytes < 0) throw new UsageError(`SnapshotStore: capBytes must be a non-negative integer, got ${String(capBytes)}`, { capBytes: typeof capBytes === 'number' ? capBytes : null });
  }

  /** The file of a document (the folder is created, mode 0700, so a write can follow at once). UsageError for a bad id. */
  pathFor(documentId: string): string {
    const path = join(this.dir, `${checkId(documentId)}${SNAPSHOT_EXTENSION}`);
    mkdirSync(this.dir, { recursive: true, mode: 0o700 }); // owner only: snapshots hold the user's text as KV rows and token ids
    return path;
  }

  /** Marks the document's snapshot most recently used (its mtime). No-op when it has none. */
  async touch(documentId: string): Promise<void> {
    const path = join(this.dir, `${checkId(documentId)}${SNAPSHOT_EXTENSION}`);
    const now = Math.max(Date.now(), this.lastTouchMs + 1);
    this.lastTouchMs = now;
    try {
      await utimes(path, now / 1000, now / 1000);
    } catch (error) {
      if (!isMissing(error)) throw error;
    }
  }

  /**
   * Deletes least recently used snapshots (never `keep`'s) until the total is within capBytes.
   * Returns the ids deleted and the bytes left (more than the cap only if `keep` alone exceeds it).
   */
  async enforceCap(keep?: string): Promise<{ deleted: string[]; bytes: number }> {
    if (keep !== undefined) checkId(keep);
    const entries = await this.scan();
    let bytes = entries.reduce((sum, e) => sum + e.bytes, 0);
    const deleted: string[] = [];
    // oldest first; equal mtimes by id so the order is deterministic
    const lru = [...entries].sort((a, b) => a.mtimeMs - b.mtimeMs || (a.id < b.id ? -1 : 1));
    for (const e of lru) {
      if (bytes <= this.capBytes) break;
      if (e.id === keep) continue;
      await rm(e.path, { force: true });
      bytes -= e.bytes;
      deleted.push(e.id);
    }
    return { deleted, bytes };
  }

  async stats(): Promise<SnapshotStoreStats> {
    const entries = await this.scan();
    return { dir: this.dir, count: entries.length, bytes: entries.reduce((sum, e) => sum + e.bytes, 0), capBytes: this.capBytes };
  }

  /** Deletes every snapshot of the folder (and stale temporary files); other files stay. */
  async clear(): Promise<void> {
    for (const e of await this.scan()) await rm(e.path, { force: true });
  }

  /** The folder's snapshot files; deletes stale temporary files on the way. A missing folder is empty. */
  private async scan(): Promise<Entry[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (error) {
      if (isMissing(error)) return [];
      throw error;
    }
    const out: Entry[] = [];
    const now = Date.now();
    for (const name of names) {
      const snapshot = SNAPSHOT_FILE.exec(name);
      const temp = snapshot === null && TEMP_FILE.test(name);
      if (snapshot === null && !temp) continue; // not ours
      const path = join(this.dir, name);
      let st;
      try {
        st = await lstat(path);
      } catch (error) {
        if (isMissing(error)) continue; // deleted meanwhile (another window's store)
        throw error;
      }
      if (!st.isFile()) continue; // a folder or a symlink with our name: not something we wrote
      if (temp) {
        if (now - st.mtimeMs > STALE_TEMP_MS) await rm(path, { force: true });
        continue;
      }
      out.push({ id: snapshot![1]!, path, bytes: st.size, mtimeMs: st.mtimeMs });
    }
    return out;
  }
}

function checkId(documentId: unknown): string {
  if (typeof documentId !== 'string' || !DOCUMENT_ID.test(documentId))
    throw new UsageError(`document id must be 1..128 characters of A-Z a-z 0-9 _ -, got ${typeof documentId === 'string' ? JSON.stringify(documentId.slice(0, 140)) : typeof documentId}`);
  return documentId;
}

const isMissing = (error: unknown): boolean => (error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
