// The row policies by name (ARCHITECTURE.md §6) and what each asks of the runner: the pool's partial
// key columns, which stage graphs output a speculative query, whether it runs with an evicting pool.
// Every policy runs under every placement. A runner is made from a recipe; a policy switch keeps the pool,
// the stage graphs and the cached tokens when the new recipe adopts what the runner has.
import { UsageError } from '../../../common/errors.ts';
import type { AttentionArgs, KvPool } from '../../../../native/index.js';
import type { LoadedModel } from '../../model/types.ts';
import { partialCount } from '../../kv/partial-columns.ts';
import { infinigenSettings, InfinigenState, type InfinigenOptions, type InfinigenSettings, type InfinigenShape } from './infinigen-state.ts';
import { createComparisonPolicy } from './comparison.ts';
import { FullPolicy } from './full.ts';
import { InfinigenPolicy } from './infinigen.ts';
import type { PolicyShape, RowPolicy } from './row-policy.ts';
import { SPARSE_POLICIES, type SparsePolicyName, type SparsePolicyOptions } from './selection-settings.ts';

/** The policies the forward pass runs. */
export type RunnerPolicy = 'full' | 'infinigen' | SparsePolicyName;
export const RUNNER_POLICIES: readonly RunnerPolicy[] = ['full', 'infinigen', ...SPARSE_POLICIES];

/** A policy and its knobs, as a runner is created or switched with. */
export interface RunnerPolicyOptions {
  /** KV management (default 'full': every layer attends to every token). */
  policy?: RunnerPolicy;
  /** Knobs of policy 'infinigen'. */
  infinigen?: InfinigenOptions;
  /** Knobs of the comparison policies (streaming, h2o, quest, oracle, snapkv, window). */
  sparse?: SparsePolicyOptions;
}

/** What a runner has that a policy may adopt instead of rebuilding it. */
export interface RunnerLayout {
  /** [stage] the stage graphs output layer s+1's speculative query */
  speculates: readonly boolean[];
  pool: KvPool;
  /** InfiniGen's sequence state kept by the runner (active or dormant) */
  sequence: InfinigenState | undefined;
}

export interface PolicyRecipe {
  readonly name: RunnerPolicy;
  /** partial key columns per pool row (InfiniGen's p; 0 for the others) at the model's head dim (PolicyShape.headDim) */
  readonly partialDim: number;
  /** partial key columns per pool row of a layer whose head dim is `headDim` (layers may differ: Gemma 4) */
  partialDimFor(headDim: number): number;
  /** [stage = layers + 1] stage s outputs layer s+1's speculative query */
  readonly speculates: boolean[];
  /** runs with a pool under a byte budget (eviction by prefetch counters) */
  readonly evicts: boolean;
  /** The most past rows a selecting layer attends in a pool of `capacity` tokens (sizes the device's row buffer). */
  mostRows(capacity: number): number;
  /** Whether the runner's stage graphs, pool and sequence state serve this policy as they are. */
  adopts(layout: RunnerLayout): boolean;
  /**
   * The policy over `pool`; `sequence`: the sequence state to continue (InfiniGen), else a new one.
   * Throws a UsageError for a bad knob: build before giving anything up.
   */
  build(pool: KvPool, sequence: InfinigenState | undefined, attention?: readonly (AttentionArgs | undefined)[]): RowPolicy;
}

/** The recipe of a policy for a model; a UsageError names a bad policy or knob. */
export function policyRecipe(options: RunnerPolicyOptions, shape: PolicyShape, model: LoadedModel): PolicyRecipe {
  const name = options.policy ?? 'full';
  if (!RUNNER_POLICIES.includes(name)) throw new UsageError(`policy must be one of ${RUNNER_POLICIES.join(', ')}, got ${String(name)}`, { field: 'policy' });
  const noSpeculation = new Array<boolean>(shape.layers + 1).fill(false);
  if (name === 'infinigen') return infinigenRecipe(infinigenSettings(options.infinigen ?? {}, shape.headDim, shape.layers), shape, model);
  const sparse = options.sparse ?? {};
  const make = name === 'full' ? (): RowPolicy => new FullPolicy(shape.layers) : (pool: KvPool, attention?: readonly (AttentionArgs | undefined)[]): RowPolicy => createComparisonPolicy(name, sparse, { shape, pool, ...(attention ? { attention } : {}) });
  return {
    name,
    partialDim: 0,
    partialDimFor: () => 0,
    speculates: noSpeculation,
    evicts: name === 'full',
    mostRows: (capacity) => capacity,
    // every policy but InfiniGen runs on any stage graphs (InfiniGen's extra outputs are ignored) and ignores partial keys
    adopts: (layout) => !layout.pool.evicting || name === 'full',
    build: (pool, _sequence, attention) => make(pool, attention),
  };
}

function infinigenRecipe(settings: InfinigenSettings, shape: PolicyShape, model: LoadedModel): PolicyRecipe {
  // stage s speculates for layer s+1 when that layer selects rows: not a dense one, not past the
  // last, not a sliding-window layer (it attends its window; the stage before a global layer still does)
  const speculates = Array.from({ length: shape.layers + 1 }, (_, s) => s + 1 >= settings.denseLayers && s + 1 < shape.layers && shape.sliding?.[s + 1] !== true);
  return {
    name: 'infinigen',
    partialDim: settings.partialDim,
    partialDimFor: (headDim) => partialCount(settings.partialRatio, headDim),
    speculates,
    evicts: true,
    // its n is clipped to ⌊fetchCap·N⌋, one more for rounding
    mostRows: (capacity) => Math.ceil(settings.fetchCap * capacity) + 1,
    adopts(layout) {
      // exactly its graphs and partial keys; the sequence state (column energies, skew) holds only
      // for the same sparse layers, r and skew source
      if (speculates.some((f, s) => f !== layout.speculates[s])) return false;
      for (let l = 0; l < shape.layers; l++) {
        const pool = layout.pool;
        if (pool.owns(l) && pool.layerPartialDim(l) !== (shape.perLayer ? partialCount(settings.partialRatio, pool.layerHeadDim(l)) : settings.partialDim)) return false;
      }
      const old = layout.sequence?.settings;
      return old !== undefined && old.denseLayers === settings.denseLayers && old.partialRatio === settings.partialRatio && old.cacheDir === settings.cacheDir && !settings.recalibrate;
    },
    build(pool, sequence, attention) {
      const state = sequence ?? new InfinigenState(settings, infinigenShape(shape, pool), model);
      state.settings = settings;
      return new InfinigenPolicy(state, pool, shape, attention);
    },
  };
}

/**
 * The shape InfiniGen's state is made for: the policy shape, and where layers differ, each layer's
 * own KV heads and head dim — 0 KV heads for a layer that reads another's rows (no partial keys).
 */
function infinigenShape(shape: PolicyShape, pool: KvPool): InfinigenShape {
  const base = { layers: shape.layers, heads: shape.heads, kvHeads: shape.kvHeads, headDim: shape.headDim };
  if (!shape.perLayer) return base;
  return { ...base, perLayer: shape.perLayer.map((r, l) => ({ kvHeads: pool.owns(l) ? r.kvHeads : 0, headDim: r.headDim })) };
}
