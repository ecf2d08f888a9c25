// Recall against the oracle: per sparse layer and sampled step, the share of the true softmax
// mass the policy's selection covered (solid) and what the oracle's set of the same size covers
// (dashed), over the generation; the averages per layer in a table. The engine measures both on
// the step each metrics sample reports (one measured step per sample).
import { useMemo, useState } from 'react';
import type uPlot from 'uplot';
import { layerKind, layerLabel, layerPattern, recallSeries, recallTable, type Run } from './runs.ts';
import { UChart } from './UChart.tsx';

export const LAYER_COLOURS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

const pct = (v: number | null): string => (v === null ? '–' : `${(v * 100).toFixed(1)}%`);

export function RecallChart({ run, rev = 0 }: { run: Run; rev?: number }) {
  const series = useMemo(() => recallSeries(run), [run, rev]);
  const table = useMemo(() => recallTable(series), [series]);
  const [only, setOnly] = useState<'all' | number>('all');
  const layers = series.layers.filter((l) => only === 'all' || l.layer === only);
  const data = useMemo(() => [series.steps, ...layers.flatMap((l) => [l.recall, l.oracle])] as uPlot.AlignedData, [series, layers]);
  const options = useMemo<Omit<uPlot.Options, 'width'>>(
    () => ({
      height: 260,
      scales: { x: { time: false }, y: { range: [0, 1] } },
      axes: [{ label: 'generated tokens (sampled steps)', stroke: '#999' }, { label: 'recall', stroke: '#999', values: (_u, ticks) => ticks.map((t) => `${Math.round(t * 100)}%`) }],
      series: [
        { label: 'step' },
        ...layers.flatMap((l) => {
          const colour = LAYER_COLOURS[l.layer % LAYER_COLOURS.length]!;
          return [
            { label: `${layerLabel(run, l.layer)} selected`, stroke: colour, width: 2, spanGaps: true, value: (_u: uPlot, v: number | null) => pct(v) },
            { label: `${layerLabel(run, l.layer)} oracle`, stroke: colour, width: 1, dash: [6, 4], spanGaps: true, value: (_u: uPlot, v: number | null) => pct(v) },
          ];
        }),
      ],
    }),
    [layers, run],
  );

  if (series.steps.length === 0) return <p className="muted">No recall in these samples: the policy selects nothing (full, dense layers) or the run has no sampled decode steps.</p>;
  return (
    <div aria-label="Recall vs oracle">
      <div className="row">
        <label>
          <span className="field-label">Layers</span>
          <select aria-label="Recall layers" value={String(only)} onChange={(e) => setOnly(e.target.value === 'all' ? 'all' : Number(e.target.value))}>
            <option value="all">All sparse layers</option>
            {series.layers.map((l) => <option key={l.layer} value={l.layer}>{layerLabel(run, l.layer).replace(/^layer/, 'Layer')}</option>)}
          </select>
        </label>
        <span className="muted grow">
          solid: the {run.policy} selection · dashed: the oracle&apos;s set of the same size (the most true attention mass) · {series.steps.length} sampled steps
          {layerPattern(run) && ` · ${layerPattern(run)}: window layers attend their window (the model's own rule), global layers the policy's selection`}
        </span>
      </div>
      <UChart options={options} data={data} label={`Recall of ${run.policy} and of the oracle per layer over ${series.steps.length} sampled steps`} optionsKey={`${run.requestId}:${only}:${layers.length}`} />
      <table className="library recall-table" aria-label="Recall averages">
        <thead>
          <tr><th>Layer</th>{run.kvLayers && <th>Kind</th>}<th>Samples</th><th>Recall ({run.policy})</th><th>Oracle, same size</th><th>Gap</th></tr>
        </thead>
        <tbody>
          {table.map((r) => (
            <tr key={r.layer} aria-label={`Recall layer ${r.layer}`} data-kind={run.kvLayers?.[r.layer]?.kind}>
              <td>{r.layer}</td>{run.kvLayers && <td>{layerKind(run, r.layer)}</td>}<td>{r.samples}</td><td>{pct(r.recall)}</td><td>{pct(r.oracle)}</td><td>{r.gap === null ? '–' : `${(r.gap * 100).toFixed(1)} pt`}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
