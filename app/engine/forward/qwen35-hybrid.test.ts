// What a hybrid model (Qwen3.5: linear-attention layers with a recurrent state, full-attention
// layers with KV rows) changes around the forward pass, on the converter-written F32 fixture
// (test/fixtures/families/qwen35.ts): the pool keeps rows for the attention layers only and the
// memory figures count the state instead; prefix reuse is honest about the state (it cannot be cut
// back: a prompt that shares only part of the cache resumes at the newest state checkpoint before
// the edit, or at 0 without one, and says so, while one that continues the cache keeps all of it);
// an abort in the middle of a chunk rolls the state back with the rows; snapshots carry the state
// (sections 'recurrent.ℓ', format v2) and every damage to it is refused with its typed reason; the
// policies act on the attention layers only (InfiniGen's speculative query for an attention layer
// comes from the input of the linear layer before it). Every continuation is held token for token
// against a fresh run.
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeAvailable } from '../../../native/index.js';
import { qwen35GgufFixture, qwen35IsLinear, QWEN35_TEST_MODEL } from '../../../test/fixtures/families/qwen35.ts';
import { argmax } from '../../../test/support/reference-forward.ts';
import { LonghandError } from '../../common/errors.ts';
import { GenerateParamsSchema, LoadOptionsSchema } from '../../common/protocol.ts';
import { createEngineCore } from '../engine.ts';
import { loadModel } from '../model/load-model.ts';
import { StepMetricsSampler } from '../metrics/step-metrics.ts';
import { ServerMetrics } from '../../server/metrics.ts';
import { estimateMemory } from '../model/memory-estimate.ts';
import type { LoadedModel } from '../model/types.ts';
import { CachedSequence } from './cached-sequence.ts';
import { ForwardAbortedError } from './errors.ts';
import { headerText, resealHeader } from '../kv/snapshot-test-builder.ts';
import { familyOf } from './layers/families.ts';
import { createModelRunner, type ModelRunner } from './model-runner.ts';
import { restoreSequenceSnapshot, saveSequenceSnapshot, type SnapshotIdentity } from './sequence-snapshot.ts';

let model: LoadedModel;
beforeAll(async () => {
  model = await loadModel(qwen35GgufFixture('F32'));
});
afterAll(() => model?.close());

// at a context of 256 the default keeps no state checkpoints (one per 1024 tokens): every cut re-prefills from 0
const make = (options: Parameters<typeof createModelRunner>[1] = {}): Promise<ModelRunner> => createModelRunner(model, { kvType: 'fp32', contextLength: 256, prefillChunk: 16, ...options });
/** n ids of a fixed walk through the vocabulary (seed s) */
const prompt = (n: number, s = 1): number[] => Array.from({ length: n }, (_, i) => (i * 7919 + 13 * s) % 151669);

/** `steps` greedy tokens after `ids` through `seq` (reuse first, then the rest of the prompt), and the reuse plan. */
async function greedy(seq: CachedSequence, ids: number[], steps: number): Promise<{ reused: number; tokens: number[] }> {
  const { reused } = seq.reuse(ids, true);
  let logits = await seq.prefill(ids);
  const tokens: number[] = [];
  for (let i = 0; i < steps; i++) {
    const next = argmax(logits);
    tokens.push(next);
    if (i < steps - 1) logits = await seq.decode(next);
  }
  return { reused, tokens };
}

