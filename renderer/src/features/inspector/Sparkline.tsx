// A small SVG line of the recent samples of one figure (no chart library); gaps where the
// figure is null (recall without inspection, hit rate without a reuse cache).
import { sparkSegments } from './data.ts';

const WIDTH = 240;
const HEIGHT = 40;

export function Sparkline({ label, values, format, max }: { label: string; values: readonly (number | null)[]; format: (v: number) => string; max?: number }) {
  const last = [...values].reverse().find((v): v is number => v !== null);
  const segments = sparkSegments(values, WIDTH, HEIGHT, max);
  return (
    <figure className="spark" aria-label={label}>
      <figcaption>
        <span className="muted">{label}</span> <strong data-testid={`spark-${label}`}>{last === undefined ? '–' : format(last)}</strong>
      </figcaption>
      <svg viewBox={`0 0 ${WIDTH} ${HEIGHT}`} width={WIDTH} height={HEIGHT} role="img" aria-label={`${label} over the last ${values.length} samples`} preserveAspectRatio="none">
        {segments.map((points, i) => (
          <polyline key={i} points={points} fill="none" stroke="currentColor" strokeWidth={1.5} vectorEffect="non-scaling-stroke" />
        ))}
      </svg>
    </figure>
  );
}
