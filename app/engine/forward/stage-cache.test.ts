// The stage cache (stage-cache.ts, stage-sessions.ts) with real models and the real onnxruntime:
// a warm load gives the cold load's logits bit for bit and builds no stage; damaged entries of every
// kind are removed and rebuilt; the least recently used entries go past the cap; no cache, an
// unusable folder and a cap below one model cost nothing but the cache. And the guard of
// STAGE_GRAPH_VERSION: stories260K's stage graphs, byte for byte.
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertGguf } from '../../../test/support/convert-gguf.ts';
import { haveSharedModel, KJV_HD64, STORIES_260K } from '../../../test/support/models.ts';
import { loadModel } from '../model/load-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { buildStage } from './graphs.ts';
import { createModelRunner, type ModelRunnerOptions } from './model-runner.ts';
import { alignExternalData } from '../onnx/external-data-align.ts';
import { createSession } from '../onnx/session.ts';
import { emptyStageCacheStats, GRAPH_FILE, MANIFEST_FILE, STAGE_CACHE_FOLDER, STAGE_GRAPH_VERSION, WEIGHTS_FILE } from './stage-cache.ts';
import { reloadedTheSame } from './stage-sessions.ts';
import { ModelWeights } from './weights.ts';

const have = haveSharedModel();
const haveKjv = haveSharedModel(KJV_HD64);
const PROMPT = [1, 403, 407, 261, 378, 275, 266, 1024 % 512, 99, 7];

/** Logits of a prefill and four greedy decode steps, as raw bits. */
async function logitBits(model: LoadedModel, options: ModelRunnerOptions): Promise<{ bits: Uint32Array[]; stats: ReturnType<typeof statsOf>; progress: number[] }> {
  const progress: number[] = [];
  // onnxruntime's stages, the ones the cache holds (the native ones are the default for these models)
  const r = await createModelRunner(model, { kvType: 'fp32', contextLength: 64, threads: 1, dense: 'onnx', ...options, onProgress: (p) => progress.push(p.done) });
  try {
    const bits: Uint32Array[] = [];
    let logits = await r.prefill(PROMPT.map((id) => id % r.vocabSize));
    for (let i = 0; i < 4; i++) {
      bits.push(new Uint32Array(logits.buffer.slice(logits.byteOffset, logits.byteOffset + logits.byteLength)));
      let best = 0;
      for (let j = 1; j < logits.length; j++) if (logits[j]! > logits[best]!) best = j;
      logits = await r.decode(best);
    }
    return { bits, stats: statsOf(r.stageCache), progress };
  } finally {
    await r.dispose();
  }
}
const statsOf = (s: { hits: number; misses: number; stored: number; dropped: number; evicted: number; problems: string[] } | undefined) => s && { ...s };

const entries = (cacheDir: string): string[] => readdirSync(join(cacheDir, STAGE_CACHE_FOLDER)).filter((n) => /^[0-9a-f]{64}$/.test(n)).sort();
const entryBytes = (cacheDir: string, key: string): number => readdirSync(join(cacheDir, STAGE_CACHE_FOLDER, key)).reduce((n, f) => n + statSync(join(cacheDir, STAGE_CACHE_FOLDER, key, f)).size, 0);