describe('Qwen3.5 hybrid: layers, pool and memory', () => {
  it('linear layers are LayerSpec kind linear with no KV rows; the pool and the memory estimate count the attention layers only, and the state', async () => {
    const specs = familyOf(model.hyper).layers(model.hyper);
    expect(specs.map((s) => s.attention.kind)).toEqual(Array.from({ length: 8 }, (_, l) => (qwen35IsLinear(QWEN35_TEST_MODEL, l) ? 'linear' : 'attention')));
    const runner = await make();
    try {
      // every test here runs the engine a user gets: the native stages and recurrence where the addon is built
      expect(runner.dense.engine).toBe(isNativeAvailable() ? 'native' : 'onnx');
      const layers = runner.kvLayers();
      expect(layers.map((l) => l.kind)).toEqual(['linear', 'linear', 'linear', 'global', 'linear', 'linear', 'linear', 'global']);
      // a linear layer: Hv·D² floats of state + (K−1)·C of convolution tail, no slots
      const stateFloats = 4 * 64 * 64 + 3 * (2 * 2 + 4) * 64;
      for (const l of layers.filter((x) => x.kind === 'linear')) expect(l).toEqual({ kind: 'linear', capacityTokens: 0, tokens: 0, bytes: 4 * stateFloats });
      expect(runner.recurrentStateBytes).toBe(6 * 4 * stateFloats);
      const estimate = estimateMemory(model.hyper, { bytesByType: {}, storedBytes: 0 }, 256, { kvType: 'fp32', layers: familyOf(model.hyper).layers(model.hyper), freeBytes: 1e12, totalBytes: 1e12 });
      expect(estimate.kvLayers.map((l) => l.layer)).toEqual([3, 7]);
      // K and V, 2 KV heads × 64, fp32, 256 tokens, 2 layers
      expect(estimate.kvFullBytes).toBe(2 * 256 * 2 * 2 * 64 * 4);
      expect(estimate.recurrentStateBytes).toBe(2 * runner.recurrentStateBytes); // the state and the chunk's rollback copy
      expect(estimate.recurrentCheckpointBytes).toBe(0); // none at 256 tokens
      // at 32K: 8 checkpoints (one per 1024 tokens, at most 8), one state each
      expect(estimateMemory(model.hyper, { bytesByType: {}, storedBytes: 0 }, 32768, { layers: familyOf(model.hyper).layers(model.hyper), freeBytes: 1e12, totalBytes: 1e12 }).recurrentCheckpointBytes).toBe(8 * runner.recurrentStateBytes);
      console.log(`qwen35 tiny at 256 tokens: KV ${estimate.kvFullBytes} bytes in 2 of 8 layers, recurrent state ${runner.recurrentStateBytes} bytes (+ its rollback copy)`);
    } finally {
      await runner.dispose();
    }
  });

  it("InfiniGen speculates for each attention layer from the input of the linear layer before it; it selects on layers 3 and 7 only; a Continue == a fresh run", async () => {
    const options = { policy: 'infinigen' as const, infinigen: { fetchCap: 0.3 } };
    const runner = await make(options);
    const freshRunner = await make(options);
    try {
      const seq = new CachedSequence(runner);
      const first = await greedy(seq, prompt(96), 8);
      const stats = runner.lastStepStats()!;
      console.log(`qwen35 infinigen: skew from ${runner.skewSource}; layer 3 selected ${stats.layers[3]!.selected} of ${stats.layers[3]!.candidates}, layer 7 ${stats.layers[7]!.selected} of ${stats.layers[7]!.candidates}`);
      expect(stats.layers.filter((l) => !l.dense).map((l) => l.layer)).toEqual([3, 7]);
      for (const l of stats.layers) if (l.layer % 4 !== 3) expect(l.candidates).toBe(0);
      for (const l of [3, 7]) expect(stats.layers[l]!.selected).toBeLessThan(stats.layers[l]!.candidates);
      const next = [...seq.tokens, first.tokens.at(-1)!, ...prompt(5, 7)];
      const c = await greedy(seq, next, 8);
      expect(c.reused).toBe(0); // the sparse decode steps (and the state after them) are recomputed
      expect(c.tokens).toEqual((await greedy(new CachedSequence(freshRunner), next, 8)).tokens);
    } finally {
      await runner.dispose();
      await freshRunner.dispose();
    }
  });

  it('the comparison policies select on the attention layers only; a Continue after their decode steps == a fresh run of the same policy', async () => {
    // one pair of runners, the policy switched in place (the stages and the pool are the same for all)
    const runner = await make();
    const freshRunner = await make();
    try {
      for (const policy of ['streaming', 'h2o', 'quest', 'oracle', 'snapkv'] as const) {
        const options = { policy, sparse: { budget: 24, recent: 8, sinks: 2 } };
        for (const r of [runner, freshRunner]) {
          r.reset();
          expect(r.tryAdoptPolicy(options)).toBe(true);
        }
        const seq = new CachedSequence(runner);
        const first = await greedy(seq, prompt(64), 8);
        const stats = runner.lastStepStats()!;
        // layers 3 and 7 selected fewer rows than they could; the linear layers have no rows at all
        expect(stats.layers.filter((l) => !l.dense).map((l) => l.layer)).toEqual([3, 7]);
        for (const l of stats.layers) if (l.layer % 4 !== 3) expect(l.candidates).toBe(0);
        for (const l of [3, 7]) expect(stats.layers[l]!.selected).toBeLessThan(stats.layers[l]!.candidates);
        const next = [...seq.tokens, first.tokens.at(-1)!, ...prompt(5, 7)];
        const c = await greedy(seq, next, 8);
        // the decoded tokens attended sparsely: they and the state after them are recomputed (no checkpoint at this context)
        expect(c.reused).toBe(0);
        expect(c.tokens).toEqual((await greedy(new CachedSequence(freshRunner), next, 8)).tokens);
      }
    } finally {
      await runner.dispose();
      await freshRunner.dispose();
    }
  });
});

