// Every row policy on the gpt-oss fixture (test/fixtures/families/gpt-oss.ts: 4 layers alternating a
// 128-token window and full attention, per-head sinks, 32 experts top-4). A prompt longer than the
// window, then 12 decode steps teacher-forced on the ids `full` picks greedily, per policy:
//   - the logits are finite, the window layers (0, 2) run 'window' whatever the policy (the plan),
//     and each step reads the router and 4 experts per layer (the native stages' count, what
//     `longhand inspect` predicts);
//   - the sinks stay in the softmax of a sparse selection: InfiniGen (and the oracle) selecting every
//     row give `full`'s logits bit for bit on this model, whose sinks move its text from the first
//     token (gpt-oss-llama-cpp.test.ts): a sparse path that dropped the sink term from its
//     denominator would be off there;
//   - the top-1 agreement of each policy with `full` is printed.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { gptOssGgufFixture } from '../../../test/fixtures/families/gpt-oss.ts';
import { inspectModel } from '../model/inspect.ts';
import { loadModel } from '../model/load-model.ts';
import { createTokenizer } from '../model/tokenizer/tokenizer.ts';
import { createModelRunner, RUNNER_POLICIES } from './model-runner.ts';

const STEPS = 12;
const TEXT =
  '<|start|>user<|message|>' +
  'The old lighthouse keeper climbed the spiral stairs every evening, counting each of the one hundred and twelve steps, and wrote in his log what the sea had done that day. '.repeat(4) +
  '<|end|><|start|>assistant';

const cacheDir = mkdtempSync(join(tmpdir(), 'longhand-gpt-oss-skew-'));
afterAll(() => rmSync(cacheDir, { recursive: true, force: true }));

function argmax(v: Float32Array): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
  return best;
}

describe('gpt-oss under every row policy', () => {
  it('full, infinigen and the comparison policies run past the window with the sinks; everything selected is full bit for bit', async () => {
    const model = await loadModel(gptOssGgufFixture('F32'));
    try {
      const tokenizer = await createTokenizer(model.tokenizer);
      const prompt = tokenizer.encode(TEXT, { parseSpecial: true });
      expect(prompt.length).toBeGreaterThan(128);
      // per decode step: each layer's router and 4 of its 32 experts' gate, up and down rows, as `longhand inspect` predicts
      const perToken = inspectModel(model).moe!.expertBytesPerToken;
      let routerAndExperts = 0;
      for (let l = 0; l < 4; l++) {
        routerAndExperts += model.tensors.get(`blk.${l}.ffn_gate_inp.weight`)!.bytes().byteLength;
        for (const t of ['gate', 'up', 'down']) routerAndExperts += (model.tensors.get(`blk.${l}.ffn_${t}_exps.weight`)!.bytes().byteLength / 32) * 4;
      }
      expect(perToken).toBe(routerAndExperts);
      let forced: number[] | undefined;
      const fullLogits: Float32Array[] = [];
      const runs: { name: string; options: Parameters<typeof createModelRunner>[1] }[] = [
        ...RUNNER_POLICIES.map((policy) => ({ name: policy, options: { policy, sparse: { fetchCap: 0.3, denseLayers: 1 }, infinigen: { cacheDir, fetchCap: 0.3, denseLayers: 1 } } })),
        { name: 'infinigen (every row)', options: { policy: 'infinigen' as const, infinigen: { cacheDir, alpha: 1e30, fetchCap: 1, denseLayers: 0 } } },
      ];
      for (const { name, options } of runs) {
        const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 512, prefillChunk: 64, ...options });
        try {
          expect(runner.dense.engine).toBe('native');
          let logits = await runner.prefill(prompt);
          const picks: number[] = [];
          let identical = true;
          for (let i = 0; i < STEPS; i++) {
            expect(logits.every(Number.isFinite)).toBe(true);
            if (forced === undefined) fullLogits.push(logits);
            else identical &&= Buffer.from(logits.buffer, logits.byteOffset, logits.byteLength).equals(Buffer.from(fullLogits[i]!.buffer, fullLogits[i]!.byteOffset, fullLogits[i]!.byteLength));
            picks.push(argmax(logits));
            logits = await runner.decode(forced?.[i] ?? picks[i]!);
            const experts = runner.lastExperts()!;
            expect(experts.bytes).toBe(perToken);
            expect(experts.routed).toHaveLength(4);
            for (const routed of experts.routed) expect(new Set(routed).size).toBe(4);
            const stats = runner.lastStepStats();
            if (stats !== undefined && name !== 'full') {
              // the window layers run their band whatever the user's policy
              for (const l of stats.layers.filter((s) => s.layer === 0 || s.layer === 2)) expect(l.selected).toBeLessThanOrEqual(128);
            }
          }
          forced ??= picks;
          const agree = picks.filter((id, i) => id === forced![i]).length;
          console.log(`gpt-oss ${name}: ${agree}/${STEPS} top-1 as full${forced === picks ? '' : `, logits ${identical ? 'bit for bit' : 'not'} full's`}`);
          if (name === 'full') expect(agree).toBe(STEPS);
          if (name === 'infinigen (every row)') expect(identical).toBe(true);
        } finally {
          await runner.dispose();
        }
      }
    } finally {
      model.close();
    }
  }, 300_000);

  it('a Continue past the window (the cache cut back to a resume point, the rest prefilled) gives the logits of a fresh run, bit for bit, under full and infinigen', async () => {
    const model = await loadModel(gptOssGgufFixture('F32'));
    try {
      const tokenizer = await createTokenizer(model.tokenizer);
      const prompt = tokenizer.encode(TEXT, { parseSpecial: true });
      for (const policy of ['full', 'infinigen'] as const) {
        const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 512, prefillChunk: 64, policy, infinigen: { cacheDir, fetchCap: 0.3, denseLayers: 1 } });
        try {
          // a first generation: the prompt and 8 greedy tokens
          let logits = await runner.prefill(prompt);
          const ids = [...prompt];
          for (let i = 0; i < 8; i++) {
            ids.push(argmax(logits));
            logits = await runner.decode(ids.at(-1)!);
          }
          // the user edits the last tokens: cut back to where the cache is exact, prefill the rest
          const edited = [...ids.slice(0, ids.length - 3), ...tokenizer.encode(' The keeper', { parseSpecial: false })];
          const cut = runner.resumePoint(ids.length - 3);
          runner.truncate(cut);
          const continued = await runner.prefill(edited.slice(cut));
          runner.reset();
          const fresh = await runner.prefill(edited);
          const same = Buffer.from(continued.buffer, continued.byteOffset, continued.byteLength).equals(Buffer.from(fresh.buffer, fresh.byteOffset, fresh.byteLength));
          console.log(`gpt-oss ${policy}: Continue from position ${cut} of ${ids.length} (${edited.length - cut} tokens prefilled, window rings wrapped) ${same ? '==' : '!='} a fresh run of ${edited.length} tokens`);
          expect(cut).toBeGreaterThan(128);
          expect(same).toBe(true);
        } finally {
          await runner.dispose();
        }
      }
    } finally {
      model.close();
    }
  }, 300_000);
});
