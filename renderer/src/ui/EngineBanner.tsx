// The engine's state above every view. A crash names its reason and offers a restart; drafts
// live in the writer's slice and the documents store, so nothing the user wrote is touched.
import { useState } from 'react';
import { useEngineStore } from '../engine/store.ts';
import { services } from '../services.ts';

const REASONS: Record<string, string> = {
  crashed: 'The engine crashed',
  oom: 'The engine ran out of memory',
  killed: 'The engine was killed',
  'launch-failed': 'The engine could not start',
};

export function EngineBanner() {
  const status = useEngineStore((s) => s.status);
  const [restarting, setRestarting] = useState(false);
  const [error, setError] = useState<string | null>(null);

  if (status.state === 'ready') return null;
  if (status.state === 'starting') return <div className="banner banner-info" role="status" aria-label="Engine status">Engine starting…</div>;
  if (status.state === 'restarting') return <div className="banner banner-info" role="status" aria-label="Engine status">Engine restarting (attempt {status.attempt})…</div>;

  const restart = async (): Promise<void> => {
    setRestarting(true);
    setError(null);
    try {
      await services().engine.restart();
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setRestarting(false);
    }
  };

  return (
    <div className="banner banner-error" role="alert" aria-label="Engine status">
      <strong>{REASONS[status.reason] ?? 'The engine stopped'}</strong>
      <span className="banner-message">{status.message}</span>
      <span className="banner-note">Your drafts are safe.{status.willRestart ? ' Restarting automatically…' : ''}</span>
      {!status.willRestart && (
        <button type="button" onClick={() => void restart()} disabled={restarting}>
          {restarting ? 'Restarting…' : 'Restart engine'}
        </button>
      )}
      {error && <span className="banner-message">Restart failed: {error}</span>}
    </div>
  );
}
