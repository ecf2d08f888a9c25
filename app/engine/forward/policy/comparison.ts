// The comparison policies by name (ARCHITECTURE.md §6): streaming, h2o, quest, oracle, snapkv, each
// in its own file over the shared list bookkeeping of selection-lists.ts. The registry makes them
// from here.
import { UsageError } from '../../../common/errors.ts';
import { H2oPolicy } from './h2o.ts';
import { OraclePolicy } from './oracle.ts';
import { QuestPolicy } from './quest.ts';
import type { PolicyContext, RowPolicy } from './row-policy.ts';
import { SPARSE_POLICIES, type SparsePolicyName, type SparsePolicyOptions, type SparseSettings } from './selection-settings.ts';
import { SnapkvPolicy } from './snapkv.ts';
import { StreamingPolicy } from './streaming.ts';
import { WindowPolicy } from './window.ts';

/** A comparison policy: a row policy with its validated knobs and the time its selection took. */
export type ComparisonPolicy = RowPolicy & { readonly settings: SparseSettings; selectMs: number };

const CLASSES: Record<SparsePolicyName, new (options: SparsePolicyOptions, ctx: PolicyContext) => ComparisonPolicy> = {
  streaming: StreamingPolicy,
  h2o: H2oPolicy,
  quest: QuestPolicy,
  oracle: OraclePolicy,
  snapkv: SnapkvPolicy,
  window: WindowPolicy,
};

export function createComparisonPolicy(name: SparsePolicyName, options: SparsePolicyOptions, ctx: PolicyContext): ComparisonPolicy {
  // a name from outside the type (a request, a stored setting) is refused as the knobs are
  if (!SPARSE_POLICIES.includes(name)) throw new UsageError(`unknown sparse policy ${String(name)}`, { field: 'policy' });
  return new CLASSES[name](options, ctx);
}
