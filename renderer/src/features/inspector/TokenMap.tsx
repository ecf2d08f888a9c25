// The token map: which past positions a run's sampled decode steps fetched. Above, a canvas whose
// x axis is the context's positions (bucketed to at most 1,024 columns, so 32K positions draw as
// fast as 1K) and whose rows are the sparse layers (fetch frequency over the run) or, for one layer,
// the sampled steps (selected / not / evicted). Below, the context's text token by token, coloured
// by the same frequency: the window of tokens around the column under the pointer (or clicked).
// Hovering a token shows its id, position, per-layer fetch counts, prefetch counter and eviction.
import { memo, useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { sanitiseText } from '../../ui/SafeText.tsx';
import { heatColor } from './data.ts';
import { bucketRange, contextTokens, fetchFrequency, fetchStats, layerLabel, layerPattern, mapGrid, tokenInfo, type ContextToken, type FetchStats, type MapMode, type Run, type TokenInfo } from './runs.ts';

/** Tokens of text shown at once around the focus. */
export const TEXT_WINDOW = 480;
const EVICTED: [number, number, number] = [224, 64, 64];
const EMPTY: [number, number, number] = [44, 44, 52];

export function gridPixels(cells: Float32Array, columns: number, rows: number): Uint8ClampedArray<ArrayBuffer> {
  const px = new Uint8ClampedArray(columns * rows * 4);
  for (let i = 0; i < columns * rows; i++) {
    const v = cells[i]!;
    const [r, g, b] = v !== v ? EMPTY : v < 0 ? EVICTED : heatColor(v);
    px[i * 4] = r;
    px[i * 4 + 1] = g;
    px[i * 4 + 2] = b;
    px[i * 4 + 3] = 255;
  }
  return px;
}

/** CSS background of a token by its frequency (transparent where never sampled). */
function tokenStyle(v: number, evicted: boolean): { background?: string; color?: string } {
  if (evicted) return { background: `rgb(${EVICTED.join(',')})`, color: '#fff' };
  if (v !== v) return {};
  const [r, g, b] = heatColor(v);
  return { background: `rgb(${r},${g},${b})`, color: 0.299 * r + 0.587 * g + 0.114 * b > 140 ? '#111' : '#f4f4f4' };
}

const visible = (text: string): string => sanitiseText(text).replace(/\n/g, '⏎\n');

export function TokenMap({ run, rev = 0 }: { run: Run; rev?: number }) {
  // rev: the inspector's throttled run revision (a live run is recomputed at most twice a second)
  const stats = useMemo(() => fetchStats(run), [run, rev]);
  const [mode, setMode] = useState<MapMode>({ kind: 'layers' });
  const grid = useMemo(() => mapGrid(run, stats, mode), [run, stats, mode]);
  const freq = useMemo(() => fetchFrequency(stats), [stats]);
  const closeUps = useMemo(() => ({ first: mapGrid(run, stats, mode, [0, CLOSE_UP]), last: mapGrid(run, stats, mode, [stats.positions - CLOSE_UP, stats.positions]) }), [run, stats, mode]);
  const tokens = useMemo(() => contextTokens(run), [run, rev]);
  const canvas = useRef<HTMLCanvasElement>(null);
  const [focus, setFocus] = useState<number | null>(null);
  const [hoverCell, setHoverCell] = useState<{ bucket: number; row: number } | null>(null);
  const [hover, setHover] = useState<TokenInfo | null>(null);
  const P = stats.positions;

  useEffect(() => {
    const ctx = canvas.current?.getContext('2d') ?? null;
    if (!ctx) return;
    ctx.putImageData(new ImageData(gridPixels(grid.cells, grid.columns, grid.rows), grid.columns, grid.rows), 0, 0);
  }, [grid]);

  const center = focus ?? Math.max(0, P - Math.floor(TEXT_WINDOW / 2));
  const from = Math.max(0, Math.min(center - Math.floor(TEXT_WINDOW / 2), P - TEXT_WINDOW));
  const onHover = useCallback((p: number | null) => setHover(p === null ? null : tokenInfo(run, stats, p)), [run, stats]);
  const shown = useMemo(() => tokens.slice(from, from + TEXT_WINDOW), [tokens, from]);

  const cellAt = (e: React.MouseEvent<HTMLCanvasElement>) => {
    const rect = e.currentTarget.getBoundingClientRect();
    const bucket = Math.min(grid.columns - 1, Math.max(0, Math.floor(((e.clientX - rect.left) / rect.width) * grid.columns)));
    const row = Math.min(grid.rows - 1, Math.max(0, Math.floor(((e.clientY - rect.top) / rect.height) * grid.rows)));
    return { bucket, row };
  };
  const cell = hoverCell ? { range: bucketRange(hoverCell.bucket, P, grid.columns), value: grid.cells[hoverCell.row * grid.columns + hoverCell.bucket]!, label: grid.rowLabels[hoverCell.row] ?? '' } : null;

  return (
    <div className="token-map" aria-label="Token map">
      <div className="row">
        <label>
          <span className="field-label">Rows</span>
          <select aria-label="Token map rows" value={mode.kind === 'steps' ? String(mode.layer) : mode.kind} onChange={(e) => setMode(e.target.value === 'layers' || e.target.value === 'attention' ? { kind: e.target.value } : { kind: 'steps', layer: Number(e.target.value) })}>
            <option value="layers">Sparse layers (fetch frequency over the run)</option>
            {stats.attentionSamples.some((n) => n > 0) && <option value="attention">Sparse layers (true attention mass, mean over sampled steps)</option>}
            {stats.layers.map((l) => <option key={l} value={l}>{layerLabel(run, l).replace(/^layer/, 'Layer')} by sampled step</option>)}
          </select>
        </label>
        <span className="muted grow" aria-label="Token map summary">
          {run.policy || 'policy ?'} · {P.toLocaleString('en-US')} positions in {grid.columns.toLocaleString('en-US')} columns · {stats.samples[0] ?? 0} sampled steps
          {stats.layers.length === 0 && ' · no selected positions in these samples (policy full, or dense layers only)'}
          {layerPattern(run) && ` · ${layerPattern(run)}: a window layer attends its window only (its ring), whatever the policy`}
        </span>
      </div>
      <div className="heat-with-labels">
      <div className="heat-labels muted" aria-label="Token map layers" style={{ height: `${Math.min(320, Math.max(96, grid.rows * 24))}px` }}>
        {grid.rows <= 16
          ? grid.rowLabels.map((l) => <span key={l} data-kind={rowKind(l)} className={rowKind(l) === 'window' ? 'layer-window' : undefined}>{l}</span>)
          : [grid.rowLabels[0], grid.rowLabels.at(-1)].map((l, i) => <span key={i} data-kind={rowKind(l ?? '')}>{l}</span>)}
      </div>
      <canvas
        ref={canvas}
        className="token-heat"
        width={grid.columns}
        height={grid.rows}
        role="img"
        aria-label={mode.kind === 'layers' ? 'Fetch frequency per position and sparse layer' : mode.kind === 'attention' ? 'True attention mass per position and sparse layer' : `Selected positions of layer ${mode.layer} per sampled step`}
        style={{ height: `${Math.min(320, Math.max(96, grid.rows * 24))}px` }}
        onMouseMove={(e) => setHoverCell(cellAt(e))}
        onMouseLeave={() => setHoverCell(null)}
        onClick={(e) => setFocus(bucketRange(cellAt(e).bucket, P, grid.columns)[0])}
      />
      </div>
      <div className="heat-axis muted">
        <span>position 0</span>
        <span aria-label="Map cell">
          {cell ? `${cell.label} · positions ${cell.range[0].toLocaleString('en-US')}–${(cell.range[1] - 1).toLocaleString('en-US')} · ${cell.value !== cell.value ? 'no samples' : cell.value < 0 ? 'evicted' : mode.kind === 'attention' ? `√(mass ÷ row max) ${cell.value.toFixed(2)}` : `fetched ${(cell.value * 100).toFixed(0)}%`}` : 'click the map to show that part of the text'}
        </span>
        <span>{(P - 1).toLocaleString('en-US')}</span>
      </div>
      {P > 2 * CLOSE_UP && (
        <div className="close-ups">
          <CloseUp title={`first ${CLOSE_UP} positions (attention sinks)`} grid={closeUps.first} from={0} label="First positions close up" />
          <CloseUp title={`last ${CLOSE_UP} positions (the recent window)`} grid={closeUps.last} from={P - CLOSE_UP} label="Last positions close up" />
        </div>
      )}
      <p className="muted legend">
        {mode.kind === 'attention' ? (
          <>map: <span className="swatch" style={{ background: 'rgb(253,231,37)' }} /> the row&apos;s most attended position · <span className="swatch" style={{ background: 'rgb(33,145,140)' }} /> about a quarter of its mass · <span className="swatch" style={{ background: 'rgb(20,18,40)' }} /> none (√ scale); text below: fetch frequency ·{' '}</>
        ) : (
          <><span className="swatch" style={{ background: 'rgb(253,231,37)' }} /> fetched in every sampled step · <span className="swatch" style={{ background: 'rgb(33,145,140)' }} /> in some · <span className="swatch" style={{ background: 'rgb(20,18,40)' }} /> never ·{' '}</>
        )}
        <span className="swatch" style={{ background: `rgb(${EVICTED.join(',')})` }} /> evicted · <span className="swatch" style={{ background: `rgb(${EMPTY.join(',')})` }} /> not in the context yet. Generated tokens are underlined.
      </p>
      <TokenText tokens={shown} from={from} freq={freq} stats={stats} onHover={onHover} />
      {hover && <TokenTooltip info={hover} />}
    </div>
  );
}

/** 'window' / 'global' from a row label made by layerLabel ('layer 3 · window 16'), '' for other rows. */
function rowKind(label: string): string {
  return / · window /.test(label) ? 'window' : / · global$/.test(label) ? 'global' : '';
}

/** Positions shown one per cell in each close-up. */
export const CLOSE_UP = 48;

function CloseUp({ title, grid, from, label }: { title: string; grid: ReturnType<typeof mapGrid>; from: number; label: string }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  useEffect(() => {
    const ctx = canvas.current?.getContext('2d') ?? null;
    if (ctx) ctx.putImageData(new ImageData(gridPixels(grid.cells, grid.columns, grid.rows), grid.columns, grid.rows), 0, 0);
  }, [grid]);
  return (
    <figure className="close-up">
      <figcaption className="muted">{title}: positions {from.toLocaleString('en-US')}–{(from + grid.columns - 1).toLocaleString('en-US')}</figcaption>
      <canvas ref={canvas} className="token-heat" width={grid.columns} height={grid.rows} role="img" aria-label={label} style={{ height: `${Math.min(160, Math.max(64, grid.rows * 16))}px` }} />
    </figure>
  );
}

/** The text window, its own component so a pointer over the map (a new cell, every frame) does not re-render 480 spans. */
const TokenText = memo(function TokenText({ tokens, from, freq, stats, onHover }: { tokens: ContextToken[]; from: number; freq: Float32Array; stats: FetchStats; onHover: (position: number | null) => void }) {
  const evictedAny = (p: number) => stats.evictedAt.some((e) => (e[p] ?? -1) >= 0);
  return (
    <div
      className="token-text"
      aria-label="Context text"
      onMouseOver={(e) => {
        const p = Number((e.target as HTMLElement).dataset.pos);
        if (Number.isInteger(p)) onHover(p);
      }}
      onMouseLeave={() => onHover(null)}
    >
      {from > 0 && <span className="muted">… {from.toLocaleString('en-US')} tokens before · </span>}
      {tokens.map((t) => (
        <span key={t.position} data-pos={t.position} className={t.generated ? 'tok gen' : 'tok'} style={tokenStyle(freq[t.position] ?? Number.NaN, evictedAny(t.position))}>
          {visible(t.text) || '∅'}
        </span>
      ))}
    </div>
  );
});

export function TokenTooltip({ info }: { info: TokenInfo }) {
  return (
    <div className="token-tooltip" role="tooltip" aria-label="Token details">
      <div>
        <strong>{JSON.stringify(info.text)}</strong> · id <span data-field="id">{info.id}</span> · position <span data-field="position">{info.position}</span>
        {info.generated ? ' · generated' : ' · prompt'}
      </div>
      <table className="library">
        <tbody>
          {info.layers.map((l) => (
            <tr key={l.layer} data-layer={l.layer}>
              <th data-kind={l.kind?.startsWith('window') ? 'window' : l.kind}>layer {l.layer}{l.kind ? ` · ${l.kind}` : ''}</th>
              <td>
                fetched <span data-field="fetched">{l.fetched}</span> of <span data-field="of">{l.of}</span> sampled steps
              </td>
              <td data-field="attention">{l.attention === null ? '' : `true attention ${(l.attention * 100).toFixed(2)}%`}</td>
              <td data-field="evicted">{l.evictedAt === null ? 'not evicted' : `evicted at step ${l.evictedAt}`}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <div>
        prefetch counter <span data-field="counter">{info.counter === null ? '– (counters exist in a pool with a byte budget)' : info.counter}</span>
      </div>
    </div>
  );
}
