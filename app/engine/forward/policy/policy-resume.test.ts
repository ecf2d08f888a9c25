// H2O's and SnapKV's own state across a cut and a snapshot (h2o.ts, snapkv.ts): after a prompt and
// some decode steps, a cut at the policy's resumePoint, or its exported state imported into another
// policy on the same pool, leaves the state a fresh prefill of those tokens leaves (the same mass bit
// for bit, the same lists at the next steps); elsewhere resumePoint falls back to a point that is
// exact (a kept prompt chunk end, or 0). Random fp32 pools, GQA group 2, layer 2 the one that selects.
import { afterEach, describe, expect, it } from 'vitest';
import { createKvPool, type KvPool } from '../../../../native/index.js';
import { Gaussian, lists } from '../../kv/test-helpers.ts';
import { createComparisonPolicy } from './comparison.ts';
import type { H2oPolicy } from './h2o.ts';
import type { PolicyShape, RowPolicy } from './row-policy.ts';
import type { SparsePolicyOptions } from './selection-settings.ts';
import type { SnapkvPolicy } from './snapkv.ts';
import { POLICY_CHECKPOINTS } from './state-checkpoints.ts';

const shape: PolicyShape = { layers: 3, heads: 4, kvHeads: 2, headDim: 8, contextLength: 160 };
const width = shape.heads * shape.headDim;
const pools: KvPool[] = [];

afterEach(() => {
  while (pools.length) pools.pop()!.free();
});

/** A pool of `tokens` random rows in every layer (the rows a prompt and its decode steps left). */
function randomPool(tokens: number, seed: number): KvPool {
  const { layers, kvHeads, headDim: d } = shape;
  const pool = createKvPool({ budgetBytes: 1 << 20, layers, kvHeads, headDim: d, kvType: 'fp32' });
  pools.push(pool);
  const g = new Gaussian(seed);
  for (let l = 0; l < layers; l++) pool.appendBatch(l, Float32Array.from(g.fill(tokens * kvHeads * d)), Float32Array.from(g.fill(tokens * kvHeads * d)), 0);
  return pool;
}

const h2o = (options: SparsePolicyOptions, pool: KvPool): H2oPolicy => createComparisonPolicy('h2o', options, { shape, pool }) as H2oPolicy;
const snapkv = (options: SparsePolicyOptions, pool: KvPool): SnapkvPolicy => createComparisonPolicy('snapkv', options, { shape, pool }) as SnapkvPolicy;
const massOf = (p: H2oPolicy): Float32Array => (p as unknown as { acc: Float32Array[] }).acc[2]!;
const liveOf = (p: H2oPolicy): Uint8Array => (p as unknown as { live: Uint8Array[] }).live[2]!;

/** A prompt of `queries.length / width` tokens at p0 in chunks of 16, as the runner feeds layer 2. */
function prompt(p: RowPolicy, queries: Float32Array, p0: number): void {
  const T = queries.length / width;
  for (let i = 0; i < T; i += 16) p.observePrompt!(2, queries.subarray(i * width, Math.min(T, i + 16) * width), p0 + i, Math.min(16, T - i));
}

/** `steps` decode steps of layer 2 from N, each query from g: the lists of each. */
function decode(p: RowPolicy, g: Gaussian, N: number, steps: number): number[][][] {
  const out: number[][][] = [];
  for (let i = 0; i < steps; i++) {
    const q = Float32Array.from(g.fill(width, 2));
    out.push(lists(p.select(2, q, N + i)));
    p.attended?.(2, q, N + i);
  }
  return out;
}

