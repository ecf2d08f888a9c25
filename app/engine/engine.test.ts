// The engine core on stories260K: a generate request may choose its own KV policy. A different
// policy (or knobs) rebuilds the forward pass from the loaded model and starts from an empty cache;
// the same keeps the runner; `done` and the metrics events name the policy that ran; bad choices
// are refused with typed errors before the current runner is given up.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerateParamsSchema, LoadOptionsSchema, parseEngineRequest, type GenerateParamsInput } from '../common/protocol.ts';
import { haveSharedModel, STORIES_260K } from '../../test/support/models.ts';
import { createEngineCore } from './engine.ts';
import type { EngineCore, GenerationEvent } from './host/engine-core.ts';

const have = haveSharedModel(); // skips with a message when the model is missing; fails under CI

interface Run {
  ids: number[];
  done: Extract<GenerationEvent, { kind: 'done' }>;
  metricsPolicies: string[];
}

async function run(core: EngineCore, params: GenerateParamsInput): Promise<Run> {
  const ids: number[] = [];
  const metricsPolicies: string[] = [];
  let done: Run['done'] | undefined;
  const p = GenerateParamsSchema.parse({ maxTokens: 40, stopOnEos: false, sampling: { temperature: 0 }, ...params });
  for await (const e of core.generate({ text: 'Once upon a time' }, p, new AbortController().signal)) {
    if (e.kind === 'token') ids.push(e.id);
    else if (e.kind === 'metrics') metricsPolicies.push(e.metrics.policy);
    else if (e.kind === 'done') done = e;
  }
  expect(done?.stopReason, JSON.stringify(done?.error)).toBe('maxTokens');
  return { ids, done: done!, metricsPolicies };
}

describe.skipIf(!have)('engine: KV policy per generation (stories260K)', () => {
  const logs: string[] = [];
  const core = createEngineCore((line) => logs.push(line));
  let cache: string;
  const before = process.env.XDG_CACHE_HOME;

  beforeAll(() => {
    cache = mkdtempSync(path.join(os.tmpdir(), 'longhand-engine-'));
    process.env.XDG_CACHE_HOME = cache; // InfiniGen's skew cache goes here, not to the user's
  });

  afterAll(async () => {
    await core.unload();
    if (before === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = before;
    rmSync(cache, { recursive: true, force: true });
  });

  it('full → infinigen → full: the second full run repeats the first; done and metrics name the policy; the same policy keeps the runner', async () => {
    const info = await core.load(LoadOptionsSchema.parse({ modelPath: STORIES_260K, threads: 1, contextLength: 256, policy: 'full' }));
    expect(info.policy).toBe('full');

    const a = await run(core, {});
    expect(a.done.policy).toBe('full');
    expect(a.done.timings.policySwitchMs).toBeUndefined();
    expect(new Set(a.metricsPolicies)).toEqual(new Set(['full']));

    const b = await run(core, { policy: 'infinigen', infinigen: { fetchCap: 0.1 } });
    expect(b.done.policy).toBe('infinigen');
    expect(b.done.timings.policySwitchMs).toBeGreaterThan(0);
    expect(new Set(b.metricsPolicies)).toEqual(new Set(['infinigen']));
    expect(b.ids.length).toBe(40);

    const c = await run(core, {}); // no policy: the loaded one, rebuilt
    expect(c.done.policy).toBe('full');
    expect(c.done.timings.policySwitchMs).toBeGreaterThan(0);
    expect(c.ids).toEqual(a.ids);

    const d = await run(core, { policy: 'full' }); // the same: nothing rebuilt
    expect(d.done.timings.policySwitchMs).toBeUndefined();
    expect(d.ids).toEqual(a.ids);
    console.log(`policy switch on stories260K: full → infinigen ${b.done.timings.policySwitchMs!.toFixed(1)} ms, infinigen → full ${c.done.timings.policySwitchMs!.toFixed(1)} ms`);
  });

  it('snapkv per request; knobs count: other knobs rebuild, a budget ≥ the context equals full', async () => {
    await core.load(LoadOptionsSchema.parse({ modelPath: STORIES_260K, threads: 1, contextLength: 256 }));
    const full = await run(core, {});
    const wide = await run(core, { policy: 'snapkv', sparse: { budget: 1000 } });
    expect(wide.done.policy).toBe('snapkv');
    expect(wide.ids).toEqual(full.ids);
    const narrow = await run(core, { policy: 'snapkv', sparse: { budget: 2, window: 1 } });
    expect(narrow.done.timings.policySwitchMs).toBeGreaterThan(0);
    expect(new Set(narrow.metricsPolicies)).toEqual(new Set(['snapkv']));
    const again = await run(core, { policy: 'snapkv', sparse: { budget: 2, window: 1 } });
    expect(again.done.timings.policySwitchMs).toBeUndefined();
    expect(again.ids).toEqual(narrow.ids);
  });

  it('bad choices: the schema names the field; a policy the loaded pool budget cannot run is refused and the runner kept', async () => {
    const bad = (params: unknown) => () => parseEngineRequest({ kind: 'generate', requestId: 'g', prompt: { text: 'a' }, params });
    expect(bad({ policy: 'lru' })).toThrow(/params\.policy/);
    expect(bad({ policy: 'snapkv', sparse: { poolKernel: 4 } })).toThrow(/poolKernel must be odd/);
    expect(bad({ sparse: { window: 0 } })).toThrow(/params\.sparse\.window/);
    expect(bad({ infinigen: { alpha: -1 } })).toThrow(/params\.infinigen\.alpha/);

    await core.load(LoadOptionsSchema.parse({ modelPath: STORIES_260K, threads: 1, contextLength: 256, poolBudgetBytes: 1 << 20 }));
    const first = await run(core, {});
    const refused = async () => {
      for await (const _ of core.generate({ text: 'a' }, GenerateParamsSchema.parse({ policy: 'h2o' }), new AbortController().signal)) void _;
    };
    await expect(refused()).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/pool budget/) });
    const after = await run(core, {});
    expect(after.done.timings.policySwitchMs).toBeUndefined();
    expect(after.ids).toEqual(first.ids);
  });
});
