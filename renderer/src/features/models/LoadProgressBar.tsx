// The bar under the Load button while a model loads: stages of the forward pass built so far of
// how many (the engine's loadProgress events). Before the first figure arrives it is an
// indeterminate bar; it goes away when the load ends, whichever way.
import type { LoadProgress } from '../../engine/client.ts';

export function LoadProgressBar({ progress }: { progress: LoadProgress | null }) {
  const label = progress ? `Loading model: ${progress.done} of ${progress.total} stages` : 'Loading model';
  return (
    <div className="load-progress">
      {progress ? <progress max={progress.total} value={progress.done} aria-label={label} /> : <progress aria-label={label} />}
      <span className="muted" aria-hidden="true">{label}</span>
    </div>
  );
}