describe('H2O: the mass a cut or a snapshot leaves is a fresh prefill’s', () => {
  it('a cut back to the prompt end restores its mass and every slot (after decode steps added mass and evicted)', () => {
    const pool = randomPool(120, 1);
    const g = new Gaussian(2);
    const first = Float32Array.from(g.fill(50 * width, 2));
    const more = Float32Array.from(g.fill(20 * width, 2));
    const p = h2o({ budget: 8, window: 2 }, pool);
    prompt(p, first, 0);
    expect(p.resumePoint(50)).toBe(50); // no decode step yet: the mass is the prompt's
    decode(p, new Gaussian(3), 50, 20);
    expect(liveOf(p).subarray(0, 50).includes(0)).toBe(true); // the decode steps evicted prompt slots
    expect([p.resumePoint(70), p.resumePoint(60), p.resumePoint(50), p.resumePoint(49), p.resumePoint(15)]).toEqual([50, 50, 50, 48, 0]); // chunk ends 16, 32, 48, 50
    p.truncate(50);
    const fresh = h2o({ budget: 8, window: 2 }, pool);
    prompt(fresh, first, 0);
    expect(Array.from(massOf(p))).toEqual(Array.from(massOf(fresh)));
    expect(liveOf(p).every((x) => x === 1)).toBe(true);
    // a Continue: the suggestion prefilled after the cut, then the same lists as a fresh prefill of it all
    prompt(p, more, 50);
    const all = new Float32Array(70 * width);
    all.set(first);
    all.set(more, 50 * width);
    const whole = h2o({ budget: 8, window: 2 }, pool);
    prompt(whole, all, 0);
    expect(Array.from(massOf(p))).toEqual(Array.from(massOf(whole)));
    expect(decode(p, new Gaussian(4), 70, 10)).toEqual(decode(whole, new Gaussian(4), 70, 10));
  });

  it('an edit in the middle of a long prompt resumes at the chunk end before it, exactly; at most POLICY_CHECKPOINTS ends are kept, spread out', () => {
    const pool = randomPool(150, 5);
    const g = new Gaussian(6);
    const long = Float32Array.from(g.fill(128 * width, 2));
    const edit = Float32Array.from(g.fill(14 * width, 2));
    const p = h2o({ budget: 6 }, pool);
    prompt(p, long, 0); // chunk ends 16, 32, .., 128
    decode(p, g, 128, 10);
    expect([p.resumePoint(138), p.resumePoint(100), p.resumePoint(96), p.resumePoint(15)]).toEqual([128, 96, 96, 0]);
    p.truncate(96);
    const fresh = h2o({ budget: 6 }, pool);
    prompt(fresh, long.subarray(0, 96 * width), 0);
    expect(Array.from(massOf(p))).toEqual(Array.from(massOf(fresh)));
    // the edited text from 96 on: the same lists as a fresh prefill of it all
    prompt(p, edit, 96);
    const all = new Float32Array(110 * width);
    all.set(long.subarray(0, 96 * width));
    all.set(edit, 96 * width);
    const whole = h2o({ budget: 6 }, pool);
    prompt(whole, all, 0);
    expect(decode(p, new Gaussian(7), 110, 8)).toEqual(decode(whole, new Gaussian(7), 110, 8));
    // a longer prompt has more chunk ends than are kept: the thinnest gaps go, the newest stays
    const many = h2o({ budget: 6 }, pool);
    prompt(many, Float32Array.from(g.fill(150 * width, 2)), 0); // 10 chunk ends
    const kept = (many as unknown as { checkpoints: { positions(): number[] } }).checkpoints.positions();
    expect(kept).toHaveLength(POLICY_CHECKPOINTS);
    expect(kept.at(-1)).toBe(150);
    // a policy made over a pool it never saw (a switch) has no mass of it: only 0 is exact
    expect(h2o({ budget: 6 }, pool).resumePoint(100)).toBe(0);
  });

  it('exportState/importState: a restored policy continues with the lists of a fresh prefill; a wrong shape or layer is refused', () => {
    const pool = randomPool(100, 7);
    const g = new Gaussian(8);
    const first = Float32Array.from(g.fill(40 * width, 2));
    const a = h2o({ budget: 8, denseLayers: 1 }, pool);
    // denseLayers 1: layers 1 and 2 keep mass; the runner feeds both
    for (const l of [1, 2]) a.observePrompt(l, first, 0, 40);
    decode(a, new Gaussian(9), 40, 6);
    expect(() => a.exportState(45)).toThrow(/not exact/);
    const state = a.exportState(40);
    expect({ layers: state.layers, rows: state.rows, width: state.width, values: state.data.length }).toEqual({ layers: [1, 2], rows: 2, width: 40, values: 2 * 2 * 40 });
    const b = h2o({ budget: 8, denseLayers: 1 }, pool);
    b.importState(40, state);
    const fresh = h2o({ budget: 8, denseLayers: 1 }, pool);
    for (const l of [1, 2]) fresh.observePrompt(l, first, 0, 40);
    expect(Array.from(massOf(b))).toEqual(Array.from(massOf(fresh)));
    expect(b.resumePoint(40)).toBe(40);
    expect(decode(b, new Gaussian(10), 40, 8)).toEqual(decode(fresh, new Gaussian(10), 40, 8));
    expect(() => h2o({ budget: 8, denseLayers: 0 }, pool).importState(40, state)).toThrow(/no mass for layer\(s\) 0/);
    expect(() => h2o({ budget: 8, denseLayers: 1 }, pool).importState(41, state)).toThrow(/expected/);
  });
});

