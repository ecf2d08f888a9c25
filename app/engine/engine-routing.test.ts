// The inspector's routing view gets its data from `routing` events (GenerateParams.routing): after
// every forward call of a generation — each prompt chunk, each decode step — the experts each MoE
// layer sent the call's tokens to. Checked through the whole engine on the Qwen3-MoE F32 fixture
// (3 layers of 16 experts, top 4; test/fixtures/families/qwen3moe.ts) against the runner itself: the events
// cover every position the generation computed exactly once, in order, and each one's experts are
// what a separate runner, teacher-forced through the same ids, routes those positions to (where a
// prompt chunk skipped the last layer's MLP, its tokens say -1 there). A
// Continue that reuses the cached prompt sends routing only for what it computes; a request
// without `routing` and a model without experts send none.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerateParamsSchema, LoadOptionsSchema, type GenerateParamsInput } from '../common/protocol.ts';
import { qwen3GgufFixture } from '../../test/fixtures/families/qwen3.ts';
import { qwen3moeGgufFixture } from '../../test/fixtures/families/qwen3moe.ts';
import { createEngineCore } from './engine.ts';
import { createModelRunner } from './forward/model-runner.ts';
import type { EngineCore, GenerationEvent } from './host/engine-core.ts';
import { loadModel } from './model/load-model.ts';

type Routing = Extract<GenerationEvent, { kind: 'routing' }>;

const CHUNK = 16;
const TOKENS = 12;

async function generate(core: EngineCore, ids: number[], params: GenerateParamsInput): Promise<{ tokens: number[]; routing: Routing[]; order: string[] }> {
  const tokens: number[] = [];
  const routing: Routing[] = [];
  const order: string[] = [];
  for await (const e of core.generate({ ids }, GenerateParamsSchema.parse({ maxTokens: TOKENS, stopOnEos: false, sampling: { temperature: 0 }, ...params }), new AbortController().signal)) {
    order.push(e.kind);
    if (e.kind === 'token') tokens.push(e.id);
    else if (e.kind === 'routing') routing.push(e);
  }
  return { tokens, routing, order };
}

describe('routing events (the inspector’s routing view)', () => {
  const path = qwen3moeGgufFixture('F32');
  let core: EngineCore;
  // a prompt of 3 chunks and a bit, from the fixture's vocabulary
  const prompt = Array.from({ length: 3 * CHUNK + 5 }, (_, i) => 1000 + ((i * 7919) % 5000));

  beforeAll(async () => {
    core = createEngineCore(() => {});
    const info = await core.load(LoadOptionsSchema.parse({ modelPath: path, threads: 1, contextLength: 256, prefillChunk: CHUNK, kvType: 'fp32' }));
    expect(info.experts).toEqual({ count: 16, used: 4 });
  }, 120_000);
  afterAll(async () => {
    await core.unload();
  });

  it('cover every computed position once, in order, each before the token it produced, and equal the runner’s own routing', async () => {
    const { tokens, routing, order } = await generate(core, prompt, { routing: true, reusePrefix: false });
    expect(tokens).toHaveLength(TOKENS);
    // 4 prompt chunks, then one per decode step (the last token is sampled, never run)
    expect(routing.map((r) => [r.start, r.experts.length / (r.layers.length * r.k)])).toEqual([
      [0, CHUNK], [CHUNK, CHUNK], [2 * CHUNK, CHUNK], [3 * CHUNK, 5],
      ...Array.from({ length: TOKENS - 1 }, (_, i) => [prompt.length + i, 1]),
    ]);
    // every routing event comes before the token its call produced
    expect(order.slice(0, 6)).toEqual(['prompt', 'routing', 'routing', 'routing', 'routing', 'token']);
    expect(order.slice(6, 8)).toEqual(['routing', 'token']);
    for (const r of routing) {
      expect(r.layers).toEqual([0, 1, 2]);
      expect(r.k).toBe(4);
    }

    // a separate runner, teacher-forced through the prompt and the generated ids, routes the same way
    const model = await loadModel(path);
    const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 256, prefillChunk: prompt.length + TOKENS, threads: 1 });
    try {
      await runner.prefill([...prompt, ...tokens.slice(0, -1)], undefined, { allLogits: true });
      const { routed } = runner.lastExperts()!; // one chunk with every row's logits: every layer ran every token
      let compared = 0;
      let skipped = 0;
      for (const r of routing) {
        const width = r.layers.length * r.k;
        for (let t = 0; t < r.experts.length / width; t++) {
          for (const [li, layer] of r.layers.entries()) {
            const position = r.start + t;
            const mine = r.experts.slice(t * width + li * r.k, t * width + (li + 1) * r.k);
            if (mine[0] === -1) {
              // the three prompt chunks before the last need no logits: their last layer's MLP does not run
              expect(mine).toEqual([-1, -1, -1, -1]);
              expect([layer, position < 3 * CHUNK]).toEqual([2, true]);
              skipped++;
              continue;
            }
            const theirs = Array.from(routed[layer]!.subarray(position * r.k, (position + 1) * r.k));
            // top-k sets match; the order within a token's k is by weight, equal in both
            expect(mine, `position ${position} layer ${layer}`).toEqual(theirs);
            compared++;
          }
        }
      }
      expect(skipped).toBe(3 * CHUNK);
      expect(compared).toBe((prompt.length + TOKENS - 1) * 3 - skipped);
    } finally {
      await runner.dispose();
      model.close();
    }
  }, 120_000);

  it('a Continue routes only what it computes; no events without params.routing', async () => {
    const first = await generate(core, prompt, { routing: true });
    const continued = [...prompt, ...first.tokens];
    const next = await generate(core, continued, { routing: true });
    // the cached prompt + all but the last generated token were reused: the first event starts after them
    expect(next.routing[0]!.start).toBeGreaterThanOrEqual(prompt.length);
    const head = next.routing[0]!;
    expect(head.start + head.experts.length / (head.layers.length * head.k)).toBe(continued.length);
    const quiet = await generate(core, prompt, { reusePrefix: false });
    expect(quiet.routing).toEqual([]);
  }, 120_000);
});

describe('routing events on a model without experts', () => {
  it('are never sent, and the model info has no experts', async () => {
    const core = createEngineCore(() => {});
    try {
      const info = await core.load(LoadOptionsSchema.parse({ modelPath: qwen3GgufFixture('F32'), threads: 1, contextLength: 256, prefillChunk: CHUNK }));
      expect(info.experts).toBeUndefined();
      const { routing, tokens } = await generate(core, Array.from({ length: 20 }, (_, i) => 1000 + i), { routing: true });
      expect(tokens).toHaveLength(TOKENS);
      expect(routing).toEqual([]);
    } finally {
      await core.unload();
    }
  }, 120_000);
});
