// Memory over a run: a stacked area of weights, KV rows in RAM (a model with sliding-window layers:
// the global layers' rows, and the window layers' rings + checkpoints apart), partial keys, staged rows and the
// rest of the process (RSS minus those), the KV pool's budget as a dashed line above the weights,
// and a red mark at every sampled step where the pool evicted tokens.
import { useMemo } from 'react';
import type uPlot from 'uplot';
import { formatBytes } from '../../ui/format.ts';
import { MEMORY_PARTS, memorySeries, stackParts, type MemoryPart, type Run } from './runs.ts';
import { UChart } from './UChart.tsx';

const PART_LABEL: Record<MemoryPart, string> = { weights: 'Weights', kv: 'KV rows in RAM', window: 'KV rows, window layers (rings + checkpoints)', partial: 'Partial keys', staged: 'Staged rows', other: 'Other' };
const PART_COLOUR: Record<MemoryPart, string> = { weights: '#4e79a7', kv: '#59a14f', window: '#a0cbe8', partial: '#edc948', staged: '#f28e2b', other: '#8c8c96' };

export function MemoryChart({ run, rev = 0 }: { run: Run; rev?: number }) {
  const series = useMemo(() => memorySeries(run), [run, rev]);
  const stacked = useMemo(() => stackParts(series), [series]);
  const hasBudget = series.budgetLine.some((b, i) => b > (series.parts.weights[i] ?? 0));
  // draw the tallest edge first: each later (lower) area covers the one before it
  // the window layers' part only for a model that has them
  const hasWindow = series.parts.window.some((b) => b > 0);
  const order = [...MEMORY_PARTS.keys()].filter((i) => hasWindow || MEMORY_PARTS[i] !== 'window').reverse();
  const data = useMemo(() => [series.steps, ...order.map((i) => stacked[i]!), ...(hasBudget ? [series.budgetLine] : [])] as uPlot.AlignedData, [series, stacked, hasBudget, hasWindow]);
  const options = useMemo<Omit<uPlot.Options, 'width'>>(
    () => ({
      height: 260,
      scales: { x: { time: false }, y: { range: (_u, _min, max) => [0, max * 1.08] } },
      axes: [{ label: 'generated tokens (sampled steps)', stroke: '#999' }, { label: 'bytes', stroke: '#999', size: 70, values: (_u, ticks) => ticks.map((t) => formatBytes(t)) }],
      series: [
        { label: 'step' },
        ...order.map((i) => {
          const part = MEMORY_PARTS[i]!;
          return { label: PART_LABEL[part], stroke: PART_COLOUR[part], fill: PART_COLOUR[part], width: 1, value: (_u: uPlot, v: number | null) => (v === null ? '–' : formatBytes(v)) };
        }),
        ...(hasBudget ? [{ label: 'Weights + pool budget', stroke: '#e15759', dash: [8, 4], width: 2, value: (_u: uPlot, v: number | null) => (v === null ? '–' : formatBytes(v)) }] : []),
      ],
      hooks: {
        draw: [
          (u: uPlot) => {
            // eviction marks along the top of the plot
            const ctx = u.ctx;
            ctx.save();
            ctx.fillStyle = '#e15759';
            for (const e of series.evictions) {
              const x = u.valToPos(e.step, 'x', true);
              ctx.beginPath();
              ctx.moveTo(x, u.bbox.top);
              ctx.lineTo(x - 5, u.bbox.top - 8);
              ctx.lineTo(x + 5, u.bbox.top - 8);
              ctx.fill();
              ctx.fillRect(x - 0.5, u.bbox.top, 1, u.bbox.height);
            }
            ctx.restore();
          },
        ],
      },
    }),
    [series, hasBudget, hasWindow],
  );

  if (series.steps.length === 0) return <p className="muted">No samples in this run.</p>;
  const last = series.steps.length - 1;
  const evicted = series.evictions.reduce((a, e) => a + e.count, 0);
  const shownParts = MEMORY_PARTS.filter((p) => hasWindow || p !== 'window');
  return (
    <div aria-label="Memory over time">
      <UChart options={options} data={data} label={`Memory over ${series.steps.length} samples, ${evicted} evictions marked`} optionsKey={`${run.requestId}:${hasBudget}:${hasWindow}:${series.steps.length > 0}`} />
      <table className="library" aria-label="Memory at the last sample">
        <thead>
          <tr>{shownParts.map((p) => <th key={p}><span className="swatch" style={{ background: PART_COLOUR[p] }} /> {PART_LABEL[p]}</th>)}<th>Pool budget</th><th>Evictions</th></tr>
        </thead>
        <tbody>
          <tr>
            {shownParts.map((p) => <td key={p} data-part={p}>{formatBytes(series.parts[p][last]!)}</td>)}
            <td>{hasBudget ? formatBytes(series.budgetLine[last]! - series.parts.weights[last]!) : 'none set'}</td>
            <td data-part="evictions">{evicted.toLocaleString('en-US')} at {series.evictions.length} sampled steps</td>
          </tr>
        </tbody>
      </table>
    </div>
  );
}
