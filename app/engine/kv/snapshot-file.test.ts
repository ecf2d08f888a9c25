// KV snapshot files: round trip, the on-disk layout, atomic replacement, the writer's argument
// checks and checkSnapshotFits. The corrupt-file table is corrupt-snapshot.test.ts; random
// mutations are mutation-snapshot.test.ts.
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LonghandError, UsageError } from '../../common/errors.ts';
import { buildSnapshot, bytesOf, sampleMeta, sampleSections } from './snapshot-test-builder.ts';
import { checkSnapshotFits, openSnapshotFile, SNAPSHOT_ALIGN, SNAPSHOT_FORMAT_VERSION, writeSnapshotFile, type SectionSource, type SnapshotMeta } from './snapshot-file.ts';

const dir = mkdtempSync(join(tmpdir(), 'longhand-snapshot-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function rejection(p: Promise<unknown>): Promise<LonghandError> {
  try {
    await p;
  } catch (error) {
    expect(error).toBeInstanceOf(LonghandError);
    return error as LonghandError;
  }
  throw new Error('expected a rejection');
}

function sources(list: { name: string; data: Uint8Array }[], log?: string[]): SectionSource[] {
  return list.map((s) => ({ name: s.name, bytes: s.data.byteLength, read: () => (log?.push(s.name), s.data) }));
}

describe('writeSnapshotFile / openSnapshotFile', () => {
  it('a write that cannot happen is SNAPSHOT_UNWRITABLE naming why, and leaves neither a temporary file nor a changed target', async () => {
    const meta = sampleMeta();
    const list = sampleSections(meta, 3);
    const missing = await rejection(writeSnapshotFile(join(dir, 'no-such-folder', 'a.lhkv'), meta, sources(list)));
    expect(missing.code).toBe('SNAPSHOT_UNWRITABLE');
    expect(missing.details).toMatchObject({ reason: 'missing', errno: 'ENOENT', file: join(dir, 'no-such-folder', 'a.lhkv') });
    expect(missing.message).toContain('the folder does not exist');
    const aFile = join(dir, 'plain-file');
    writeFileSync(aFile, 'not a folder');
    const notDir = await rejection(writeSnapshotFile(join(aFile, 'a.lhkv'), meta, sources(list)));
    expect(notDir.code).toBe('SNAPSHOT_UNWRITABLE');
    expect(notDir.details).toMatchObject({ reason: 'missing', errno: 'ENOTDIR' });
    // the target is a folder: everything is written, then rename() refuses, and the folder stays
    const folder = mkdtempSync(join(dir, 'target-'));
    const overFolder = await rejection(writeSnapshotFile(folder, meta, sources(list)));
    expect(overFolder.code).toBe('SNAPSHOT_UNWRITABLE');
    expect(overFolder.details).toMatchObject({ reason: 'io', errno: 'EISDIR' });
    expect(statSync(folder).isDirectory()).toBe(true);
    expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });

  it('round-trips meta and sections (a 0-byte one, odd sizes, one of 3 read chunks), each read() once in order', async () => {
    const meta = sampleMeta();
    const list = [...sampleSections(meta, 1), { name: 'empty', data: new Uint8Array(0) }, { name: 'big', data: bytesOf((33 << 20) + 5, 9) }];
    const path = join(dir, 'round.lhkv');
    const log: string[] = [];
    const { bytes } = await writeSnapshotFile(path, meta, sources(list, log));
    expect(log).toEqual(list.map((s) => s.name));
    expect(statSync(path).size).toBe(bytes);
    const r = await openSnapshotFile(path);
    expect(r.meta).toEqual(meta);
    expect(r.fileBytes).toBe(bytes);
    expect(r.path).toBe(path);
    expect(r.sections).toEqual(list.map((s) => ({ name: s.name, bytes: s.data.byteLength })));
    for (const s of list) expect(Buffer.from(await r.readSection(s.name)).equals(Buffer.from(s.data))).toBe(true);
    // into a caller's buffer, at an offset into a larger one
    const backing = new Uint8Array(list[1]!.data.byteLength + 10);
    const into = backing.subarray(3, 3 + list[1]!.data.byteLength);
    const got = await r.readSection(list[1]!.name, into);
    expect(got).toBe(into);
    expect(Buffer.from(into).equals(Buffer.from(list[1]!.data))).toBe(true);
    expect(backing[2]).toBe(0);
    expect(backing[3 + list[1]!.data.byteLength]).toBe(0);
    await r.close();
    await r.close(); // idempotent
    await expect(r.readSection('tokens')).rejects.toBeInstanceOf(UsageError);
  });

  it('lays the file out as documented: magic, version, header length, JSON, its sha256, 64-aligned sections ending the file', async () => {
    const meta = sampleMeta({ tokens: 5 });
    const list = sampleSections(meta, 2);
    const path = join(dir, 'layout.lhkv');
    await writeSnapshotFile(path, meta, sources(list));
    const file = readFileSync(path);
    expect(file.subarray(0, 8).toString('latin1')).toBe('LHKVSNAP');
    expect(file.readUInt32LE(8)).toBe(SNAPSHOT_FORMAT_VERSION);
    const n = file.readUInt32LE(12);
    const header = file.subarray(16, 16 + n);
    expect(createHash('sha256').update(header).digest().equals(file.subarray(16 + n, 16 + n + 32))).toBe(true);
    const parsed = JSON.parse(header.toString('utf8')) as { meta: SnapshotMeta; sections: { name: string; offset: number; bytes: number; sha256: string }[] };
    expect(parsed.meta).toEqual(meta);
    let end = 16 + n + 32;
    for (const [i, e] of parsed.sections.entries()) {
      expect(e.name).toBe(list[i]!.name);
      expect(e.offset % SNAPSHOT_ALIGN).toBe(0);
      expect(e.offset).toBeGreaterThanOrEqual(end);
      expect(e.offset - end).toBeLessThan(SNAPSHOT_ALIGN); // no more padding than alignment needs
      expect(e.sha256).toBe(createHash('sha256').update(list[i]!.data).digest('hex'));
      expect(file.subarray(e.offset, e.offset + e.bytes).equals(Buffer.from(list[i]!.data))).toBe(true);
      expect(file.subarray(end, e.offset).every((b) => b === 0)).toBe(true);
      end = e.offset + e.bytes;
    }
    expect(file.length).toBe(end);
  });

  it('accepts a reused buffer from read() (each section hashed and written before the next read)', async () => {
    const meta = sampleMeta({ layers: 4 });
    const shared = new Uint8Array(1000);
    const secs: SectionSource[] = Array.from({ length: 4 }, (_, l) => ({ name: `layer.${l}`, bytes: 1000, read: () => shared.fill(l + 1) }));
    const path = join(dir, 'reused.lhkv');
    await writeSnapshotFile(path, meta, secs);
    const r = await openSnapshotFile(path);
    for (let l = 0; l < 4; l++) expect((await r.readSection(`layer.${l}`)).every((b) => b === l + 1)).toBe(true);
    await r.close();
  });

  it('a file with no sections round-trips', async () => {
    const path = join(dir, 'none.lhkv');
    const { bytes } = await writeSnapshotFile(path, sampleMeta({ tokens: 0 }), []);
    const r = await openSnapshotFile(path);
    expect(r.sections).toEqual([]);
    expect(r.fileBytes).toBe(bytes);
    await r.close();
  });

  it('reads a file whose sections have gaps beyond alignment (another writer), and readSection checks its arguments', async () => {
    const meta = sampleMeta();
    const built = buildSnapshot(meta, sampleSections(meta, 3), { slack: 5000 });
    const path = join(dir, 'gaps.lhkv');
    writeFileSync(path, built.bytes);
    const r = await openSnapshotFile(path);
    expect((await r.readSection('layer.2')).byteLength).toBe(sampleSections(meta, 3)[3]!.data.byteLength);
    const unknown = await rejection(r.readSection('layer.9'));
    expect(unknown).toBeInstanceOf(UsageError);
    expect(unknown.message).toMatch(/no section "layer\.9"/);
    const wrong = await rejection(r.readSection('tokens', new Uint8Array(3)));
    expect(wrong).toBeInstanceOf(UsageError);
    expect(wrong.message).toMatch(/exactly 228 bytes, has 3/);
    await r.close();
  });

  it('replaces the target atomically: a failing read() or a wrong size leaves the old file and no temporary file', async () => {
    const meta = sampleMeta();
    const path = join(dir, 'atomic.lhkv');
    await writeSnapshotFile(path, meta, sources(sampleSections(meta, 4)));
    const before = readFileSync(path);
    const failing = sources(sampleSections(meta, 5));
    failing[2] = { ...failing[2]!, read: () => Promise.reject(new Error('disk on fire')) };
    await expect(writeSnapshotFile(path, meta, failing)).rejects.toThrow('disk on fire');
    const short = sources(sampleSections(meta, 6));
    short[1] = { ...short[1]!, read: () => new Uint8Array(7) };
    const e = await rejection(writeSnapshotFile(path, meta, short));
    expect(e).toBeInstanceOf(UsageError);
    expect(e.message).toMatch(/section "layer\.0" read\(\) gave 7 bytes, \d+ declared/);
    expect(readFileSync(path).equals(before)).toBe(true);
    expect(readdirSync(dir).filter((f) => f.includes('atomic'))).toEqual(['atomic.lhkv']);
    // and a successful rewrite replaces it
    await writeSnapshotFile(path, sampleMeta({ tokens: 3 }), []);
    expect((await openSnapshotFile(path).then(async (r) => (await r.close(), r.meta))).tokens).toBe(3);
  });

  it('refuses a bad meta or section list with a UsageError before creating anything', async () => {
    const path = join(dir, 'bad-args.lhkv');
    const cases: [Partial<SnapshotMeta> | Record<string, unknown>, RegExp][] = [
      [{ modelSha256: 'xyz' }, /modelSha256 must be 64 lowercase hex/],
      [{ layers: 0 }, /meta\.layers is 0, outside 1\.\.1024/],
      [{ tokens: 2 ** 31 }, /meta\.tokens is 2147483648/],
      [{ heads: 6, kvHeads: 4 }, /not a multiple of meta\.kvHeads/],
      [{ kvType: 'fp8' }, /kvType must be/],
      [{ knobs: [] }, /knobs must be an object/],
      [{ skew: 5 }, /skew must be a string or null/],
      [{ knobs: { n: 1n } }, /knobs is not JSON-able/],
      [{ knobs: { deep: [[[[[[[[[[[[[[[1]]]]]]]]]]]]]]] } }, /knobs nests too deeply/],
    ];
    for (const [bad, message] of cases) {
      const e = await rejection(writeSnapshotFile(path, { ...sampleMeta(), ...bad } as SnapshotMeta, []));
      expect(e).toBeInstanceOf(UsageError);
      expect(e.message).toMatch(message);
    }
    const dup = await rejection(writeSnapshotFile(path, sampleMeta(), sources([{ name: 'a', data: new Uint8Array(1) }, { name: 'a', data: new Uint8Array(1) }])));
    expect(dup.message).toMatch(/section "a" appears twice/);
    const neg = await rejection(writeSnapshotFile(path, sampleMeta(), [{ name: 'a', bytes: -1, read: () => new Uint8Array(0) }]));
    expect(neg.message).toMatch(/bytes must be a non-negative safe integer/);
    expect(readdirSync(dir).filter((f) => f.includes('bad-args'))).toEqual([]);
  });
});

describe('checkSnapshotFits', () => {
  const { tokens: _t, createdAt: _c, ...expected } = sampleMeta();
  const fits = (over: Partial<SnapshotMeta>): LonghandError | null => {
    try {
      checkSnapshotFits(sampleMeta(over), expected);
      return null;
    } catch (error) {
      return error as LonghandError;
    }
  };

  it('accepts its own meta, whatever the token count, date or knob key order', () => {
    expect(fits({ tokens: 9999, createdAt: 'later' })).toBeNull();
    expect(fits({ knobs: { partialRatio: 0.3, denseLayers: 2, cap: 0.2, alpha: 5 } })).toBeNull();
  });

  it('knobs read back from a file fit the engine\'s own knobs object (undefined values, key order)', async () => {
    const knobs = { alpha: 5, cap: 0.2, denseLayers: 2, partialRatio: 0.3, budget: undefined };
    const path = join(dir, 'knobs.lhkv');
    await writeSnapshotFile(path, sampleMeta({ knobs }), []);
    const r = await openSnapshotFile(path);
    await r.close();
    expect(r.meta.knobs).toEqual({ alpha: 5, cap: 0.2, denseLayers: 2, partialRatio: 0.3 });
    expect(() => checkSnapshotFits(r.meta, { ...expected, knobs: { partialRatio: 0.3, budget: undefined, cap: 0.2, denseLayers: 2, alpha: 5 } })).not.toThrow();
  });

  it.each([
    ['model', { modelSha256: 'ef'.repeat(32) }, /model file \(sha256\) is efef/],
    ['shape', { layers: 4 }, /shape is llama 4 layers x 8 heads \(4 KV\) x 16 in the snapshot, llama 3 layers/],
    ['shape', { kvHeads: 2 }, /\(2 KV\)/],
    ['shape', { headDim: 32 }, /x 32 in the snapshot/],
    ['shape', { architecture: 'qwen2' }, /qwen2 3 layers/],
    ['vocab', { vocabSize: 513 }, /vocabulary size is 513 in the snapshot, 512 here/],
    ['kvType', { kvType: 'int8' }, /KV type is int8 in the snapshot, fp16 here/],
    ['policy', { policy: 'full' }, /policy and its knobs is full/],
    ['policy', { knobs: { alpha: 4, cap: 0.2, denseLayers: 2, partialRatio: 0.3 } }, /"alpha":4/],
    ['skew', { skew: null }, /skew is null in the snapshot, cdcd/],
  ] as const)('%s: %j is SNAPSHOT_MISMATCH', (reason, over, message) => {
    const e = fits(over as Partial<SnapshotMeta>);
    expect(e).toBeInstanceOf(LonghandError);
    expect(e!.code).toBe('SNAPSHOT_MISMATCH');
    expect(e!.details.reason).toBe(reason);
    expect(e!.message).toMatch(message);
  });
});
