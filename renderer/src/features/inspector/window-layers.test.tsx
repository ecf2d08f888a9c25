// The inspector on a model with sliding-window layers (issue 30): the engine reports each layer's
// kind (ModelInfo.kvLayers) and the KV bytes split by kind (StepMetrics.memory.kvByKind). The
// Memory view shows the window layers' rings and their checkpoints apart from the global layers'
// rows; the token map and the recall view mark each layer as window or global; a run without
// layer kinds (a model with global layers only) shows what it showed before.
import { render, screen, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import type { StepMetrics } from '../../../../app/common/protocol.ts';
import { stepMetrics } from '../../test/fake-api.ts';
import { formatBytes } from '../../ui/format.ts';
import { memoryStack } from './data.ts';
import { MemoryChart } from './MemoryChart.tsx';
import { MemoryStack } from './MemoryStack.tsx';
import { RecallChart } from './RecallChart.tsx';
import { mapGrid, fetchStats, memorySeries, parseRunsJsonl, runsToJsonl, tokenInfo, type Run } from './runs.ts';
import { TokenMap } from './TokenMap.tsx';

// Gemma-3-like: layers 0-4 window 16, layer 5 global; each layer selected a few positions
const KINDS: NonNullable<Run['kvLayers']> = [...Array.from({ length: 5 }, () => ({ kind: 'window' as const, window: 16 })), { kind: 'global' as const }];
const byKind = { window: 5 * 63 * 256, global: 154 * 256, checkpoints: 2 * 5 * 15 * 256 };

function sample(step: number, kinds = true): StepMetrics {
  const layers = Array.from({ length: 6 }, (_, layer) => ({
    selected: layer < 5 ? 15 : 8,
    candidates: 100 + step,
    positions: layer < 5 ? Array.from({ length: 15 }, (_, i) => 85 + step + i) : [0, 1, 2, 3, 50, 60, 70, 99 + step],
    recall: layer < 5 ? 1 : 0.8,
    oracleRecall: layer < 5 ? 1 : 0.9,
  }));
  const memory = { ...stepMetrics().memory, kvUsedBytes: byKind.window + byKind.global, rssBytes: 10_000_000, ...(kinds ? { kvByKind: byKind } : {}) };
  return stepMetrics({ step, contextTokens: 100 + step, policy: 'streaming', memory }, layers);
}

function makeRun(kinds = true): Run {
  const promptIds = Array.from({ length: 100 }, (_, i) => i + 1);
  return {
    requestId: kinds ? 'gemma-like' : 'llama-like', policy: 'streaming', contextLength: 512, promptIds, pieces: promptIds.map((i) => ` t${i}`),
    tokens: Array.from({ length: 8 }, (_, i) => ({ id: 200 + i, text: ` g${i}` })),
    samples: [1, 4, 7].map((s) => sample(s, kinds)),
    ...(kinds ? { kvLayers: KINDS } : {}),
  };
}

describe('window layers in the inspector', () => {
  it('Memory now: window rings, their checkpoints and global rows are separate segments; without kinds one KV segment as before', () => {
    const m = sample(7).memory;
    const { segments } = memoryStack(m);
    expect(segments.map((s) => [s.key, s.bytes])).toEqual([
      ['weights', m.weightsBytes],
      ['kv', byKind.global],
      ['kv-window', byKind.window],
      ['kv-checkpoints', byKind.checkpoints],
      ['staged', m.stagedBytes],
      ['partial', m.partialKeyBytes],
      ['other', m.rssBytes - m.weightsBytes - byKind.global - byKind.window - byKind.checkpoints - m.stagedBytes - m.partialKeyBytes],
    ]);
    render(<MemoryStack memory={m} />);
    const legend = within(screen.getByLabelText('Memory now'));
    expect(legend.getByText(`KV, window layers (rings): ${formatBytes(byKind.window)}`, { exact: false })).toBeTruthy();
    expect(legend.getByText(`KV, global layers: ${formatBytes(byKind.global)}`, { exact: false })).toBeTruthy();
    expect(legend.getByText(`Ring checkpoints: ${formatBytes(byKind.checkpoints)}`, { exact: false })).toBeTruthy();
    expect(memoryStack(sample(7, false).memory).segments.map((s) => s.key)).toEqual(['weights', 'kv', 'staged', 'partial', 'other']);
  });

  it('Memory over time: the window layers are their own part (rings + checkpoints), absent for a model without them', () => {
    const series = memorySeries(makeRun());
    expect(series.parts.window).toEqual([1, 2, 3].map(() => byKind.window + byKind.checkpoints));
    expect(series.parts.kv).toEqual([1, 2, 3].map(() => byKind.global));
    const { container, unmount } = render(<MemoryChart run={makeRun()} />);
    expect(container.querySelector('td[data-part="window"]')?.textContent).toBe(formatBytes(byKind.window + byKind.checkpoints));
    unmount();
    const plain = render(<MemoryChart run={makeRun(false)} />);
    expect(plain.container.querySelector('td[data-part="window"]')).toBeNull();
    expect(memorySeries(makeRun(false)).parts.kv).toEqual([1, 2, 3].map(() => byKind.window + byKind.global));
  });

  it('the token map labels each layer row window or global, says the pattern, and the tooltip names the kind', () => {
    const run = makeRun();
    const stats = fetchStats(run);
    expect(mapGrid(run, stats, { kind: 'layers' }).rowLabels).toEqual(['layer 0 · window 16', 'layer 1 · window 16', 'layer 2 · window 16', 'layer 3 · window 16', 'layer 4 · window 16', 'layer 5 · global']);
    render(<TokenMap run={run} />);
    const labels = within(screen.getByLabelText('Token map layers'));
    expect(labels.getByText('layer 0 · window 16').dataset.kind).toBe('window');
    expect(labels.getByText('layer 5 · global').dataset.kind).toBe('global');
    expect(screen.getByLabelText('Token map summary').textContent).toContain('5 window (16) + 1 global layers');
    expect(within(screen.getByLabelText('Token map rows')).getByText('Layer 5 · global by sampled step')).toBeTruthy();
    expect(tokenInfo(run, stats, 95)!.layers.map((l) => l.kind)).toEqual(['window 16', 'window 16', 'window 16', 'window 16', 'window 16', 'global']);
    // a model without window layers: the labels as before
    expect(mapGrid(makeRun(false), fetchStats(makeRun(false)), { kind: 'layers' }).rowLabels[0]).toBe('layer 0');
  });

  it('the recall view marks each layer window or global in its table and layer list', () => {
    render(<RecallChart run={makeRun()} />);
    const rows = within(screen.getByLabelText('Recall averages'));
    expect(rows.getByLabelText('Recall layer 0').dataset.kind).toBe('window');
    expect(rows.getByLabelText('Recall layer 5').dataset.kind).toBe('global');
    expect(within(rows.getByLabelText('Recall layer 5')).getByText('global')).toBeTruthy();
    expect(within(rows.getByLabelText('Recall layer 2')).getByText('window 16')).toBeTruthy();
    expect(within(screen.getByLabelText('Recall layers')).getByText('Layer 3 · window 16')).toBeTruthy();
  });

  it('a saved run keeps its layer kinds; a bad kinds field is refused', () => {
    const run = makeRun();
    const again = parseRunsJsonl(runsToJsonl([run]));
    expect(again[0]!.kvLayers).toEqual(KINDS);
    const text = runsToJsonl([run]).replace('"kind":"global"', '"kind":"sideways"');
    expect(() => parseRunsJsonl(text)).toThrow(/kvLayers is not a list/);
  });
});
