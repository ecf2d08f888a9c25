// gpt-oss through the whole engine (the path a user's generation takes: createEngineCore, the
// generation loop, prefix reuse, document snapshots) on the F32 fixture of
// test/fixtures/families/gpt-oss.ts (the o200k_harmony vocabulary and the model's own harmony chat
// template; 4 layers alternating a 128-token window (0, 2) and full attention (1, 3); per-head sinks;
// 32 experts top-4; native stages, fp16 KV): a chat request (the engine renders the harmony template
// and tokenizes it: the ids the test's own rendering gives), longer than the window, under `full` and
// `infinigen` (layers 1 and 3 sparse: denseLayers 1):
//   - a Continue (the prompt plus the suggestion) reuses the cached prefix and gives token for token
//     what a fresh run of the same ids gives, with `done.cache.reusedTokens` saying how much was
//     reused: the window layers' rings have wrapped past the prompt's start, so this holds only if
//     the cache is cut back where each ring still holds what the resumed tokens attend to;
//   - two edits of the cached text: near the end (the rings still hold the cut's window: reused up to
//     the edit under full) and at position 100 (overwritten in the rings, no checkpoint below 1,024
//     tokens: reused 0), each token for token a fresh run. The near edit found the inspector's step
//     probe scoring a ring by slot: a ring cut back after it wrapped keeps its rows in slots that are
//     not [0, length), so the probe read a forgotten slot and the generation ended in
//     NATIVE_BAD_ARGUMENT after one token (attentionScores now scores rows, metrics/step-probe.ts maps
//     them back to slots);
//   - a document snapshot saved after the first run and restored into a freshly loaded engine on the
//     same snapshot folder (the rings and their positions, the full layers' rows, InfiniGen's state)
//     continues like a fresh run.
//
// F32 weights for the reason qwen3-engine.test.ts gives: "equal to a fresh run" compares tokens that
// were decoded one at a time with the same tokens prefilled, which the native F32 kernels compute to
// the same bits and the Q8_0 kernels do not.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerateParamsSchema, LoadOptionsSchema, type ChatMessage, type GenerateParamsInput, type LoadOptionsInput, type Prompt } from '../common/protocol.ts';
import { gptOssGgufFixture } from '../../test/fixtures/families/gpt-oss.ts';
import { createEngineCore } from './engine.ts';
import { COLUMN_CHECKPOINT_EVERY } from './forward/policy/infinigen-state.ts';
import { ChatTemplate } from './model/chat-template.ts';
import { loadModel } from './model/load-model.ts';
import { createTokenizer } from './model/tokenizer/tokenizer.ts';
import type { EngineCore, GenerationEvent } from './host/engine-core.ts';

type Done = Extract<GenerationEvent, { kind: 'done' }>;

interface Run {
  /** the prompt's ids as the engine tokenized them (its 'prompt' event) */
  promptIds: number[];
  ids: number[];
  done: Done;
  /** fetchRatio of every metrics event (selected / candidates, mean over layers) */
  fetch: number[];
}

const STEPS = 24;

async function run(core: EngineCore, prompt: number[] | Prompt, params: GenerateParamsInput = {}): Promise<Run> {
  let promptIds: number[] = [];
  const ids: number[] = [];
  const fetch: number[] = [];
  let done: Done | undefined;
  for await (const e of core.generate(Array.isArray(prompt) ? { ids: prompt } : prompt, GenerateParamsSchema.parse({ maxTokens: STEPS, stopOnEos: false, sampling: { temperature: 0 }, ...params }), new AbortController().signal)) {
    if (e.kind === 'prompt') promptIds = e.ids;
    else if (e.kind === 'token') ids.push(e.id);
    else if (e.kind === 'metrics') fetch.push(e.metrics.fetchRatio);
    else if (e.kind === 'done') done = e;
  }
  return { promptIds, ids, done: done!, fetch };
}

const DOCUMENT = [
  'The lighthouse stood at the end of a long stone pier, and every night its keeper climbed the ninety-one steps to light the lamp.',
  'He kept a log of the ships that passed: their names, their flags, the hour they rounded the point, and the weather they brought with them.',
  'Some nights the fog was so thick that he rang the bell every two minutes until dawn. 🌊⚓',
  'In the spring the gulls came back; in the autumn the storms did. Between them there were long, quiet weeks in which nothing happened at all,',
  'and he wrote down that nothing had happened, because a log with an empty day in it is a log someone stopped keeping.',
].join(' ');

const MESSAGES: ChatMessage[] = [
  { role: 'system', content: 'Continue the writer’s text in the same voice.' },
  { role: 'user', content: `Continue this:\n\n${DOCUMENT}` },
];