describe('SnapKV: the window a cut or a snapshot leaves is a fresh prefill’s', () => {
  it('decoded queries never overwrite the prompt window: a cut back to the prompt end after a long decode is exact', () => {
    const pool = randomPool(150, 11);
    const g = new Gaussian(12);
    const first = Float32Array.from(g.fill(60 * width, 2));
    const more = Float32Array.from(g.fill(3 * width, 2)); // shorter than the window: it reaches back into the prompt
    const opts = { budget: 16, window: 8, poolKernel: 3 };
    const p = snapkv(opts, pool);
    prompt(p, first, 0);
    decode(p, new Gaussian(13), 60, 40); // 40 decoded queries, 5 times the window
    expect([p.resumePoint(100), p.resumePoint(60), p.resumePoint(59), p.resumePoint(15)]).toEqual([60, 60, 48, 0]); // chunk ends 16, 32, 48, 60
    p.truncate(60);
    prompt(p, more, 60);
    const whole = snapkv(opts, pool);
    const all = new Float32Array(63 * width);
    all.set(first);
    all.set(more, 60 * width);
    prompt(whole, all, 0);
    expect(decode(p, new Gaussian(14), 63, 5)).toEqual(decode(whole, new Gaussian(14), 63, 5));
    expect(lists(p.keptPrompt(2)!.kept)).toEqual(lists(whole.keptPrompt(2)!.kept));
  });

  it('an edit further back than the window resumes at the chunk end before it, with that end’s window', () => {
    const pool = randomPool(150, 19);
    const g = new Gaussian(20);
    const first = Float32Array.from(g.fill(60 * width, 2));
    const edit = Float32Array.from(g.fill(5 * width, 2));
    const opts = { budget: 16, window: 8, poolKernel: 3 };
    const p = snapkv(opts, pool);
    prompt(p, first, 0);
    decode(p, new Gaussian(21), 60, 10);
    expect(p.resumePoint(40)).toBe(32);
    p.truncate(32); // the ring held 52..59 only: the window 24..31 comes from the checkpoint at 32
    expect(Array.from(p.storedQueries(2, 24, 32)!)).toEqual(Array.from(first.subarray(24 * width, 32 * width)));
    prompt(p, edit, 32);
    const whole = snapkv(opts, pool);
    const all = new Float32Array(37 * width);
    all.set(first.subarray(0, 32 * width));
    all.set(edit, 32 * width);
    prompt(whole, all, 0);
    expect(decode(p, new Gaussian(22), 37, 4)).toEqual(decode(whole, new Gaussian(22), 37, 4));
    expect(p.exportState(37).data).toEqual(whole.exportState(37).data);
  });

  it('exportState/importState: the window queries restored give a fresh prefill’s kept set; a smaller window written is refused', () => {
    const pool = randomPool(150, 15);
    const g = new Gaussian(16);
    const first = Float32Array.from(g.fill(50 * width, 2));
    const more = Float32Array.from(g.fill(4 * width, 2));
    const opts = { budget: 16, window: 8, poolKernel: 3 };
    const a = snapkv(opts, pool);
    prompt(a, first, 0);
    decode(a, new Gaussian(17), 50, 10);
    const state = a.exportState(50);
    expect({ layers: state.layers, rows: state.rows, width: state.width }).toEqual({ layers: [2], rows: 8, width });
    expect(Array.from(state.data)).toEqual(Array.from(first.subarray(42 * width)));
    const b = snapkv(opts, pool);
    b.importState(50, state);
    prompt(b, more, 50);
    const whole = snapkv(opts, pool);
    const all = new Float32Array(54 * width);
    all.set(first);
    all.set(more, 50 * width);
    prompt(whole, all, 0);
    expect(decode(b, new Gaussian(18), 54, 4)).toEqual(decode(whole, new Gaussian(18), 54, 4));
    // a window of 4 takes the newest 4 of the 8; a window of 16 needs more than were written
    const narrow = snapkv({ ...opts, window: 4 }, pool);
    narrow.importState(50, state);
    expect(Array.from(narrow.storedQueries(2, 46, 50)!)).toEqual(Array.from(first.subarray(46 * width)));
    expect(() => snapkv({ ...opts, window: 16 }, pool).importState(50, state)).toThrow(/holds 8 window queries, this window needs 16/);
  });
});
