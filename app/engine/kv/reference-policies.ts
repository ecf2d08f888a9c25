// The reference functions behind the Policy interface: what the native policies are tested
// against, and a working (slow) implementation for the CPU path and for tests.
import { UsageError } from '../../common/errors.ts';
import { h2o, oracle, quest, snapkv, streaming } from './policies-reference.ts';
import type { KnobsOf, Policy, PolicyName, SelectContext } from './policy.ts';
import { INFINIGEN_DEFAULTS, selectInfinigen } from './select-reference.ts';
import { topIndices } from './topk.ts';

/** Defaults where a knob has a natural one; budgets/windows must be given. */
export const DEFAULT_KNOBS = {
  full: {},
  infinigen: INFINIGEN_DEFAULTS,
  streaming: { sinks: 4, window: 1024 },
  h2o: { budget: 1024, recent: 256 },
  quest: { pageSize: 16, topPages: 64 },
  snapkv: { budget: 1024, window: 32, kernel: 5, pooling: 'avg' },
  oracle: { budget: 1024 },
} as const satisfies KnobsOf;

function need<T>(value: T | undefined, name: string, policy: PolicyName): T {
  if (value === undefined) throw new UsageError(`policy ${policy} needs ${name}`, { policy, input: name });
  return value;
}

function same(sel: Int32Array, kvHeads: number): Int32Array[] {
  return Array.from({ length: kvHeads }, () => sel.slice());
}

/** Dense layers (below infinigen's denseLayers) and the `full` policy: every candidate. */
function everything(ctx: SelectContext): Int32Array[] {
  return same(topIndices(new Float64Array(ctx.slots), ctx.slots, ctx.candidates), ctx.kvHeads);
}

export function referencePolicy<N extends PolicyName>(name: N, knobs?: Partial<KnobsOf[N]>): Policy<N> {
  const k = { ...DEFAULT_KNOBS[name], ...knobs } as KnobsOf[N];
  const make = (phase: Policy['phase'], needs: Policy['needs'], select: (ctx: SelectContext) => Int32Array[]): Policy<N> => ({
    name,
    knobs: k,
    phase,
    needs,
    select,
  });
  switch (name) {
    case 'full':
      return make('decode', [], everything);
    case 'infinigen': {
      const kn = k as KnobsOf['infinigen'];
      return make('decode', ['partialKeys'], (ctx) => {
        const input = {
          heads: ctx.heads,
          kvHeads: ctx.kvHeads,
          slots: ctx.slots,
          candidates: ctx.candidates,
          p: need(ctx.partialDim, 'partialDim', name),
          qPartial: need(ctx.qPartial, 'qPartial', name),
          kPartial: need(ctx.kPartial, 'kPartial', name),
          scale: need(ctx.scale, 'scale', name),
        };
        return selectInfinigen(ctx.layer, input, kn).selected;
      });
    }
    case 'streaming':
      return make('decode', [], (ctx) => same(streaming(ctx.slots, k as KnobsOf['streaming'], ctx.candidates), ctx.kvHeads));
    case 'h2o':
      return make('decode', ['accumulatedAttention'], (ctx) =>
        h2o(need(ctx.accumulatedAttention, 'accumulatedAttention', name), ctx.kvHeads, ctx.slots, k as KnobsOf['h2o'], ctx.candidates),
      );
    case 'quest':
      return make('decode', ['pageBounds'], (ctx) =>
        quest(
          need(ctx.q, 'q', name),
          need(ctx.pageMin, 'pageMin', name),
          need(ctx.pageMax, 'pageMax', name),
          { heads: ctx.heads, kvHeads: ctx.kvHeads, headDim: ctx.headDim, N: ctx.slots },
          k as KnobsOf['quest'],
          ctx.candidates,
        ),
      );
    case 'oracle':
      return make('decode', ['trueScores'], (ctx) =>
        oracle(need(ctx.trueScores, 'trueScores', name), { heads: ctx.heads, kvHeads: ctx.kvHeads, N: ctx.slots }, k as KnobsOf['oracle'], ctx.candidates),
      );
    case 'snapkv':
      return make('prefill', ['observationScores'], (ctx) =>
        snapkv(need(ctx.observationScores, 'observationScores', name), { heads: ctx.heads, kvHeads: ctx.kvHeads, N: ctx.slots }, k as KnobsOf['snapkv']),
      );
    default:
      throw new UsageError(`unknown KV policy ${String(name)}`, { policy: String(name) });
  }
}
