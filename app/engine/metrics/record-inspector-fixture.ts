// Records the inspector's component-test fixture from the real engine (not part of any test run):
//
//   node --import tsx app/engine/metrics/record-inspector-fixture.ts [--out PATH]
//
// kjv-llama-hd64, the first ~1,200 characters of the held-out Jonah 1 as the prompt, greedy, 96
// tokens under infinigen (A), then 96 under h2o (B) on A's prompt ids — the inspector's Compare with dense measurements (every 4 steps) —
// and a third run under infinigen with a pool byte budget that evicts (memory view). Each token
// with its top-20 log-probabilities. Written in the inspector's JSON lines format (renderer's
// runs.ts: a 'longhand.run/1' line, then the run's samples).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { GenerateParams, LoadOptions, StepMetrics } from '../../common/protocol.ts';
import { KJV_EVAL_DIR, KJV_HD64, PROJECT_ROOT } from '../../../test/support/models.ts';
import { createEngineCore } from '../engine.ts';

const { values } = parseArgs({ options: { out: { type: 'string', default: join(PROJECT_ROOT, 'renderer', 'src', 'features', 'inspector', 'fixtures', 'kjv-runs.jsonl') } } });

const load = (poolBudgetBytes: number): LoadOptions => ({
  modelPath: KJV_HD64, device: 'cpu', threads: 1, contextLength: 1024, kvType: 'fp16', prefillChunk: 64, policy: 'infinigen',
  infinigen: { alpha: 5, partialRatio: 0.3, fetchCap: 0.2, denseLayers: 2, recalibrate: false },
  sparse: { fetchCap: 0.2, denseLayers: 2, sinks: 4, poolKernel: 7, pageSize: 16 }, poolBudgetBytes, inspect: false, dense: 'auto',
});
const params = (policy: GenerateParams['policy']): GenerateParams => ({
  maxTokens: 96, stopStrings: [], stopOnEos: false, policy, reusePrefix: true, logprobs: 20, inspectEvery: 4, inspectBudget: 1,
  sampling: { temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64 },
});

interface Recorded { requestId: string; policy: string; contextLength: number; promptIds: number[]; pieces: string[]; tokens: [number, string, [number, number][]?][]; samples: StepMetrics[] }

const core = createEngineCore(() => {});
const prompt = readFileSync(join(KJV_EVAL_DIR, 'jonah-1.txt'), 'utf8').slice(0, 1200);

async function record(requestId: string, input: { text: string } | { ids: number[] }, policy: GenerateParams['policy']): Promise<Recorded> {
  const run: Recorded = { requestId, policy: policy ?? '', contextLength: 0, promptIds: [], pieces: [], tokens: [], samples: [] };
  for await (const e of core.generate(input, params(policy), new AbortController().signal)) {
    if (e.kind === 'prompt') Object.assign(run, { promptIds: e.ids, pieces: e.pieces ?? [], contextLength: e.contextLength });
    else if (e.kind === 'token') run.tokens.push(e.top ? [e.id, e.text, e.top] : [e.id, e.text]);
    else if (e.kind === 'metrics') run.samples.push(e.metrics);
    else if (e.kind === 'done' && e.policy) run.policy = e.policy;
  }
  return run;
}

await core.load(load(0));
const a = await record('fixture-a-infinigen', { text: prompt }, 'infinigen');
const b = await record('fixture-b-h2o', { ids: a.promptIds }, 'h2o');
await core.unload();
// a budget of 256 tokens' rows for a ~400-token context: every decode step evicts
const hyper = { layers: 6, kvHeads: 2, headDim: 64 };
const perToken = hyper.layers * hyper.kvHeads * 2 * hyper.headDim * 2 + hyper.layers * 5 + hyper.layers * hyper.kvHeads * 2 * Math.floor(0.3 * hyper.headDim);
await core.load(load(perToken * 256));
const c = await record('fixture-c-infinigen-budget', { text: prompt }, 'infinigen');
await core.unload();

const lines: string[] = [];
for (const r of [a, b, c]) {
  lines.push(JSON.stringify({ record: 'longhand.run/1', requestId: r.requestId, policy: r.policy, contextLength: r.contextLength, promptIds: r.promptIds, pieces: r.pieces, tokens: r.tokens }));
  for (const s of r.samples) lines.push(JSON.stringify({ requestId: r.requestId, ...s }));
}
writeFileSync(values.out!, lines.join('\n') + '\n');
console.log(`${values.out}: ${[a, b, c].map((r) => `${r.policy} ${r.promptIds.length}+${r.tokens.length} tokens, ${r.samples.length} samples`).join('; ')}`);
