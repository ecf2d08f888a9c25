// Policy 'window' (window.ts): its lists are the reference streaming rule without sinks
// (kv/policies-reference.ts), its figures follow the sliding lists, and in the real forward pass on
// stories260K a decode step's sparse layers attend exactly the newest `window` positions: the
// logits equal an independent float64 forward whose sparse layers see only those positions
// (test/support/reference-forward.ts), and a window wider than the context equals 'full' bit for
// bit. The plan gives sliding-window layers their window whatever the chosen policy (plan.ts).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKvPool } from '../../../../native/index.js';
import { streaming } from '../../kv/policies-reference.ts';
import { lists } from '../../kv/test-helpers.ts';
import { loadGgufModel } from '../../model/gguf/gguf-model.ts';
import type { LoadedModel } from '../../model/types.ts';
import { haveSharedModel, STORIES_260K } from '../../../../test/support/models.ts';
import { argmax, referenceForward } from '../../../../test/support/reference-forward.ts';
import type { LayerSpec } from '../layers/layer-spec.ts';
import { createModelRunner, type ModelRunner } from '../model-runner.ts';
import { StepTrace } from '../step-trace.ts';
import { createComparisonPolicy } from './comparison.ts';
import { FullPolicy } from './full.ts';
import { planLayers } from './plan.ts';
import { policyRecipe } from './registry.ts';
import { WindowPolicy } from './window.ts';

const have = haveSharedModel(); // skips with a message when the model is missing; fails under CI

describe("policy 'window' on a pool", () => {
  const shape = { layers: 2, heads: 4, kvHeads: 2, headDim: 8, contextLength: 64 };
  const pool = createKvPool({ budgetBytes: 1 << 20, layers: 2, kvHeads: 2, headDim: 8, kvType: 'fp32' });
  afterAll(() => pool.free());
  const q = new Float32Array(32);

  it('attends the newest window − 1 past tokens (the current one is the window’s last), as streaming without sinks', () => {
    for (const window of [1, 2, 5, 16, 100]) {
      const p = new WindowPolicy({ window, denseLayers: 0 }, { shape, pool });
      for (const N of [0, 1, 3, 4, 15, 16, 17, 40]) {
        const want = lists([streaming(N, { sinks: 0, window: Math.max(0, window - 1) })]);
        const got = lists(p.select(1, q, N));
        expect(got, `window ${window}, N ${N}`).toEqual([want[0], want[0]]);
      }
    }
  });

  it('without a window it keeps the budget (⌊fetchCap·N⌋, at least 1) like the other comparison policies', () => {
    const p = createComparisonPolicy('window', { fetchCap: 0.25 }, { shape, pool }) as WindowPolicy;
    expect(lists(p.select(1, q, 40))[0]).toEqual(Array.from({ length: 10 }, (_, i) => 30 + i));
    expect(p.pastTokens(3)).toBe(1);
    expect(p.selects(1)).toBe(false); // denseLayers defaults to 2, as every comparison policy's
    const four = createComparisonPolicy('window', {}, { shape: { ...shape, layers: 4 }, pool });
    expect([0, 1, 2, 3].map((l) => four.selects(l))).toEqual([false, false, true, true]);
  });

  it('figures: a window sliding by one step reuses all but one row per KV head', () => {
    const p = new WindowPolicy({ window: 9, denseLayers: 0 }, { shape, pool });
    const trace = new StepTrace(2);
    p.select(0, q, 20);
    p.figures(0, 20, trace);
    expect([trace.selected[0], trace.hits[0], trace.misses[0]]).toEqual([8, 0, 16]);
    p.select(0, q, 21);
    p.figures(0, 21, trace);
    expect([trace.selected[0], trace.candidates[0], trace.hits[0], trace.misses[0]]).toEqual([8, 21, 14, 2]);
    expect(trace.bytes[0]).toBe(2 * 2 * 8 * 4); // the misses' K and V rows, fp32
  });

  it('bad knobs are typed errors', () => {
    expect(() => createComparisonPolicy('window', { window: -1 }, { shape, pool })).toThrow(/window must be an integer ≥ 0/);
  });
});

