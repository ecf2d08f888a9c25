// Which past positions were fetched, over recent samples: x = sample (newest on the right),
// y = position bucket (≤ 512 rows, position 0 at the top) for one layer, or one row per layer
// (fetch ratio) for all of them. Drawn on a canvas whose pixels are the cells (CSS scales it):
// a new sample shifts the image left by one column and puts one new column, so the cost per
// sample is one column, whatever the context length.
import { useEffect, useRef } from 'react';
import { heatColumn, heatModeRows, heatPixels, type HeatMode, type Snapshot } from './data.ts';

export const HEAT_COLUMNS = 240;

export function modeKey(mode: HeatMode): string {
  return mode.kind === 'layers' ? `layers:${mode.layers}` : `positions:${mode.layer}:${mode.contextLength}`;
}

export function Heatmap({ mode, samples, version }: { mode: HeatMode; samples: () => Snapshot[]; version: number }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const drawn = useRef<{ key: string; seq: number }>({ key: '', seq: 0 });
  const rows = heatModeRows(mode);
  const key = modeKey(mode);

  useEffect(() => {
    const el = canvas.current;
    const ctx = el?.getContext('2d') ?? null;
    if (!el || !ctx) return; // no canvas (tests on happy-dom): nothing to draw
    const recent = samples();
    const last = drawn.current;
    const fresh = recent.filter((s) => s.seq > last.seq);
    if (last.key !== key || fresh.length >= HEAT_COLUMNS || recent.length === 0) {
      // Full redraw: a new mode (or canvas size), a cleared buffer, or more new columns than fit.
      const columns = recent.slice(-HEAT_COLUMNS).map((s) => heatColumn(s.metrics, mode));
      ctx.putImageData(new ImageData(heatPixels(columns, HEAT_COLUMNS, rows), HEAT_COLUMNS, rows), 0, 0);
    } else if (fresh.length > 0) {
      // Incremental: shift left by the new columns and put them at the right edge.
      ctx.drawImage(el, -fresh.length, 0);
      const columns = fresh.map((s) => heatColumn(s.metrics, mode));
      ctx.putImageData(new ImageData(heatPixels(columns, fresh.length, rows), fresh.length, rows), HEAT_COLUMNS - fresh.length, 0);
    }
    drawn.current = { key, seq: recent.at(-1)?.seq ?? 0 };
  }, [version, key, rows, mode, samples]);

  return (
    <canvas
      ref={canvas}
      className="heatmap"
      width={HEAT_COLUMNS}
      height={rows}
      role="img"
      aria-label={mode.kind === 'layers' ? 'Fetch ratio per layer over recent samples' : `Selected positions of layer ${mode.layer} over recent samples`}
    />
  );
}