describe.skipIf(!have)('stage cache on stories260K', () => {
  let model: LoadedModel;
  let root: string;
  let reference: Uint32Array[];
  const stages = (): number => model.hyper.layers + 1;

  beforeAll(async () => {
    model = await loadModel(STORIES_260K);
    root = mkdtempSync(join(tmpdir(), 'longhand-stage-cache-'));
    reference = (await logitBits(model, {})).bits; // no cache at all
  });
  afterAll(() => {
    model?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('a cold load stores every stage, a warm one builds none and gives the same logits bit for bit, with progress per stage', async () => {
    const dir = join(root, 'warm');
    const cold = await logitBits(model, { stageCache: { dir } });
    expect(cold.stats).toMatchObject({ hits: 0, misses: stages(), stored: stages(), dropped: 0 });
    expect(entries(dir)).toHaveLength(stages());
    const warm = await logitBits(model, { stageCache: { dir } });
    expect(warm.stats).toMatchObject({ hits: stages(), misses: 0, stored: 0, dropped: 0, problems: [] });
    expect(warm.progress).toEqual(Array.from({ length: stages() }, (_, i) => i + 1));
    expect(cold.bits).toEqual(reference);
    expect(warm.bits).toEqual(reference);
    // another thread count reads the same entries (MLAS packs independently of it) and computes what a cold load with it does
    const warm2 = await logitBits(model, { stageCache: { dir }, threads: 2 });
    expect(warm2.stats).toMatchObject({ hits: stages(), misses: 0 });
    expect(warm2.bits).toEqual((await logitBits(model, { threads: 2 })).bits);
  });

  it('keys by what the graphs depend on: another accuracy level or InfiniGen graphs are other entries, another context length is not', async () => {
    const dir = join(root, 'keys');
    await logitBits(model, { stageCache: { dir } });
    const before = entries(dir);
    // the RoPE rows are fed per run (graphs.ts): a context length of 96 loads the same entries
    expect((await logitBits(model, { stageCache: { dir }, contextLength: 96 })).stats).toMatchObject({ hits: stages(), stored: 0 });
    expect((await logitBits(model, { stageCache: { dir }, accuracyLevel: 0 })).stats).toMatchObject({ hits: 0, stored: stages() });
    // InfiniGen (denseLayers 2 of 5): stages 1..3 output the next layer's speculative query, 0 and 4..5 do not
    const ig = await logitBits(model, { stageCache: { dir }, policy: 'infinigen', infinigen: { cacheDir: join(root, 'skew') } });
    expect(ig.stats).toMatchObject({ hits: 3, misses: 3, stored: 3 });
    expect(entries(dir)).toHaveLength(before.length + stages() + 3);
  });

  it('removes a damaged entry of any kind, builds that stage from the GGUF and stores it again', async () => {
    const dir = join(root, 'damage');
    await logitBits(model, { stageCache: { dir } });
    const keys = entries(dir);
    const at = (i: number, f: string): string => join(dir, STAGE_CACHE_FOLDER, keys[i]!, f);
    writeFileSync(at(0, MANIFEST_FILE), '{"version":1,"keyText":'); // garbage manifest
    rmSync(at(1, MANIFEST_FILE)); // no manifest
    truncateSync(at(2, WEIGHTS_FILE), statSync(at(2, WEIGHTS_FILE)).size - 100); // truncated weights
    const fd = openSync(at(3, WEIGHTS_FILE), 'r+'); // same size, other bytes (a block the check samples: the first)
    writeSync(fd, Buffer.alloc(4096, 0x55), 0, 4096, 0);
    closeSync(fd);
    // a graph file onnxruntime refuses, its manifest made to agree with it: only onnxruntime can tell
    const graph = at(4, GRAPH_FILE);
    writeFileSync(graph, Buffer.from('not a model'));
    const manifest = JSON.parse(readFileSync(at(4, MANIFEST_FILE), 'utf8')) as { files: Record<string, { size: number; sha256: string }> };
    manifest.files[GRAPH_FILE] = { size: statSync(graph).size, sha256: createHash('sha256').update(readFileSync(graph)).digest('hex') };
    writeFileSync(at(4, MANIFEST_FILE), JSON.stringify(manifest));
    rmSync(at(5, WEIGHTS_FILE)); // missing weights
    const damaged = await logitBits(model, { stageCache: { dir } });
    expect(damaged.stats).toMatchObject({ hits: 0, misses: 6, dropped: 6, stored: 6 });
    expect(damaged.stats!.problems.join('\n')).toMatch(/onnxruntime refused it/);
    expect(damaged.bits).toEqual(reference);
    expect(entries(dir)).toEqual(keys);
    expect(readdirSync(join(dir, STAGE_CACHE_FOLDER)).filter((n) => n.startsWith('.'))).toEqual([]); // no staging or trash left
    expect((await logitBits(model, { stageCache: { dir } })).stats).toMatchObject({ hits: 6, dropped: 0 });
  });

  it('evicts the least recently used entries past the cap, never the ones of the load in progress', async () => {
    // stories260K is F32: accuracy levels 0..2 build the same graphs (equal sizes) under different keys
    const dir = join(root, 'cap');
    await logitBits(model, { stageCache: { dir }, accuracyLevel: 0 });
    const a = entries(dir);
    const setBytes = a.reduce((n, k) => n + entryBytes(dir, k), 0);
    const cap = 2 * setBytes + 100; // two models' worth, less than one more entry
    expect((await logitBits(model, { stageCache: { dir, maxBytes: cap }, accuracyLevel: 1 })).stats).toMatchObject({ stored: stages(), evicted: 0 });
    const b = entries(dir).filter((k) => !a.includes(k));
    expect(b).toHaveLength(stages());
    // A is used again, so B is now the least recently used
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await logitBits(model, { stageCache: { dir, maxBytes: cap }, accuracyLevel: 0 })).stats).toMatchObject({ hits: stages() });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const c = await logitBits(model, { stageCache: { dir, maxBytes: cap }, accuracyLevel: 2 });
    expect(c.stats).toMatchObject({ stored: stages(), evicted: stages() });
    const left = entries(dir);
    expect(a.every((k) => left.includes(k))).toBe(true);
    expect(b.some((k) => left.includes(k))).toBe(false);
    expect(left).toHaveLength(2 * stages());
  });

  it('a cap below one model stores what fits and says so; the load is unaffected', async () => {
    const dir = join(root, 'tiny');
    const r = await logitBits(model, { stageCache: { dir, maxBytes: 1 } });
    expect(r.stats).toMatchObject({ stored: 0, misses: stages() });
    expect(r.stats!.problems.join('\n')).toMatch(/pass the cap/);
    expect(r.bits).toEqual(reference);
    expect(entries(dir)).toEqual([]);
  });

  it('no cache: nothing written, no figures; an unusable folder costs only the cache', async () => {
    const off = await logitBits(model, {});
    expect(off.stats).toBeUndefined();
    const file = join(root, 'a-file');
    writeFileSync(file, 'x');
    const blocked = await logitBits(model, { stageCache: { dir: file } });
    expect(blocked.stats).toMatchObject({ hits: 0, misses: 0, stored: 0 });
    expect(blocked.stats!.problems.join('\n')).toMatch(/stage cache off: cannot create/);
    expect(blocked.bits).toEqual(reference);
  });

  it('two loads writing the same entries at once both work and leave one complete set', async () => {
    const dir = join(root, 'race');
    const [x, y] = await Promise.all([logitBits(model, { stageCache: { dir } }), logitBits(model, { stageCache: { dir } })]);
    expect(x.bits).toEqual(reference);
    expect(y.bits).toEqual(reference);
    expect(entries(dir)).toHaveLength(stages());
    expect((await logitBits(model, { stageCache: { dir } })).stats).toMatchObject({ hits: stages(), dropped: 0 });
  });

  it('STAGE_GRAPH_VERSION guard: the stage graphs of stories260K are the ones the version was recorded with', () => {
    const w = new ModelWeights(model, 4);
    const hash = createHash('sha256');
    for (const speculateNext of [false, true]) {
      for (let s = 0; s < stages(); s++) hash.update(buildStage(w, s, { speculateNext }).model);
    }
    const sha = hash.digest('hex');
    const recorded = { version: 2, sha256: '859ddb6987cb1bc2f6457652677cc4715b76371b5bac95f03133a2032e882058' };
    expect(
      { version: STAGE_GRAPH_VERSION, sha256: sha },
      `buildStage's output changed (sha256 ${sha}): cached stages built by the old code would be loaded for the new one. ` +
        `Bump STAGE_GRAPH_VERSION in app/engine/forward/stage-cache.ts and record the new version and sha256 here.`,
    ).toEqual(recorded);
  });
});

