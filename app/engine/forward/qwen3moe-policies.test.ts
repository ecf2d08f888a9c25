// Every row policy on the Qwen3-MoE fixture (test/fixtures/families/qwen3moe.ts: 3 layers of 16
// experts, top-4). Attention is Qwen3's, so every policy and InfiniGen's speculation run unchanged;
// what this holds is that the mixture-of-experts stages sit under each of them: a prompt of ~150
// tokens, then 16 decode steps teacher-forced on the ids `full` picks greedily, per policy:
//   - the logits are finite; the top-1 agreement with `full` is printed (a sparse policy at a
//     fetch cap of 0.3 of ~150 tokens drops mass on this random model: measured 7 to 16 of 16);
//   - each decode step reads, per layer, the router and exactly 4 experts' gate, up and down rows:
//     the native stages' count (ModelRunner.lastExperts) equals that sum of the tensors' bytes, and
//     the step metrics report it as expertBytesPerToken, /metrics as longhand_expert_bytes_per_token,
//     and `longhand inspect` (inspectModel) predicts it from the tensors before anything runs;
//   - each layer's routing of the step is 4 distinct experts of 16;
//   - the load makes the attention matrices the process's own pages (ownTensors) and never the
//     expert tensors: they stay the mapped file's, read where routing sends the kernels.
import { describe, expect, it } from 'vitest';
import { qwen3moeGgufFixture } from '../../../test/fixtures/families/qwen3moe.ts';
import { ServerMetrics } from '../../server/metrics.ts';
import { StepMetricsSampler } from '../metrics/step-metrics.ts';
import { inspectModel } from '../model/inspect.ts';
import { loadModel } from '../model/load-model.ts';
import { createTokenizer } from '../model/tokenizer/tokenizer.ts';
import { createModelRunner, RUNNER_POLICIES } from './model-runner.ts';

const STEPS = 16;
const TEXT =
  'The old lighthouse keeper climbed the spiral stairs every evening, counting each of the one hundred and twelve steps, and wrote in his log what the sea had done that day. ' +
  'def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n# 今天天气怎么样？ The tests follow, one per line, in the order the keeper wrote them.';

function argmax(v: Float32Array): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
  return best;
}

describe('Qwen3-MoE under every row policy', () => {
  it('full, infinigen and the comparison policies run the MoE stages; a decode step reads the router and 4 experts per layer', async () => {
    const model = await loadModel(qwen3moeGgufFixture('F32'));
    try {
      const tokenizer = await createTokenizer(model.tokenizer);
      const prompt = tokenizer.encode(TEXT, { parseSpecial: true });
      expect(prompt.length).toBeGreaterThan(64);
      const { layers, moe } = { layers: model.hyper.layers, moe: model.hyper.moe! };
      const bytesOf = (name: string): number => model.tensors.get(name)!.bytes().byteLength;
      // per decode step: every layer's router, and 4 of its 16 experts' rows of each expert tensor
      let expected = 0;
      for (let l = 0; l < layers; l++) {
        expected += bytesOf(`blk.${l}.ffn_gate_inp.weight`);
        for (const t of ['gate', 'up', 'down']) expected += (bytesOf(`blk.${l}.ffn_${t}_exps.weight`) / moe.experts) * moe.expertsUsed;
      }
      // the expert tensors stay the file's pages: the stages never make them the process's own (a copy)
      const owned: string[] = [];
      const own = model.ownTensors!.bind(model);
      model.ownTensors = (names, threads) => {
        owned.push(...names.filter((n) => model.tensors.has(n)));
        return own(names, threads);
      };
      // what `longhand inspect` says a token reads, before anything runs
      expect(inspectModel(model).moe?.expertBytesPerToken).toBe(expected);
      let forced: number[] | undefined;
      for (const policy of RUNNER_POLICIES) {
        const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 256, prefillChunk: 64, policy, sparse: { fetchCap: 0.3, denseLayers: 1 } });
        try {
          expect(runner.dense.engine).toBe('native');
          const sampler = new StepMetricsSampler(runner, model.hyper, policy);
          let logits = await runner.prefill(prompt);
          const picks: number[] = [];
          for (let i = 0; i < STEPS; i++) {
            expect(logits.every(Number.isFinite)).toBe(true);
            picks.push(argmax(logits));
            logits = await runner.decode(forced?.[i] ?? picks[i]!);
            const experts = runner.lastExperts();
            expect(experts?.bytes).toBe(expected);
            expect(experts!.routed).toHaveLength(layers);
            for (const routed of experts!.routed) {
              if (routed === undefined) throw new Error('a layer without routing');
              expect(routed).toHaveLength(moe.expertsUsed);
              expect(new Set(routed).size).toBe(moe.expertsUsed);
              expect(Math.max(...routed)).toBeLessThan(moe.experts);
            }
          }
          const metrics = sampler.snapshot(STEPS);
          sampler.close();
          expect(metrics.expertBytesPerToken).toBe(expected);
          const served = new ServerMetrics(() => ({ model: undefined, queueWaiting: 0, generating: false }));
          served.observeStep(metrics);
          expect(served.render()).toContain(`\nlonghand_expert_bytes_per_token ${expected}\n`);
          if (forced === undefined) {
            expect(owned).toContain('blk.0.attn_q.weight');
            expect(owned.filter((n) => n.includes('_exps'))).toEqual([]);
          }
          forced ??= picks; // full runs first: its greedy ids teacher-force the others
          const agree = picks.filter((id, i) => id === forced![i]).length;
          console.log(`qwen3moe ${policy}: ${agree}/${STEPS} top-1 as full, ${expected} expert bytes per decode step (${layers} layers × router + ${moe.expertsUsed} of ${moe.experts} experts)`);
          if (policy === 'full') expect(agree).toBe(STEPS);
        } finally {
          await runner.dispose();
        }
      }
    } finally {
      model.close();
    }
  }, 300_000);
});
