// Qwen3 through the whole engine (the path a user's generation takes) on the F32 fixture of
// test/fixtures/families/qwen3.ts (real Qwen3 tokenizer and chat template; per-head q/k norms;
// head_dim 128 on a hidden size of 256; tied LM head; native dense stages): a chat prompt of
// ~230 tokens under `full`, `infinigen` and the comparison policies (h2o, streaming, quest, snapkv)
// runs, layer 1 sparse (denseLayers 1: InfiniGen speculates for it from layer 0's input, with
// layer 1's q norm); a Continue (the prompt plus the suggestion) reuses the cached prefix and gives
// token for token what a fresh run gives; a snapshot restored into a freshly loaded engine
// continues like a fresh run (full fp16 and InfiniGen).
//
// F32 weights, because "equal to a fresh run" compares a decode (the reused tokens were decoded one
// at a time) with a prefill (the fresh run prefills them): the native F32 kernels give both the same
// bits, while the Q8_0 kernels' decode and prefill paths differ in the last bits (~1e-6 of a logit),
// which an fp16 KV row sometimes rounds the other way, and this random model's layers amplify that
// into a different greedy token now and then (measured: max |Δ logit| 4e-2 over 50 steps).
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerateParamsSchema, LoadOptionsSchema, type GenerateParamsInput, type LoadOptionsInput } from '../common/protocol.ts';
import { qwen3GgufFixture } from '../../test/fixtures/families/qwen3.ts';
import { createEngineCore } from './engine.ts';
import { ChatTemplate } from './model/chat-template.ts';
import { loadModel } from './model/load-model.ts';
import { createTokenizer } from './model/tokenizer/tokenizer.ts';
import type { EngineCore, GenerationEvent } from './host/engine-core.ts';

type Done = Extract<GenerationEvent, { kind: 'done' }>;

interface Run {
  ids: number[];
  done: Done;
  /** fetchRatio of every metrics event (selected / candidates, mean over layers) */
  fetch: number[];
}

async function run(core: EngineCore, prompt: number[], params: GenerateParamsInput = {}): Promise<Run> {
  const ids: number[] = [];
  const fetch: number[] = [];
  let done: Done | undefined;
  for await (const e of core.generate({ ids: prompt }, GenerateParamsSchema.parse({ maxTokens: 24, stopOnEos: false, sampling: { temperature: 0 }, ...params }), new AbortController().signal)) {
    if (e.kind === 'token') ids.push(e.id);
    else if (e.kind === 'metrics') fetch.push(e.metrics.fetchRatio);
    else if (e.kind === 'done') done = e;
  }
  return { ids, done: done!, fetch };
}

const ESSAY = [
  'The lighthouse stood at the end of a long stone pier, and every night its keeper climbed the ninety-one steps to light the lamp.',
  'He kept a log of the ships that passed: their names, their flags, the hour they rounded the point, and the weather they brought with them.',
  '灯塔守护者每天晚上都会点亮灯，记录经过的船只。Some nights the fog was so thick that he rang the bell every two minutes until dawn.',
  'In the spring the gulls came back; in the autumn the storms did. Between them there were long, quiet weeks in which nothing happened at all,',
  'and he wrote down that nothing had happened, because a log with an empty day in it is a log someone stopped keeping. 🌊⚓',
  'def log(entry):\n    with open("log.txt", "a") as f:\n        f.write(entry + "\\n")\n',
  'Years later, a historian read the whole log from the first page to the last and found, in the margins, a second story the keeper had never told anyone.',
].join(' ');

