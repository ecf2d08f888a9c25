// The model file's SHA-256, remembered per file identity so a model is read through once, not on
// every load. InfiniGen's skew cache and every KV snapshot are keyed by it; hashing a 1 GB file
// takes 3.6–3.9 s on our machines (an 8 GB model ~30 s), which every InfiniGen load and the first
// snapshot of each load used to pay.
//
//   modelDigest(model, cacheDir)
//     ├─ identity: for each hashed file (the GGUF, or a folder's config.json + *.safetensors in
//     │   name order) its real path, device, inode, size and mtime in ns
//     ├─ <cacheDir>/model-sha256.json has that identity ──► its digest (no read of the model)
//     └─ else modelSha256(model) (reads every byte) ──► recorded (atomic rename), returned
//
// The identity is what make and ccache trust: a file rewritten in place keeps its inode but changes
// its mtime and usually its size. A snapshot restored against a stale digest is still checked
// section by section (sha256 of every section, shapes, token ids), so the worst case is a refusal.
// An unreadable or malformed record is ignored (hashed again and rewritten), never an error.
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, realpath, rename, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { LoadedModel } from '../model/types.ts';
import { modelSha256 } from './policy/infinigen-state.ts';

/** The record's file name inside the cache folder. */
export const DIGEST_FILE = 'model-sha256.json';
/** At most this many models are remembered (the oldest entries go first). */
const MAX_ENTRIES = 256;

interface DigestRecord {
  version: 1;
  /** identity → { sha256, at: when it was recorded (ms since epoch; the oldest go past MAX_ENTRIES) } */
  entries: Record<string, { sha256: string; at: number }>;
}

/** The files whose bytes modelSha256 hashes, in its order. */
async function hashedFiles(modelPath: string): Promise<string[]> {
  if (!(await stat(modelPath)).isDirectory()) return [modelPath];
  const names = (await readdir(modelPath)).filter((f) => f === 'config.json' || f.endsWith('.safetensors')).sort();
  return names.map((f) => path.join(modelPath, f));
}

/** One line per hashed file: real path, device, inode, size, mtime (ns). */
export async function fileIdentity(modelPath: string): Promise<string> {
  const parts: string[] = [];
  for (const file of await hashedFiles(modelPath)) {
    const s = await stat(file, { bigint: true });
    parts.push(`${await realpath(file)}|${s.dev}|${s.ino}|${s.size}|${s.mtimeNs}`);
  }
  return parts.join('\n');
}

async function readRecord(file: string): Promise<DigestRecord> {
  try {
    const parsed = JSON.parse(await readFile(file, 'utf8')) as Partial<DigestRecord>;
    if (parsed.version !== 1 || parsed.entries === null || typeof parsed.entries !== 'object') return { version: 1, entries: {} };
    const entries: DigestRecord['entries'] = {};
    for (const [key, value] of Object.entries(parsed.entries)) {
      if (value && typeof value.sha256 === 'string' && /^[0-9a-f]{64}$/.test(value.sha256) && typeof value.at === 'number') entries[key] = value;
    }
    return { version: 1, entries };
  } catch {
    return { version: 1, entries: {} };
  }
}

/** Writes the record atomically (a reader sees the old or the new one, never half of one). */
async function writeRecord(file: string, record: DigestRecord): Promise<void> {
  const kept = Object.entries(record.entries).sort((a, b) => b[1].at - a[1].at).slice(0, MAX_ENTRIES);
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(tmp, JSON.stringify({ version: 1, entries: Object.fromEntries(kept) }));
  await rename(tmp, file);
}

/**
 * SHA-256 of the model's bytes: from `<cacheDir>/model-sha256.json` when the files are the ones
 * hashed before, else hashed now and recorded. A cache folder that cannot be written only costs
 * the hash next time.
 */
export async function modelDigest(model: LoadedModel, cacheDir: string): Promise<string> {
  const file = path.join(cacheDir, DIGEST_FILE);
  const identity = await fileIdentity(model.path);
  const record = await readRecord(file);
  const known = record.entries[identity];
  if (known) return known.sha256;
  const sha256 = await modelSha256(model);
  // identity again: a file replaced while it was being read must not be recorded under the new bytes
  if ((await fileIdentity(model.path)) === identity) {
    const latest = await readRecord(file); // another process may have added its model meanwhile
    latest.entries[identity] = { sha256, at: Date.now() };
    await writeRecord(file, latest).catch(() => undefined);
  }
  return sha256;
}
