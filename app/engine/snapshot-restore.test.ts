// KV snapshots through the engine core on both reference models (issue 10 §3): a saved sequence
// restored into a freshly loaded engine gives token for token the text of a fresh run (full fp16 and
// int8; InfiniGen against a fresh InfiniGen run), with its rows read straight into the pool; damaged
// and mismatched snapshots are refused with their typed code and reason, the cache is left empty,
// and the next generation is the fresh run's; document snapshots restore the document the cache
// does not hold.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LonghandError } from '../common/errors.ts';
import { GenerateParamsSchema, LoadOptionsSchema, type GenerateParamsInput, type LoadOptionsInput } from '../common/protocol.ts';
import { haveSharedModel, KJV_EVAL_DIR, KJV_HD64, STORIES_260K } from '../../test/support/models.ts';
import { headerText, resealHeader } from './kv/snapshot-test-builder.ts';
import { SNAPSHOT_FORMAT_VERSION } from './kv/snapshot-file.ts';
import { createEngineCore } from './engine.ts';
import type { EngineCore, GenerationEvent } from './host/engine-core.ts';

type Done = Extract<GenerationEvent, { kind: 'done' }>;

async function run(core: EngineCore, prompt: number[], params: GenerateParamsInput = {}): Promise<{ ids: number[]; done: Done }> {
  const ids: number[] = [];
  let done: Done | undefined;
  for await (const e of core.generate({ ids: prompt }, GenerateParamsSchema.parse({ maxTokens: 24, stopOnEos: false, sampling: { temperature: 0 }, ...params }), new AbortController().signal)) {
    if (e.kind === 'token') ids.push(e.id);
    else if (e.kind === 'done') done = e;
  }
  return { ids, done: done! };
}

async function refusal(p: Promise<unknown>): Promise<{ code: string; reason: unknown }> {
  const error = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, 'the snapshot was accepted').toBeInstanceOf(LonghandError);
  const e = error as LonghandError;
  return { code: e.code, reason: e.details.reason };
}

const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high.';
const CASES = [
  { name: 'stories260K', model: STORIES_260K, text: STORY },
  { name: 'kjv-llama-hd64', model: KJV_HD64, text: haveSharedModel(KJV_HD64) ? readFileSync(path.join(KJV_EVAL_DIR, 'jonah-1.txt'), 'utf8').slice(0, 900) : '' },
];

