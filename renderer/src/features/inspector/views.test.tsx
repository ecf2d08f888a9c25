// The inspector's run views over recorded metrics: fixtures/kjv-runs.jsonl was recorded from the
// real engine on kjv-llama-hd64 (app/engine/metrics/record-inspector-fixture.ts: infinigen, then
// h2o on the same prompt ids, then infinigen under a pool budget that evicts). Every expected
// number below is computed from the raw lines here, independently of runs.ts.
import { act, fireEvent, render, screen, within } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LayerMetrics, StepMetrics } from '../../../../app/common/protocol.ts';
import { resetEngineStore } from '../../engine/store.ts';
import { installServices, uninstallServices } from '../../services.ts';
import { FakeApi, stepMetrics, timeoutFrames } from '../../test/fake-api.ts';
import { useEngineStore } from '../../engine/store.ts';
import { services } from '../../services.ts';
import { formatBytes } from '../../ui/format.ts';
import { AbView } from './AbView.tsx';
import { compareTokens } from './data.ts';
import fixture from './fixtures/kjv-runs.jsonl?raw';
import { InspectorView } from './InspectorView.tsx';
import { MemoryChart } from './MemoryChart.tsx';
import { RecallChart } from './RecallChart.tsx';
import { fetchStats, JsonlError, klLowerBound, mapGrid, parseRunsJsonl, runsToJsonl, stepCompare, tokenInfo, type Run } from './runs.ts';
import { compareSampleEvery, COMPARE_LOGPROBS, resetInspectorStore, runs, useInspectorStore } from './store.ts';
import { TokenMap } from './TokenMap.tsx';

interface RawRun { requestId: string; policy: string; promptIds: number[]; pieces: string[]; tokens: [number, string, [number, number][]?][] }
type RawSample = StepMetrics & { requestId: string };

const lines = fixture.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
const rawRuns = lines.filter((o) => o.record === 'longhand.run/1') as unknown as RawRun[];
const rawSamples = (id: string) => lines.filter((o) => o.record === undefined && o.requestId === id) as unknown as RawSample[];
const layerOf = (s: StepMetrics, layer: number): LayerMetrics => s.layers.find((l) => l.layer === layer)!;
const [A, B, C] = ['fixture-a-infinigen', 'fixture-b-h2o', 'fixture-c-infinigen-budget'];

let loaded: Run[];
beforeEach(() => {
  loaded = parseRunsJsonl(fixture);
  resetEngineStore();
  resetInspectorStore();
});
afterEach(() => uninstallServices());
const run = (id: string) => loaded.find((r) => r.requestId === id)!;

