import { describe, expect, it } from 'vitest';
import type { PolicyName, SelectContext } from './policy.ts';
import { referencePolicy } from './reference-policies.ts';
import { Gaussian, lists } from './test-helpers.ts';

const g = new Gaussian(17);
const heads = 4;
const kvHeads = 2;
const d = 8;
const slots = 40;
const p = 3;
const candidates = new Uint8Array(slots).fill(1);
candidates[5] = 0; // one evicted slot
const pages = Math.ceil(slots / 16);
const ctx: SelectContext = {
  layer: 4, heads, kvHeads, headDim: d, slots, candidates,
  qPartial: Float32Array.from(g.fill(heads * p)),
  kPartial: Float32Array.from(g.fill(kvHeads * slots * p)),
  partialDim: p,
  scale: 1 / Math.sqrt(d),
  q: Float32Array.from(g.fill(heads * d)),
  pageMin: Float32Array.from(g.fill(kvHeads * pages * d)).map((x) => -Math.abs(x)),
  pageMax: Float32Array.from(g.fill(kvHeads * pages * d)).map((x) => Math.abs(x)),
  accumulatedAttention: Float32Array.from(g.fill(kvHeads * slots)).map(Math.abs),
  trueScores: Float32Array.from(g.fill(heads * slots)),
  observationScores: Float32Array.from(g.fill(heads * 4 * slots)),
};

const NAMES: PolicyName[] = ['full', 'infinigen', 'streaming', 'h2o', 'quest', 'oracle', 'snapkv'];
const small = {
  full: {},
  infinigen: { alpha: 1, cap: 0.5, denseLayers: 2 },
  streaming: { sinks: 2, window: 6 },
  h2o: { budget: 10, recent: 4 },
  quest: { pageSize: 16, topPages: 1 },
  oracle: { budget: 10 },
  snapkv: { budget: 10, window: 4 },
} as const;

describe('reference policies through the Policy interface', () => {
  for (const name of NAMES) {
    it(`${name}: [kvHeads] ascending candidate slots`, () => {
      const policy = referencePolicy(name, small[name]);
      expect(policy.name).toBe(name);
      expect(policy.phase).toBe(name === 'snapkv' ? 'prefill' : 'decode');
      const sel = policy.select(ctx);
      expect(sel.length).toBe(kvHeads);
      for (const s of sel) {
        expect(s.length).toBeGreaterThan(0);
        for (let i = 1; i < s.length; i++) expect(s[i]!).toBeGreaterThan(s[i - 1]!);
        expect(s[s.length - 1]!).toBeLessThan(slots);
        if (name !== 'snapkv') expect(Array.from(s)).not.toContain(5); // evicted (snapkv runs before any eviction)
      }
    });
  }

  it('full selects every candidate; infinigen is dense below denseLayers', () => {
    const all = Array.from({ length: slots }, (_, j) => j).filter((j) => j !== 5);
    expect(lists(referencePolicy('full').select(ctx))).toEqual([all, all]);
    expect(lists(referencePolicy('infinigen', small.infinigen).select({ ...ctx, layer: 1 }))).toEqual([all, all]);
    expect(referencePolicy('infinigen', small.infinigen).select(ctx)[0]!.length).toBeLessThan(all.length);
  });

  it('defaults fill unspecified knobs; a missing input is a BAD_ARGUMENT naming it', () => {
    expect(referencePolicy('infinigen').knobs).toEqual({ alpha: 5, cap: 0.2, denseLayers: 2 });
    expect(referencePolicy('streaming', { window: 8 }).knobs).toEqual({ sinks: 4, window: 8 });
    expect(() => referencePolicy('h2o').select({ ...ctx, accumulatedAttention: undefined })).toThrow(/accumulatedAttention/);
    expect(() => referencePolicy('infinigen').select({ ...ctx, kPartial: undefined })).toThrow(/kPartial/);
    expect(() => referencePolicy('nope' as PolicyName)).toThrow(/unknown/);
  });
});
