// Qwen3 through the whole engine (the path a user's generation takes) on the F32 fixture of
// test/fixtures/families/qwen3.ts (real Qwen3 tokenizer and chat template; per-head q/k norms;
// head_dim 128 on a hidden size of 256; tied LM head; native dense stages, fp16 KV): a chat prompt
// of ~230 tokens under every KV policy (full, infinigen, h2o, streaming, quest, snapkv, oracle,
// window) runs, layer 1 sparse (denseLayers 1: InfiniGen speculates for it from layer 0's input,
// with layer 1's q norm); a Continue (the prompt plus the suggestion) reuses the cached prefix and
// gives token for token what a fresh run gives; a snapshot saved after the first run and restored
// into a freshly loaded engine continues like a fresh run. H2O's and SnapKV's own state is what
// makes those two exact: H2O's mass is checkpointed at the prompt's end and saved in the snapshot,
// SnapKV's window queries are kept apart from the decoded tokens' and saved too.
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
import { LonghandError } from '../common/errors.ts';
import { GenerateParamsSchema, KV_POLICIES, LoadOptionsSchema, type GenerateParamsInput, type KvPolicy, type LoadOptionsInput } from '../common/protocol.ts';
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

interface Outcome {
  first: Run;
  reused: Run;
  fresh: Run;
  restored: Run;
  restoredTokens: number;
  P2: number[];
  savedTokens: number;
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

  /** Every KV policy, layer 1 sparse under each (denseLayers 1): InfiniGen at a fetch cap of 0.2, the others at 0.25. */
  const policies: Record<KvPolicy, Partial<LoadOptionsInput>> = {
    full: { policy: 'full' },
    infinigen: { policy: 'infinigen', infinigen: { fetchCap: 0.2, denseLayers: 1 } },
    h2o: { policy: 'h2o', sparse: { fetchCap: 0.25, denseLayers: 1 } },
    streaming: { policy: 'streaming', sparse: { fetchCap: 0.25, denseLayers: 1 } },
    quest: { policy: 'quest', sparse: { fetchCap: 0.25, denseLayers: 1 } },
    snapkv: { policy: 'snapkv', sparse: { fetchCap: 0.25, denseLayers: 1 } },
    oracle: { policy: 'oracle', sparse: { fetchCap: 0.25, denseLayers: 1 } },
    window: { policy: 'window', sparse: { fetchCap: 0.25, denseLayers: 1 } },
  };

  /**
   * The first run (a snapshot saved after it), a Continue that reuses the cache, the same prompt
   * run fresh, and the snapshot restored into a freshly loaded engine and continued. Once per
   * policy: the known failures below read the same runs.
   */
  const outcomes = new Map<KvPolicy, Promise<Outcome>>();
  function continueFreshRestored(policy: KvPolicy): Promise<Outcome> {
    let outcome = outcomes.get(policy);
    if (outcome === undefined) {
      outcome = runPolicy(policy);
      outcomes.set(policy, outcome);
    }
    return outcome;
  }
  async function runPolicy(policy: KvPolicy): Promise<Outcome> {
    const file = path.join(dir, `${policy}.lhkv`);
    const a = await loaded(policies[policy]);
    let first: Run, reused: Run, fresh: Run, P2: number[], savedTokens: number;
    try {
      first = await run(a, prompt);
      savedTokens = (await a.saveSnapshot(file)).tokens;
      P2 = [...prompt, ...first.ids];
      reused = await run(a, P2);
      fresh = await run(a, P2, { reusePrefix: false });
    } finally {
      await a.unload();
    }
    const b = await loaded(policies[policy]);
    try {
      const restoredTokens = (await b.loadSnapshot(file)).tokens;
      const restored = await run(b, P2);
      return { first, reused, fresh, restored, restoredTokens, P2, savedTokens };
    } finally {
      await b.unload();
    }
  }

  for (const policy of KV_POLICIES) {
    it(`${policy}: runs a ~230-token chat prompt; a Continue reuses the prefix and equals a fresh run; a snapshot restores into a fresh engine and continues like a fresh run`, async () => {
      expect(prompt.length).toBeGreaterThan(3 * 64); // several prefill chunks
      expect(prompt[0]).toBe(151644); // <|im_start|> as a control token, no BOS (add_bos_token false)
      const { first, reused, fresh, restored, restoredTokens, P2, savedTokens } = await continueFreshRestored(policy);
      expect(first.done.policy).toBe(policy);
      expect(first.ids).toHaveLength(24);
      // equal runs of one repeated token would prove little (measured: 6 to 24 distinct ids of 24)
      expect(new Set(first.ids).size).toBeGreaterThanOrEqual(5);
      expect(new Set(fresh.ids).size).toBeGreaterThanOrEqual(5);
      // sparse policies: layer 1 attended fewer rows than it holds
      if (policy !== 'full') expect(Math.min(...first.fetch)).toBeLessThan(1);
      // full keeps the decoded tokens; a sparse policy's decoded rows are recomputed, so its reuse stops at the prompt
      expect(reused.done.cache?.reusedTokens).toBe(policy === 'full' ? P2.length - 1 : prompt.length);
      expect(fresh.done.cache).toMatchObject({ reusedTokens: 0, prefilledTokens: P2.length });
      expect(savedTokens).toBeGreaterThanOrEqual(prompt.length);
      expect(restoredTokens).toBe(savedTokens);
      expect(restored.done.cache).toMatchObject({ reusedTokens: savedTokens, prefilledTokens: P2.length - savedTokens });
      const same = (r: Run): boolean => JSON.stringify(r.ids) === JSON.stringify(fresh.ids);
      console.log(
        `qwen3 ${policy}: prompt ${prompt.length}, distinct ids ${new Set(first.ids).size}/${new Set(fresh.ids).size} of 24, min fetch ratio ${Math.min(...first.fetch).toFixed(3)}; ` +
          `Continue reused ${reused.done.cache?.reusedTokens}, equals fresh ${same(reused)}; snapshot of ${savedTokens} tokens restored, equals fresh ${same(restored)}`,
      );
      expect(reused.ids).toEqual(fresh.ids);
      expect(restored.ids).toEqual(fresh.ids);
    }, 300_000);
  }

  it('a snapshot without H2O’s or SnapKV’s own state (written under full) is refused under them (SNAPSHOT_MISMATCH, reason policy) and the prompt is prefilled', async () => {
    await continueFreshRestored('full'); // writes full.lhkv
    for (const policy of ['h2o', 'snapkv'] as const) {
      const core = await loaded(policies[policy]);
      try {
        const error: unknown = await core.loadSnapshot(path.join(dir, 'full.lhkv')).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error, policy).toBeInstanceOf(LonghandError);
        expect({ code: (error as LonghandError).code, reason: (error as LonghandError).details.reason }).toEqual({ code: 'SNAPSHOT_MISMATCH', reason: 'policy' });
        expect((await run(core, prompt)).done.cache).toMatchObject({ reusedTokens: 0, prefilledTokens: prompt.length });
      } finally {
        await core.unload();
      }
    }
  }, 300_000);
});
