// The latest sample, layer by layer.
import type { StepMetrics } from '../../../../app/common/protocol.ts';
import { formatBytes } from '../../ui/format.ts';
import { layerRows } from './data.ts';

const pct = (v: number | null): string => (v === null ? '–' : `${(v * 100).toFixed(1)}%`);
const ms = (v: number): string => v.toFixed(2);

export function LayerTable({ metrics }: { metrics: StepMetrics }) {
  const rows = layerRows(metrics);
  return (
    <table className="library layer-table" aria-label="Layers">
      <thead>
        <tr>
          <th>Layer</th><th>Selected</th><th>Candidates</th><th>Fetch</th><th>Bytes moved</th><th>Hits</th><th>Misses</th><th>Hit rate</th><th>Recall</th>
          <th title="speculation / gather / attention">ms (spec / gather / attn)</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr key={r.layer} aria-label={`Layer ${r.layer}`}>
            <td>{r.layer}</td>
            <td>{r.selected.toLocaleString('en-US')}</td>
            <td>{r.candidates.toLocaleString('en-US')}</td>
            <td>{pct(r.fetchRatio)}</td>
            <td>{formatBytes(r.bytesMoved)}</td>
            <td>{r.reuseHits.toLocaleString('en-US')}</td>
            <td>{r.reuseMisses.toLocaleString('en-US')}</td>
            <td>{pct(r.hitRate)}</td>
            <td>{pct(r.recall)}</td>
            <td>{ms(r.speculationMs)} / {ms(r.gatherMs)} / {ms(r.attentionMs)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
