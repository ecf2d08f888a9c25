// The cache inspector: live figures of every generation in this window (whichever view started
// it), from the engine's step metrics — sparklines, a heatmap of the fetched positions, where
// the memory goes, a per-layer table — and, per recorded run (a generation, live or loaded from
// an export), the token map over its text, recall against the oracle, memory over time, and the
// A/B of two policies on the same prompt, and for a mixture-of-experts model the experts each token was routed to; JSON lines export and load, PNG of the view. For a
// remote endpoint (policy 'remote') there is no local cache to look into: the view shows what
// the server reports instead (prefix-cache hit rate, KV-cache usage) and hides the heatmap,
// memory stack and layer table, which would be empty.
import { useCallback, useEffect, useRef, useState } from 'react';
import type { StepMetrics } from '../../../../app/common/protocol.ts';
import { formatBytes, formatRate } from '../../ui/format.ts';
import { downloadText } from '../summarise/download.ts';
import { AbView } from './AbView.tsx';
import { Compare } from './Compare.tsx';
import { compareTokens, toCsv, toJsonl, type HeatMode } from './data.ts';
import { MemoryChart } from './MemoryChart.tsx';
import { viewPng } from './png.ts';
import { RecallChart } from './RecallChart.tsx';
import { RoutingView } from './RoutingView.tsx';
import { runsToJsonl, type Run } from './runs.ts';
import { TokenMap } from './TokenMap.tsx';
import { Heatmap } from './Heatmap.tsx';
import { LayerTable } from './LayerTable.tsx';
import { MemoryStack } from './MemoryStack.tsx';
import { Sparkline } from './Sparkline.tsx';
import { currentRun, runById, runs, snapshots, SNAPSHOT_CAPACITY, useInspectorStore } from './store.ts';
import './inspector.css';

/** Samples the sparklines show. */
export const SPARK_SAMPLES = 240;

const pct = (v: number): string => `${(v * 100).toFixed(1)}%`;

/** A remote's prefix-cache hit rate: what it reported, else the reuse hit rate it was sent as. */
const prefixHitRate = (m: StepMetrics): number | null => m.remote?.prefixCacheHitRate ?? m.reuseHitRate;

/** A streaming run's views are recomputed at most this often. */
export const RUN_VIEW_MS = 500;

/** `value`, changing at most once per `ms` (the latest value always arrives). */
function useThrottled<T>(value: T, ms: number): T {
  const [shown, setShown] = useState(value);
  const last = useRef(0);
  useEffect(() => {
    const wait = Math.max(0, last.current + ms - Date.now());
    const id = setTimeout(() => {
      last.current = Date.now();
      setShown(value);
    }, wait);
    return () => clearTimeout(id);
  }, [value, ms]);
  return shown;
}

export const TABS = ['Live', 'Token map', 'Recall', 'Memory', 'Routing', 'A/B'] as const;
export type Tab = (typeof TABS)[number];

const runLabel = (r: Run): string => `${r.policy || '?'} · ${r.promptIds.length.toLocaleString('en-US')} prompt + ${r.tokens.length} tokens · ${r.samples.length} samples${r.loaded ? ' (file)' : ''} · ${r.requestId.slice(-6)}`;

function exportName(ext: string): string {
  return `longhand-metrics-${new Date().toISOString().replace(/[:.]/g, '-')}.${ext}`;
}

