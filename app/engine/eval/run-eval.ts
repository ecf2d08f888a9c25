// One `longhand eval` run: load the reference ('full') and the policy's runner on the same model,
// teacher-force the text through both in lockstep, optionally free-run both greedily from the
// text's start, dispose. The CLI (app/cli/commands/eval.ts) only parses and prints.
import { createModelRunner, RUNNER_POLICIES, type InfinigenOptions, type ModelRunner, type RunnerPolicy, type SparsePolicyOptions } from '../forward/model-runner.ts';
import type { KvType } from '../../../native/index.js';
import type { LoadedModel } from '../model/types.ts';
import { compareWithReference, DEFAULT_PREFILL_TOKENS, firstDivergence, type AccuracyResult, type DivergenceResult } from './accuracy.ts';

export const EVAL_POLICIES: readonly RunnerPolicy[] = RUNNER_POLICIES;

/** Knobs of every policy in one object; each policy reads its own. */
export interface PolicyKnobs {
  alpha?: number;
  partialRatio?: number;
  /** InfiniGen's cap; the other policies' budget ratio when no fixed budget is given */
  fetchCap?: number;
  denseLayers?: number;
  budget?: number;
  window?: number;
  sinks?: number;
  topPages?: number;
  /** snapkv: max-pool kernel over the window's votes (odd) */
  poolKernel?: number;
  /** InfiniGen's skew cache folder */
  cacheDir?: string;
}

export interface EvalSpec {
  policy: RunnerPolicy;
  knobs?: PolicyKnobs;
  /** tokens the caches hold (default: the text's length, at least prefill + generate) */
  contextLength?: number;
  threads?: number;
  /** the candidate's KV rows (default fp16) */
  kvType?: KvType;
  /** the reference 'full' runner's KV rows (default fp16), so `kvType: 'int8', policy: 'full'` measures int8 itself */
  referenceKvType?: KvType;
  prefillTokens?: number;
  /** greedy tokens of the free run from the text's first prefillTokens tokens (0 / absent: none) */
  generate?: number;
  signal?: AbortSignal;
}

export interface EvalReport {
  policy: RunnerPolicy;
  knobs: PolicyKnobs;
  kvType: KvType;
  referenceKvType: KvType;
  tokens: number;
  prefillTokens: number;
  contextLength: number;
  accuracy: AccuracyResult;
  generation?: DivergenceResult & { tokens: number };
  ms: number;
}

/** The runner options of a policy and its knobs (budget parity: sparse policies get the same fetchCap). */
export function runnerPolicyOptions(policy: RunnerPolicy, k: PolicyKnobs = {}): { policy: RunnerPolicy; infinigen?: InfinigenOptions; sparse?: SparsePolicyOptions } {
  const def = <T extends object>(o: T): T => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
  if (policy === 'full') return { policy };
  if (policy === 'infinigen') return { policy, infinigen: def({ alpha: k.alpha, partialRatio: k.partialRatio, fetchCap: k.fetchCap, denseLayers: k.denseLayers, cacheDir: k.cacheDir }) };
  return { policy, sparse: def({ fetchCap: k.fetchCap, denseLayers: k.denseLayers, budget: k.budget, window: k.window, sinks: k.sinks, topPages: k.topPages, poolKernel: k.poolKernel }) };
}

export async function runEval(model: LoadedModel, ids: readonly number[], spec: EvalSpec): Promise<EvalReport> {
  const t0 = performance.now();
  const prefillTokens = spec.prefillTokens ?? DEFAULT_PREFILL_TOKENS;
  const generate = spec.generate ?? 0;
  const contextLength = spec.contextLength ?? Math.max(ids.length, prefillTokens + generate);
  const text = ids.slice(0, contextLength);
  const base = { contextLength, ...(spec.threads ? { threads: spec.threads } : {}) };
  const kvType = spec.kvType ?? 'fp16';
  const referenceKvType = spec.referenceKvType ?? 'fp16';
  const runners: ModelRunner[] = [];
  try {
    const reference = await createModelRunner(model, { ...base, kvType: referenceKvType, policy: 'full' });
    runners.push(reference);
    const candidate = await createModelRunner(model, { ...base, kvType, ...runnerPolicyOptions(spec.policy, spec.knobs) });
    runners.push(candidate);
    const accuracy = await compareWithReference(candidate, reference, text, { hyper: model.hyper, prefillTokens, ...(spec.signal ? { signal: spec.signal } : {}) });
    const report: EvalReport = { policy: spec.policy, knobs: spec.knobs ?? {}, kvType, referenceKvType, tokens: text.length, prefillTokens, contextLength, accuracy, ms: 0 };
    if (generate > 0) {
      const g = await firstDivergence(reference, candidate, text.slice(0, prefillTokens), generate, spec.signal);
      report.generation = { ...g, tokens: g.reference.length };
    }
    report.ms = performance.now() - t0;
    return report;
  } finally {
    for (const r of runners) await r.dispose();
  }
}
