// The knobs of the comparison policies (streaming, h2o, quest, snapkv, oracle; ARCHITECTURE.md §6)
// and their validation, shared by the policies, the engine (which checks a request's knobs before
// loading anything) and the runner.
//
// Budget parity with InfiniGen: unless a fixed `budget` is given, each step keeps ⌊fetchCap·N⌋
// tokens per KV head (at least 1), the same cap InfiniGen's n is clipped to (selection-lists.ts,
// budgetFor).
import { UsageError } from '../../../common/errors.ts';

export const SPARSE_POLICIES = ['streaming', 'h2o', 'quest', 'oracle', 'snapkv', 'window'] as const;
export type SparsePolicyName = (typeof SPARSE_POLICIES)[number];

export interface SparsePolicyOptions {
  /** Fixed tokens per KV head (besides the current one). Default: ⌊fetchCap·N⌋ each step. */
  budget?: number;
  /** Fraction of the context kept when no fixed budget is given (default 0.2, InfiniGen's cap). */
  fetchCap?: number;
  /** Layers below this attend to everything (default 2, as InfiniGen). */
  denseLayers?: number;
  /** streaming: attention-sink tokens (default 4). */
  sinks?: number;
  /**
   * streaming: recent window (default budget − sinks); h2o: recent tokens (default ⌊budget/2⌋);
   * snapkv: observation window, the last prompt queries that vote, always kept (default 32, ≥ 1);
   * window: the newest tokens attended, the current one included (default: the budget + 1).
   */
  window?: number;
  /** snapkv: max-pool kernel over the votes (odd; 1 = none; default 7). */
  poolKernel?: number;
  /** quest: pages kept (default max(1, round(budget / pageSize)); every page when budget ≥ N). */
  topPages?: number;
  /** quest: tokens per page (default 16). */
  pageSize?: number;
}

export interface SparseSettings {
  budget: number | undefined;
  fetchCap: number;
  denseLayers: number;
  sinks: number;
  window: number | undefined;
  topPages: number | undefined;
  pageSize: number;
  poolKernel: number;
}

/** snapkv's defaults: observation window and max-pool kernel (SnapKV, Li et al. 2024). */
export const SNAPKV_WINDOW = 32;
export const SNAPKV_POOL_KERNEL = 7;

function nonNegativeInt(v: number | undefined, name: string, min = 0): void {
  if (v !== undefined && (!Number.isInteger(v) || v < min)) throw new UsageError(`${name} must be an integer ≥ ${min}, got ${v}`, { field: name });
}

export function sparseSettings(o: SparsePolicyOptions, layers: number): SparseSettings {
  const fetchCap = o.fetchCap ?? 0.2;
  if (!(fetchCap > 0 && fetchCap <= 1)) throw new UsageError(`fetchCap must be in (0, 1], got ${fetchCap}`, { field: 'fetchCap' });
  nonNegativeInt(o.budget, 'budget', 1);
  nonNegativeInt(o.denseLayers, 'denseLayers');
  nonNegativeInt(o.sinks, 'sinks');
  nonNegativeInt(o.window, 'window');
  nonNegativeInt(o.topPages, 'topPages', 1);
  nonNegativeInt(o.pageSize, 'pageSize', 1);
  nonNegativeInt(o.poolKernel, 'poolKernel', 1);
  if (o.poolKernel !== undefined && o.poolKernel % 2 !== 1) throw new UsageError(`poolKernel must be odd, got ${o.poolKernel}`, { field: 'poolKernel' });
  return {
    budget: o.budget,
    fetchCap,
    denseLayers: Math.min(o.denseLayers ?? 2, layers),
    sinks: o.sinks ?? 4,
    window: o.window,
    topPages: o.topPages,
    pageSize: o.pageSize ?? 16,
    poolKernel: o.poolKernel ?? SNAPKV_POOL_KERNEL,
  };
}