describe('gpt-oss through the engine: prefix reuse and snapshots past the window', () => {
  let dir: string;
  let prompt: number[];
  const model = gptOssGgufFixture('F32');
  const before = process.env.XDG_CACHE_HOME;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'longhand-gpt-oss-engine-'));
    process.env.XDG_CACHE_HOME = path.join(dir, 'cache'); // InfiniGen's skew cache: fresh and reusing runs share it
    // the file's own harmony template, its markers tokenized as control tokens (what a chat request does)
    const file = await loadModel(model);
    try {
      const tokenizer = await createTokenizer(file.tokenizer);
      const template = ChatTemplate.forTokenizer(file.chatTemplate, tokenizer);
      const rendered = template.render(MESSAGES);
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

  const policies = {
    full: { policy: 'full' },
    infinigen: { policy: 'infinigen', infinigen: { fetchCap: 0.2, denseLayers: 1 } },
  } as const satisfies Record<string, Partial<LoadOptionsInput>>;

  for (const policy of ['full', 'infinigen'] as const) {
    it(`${policy}: a harmony chat prompt past the 128-token window; a Continue and edits reuse what the rings still hold and equal a fresh run; a document snapshot restored into a fresh engine continues like a fresh run`, async () => {
      expect(prompt.length).toBeGreaterThan(128 + 64); // the rings wrap before the first token; several prefill chunks
      expect(prompt[0]).toBe(200006); // <|start|> as a control token, no BOS
      const docs = path.join(dir, `${policy}-docs`);
      const a = await loaded(policies[policy]);
      let first: Run, reused: Run, fresh: Run, P2: number[];
      const edits: { name: string; ids: number[]; shared: number; reused: Run; fresh: Run }[] = [];
      try {
        await a.configureSnapshots({ dir: docs, capBytes: 1 << 30 });
        // a chat request (the engine renders the harmony template itself), saved as the document's snapshot
        first = await run(a, { messages: MESSAGES }, { document: 'draft' });
        P2 = [...prompt, ...first.ids];
        // a Continue (no document: nothing saved over the draft's snapshot), then the same ids fresh
        reused = await run(a, P2);
        fresh = await run(a, P2, { reusePrefix: false });
        // two edits of the text the cache holds (P2 and fresh's tokens): the last 4 tokens replaced
        // (the rings, 127 + 2·64 = 255 slots, still hold the window of the cut), and the prompt cut at
        // 100 (positions 0..99 are overwritten in the rings, and no checkpoint is taken below 1,024
        // tokens: honest reuse is 0)
        const tail = a.tokenize(' The keeper', false);
        for (const [name, shared] of [['the last 4 tokens', P2.length - 4], ['at 100', 100]] as const) {
          const ids = [...P2.slice(0, shared), ...tail];
          const edited = await run(a, ids);
          edits.push({ name, ids, shared, reused: edited, fresh: await run(a, ids, { reusePrefix: false }) });
        }
      } finally {
        await a.unload();
      }
      // a freshly loaded engine on the same snapshot folder: a Continue of the draft restores its snapshot
      const b = await loaded(policies[policy]);
      let restored: Run;
      try {
        await b.configureSnapshots({ dir: docs, capBytes: 1 << 30 });
        restored = await run(b, P2, { document: 'draft' });
      } finally {
        await b.unload();
      }
      expect(first.promptIds).toEqual(prompt); // the engine's rendering and tokenization of the chat = the template's here
      expect(first.done.policy).toBe(policy);
      expect(first.done.cache?.snapshot).toMatchObject({ saved: true });
      expect(first.ids).toHaveLength(STEPS);
      // equal runs of one repeated token would prove little
      expect(new Set(fresh.ids).size).toBeGreaterThanOrEqual(5);
      if (policy !== 'full') expect(Math.min(...first.fetch)).toBeLessThan(1);
      const same = (r: Run, f: Run): boolean => JSON.stringify(r.ids) === JSON.stringify(f.ids);
      console.log(
        `gpt-oss ${policy}: prompt ${prompt.length}, distinct ids ${new Set(first.ids).size}/${new Set(fresh.ids).size} of ${STEPS}, min fetch ratio ${Math.min(...first.fetch).toFixed(3)}; ` +
          `Continue of ${P2.length} reused ${reused.done.cache?.reusedTokens} (prefilled ${reused.done.cache?.prefilledTokens}), equals fresh ${same(reused, fresh)}; ` +
          edits.map((e) => `edit ${e.name} (${e.shared} shared) reused ${e.reused.done.cache?.reusedTokens}, equals fresh ${same(e.reused, e.fresh)}; `).join('') +
          `document snapshot restored (${restored.done.cache?.source}) reused ${restored.done.cache?.reusedTokens}, equals fresh ${same(restored, fresh)}`,
      );
      // full keeps the decoded tokens; a sparse policy's decoded rows are recomputed, so its reuse stops at the prompt
      const continued = policy === 'full' ? P2.length - 1 : prompt.length;
      expect(reused.done.cache).toMatchObject({ source: 'memory', reusedTokens: continued, prefilledTokens: P2.length - continued });
      expect(fresh.done.cache).toMatchObject({ reusedTokens: 0, prefilledTokens: P2.length });
      expect(reused.ids).toEqual(fresh.ids);
      const [near, far] = edits;
      // full: the shared prefix (the rings hold its window); infinigen: the partial-column energies' checkpoint
      // at or below it (every COLUMN_CHECKPOINT_EVERY positions: infinigen-state.ts), the rings holding that too
      expect(near!.reused.done.cache?.reusedTokens).toBe(policy === 'full' ? near!.shared : near!.shared - (near!.shared % COLUMN_CHECKPOINT_EVERY));
      expect(far!.reused.done.cache?.reusedTokens).toBe(0);
      for (const e of edits) {
        expect(e.reused.done.cache?.prefilledTokens, e.name).toBe(e.ids.length - e.reused.done.cache!.reusedTokens);
        expect(e.reused.ids, e.name).toEqual(e.fresh.ids);
      }
      // the snapshot holds what the first run's cache kept exact: the same reuse as the Continue in memory
      expect(restored.done.cache).toMatchObject({ source: 'snapshot', reusedTokens: continued, prefilledTokens: P2.length - continued, snapshot: { restored: true } });
      expect(restored.ids).toEqual(fresh.ids);
    }, 300_000);
  }
});
