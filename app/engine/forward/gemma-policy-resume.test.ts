// H2O and SnapKV on models with window layers (Gemma 3: one global layer of 8; Gemma 2: local and
// global alternating): the policy acts on the global layers only (the window layers attend their
// rings whatever the policy), its own state (H2O's mass, SnapKV's window queries) is kept for those
// layers, and a Continue (cut back to the prompt's end after 24 greedy steps, 8 of the steps'
// tokens prefilled again) and a snapshot of the prompt restored into another runner continue token for
// token as a fresh prefill of the same text does, at a point that is not 0 (the rings still hold
// the window there, the policy has a checkpoint at the prompt's last chunk end).
//
// Equal greedy ids alone would prove little (v1 of the Gemma fixtures repeated one token greedily;
// v2's runs vary, families/gemma.ts), so the test also holds every step's logits to a fresh run's
// (F32, max |Δ| ≤ 1e-5) and shows that the state matters: the same restore with a wrong state (H2O's
// mass zeroed; SnapKV's queries negated: zeroed ones would vote uniformly, which ranks no slot
// differently) moves them by more than 1e-3.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { gemmaFixtureSet, GEMMA2_FIXTURE, GEMMA3_FIXTURE, type GemmaFixtureOptions } from '../../../test/fixtures/families/gemma.ts';
import { loadModel } from '../model/load-model.ts';
import { createGgufTokenizer } from '../model/tokenizer/tokenizer.ts';
import { createModelRunner, type ModelRunner } from './model-runner.ts';

const dir = join(tmpdir(), 'longhand-gemma-fixtures');
mkdirSync(dir, { recursive: true });

// prompts of gemma-llama-cpp.test.ts (text and code: this random model's greedy run varies on them)
const TEXTS = [
  'The old lighthouse keeper climbed the spiral stairs every evening, counting each of the one hundred and twelve steps, and wrote in his log',
  'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n# Now the tests:\n',
];
const N = 24;

function argmax(v: Float32Array): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
  return best;
}

/** n greedy steps from the runner's state: each step's logits, the first `logits`. */
async function greedy(runner: ModelRunner, logits: Float32Array, n: number): Promise<Float32Array[]> {
  const out = [logits];
  while (out.length < n) out.push(await runner.decode(argmax(out.at(-1)!)));
  return out;
}

/** The largest |Δ| between two runs' logits, step by step. */
function maxDiff(a: Float32Array[], b: Float32Array[]): number {
  let worst = 0;
  a.forEach((x, s) => x.forEach((v, i) => (worst = Math.max(worst, Math.abs(v - b[s]![i]!)))));
  return worst;
}

const families: [string, GemmaFixtureOptions][] = [
  ['Gemma 3', GEMMA3_FIXTURE],
  ['Gemma 2', GEMMA2_FIXTURE],
];

describe.each(families)('%s: H2O and SnapKV resume exactly', (name, options) => {
  const set = gemmaFixtureSet(dir, options);

  it.each(['h2o', 'snapkv'] as const)('%s: a Continue and a restored snapshot of the prompt continue as a fresh prefill does', async (policy) => {
    const model = await loadModel(set.gguf.F32);
    const runners: ModelRunner[] = [];
    // SnapKV at half the prompt: a budget (47) above its window (32), so the votes choose slots (at
    // a budget <= the window it keeps the window alone and its queries never matter)
    const sparse = { fetchCap: policy === 'snapkv' ? 0.5 : 0.2, denseLayers: 1 };
    const make = async (): Promise<ModelRunner> => {
      const r = await createModelRunner(model, { contextLength: 256, prefillChunk: 16, policy, sparse });
      runners.push(r);
      return r;
    };
    try {
      const tokenizer = createGgufTokenizer((model.tokenizer as { metadata: ReadonlyMap<string, unknown> }).metadata);
      const [one, two] = TEXTS.map((t) => tokenizer.encode(t, { parseSpecial: true }));
      const prompt = [...one!, ...two!.slice(1)]; // one BOS
      expect(prompt.length).toBeGreaterThan(3 * options.window);
      const a = await make();
      const first = (await greedy(a, await a.prefill(prompt), N)).map(argmax);
      // a short Continue (8 tokens): SnapKV's window (32 queries) then reaches back into the restored ones
      const P2 = [...prompt, ...first.slice(0, 8)];
      // the snapshot of the prompt (its rows, the rings' windows, the policy's state) and the Continue's cut
      const at = a.resumePoint(prompt.length);
      expect(at).toBe(prompt.length);
      const layers = Array.from({ length: model.hyper.layers }, (_, l) => {
        const out = new Uint8Array(a.snapshotLayerBytes(at, l));
        a.exportLayer(l, at, out);
        return out;
      });
      const state = a.exportPolicyState(at)!;
      expect(state.layers.length).toBeGreaterThan(0);
      expect(a.policyStateNeeds()!.layers).toEqual(state.layers); // the global layers past denseLayers
      a.truncate(at);
      const continued = await greedy(a, await a.prefill(P2.slice(at)), N);
      const fresh = await make();
      const expected = await greedy(fresh, await fresh.prefill(P2), N);
      const restored = await make();
      await restored.importSequence(at, async (l, into) => void into.set(layers[l]!), undefined, state);
      const afterRestore = await greedy(restored, await restored.prefill(P2.slice(at)), N);
      const stale = await make();
      await stale.importSequence(at, async (l, into) => void into.set(layers[l]!), undefined, { ...state, data: policy === 'h2o' ? new Float32Array(state.data.length) : state.data.map((x) => -x) });
      const withoutState = await greedy(stale, await stale.prefill(P2.slice(at)), N);
      const [dc, dr, ds] = [maxDiff(continued, expected), maxDiff(afterRestore, expected), maxDiff(withoutState, expected)];
      console.log(`${name} ${policy}: state of layers ${state.layers.join(', ')}; at ${at} of ${P2.length}, ${N} steps: max |Δ logit| Continue ${dc.toExponential(2)}, restore ${dr.toExponential(2)}, restore with a wrong state ${ds.toExponential(2)}`);
      expect(continued.map(argmax)).toEqual(expected.map(argmax));
      expect(afterRestore.map(argmax)).toEqual(expected.map(argmax));
      expect(dc).toBeLessThanOrEqual(1e-5);
      expect(dr).toBeLessThanOrEqual(1e-5);
      expect(ds).toBeGreaterThan(1e-3);
    } finally {
      for (const r of runners) await r.dispose();
      model.close();
    }
  }, 300_000);
});