export function InspectorView() {
  const version = useInspectorStore((s) => s.version);
  const latest = useInspectorStore((s) => s.latest);
  const running = useInspectorStore((s) => s.running);
  const clear = useInspectorStore((s) => s.clear);
  const runsVersion = useInspectorStore((s) => s.runsVersion);
  // the run views recompute at most every RUN_VIEW_MS while a run streams (their work grows with the run; the engine shares the CPU)
  const rev = useThrottled(runsVersion, RUN_VIEW_MS);
  const selectedRun = useInspectorStore((s) => s.selectedRun);
  const selectRun = useInspectorStore((s) => s.selectRun);
  const loadRuns = useInspectorStore((s) => s.loadRuns);
  const loadError = useInspectorStore((s) => s.loadError);
  const compareResult = useInspectorStore((s) => s.compare.result);
  const [tab, setTab] = useState<Tab>('Live');
  const [abChoice, setAbChoice] = useState<{ a: string | null; b: string | null }>({ a: null, b: null });
  const [pngError, setPngError] = useState<string | null>(null);
  const panel = useRef<HTMLDivElement>(null);
  const file = useRef<HTMLInputElement>(null);
  const allRuns = runs();
  const run = currentRun(selectedRun);
  // A/B: the comparison's two runs, else the two newest (a loaded file's), unless chosen
  const abA = runById(abChoice.a) ?? runById(compareResult?.a.requestId) ?? allRuns.at(-2);
  const abB = runById(abChoice.b) ?? runById(compareResult?.b.requestId) ?? allRuns.at(-1);
  const [layerChoice, setLayerChoice] = useState<'all' | number>('all');
  const samples = useCallback(() => snapshots(), []);

  const recent = snapshots(SPARK_SAMPLES);
  const count = snapshots().length;
  const m = latest?.metrics;
  const layerCount = m?.layers.length ?? 0;
  const layer = layerChoice !== 'all' && layerChoice < layerCount ? layerChoice : 'all';
  const mode: HeatMode = layer === 'all' || !m ? { kind: 'layers', layers: Math.max(1, layerCount) } : { kind: 'positions', layer, contextLength: m.contextLength };
  const hasPositions = m?.layers.some((l) => l.positions !== undefined) ?? false;

  return (
    <section className="view inspector" aria-label="Inspector">
      <h1>Cache inspector</h1>
      <div className="row">
        <span role="status" aria-label="Inspector state" className={running.length > 0 ? undefined : 'muted'}>
          {running.length > 0 ? `Live: ${running.length} generation${running.length > 1 ? 's' : ''} running` : count > 0 ? 'Idle: showing the last samples' : 'No metrics yet'}
          {count > 0 && ` · ${count} of the last ${SNAPSHOT_CAPACITY} samples kept`}
        </span>
        <span className="grow" />
        <button type="button" onClick={() => downloadText(exportName('csv'), toCsv(snapshots()), 'text/csv;charset=utf-8')} disabled={count === 0}>Export CSV</button>
        <button type="button" onClick={() => downloadText(exportName('jsonl'), allRuns.length > 0 ? runsToJsonl(allRuns) : toJsonl(snapshots()), 'application/x-ndjson')} disabled={count === 0 && allRuns.length === 0}>Export JSON lines</button>
        <button type="button" onClick={() => file.current?.click()}>Load JSON lines</button>
        <input
          ref={file}
          type="file"
          accept=".jsonl,.ndjson,application/x-ndjson,application/json"
          aria-label="JSON lines file"
          hidden
          onChange={(e) => {
            const f = e.target.files?.[0];
            e.target.value = '';
            if (f) void f.text().then((text) => loadRuns(text));
          }}
        />
        <button
          type="button"
          onClick={() => {
            setPngError(null);
            viewPng(panel.current, `Longhand inspector · ${tab}${run ? ` · ${run.policy}` : ''}`)
              .then((blob) => downloadBlob(exportName('png'), blob))
              .catch((e: unknown) => setPngError(e instanceof Error ? e.message : String(e)));
          }}
        >
          Save PNG
        </button>
        <button type="button" onClick={clear} disabled={count === 0 && allRuns.length === 0}>Clear</button>
      </div>
      {loadError && <p className="error" role="alert" aria-label="Load error">Could not load the file: {loadError}</p>}
      {pngError && <p className="error" role="alert">Could not save the PNG: {pngError}</p>}
      <div className="row tabs" role="tablist" aria-label="Inspector views">
        {TABS.map((t) => (
          <button key={t} type="button" role="tab" aria-selected={tab === t} className={tab === t ? 'tab active' : 'tab'} onClick={() => setTab(t)}>
            {t}
          </button>
        ))}
        <span className="grow" />
        {tab !== 'Live' && tab !== 'A/B' && allRuns.length > 0 && (
          <label>
            <span className="field-label">Run</span>
            <select aria-label="Run" value={run?.requestId ?? ''} onChange={(e) => selectRun(e.target.value || null)}>
              {allRuns.map((r) => <option key={r.requestId} value={r.requestId}>{runLabel(r)}</option>)}
            </select>
          </label>
        )}
      </div>
      <div ref={panel} role="tabpanel" aria-label={`${tab} view`}>
      {tab !== 'Live' && (
        <div className="panel">
          {tab === 'A/B' ? (
            <>
              <Compare />
              {allRuns.length >= 2 && (
                <div className="row">
                  {(['a', 'b'] as const).map((side) => (
                    <label key={side}>
                      <span className="field-label">Run {side.toUpperCase()}</span>
                      <select aria-label={`A/B run ${side.toUpperCase()}`} value={(side === 'a' ? abA : abB)?.requestId ?? ''} onChange={(e) => setAbChoice((c) => ({ ...c, [side]: e.target.value }))}>
                        {allRuns.map((r) => <option key={r.requestId} value={r.requestId}>{runLabel(r)}</option>)}
                      </select>
                    </label>
                  ))}
                </div>
              )}
              {abA && abB && abA !== abB ? <AbView a={abA} b={abB} rev={rev} comparison={compareTokens(abA.tokens.map((t) => t.id), abB.tokens.map((t) => t.id))} /> : <p className="muted">Run a comparison (or load a file with two runs) to see the A/B view.</p>}
            </>
          ) : !run ? (
            <p className="placeholder">No run recorded yet: start a generation, or load an exported JSON lines file.</p>
          ) : tab === 'Token map' ? (
            <TokenMap key={run.requestId} run={run} rev={rev} />
          ) : tab === 'Recall' ? (
            <RecallChart key={run.requestId} run={run} rev={rev} />
          ) : tab === 'Routing' ? (
            run.routing ? <RoutingView key={run.requestId} run={run} routing={run.routing} rev={rev} /> : <p className="placeholder">This run has no routing: only mixture-of-experts models (Qwen3-MoE) route tokens to experts.</p>
          ) : (
            <MemoryChart key={run.requestId} run={run} rev={rev} />
          )}
        </div>
      )}
      {tab === 'Live' && (<>

      {m?.policy === 'remote' ? (
        <div className="panel">
          <p className="muted">
            Policy <strong>remote</strong> (the remote endpoint in Settings; no local cache to inspect) · step {m.step.toLocaleString('en-US')} · context {m.contextTokens.toLocaleString('en-US')} of {m.contextLength.toLocaleString('en-US')}
          </p>
          <div className="sparks">
            <Sparkline label="Tokens/s" values={recent.map((s) => s.metrics.tokensPerS)} format={formatRate} />
            <Sparkline label="Prefix-cache hit rate" values={recent.map((s) => prefixHitRate(s.metrics))} format={pct} max={1} />
            <Sparkline label="KV-cache usage" values={recent.map((s) => s.metrics.remote?.kvCacheUsage ?? null)} format={pct} max={1} />
          </div>
          {prefixHitRate(m) === null && (m.remote?.kvCacheUsage ?? null) === null && <p className="muted">The remote server reports no cache figures (vLLM and llama.cpp with --metrics do, on /metrics).</p>}
        </div>
      ) : !m ? (
        <p className="placeholder">Start a generation (Writer, Summarise, or Compare below) and the engine's per-step cache figures appear here, up to 10 times a second.</p>
      ) : (
        <>
          <div className="panel">
            <p className="muted">
              Policy <strong>{m.policy}</strong> · step {m.step.toLocaleString('en-US')} · context {m.contextTokens.toLocaleString('en-US')} of {m.contextLength.toLocaleString('en-US')} · {m.evictions.toLocaleString('en-US')} evictions ·
              time per step: dense {m.timing.denseMs.toFixed(1)} ms, attention {m.timing.attentionMs.toFixed(1)}, speculation {m.timing.speculationMs.toFixed(1)}, gather {m.timing.gatherMs.toFixed(1)}, other {m.timing.otherMs.toFixed(1)}
            </p>
            <div className="sparks">
              <Sparkline label="Tokens/s" values={recent.map((s) => s.metrics.tokensPerS)} format={formatRate} />
              <Sparkline label="Fetch ratio" values={recent.map((s) => s.metrics.fetchRatio)} format={pct} max={1} />
              <Sparkline label="Attention recall" values={recent.map((s) => s.metrics.recall)} format={pct} max={1} />
              <Sparkline label="Reuse hit rate" values={recent.map((s) => s.metrics.reuseHitRate)} format={pct} max={1} />
              <Sparkline label="Bytes moved per token" values={recent.map((s) => s.metrics.bytesMovedPerToken)} format={formatBytes} />
            </div>
          </div>

          <div className="panel">
            <div className="row">
              <h2 className="grow">Fetched positions</h2>
              <label>
                <span className="field-label">Show</span>
                <select aria-label="Heatmap layer" value={String(layer)} onChange={(e) => setLayerChoice(e.target.value === 'all' ? 'all' : Number(e.target.value))}>
                  <option value="all">All layers (fetch ratio)</option>
                  {m.layers.map((l) => <option key={l.layer} value={l.layer}>Layer {l.layer}</option>)}
                </select>
              </label>
            </div>
            <Heatmap mode={mode} samples={samples} version={version} />
            <div className="heat-axis muted">
              <span>{mode.kind === 'layers' ? 'rows: layer 0 (top) to last; brightness: selected ÷ candidates' : `rows: positions 0 (top) to ${m.contextLength.toLocaleString('en-US')} in ${Math.min(512, m.contextLength)} buckets; brightness: share selected${hasPositions ? '' : ' (no positions sent: selected ÷ candidates)'}`}</span>
              <span>newest sample →</span>
            </div>
          </div>

          <div className="panel">
            <h2>Memory</h2>
            <MemoryStack memory={m.memory} />
          </div>

          <div className="panel">
            <h2>Layers (latest sample)</h2>
            <LayerTable metrics={m} />
          </div>
        </>
      )}
      <Compare />
      </>)}
      </div>
    </section>
  );
}

function downloadBlob(filename: string, blob: Blob): void {
  const url = URL.createObjectURL(blob);
  const link = document.createElement('a');
  link.href = url;
  link.download = filename;
  link.rel = 'noopener';
  link.style.display = 'none';
  document.body.append(link);
  try {
    link.click();
  } finally {
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }
}
