// Gemma 4's window layers as rings (kv/ring-checkpoints.ts) in its layered KV pool
// (native/kv-pool-layers.js: window layers 2 KV heads × 32, global layers 1 × 64, the KV-shared
// layers 6 and 7 reading layers 4 (window) and 5 (global)), on the fixture of
// test/fixtures/families/gemma4.ts (window 8):
//   - the plan: the five window layers that keep rows get rings of w − 1 + 2·chunk slots, the global
//     layer the context, the shared layers nothing; the pool is smaller than the every-row pool by
//     exactly those window rows (alignment lines aside);
//   - a ring run gives the logits of the every-row run (windowRings false) bit for bit over a
//     prompt many rings long (chunks straddling the wrap) and greedy decoding, under full and
//     InfiniGen — the shared window layer 6 walks layer 4's ring;
//   - llama.cpp agrees on the ring run: its greedy next token at every position of a 150-token
//     sequence (prompt + our greedy continuation) is ours, and the distributions agree as the
//     every-row run's did (gemma4-llama-cpp.test.ts bounds);
//   - prefix reuse after an edit in the middle resumes at a ring checkpoint, and a snapshot taken at
//     a checkpoint restores into a fresh runner; both continue token for token as a fresh run;
//   - `longhand inspect`'s per-layer estimate equals the pool's per-layer bytes and its total is
//     within 2% of the pool's after a 16K-token fill.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GEMMA4_FIXTURE, gemma4FixtureSet } from '../../../test/fixtures/families/gemma4.ts';
import { disposeLlamaCpp, llamaCppLogProbs, maxAbsLogProbDiffTopK, meanKl } from '../../../test/support/llama-cpp-reference.ts';
import { logSoftmax } from '../../../test/support/reference-forward.ts';
import { formatKvLayers } from '../../cli/commands/inspect.ts';
import { inspectModel } from '../model/inspect.ts';
import { loadModel } from '../model/load-model.ts';
import { kvRowBytes } from '../model/memory-estimate.ts';
import type { LoadedModel } from '../model/types.ts';
import { createModelRunner, type ModelRunner, type ModelRunnerOptions } from './model-runner.ts';

const dir = join(tmpdir(), 'longhand-gemma4-fixtures'); // shared with gemma4-llama-cpp.test.ts (the same files)
mkdirSync(dir, { recursive: true });
const files = gemma4FixtureSet(dir, GEMMA4_FIXTURE, ['F32', 'Q8_0']);

const CHUNK = 16; // rings of 7 + 2·16 = 39 slots: chunks of 16 straddle their wrap
const RING = GEMMA4_FIXTURE.windowTokens - 1 + 2 * CHUNK;
const BOS = 2;
const walk = (n: number, step: number): number[] => [BOS, ...Array.from({ length: n }, (_, i) => 300 + ((i * step + 11) % 40000))];
const argmax = (x: Float32Array): number => x.reduce((b, v, i, a) => (v > a[b]! ? i : b), 0);

let f32: LoadedModel;
let q8: LoadedModel;
beforeAll(async () => {
  f32 = await loadModel(files.F32);
  q8 = await loadModel(files.Q8_0);
});
afterAll(async () => {
  f32.close();
  q8.close();
  await disposeLlamaCpp();
});

const make = (model: LoadedModel, o: ModelRunnerOptions = {}): Promise<ModelRunner> => createModelRunner(model, { kvType: 'fp32', prefillChunk: CHUNK, contextLength: 512, ...o });

/** Prefill `ids` then `steps` greedy tokens; every step's logits. */
async function run(r: ModelRunner, ids: number[], steps: number): Promise<Float32Array[]> {
  const out = [await r.prefill(ids)];
  for (let i = 0; i < steps; i++) out.push(await r.decode(argmax(out.at(-1)!)));
  return out;
}

