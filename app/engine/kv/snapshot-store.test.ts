// The per-document snapshot folder: ids, folder creation (0700), LRU by mtime under a byte cap,
// `keep`, stats, clear, foreign files left alone, stale temporary files removed.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UsageError } from '../../common/errors.ts';
import { sampleMeta } from './snapshot-test-builder.ts';
import { openSnapshotFile, writeSnapshotFile } from './snapshot-file.ts';
import { SnapshotStore, STALE_TEMP_MS } from './snapshot-store.ts';

const root = mkdtempSync(join(tmpdir(), 'longhand-store-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const freshDir = (): string => join(root, `store-${n++}`, 'snapshots');

/** A file of `bytes` bytes for `id`, last used `ageS` seconds ago. */
function put(store: SnapshotStore, id: string, bytes: number, ageS: number): string {
  const path = store.pathFor(id);
  writeFileSync(path, new Uint8Array(bytes));
  const t = Date.now() / 1000 - ageS;
  utimesSync(path, t, t);
  return path;
}

const ids = (dir: string): string[] => readdirSync(dir).sort();

describe('SnapshotStore', () => {
  it('pathFor checks the id and creates the folder with mode 0700', () => {
    const dir = freshDir();
    const store = new SnapshotStore(dir, 1000);
    expect(existsSync(dir)).toBe(false);
    expect(store.pathFor('doc_1-A')).toBe(join(dir, 'doc_1-A.lhkv'));
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    for (const bad of ['', '../x', 'a/b', 'a.b', 'ä', 'x'.repeat(129), ' doc', 'doc\0']) expect(() => store.pathFor(bad), bad).toThrow(UsageError);
    expect(store.pathFor('x'.repeat(128))).toBe(join(dir, `${'x'.repeat(128)}.lhkv`));
    expect(() => new SnapshotStore(dir, -1)).toThrow(UsageError);
    expect(() => new SnapshotStore(dir, 1.5)).toThrow(UsageError);
    expect(() => new SnapshotStore('', 10)).toThrow(UsageError);
  });

  it('enforceCap deletes least recently used first until the total fits, and never `keep`', async () => {
    const dir = freshDir();
    const store = new SnapshotStore(dir, 250);
    put(store, 'a', 100, 40); // oldest
    put(store, 'b', 100, 30);
    put(store, 'c', 100, 20);
    put(store, 'd', 100, 10); // newest
    expect(await store.stats()).toEqual({ dir, count: 4, bytes: 400, capBytes: 250 });
    // 400 > 250: a and b go (300 -> 200 after b), c and d stay
    expect(await store.enforceCap()).toEqual({ deleted: ['a', 'b'], bytes: 200 });
    expect(ids(dir)).toEqual(['c.lhkv', 'd.lhkv']);
    // within the cap: nothing happens
    expect(await store.enforceCap()).toEqual({ deleted: [], bytes: 200 });
    // keep the oldest: the next oldest goes instead
    put(store, 'e', 100, 5);
    expect(await store.enforceCap('c')).toEqual({ deleted: ['d'], bytes: 200 });
    expect(ids(dir)).toEqual(['c.lhkv', 'e.lhkv']);
    // `keep` alone over the cap: everything else goes, keep stays, and the bytes left say so
    put(store, 'big', 400, 100);
    expect(await store.enforceCap('big')).toEqual({ deleted: ['c', 'e'], bytes: 400 });
    expect(ids(dir)).toEqual(['big.lhkv']);
    await expect(store.enforceCap('no/such')).rejects.toBeInstanceOf(UsageError);
  });

  it('touch() makes a document the most recently used, even within one clock tick', async () => {
    const dir = freshDir();
    const store = new SnapshotStore(dir, 200);
    put(store, 'old', 100, 50);
    put(store, 'mid', 100, 40);
    put(store, 'new', 100, 30);
    await store.touch('old'); // now the newest
    await store.touch('mid'); // newer still, though probably the same millisecond
    expect(statSync(join(dir, 'mid.lhkv')).mtimeMs).toBeGreaterThan(statSync(join(dir, 'old.lhkv')).mtimeMs);
    expect(await store.enforceCap()).toEqual({ deleted: ['new'], bytes: 200 });
    await store.touch('absent'); // no file: no error, nothing created
    expect(existsSync(join(dir, 'absent.lhkv'))).toBe(false);
    await expect(store.touch('../etc')).rejects.toBeInstanceOf(UsageError);
  });

  it('ignores foreign files, folders and symlinks; deletes only temporary files older than a minute', async () => {
    const dir = freshDir();
    const store = new SnapshotStore(dir, 0);
    put(store, 'doc', 10, 1);
    writeFileSync(join(dir, 'notes.txt'), 'mine');
    writeFileSync(join(dir, 'doc.lhkv.bak'), 'backup');
    mkdirSync(join(dir, 'folder.lhkv'));
    writeFileSync(join(root, 'outside'), 'x'.repeat(50));
    symlinkSync(join(root, 'outside'), join(dir, 'link.lhkv'));
    const stale = join(dir, `.doc.lhkv.123.abcdef.lhkv-tmp`);
    const young = join(dir, `.doc.lhkv.456.abcdef.lhkv-tmp`);
    writeFileSync(stale, 'half a write');
    writeFileSync(young, 'a write in progress');
    const old = (Date.now() - STALE_TEMP_MS - 5_000) / 1000;
    utimesSync(stale, old, old);
    expect(await store.stats()).toEqual({ dir, count: 1, bytes: 10, capBytes: 0 });
    expect(existsSync(stale)).toBe(false);
    expect(existsSync(young)).toBe(true);
    expect(await store.enforceCap()).toEqual({ deleted: ['doc'], bytes: 0 });
    expect(ids(dir)).toEqual(['.doc.lhkv.456.abcdef.lhkv-tmp', 'doc.lhkv.bak', 'folder.lhkv', 'link.lhkv', 'notes.txt']);
    expect(existsSync(join(root, 'outside'))).toBe(true);
  });

  it('clear() deletes every snapshot and nothing else; a missing folder is an empty store', async () => {
    const dir = freshDir();
    const store = new SnapshotStore(dir, 1 << 20);
    expect(await store.stats()).toEqual({ dir, count: 0, bytes: 0, capBytes: 1 << 20 });
    await store.clear();
    expect(await store.enforceCap()).toEqual({ deleted: [], bytes: 0 });
    put(store, 'a', 5, 1);
    put(store, 'b', 7, 2);
    writeFileSync(join(dir, 'readme'), 'keep me');
    await store.clear();
    expect(ids(dir)).toEqual(['readme']);
    expect((await store.stats()).count).toBe(0);
  });

  it('works with real snapshot files written through pathFor', async () => {
    const dir = freshDir();
    const each = 3000 + 1024; // a 3000-byte section plus the header: about 3.6 KB per file
    const store = new SnapshotStore(dir, 3 * each);
    const meta = sampleMeta({ tokens: 4 });
    const data = new Uint8Array(3000).fill(7);
    for (const id of ['one', 'two', 'three', 'four']) {
      await writeSnapshotFile(store.pathFor(id), meta, [{ name: 'layer.0', bytes: data.byteLength, read: () => data }]);
      await new Promise((done) => setTimeout(done, 5)); // distinct mtimes
    }
    await store.touch('one');
    const before = await store.stats();
    expect(before.count).toBe(4);
    const size = statSync(store.pathFor('one')).size;
    expect(before.bytes).toBe(4 * size);
    expect(size).toBeGreaterThan(3000);
    expect(size).toBeLessThan(each); // so 4 files exceed the cap and 3 fit
    const { deleted, bytes } = await store.enforceCap('four');
    expect(deleted).toEqual(['two']); // 'one' was touched, 'four' kept, 'two' is the least recently used
    expect(bytes).toBe(3 * size);
    const r = await openSnapshotFile(store.pathFor('one'));
    expect((await r.readSection('layer.0')).every((b) => b === 7)).toBe(true);
    await r.close();
  });
});