describe('Qwen3 through the engine: policies, prefix reuse, snapshots', () => {
  let dir: string;
  let prompt: number[];
  const model = qwen3GgufFixture('F32');
  const before = process.env.XDG_CACHE_HOME;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'longhand-qwen3-engine-'));
    process.env.XDG_CACHE_HOME = path.join(dir, 'cache'); // InfiniGen's skew cache: fresh and reusing runs share it
    // the file's own chat template, tokenized with its markers as control tokens (what a chat request does)
    const file = await loadModel(model);
    try {
      const tokenizer = await createTokenizer(file.tokenizer);
      const template = ChatTemplate.forTokenizer(file.chatTemplate, tokenizer);
      const rendered = template.render([{ role: 'user', content: `Summarize this, then continue it.\n\n${ESSAY}` }]);
      prompt = tokenizer.encode(rendered, template.encodeOptionsFor(rendered));
    } finally {
      file.close();
    }
  });
  afterAll(() => {
    if (before === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = before;
    rmSync(dir, { recursive: true, force: true });
  });

  async function loaded(options: Partial<LoadOptionsInput>): Promise<EngineCore> {
    const core = createEngineCore(() => {});
    await core.load(LoadOptionsSchema.parse({ modelPath: model, threads: 1, contextLength: 1024, prefillChunk: 64, ...options }));
    return core;
  }

  const policies = [
    { policy: 'full' },
    { policy: 'infinigen', infinigen: { fetchCap: 0.2, denseLayers: 1 } },
    { policy: 'h2o', sparse: { fetchCap: 0.25, denseLayers: 1 } },
    { policy: 'streaming', sparse: { fetchCap: 0.25, denseLayers: 1 } },
    { policy: 'quest', sparse: { fetchCap: 0.25, denseLayers: 1 } },
    { policy: 'snapkv', sparse: { fetchCap: 0.25, denseLayers: 1 } },
  ] as const;

  /** The first run, a Continue that reuses the cache, and the same prompt run fresh. */
  async function continueAndFresh(options: Partial<LoadOptionsInput>): Promise<{ first: Run; reused: Run; fresh: Run; P2: number[] }> {
    const core = await loaded(options);
    try {
      const first = await run(core, prompt);
      const P2 = [...prompt, ...first.ids];
      const reused = await run(core, P2);
      const fresh = await run(core, P2, { reusePrefix: false });
      return { first, reused, fresh, P2 };
    } finally {
      await core.unload();
    }
  }

  for (const options of policies) {
    // H2O is held to "runs and reuses" here; its exactness is the known failure below
    const exact = options.policy !== 'h2o';
    it(`${options.policy}: runs a ~230-token chat prompt; a Continue reuses the prefix${exact ? ' and equals a fresh run' : ''}`, async () => {
      expect(prompt.length).toBeGreaterThan(3 * 64); // several prefill chunks
      expect(prompt[0]).toBe(151644); // <|im_start|> as a control token, no BOS (add_bos_token false)
      const { first, reused, fresh, P2 } = await continueAndFresh(options);
      expect(first.done.policy).toBe(options.policy);
      expect(first.ids).toHaveLength(24);
      // sparse policies: layer 1 attended fewer rows than it holds
      if (options.policy !== 'full') expect(Math.min(...first.fetch)).toBeLessThan(1);
      // full keeps the decoded tokens; a sparse policy's decoded rows are recomputed, so its reuse stops at the prompt
      expect(reused.done.cache?.reusedTokens).toBe(options.policy === 'full' ? P2.length - 1 : prompt.length);
      expect(fresh.done.cache).toMatchObject({ reusedTokens: 0, prefilledTokens: P2.length });
      console.log(`qwen3 ${options.policy}: prompt ${prompt.length}, continue reused ${reused.done.cache?.reusedTokens}, min fetch ratio ${Math.min(...first.fetch).toFixed(3)}, equals fresh ${JSON.stringify(reused.ids) === JSON.stringify(fresh.ids)}`);
      if (exact) expect(reused.ids).toEqual(fresh.ids);
    }, 300_000);
  }

  // Known, not Qwen3's: H2O's accumulated mass and its evictions of prompt slots made during the
  // first run's decode steps survive truncate() (h2o.ts forgets only what slots >= n contributed),
  // so a Continue selects from other heavy hitters than a fresh prefill of the same tokens. When
  // this starts passing, fold h2o into the exact cases above.
  it.fails('h2o: a Continue equals a fresh run', async () => {
    const { reused, fresh } = await continueAndFresh(policies[2]);
    expect(reused.ids).toEqual(fresh.ids);
  }, 300_000);

  for (const options of [{ kvType: 'fp16' }, { policy: 'infinigen', infinigen: { fetchCap: 0.2, denseLayers: 1 } }] as const) {
    it(`a snapshot restored into a fresh engine continues like a fresh run (${JSON.stringify(options)})`, async () => {
      const file = path.join(dir, `${JSON.stringify(options).replace(/\W/g, '')}.lhkv`);
      const a = await loaded(options);
      const first = await run(a, prompt);
      const saved = await a.saveSnapshot(file);
      expect(saved.tokens).toBeGreaterThanOrEqual(prompt.length);
      await a.unload();

      const b = await loaded(options);
      const P2 = [...prompt, ...first.ids];
      const restored = await b.loadSnapshot(file);
      expect(restored.tokens).toBe(saved.tokens);
      const continued = await run(b, P2);
      expect(continued.done.cache).toMatchObject({ reusedTokens: saved.tokens, prefilledTokens: P2.length - saved.tokens });
      const fresh = await run(b, P2, { reusePrefix: false });
      expect(continued.ids).toEqual(fresh.ids);
      await b.unload();
    }, 300_000);
  }
});
