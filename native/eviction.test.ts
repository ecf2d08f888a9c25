// The KV pool's byte budget with eviction (ARCHITECTURE.md §5), through the addon: 5,000 appended
// tokens on a pool that holds ~300 (2 layers, 2 KV heads, head dim 8, GQA 2), layer 1 speculated
// every step. Checked every step: the allocation stays within the budget, evictions are counted,
// no evicted token (nor the step's victim) is selected, sinks and the recent window survive.
import { describe, expect, it } from 'vitest';
import { Gaussian } from '../app/engine/kv/test-helpers.ts';
import { createKvPool, createSpeculator, isNativeAvailable } from './index.js';

const have = isNativeAvailable();

describe.skipIf(!have)('KV pool eviction under a byte budget', () => {
  it('5,000 appends on a 300-token budget: within budget, evictions counted, evicted tokens never selected', () => {
    const L = 2, kvHeads = 2, headDim = 8, p = 4, heads = 4, sinks = 4, recent = 64, steps = 5000;
    const perToken = L * kvHeads * (2 * headDim * 2 + 4 + 2 * p) + L * 5;
    const budgetBytes = 300 * perToken + 1024;
    const pool = createKvPool({ budgetBytes, layers: L, kvHeads, headDim, partialDim: p, eviction: { sinks, recent, ageEvery: 32 } });
    const g = new Gaussian(7);
    try {
      expect(pool.evicting).toBe(true);
      expect(pool.bytesPerToken).toBe(perToken);
      expect(pool.byteLength).toBeLessThanOrEqual(budgetBytes);
      expect(pool.capacityTokens).toBeGreaterThanOrEqual(290);
      expect(pool.capacityTokens).toBeLessThanOrEqual(300);
      pool.setPartialProjection(1, Float32Array.from(g.fill(kvHeads * headDim * p)));
      const sp = createSpeculator(pool, { heads, alpha: 3, cap: 0.3, denseLayers: 1 });
      const evicted = [new Set<number>(), new Set<number>()];
      let overBudget = 0, protectedEvicted = 0, evictedSelected = 0, selections = 0;
      const q = new Float32Array(heads * headDim);
      const out = new Float32Array(heads * headDim);
      for (let t = 0; t < steps; t++) {
        const speculate = t >= 8;
        if (speculate) sp.begin(1, Float32Array.from(g.fill(heads * headDim)));
        for (let l = 0; l < L; l++) {
          pool.append(l, Float32Array.from(g.fill(kvHeads * headDim)), Float32Array.from(g.fill(kvHeads * headDim)), t);
          const gone = pool.lastEvicted(l);
          if (gone >= 0) {
            evicted[l]!.add(gone);
            if (gone < sinks || gone >= t - recent) protectedEvicted++;
          }
          if (pool.length(l) > pool.capacityTokens || pool.byteLength > budgetBytes) overBudget++;
        }
        if (!speculate) continue;
        q.set(g.fill(heads * headDim));
        sp.attend(1, q, out);
        const victimSlot = pool.lastSlot(1);
        for (let kv = 0; kv < kvHeads; kv++) {
          for (const slot of sp.selected(1, kv)) {
            selections++;
            if (slot === victimSlot || evicted[1]!.has(pool.position(1, slot))) evictedSelected++;
          }
        }
      }
      sp.free();
      const expected = steps - pool.capacityTokens;
      const figures = { capacity: pool.capacityTokens, byteLength: pool.byteLength, budgetBytes, evictions: [pool.evictions(0), pool.evictions(1)], selections };
      console.log('eviction run', JSON.stringify(figures));
      expect(overBudget).toBe(0);
      expect(pool.evictions(0)).toBe(expected);
      expect(pool.evictions(1)).toBe(expected);
      expect(pool.evictionsTotal()).toBe(2 * expected);
      expect(evicted[0]!.size).toBe(expected);
      expect(protectedEvicted).toBe(0);
      expect(selections).toBeGreaterThan(0);
      expect(evictedSelected).toBe(0);
      for (let l = 0; l < L; l++) {
        const held = new Set(Array.from({ length: pool.length(l) }, (_, s) => pool.position(l, s)));
        for (let s = 0; s < sinks; s++) expect(held.has(s)).toBe(true);
        for (let s = steps - recent; s < steps; s++) expect(held.has(s)).toBe(true);
      }
    } finally {
      pool.free();
    }
  });

  it('refuses a budget that holds no more than sinks + recent tokens', () => {
    expect(() => createKvPool({ budgetBytes: 60 * 150 + 1024, layers: 2, kvHeads: 2, headDim: 8, eviction: { sinks: 4, recent: 64, ageEvery: 32 } })).toThrow(/sinks \+ recent/);
  });
});
