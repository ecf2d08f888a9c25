// The inspector's engine figures: recall and the oracle's recall at the same size (checked against
// a brute-force sort and against InfiniGen's own Speculator.recall on the KJV model), the positions
// and prefetch counters of a measured step, evictions with their step, the sampler arming one step
// per snapshot, the top-k log-probabilities of a generation and the prompt's pieces.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveSharedModel, KJV_EVAL_DIR, KJV_HD64 } from '../../../test/support/models.ts';
import { attentionScores, createKvPool } from '../../../native/index.js';
import { createModelRunner, type ModelRunner } from '../forward/model-runner.ts';
import { loadModel } from '../model/load-model.ts';
import { createTokenizer } from '../model/tokenizer/tokenizer.ts';
import type { LoadedModel } from '../model/types.ts';
import { createEngineCore } from '../engine.ts';
import type { GenerationEvent } from '../host/engine-core.ts';
import { LogitTap, topLogprobs } from './logit-tap.ts';
import { promptPieces } from './prompt-pieces.ts';
import { StepMetricsSampler } from './step-metrics.ts';
import { InspectProbe, measureRecall, sumLargest, topMass } from './step-probe.ts';

function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** The same figures by sorting (the definition, not the quickselect). */
function bruteRecall(scores: Float32Array, heads: number, T: number, current: number, lists: Int32Array[]) {
  const group = heads / lists.length;
  let recall = 0;
  let oracle = 0;
  lists.forEach((slots, g) => {
    const mass = new Array<number>(T).fill(0);
    for (let h = g * group; h < (g + 1) * group; h++) {
      const row = Array.from(scores.subarray(h * T, (h + 1) * T));
      const max = Math.max(...row);
      const w = row.map((x) => Math.exp(x - max));
      const z = w.reduce((a, b) => a + b, 0);
      w.forEach((x, j) => (mass[j] = mass[j]! + x / z));
    }
    const list = new Set(slots);
    list.delete(current);
    recall += mass[current]! + [...list].reduce((a, j) => a + mass[j]!, 0);
    const past = mass.filter((_, j) => j !== current).sort((a, b) => b - a);
    oracle += mass[current]! + past.slice(0, list.size).reduce((a, b) => a + b, 0);
  });
  return { recall: recall / heads, oracleRecall: oracle / heads };
}

