// Settings → Document snapshots: how many the engine keeps and how much they take, the size cap
// (least recently used deleted beyond it) and Clear. Asked of the engine when shown.
import { useEffect } from 'react';
import { formatBytes } from '../../ui/format.ts';
import { capProblem, useSnapshotsStore } from './snapshots-store.ts';

export function SnapshotsPanel() {
  const { stats, capMiB, busy, error, done, refresh, editCap, saveCap, clear } = useSnapshotsStore();

  useEffect(() => {
    void refresh();
  }, [refresh]);

  const problem = Number.isNaN(capMiB) && !stats ? null : capProblem(capMiB);
  const off = stats !== null && !stats.enabled;
  const unchanged = stats !== null && capMiB * 1024 * 1024 === stats.capBytes;

  return (
    <section className="panel" aria-label="Document snapshots" style={{ marginTop: 16 }}>
      <h2>Document snapshots</h2>
      <p className="field-hint">
        After a generation the engine saves each document&apos;s KV cache, so Continue after a restart, a reload or another document reads it back instead of
        computing the whole draft again. Beyond the cap the least recently used are deleted.
      </p>
      {off ? (
        <p className="muted">This engine keeps no document snapshots.</p>
      ) : (
        <>
          <dl className="stats" style={{ marginBottom: 8 }}>
            <div><dt>Snapshots</dt><dd data-stat="snapshot-count">{stats ? stats.count.toLocaleString('en-US') : '–'}</dd></div>
            <div><dt>On disk</dt><dd data-stat="snapshot-bytes">{stats ? formatBytes(stats.bytes) : '–'}</dd></div>
            <div><dt>Cap</dt><dd data-stat="snapshot-cap">{stats ? formatBytes(stats.capBytes) : '–'}</dd></div>
          </dl>
          <div className="row">
            <div className="field" style={{ marginBottom: 0 }}>
              <label>
                <span className="field-label">Snapshot size cap (MiB)</span>
                <input type="number" min={0} step={256} value={Number.isFinite(capMiB) ? capMiB : ''} disabled={!stats || busy !== null} onChange={(e) => editCap(e.target.value === '' ? Number.NaN : Number(e.target.value))} />
              </label>
              {problem && <span className="field-problem" role="alert">{problem}</span>}
            </div>
            <button type="button" onClick={() => void saveCap()} disabled={!stats || busy !== null || problem !== null || unchanged}>{busy === 'saving' ? 'Saving…' : 'Save cap'}</button>
            <button type="button" className="danger" onClick={() => void clear()} disabled={!stats || busy !== null || stats.count === 0}>{busy === 'clearing' ? 'Clearing…' : 'Clear snapshots'}</button>
          </div>
          {stats?.dir && <p className="field-hint">Kept in <code>{stats.dir}</code></p>}
        </>
      )}
      <p role="status" aria-label="Snapshot status" className="status-text">{error ? `Could not update the snapshots: ${error}` : (done ?? '')}</p>
    </section>
  );
}
