// Prefix reuse on both reference models (issue 10's exactness acceptance): greedy text generated
// after (a) reusing a cached prefix, (c) a cancelled-then-resumed prefill, and (d) a full → streaming
// → full switch that keeps the cache, is token for token the text of a fresh run of the same prompt
// from an empty cache (reusePrefix false), for fp16 and int8 KV; with InfiniGen against a fresh
// InfiniGen run. Each case also checks done.cache: how many tokens were reused and prefilled.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerateParamsSchema, LoadOptionsSchema, type GenerateParamsInput, type LoadOptionsInput } from '../common/protocol.ts';
import { haveSharedModel, KJV_EVAL_DIR, KJV_HD64, STORIES_260K } from '../../test/support/models.ts';
import { createEngineCore } from './engine.ts';
import type { EngineCore, GenerationEvent } from './host/engine-core.ts';

type Done = Extract<GenerationEvent, { kind: 'done' }>;

interface Run {
  ids: number[];
  done: Done;
}

const CHUNK = 64;

async function run(core: EngineCore, prompt: number[], params: GenerateParamsInput = {}, signal = new AbortController().signal): Promise<Run> {
  const ids: number[] = [];
  let done: Done | undefined;
  const p = GenerateParamsSchema.parse({ maxTokens: 32, stopOnEos: false, sampling: { temperature: 0 }, ...params });
  for await (const e of core.generate({ ids: prompt }, p, signal)) {
    if (e.kind === 'token') ids.push(e.id);
    else if (e.kind === 'done') done = e;
  }
  return { ids, done: done! };
}

/** A signal that turns aborted on its n-th read: the runner reads it once per layer, so the abort lands inside a known chunk. */
function abortOnRead(n: number): AbortSignal {
  const controller = new AbortController();
  const signal = controller.signal;
  const native = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'aborted')!.get!;
  let reads = 0;
  Object.defineProperty(signal, 'aborted', {
    get: () => {
      reads += 1;
      if (reads === n) controller.abort(new Error('test cancel'));
      return native.call(signal) as boolean;
    },
  });
  return signal;
}

interface Case {
  name: string;
  model: string;
  layers: number;
  /** a long prompt's text and a second, different one */
  text: string;
  other: string;
}

const kjvText = (file: string): string => (haveSharedModel(KJV_HD64) ? readFileSync(path.join(KJV_EVAL_DIR, file), 'utf8') : '');
const STORY =
  'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high. The ball flew over the fence and into the garden of an old man. Lily was scared, but she knocked on the door and said sorry. The old man smiled and gave her the ball back. They became good friends and played together every day. The next morning, Lily woke up early. The sun was shining and the birds were singing. She put on her shoes and ran to the park again. Her friend Ben was there with his new kite. It was blue and yellow, with a long tail. They ran across the grass and the kite went up into the sky.';
const OTHER_STORY =
  'Tom had a dog named Max. Max liked to run and jump in the snow. One cold day, Tom and Max went for a walk in the woods. They saw a little bird on a branch. The bird was sad because it could not fly. Tom took the bird home and gave it some food and water. Max watched the bird and wagged his tail. After a few days, the bird was happy and strong again. Tom opened the window and the bird flew away into the sky. Tom and Max waved goodbye. The next day, the bird came back with a friend. They sang a song for Tom and Max every morning, and Tom was very happy.';
const CASES: Case[] = [
  { name: 'stories260K', model: STORIES_260K, layers: 5, text: STORY, other: OTHER_STORY },
  { name: 'kjv-llama-hd64', model: KJV_HD64, layers: 6, text: kjvText('ruth-1.txt').slice(0, 1400), other: kjvText('jonah-1.txt').slice(0, 1400) },
];