describe.skipIf(!haveKjv)('stage cache on kjv-llama-hd64 (F32 and Q8_0: pre-packed MatMulNBits weights)', () => {
  const root = mkdtempSync(join(tmpdir(), 'longhand-stage-cache-kjv-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('an entry onnxruntime reloads wrongly is not used: the check on a probe input catches its unaligned blobs under accuracy level 4', async () => {
    const file = join(root, 'kjv-Q8_0.gguf');
    if (!existsSync(file)) convertGguf(KJV_HD64, file, 'Q8_0');
    const model = await loadModel(file);
    try {
      const built = buildStage(new ModelWeights(model, 4), 1, {});
      const verdicts: (string | undefined)[] = [];
      for (const aligned of [false, true]) {
        const staged = mkdtempSync(join(root, 'staged-'));
        const cold = await createSession(built.model, { intraOpThreads: 1, saveOptimized: { modelPath: join(staged, GRAPH_FILE), externalFile: WEIGHTS_FILE } });
        if (aligned) await alignExternalData(join(staged, GRAPH_FILE), WEIGHTS_FILE);
        const stats = emptyStageCacheStats();
        const warm = await reloadedTheSame(cold, staged, { intraOpThreads: 1 }, built, model.hyper, stats);
        verdicts.push(warm ? 'same' : stats.problems.join('; '));
        await warm?.release();
        await cold.release();
      }
      expect(verdicts[0]).toMatch(/reloaded by onnxruntime computes other \w+ values than the graph it saved/);
      expect(verdicts[1]).toBe('same');
    } finally {
      model.close();
    }
  });

  // MatMulNBits' pre-packed blobs under accuracy level 4 (the default, CompInt8) and 0
  it.each([
    ['F32', 4],
    ['Q8_0', 4],
    ['Q8_0', 0],
  ] as const)('%s, accuracy level %i: warm logits equal cold and uncached logits bit for bit', async (type, accuracyLevel) => {
    let file = KJV_HD64;
    if (type !== 'F32') {
      file = join(root, `kjv-${type}.gguf`);
      if (!existsSync(file)) convertGguf(KJV_HD64, file, type);
    }
    const model = await loadModel(file);
    try {
      const dir = join(root, `cache-${type}-${accuracyLevel}`);
      const none = await logitBits(model, { accuracyLevel });
      const cold = await logitBits(model, { stageCache: { dir }, accuracyLevel });
      const warm = await logitBits(model, { stageCache: { dir }, accuracyLevel });
      expect(cold.stats).toMatchObject({ stored: model.hyper.layers + 1 });
      expect(warm.stats).toMatchObject({ hits: model.hyper.layers + 1, misses: 0 });
      expect(existsSync(join(dir, STAGE_CACHE_FOLDER, entries(dir)[0]!, WEIGHTS_FILE))).toBe(true);
      expect(cold.bits).toEqual(none.bits);
      expect(warm.bits).toEqual(none.bits);
    } finally {
      model.close();
    }
  });
});
