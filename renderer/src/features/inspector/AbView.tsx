// A/B of two policies over the same prompt (Compare: B ran on A's prompt ids, reusing A's prefix):
// per sparse layer, the prompt positions each fetched in its sampled steps that the other never
// did (a canvas strip, A-only orange, B-only blue); per step, whether both runs' most likely token
// agree and KL(A ‖ B) over their shared top-20 (a lower bound: the other ids lumped in one bucket);
// and the two texts side by side with the first divergence marked.
import { useEffect, useMemo, useRef } from 'react';
import type uPlot from 'uplot';
import { sanitiseText } from '../../ui/SafeText.tsx';
import { bucketRange, fetchDiff, mapColumns, PAIR_STEPS, stepCompare, type Run } from './runs.ts';
import type { TokenComparison } from './data.ts';
import { UChart } from './UChart.tsx';

const ONLY_A: [number, number, number] = [242, 142, 43];
const ONLY_B: [number, number, number] = [78, 121, 167];
const NEITHER: [number, number, number] = [28, 26, 40];

export function AbView({ a, b, comparison, rev = 0 }: { a: Run; b: Run; comparison: TokenComparison; rev?: number }) {
  const diff = useMemo(() => fetchDiff(a, b), [a, b, rev]);
  const steps = useMemo(() => stepCompare(a, b, comparison.firstDivergence), [a, b, comparison.firstDivergence, rev]);
  const canvas = useRef<HTMLCanvasElement>(null);
  const P = diff[0]?.positions ?? 0;
  const columns = mapColumns(P);

  useEffect(() => {
    const ctx = canvas.current?.getContext('2d') ?? null;
    if (!ctx || diff.length === 0) return;
    const px = new Uint8ClampedArray(columns * diff.length * 4);
    diff.forEach((d, row) => {
      for (let c = 0; c < columns; c++) {
        const [lo, hi] = bucketRange(c, P, columns);
        // the bucket's strongest lean: orange where A fetched it alone more often, blue for B
        let lean = 0;
        for (let p = lo; p < hi; p++) if (Math.abs(d.balance[p]!) > Math.abs(lean)) lean = d.balance[p]!;
        const target = lean > 0 ? ONLY_A : ONLY_B;
        const t = Math.min(1, Math.abs(lean) * 2);
        const i = (row * columns + c) * 4;
        for (let k = 0; k < 3; k++) px[i + k] = Math.round(NEITHER[k]! + (target[k]! - NEITHER[k]!) * t);
        px[i + 3] = 255;
      }
    });
    ctx.putImageData(new ImageData(px, columns, diff.length), 0, 0);
  }, [diff, columns, P]);

  const klSteps = steps.filter((s) => s.kl !== null);
  const beforeDiv = klSteps.filter((s) => !s.afterDivergence);
  const meanKl = beforeDiv.length > 0 ? beforeDiv.reduce((x, s) => x + s.kl!, 0) / beforeDiv.length : null;
  const top1 = steps.length > 0 ? steps.filter((s) => s.top1).length / steps.length : null;
  const data = useMemo(() => [steps.map((s) => s.step), steps.map((s) => s.kl), steps.map((s) => (s.top1 ? null : 0))] as uPlot.AlignedData, [steps]);
  const options = useMemo<Omit<uPlot.Options, 'width'>>(
    () => ({
      height: 200,
      scales: { x: { time: false }, y: { range: (_u, _min, max) => [0, Math.max(0.05, max * 1.1)] } },
      axes: [{ label: 'step', stroke: '#999' }, { label: 'KL(A‖B), nats', stroke: '#999' }],
      series: [
        { label: 'step' },
        { label: 'KL lower bound', stroke: '#b07aa1', width: 2, value: (_u: uPlot, v: number | null) => (v === null ? '–' : v.toFixed(4)) },
        { label: 'top-1 differs', stroke: '#e15759', width: 0, points: { show: true, size: 7, fill: '#e15759' }, value: (_u: uPlot, v: number | null) => (v === null ? 'agree' : 'differs') },
      ],
      hooks: {
        draw: [
          (u: uPlot) => {
            if (comparison.firstDivergence === null) return;
            const x = u.valToPos(comparison.firstDivergence, 'x', true);
            u.ctx.save();
            u.ctx.strokeStyle = '#e15759';
            u.ctx.setLineDash([4, 4]);
            u.ctx.beginPath();
            u.ctx.moveTo(x, u.bbox.top);
            u.ctx.lineTo(x, u.bbox.top + u.bbox.height);
            u.ctx.stroke();
            u.ctx.restore();
          },
        ],
      },
    }),
    [comparison.firstDivergence],
  );

  return (
    <div className="ab" aria-label="A/B view">
      <h3>Fetched positions: {a.policy} (A) vs {b.policy} (B), step by step ({P.toLocaleString('en-US')} positions, {diff[0]?.steps ?? 0} sampled steps of A, each with B's nearest within {PAIR_STEPS})</h3>
      {diff.length === 0 ? (
        <p className="muted">One side sent no selected positions (policy full, or no sampled decode step): nothing to compare.</p>
      ) : (
        <>
          <canvas ref={canvas} className="token-heat" width={columns} height={diff.length} role="img" aria-label={`Positions fetched by only ${a.policy} or only ${b.policy}, per sparse layer`} style={{ height: `${Math.max(72, diff.length * 24)}px` }} />
          <p className="muted legend">
            rows: sparse layers {diff.map((d) => d.layer).join(', ')} (top to bottom) · <span className="swatch" style={{ background: `rgb(${ONLY_A.join(',')})` }} /> {a.policy} (A) fetched it when {b.policy} did not ·{' '}
            <span className="swatch" style={{ background: `rgb(${ONLY_B.join(',')})` }} /> the reverse · dark: both or neither · brighter: at more of the sampled steps
          </p>
          <table className="library" aria-label="Fetched by one side only">
            <thead><tr><th>Layer</th><th>Only {a.policy} (A), per step</th><th>Only {b.policy} (B), per step</th><th>Both, per step</th><th>Steps</th></tr></thead>
            <tbody>
              {diff.map((d) => (
                <tr key={d.layer} aria-label={`AB layer ${d.layer}`}>
                  <td>{d.layer}</td><td data-ab="onlyA">{d.meanOnlyA.toFixed(1)}</td><td data-ab="onlyB">{d.meanOnlyB.toFixed(1)}</td><td data-ab="both">{d.meanBoth.toFixed(1)}</td><td>{d.steps}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <h3>Per step: top-1 agreement and KL</h3>
      <dl className="stats">
        <div><dt>Top-1 agreement</dt><dd data-stat="top1">{top1 === null ? '–' : `${(top1 * 100).toFixed(1)}% of ${steps.length} steps`}</dd></div>
        <div><dt>Mean KL(A‖B) to the first divergence</dt><dd data-stat="kl">{meanKl === null ? '– (no logprobs)' : `≥ ${meanKl.toFixed(4)} nats over ${beforeDiv.length} steps`}</dd></div>
      </dl>
      {klSteps.length > 0 && <UChart options={options} data={data} label={`KL per step between ${a.policy} and ${b.policy}`} optionsKey={`${a.requestId}:${b.requestId}`} />}
      <p className="muted">KL over the ids in both runs&apos; top-20 plus one bucket for the rest: lumping never raises a KL, so it is a lower bound. After the first divergence (dashed line) the two contexts differ, so later steps compare different prefixes.</p>
      <h3>Texts</h3>
      <div className="ab-texts">
        {[a, b].map((r, side) => (
          <div key={r.requestId} aria-label={`Text ${side === 0 ? 'A' : 'B'}`}>
            <h4>{r.policy} ({side === 0 ? 'A' : 'B'})</h4>
            <p className="ab-text">
              {r.tokens.map((t, i) => (
                <span key={i} className={comparison.firstDivergence !== null && i === comparison.firstDivergence ? 'diverge first' : comparison.firstDivergence !== null && i > comparison.firstDivergence ? 'diverge' : undefined} title={i === comparison.firstDivergence ? `first divergence: token ${i}` : undefined}>
                  {sanitiseText(t.text)}
                </span>
              ))}
            </p>
          </div>
        ))}
      </div>
    </div>
  );
}
