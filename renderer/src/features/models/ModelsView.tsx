// Models: open a model by path (browser mode has no native file dialog), pick from the recent
// path and the scanned library, see the memory estimate, load it (a progress bar while it
// loads), and manage downloads.
import { useEffect } from 'react';
import { useEngineStore } from '../../engine/store.ts';
import { formatBytes, formatMs } from '../../ui/format.ts';
import { useSettingsStore } from '../settings/store.ts';
import { Downloads } from './Downloads.tsx';
import { LoadProgressBar } from './LoadProgressBar.tsx';
import { MemoryBar } from './MemoryBar.tsx';
import { readMemory, reportFacts } from './memory.ts';
import { useModelsStore } from './store.ts';

export function ModelsView() {
  const m = useModelsStore();
  const model = useEngineStore((s) => s.model);
  // Not gated on 'ready': a carrier that never reports 'ready' must not lock the button; a load
  // sent to a stopped engine fails with a message instead.
  const engineUp = useEngineStore((s) => s.status.state !== 'crashed' && s.status.state !== 'restarting');
  const settings = useSettingsStore((s) => s.saved);
  const lastModelPath = settings?.lastModelPath ?? '';
  const { scan, setPath, setContextTokens } = m;

  useEffect(() => {
    void scan();
  }, [scan]);

  // Start from the last model and the configured context the first time settings arrive.
  useEffect(() => {
    const state = useModelsStore.getState();
    if (lastModelPath && !state.path) setPath(lastModelPath);
    if (settings && settings.contextLength > 0 && state.inspected === null) setContextTokens(settings.contextLength);
  }, [lastModelPath, settings, setPath, setContextTokens]);

  const memory = m.inspected && m.inspected.path === m.path ? readMemory(m.inspected.report) : null;
  // The recent model comes from models.scan itself (it reads settings.lastModelPath and the file's
  // size); the store scans again after a load that changed it.
  const entries = m.library;
  // The library's header probe (models.scan) says before any load when Longhand cannot run a model.
  const refused = entries.find((e) => e.path === m.path && e.refusal !== undefined);

  return (
    <section className="view models" aria-label="Models">
      <h1>Models</h1>
      <section className="panel" aria-label="Open a model">
        <form
          className="row"
          noValidate
          onSubmit={(e) => {
            e.preventDefault();
            void m.inspect();
          }}
        >
          <label className="grow">
            <span className="field-label">Model path</span>
            <input type="text" value={m.path} placeholder="/path/to/model.gguf or a safetensors folder" onChange={(e) => m.setPath(e.target.value)} spellCheck={false} />
          </label>
          <label>
            <span className="field-label">Context (tokens)</span>
            <input type="number" min={1} step={256} value={Number.isFinite(m.contextTokens) ? m.contextTokens : ''} onChange={(e) => m.setContextTokens(Number(e.target.value))} />
          </label>
          <button type="submit" disabled={!m.path.trim() || m.inspecting}>{m.inspecting ? 'Inspecting…' : 'Inspect'}</button>
          <button type="button" className="primary" onClick={() => void m.load()} disabled={!m.path.trim() || m.loading || !engineUp || refused !== undefined}>
            {m.loading ? 'Loading…' : 'Load'}
          </button>
        </form>
        {refused && <p className="error" role="alert" aria-label="Unsupported model">Longhand cannot run this model: {refused.refusal}</p>}
        {m.loading && <LoadProgressBar progress={m.loadProgress} />}
        {m.inspectError && <p className="error" role="alert">Inspect failed: {m.inspectError}</p>}
        {m.loadError && <p className="error" role="alert">Load failed: {m.loadError}</p>}
        {memory && <MemoryBar memory={memory} />}
        {m.inspected && m.inspected.path === m.path && (
          <dl className="facts">
            {reportFacts(m.inspected.report).map(([k, v]) => (
              <div key={k}><dt>{k}</dt><dd>{v}</dd></div>
            ))}
          </dl>
        )}
      </section>

      {model && (
        <section className="panel" aria-label="Loaded model">
          <h2>Loaded</h2>
          <dl className="facts">
            <div><dt>Path</dt><dd>{model.path}</dd></div>
            <div><dt>Architecture</dt><dd>{model.architecture} ({model.family}, {model.format})</dd></div>
            <div><dt>Layers · heads · KV heads · head dim</dt><dd>{model.layers} · {model.heads} · {model.kvHeads} · {model.headDim}</dd></div>
            <div><dt>Vocabulary</dt><dd>{model.vocabSize.toLocaleString('en-US')}</dd></div>
            <div><dt>Context</dt><dd>{model.contextLength.toLocaleString('en-US')} of {model.trainedContext.toLocaleString('en-US')} trained</dd></div>
            <div><dt>Device · threads · KV</dt><dd>{model.device} · {model.threads} · {model.kvType}</dd></div>
            {model.adapter && (
              <div>
                <dt>GPU adapter</dt>
                <dd>
                  {model.adapter.name} ({model.adapter.vendor}; {model.adapter.software === null ? 'software or not unknown' : model.adapter.software ? 'software' : 'hardware'}; float16 {model.adapter.float16 ? 'yes' : 'no'})
                  {model.adapter.note ? ` — ${model.adapter.note}` : ''}
                </dd>
              </div>
            )}
            <div><dt>Chat template</dt><dd>{model.chatTemplate ? 'yes' : 'no'}</dd></div>
            <div><dt>Load time</dt><dd>{formatMs(model.loadMs)}</dd></div>
          </dl>
        </section>
      )}

      <section className="panel" aria-label="Library">
        <h2>Library</h2>
        <button type="button" onClick={() => void m.scan()} disabled={m.scanning}>{m.scanning ? 'Scanning…' : 'Rescan'}</button>
        {m.scanError && <p className="error" role="alert">{m.scanError}</p>}
        {entries.length === 0 ? (
          <p className="muted">No models found yet: type a path above or download one.</p>
        ) : (
          <table className="library">
            <thead><tr><th>Name</th><th>Type</th><th>Architecture</th><th>Size</th><th>Source</th></tr></thead>
            <tbody>
              {entries.map((e) => (
                <tr key={`${e.source}:${e.path}`} className={[e.path === m.path ? 'selected' : '', e.refusal !== undefined ? 'refused' : ''].join(' ').trim() || undefined}>
                  <td>
                    <button type="button" className="link" title={e.path} onClick={() => m.setPath(e.path)}>{e.name}</button>
                    {e.refusal !== undefined && <p className="error refusal" role="note">Not supported: {e.refusal}</p>}
                  </td>
                  <td>{e.format}</td>
                  <td>{e.architecture ?? ''}</td>
                  <td>{formatBytes(e.bytes)}</td>
                  <td>{e.source}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      <Downloads />
    </section>
  );
}