describe('measureRecall and sumLargest', () => {
  it('equal the sorted definition on random logits (GQA 1, 2, 4), recall <= oracle, everything selected = 1', () => {
    const rand = seeded(7);
    for (const [heads, kvHeads] of [[2, 2], [4, 2], [8, 2]] as const) {
      for (const T of [1, 2, 17, 300]) {
        const scores = Float32Array.from({ length: heads * T }, () => (rand() - 0.5) * 12);
        const current = heads === 4 ? Math.floor(T / 2) : T - 1; // an evicting pool puts the current token in a victim's slot
        const lists = Array.from({ length: kvHeads }, () => Int32Array.from([...new Set(Array.from({ length: Math.floor(T / 3) }, () => Math.floor(rand() * (T - 1))))].sort((a, b) => a - b)));
        const got = measureRecall(scores, heads, T, current, lists);
        const want = bruteRecall(scores, heads, T, current, lists);
        expect(got.recall).toBeCloseTo(want.recall, 9);
        expect(got.oracleRecall).toBeCloseTo(want.oracleRecall, 9);
        expect(got.recall).toBeLessThanOrEqual(got.oracleRecall + 1e-12);
        const all = Array.from({ length: kvHeads }, () => Int32Array.from({ length: T }, (_, i) => i));
        expect(measureRecall(scores, heads, T, current, all).recall).toBeCloseTo(1, 12);
      }
    }
  });

  it('a ring cut back after it wrapped (its rows no longer in slots 0..length−1) is measured over its rows: the figures of a plain layer holding the same positions', () => {
    // layer 0 plain (every token), layer 1 a ring of 13: both fed positions 0..39, cut to 37, then the current token 37
    const kvHeads = 2, d = 16, heads = 4;
    const pool = createKvPool({ budgetBytes: 1 << 20, layers: 2, kvHeads, headDim: d, kvType: 'fp32', layerCapacity: [64, 13], ringLayers: [false, true] });
    try {
      const rand = seeded(3);
      const row = (): Float32Array => Float32Array.from({ length: kvHeads * d }, () => rand() - 0.5);
      const rows = Array.from({ length: 41 }, () => [row(), row()] as const);
      const feed = (from: number, to: number): void => {
        for (let t = from; t < to; t++) for (const layer of [0, 1]) pool.append(layer, rows[t]![0], rows[t]![1], t);
      };
      feed(0, 40);
      pool.truncate(37);
      feed(37, 38);
      expect(pool.length(1)).toBe(11); // rows of positions 27..37, not in slots 0..10
      const q = Float32Array.from({ length: heads * d }, () => (rand() - 0.5) * 4);
      // each layer's window selection: positions 31..36 for KV head 0, 33..36 for KV head 1 (the current token apart)
      const selected = [[31, 32, 33, 34, 35, 36], [33, 34, 35, 36]];
      const slotsOf = (layer: number): Int32Array[] => {
        const at = new Map<number, number>();
        for (let s = 0; s < pool.layerCapacityTokens(layer); s++) {
          try {
            at.set(pool.position(layer, s), s);
          } catch {
            // a slot the truncation forgot
          }
        }
        return selected.map((ps) => Int32Array.from(ps.map((p) => at.get(p)!)).sort());
      };
      const measured = [0, 1].map((layer) => {
        const probe = new InspectProbe();
        probe.arm();
        probe.measure(pool, layer, q, heads, slotsOf(layer));
        probe.stepDone();
        return probe.take()!.layers[0]!;
      });
      // the ring's figures are the definition's over positions 27..37 of the plain layer (the same rows, the same score bits)
      const all = new Float32Array(heads * 38);
      attentionScores(pool, 0, q, heads, all, 38);
      const held = Float32Array.from({ length: heads * 11 }, (_, i) => all[Math.floor(i / 11) * 38 + 27 + (i % 11)]!);
      const want = measureRecall(held, heads, 11, 10, selected.map((ps) => Int32Array.from(ps, (p) => p - 27)));
      expect({ recall: measured[1]!.recall, oracleRecall: measured[1]!.oracleRecall }).toEqual(want);
      expect(measured[1]!.positions).toEqual([31, 32, 33, 34, 35, 36]);
      expect(measured[0]!.positions).toEqual([31, 32, 33, 34, 35, 36]);
      expect(measured[1]!.attention.map(([p]) => p).sort((a, b) => a - b)).toEqual(Array.from({ length: 11 }, (_, i) => 27 + i));
    } finally {
      pool.free();
    }
  });

  it('topMass: the k largest of a summed mass over heads, as a share', () => {
    const total = Float64Array.from([0.2, 1.4, 0.1, 0.9, 1.4]);
    expect(topMass(total, 2, 3)).toEqual([[1, 0.7], [4, 0.7], [3, 0.45]]);
    expect(topMass(total, 2, 10)).toHaveLength(5);
  });

  it('sumLargest equals the sum of the n largest after a sort, ties and repeats included', () => {
    const rand = seeded(11);
    for (let trial = 0; trial < 200; trial++) {
      const len = 1 + Math.floor(rand() * 400);
      const values = Float64Array.from({ length: len }, () => (rand() < 0.3 ? 0.5 : rand()));
      const n = Math.floor(rand() * (len + 2));
      const sorted = [...values].sort((a, b) => b - a);
      expect(sumLargest(values.slice(), n)).toBeCloseTo(sorted.slice(0, n).reduce((a, b) => a + b, 0), 10);
    }
  });

  it('topLogprobs: the k largest log-softmax values, most likely first; NaN never chosen', () => {
    const logits = Float32Array.from([1, 3, Number.NaN, 3, -2, 0.5]);
    const top = topLogprobs(logits, 3);
    const finite = [1, 3, 3, -2, 0.5];
    const logZ = Math.log(finite.reduce((a, x) => a + Math.exp(x), 0));
    expect(top.map(([id]) => id)).toEqual([1, 3, 0]);
    expect(top[0]![1]).toBeCloseTo(3 - logZ, 6);
    expect(top[2]![1]).toBeCloseTo(1 - logZ, 6);
    expect(topLogprobs(logits, 0)).toEqual([]);
  });
});

