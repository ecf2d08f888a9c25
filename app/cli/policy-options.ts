// The KV-policy options every engine command takes (generate, eval): one definition of the flags,
// their help lines and their checks, so the commands cannot drift apart.
import { UsageError } from '../common/errors.ts';
import { KV_POLICIES, type InfinigenKnobs, type KvPolicy, type SparseKnobs } from '../common/protocol.ts';
import type { PolicyKnobs } from '../engine/eval/run-eval.ts';
import { oneOf, positiveInteger } from './parse-args.ts';

export const POLICY_OPTIONS = {
  policy: { type: 'string' },
  alpha: { type: 'string' },
  'partial-ratio': { type: 'string' },
  'fetch-cap': { type: 'string' },
  'dense-layers': { type: 'string' },
  budget: { type: 'string' },
  window: { type: 'string' },
  sinks: { type: 'string' },
  'top-pages': { type: 'string' },
  'pool-kernel': { type: 'string' },
} as const;

export const POLICY_HELP = `  --alpha A             infinigen: score margin below each head's maximum (default 5)
  --partial-ratio R     infinigen: partial columns r (default 0.3)
  --fetch-cap C         infinigen's cap; the other policies keep ⌊C·context⌋ tokens (default 0.2)
  --dense-layers D      layers below D attend to everything (default 2)
  --budget N            streaming/h2o/quest/oracle/snapkv/window: fixed tokens per KV head instead of the
                        cap (snapkv: of the prompt, window included; generated tokens always kept)
  --window W            streaming: recent window; h2o: recent tokens; snapkv: observation window,
                        the last prompt queries that vote (default 32); window: tokens attended,
                        the current one included (default: the cap's tokens + 1)
  --sinks S             streaming: sink tokens (default 4)
  --top-pages P         quest: pages of 16 tokens kept
  --pool-kernel K       snapkv: max-pool kernel over the votes, odd (default 7; 1 = none)`;

/** The knobs as given on the command line (absent ones stay undefined: the engine's defaults apply). */
export type PolicyKnobValues = Omit<PolicyKnobs, 'cacheDir'>;

export function number(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const parsed = Number(value);
  if (value.trim() === '' || !Number.isFinite(parsed)) throw new UsageError(`${name} must be a number, got '${value}'`);
  return parsed;
}

export function nonNegativeInteger(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw new UsageError(`${name} must be a non-negative integer, got '${value}'`);
  return Number(value);
}

type OptionValues = Partial<Record<keyof typeof POLICY_OPTIONS, string | boolean | string[] | undefined>>;

export function parsePolicyKnobs(values: OptionValues): PolicyKnobValues {
  const text = (key: keyof typeof POLICY_OPTIONS) => (typeof values[key] === 'string' ? (values[key] as string) : undefined);
  const knobs: PolicyKnobValues = {};
  const set = <K extends keyof PolicyKnobValues>(key: K, v: PolicyKnobValues[K] | undefined) => {
    if (v !== undefined) knobs[key] = v;
  };
  set('alpha', number(text('alpha'), '--alpha'));
  set('partialRatio', number(text('partial-ratio'), '--partial-ratio'));
  set('fetchCap', number(text('fetch-cap'), '--fetch-cap'));
  set('denseLayers', nonNegativeInteger(text('dense-layers'), '--dense-layers'));
  set('budget', positiveInteger(text('budget'), '--budget'));
  set('window', nonNegativeInteger(text('window'), '--window'));
  set('sinks', nonNegativeInteger(text('sinks'), '--sinks'));
  set('topPages', positiveInteger(text('top-pages'), '--top-pages'));
  set('poolKernel', positiveInteger(text('pool-kernel'), '--pool-kernel'));
  if (knobs.poolKernel !== undefined && knobs.poolKernel % 2 !== 1) throw new UsageError(`--pool-kernel must be an odd positive integer, got ${knobs.poolKernel}`);
  if (knobs.alpha !== undefined && !(knobs.alpha > 0)) throw new UsageError('--alpha must be positive');
  if (knobs.partialRatio !== undefined && !(knobs.partialRatio > 0 && knobs.partialRatio <= 1)) throw new UsageError('--partial-ratio must be in (0, 1]');
  if (knobs.fetchCap !== undefined && !(knobs.fetchCap > 0 && knobs.fetchCap <= 1)) throw new UsageError('--fetch-cap must be in (0, 1]');
  return knobs;
}

/** --policy and the knobs as load options (absent knobs left out: the engine's defaults apply). */
export function policyLoadOptions(values: OptionValues): { policy: KvPolicy; infinigen: Partial<InfinigenKnobs>; sparse: Partial<SparseKnobs> } {
  const policy = oneOf(typeof values.policy === 'string' ? values.policy : undefined, KV_POLICIES, '--policy') ?? 'full';
  const { alpha, partialRatio, fetchCap, denseLayers, budget, window, sinks, topPages, poolKernel } = parsePolicyKnobs(values);
  const defined = <T extends object>(o: T) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
  return {
    policy,
    infinigen: defined({ alpha, partialRatio, fetchCap, denseLayers }),
    sparse: defined({ fetchCap, denseLayers, budget, window, sinks, topPages, poolKernel }),
  };
}
