// Downloads: start one by URL, watch progress, pause and resume (all through downloads.*).
import { useEffect, useState } from 'react';
import { formatBytes } from '../../ui/format.ts';
import { useModelsStore } from './store.ts';

const POLL_MS = 1000;

export function Downloads() {
  const { downloads, downloadError, refreshDownloads, startDownload, pauseDownload, resumeDownload } = useModelsStore();
  const [url, setUrl] = useState('');
  const running = downloads.some((d) => d.status === 'running');

  useEffect(() => {
    void refreshDownloads();
  }, [refreshDownloads]);

  useEffect(() => {
    if (!running) return;
    const timer = setInterval(() => void refreshDownloads(), POLL_MS);
    return () => clearInterval(timer);
  }, [running, refreshDownloads]);

  return (
    <section className="panel" aria-label="Downloads">
      <h2>Downloads</h2>
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          if (url.trim()) void startDownload(url.trim()).then(() => setUrl(''));
        }}
      >
        <input type="url" className="grow" aria-label="Download URL" placeholder="https://huggingface.co/…/model.gguf" value={url} onChange={(e) => setUrl(e.target.value)} />
        <button type="submit" disabled={!url.trim()}>Download</button>
      </form>
      {downloadError && <p className="error" role="alert">{downloadError}</p>}
      {downloads.length === 0 ? (
        <p className="muted">No downloads.</p>
      ) : (
        <ul className="downloads">
          {downloads.map((d) => {
            const fraction = d.totalBytes ? d.receivedBytes / d.totalBytes : null;
            return (
              <li key={d.id}>
                <div className="download-name" title={d.url}>{d.path || d.url}</div>
                <progress max={1} value={fraction ?? undefined} aria-label={`Progress of ${d.path || d.url}`} />
                <span className="muted">
                  {formatBytes(d.receivedBytes)}
                  {d.totalBytes ? ` of ${formatBytes(d.totalBytes)} (${Math.floor((fraction ?? 0) * 100)}%)` : ''} · {d.status}
                  {d.error ? ` · ${d.error}` : ''}
                </span>
                {d.status === 'running' && <button type="button" onClick={() => void pauseDownload(d.id)}>Pause</button>}
                {(d.status === 'paused' || d.status === 'failed') && <button type="button" onClick={() => void resumeDownload(d.id)}>Resume</button>}
              </li>
            );
          })}
        </ul>
      )}
    </section>
  );
}