const have = haveSharedModel(KJV_HD64);

describe.skipIf(!have)('the probe on kjv-llama-hd64', () => {
  let model: LoadedModel;
  let ids: number[];
  const dir = mkdtempSync(join(tmpdir(), 'longhand-probe-'));
  beforeAll(async () => {
    model = await loadModel(KJV_HD64);
    const tokenizer = await createTokenizer(model.tokenizer);
    ids = tokenizer.encode(readFileSync(join(KJV_EVAL_DIR, 'jonah-1.txt'), 'utf8'), { addSpecial: true }).slice(0, 200);
  });
  afterAll(() => {
    model?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Prefill 160 ids, then decode the rest teacher-forced, measuring every step. */
  async function run(options: Parameters<typeof createModelRunner>[1], each: (r: ModelRunner, probe: InspectProbe, step: number) => void) {
    const r = await createModelRunner(model, options);
    const probe = new InspectProbe();
    r.setProbe(probe);
    await r.prefill(ids.slice(0, 160));
    for (let t = 160; t < ids.length; t++) {
      probe.arm();
      await r.decode(ids[t]!);
      each(r, probe, t - 160);
    }
    await r.dispose();
  }

  it("infinigen under inspect: the probe's recall is the Speculator's, positions are selectedPositions, the oracle bounds it", async () => {
    let checked = 0;
    let gap = 0;
    await run({ contextLength: 256, policy: 'infinigen', infinigen: { alpha: 5, fetchCap: 0.2, denseLayers: 2, cacheDir: dir, inspect: true } }, (r, probe) => {
      const reading = probe.take()!;
      const stats = r.lastStepStats()!;
      expect(reading.layers.map((l) => l.layer)).toEqual([2, 3, 4, 5]);
      for (const l of reading.layers) {
        const own = stats.layers.find((s) => s.layer === l.layer)!;
        expect(l.recall).toBeCloseTo(own.recall!, 4);
        expect(l.oracleRecall).toBeGreaterThanOrEqual(l.recall - 1e-9);
        expect(l.positions).toEqual(r.selectedPositions(l.layer));
        // true attention: at most 64 positions, largest first, the current token among them or below them
        expect(l.attention.length).toBe(Math.min(64, r.position));
        for (let i = 1; i < l.attention.length; i++) expect(l.attention[i]![1]).toBeLessThanOrEqual(l.attention[i - 1]![1]);
        expect(l.attention.reduce((a, [, m]) => a + m, 0)).toBeLessThanOrEqual(1 + 1e-9);
        gap += l.oracleRecall - l.recall;
        checked += 1;
      }
    });
    expect(checked).toBe(40 * 4);
    console.log(`infinigen: mean oracle − selected recall ${(gap / checked).toFixed(4)} over ${checked} layer-steps`);
  });

  it('h2o: recall and oracle measured from the real query; a step not armed measures nothing', async () => {
    const runner = await createModelRunner(model, { contextLength: 256, policy: 'h2o', sparse: { fetchCap: 0.2 } });
    const probe = new InspectProbe();
    runner.setProbe(probe);
    await runner.prefill(ids.slice(0, 160));
    await runner.decode(ids[160]!);
    expect(probe.take()).toBeUndefined();
    probe.arm();
    await runner.decode(ids[161]!);
    const reading = probe.take()!;
    expect(reading.layers).toHaveLength(4);
    for (const l of reading.layers) {
      expect(l.recall).toBeGreaterThan(0);
      expect(l.recall).toBeLessThanOrEqual(l.oracleRecall + 1e-9);
      expect(l.positions).toEqual(runner.selectedPositions(l.layer));
      // h2o keeps ⌊0.2·N⌋ per KV head: the union over 2 KV heads is at most twice that
      expect(l.positions.length).toBeLessThanOrEqual(2 * Math.floor(0.2 * 161));
    }
    expect(probe.decodeSteps).toBe(2);
    await runner.dispose();
  });

  it('oracle policy: its selected set is (almost) the oracle set: recall <= oracleRecall within 1 point', async () => {
    // the policy ranks by a softmax over the past tokens only (the current one left out of each
    // head's normaliser), the probe by the full softmax: the group sums weigh heads slightly differently
    let worst = 0;
    await run({ contextLength: 256, policy: 'oracle', sparse: { fetchCap: 0.2 } }, (_r, probe) => {
      for (const l of probe.take()!.layers) {
        expect(l.recall).toBeLessThanOrEqual(l.oracleRecall + 1e-9);
        worst = Math.max(worst, l.oracleRecall - l.recall);
      }
    });
    expect(worst).toBeLessThan(0.01);
  });

  it('a pool with a byte budget: evicted positions with their step, prefetch counters of the selected slots', async () => {
    const hyper = model.hyper;
    const perToken = hyper.layers * hyper.kvHeads * 2 * hyper.headDim * 2 + hyper.layers * 5 + hyper.layers * hyper.kvHeads * 2 * Math.floor(0.3 * hyper.headDim);
    let evicted = 0;
    await run({ contextLength: 256, poolBudgetBytes: perToken * 120, policy: 'infinigen', infinigen: { alpha: 5, fetchCap: 0.2, denseLayers: 2, cacheDir: dir } }, (r, probe, step) => {
      const reading = probe.take()!;
      for (const l of reading.layers) {
        expect(l.counters).toHaveLength(l.positions.length);
        for (const c of l.counters!) expect(c).toBeGreaterThanOrEqual(0);
      }
      const ev = probe.takeEvictions();
      for (let layer = 0; layer < hyper.layers; layer++) {
        for (const [position, at] of ev[layer] ?? []) {
          expect(at).toBe(step);
          expect(position).toBeLessThan(r.position);
          evicted += 1;
        }
      }
    });
    // the pool holds fewer than the 200 tokens, so every decode step evicts once per layer
    expect(evicted).toBe(40 * hyper.layers);
  });

  it('the sampler arms one step per snapshot and reports it; the engine sends top-k logprobs and prompt pieces', async () => {
    const runner = await createModelRunner(model, { contextLength: 256, policy: 'streaming', sparse: { fetchCap: 0.25 } });
    let clock = 0;
    const sampler = new StepMetricsSampler(runner, model.hyper, 'streaming', 100, () => clock);
    sampler.budget = 1; // this test is about the arming; the budget has its own
    await runner.prefill(ids.slice(0, 100));
    const reports: number[] = [];
    for (let t = 100; t < 120; t++) {
      await runner.decode(ids[t]!);
      clock += 30;
      const snapshot = sampler.maybe(t - 99);
      if (snapshot) {
        reports.push(snapshot.step);
        for (const l of snapshot.layers.slice(2)) {
          expect(l.oracleRecall).toBeGreaterThanOrEqual(l.recall! - 1e-9);
          // streaming: 4 sinks + the recent window
          expect(l.positions!.slice(0, 4)).toEqual([0, 1, 2, 3]);
          expect(l.positions!.at(-1)).toBe(runner.position - 2);
        }
        expect(snapshot.layers[0]!.oracleRecall).toBeUndefined();
      }
    }
    // first call arms (step 1), reports step 2; then every 100 ms of the 30 ms clock: arm at +120, report at +150
    expect(reports).toEqual([2, 7, 12, 17]);
    sampler.close();
    // every 4 steps (the inspector's Compare): arm at steps 4, 8, 12, …, report the step after, whatever the clock
    const every = new StepMetricsSampler(runner, model.hyper, 'streaming', 100, () => 0);
    every.sampleEvery(4);
    every.budget = 1;
    const stepped: number[] = [];
    for (let t = 120; t < 137; t++) {
      await runner.decode(ids[t]!);
      const snapshot = every.maybe(t - 119);
      if (snapshot) {
        stepped.push(snapshot.step);
        expect(snapshot.layers[2]!.oracleRecall).toBeGreaterThan(0);
      }
    }
    expect(stepped).toEqual([5, 9, 13, 17]);
    expect(() => every.sampleEvery(0)).toThrow(RangeError);
    every.close();
    await runner.dispose();
  });

  it('the inspector keeps to its budget: asked for every step, the probe and snapshots take <= 5% of decode time (+ one step`s measurement)', async () => {
    const runner = await createModelRunner(model, { contextLength: 256, policy: 'h2o', sparse: { fetchCap: 0.2 } });
    await runner.prefill(ids.slice(0, 150));
    const sampler = new StepMetricsSampler(runner, model.hyper, 'h2o');
    sampler.sampleEvery(1);
    const start = runner.timings().total;
    let measured = 0;
    let worstStep = 0;
    for (let t = 150; t < 200; t++) {
      const before = sampler.inspectMs();
      await runner.decode(ids[t]!);
      const snapshot = sampler.maybe(t - 149);
      worstStep = Math.max(worstStep, sampler.inspectMs() - before);
      if (snapshot?.layers.some((l) => l.oracleRecall !== undefined)) measured += 1;
    }
    const decodeMs = runner.timings().total - start;
    console.log(`budget: ${measured} of 50 steps measured, inspector ${sampler.inspectMs().toFixed(2)} ms of ${decodeMs.toFixed(1)} ms decode`);
    expect(measured).toBeGreaterThan(0);
    expect(sampler.inspectMs()).toBeLessThanOrEqual(0.05 * decodeMs + 2 * worstStep);
    sampler.close();
    await runner.dispose();
  });

  it('engine: logprobs 5 puts top-5 on each token (greedy: the chosen id first) and the prompt pieces spell the prompt', async () => {
    const core = createEngineCore(() => {});
    await core.load({ modelPath: KJV_HD64, device: 'cpu', contextLength: 256, kvType: 'fp16', prefillChunk: 64, policy: 'h2o', infinigen: { alpha: 5, partialRatio: 0.3, fetchCap: 0.2, denseLayers: 2, recalibrate: false }, sparse: { fetchCap: 0.2, denseLayers: 2, sinks: 4, poolKernel: 7, pageSize: 16 }, poolBudgetBytes: 0, inspect: false, dense: 'auto' });
    const prompt = 'In the beginning God created the heaven and the earth.';
    const events: GenerationEvent[] = [];
    const params = { maxTokens: 12, stopStrings: [], stopOnEos: false, sampling: { temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64 }, reusePrefix: true, logprobs: 5 };
    for await (const e of core.generate({ text: prompt }, params, new AbortController().signal)) events.push(e);
    const promptEvent = events.find((e) => e.kind === 'prompt')!;
    if (promptEvent.kind !== 'prompt') throw new Error('no prompt event');
    expect(promptEvent.pieces).toHaveLength(promptEvent.ids.length);
    expect(promptEvent.pieces!.join('').replace(/^<s>/, '').trim()).toBe(prompt);
    const tokens = events.filter((e) => e.kind === 'token');
    expect(tokens).toHaveLength(12);
    for (const t of tokens) {
      if (t.kind !== 'token') continue;
      expect(t.top).toHaveLength(5);
      expect(t.top![0]![0]).toBe(t.id);
      for (let i = 1; i < 5; i++) expect(t.top![i]![1]).toBeLessThanOrEqual(t.top![i - 1]![1]);
    }
    // without logprobs: none
    const plain: GenerationEvent[] = [];
    for await (const e of core.generate({ text: prompt }, { ...params, logprobs: undefined }, new AbortController().signal)) plain.push(e);
    expect(plain.filter((e) => e.kind === 'token').every((e) => e.kind === 'token' && e.top === undefined)).toBe(true);
    await core.unload();
  });

  it('promptPieces and LogitTap order: the tap queues one row per prefill/decode', async () => {
    const tokenizer = await createTokenizer(model.tokenizer);
    const pieces = promptPieces(tokenizer, ids.slice(0, 30));
    expect(pieces.join('')).toBe(tokenizer.decode(ids.slice(0, 30), { skipSpecial: false, continuation: false }));
    const runner = await createModelRunner(model, { contextLength: 64 });
    const tap = new LogitTap(runner, 2);
    const first = await tap.prefill(ids.slice(0, 10));
    await tap.decode(ids[10]!);
    const a = tap.take()!;
    expect(a[0]![0]).toBe(topLogprobs(first, 1)[0]![0]);
    expect(tap.take()).toHaveLength(2);
    expect(tap.take()).toBeUndefined();
    await runner.dispose();
  });
});
