// Sliding-window layers as rings (kv/ring-checkpoints.ts), on a llama-family fixture whose layers
// get Gemma 3's pattern (5 window : 1 global, window 16; test/support/window-layers.ts):
//   - a ring run gives the logits of the same model keeping every row (windowRings false, the
//     kernels masking by window), bit for bit: a prompt several windows long in chunks that
//     straddle the wrap, then greedy decode, under 'full' and a comparison policy;
//   - prefix reuse after an edit in the middle of a long draft resumes at the newest ring checkpoint
//     at or before the edit (reusedTokens says how many were really kept), an edit inside the
//     rings' slack keeps the whole common prefix, and either continues token for token as a fresh run;
//   - a snapshot restored into a fresh runner continues token for token as the saved one;
//   - the step metrics and /metrics split the KV bytes by layer kind;
//   - `longhand inspect`'s per-layer estimate (layer pattern, kinds) matches the pool's bytes after a
//     16K-token fill within 2%.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel } from '../model/load-model.ts';
import { estimateMemory } from '../model/memory-estimate.ts';
import { inspectModel } from '../model/inspect.ts';
import { formatKvLayers } from '../../cli/commands/inspect.ts';
import type { LoadedModel } from '../model/types.ts';
import { writeLlamaGguf } from '../../../test/fixtures/index.ts';
import { withWindowLayers } from '../../../test/support/window-layers.ts';
import { CachedSequence } from './cached-sequence.ts';
import { createModelRunner, type ModelRunner, type ModelRunnerOptions } from './model-runner.ts';
import { restoreSequenceSnapshot, saveSequenceSnapshot, type SnapshotIdentity } from './sequence-snapshot.ts';
import { ModelInfoSchema, StepMetricsSchema, type ModelInfo } from '../../common/protocol.ts';
import { StepMetricsSampler } from '../metrics/step-metrics.ts';
import { kvPoolBytes, ServerMetrics } from '../../server/metrics.ts';

const dir = join(tmpdir(), 'longhand-window-rings');
mkdirSync(dir, { recursive: true });
const path = join(dir, 'llama-6l-window.gguf');
// 6 layers: 0-4 window, 5 global; small dims, a real llama layout
writeLlamaGguf(path, { dim: 64, layers: 6, heads: 4, kvHeads: 2, ffn: 128, context: 16384, vocab: 400, seed: 77, type: 'F32' });

const WINDOW = 16;
const CHUNK = 24; // ring = 15 + 2·24 = 63 slots: chunks straddle its wrap
const prompt = (n: number, salt = 0): number[] => Array.from({ length: n }, (_, i) => (i * 31 + 7 + salt * 13) % 397 + 1);
const argmax = (x: Float32Array): number => x.reduce((b, v, i, a) => (v > a[b]! ? i : b), 0);

let model: LoadedModel;
let restore: () => void;

beforeAll(async () => {
  restore = withWindowLayers(6, WINDOW);
  model = await loadModel(path);
});

afterAll(() => {
  model.close();
  restore();
});

const make = (o: ModelRunnerOptions = {}): Promise<ModelRunner> => createModelRunner(model, { kvType: 'fp32', prefillChunk: CHUNK, contextLength: 512, dense: 'native', ...o });

/** Prefill `ids` then `steps` greedy tokens; every step's logits. */
async function run(r: ModelRunner, ids: number[], steps: number): Promise<Float32Array[]> {
  const out = [await r.prefill(ids)];
  for (let i = 0; i < steps; i++) out.push(await r.decode(argmax(out[out.length - 1]!)));
  return out;
}