describe('Qwen3.5 hybrid: prefix reuse is honest about the recurrent state', () => {
  it('continue keeps the whole cache; a prompt diverging early or late starts again from 0 and says so; each == a fresh run', async () => {
    const runner = await make();
    const freshRunner = await make();
    try {
      const seq = new CachedSequence(runner);
      const fresh = async (ids: number[]): Promise<number[]> => {
        const s = new CachedSequence(freshRunner);
        s.clear();
        return (await greedy(s, ids, 8)).tokens;
      };
      const draft = prompt(70);
      const first = await greedy(seq, draft, 8);
      expect(first.reused).toBe(0);

      // Continue: the prompt is the cache (draft + 7 decoded tokens) and more text
      const cont = [...seq.tokens, ...prompt(9, 5)];
      const cached = seq.tokens.length;
      const c = await greedy(seq, cont, 8);
      console.log(`qwen35 continue: reusedTokens ${c.reused} of ${cont.length} (cache held ${cached})`);
      expect(c.reused).toBe(cached);
      expect(c.tokens).toEqual(await fresh(cont));

      // diverging late (5 tokens before the end of the cache) and early (at 10): no state
      // checkpoints at this context, so both start from 0, and reusedTokens says 0
      for (const at of [seq.tokens.length - 5, 10]) {
        const edited = seq.tokens.slice();
        edited[at] = (edited[at]! + 1) % 151669;
        const d = await greedy(seq, edited, 8);
        console.log(`qwen35 edit at ${at} of ${edited.length}: reusedTokens ${d.reused}`);
        expect(d.reused).toBe(0);
        expect(d.tokens).toEqual(await fresh(edited));
      }
      // the runner itself refuses a cut it cannot make exactly
      expect(runner.resumePoint(10)).toBe(0);
      expect(() => runner.truncate(10)).toThrow(/cannot be cut back to 10/);
    } finally {
      await runner.dispose();
      await freshRunner.dispose();
    }
  });

  it('with state checkpoints (every 32 tokens, at most 3): an edit resumes at the newest checkpoint before it; == a fresh run', async () => {
    const runner = await make({ stateCheckpoints: { every: 32, max: 3 } });
    const freshRunner = await make();
    try {
      const seq = new CachedSequence(runner);
      const draft = prompt(150, 3);
      await greedy(seq, draft, 2);
      // chunks of 16 end at 16, 32, ... 144, 150, then the decode step at 151: a checkpoint at the
      // first chunk end past each multiple of 32 (32, 64, 96, 128), thinned to 3 spread over the draft
      const points = runner.recurrentCheckpointPositions();
      console.log(`qwen35 state checkpoints after a 150-token prompt: ${points.join(', ')} (${runner.recurrentCheckpointBytes} bytes)`);
      expect(points).toEqual([64, 96, 128]);
      expect(runner.recurrentCheckpointBytes).toBe(3 * runner.recurrentStateBytes);
      // the step metrics (Memory view, /metrics): the state (+ its rollback copy) and its checkpoints beside
      // the pool, and K/V rows in the 2 attention layers only (2 KV heads × 64, fp32, K and V)
      const sampler = new StepMetricsSampler(runner, model.hyper, 'full');
      const { memory } = sampler.snapshot(2);
      expect(memory.recurrent).toEqual({ stateBytes: 2 * runner.recurrentStateBytes, checkpointBytes: 3 * runner.recurrentStateBytes });
      expect(memory.kvUsedBytes).toBe(runner.position * 2 * (2 * 2 * 64 * 4));
      const served = new ServerMetrics(() => ({ model: undefined, queueWaiting: 0, generating: false }));
      served.observeStep(sampler.snapshot(2));
      expect(served.render()).toContain(`longhand_recurrent_state_bytes{part="state"} ${2 * runner.recurrentStateBytes}\nlonghand_recurrent_state_bytes{part="checkpoints"} ${3 * runner.recurrentStateBytes}\n`);
      sampler.close();
      for (const [at, resume] of [[100, 96], [70, 64], [40, 0]] as const) {
        const edited = seq.tokens.slice();
        edited[at] = (edited[at]! + 1) % 151669;
        const held = runner.recurrentCheckpointPositions();
        const d = await greedy(seq, edited, 8);
        console.log(`qwen35 edit at ${at} of ${edited.length} (checkpoints ${held.join(', ')}): reusedTokens ${d.reused}`);
        expect(d.reused).toBe(resume);
        const s = new CachedSequence(freshRunner);
        s.clear();
        expect(d.tokens).toEqual((await greedy(s, edited, 8)).tokens);
      }
    } finally {
      await runner.dispose();
      await freshRunner.dispose();
    }
  });

  it('an abort in the middle of a chunk keeps the chunks before it, state included; the resumed prompt == a fresh run', async () => {
    const runner = await make();
    const freshRunner = await make();
    try {
      const ids = prompt(60, 2);
      // aborts at the 4th layer of the 3rd chunk: enter() reads the signal once, then one read per layer
      let reads = 0;
      const signal = { get aborted() { return ++reads > 1 + 8 * 2 + 4; }, reason: 'test', addEventListener() {}, removeEventListener() {} } as unknown as AbortSignal;
      const seq = new CachedSequence(runner);
      const error = await seq.prefill(ids, signal).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ForwardAbortedError);
      expect((error as ForwardAbortedError).position).toBe(32);
      expect(runner.position).toBe(32);
      const resumed = await greedy(seq, ids, 8);
      console.log(`qwen35 abort mid-chunk at layer 4 of chunk 3: kept ${32} tokens, resumed with reusedTokens ${resumed.reused}`);
      expect(resumed.reused).toBe(32);
      expect(resumed.tokens).toEqual((await greedy(new CachedSequence(freshRunner), ids, 8)).tokens);
    } finally {
      await runner.dispose();
      await freshRunner.dispose();
    }
  });
});

