// The routing view of a mixture-of-experts run: which experts each layer sent every token to.
// Above, a canvas whose x axis is the context's positions (one column each) and whose rows are the
// MoE layers (first on top), each cell coloured by the expert with the largest routing weight;
// hovering a cell names the token, the layer and its k experts. Below, each layer's expert load
// over the run: how many of its experts were used at all, the busiest one, and a strip with one
// bar per expert. Experts are most of what such a model reads per token, as rows are for the KV
// cache: this is the weights' counterpart of the token map.
import { useEffect, useMemo, useRef, useState } from 'react';
import { sanitiseText } from '../../ui/SafeText.tsx';
import { cellExperts, expertColor, expertLoad, routingPixels, type RunRouting } from './routing.ts';
import { contextTokens, type Run } from './runs.ts';

const rgb = (c: [number, number, number]): string => `rgb(${c.join(',')})`;

export function RoutingView({ run, routing, rev = 0 }: { run: Run; routing: RunRouting; rev?: number }) {
  // rev: the inspector's throttled run revision (a live run is recomputed at most twice a second)
  const positions = useMemo(() => Math.max(routing.positions.length, run.promptIds.length + run.tokens.length), [run, routing, rev]);
  const load = useMemo(() => expertLoad(routing), [routing, rev]);
  const tokens = useMemo(() => contextTokens(run), [run, rev]);
  const canvas = useRef<HTMLCanvasElement>(null);
  const [hover, setHover] = useState<{ position: number; layerIndex: number } | null>(null);
  const rows = routing.layers.length;

  useEffect(() => {
    const ctx = canvas.current?.getContext('2d') ?? null;
    if (!ctx || positions === 0) return;
    ctx.putImageData(new ImageData(routingPixels(routing, positions), positions, rows), 0, 0);
  }, [routing, positions, rows, rev]);

  const cellAt = (e: React.MouseEvent<HTMLCanvasElement>) => {
    const rect = e.currentTarget.getBoundingClientRect();
    const position = Math.min(positions - 1, Math.max(0, Math.floor(((e.clientX - rect.left) / rect.width) * positions)));
    const layerIndex = Math.min(rows - 1, Math.max(0, Math.floor(((e.clientY - rect.top) / rect.height) * rows)));
    return { position, layerIndex };
  };
  const hovered = hover ? cellExperts(routing, hover.position, hover.layerIndex) : undefined;
  const hoveredToken = hover ? tokens[hover.position] : undefined;
  const height = Math.min(360, Math.max(96, rows * 12));
  // the load strip: 192 px wide whatever the expert count (16 experts: 12 px bars; 128: 2 px, rounded up)
  const bar = Math.max(2, Math.floor(192 / routing.experts));

  return (
    <div className="routing" aria-label="Routing">
      <p className="muted" aria-label="Routing summary">
        {rows} layers with experts · {routing.experts} experts each, {routing.k} per token · <span data-field="routed">{load.tokens.toLocaleString('en-US')}</span> of {positions.toLocaleString('en-US')} positions routed in this run
        {load.tokens < positions && ' (a reused prefix or a restored snapshot was not recomputed; the last generated token is never run)'}
      </p>
      <div className="heat-with-labels">
        <div className="heat-labels muted" style={{ height: `${height}px` }}>
          <span>layer {routing.layers[0]}</span>
          <span>layer {routing.layers.at(-1)}</span>
        </div>
        <canvas
          ref={canvas}
          className="token-heat"
          width={Math.max(1, positions)}
          height={rows}
          role="img"
          aria-label="Top expert per position and layer"
          style={{ height: `${height}px` }}
          onMouseMove={(e) => setHover(cellAt(e))}
          onMouseLeave={() => setHover(null)}
        />
      </div>
      <div className="heat-axis muted">
        <span>position 0</span>
        <span aria-label="Routing cell">
          {hover ? (
            <>
              position <span data-field="position">{hover.position}</span> {hoveredToken ? JSON.stringify(sanitiseText(hoveredToken.text)) : ''} · layer <span data-field="layer">{routing.layers[hover.layerIndex]}</span> ·{' '}
              {hovered ? <>experts <span data-field="experts">{hovered.join(', ')}</span> (largest weight first)</> : routing.positions[hover.position] ? 'not run by this layer (a prompt token whose logits were not needed skips the last layer\'s MLP)' : 'not computed in this run'}
            </>
          ) : (
            'hover the map: a cell is one token in one layer, coloured by its top expert'
          )}
        </span>
        <span>{Math.max(0, positions - 1).toLocaleString('en-US')}</span>
      </div>
      <h2>Expert load per layer</h2>
      <table className="library routing-load" aria-label="Expert load">
        <thead>
          <tr>
            <th>layer</th>
            <th>experts used</th>
            <th>tokens routed</th>
            <th>busiest expert (share of tokens)</th>
            <th>times each expert was chosen, expert 0 to {routing.experts - 1}</th>
          </tr>
        </thead>
        <tbody>
          {routing.layers.map((layer, li) => {
            const counts = load.counts[li]!;
            const max = Math.max(1, ...counts);
            const busiest = load.busiest[li]!;
            return (
              <tr key={layer} data-layer={layer}>
                <th>{layer}</th>
                <td data-field="used">{load.used[li]} of {routing.experts}</td>
                <td data-field="routed">{load.routed[li]!.toLocaleString('en-US')}</td>
                <td data-field="busiest">
                  <span className="swatch" style={{ background: rgb(expertColor(busiest.expert)) }} /> {busiest.expert} ({(busiest.share * 100).toFixed(1)}%)
                </td>
                <td>
                  <span className="expert-strip" aria-hidden="true">
                    {Array.from(counts, (n, e) => <span key={e} title={`expert ${e}: ${n}`} style={{ width: `${bar}px`, height: `${Math.round((n / max) * 100)}%`, background: rgb(expertColor(e)) }} />)}
                  </span>
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