for (const c of CASES) {
  describe.skipIf(!haveSharedModel(c.model))(`KV snapshots through the engine (${c.name})`, () => {
    let dir: string;
    const before = process.env.XDG_CACHE_HOME;
    beforeAll(() => {
      dir = mkdtempSync(path.join(os.tmpdir(), 'longhand-snapshot-engine-'));
      process.env.XDG_CACHE_HOME = path.join(dir, 'cache');
    });
    afterAll(() => {
      if (before === undefined) delete process.env.XDG_CACHE_HOME;
      else process.env.XDG_CACHE_HOME = before;
      rmSync(dir, { recursive: true, force: true });
    });

    async function loaded(options: Partial<LoadOptionsInput> = {}): Promise<EngineCore> {
      const core = createEngineCore(() => {});
      await core.load(LoadOptionsSchema.parse({ modelPath: c.model, threads: 1, contextLength: 768, prefillChunk: 64, ...options }));
      return core;
    }

    for (const options of [{ kvType: 'fp16' }, { kvType: 'int8' }, { policy: 'infinigen', infinigen: { fetchCap: 0.2 } }] as const) {
      it(`saves and restores into a fresh engine: the continuation equals a fresh run (${JSON.stringify(options)})`, async () => {
        const file = path.join(dir, `${JSON.stringify(options).replace(/\W/g, '')}.lhkv`);
        const a = await loaded(options);
        const P = a.tokenize(c.text, true);
        const first = await run(a, P);
        const saved = await a.saveSnapshot(file);
        // full keeps the prompt and the generated tokens but the last; InfiniGen the prompt (its decode steps attended sparsely)
        expect(saved.tokens).toBe(options.kvType ? P.length + first.ids.length - 1 : P.length);
        expect(saved.bytes).toBe(statSync(file).size);
        await a.unload();

        const b = await loaded(options);
        const P2 = [...P, ...first.ids];
        const restored = await b.loadSnapshot(file);
        expect(restored.tokens).toBe(saved.tokens);
        const continued = await run(b, P2);
        expect(continued.done.cache).toMatchObject({ reusedTokens: saved.tokens, prefilledTokens: P2.length - saved.tokens });
        const fresh = await run(b, P2, { reusePrefix: false });
        expect(continued.ids).toEqual(fresh.ids);
        await b.unload();
      });
    }

    it('refuses damaged and mismatched snapshots with their typed reason, never half-restores the cache, and the next run equals a fresh one', async () => {
      const core = await loaded();
      const P = core.tokenize(c.text, true);
      const good = path.join(dir, 'good.lhkv');
      await run(core, P);
      await core.saveSnapshot(good);
      const fresh = await run(core, P, { reusePrefix: false });
      const bytes = new Uint8Array(readFileSync(good));
      const header = JSON.parse(headerText(bytes)) as { meta: Record<string, unknown>; sections: { name: string; offset: number; bytes: number }[] };
      const at = (name: string) => header.sections.find((s) => s.name === name)!;
      const write = (name: string, data: Uint8Array): string => {
        const p = path.join(dir, `${name}.lhkv`);
        writeFileSync(p, data);
        return p;
      };
      const flip = (offset: number): Uint8Array => {
        const copy = bytes.slice();
        copy[offset]! ^= 0x10;
        return copy;
      };
      const withMeta = (patch: Record<string, unknown>): Uint8Array => resealHeader(bytes, JSON.stringify({ ...header, meta: { ...header.meta, ...patch } }));
      const version = bytes.slice();
      new DataView(version.buffer).setUint32(8, SNAPSHOT_FORMAT_VERSION - 1, true); // an older format (v1: before the linear-attention state sections)
      const layer0 = at('layer.0');
      const last = header.sections.at(-1)!;
      mkdirSync(path.join(dir, 'a-directory.lhkv'), { recursive: true });
      const cases: [string, string, string, unknown][] = [
        ['wrong model hash', write('model', withMeta({ modelSha256: 'cd'.repeat(32) })), 'SNAPSHOT_MISMATCH', 'model'],
        ['other shape', write('shape', withMeta({ layers: (header.meta.layers as number) + 1 })), 'SNAPSHOT_MISMATCH', 'shape'],
        ['other KV type', write('kvtype', withMeta({ kvType: 'int8' })), 'SNAPSHOT_MISMATCH', 'kvType'],
        ['other vocabulary', write('vocab', withMeta({ vocabSize: 7 })), 'SNAPSHOT_MISMATCH', 'vocab'],
        ['truncated in the magic', write('t-magic', bytes.subarray(0, 5)), 'SNAPSHOT_CORRUPT', 'truncated'],
        ['truncated in the header', write('t-header', bytes.subarray(0, 40)), 'SNAPSHOT_CORRUPT', 'truncated'],
        ['truncated in a layer', write('t-layer', bytes.subarray(0, layer0.offset + Math.floor(layer0.bytes / 2))), 'SNAPSHOT_CORRUPT', 'truncated'],
        ['truncated before the last section ends', write('t-end', bytes.subarray(0, last.offset + last.bytes - 1)), 'SNAPSHOT_CORRUPT', 'truncated'],
        ['flipped header byte', write('f-header', flip(20)), 'SNAPSHOT_CORRUPT', 'checksum'],
        ...header.sections.map((s): [string, string, string, unknown] => [`flipped byte in ${s.name}`, write(`f-${s.name}`, flip(s.offset + Math.floor(s.bytes / 2))), 'SNAPSHOT_CORRUPT', 'checksum']),
        ['absurd token count', write('absurd', withMeta({ tokens: 2 ** 40 })), 'SNAPSHOT_CORRUPT', 'counts'],
        ['future version', write('version', version), 'SNAPSHOT_VERSION', 'version'],
        ['empty file', write('empty', new Uint8Array(0)), 'SNAPSHOT_CORRUPT', 'empty'],
        ['not a snapshot', write('magic', new TextEncoder().encode('GGUF and then some more bytes than a prefix')), 'SNAPSHOT_CORRUPT', 'magic'],
        ['a directory', path.join(dir, 'a-directory.lhkv'), 'SNAPSHOT_UNREADABLE', 'not-a-file'],
        ['missing', path.join(dir, 'missing.lhkv'), 'SNAPSHOT_UNREADABLE', 'missing'],
      ];
      expect(cases.length).toBeGreaterThanOrEqual(15);
      for (const [what, file, code, reason] of cases) {
        await run(core, P); // something in the cache that a failed restore must not leave half-replaced
        expect(await refusal(core.loadSnapshot(file)), what).toEqual({ code, reason });
        const next = await run(core, P);
        expect(next.ids, what).toEqual(fresh.ids);
      }
      await core.unload();
    });

    it('document snapshots: a Continue on the document the cache does not hold restores its snapshot; the cap evicts the oldest', async () => {
      const core = await loaded();
      await core.configureSnapshots({ dir: path.join(dir, 'docs'), capBytes: 1 << 30 });
      const P = core.tokenize(c.text, true);
      const Q = core.tokenize(c.text.split('').reverse().join(''), true);
      const a1 = await run(core, P, { document: 'doc-a' });
      expect(a1.done.cache?.snapshot).toMatchObject({ saved: true, restored: false });
      await run(core, Q, { document: 'doc-b' }); // the cache now holds document b
      const P2 = [...P, ...a1.ids];
      const a2 = await run(core, P2, { document: 'doc-a' });
      expect(a2.done.cache).toMatchObject({ source: 'snapshot', reusedTokens: P2.length - 1, snapshot: { restored: true, saved: true } });
      expect(a2.ids).toEqual((await run(core, P2, { reusePrefix: false })).ids);
      // a generation for no document (a Rewrite) replaces the cache: the next Continue restores the draft again
      await run(core, Q);
      const P3 = [...P2, ...a2.ids];
      const a3 = await run(core, P3, { document: 'doc-a' });
      expect(a3.done.cache).toMatchObject({ source: 'snapshot', reusedTokens: P3.length - 1, snapshot: { restored: true } });
      const stats = await core.snapshotStats();
      expect(stats.count).toBe(2);
      const capped = await core.configureSnapshots({ dir: path.join(dir, 'docs'), capBytes: stats.bytes - 1 }); // just under both: the least recently used (document b) goes
      expect(capped.count).toBe(1);
      expect((await core.clearSnapshots()).count).toBe(0);
      await core.unload();
    });
  });
}