describe('recorded runs: load, export, errors', () => {
  it('loads the three runs with their prompt, tokens and samples; export and load again gives the same runs', () => {
    expect(loaded.map((r) => [r.requestId, r.policy, r.promptIds.length, r.tokens.length, r.samples.length])).toEqual(
      rawRuns.map((r) => [r.requestId, r.policy, r.promptIds.length, r.tokens.length, rawSamples(r.requestId).length]),
    );
    expect(run(A).tokens[0]!.top).toHaveLength(20);
    const again = parseRunsJsonl(runsToJsonl(loaded));
    expect(again).toEqual(loaded);
  });

  it('a bad file is refused with the line and what is wrong (JsonlError)', () => {
    const good = fixture.trim().split('\n');
    const cases: [string, RegExp][] = [
      [[good[0], '{not json'].join('\n'), /^line 2: not JSON/],
      [[good[0], JSON.stringify({ ...JSON.parse(good[1]!), requestId: '' })].join('\n'), /^line 2: requestId is missing/],
      [[good[0], JSON.stringify({ ...JSON.parse(good[1]!), layers: [{ layer: 0, selected: 1, candidates: 1, recall: 1.5 }] })].join('\n'), /^line 2: layers\[0\]\.recall is not in \[0, 1\]/],
      [JSON.stringify({ record: 'longhand.run/1', requestId: 'x', promptIds: [1, -2], pieces: [], tokens: [] }), /^line 1: promptIds/],
    ];
    for (const [text, message] of cases) {
      let error: unknown;
      try {
        parseRunsJsonl(text);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(JsonlError);
      expect((error as JsonlError).code).toBe('INSPECTOR_BAD_FILE');
      expect((error as Error).message).toMatch(message);
    }
  });

  it('the view loads a file into its runs, shows the load error of a bad one, and keeps the good runs', () => {
    installServices(new FakeApi(), { schedule: timeoutFrames });
    render(<InspectorView />);
    act(() => useInspectorStore.getState().loadRuns(fixture));
    expect(runs().map((r) => r.requestId)).toEqual([A, B, C]);
    fireEvent.click(screen.getByRole('tab', { name: 'Token map' }));
    expect(screen.getByLabelText('Token map summary').textContent).toContain(`${run(C).policy} · ${(run(C).promptIds.length + 96).toLocaleString('en-US')} positions`);
    act(() => useInspectorStore.getState().loadRuns('{"requestId": 3}'));
    expect(screen.getByLabelText('Load error').textContent).toContain('line 1: requestId is missing');
    expect(runs()).toHaveLength(3);
  });
});

describe('token map', () => {
  it('counts each position`s fetches per layer over the sampled steps, as the raw samples say', () => {
    const stats = fetchStats(run(A));
    const samples = rawSamples(A);
    expect(stats.layers).toEqual([2, 3, 4, 5]);
    for (const layer of [2, 5]) {
      for (const p of [0, 1, 100, 362]) {
        const want = samples.filter((s) => layerOf(s, layer).positions?.includes(p)).length;
        expect(stats.counts[stats.layers.indexOf(layer)]![p]).toBe(want);
      }
    }
    // every selected position of every sample is counted once
    for (const layer of stats.layers) expect(stats.counts[stats.layers.indexOf(layer)]!.reduce((x, c) => x + c, 0)).toBe(samples.reduce((x, s) => x + (layerOf(s, layer).positions?.length ?? 0), 0));
  });

  it('hovering a token shows its id, position, per-layer fetch counts, counter and eviction from the metrics', () => {
    render(<TokenMap run={run(C)} />);
    const samples = rawSamples(C);
    const raw = rawRuns.find((r) => r.requestId === C)!;
    // a generated token inside the shown window
    const position = raw.promptIds.length + 40;
    fireEvent.mouseOver(screen.getByLabelText('Context text').querySelector(`[data-pos="${position}"]`)!);
    const tip = screen.getByRole('tooltip', { name: 'Token details' });
    expect(tip.querySelector('[data-field="id"]')!.textContent).toBe(String(raw.tokens[40]![0]));
    expect(tip.querySelector('[data-field="position"]')!.textContent).toBe(String(position));
    for (const layer of [2, 3, 4, 5]) {
      const row = tip.querySelector(`tr[data-layer="${layer}"]`)!;
      const fetched = samples.filter((s) => layerOf(s, layer).positions?.includes(position)).length;
      const of = samples.filter((s) => layerOf(s, layer).positions && s.contextTokens - 1 > position).length;
      expect(row.querySelector('[data-field="fetched"]')!.textContent).toBe(String(fetched));
      expect(row.querySelector('[data-field="of"]')!.textContent).toBe(String(of));
    }
    // the sink under a budget: never evicted, its counter the last one sent for it
    fireEvent.mouseOver(screen.getByLabelText('Context text').querySelector('[data-pos]')!);
    const first = Number(screen.getByLabelText('Context text').querySelector('[data-pos]')!.getAttribute('data-pos'));
    let counter: number | null = null;
    for (const s of samples) for (const l of s.layers) l.positions?.forEach((p, k) => p === first && l.counters?.[k] !== undefined && (counter = l.counters[k]!));
    expect(screen.getByRole('tooltip').querySelector('[data-field="counter"]')!.textContent).toBe(counter === null ? '– (counters exist in a pool with a byte budget)' : String(counter));
  });

  it('an evicted position says when; the map marks it evicted', () => {
    const samples = rawSamples(C);
    const [position, step] = layerOf(samples[1]!, 3).evicted![0]!;
    const stats = fetchStats(run(C));
    expect(stats.evictedAt[stats.layers.indexOf(3)]![position]).toBe(step);
    const grid = mapGrid(run(C), stats, { kind: 'layers' });
    const column = Math.floor((position * grid.columns) / stats.positions);
    expect(grid.cells[stats.layers.indexOf(3) * grid.columns + column]).toBe(-1);
    // per step for layer 3: the row of the sample that reported it marks it evicted
    const steps = mapGrid(run(C), stats, { kind: 'steps', layer: 3 });
    expect(steps.rows).toBe(samples.length);
    expect(steps.cells[1 * steps.columns + column]).toBe(-1);
  });
});

describe('true attention', () => {
  it('the tooltip`s attention is the mean over sampled steps of the mass the engine sent (0 where a step did not list it); the map`s row peaks at 1', () => {
    const samples = rawSamples(A);
    const stats = fetchStats(run(A));
    const grid = mapGrid(run(A), stats, { kind: 'attention' });
    for (const layer of [2, 5]) {
      const withAttention = samples.filter((s) => layerOf(s, layer).attention);
      expect(withAttention.length).toBeGreaterThan(5);
      const massAt = (p: number) => withAttention.reduce((a, s) => a + (layerOf(s, layer).attention!.find(([q]) => q === p)?.[1] ?? 0), 0) / withAttention.length;
      // position 0 (BOS) and the most attended position of the last sample
      const top = layerOf(withAttention.at(-1)!, layer).attention![0]![0];
      for (const p of [0, top]) {
        const info = tokenInfo(run(A), stats, p)!;
        expect(info.layers.find((l) => l.layer === layer)!.attention).toBeCloseTo(massAt(p), 6);
      }
      const r = stats.layers.indexOf(layer);
      expect(Math.max(...grid.cells.subarray(r * grid.columns, (r + 1) * grid.columns))).toBeCloseTo(1, 5);
    }
  });
});

describe('recall vs oracle', () => {
  it('the averages table holds each layer`s mean recall and oracle recall over the samples that have them', () => {
    render(<RecallChart run={run(A)} />);
    const samples = rawSamples(A);
    for (const layer of [2, 3, 4, 5]) {
      const rs = samples.map((s) => layerOf(s, layer).recall).filter((r): r is number => r !== null);
      const os = samples.map((s) => layerOf(s, layer).oracleRecall).filter((r): r is number => r !== undefined);
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
      const cells = within(screen.getByRole('row', { name: `Recall layer ${layer}` })).getAllByRole('cell').map((c) => c.textContent);
      expect(cells).toEqual([String(layer), String(rs.length), `${(mean(rs) * 100).toFixed(1)}%`, `${(mean(os) * 100).toFixed(1)}%`, `${((mean(os) - mean(rs)) * 100).toFixed(1)} pt`]);
      // the oracle's set of the same size never covers less
      expect(mean(os)).toBeGreaterThanOrEqual(mean(rs));
    }
    expect(screen.getByRole('img', { name: `Recall of infinigen and of the oracle per layer over ${samples.filter((s) => s.layers.some((l) => l.recall !== null)).length} sampled steps` })).toBeTruthy();
  });
});

describe('memory over time', () => {
  it('the last sample`s parts and every eviction the samples counted', () => {
    render(<MemoryChart run={run(C)} />);
    const samples = rawSamples(C);
    const last = samples.at(-1)!.memory;
    const cell = (part: string) => screen.getByLabelText('Memory at the last sample').querySelector(`[data-part="${part}"]`)!.textContent;
    expect(cell('weights')).toBe(formatBytes(last.weightsBytes));
    expect(cell('kv')).toBe(formatBytes(last.kvUsedBytes));
    expect(cell('partial')).toBe(formatBytes(last.partialKeyBytes));
    expect(cell('staged')).toBe(formatBytes(last.stagedBytes));
    expect(cell('other')).toBe(formatBytes(last.rssBytes - last.weightsBytes - last.kvUsedBytes - last.partialKeyBytes - last.stagedBytes));
    const rises = samples.filter((s, i) => s.evictions > (i > 0 ? samples[i - 1]!.evictions : 0)).length;
    expect(cell('evictions')).toBe(`${samples.at(-1)!.evictions.toLocaleString('en-US')} at ${rises} sampled steps`);
    expect(samples.at(-1)!.evictions).toBeGreaterThan(0);
  });
});

describe('A/B', () => {
  it('positions only one side fetched, top-1 agreement, KL and the first divergence, from the two runs', () => {
    const a = run(A);
    const b = run(B);
    const comparison = compareTokens(a.tokens.map((t) => t.id), b.tokens.map((t) => t.id));
    render(<AbView a={a} b={b} comparison={comparison} />);
    // step by step: at each step both runs sampled, what each fetched that the other did not
    const limit = Math.min(a.promptIds.length + a.tokens.length, b.promptIds.length + b.tokens.length);
    const nearest = (step: number) => rawSamples(B).reduce<RawSample | undefined>((best, x) => (!best || Math.abs(x.step - step) < Math.abs(best.step - step) ? x : best), undefined);
    for (const layer of [2, 3, 4, 5]) {
      let onlyA = 0;
      let onlyB = 0;
      let steps = 0;
      for (const s of rawSamples(A)) {
        const other = nearest(s.step);
        if (!other || Math.abs(other.step - s.step) > 4) continue;
        const pa = new Set(layerOf(s, layer).positions!.filter((p) => p < limit));
        const pb = new Set(layerOf(other, layer).positions!.filter((p) => p < limit));
        onlyA += [...pa].filter((p) => !pb.has(p)).length;
        onlyB += [...pb].filter((p) => !pa.has(p)).length;
        steps += 1;
      }
      expect(steps).toBeGreaterThan(0);
      const row = screen.getByRole('row', { name: `AB layer ${layer}` });
      expect(row.querySelector('[data-ab="onlyA"]')!.textContent).toBe((onlyA / steps).toFixed(1));
      expect(row.querySelector('[data-ab="onlyB"]')!.textContent).toBe((onlyB / steps).toFixed(1));
    }
    const raw = (id: string) => rawRuns.find((r) => r.requestId === id)!.tokens;
    const agree = raw(A).filter((t, i) => t[2]![0]![0] === raw(B)[i]![2]![0]![0]).length;
    expect(screen.getByLabelText('A/B view').querySelector('[data-stat="top1"]')!.textContent).toBe(`${((agree / 96) * 100).toFixed(1)}% of 96 steps`);
    const firstDiff = raw(A).findIndex((t, i) => t[0] !== raw(B)[i]![0]);
    expect(comparison.firstDivergence).toBe(firstDiff === -1 ? null : firstDiff);
    if (firstDiff >= 0) {
      const marked = screen.getByLabelText('Text A').querySelector('.diverge.first')!;
      expect(marked.textContent).toBe(raw(A)[firstDiff]![1]);
      expect(screen.getByLabelText('Text B').querySelector('.diverge.first')!.textContent).toBe(raw(B)[firstDiff]![1]);
    }
    // steps before the divergence share their context; the first step's KL from the raw logprobs
    const steps = stepCompare(a, b, comparison.firstDivergence);
    expect(steps[0]!.kl).toBeCloseTo(klLowerBound(raw(A)[0]![2]!, raw(B)[0]![2]!), 12);
  });

  it('klLowerBound never exceeds the true KL and is 0 for the same distribution', () => {
    let s = 5;
    const rand = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (let trial = 0; trial < 50; trial++) {
      const logits = (n: number) => Array.from({ length: n }, () => rand() * 6);
      const soft = (x: number[]) => {
        const z = x.reduce((a, v) => a + Math.exp(v), 0);
        return x.map((v) => Math.exp(v) / z);
      };
      const p = soft(logits(60));
      const q = soft(logits(60));
      const truth = p.reduce((a, pi, i) => a + pi * Math.log(pi / q[i]!), 0);
      const top = (d: number[]) => d.map((v, id) => [id, Math.log(v)] as [number, number]).sort((x, y) => y[1] - x[1]).slice(0, 20);
      const bound = klLowerBound(top(p), top(q));
      expect(bound).toBeLessThanOrEqual(truth + 1e-12);
      expect(bound).toBeGreaterThanOrEqual(0);
      expect(klLowerBound(top(p), top(p))).toBeCloseTo(0, 12);
    }
  });
});

describe('live runs', () => {
  it('a comparison asks for top-20 logprobs and a measured sample every N steps; each of its samples and tokens lands in its run', async () => {
    const api = new FakeApi();
    installServices(api, { schedule: timeoutFrames });
    const model = await services().engine.load({ modelPath: '/m.gguf', policy: 'full', contextLength: 1024 });
    act(() => useEngineStore.getState().setModel(model));
    act(() => useInspectorStore.getState().editCompare({ maxTokens: 300, policyA: 'infinigen', policyB: 'h2o' }));
    void useInspectorStore.getState().runCompare();
    await new Promise((r) => setTimeout(r, 0));
    const g = api.lastGeneration();
    expect(g.params).toMatchObject({ logprobs: COMPARE_LOGPROBS, inspectEvery: compareSampleEvery(300), policy: 'infinigen' });
    expect(compareSampleEvery(300)).toBe(2);
    act(() => {
      api.emit({ kind: 'prompt', requestId: g.requestId, ids: [1, 5, 6], contextLength: 1024, pieces: ['<s>', ' In', ' the'] });
      api.emit({ kind: 'token', requestId: g.requestId, index: 0, id: 9, text: ' beginning', top: [[9, -0.1], [4, -2.5]] });
      // three samples at once: none is dropped by the 10-a-second throttle
      for (const step of [1, 2, 3]) api.metrics(g.requestId, stepMetrics({ step, contextTokens: 3 + step }, [{}, {}, { positions: [0, 1], oracleRecall: 0.9, recall: 0.8 }]));
    });
    const run = runs().find((r) => r.requestId === g.requestId)!;
    expect(run.samples.map((s) => s.step)).toEqual([1, 2, 3]);
    expect(run.pieces).toEqual(['<s>', ' In', ' the']);
    expect(run.tokens[0]).toEqual({ id: 9, text: ' beginning', top: [[9, -0.1], [4, -2.5]] });
    expect(fetchStats(run).counts[0]![1]).toBe(3);
    useInspectorStore.getState().stopCompare();
  });
});
