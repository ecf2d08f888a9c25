import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LoadedModel } from '../model/types.ts';
import { DIGEST_FILE, fileIdentity, modelDigest } from './model-digest.ts';
import { modelSha256 } from './policy/infinigen-state.ts';

// modelDigest and modelSha256 read only the model's path: a file of random bytes stands for a GGUF.
const asModel = (file: string): LoadedModel => ({ path: file }) as LoadedModel;
const sha = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

let dir: string;
let cache: string;
let file: string;
let bytes: Buffer;

beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'longhand-digest-'));
  cache = path.join(dir, 'cache');
  file = path.join(dir, 'model.gguf');
  bytes = randomBytes(3 << 20); // several read-stream chunks
  writeFileSync(file, bytes);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const record = (): { version: number; entries: Record<string, { sha256: string; at: number }> } =>
  JSON.parse(readFileSync(path.join(cache, DIGEST_FILE), 'utf8')) as { version: number; entries: Record<string, { sha256: string; at: number }> };

describe('modelDigest', () => {
  it('hashes a file once, records it under the file identity, and answers from the record after that', async () => {
    expect(await modelDigest(asModel(file), cache)).toBe(sha(bytes));
    const identity = await fileIdentity(file);
    expect(record().entries[identity]?.sha256).toBe(sha(bytes));
    // a planted digest for the same identity is what comes back: the file is not read again
    const planted = 'ab'.repeat(32);
    writeFileSync(path.join(cache, DIGEST_FILE), JSON.stringify({ version: 1, entries: { [identity]: { sha256: planted, at: 1 } } }));
    expect(await modelDigest(asModel(file), cache)).toBe(planted);
  });

  it('hashes again when the file changes: new bytes of the same size and a new mtime, or a new size', async () => {
    await modelDigest(asModel(file), cache);
    const changed = Buffer.from(bytes);
    changed.writeUInt8(changed.readUInt8(12345) ^ 0xff, 12345);
    writeFileSync(file, changed);
    utimesSync(file, new Date(), new Date(Date.now() + 5000)); // a coarse-mtime filesystem could keep the old stamp
    expect(await modelDigest(asModel(file), cache)).toBe(sha(changed));
    const longer = Buffer.concat([changed, Buffer.from([1])]);
    writeFileSync(file, longer);
    expect(await modelDigest(asModel(file), cache)).toBe(sha(longer));
    expect(Object.keys(record().entries)).toHaveLength(3);
  });

  it('a copy of the file (another inode) is hashed on its own and gives the same digest', async () => {
    const copy = path.join(dir, 'copy.gguf');
    writeFileSync(copy, bytes);
    expect(await modelDigest(asModel(file), cache)).toBe(sha(bytes));
    expect(await modelDigest(asModel(copy), cache)).toBe(sha(bytes));
    expect(Object.keys(record().entries)).toHaveLength(2);
  });

  it('a malformed record is ignored and replaced: garbage, another version, a bad digest', async () => {
    mkdirSync(cache, { recursive: true });
    const identity = await fileIdentity(file);
    for (const content of ['{not json', JSON.stringify({ version: 2, entries: { [identity]: { sha256: 'ab'.repeat(32), at: 1 } } }), JSON.stringify({ version: 1, entries: { [identity]: { sha256: 'xyz', at: 1 } } }), JSON.stringify({ version: 1, entries: null })]) {
      writeFileSync(path.join(cache, DIGEST_FILE), content);
      expect(await modelDigest(asModel(file), cache)).toBe(sha(bytes));
      expect(record().entries[identity]?.sha256).toBe(sha(bytes));
    }
  });

  it('a cache folder that cannot be written still gives the digest', async () => {
    writeFileSync(cache, 'a file where the folder should be');
    expect(await modelDigest(asModel(file), cache)).toBe(sha(bytes));
    expect(await modelDigest(asModel(file), cache)).toBe(sha(bytes));
  });

  it("a folder model: the digest is modelSha256's (config.json and the safetensors in name order), and changes when one shard does", async () => {
    const folder = path.join(dir, 'hf');
    mkdirSync(folder);
    writeFileSync(path.join(folder, 'config.json'), '{"model_type":"llama"}');
    writeFileSync(path.join(folder, 'model-00002.safetensors'), randomBytes(1000));
    writeFileSync(path.join(folder, 'model-00001.safetensors'), randomBytes(1000));
    writeFileSync(path.join(folder, 'README.md'), 'not hashed');
    const first = await modelDigest(asModel(folder), cache);
    expect(first).toBe(await modelSha256(asModel(folder)));
    writeFileSync(path.join(folder, 'README.md'), 'still not hashed, and not part of the identity');
    expect(await modelDigest(asModel(folder), cache)).toBe(first);
    writeFileSync(path.join(folder, 'model-00002.safetensors'), randomBytes(1001));
    const second = await modelDigest(asModel(folder), cache);
    expect(second).not.toBe(first);
    expect(second).toBe(await modelSha256(asModel(folder)));
  });

  it('keeps the newest 256 records', async () => {
    mkdirSync(cache, { recursive: true });
    const entries: Record<string, { sha256: string; at: number }> = {};
    for (let i = 0; i < 300; i++) entries[`/old/${i}|1|${i}|1|1`] = { sha256: i.toString(16).padStart(64, '0'), at: 1000 + i };
    writeFileSync(path.join(cache, DIGEST_FILE), JSON.stringify({ version: 1, entries }));
    await modelDigest(asModel(file), cache);
    const kept = Object.keys(record().entries);
    expect(kept).toHaveLength(256);
    expect(kept).toContain(await fileIdentity(file));
    expect(kept).toContain('/old/299|1|299|1|1');
    expect(kept).not.toContain('/old/44|1|44|1|1'); // 300 old + 1 new: the 45 oldest (at 1000..1044) went
    expect(kept).toContain('/old/45|1|45|1|1');
  });
});
