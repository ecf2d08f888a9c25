// The token embedding read row by row from the mapped file: every RELEASE_EVERY_ROWS rows the
// runner drops the table's pages (embedding.ts says why) — for a table read only here, never for
// one that is also the LM head — and what it reads does not change: the same rows, the same logits.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGgufModel } from '../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { fixtureSet } from '../../../test/fixtures/index.ts';
import { haveSharedModel, STORIES_260K } from '../../../test/support/models.ts';
import { EmbeddingTable, RELEASE_EVERY_ROWS } from './embedding.ts';
import { createModelRunner } from './model-runner.ts';

/** The model with its releaseTensor calls recorded (names, bytes advised), or with none at all. */
function recording(model: LoadedModel, calls: { name: string; bytes: number }[] | undefined): LoadedModel {
  if (calls === undefined) return { ...model, releaseTensor: undefined };
  return {
    ...model,
    releaseTensor: (name: string) => {
      const bytes = model.releaseTensor!(name);
      calls.push({ name, bytes });
      return bytes;
    },
  };
}

/** Seeded ids below `vocab` (xorshift32). */
function ids(n: number, vocab: number, seed: number): number[] {
  let s = seed;
  return Array.from({ length: n }, () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s % vocab;
  });
}

const have = haveSharedModel();

describe.skipIf(!have)('token embedding pages', () => {
  let model: LoadedModel;
  let dir: string;
  beforeAll(() => {
    model = loadGgufModel(STORIES_260K);
    dir = mkdtempSync(path.join(os.tmpdir(), 'longhand-embd-'));
  });
  afterAll(() => {
    model?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a table with release drops its pages every RELEASE_EVERY_ROWS rows and reads the same rows', () => {
    const view = model.tensors.get('token_embd.weight')!;
    const plain = new EmbeddingTable(view);
    const calls: number[] = [];
    const released = new EmbeddingTable(view, () => {
      const bytes = model.releaseTensor!('token_embd.weight');
      calls.push(bytes);
      return bytes;
    });
    const rows = ids(2 * RELEASE_EVERY_ROWS + 7, plain.rows, 99);
    const a = new Float32Array(plain.width);
    const b = new Float32Array(plain.width);
    for (const row of rows) {
      plain.readRow(row, a, 0);
      released.readRow(row, b, 0);
      expect(Array.from(b)).toEqual(Array.from(a));
    }
    expect(calls.length).toBe(2);
    // a real mapping: the whole table's pages were advised each time (not a no-op returning 0)
    for (const bytes of calls) expect(bytes).toBeGreaterThanOrEqual(view.bytes().byteLength);
  });

  it('the runner drops an untied table every RELEASE_EVERY_ROWS prompt tokens; the logits do not change', async () => {
    const prompt = [1, ...ids(RELEASE_EVERY_ROWS + 100, 512, 7)];
    const run = async (m: LoadedModel, calls?: unknown[]) => {
      const r = await createModelRunner(m, { contextLength: 1024, policy: 'full' });
      if (calls) calls.length = 0; // what loading released (weights copied into graphs) is not the table's
      try {
        await r.prefill(prompt);
        return Array.from(await r.decode(13));
      } finally {
        await r.dispose();
      }
    };
    const calls: { name: string; bytes: number }[] = [];
    const withRelease = await run(recording(model, calls), calls);
    const without = await run(recording(model, undefined));
    expect(withRelease).toEqual(without);
    // prompt.length + 1 rows read (the decoded token's too): one release per 256
    expect(calls.map((c) => c.name)).toEqual(Array(Math.floor((prompt.length + 1) / RELEASE_EVERY_ROWS)).fill('token_embd.weight'));
    expect(calls.every((c) => c.bytes > 0)).toBe(true);
  });

  it('never drops a table that is also the LM head (tied embeddings)', async () => {
    const tied = loadGgufModel(fixtureSet(dir).gguf.tied);
    try {
      expect(tied.tensors.has('output.weight')).toBe(false);
      const calls: { name: string; bytes: number }[] = [];
      const r = await createModelRunner(recording(tied, calls), { contextLength: 256, policy: 'full' });
      calls.length = 0; // loading may release it once its bytes are in a graph: not the table's doing
      try {
        // 255 prompt rows and the decoded token's: RELEASE_EVERY_ROWS rows read, the fixture's whole context
        await r.prefill([1, ...ids(RELEASE_EVERY_ROWS - 2, tied.hyper.vocabSize, 3)]);
        await r.decode(5);
      } finally {
        await r.dispose();
      }
      expect(calls.filter((c) => c.name === 'token_embd.weight')).toEqual([]);
    } finally {
      tied.close();
    }
  });
});