describe('Qwen3.5 hybrid: snapshots carry the recurrent state', () => {
  const identity = { modelSha256: 'ab'.repeat(32), architecture: 'qwen35', layers: 8, heads: 4, kvHeads: 2, headDim: 64, vocabSize: 151936, kvType: 'fp32', policy: 'full', knobs: {} } as SnapshotIdentity;
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'qwen35-snap-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('save, restore into a fresh runner, continue: reusedTokens = the snapshot, tokens == a fresh run; damaged state sections and v1 files refused with their typed reason', async () => {
    const a = await make();
    const b = await make();
    const freshRunner = await make();
    try {
      const seq = new CachedSequence(a);
      const first = await greedy(seq, prompt(45, 4), 6);
      const file = join(dir, 'doc.lhkv');
      const saved = await saveSequenceSnapshot(file, seq, identity);
      expect(saved.tokens).toBe(45 + 5); // the prompt and the decoded tokens (the last one was never fed)
      const bytes = new Uint8Array(readFileSync(file));
      const header = JSON.parse(headerText(bytes)) as { sections: { name: string; offset: number; bytes: number; sha256: string }[] };
      const stateSections = header.sections.filter((x) => x.name.startsWith('recurrent.')).map((x) => x.name);
      expect(stateSections).toEqual(['recurrent.0', 'recurrent.1', 'recurrent.2', 'recurrent.4', 'recurrent.5', 'recurrent.6']);
      expect(header.sections.find((x) => x.name === 'layer.0')!.bytes).toBe(0); // a linear layer has no rows

      const seqB = new CachedSequence(b);
      const restored = await restoreSequenceSnapshot(file, seqB, identity);
      expect(restored.tokens).toBe(saved.tokens);
      const next = [...seq.tokens, first.tokens.at(-1)!, ...prompt(7, 6)];
      const continued = await greedy(seqB, next, 8);
      console.log(`qwen35 snapshot of ${saved.tokens} tokens (${saved.bytes} bytes, ${stateSections.length} state sections) restored in a fresh runner: reusedTokens ${continued.reused}`);
      expect(continued.reused).toBe(saved.tokens);
      const fresh = new CachedSequence(freshRunner);
      expect(continued.tokens).toEqual((await greedy(fresh, next, 8)).tokens);

      // the damage a state section can take, each refused before the cache is half-restored
      const at = (name: string) => header.sections.find((x) => x.name === name)!;
      const s0 = at('recurrent.0');
      const write = (name: string, data: Uint8Array): string => {
        const p = join(dir, `${name}.lhkv`);
        writeFileSync(p, data);
        return p;
      };
      const flipped = bytes.slice();
      flipped[s0.offset + 100]! ^= 0x10;
      const v1 = bytes.slice();
      new DataView(v1.buffer).setUint32(8, 1, true);
      const renamed = resealHeader(bytes, headerText(bytes).replace('"recurrent.0"', '"recurrent.9"'));
      // a NaN with its section checksum redone: only the value check can catch it
      const nan = bytes.slice();
      new DataView(nan.buffer).setFloat32(s0.offset + 8, Number.NaN, true);
      const nanHeader = headerText(bytes).replace(s0.sha256, createHash('sha256').update(nan.subarray(s0.offset, s0.offset + s0.bytes)).digest('hex'));
      const cases: [string, string, string, string][] = [
        ['flipped byte in a state section', write('flip', flipped), 'SNAPSHOT_CORRUPT', 'checksum'],
        ['truncated in a state section', write('trunc', bytes.subarray(0, s0.offset + 64)), 'SNAPSHOT_CORRUPT', 'truncated'],
        ['a state section missing', write('missing', renamed), 'SNAPSHOT_CORRUPT', 'layout'],
        ['a non-finite state value', write('nan', resealHeader(nan, nanHeader)), 'SNAPSHOT_CORRUPT', 'layout'],
        ['format v1 (no state sections)', write('v1', v1), 'SNAPSHOT_VERSION', 'version'],
      ];
      for (const [what, file2, code, reason] of cases) {
        const target = new CachedSequence(b);
        target.clear();
        const error = await restoreSequenceSnapshot(file2, target, identity).then(() => undefined, (e: unknown) => e);
        console.log(`qwen35 snapshot, ${what}: ${(error as LonghandError).code} (${String((error as LonghandError).details?.reason)})`);
        expect(error).toBeInstanceOf(LonghandError);
        expect((error as LonghandError).code).toBe(code);
        expect((error as LonghandError).details).toMatchObject({ reason });
        expect(b.position).toBe(0);
      }
    } finally {
      await a.dispose();
      await b.dispose();
      await freshRunner.dispose();
    }
  });
});