describe('Gemma 4: window layers as rings in the layered pool', () => {
  it('the plan: rings for the window layers that keep rows, the context for the global one, nothing for the shared ones; the pool smaller by those rows', async () => {
    const ring = await make(q8);
    const full = await make(q8, { windowRings: false });
    try {
      const layers = ring.kvLayers();
      expect(layers.map((l) => l.kind)).toEqual(['window', 'window', 'window', 'window', 'window', 'global', 'window', 'global']);
      expect(layers.map((l) => l.capacityTokens)).toEqual([RING, RING, RING, RING, RING, 512, 0, 0]);
      // 5 window layers × (512 − 39) slots × 2 KV heads × (K + V rows of 32 fp32 + a position)
      const saved = 5 * (512 - RING) * 2 * (2 * kvRowBytes('fp32', 32) + 4);
      console.log(`gemma4 pool at 512 tokens: rings ${ring.poolBytes} B + checkpoints ${ring.ringCheckpointBytes} B, every row ${full.poolBytes} B (${saved} B of window rows saved)`);
      expect(Math.abs(full.poolBytes - ring.poolBytes - saved)).toBeLessThanOrEqual(16 * 64); // region alignment lines
    } finally {
      await ring.dispose();
      await full.dispose();
    }
  });

  for (const policy of ['full', 'infinigen'] as const) {
    it(`'${policy}': ring logits == every-row logits bit for bit (a prompt of 120, chunks across the wrap, 30 greedy steps)`, async () => {
      const o: ModelRunnerOptions = policy === 'infinigen' ? { policy, infinigen: { alpha: 5, fetchCap: 0.3, denseLayers: 1, cacheDir: join(dir, 'skew') } } : {};
      const ring = await make(q8, o);
      const full = await make(q8, { ...o, windowRings: false });
      try {
        const ids = walk(119, 37);
        const a = await run(ring, ids, 30);
        const b = await run(full, ids, 30);
        let same = 0;
        for (let i = 0; i < a.length; i++) if (a[i]!.every((x, j) => Object.is(x, b[i]![j]))) same++;
        console.log(`gemma4 ${policy}: ${same}/${a.length} steps bit-identical; ring layer 0 holds ${ring.kvLayers()[0]!.tokens} of ${ring.position} tokens`);
        expect(same).toBe(a.length);
        expect(ring.kvLayers()[0]!.tokens).toBe(RING);
      } finally {
        await ring.dispose();
        await full.dispose();
      }
    }, 120_000);
  }

  it("F32: llama.cpp's greedy token at every position of 150 (prompt 100 + our 50 greedy ids, the rings wrapped) is ours; the distributions agree", async () => {
    const prompt = walk(99, 977);
    const r = await make(f32, { contextLength: 256 });
    const ours = [argmax(await r.prefill(prompt))];
    for (let i = 1; i < 50; i++) ours.push(argmax(await r.decode(ours.at(-1)!)));
    await r.dispose();
    const ids = [...prompt, ...ours];
    // every position's logits of the same ids, teacher-forced through the rings
    const tf = await make(f32, { contextLength: 256 });
    const logits = await tf.prefill(ids, undefined, { allLogits: true });
    await tf.dispose();
    const V = f32.hyper.vocabSize;
    const positions = [10, 60, 99, 120, 148]; // full distributions are a 262K-entry map each: a few
    const ref = await llamaCppLogProbs(files.F32, ids, { kvType: 'f32', threads: 1, contextSize: 256, positions, greedy: true });
    const oursAt = Array.from({ length: ids.length }, (_, t) => argmax(logits.subarray(t * V, (t + 1) * V)));
    // position t's next token: llama.cpp's greedy choice vs ours, every t (the generated ones are what we decoded)
    const agree = oursAt.filter((id, t) => id === ref.greedy![t]).length;
    const lp = positions.map((t) => logSoftmax(logits.subarray(t * V, (t + 1) * V)));
    const kl = meanKl(ref.logProbs, lp);
    const top5 = maxAbsLogProbDiffTopK(ref.logProbs, lp, 5);
    // the fixture's greedy runs repeat tokens (random weights); this prompt's continuation has 9 distinct ids
    console.log(`gemma4 F32 rings of ${RING} slots: ${agree}/${ids.length} greedy next tokens as llama.cpp (our 50 continue with ${new Set(ours).size} distinct ids); mean KL ${kl.toExponential(2)}, max top-5 |Δ log p| ${top5.toExponential(2)} at ${positions.join(', ')}`);
    expect(oursAt.slice(prompt.length - 1, -1)).toEqual(ours); // teacher-forced == decoded
    expect(agree).toBe(ids.length);
    expect(new Set(ours).size).toBeGreaterThan(4);
    expect(kl).toBeLessThan(1e-6);
    expect(top5).toBeLessThan(5e-3);
  }, 240_000);

  it('prefix reuse at a ring checkpoint and a snapshot from one continue token for token as a fresh run', async () => {
    const o: ModelRunnerOptions = { contextLength: 256, ringCheckpoints: { every: 32, max: 3 } };
    const prompt = walk(179, 53);
    const N = 12;
    const fresh = async (ids: number[]): Promise<number[]> => {
      const r = await make(q8, o);
      const out = (await run(r, ids, N - 1)).map(argmax);
      await r.dispose();
      return out;
    };
    const r = await make(q8, o);
    try {
      await r.prefill(prompt);
      const points = r.ringCheckpointPositions();
      console.log(`gemma4 checkpoints after a ${prompt.length}-token prompt: ${points.join(', ')} (${r.ringCheckpointBytes} bytes)`);
      expect(points.length).toBe(3);
      // an edit at 100: the rings (39 slots) hold positions 141.. only; resume at the newest checkpoint <= 100
      const cut = r.resumePoint(100);
      expect(cut).toBe(Math.max(...points.filter((p) => p <= 100)));
      expect(cut).toBeGreaterThan(0);
      // a snapshot at that checkpoint (each ring's section is the window before it, from the checkpoint)
      const sizes = Array.from({ length: q8.hyper.layers }, (_, l) => r.snapshotLayerBytes(cut, l));
      expect(sizes[6]).toBe(0);
      expect(sizes[7]).toBe(0);
      const layers = sizes.map((bytes, l) => {
        const out = new Uint8Array(bytes);
        r.exportLayer(l, cut, out);
        return out;
      });
      const edited = prompt.slice();
      edited[100] = 301;
      r.truncate(cut);
      expect(r.kvLayers()[0]!.tokens).toBe(GEMMA4_FIXTURE.windowTokens - 1); // the checkpoint's window
      const reused = (await run(r, edited.slice(cut), N - 1)).map(argmax);
      const restored = await make(q8, o);
      await restored.importSequence(cut, async (l, into) => void into.set(layers[l]!), undefined);
      const afterRestore = (await run(restored, edited.slice(cut), N - 1)).map(argmax);
      await restored.dispose();
      const want = await fresh(edited);
      console.log(`gemma4 edit at 100 of ${prompt.length}: resumed at checkpoint ${cut}; ${N} ids compared after reuse and after a restore`);
      expect(reused).toEqual(want);
      expect(afterRestore).toEqual(want);
    } finally {
      await r.dispose();
    }
  }, 120_000);

  it("`longhand inspect`'s per-layer estimate == the pool's layers, its total within 2% of the pool's after a 16K-token fill", async () => {
    const contextLength = 16384;
    // inspect assumes the runner's defaults (prefill chunk 128: rings of 7 + 256 slots)
    const r = await createModelRunner(q8, { contextLength, kvType: 'fp16' });
    try {
      r.appendRandomContextForBenchmark(contextLength, 9);
      const est = inspectModel(q8, { contextTokens: contextLength, kvType: 'fp16' }).memory;
      const text = formatKvLayers(est).join('\n');
      console.log(text);
      expect(text).toContain('layer pattern             WWWWWGwg  (W: sliding window 8, as a ring; G: global; w/g: KV-shared, reading 6→4, 7→5)');
      const figures = r.kvLayers().filter((l) => l.capacityTokens > 0); // the shared layers 6, 7 keep no rows
      expect(est.kvLayers.map((l) => [l.kind, l.slots, l.poolBytes])).toEqual(figures.map((l) => [l.kind, l.capacityTokens, l.bytes]));
      const pool = r.poolBytes + r.ringCheckpointBytes;
      const gap = Math.abs(est.kvPoolBytes - pool) / pool;
      console.log(`gemma4 16K fill: inspect ${est.kvPoolBytes} B, pool ${r.poolBytes} B + checkpoints ${r.ringCheckpointBytes} B (gap ${(gap * 100).toFixed(3)}%)`);
      expect(gap).toBeLessThan(0.02);
      expect(figures.every((l) => l.tokens === Math.min(contextLength, l.capacityTokens))).toBe(true);
    } finally {
      await r.dispose();
    }
  }, 60_000);
});
