// Seeded random mutation of valid KV snapshot files (after mutation-gguf.test.ts and the engine
// of test/support/fuzz/core.ts, made async because the reader is): bit flips, bytes set, truncation,
// chunks duplicated or deleted, the prefix's u32 fields overwritten, and, so that the checks behind
// the header's sha256 are reached, header JSON edits re-sealed with a correct checksum (text
// mutations and hostile values put into random fields). Each case is written to disk, opened and
// every section read. It must either read cleanly or fail with a LonghandError whose code is
// SNAPSHOT_*: never another exception, never a hang. A mutant whose outcome class was not seen
// before joins the corpus (stacked mutations reach deeper checks). Prints the outcome table.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LonghandError } from '../../common/errors.ts';
import { flipBytes, int, pick, seededRandom, shuffleSpan, splice, truncate, type Random } from '../../../test/support/fuzz/core.ts';
import { buildSnapshot, headerText, resealHeader, sampleMeta, sampleSections } from './snapshot-test-builder.ts';
import { openSnapshotFile, writeSnapshotFile } from './snapshot-file.ts';

const CASES = 8000;
const MASTER_SEED = 20261203;
const HANG_MS = 2000;

const dir = mkdtempSync(join(tmpdir(), 'longhand-mutate-snapshot-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const HOSTILE: unknown[] = [-1, 0, 1.5, 2 ** 31, 2 ** 53, 2 ** 64, 1e308, -0, null, '', '0', 'x'.repeat(300), [], {}, [[[[[]]]]], true, 'layer.0', 'tokens', 64, 63, 65];

function headerLength(b: Uint8Array): number {
  return b.length >= 16 ? new DataView(b.buffer, b.byteOffset, b.byteLength).getUint32(12, true) : 0;
}

/** The header object's leaves as [container, key] pairs, for structural edits. */
function leaves(v: unknown, out: [Record<string | number, unknown>, string | number][] = [], depth = 0): [Record<string | number, unknown>, string | number][] {
  if (depth > 8 || typeof v !== 'object' || v === null) return out;
  for (const [k, x] of Object.entries(v)) {
    out.push([v as Record<string | number, unknown>, Array.isArray(v) ? Number(k) : k]);
    leaves(x, out, depth + 1);
  }
  return out;
}

function mutate(parent: Uint8Array, random: Random): { bytes: Uint8Array; what: string } {
  const hl = headerLength(parent);
  const headerEnd = Math.min(parent.length, 16 + hl + 32);
  const position = (): number => (random() < 0.7 && headerEnd > 0 ? int(random, headerEnd) : int(random, Math.max(1, parent.length)));
  const resealable = parent.length >= 16 && hl > 0 && 16 + hl + 32 <= parent.length;
  const kind = int(random, resealable ? 10 : 6);
  switch (kind) {
    case 0: {
      const b = parent.slice();
      const at: number[] = [];
      for (let n = 1 + int(random, 4); n > 0 && b.length > 0; n--) {
        const p = position();
        b[p] = b[p]! ^ (1 << int(random, 8));
        at.push(p);
      }
      return { bytes: b, what: `bit flips at ${at.join(',')}` };
    }
    case 1: {
      const b = parent.slice();
      const value = pick(random, [0x00, 0xff, int(random, 256)]);
      const p = position();
      const n = 1 + int(random, 8);
      b.fill(value, p, p + n);
      return { bytes: b, what: `${n} bytes set to ${value} at ${p}` };
    }
    case 2: {
      const n = random() < 0.6 ? int(random, headerEnd + 64) : int(random, parent.length + 1);
      return { bytes: parent.subarray(0, n), what: `truncated to ${n}` };
    }
    case 3: {
      const a = position();
      const chunk = parent.subarray(a, a + 1 + int(random, 64));
      const at = position();
      const b = new Uint8Array(parent.length + chunk.length);
      b.set(parent.subarray(0, at));
      b.set(chunk, at);
      b.set(parent.subarray(at), at + chunk.length);
      return { bytes: b, what: `${chunk.length} bytes from ${a} duplicated at ${at}` };
    }
    case 4: {
      const a = position();
      const len = Math.min(1 + int(random, 64), parent.length - a);
      const b = new Uint8Array(parent.length - len);
      b.set(parent.subarray(0, a));
      b.set(parent.subarray(a + len), a);
      return { bytes: b, what: `${len} bytes deleted at ${a}` };
    }
    case 5: {
      const b = parent.slice();
      const at = pick(random, [8, 12, 12, position()]);
      const value = pick(random, [0, 1, 2, 0xffffffff, 2 ** 31, 1 << 20, (1 << 20) + 1, hl + 1, hl - 1, int(random, 2 ** 32)]);
      if (at + 4 <= b.length) new DataView(b.buffer).setUint32(at, value >>> 0, true);
      return { bytes: b, what: `u32 at ${at} set to ${value >>> 0}` };
    }
    case 6: {
      // a text mutation of the header JSON, re-sealed
      const text = headerText(parent);
      const m = pick(random, [flipBytes, truncate, shuffleSpan, (t: string, r: Random) => splice(t, r, pick(r, ['{', '[', ']', '}', ',', '"', '\\', '1e999', '-', 'null', '"\\ud800"']), 'splice')])(text, random);
      return { bytes: resealHeader(parent, m.input), what: `header text: ${m.what}, re-sealed` };
    }
    case 7:
    case 8: {
      // a hostile value in a random field of the header, re-sealed
      let header: unknown;
      try {
        header = JSON.parse(headerText(parent));
      } catch {
        return { bytes: parent.slice(), what: 'unchanged (header not JSON)' };
      }
      const all = leaves(header);
      if (all.length === 0) return { bytes: parent.slice(), what: 'unchanged (no fields)' };
      const [obj, key] = pick(random, all);
      const old = obj[key];
      const value = random() < 0.5 || typeof old !== 'number' ? pick(random, HOSTILE) : old + pick(random, [-64, -1, 1, 8, 64, 4096]);
      if (random() < 0.1 && !Array.isArray(obj)) delete obj[key];
      else obj[key] = value;
      return { bytes: resealHeader(parent, JSON.stringify(header)), what: `header field ${String(key)} set to ${JSON.stringify(value)?.slice(0, 40)}, re-sealed` };
    }
    default: {
      // damage inside the data (after the header): only a section read can see it
      const b = parent.slice();
      const p = headerEnd + int(random, Math.max(1, b.length - headerEnd));
      if (p < b.length) b[p] = b[p]! ^ (1 << int(random, 8));
      return { bytes: b, what: `data bit flip at ${p}` };
    }
  }
}

const path = join(dir, 'mutant.lhkv');

/** Opens the file and reads every section; returns 'ok' or the typed error's class. Throws on a crash. */
async function exercise(bytes: Uint8Array): Promise<string> {
  writeFileSync(path, bytes);
  try {
    const r = await openSnapshotFile(path);
    try {
      for (const s of r.sections) {
        const got = await r.readSection(s.name);
        if (got.byteLength !== s.bytes) throw new Error(`section ${s.name} read ${got.byteLength} bytes, table says ${s.bytes}`);
      }
    } finally {
      await r.close();
    }
    return 'ok';
  } catch (error) {
    if (error instanceof LonghandError && error.code.startsWith('SNAPSHOT_') && typeof error.details.reason === 'string') return `${error.code}:${error.details.reason}`;
    throw error;
  }
}

describe('random mutations of valid KV snapshot files', () => {
  it(`never fails with anything but a SNAPSHOT_* LonghandError, never hangs (${CASES} cases)`, async () => {
    const seeds: Uint8Array[] = [];
    for (const seed of [1, 2]) {
      const meta = sampleMeta({ tokens: 9 + seed, layers: 2 + seed });
      const sections = sampleSections(meta, seed);
      const p = join(dir, `seed-${seed}.lhkv`);
      await writeSnapshotFile(p, meta, sections.map((s) => ({ name: s.name, bytes: s.data.byteLength, read: () => s.data })));
      seeds.push(new Uint8Array(readFileSync(p)));
    }
    const none = sampleMeta({ tokens: 0 });
    seeds.push(buildSnapshot(none, [], { slack: 0 }).bytes); // no sections
    for (const s of seeds) expect(await exercise(s)).toBe('ok');

    const corpus = [...seeds];
    const seen = new Set<string>(['ok']);
    const outcomes = new Map<string, number>();
    let slowest = { ms: 0, what: '' };
    const started = performance.now();
    for (let i = 0; i < CASES; i++) {
      const caseSeed = (MASTER_SEED + Math.imul(i, 0x9e3779b1)) >>> 0;
      const random = seededRandom(caseSeed);
      const { bytes, what } = mutate(pick(random, corpus), random);
      const t0 = performance.now();
      let outcome: string;
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        outcome = await Promise.race([
          exercise(bytes),
          new Promise<string>((_, reject) => {
            timer = setTimeout(() => reject(new Error(`hang: over ${HANG_MS} ms`)), HANG_MS);
          }),
        ]);
      } catch (error) {
        throw new Error(`case ${i} (seed ${caseSeed}: ${what}) threw ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`, { cause: error });
      } finally {
        clearTimeout(timer);
      }
      const ms = performance.now() - t0;
      if (ms > slowest.ms) slowest = { ms, what };
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      if (!seen.has(outcome)) {
        seen.add(outcome);
        corpus.push(bytes);
      }
    }
    const total = performance.now() - started;
    const table = [...outcomes].sort((a, b) => b[1] - a[1]).map(([k, v]) => `  ${k.padEnd(36)} ${v}`).join('\n');
    console.log(`KV snapshot mutation: ${CASES} cases in ${(total / 1000).toFixed(1)} s, corpus ${corpus.length}, slowest ${slowest.ms.toFixed(1)} ms (${slowest.what.slice(0, 80)})\n${table}`);
    // the mutations reach well past the checksum: at least these classes show up
    for (const cls of ['SNAPSHOT_CORRUPT:checksum', 'SNAPSHOT_CORRUPT:truncated', 'SNAPSHOT_CORRUPT:header', 'SNAPSHOT_CORRUPT:layout', 'SNAPSHOT_CORRUPT:counts', 'SNAPSHOT_CORRUPT:magic', 'SNAPSHOT_VERSION:version'])
      expect(outcomes.get(cls) ?? 0, `outcome ${cls}`).toBeGreaterThan(0);
    expect(total).toBeLessThan(40_000);
  }, 60_000);
});