describe('sliding-window layers as rings', () => {
  it('the layer plan: 5 window layers with rings of w − 1 + 2·chunk slots, 1 global with the context', async () => {
    const r = await make();
    const layers = r.kvLayers();
    expect(layers.map((l) => l.kind)).toEqual(['window', 'window', 'window', 'window', 'window', 'global']);
    expect(layers.map((l) => l.capacityTokens)).toEqual([63, 63, 63, 63, 63, 512]);
    const full = await make({ windowRings: false });
    console.log(`pool bytes at 512 tokens: rings ${r.poolBytes} + checkpoints ${r.ringCheckpointBytes}, every row ${full.poolBytes}`);
    expect(r.poolBytes).toBeLessThan(full.poolBytes / 3);
    await r.dispose();
    await full.dispose();
  });

  const policyOptions = (policy: 'full' | 'streaming' | 'infinigen'): ModelRunnerOptions =>
    policy === 'full' ? {} : policy === 'infinigen' ? { policy, infinigen: { cacheDir: dir, fetchCap: 0.3 } } : { policy, sparse: { budget: 24, sinks: 2 } };

  for (const policy of ['full', 'streaming', 'infinigen'] as const) {
    it(`'${policy}': ring logits == every-row logits bit for bit (prompt of 10 windows, chunks across the wrap, 40 greedy steps)`, async () => {
      const o = policyOptions(policy);
      const ring = await make(o);
      const full = await make({ ...o, windowRings: false });
      const a = await run(ring, prompt(160), 40);
      const b = await run(full, prompt(160), 40);
      let same = 0;
      for (let i = 0; i < a.length; i++) if (a[i]!.every((x, j) => Object.is(x, b[i]![j]))) same++;
      console.log(`${policy}: ${same}/${a.length} steps bit-identical; ring layer 0 holds ${ring.kvLayers()[0]!.tokens} of ${ring.position} tokens`);
      expect(same).toBe(a.length);
      expect(ring.kvLayers()[0]!.tokens).toBe(63);
      // the window layers attend their window (15 past tokens); the global layer what the policy picks
      const stats = ring.lastStepStats()!.layers;
      expect(stats.slice(0, 5).map((l) => l.selected)).toEqual([15, 15, 15, 15, 15]);
      // the window slides by one a step: per KV head (2) 14 of its 15 rows were in the previous list (the ring wrapping included)
      expect(stats.slice(0, 5).map((l) => [l.hits, l.misses])).toEqual(Array.from({ length: 5 }, () => [28, 2]));
      if (policy !== 'full') expect(stats[5]!.selected).toBeLessThan(stats[5]!.candidates);
      else expect(stats[5]!.selected).toBe(stats[5]!.candidates);
      await ring.dispose();
      await full.dispose();
    });
  }

  for (const policy of ['full', 'infinigen'] as const)
  it(`'${policy}', prefix reuse: an edit in the middle resumes at the newest checkpoint before it, one inside the slack keeps the whole prefix; both == a fresh run`, async () => {
    const r = await make({ ...policyOptions(policy), ringCheckpoints: { every: 64, max: 3 } });
    const seq = new CachedSequence(r);
    const draft = prompt(400);
    seq.reuse(draft, true);
    await seq.prefill(draft);
    // chunks end at multiples of 24; a checkpoint at the first chunk end past each multiple of 64,
    // thinned to 3 spread over the draft
    const points = r.ringCheckpointPositions();
    console.log(`checkpoints after a 400-token prompt: ${points.join(', ')} (${r.ringCheckpointBytes} bytes)`);
    expect(points.length).toBe(3);
    expect(points.at(-1)).toBe(384);

    // an edit at 200: the rings no longer hold the window there; resume at the newest checkpoint <= 200
    const edited = draft.slice();
    edited[200] = (edited[200]! % 396) + 2;
    const plan = seq.reuse(edited, true);
    const expected = Math.max(...points.filter((p) => p <= 200));
    console.log(`edit at 200 of 400: reusedTokens ${plan.reused} (checkpoint), ${edited.length - plan.reused} recomputed`);
    expect(plan.reused).toBe(expected);
    expect(plan.reused).toBeGreaterThan(0);
    const a = [await seq.prefill(edited)];
    for (let i = 0; i < 20; i++) a.push(await seq.decode(argmax(a.at(-1)!)));

    // an edit 10 tokens before the end: inside the rings' slack, the whole common prefix is kept
    // ('full' only: a token decoded under a sparse policy is recomputed, cached-sequence.ts)
    const late = seq.tokens.slice(); // the edited draft and its 20 generated tokens
    late.push(...prompt(20, 3));
    late[410] = (late[410]! % 396) + 2;
    const checks: [number[], Float32Array[]][] = [[edited, a]];
    if (policy === 'full') {
      const cached = seq.tokens.length;
      const plan2 = seq.reuse(late, true);
      console.log(`edit at 410 of ${cached} cached: reusedTokens ${plan2.reused}`);
      expect(plan2.reused).toBe(410);
      const c = [await seq.prefill(late)];
      for (let i = 0; i < 20; i++) c.push(await seq.decode(argmax(c.at(-1)!)));
      checks.push([late, c]);
    }

    for (const [ids, got] of checks) {
      const fresh = await make(policyOptions(policy));
      const want = await run(fresh, ids, 20);
      expect(got.map(argmax)).toEqual(want.map(argmax));
      for (let i = 0; i < got.length; i++) expect(Array.from(got[i]!)).toEqual(Array.from(want[i]!));
      await fresh.dispose();
    }
    await r.dispose();
  });

  it('an abort in the middle of a chunk (some rings already took it) rolls back exactly: resuming == an unaborted run, bit for bit', async () => {
    const r = await make();
    const ids = prompt(160, 9);
    // the runner reads `aborted` once on entry and once per layer: abort at layer 3 of the 4th chunk
    let reads = 0;
    const signal = { get aborted() { return ++reads > 1 + 6 * 3 + 3; }, reason: new Error('test abort') } as unknown as AbortSignal;
    const error = await r.prefill(ids, signal).catch((e: unknown) => e);
    expect((error as Error).name).toBe('AbortError');
    expect(r.position).toBe(72); // three whole chunks of 24
    const a = [await r.prefill(ids.slice(72))];
    for (let i = 0; i < 20; i++) a.push(await r.decode(argmax(a.at(-1)!)));
    const fresh = await make();
    const b = await run(fresh, ids, 20);
    expect(a.every((x, i) => x.every((v, j) => Object.is(v, b[i]![j])))).toBe(true);
    await r.dispose();
    await fresh.dispose();
  });

  it('a snapshot (rings from a checkpoint) restores into a fresh runner and continues token for token', async () => {
    const r = await make({ ringCheckpoints: { every: 64, max: 4 } });
    const seq = new CachedSequence(r);
    const ids = prompt(300, 5);
    seq.reuse(ids, true);
    let logits = await seq.prefill(ids);
    for (let i = 0; i < 10; i++) logits = await seq.decode(argmax(logits)); // decoded under 'full': exact
    const identity: SnapshotIdentity = { modelSha256: 'ab'.repeat(32), architecture: 'llama', layers: 6, heads: 4, kvHeads: 2, headDim: 16, vocabSize: 400, kvType: 'fp32', policy: 'full', knobs: {} };
    const file = join(dir, 'rings.lhkv');
    const saved = await saveSequenceSnapshot(file, seq, identity);
    expect(saved.tokens).toBe(310);
    const more = async (s: CachedSequence, n: number): Promise<number[]> => {
      const out: number[] = [];
      let l = await s.prefill([...s.tokens, 42]);
      for (let i = 0; i < n; i++) {
        out.push(argmax(l));
        l = await s.decode(out.at(-1)!);
      }
      return out;
    };
    const fresh = await make({ ringCheckpoints: { every: 64, max: 4 } });
    const seq2 = new CachedSequence(fresh);
    await restoreSequenceSnapshot(file, seq2, identity);
    expect(seq2.tokens.length).toBe(310);
    expect(fresh.kvLayers()[0]!.tokens).toBe(WINDOW - 1); // the window before 310, nothing more
    seq.reuse([...seq.tokens, 42], true);
    seq2.reuse([...seq2.tokens, 42], true);
    const a = await more(seq, 30);
    const b = await more(seq2, 30);
    console.log(`snapshot of 310 tokens restored: ${a.filter((x, i) => x === b[i]).length}/30 ids match`);
    expect(b).toEqual(a);
    await r.dispose();
    await fresh.dispose();
  });

  it("`longhand inspect`'s per-layer estimate == the pool's bytes after a 16K-token fill, within 2%", async () => {
    const contextLength = 16384;
    // inspect assumes the runner's defaults (prefill chunk 128: rings of 15 + 256 slots)
    const r = await make({ contextLength, kvType: 'fp16', prefillChunk: 128 });
    r.appendRandomContextForBenchmark(contextLength, 9);
    const report = inspectModel(model, { contextTokens: contextLength, kvType: 'fp16' });
    const est = report.memory;
    const text = formatKvLayers(est).join('\n');
    console.log(text);
    expect(text).toContain('layer pattern             WWWWWG  (W: sliding window 16, as a ring; G: global)');
    const pool = r.poolBytes + r.ringCheckpointBytes;
    const figures = r.kvLayers();
    expect(est.kvLayers.map((l) => [l.kind, l.slots, l.poolBytes])).toEqual(figures.map((l) => [l.kind, l.capacityTokens, l.bytes]));
    const gap = Math.abs(est.kvPoolBytes - pool) / pool;
    const allRows = estimateMemory(model.hyper, { bytesByType: {}, storedBytes: 0 }, contextLength, { kvType: 'fp16' }).kvPoolBytes;
    const byKind = (k: string): number => figures.filter((l) => l.kind === k).reduce((s, l) => s + l.bytes, 0);
    console.log(`16K fill: inspect ${est.kvPoolBytes} B, pool ${r.poolBytes} B + checkpoints ${r.ringCheckpointBytes} B (gap ${(gap * 100).toFixed(3)}%); window rows ${byKind('window')} B, global rows ${byKind('global')} B; every layer keeping every row would be ${allRows} B`);
    expect(gap).toBeLessThan(0.02);
    expect(figures.every((l) => l.tokens === Math.min(contextLength, l.capacityTokens))).toBe(true);
    await r.dispose();
  });

  it('the step metrics and /metrics split KV bytes by layer kind (rings, their checkpoints, global rows)', async () => {
    const r = await make({ ringCheckpoints: { every: 64, max: 2 } });
    await run(r, prompt(150), 4);
    const sampler = new StepMetricsSampler(r, model.hyper, 'full');
    const step = StepMetricsSchema.parse(sampler.snapshot(4));
    const row = 2 * 2 * 16 * 4; // K + V of 2 KV heads × 16 dims, fp32
    // 5 rings of 63 slots hold their last 63 tokens; the global layer all 154; checkpoints at 72 and 144, 15 rows each
    expect(step.memory.kvByKind).toEqual({ window: 5 * 63 * row, global: 154 * row, checkpoints: 2 * 5 * 15 * row });
    expect(step.memory.kvUsedBytes).toBe(5 * 63 * row + 154 * row);
    const info = ModelInfoSchema.parse({
      path: path, format: 'gguf', architecture: 'llama', family: 'llama', layers: 6, heads: 4, kvHeads: 2, headDim: 16, hiddenSize: 64, vocabSize: 400, trainedContext: 16384,
      contextLength: 512, device: 'cpu', threads: 1, kvType: 'fp32', policy: 'full', chatTemplate: false, loadMs: 1,
      kvLayers: r.kvLayers().map(({ tokens: _t, ...l }) => l), ringCheckpointBytes: r.ringCheckpointBytes,
    }) satisfies ModelInfo;
    expect(kvPoolBytes(info)).toBe(r.kvLayers().reduce((a, l) => a + l.bytes, 0) + r.ringCheckpointBytes);
    const metrics = new ServerMetrics(() => ({ model: info, queueWaiting: 0, generating: false }));
    metrics.observeStep(step);
    const text = metrics.render();
    const windowPool = r.kvLayers().filter((l) => l.kind === 'window').reduce((a, l) => a + l.bytes, 0);
    expect(text).toContain(`longhand_kv_pool_layer_bytes{layer_kind="window"} ${windowPool}`);
    expect(text).toContain('longhand_kv_layers{layer_kind="window"} 5');
    expect(text).toContain(`longhand_kv_used_layer_bytes{layer_kind="global"} ${154 * row}`);
    expect(text).toContain(`longhand_kv_used_layer_bytes{layer_kind="window_checkpoints"} ${2 * 5 * 15 * row}`);
    await r.dispose();
  });
});
