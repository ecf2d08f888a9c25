// A Phi-4-mini-like model (phi3: fused q/k/v and gate/up, 0.75 partial rotary, LongRoPE long
// factors, tied embeddings; Phi-3's real vocabulary) through the engine core under every KV policy:
// full, infinigen (its speculation runs layer ℓ+1's query through layer ℓ+1's RoPE with the
// LongRoPE factors and the partial rotary) and the comparison policies. For each, greedy text after
// reusing a cached prefix, and after restoring a saved snapshot into a fresh engine, is token for
// token the text of a fresh run of the same prompt (reusePrefix false), and done.cache says how many
// tokens were reused.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writePhi3Gguf } from '../../test/fixtures/families/phi3.ts';
import { GenerateParamsSchema, KV_POLICIES, LoadOptionsSchema, type GenerateParamsInput, type KvPolicy } from '../common/protocol.ts';
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

const TEXT =
  'The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, polished the great lens, ' +
  'and wrote the weather in a leather book: wind from the north-west, 12 knots; a fishing boat, the "Mary Ann", passing at 19:40. ' +
  'def keep(light):\n    while light.on:\n        light.turn(0.25)\n' +
  'Years went by. The keeper grew old, the town below grew loud, and still the light turned, four times a minute, over the dark water.';

describe('phi3 under every KV policy: prefix reuse and snapshot restore equal a fresh run', () => {
  let dir: string;
  let model: string;
  const before = process.env.XDG_CACHE_HOME;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'longhand-phi3-policies-'));
    process.env.XDG_CACHE_HOME = path.join(dir, 'cache');
    model = path.join(dir, 'phi4-mini-like.gguf');
    // 4 layers so that InfiniGen speculates (its first 2 layers stay dense); LongRoPE long: 768 > 64
    writePhi3Gguf(model, { dim: 128, layers: 4, heads: 4, kvHeads: 2, ffn: 256, context: 8192, seed: 12, rotaryFraction: 0.75, tied: true, outStd: 0.5, longRope: { original: 64 }, type: 'F32' });
  });
  afterAll(() => {
    if (before === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = before;
    rmSync(dir, { recursive: true, force: true });
  });

  async function loaded(policy: KvPolicy): Promise<EngineCore> {
    const core = createEngineCore(() => {});
    await core.load(LoadOptionsSchema.parse({ modelPath: model, threads: 1, contextLength: 768, prefillChunk: 64, policy, ...(policy === 'infinigen' ? { infinigen: { fetchCap: 0.3 } } : {}) }));
    return core;
  }

  it.each(KV_POLICIES.map((p) => [p]))('%s', async (policy) => {
    const a = await loaded(policy);
    const P = a.tokenize(TEXT.repeat(2), true);
    expect(P.length).toBeGreaterThan(200);
    const first = await run(a, P);
    const P2 = [...P, ...first.ids];
    // prefix reuse: the cache holds P (and the generated tokens); the longer prompt reuses them
    const reused = await run(a, P2);
    expect(reused.done.cache?.reusedTokens).toBeGreaterThan(0);
    const fresh = await run(a, P2, { reusePrefix: false });
    expect(fresh.done.cache?.reusedTokens ?? 0).toBe(0);
    expect(reused.ids).toEqual(fresh.ids);
    // snapshot: saved after the first prompt, restored into a fresh engine
    await run(a, P, { reusePrefix: false });
    const file = path.join(dir, `${policy}.lhkv`);
    const saved = await a.saveSnapshot(file);
    await a.unload();
    const b = await loaded(policy);
    const restored = await b.loadSnapshot(file);
    expect(restored.tokens).toBe(saved.tokens);
    const continued = await run(b, P2);
    expect(continued.done.cache).toMatchObject({ reusedTokens: saved.tokens, prefilledTokens: P2.length - saved.tokens });
    expect(continued.ids).toEqual(fresh.ids);
    console.log(`phi3 ${policy}: ${P.length}-token prompt, prefix reuse ${reused.done.cache?.reusedTokens} tokens, snapshot ${saved.tokens} tokens; 24 ids equal a fresh run both ways`);
    await b.unload();
  }, 120_000);
});
