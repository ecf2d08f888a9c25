// Summarise: open a .txt/.md/.pdf file or paste text, see its size in tokens against the model's
// context, choose what happens when it does not fit, and stream the summary (Stop, Copy, Save).
import { useEffect, useState } from 'react';
import { useEngineStore } from '../../engine/store.ts';
import { cacheDetails, reuseText } from '../../ui/cache-report.ts';
import { countWords } from '../../ui/format.ts';
import { SafeText } from '../../ui/SafeText.tsx';
import { downloadText, safeFileName } from './download.ts';
import { documentBudget, OVERFLOW_POLICIES } from './plan.ts';
import { useSummariseStore, type Phase } from './store.ts';
import { ACCEPT } from './source.ts';
import './summarise.css';

/** Counting waits this long after the last edit. */
export const COUNT_DEBOUNCE_MS = 250;

const n = (value: number): string => value.toLocaleString('en-US');

export function phaseLabel(phase: Phase): string {
  if (phase.kind === 'whole') return 'Summarising…';
  if (phase.kind === 'part') return `Summarising part ${phase.index} of ${phase.count}…`;
  return phase.groups > 1 ? `Combining summaries: group ${phase.group} of ${phase.groups}…` : `Combining ${phase.summaries} part summaries…`;
}

export function SummariseView() {
  const s = useSummariseStore();
  const model = useEngineStore((e) => e.model);
  const { text, count } = s;
  // The part summaries stay open after the run (they are the result too); the user may fold them,
  // and the next run opens them again.
  const [partsOpen, setPartsOpen] = useState(true);
  useEffect(() => {
    if (s.running) setPartsOpen(true);
  }, [s.running]);

  useEffect(() => {
    const timer = setTimeout(() => void count(), COUNT_DEBOUNCE_MS);
    return () => clearTimeout(timer);
  }, [text, model, count]);

  const counted = s.tokenCount !== null && s.countedText === text;
  const budget = model && s.overhead?.modelPath === model.path ? documentBudget({ contextLength: model.contextLength, overheadTokens: s.overhead.tokens, maxSummaryTokens: s.maxSummaryTokens }) : null;
  const over = counted && budget !== null && (s.tokenCount ?? 0) > budget;

  const save = (): void => downloadText(`${safeFileName(s.sourceName || 'pasted text')}-summary.txt`, s.summary);

  return (
    <section className="view summarise" aria-label="Summarise">
      <h1>Summarise</h1>

      <div className="panel">
        <div className="row">
          <label className="field">
            <span className="field-label">Open a .txt, .md or .pdf file</span>
            <input
              type="file"
              accept={ACCEPT}
              aria-label="Open a file"
              disabled={s.running}
              onChange={(e) => {
                const file = e.target.files?.[0];
                if (file) void s.openFile(file);
                e.target.value = '';
              }}
            />
          </label>
          {s.sourceName && <span className="muted">Opened {s.sourceName}</span>}
          {s.reading && <span className="muted" role="status">{s.reading}</span>}
        </div>
        {s.readError && <p className="error" role="alert">{s.readError}</p>}
        <label className="field">
          <span className="field-label">…or paste the text</span>
          <textarea className="summarise-input" aria-label="Text to summarise" value={text} readOnly={s.running} onChange={(e) => s.setText(e.target.value)} rows={10} spellCheck={false} />
        </label>
        <p className="muted" aria-label="Token count">
          {!text
            ? 'No text yet.'
            : !model
              ? `${n(countWords(text))} words. Load a model on the Models page to count tokens.`
              : s.countError
                ? `Could not count tokens: ${s.countError}`
                : counted
                  ? `${n(s.tokenCount ?? 0)} tokens · model context ${n(model.contextLength)}` + (budget !== null ? ` · room for the document: ${n(Math.max(0, budget))} (instruction and a ${n(s.maxSummaryTokens)}-token summary take the rest)` : '')
                  : 'Counting tokens…'}
        </p>
        {over && budget !== null && (
          <p className="notice" role="status" aria-label="Overflow">
            Over by {n((s.tokenCount ?? 0) - Math.max(0, budget))} tokens. What happens is your choice below.
          </p>
        )}
      </div>

      <div className="panel row">
        <fieldset className="overflow-policy" disabled={s.running}>
          <legend>If the document does not fit</legend>
          {OVERFLOW_POLICIES.map((p) => (
            <label key={p.id} className="field-inline" title={p.hint}>
              <input type="radio" name="overflow" value={p.id} checked={s.policy === p.id} onChange={() => s.setPolicy(p.id)} />
              {p.label} <span className="muted">— {p.hint}</span>
            </label>
          ))}
        </fieldset>
        <label>
          <span className="field-label">Summary length (max tokens)</span>
          <input type="number" min={16} max={4096} value={s.maxSummaryTokens} disabled={s.running} onChange={(e) => s.setMaxSummaryTokens(Math.max(1, Math.floor(Number(e.target.value)) || 1))} />
        </label>
      </div>

      <div className="toolbar">
        <button type="button" className="primary" onClick={() => void s.summarise()} disabled={s.running || !model || !text.trim()}>Summarise</button>
        <button type="button" className="danger" onClick={s.stop} disabled={!s.running}>Stop</button>
        <button type="button" onClick={() => void s.copy()} disabled={!s.summary || s.running}>{s.copied ? 'Copied' : 'Copy'}</button>
        <button type="button" onClick={save} disabled={!s.summary || s.running}>Save</button>
        {s.phase && <span className="muted" role="status" aria-label="Progress">{phaseLabel(s.phase)}</span>}
      </div>

      {s.notice && (
        <p className={s.notice.tone === 'refused' ? 'memory-warning' : 'notice'} role={s.notice.tone === 'refused' ? 'alert' : 'status'} aria-label={s.notice.tone === 'refused' ? 'Refused' : 'Note'}>
          {s.notice.text}
        </p>
      )}
      {s.error && <p className="error" role="alert">{s.error}</p>}

      {s.partSummaries.length > 0 && (
        <details className="panel" open={partsOpen} onToggle={(e) => setPartsOpen(e.currentTarget.open)}>
          <summary>Part summaries ({s.partSummaries.length})</summary>
          {s.partSummaries.map((part, i) => (
            <div key={i}>
              <h3>Part {i + 1}</h3>
              <SafeText text={part} label={`Summary of part ${i + 1}`} />
            </div>
          ))}
        </details>
      )}

      {(s.summary || s.phase?.kind === 'whole' || s.phase?.kind === 'combine') && (
        <section className="suggestion" aria-label="Summary">
          <SafeText text={s.summary} className="suggestion-text" label="Summary text" live />
          {s.metrics && (
            <p className="muted">
              {n(s.metrics.completionTokens)} tokens{s.metrics.tokensPerS !== null ? ` · ${s.metrics.tokensPerS.toFixed(1)} tokens/s` : ''}
              {s.metrics.stopReason ? ` · ${s.metrics.stopReason}` : ''}
              {s.metrics.cache && <span data-stat="cache"> · {[reuseText(s.metrics.cache, s.metrics.promptTokens), ...cacheDetails(s.metrics.cache)].join(' · ')}</span>}
            </p>
          )}
        </section>
      )}
    </section>
  );
}