for (const c of CASES) {
  const have = haveSharedModel(c.model); // skips with a message when missing; fails under CI
  describe.skipIf(!have)(`prefix reuse is exact (${c.name})`, () => {
    let cache: string;
    const before = process.env.XDG_CACHE_HOME;
    beforeAll(() => {
      cache = mkdtempSync(path.join(os.tmpdir(), 'longhand-reuse-'));
      process.env.XDG_CACHE_HOME = cache; // InfiniGen's skew cache goes here: fresh and reusing runs share it
    });
    afterAll(() => {
      if (before === undefined) delete process.env.XDG_CACHE_HOME;
      else process.env.XDG_CACHE_HOME = before;
      rmSync(cache, { recursive: true, force: true });
    });

    async function loaded(options: Partial<LoadOptionsInput>): Promise<{ core: EngineCore; tokens: (t: string) => number[] }> {
      const core = createEngineCore(() => {});
      await core.load(LoadOptionsSchema.parse({ modelPath: c.model, threads: 1, contextLength: 1024, prefillChunk: CHUNK, ...options }));
      return { core, tokens: (t) => core.tokenize(t, true) };
    }

    for (const kvType of ['fp16', 'int8'] as const) {
      it(`full, ${kvType}: (a) a continued and a diverging prompt, (c) a cancelled prefill resumed, (d) full → streaming → full; each equals a fresh run`, async () => {
        const { core, tokens } = await loaded({ kvType, policy: 'full' });
        try {
          const P = tokens(c.text);
          expect(P.length).toBeGreaterThan(3 * CHUNK);
          const first = await run(core, P);
          expect(first.done.cache).toMatchObject({ reusedTokens: 0, prefilledTokens: P.length, source: 'none' });

          // (a) Continue: the prompt is the draft plus the accepted suggestion
          const P2 = [...P, ...first.ids];
          const reused = await run(core, P2);
          // the cache held P + all but the last generated token (the last is sampled, never decoded)
          expect(reused.done.cache).toMatchObject({ reusedTokens: P2.length - 1, prefilledTokens: 1, source: 'memory' });
          const fresh = await run(core, P2, { reusePrefix: false });
          expect(fresh.done.cache).toMatchObject({ reusedTokens: 0, prefilledTokens: P2.length, dropped: 'disabled' });
          expect(reused.ids).toEqual(fresh.ids);

          // (a) an edit in the middle: reuse stops at the first differing token, the rest is freed
          const cut = 150;
          const P3 = [...P2.slice(0, cut), ...tokens(c.other).slice(1, 120)];
          const diverged = await run(core, P3);
          expect(diverged.done.cache).toMatchObject({ reusedTokens: cut, prefilledTokens: P3.length - cut });
          expect(diverged.ids).toEqual((await run(core, P3, { reusePrefix: false })).ids);

          // (c) a cancel during the prefill of a new prompt keeps the chunks that ran through every layer
          const P4 = tokens(c.other);
          expect(P4.length).toBeGreaterThan(3 * CHUNK);
          // reads: 1 before the prefill (the loop), then one per layer: abort in the third chunk's second layer
          const cancelled = await run(core, P4, {}, abortOnRead(1 + 2 * c.layers + 2));
          expect(cancelled.done.stopReason).toBe('cancelled');
          const shared = P4.findIndex((id, i) => id !== P3[i]); // the BOS (and maybe more) is shared with P3
          expect(cancelled.done.cache?.reusedTokens).toBe(shared);
          expect(cancelled.done.cache?.prefilledTokens).toBe(2 * CHUNK);
          const resumed = await run(core, P4);
          expect(resumed.done.cache).toMatchObject({ reusedTokens: shared + 2 * CHUNK, prefilledTokens: P4.length - shared - 2 * CHUNK });
          expect(resumed.ids).toEqual((await run(core, P4, { reusePrefix: false })).ids);

          // (d) full → streaming → full keeps the cache; tokens decoded under streaming are recomputed
          const A = await run(core, P);
          const S = [...P, ...A.ids];
          const streaming = await run(core, S, { policy: 'streaming', sparse: { fetchCap: 0.25 } });
          expect(streaming.done.policy).toBe('streaming');
          expect(streaming.done.cache).toMatchObject({ reusedTokens: S.length - 1, prefilledTokens: 1, source: 'memory' });
          expect(streaming.done.cache?.dropped).toBeUndefined();
          expect(streaming.done.timings.policySwitchMs).toBeLessThan(1000);
          const F = [...S, ...streaming.ids];
          const back = await run(core, F, { policy: 'full' });
          expect(back.done.policy).toBe('full');
          // everything before the first token streaming decoded is reused; from there on it is recomputed
          expect(back.done.cache).toMatchObject({ reusedTokens: S.length, prefilledTokens: F.length - S.length });
          expect(back.ids).toEqual((await run(core, F, { policy: 'full', reusePrefix: false })).ids);
        } finally {
          await core.unload();
        }
      });
    }

    it('infinigen: a continued prompt reuses the prompt (not the sparsely decoded tokens) and equals a fresh infinigen run; an edit cuts back to a column checkpoint; infinigen → full → infinigen keeps the cache', async () => {
      const { core, tokens } = await loaded({ policy: 'infinigen', infinigen: { fetchCap: 0.2 } });
      try {
        const P = tokens(c.text);
        const first = await run(core, P);
        const P2 = [...P, ...first.ids];
        const reused = await run(core, P2);
        // generated tokens were decoded sparsely: recomputed from the end of the prompt on
        expect(reused.done.cache).toMatchObject({ reusedTokens: P.length, prefilledTokens: P2.length - P.length, source: 'memory' });
        const fresh = await run(core, P2, { reusePrefix: false });
        expect(reused.ids).toEqual(fresh.ids);
        expect(reused.done.policy).toBe('infinigen');

        // alpha/fetchCap switch keeps the sessions and the cache; full drops it (other graphs and pool)
        const knob = await run(core, P2, { infinigen: { fetchCap: 0.1 } });
        expect(knob.done.cache?.dropped).toBeUndefined();
        expect(knob.done.cache?.reusedTokens).toBe(P2.length - 1); // the same prompt: all but its last token (the column energies are kept there too)
        expect(knob.ids).toEqual((await run(core, P2, { infinigen: { fetchCap: 0.1 }, reusePrefix: false })).ids);
        // an edit inside the prompt: the column energies are exact at multiples of 64
        const edited = [...P2.slice(0, 150), ...P2.slice(0, 40)];
        const cut = await run(core, edited);
        expect(cut.done.cache?.reusedTokens).toBe(128);
        expect(cut.ids).toEqual((await run(core, edited, { reusePrefix: false })).ids);
        // full runs on InfiniGen's graphs (their speculative-query outputs ignored): the cache is kept,
        // and the text is a freshly loaded full engine's
        const full = await run(core, P2, { policy: 'full' });
        expect(full.done.cache?.dropped).toBeUndefined();
        // the edited prompt shared P2's first 150 tokens; InfiniGen's (now dormant) column energies are exact at 128
        expect(full.done.cache?.reusedTokens).toBe(128);
        expect(full.done.timings.policySwitchMs).toBeLessThan(1000);
        const plain = await loaded({ policy: 'full' });
        try {
          expect(full.ids).toEqual((await run(plain.core, P2)).ids);
        } finally {
          await plain.core.unload();
        }
        // and back: InfiniGen's column energies followed the prompt chunks full ran, so the cache stays exact
        const back = await run(core, P2, { policy: 'infinigen' });
        expect(back.done.cache).toMatchObject({ reusedTokens: P2.length - 1, source: 'memory' });
        expect(back.ids).toEqual((await run(core, P2, { policy: 'infinigen', reusePrefix: false })).ids);
      } finally {
        await core.unload();
      }
    });
  });
}