describe('Qwen3.5 hybrid through the engine', () => {
  it('loads (kvLayers: 6 linear, 2 global), generates, and a Continue reuses the whole cache (done.cache.reusedTokens)', async () => {
    const core = createEngineCore(() => {});
    try {
      const info = await core.load(LoadOptionsSchema.parse({ modelPath: qwen35GgufFixture('F32'), threads: 1, contextLength: 256, prefillChunk: 32, kvType: 'fp32' }));
      expect(info.architecture).toBe('qwen35');
      expect(info.kvLayers?.map((l) => l.kind)).toEqual(['linear', 'linear', 'linear', 'global', 'linear', 'linear', 'linear', 'global']);
      const params = GenerateParamsSchema.parse({ maxTokens: 6, stopOnEos: false, sampling: { temperature: 0 } });
      const gen = async (ids: number[]): Promise<{ ids: number[]; reused: number }> => {
        const out: number[] = [];
        let reused = -1;
        for await (const e of core.generate({ ids }, params, new AbortController().signal)) {
          if (e.kind === 'token') out.push(e.id);
          else if (e.kind === 'done') reused = e.cache?.reusedTokens ?? -1;
        }
        return { ids: out, reused };
      };
      const p1 = prompt(40, 8);
      const a = await gen(p1);
      const p2 = [...p1, ...a.ids, ...prompt(4, 9)];
      const b = await gen(p2);
      console.log(`qwen35 through the engine: a Continue reused ${b.reused} of ${p2.length} prompt tokens`);
      expect(b.reused).toBe(p1.length + a.ids.length - 1); // everything cached: the prompt and the tokens fed back
    } finally {
      await core.unload();
    }
  });
});