describe('the per-layer plan', () => {
  const attention = { kind: 'attention', heads: 4, kvHeads: 2, headDim: 8, scale: 1 / Math.sqrt(8), window: undefined, sinks: false, rope: undefined, qkNorm: false, softcap: 0 } as const;
  const layer = (window: number | undefined): LayerSpec => ({ attention: { ...attention, window }, ffn: { kind: 'dense', size: 16, gated: true, activation: 'silu' }, norm: { kind: 'rms', placement: 'pre', eps: 1e-5 } });

  it('sliding-window layers get a window policy of their size whatever was chosen; the others the chosen one', () => {
    const chosen = new FullPolicy(6);
    const made: number[] = [];
    const plan = planLayers([layer(512), layer(512), layer(undefined), layer(1024), layer(512), layer(undefined)], chosen, (w) => {
      made.push(w);
      return new FullPolicy(w);
    });
    expect(made).toEqual([512, 1024]);
    expect(plan[2]).toBe(chosen);
    expect(plan[5]).toBe(chosen);
    expect(plan[0]).toBe(plan[1]);
    expect(plan[0]).toBe(plan[4]);
    expect(plan[0]!.denseLayers).toBe(512);
    expect(plan[3]!.denseLayers).toBe(1024);
  });

  it('a layer without KV is refused by name', () => {
    const none: LayerSpec = { ...layer(undefined), attention: { kind: 'none' } as LayerSpec['attention'] };
    expect(() => planLayers([layer(undefined), none], new FullPolicy(2), () => new FullPolicy(0))).toThrow(/layer 1 has no attention/);
  });
});

describe.skipIf(!have)("policy 'window' in the forward pass on stories260K", () => {
  let model: LoadedModel;
  const runners: ModelRunner[] = [];
  beforeAll(async () => {
    model = await loadGgufModel(STORIES_260K);
  });
  afterAll(async () => {
    for (const r of runners) await r.dispose();
    await model?.close?.();
  });
  const runner = async (options: Parameters<typeof createModelRunner>[1]): Promise<ModelRunner> => {
    const r = await createModelRunner(model, { kvType: 'fp32', contextLength: 256, ...options });
    runners.push(r);
    return r;
  };
  const prompt = [1, 403, 407, 261, 378, 281, 378, 430, 271, 261, 500, 354, 323, 266, 284, 304, 268, 288, 271, 261, 378];

  async function greedy(r: ModelRunner, steps: number): Promise<{ ids: number[]; logits: Float32Array[] }> {
    let logits = await r.prefill(prompt);
    const ids: number[] = [];
    const all: Float32Array[] = [logits];
    for (let i = 0; i < steps; i++) {
      ids.push(argmax(logits));
      logits = await r.decode(ids[i]!);
      all.push(logits);
    }
    return { ids, logits: all };
  }

  it('sparse layers of decode steps attend the newest `window` positions: logits = a float64 forward masked the same way', async () => {
    const window = 12;
    const denseLayers = 2;
    const r = await runner({ policy: 'window', sparse: { window, denseLayers } });
    const { ids, logits } = await greedy(r, 40);
    expect(r.lastStepStats()!.layers.map((l) => l.selected)).toEqual([60, 60, 11, 11, 11]); // N = 21 + 39 past tokens
    const P = prompt.length;
    const ref = referenceForward(model, { firstVisible: (l, t) => (t >= P && l >= denseLayers ? Math.max(0, t - window + 1) : 0) }).logits([...prompt, ...ids]);
    let worst = 0;
    for (let s = 0; s < logits.length; s++) {
      const want = ref[P - 1 + s]!;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(logits[s]![i]! - want[i]!));
    }
    console.log(`window ${window}: max |Δ logit| against the masked float64 forward over ${logits.length} steps = ${worst.toExponential(2)}`);
    expect(worst).toBeLessThan(2e-3);
    // and the window matters: the unmasked forward differs
    const full = referenceForward(model).logits([...prompt, ...ids]);
    let apart = 0;
    for (let i = 0; i < full[P + 30]!.length; i++) apart = Math.max(apart, Math.abs(full[P + 30]![i]! - ref[P + 30]![i]!));
    expect(apart).toBeGreaterThan(0.05);
  });

  it('a window wider than the context is policy full, bit for bit', async () => {
    const wide = await greedy(await runner({ policy: 'window', sparse: { window: 1000 } }), 30);
    const full = await greedy(await runner({ policy: 'full' }), 30);
    expect(wide.ids).toEqual(full.ids);
    for (let s = 0; s < full.logits.length; s++) expect(wide.logits[s]).toEqual(full.logits[s]);
  });
});

describe('InfiniGen over sliding-window layers', () => {
  it("InfiniGen speculates no query for a sliding-window layer (it attends its window); the stage before a global layer still does", () => {
    const sliding = [true, true, false, true, true, false];
    const shape = { layers: 6, heads: 4, kvHeads: 2, headDim: 8, contextLength: 64, sliding };
    // the recipe reads the model only when it builds the policy
    const recipe = policyRecipe({ policy: 'infinigen', infinigen: { denseLayers: 1 } }, shape, {} as LoadedModel);
    // stage s outputs layer s+1's q̃: stage 1 for layer 2 and stage 4 for layer 5, the global ones
    expect(recipe.speculates).toEqual([false, true, false, false, true, false, false]);
    const uniform = policyRecipe({ policy: 'infinigen', infinigen: { denseLayers: 1 } }, { ...shape, sliding: undefined }, {} as LoadedModel);
    expect(uniform.speculates).toEqual([true, true, true, true, true, false, false]);
  });
});
