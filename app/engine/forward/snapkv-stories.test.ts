// snapkv in the real forward pass on stories260K: the runner's kept prompt per layer and KV head
// equals the reference rule (policies-reference.ts) applied to logits computed here in JS from the
// pool's stored keys and the window's queries; every token after the prompt is attended; a second
// prefill recomputes over the whole context; with a budget ≥ the prompt it equals 'full' exactly
// (ids and logits).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGgufModel } from '../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../model/types.ts';
import { haveSharedModel, loadReferenceRuns, STORIES_260K } from '../../../test/support/models.ts';
import { snapkv } from '../kv/policies-reference.ts';
import { lists } from '../kv/test-helpers.ts';
import { createModelRunner, type ModelRunner } from './model-runner.ts';
import type { SnapkvPolicy } from './policy/snapkv.ts';

/** The runner's snapkv policy (its stored queries and kept prompt). */
const snapkvOf = (r: ModelRunner): SnapkvPolicy => r.rowPolicy as SnapkvPolicy;

const have = haveSharedModel(); // skips with a message when the model is missing; fails under CI

function argmax(x: Float32Array): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

/** Per layer the queries of positions P−w..P−1 the runner kept ([w, heads·d]); read right after a prefill (decode steps overwrite the oldest). */
function windowQueries(r: ModelRunner, model: LoadedModel, P: number, w: number): Float32Array[] {
  const out: Float32Array[] = [];
  for (let l = 0; l < model.hyper.layers; l++) {
    const qs = snapkvOf(r).storedQueries(l, P - w, P);
    if (l >= 2) expect(qs, `layer ${l}: window queries ${P - w}..${P - 1} stored`).toBeDefined();
    out.push(qs ?? new Float32Array(0));
  }
  return out;
}

/** The reference's kept prompt for `layer`: window queries `qs` (positions P−w..P−1) over slots 0..P−1, logits from the pool's keys in JS. */
function referenceKept(r: ModelRunner, model: LoadedModel, layer: number, qs: Float32Array, P: number, w: number, budget: number): number[][] {
  const { heads, kvHeads, headDim: d } = model.hyper;
  const state = snapkvOf(r);
  const obs = new Float32Array(heads * w * P); // [heads, w, P]
  const group = heads / kvHeads;
  for (let h = 0; h < heads; h++) {
    const g = Math.floor(h / group);
    for (let j = 0; j < P; j++) {
      const k = state.pool.readK(layer, g, j);
      for (let i = 0; i < w; i++) {
        let s = 0;
        for (let c = 0; c < d; c++) s += qs[(i * heads + h) * d + c]! * k[c]!;
        obs[(h * w + i) * P + j] = s / Math.sqrt(d);
      }
    }
  }
  return lists(snapkv(obs, { heads, kvHeads, N: P }, { budget, window: w, kernel: 7, pooling: 'max' }));
}

describe.skipIf(!have)('snapkv on stories260K', () => {
  let model: LoadedModel;
  let text: number[];
  const runners: ModelRunner[] = [];

  beforeAll(() => {
    model = loadGgufModel(STORIES_260K);
    const run = loadReferenceRuns()[0]!;
    text = [...run.promptIds, ...run.generatedIds];
  });

  afterAll(async () => {
    for (const r of runners) await r.dispose();
    model?.close();
  });

  async function runner(sparse: Record<string, number>, policy: 'snapkv' | 'full' = 'snapkv'): Promise<ModelRunner> {
    const r = await createModelRunner(model, { contextLength: 256, kvType: 'fp32', prefillChunk: 48, policy, sparse });
    runners.push(r);
    return r;
  }

  it('kept prompt == the reference on the pool (window across prefill chunks); generated tokens attended; a second prefill recomputes', async () => {
    const r = await runner({ budget: 30, window: 10 });
    expect(r.policy).toBe('snapkv');
    const P = 100;
    let logits = await r.prefill(text.slice(0, P)); // chunks 0..47, 48..95, 96..99: the window 90..99 straddles two
    let qs = windowQueries(r, model, P, 10);
    const layers = model.hyper.layers;
    const kvHeads = model.hyper.kvHeads;
    for (let step = 0; step < 6; step++) {
      logits = await r.decode(argmax(logits));
      const N = P + step; // the step's past tokens
      for (let l = 2; l < layers; l++) {
        const want = referenceKept(r, model, l, qs[l]!, P, 10, 30);
        const got = lists(snapkvOf(r).selection(l));
        expect(got.length).toBe(kvHeads);
        for (let g = 0; g < kvHeads; g++) {
          expect(got[g], `layer ${l}, KV head ${g}, step ${step}`).toEqual([...want[g]!, ...Array.from({ length: N - P }, (_, i) => P + i)]);
        }
      }
      const stats = r.lastStepStats()!;
      expect(stats.layers[2]!.selected).toBe(30 + N - P);
      expect(stats.layers[2]!.candidates).toBe(N);
      expect(stats.layers[0]!.dense).toBe(true);
    }
    // the layers choose differently (the rule really reads each layer's data)
    expect(lists(snapkvOf(r).selection(2))).not.toEqual(lists(snapkvOf(r).selection(layers - 1)));

    // continued conversation: 5 more prompt tokens after the 106 in the cache → prompt = 0..110
    logits = await r.prefill(text.slice(106, 111));
    qs = windowQueries(r, model, 111, 10);
    logits = await r.decode(argmax(logits));
    expect(r.position).toBe(112);
    for (let l = 2; l < layers; l++) {
      expect(snapkvOf(r).keptPrompt(l)!.promptEnd).toBe(111);
      const want = referenceKept(r, model, l, qs[l]!, 111, 10, 30); // the window reaches back over decoded tokens 101..105
      expect(lists(snapkvOf(r).selection(l)), `layer ${l} after the second prefill`).toEqual(want);
    }
    // truncate into the prompt, prefill again: the kept set follows the new prompt
    r.truncate(80);
    logits = await r.prefill(text.slice(80, 90));
    qs = windowQueries(r, model, 90, 10);
    await r.decode(argmax(logits));
    for (let l = 2; l < layers; l++) expect(lists(snapkvOf(r).selection(l))).toEqual(referenceKept(r, model, l, qs[l]!, 90, 10, 30));
  });

  it('budget ≥ the context equals full exactly: ids and logits, 60 greedy steps', async () => {
    const snap = await runner({ budget: 1000 });
    const full = await runner({}, 'full');
    let a = await snap.prefill(text.slice(0, 40));
    let b = await full.prefill(text.slice(0, 40));
    for (let i = 0; i < 60; i++) {
      expect(Array.from(a), `step ${i}`).toEqual(Array.from(b));
      const id = argmax(b);
      a = await snap.decode(id);
      b = await full.decode(id);
    }
    expect(snap.lastStepStats()!.layers[4]!.fetchRatio).toBe(1);
  });
});
