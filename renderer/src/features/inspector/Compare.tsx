// One prompt under two policies on the loaded model, each chosen for its generation (no reload):
// greedy N tokens under A, then under B on A's prompt ids, so B starts from the prefix A left in
// the cache (when the switch keeps the cache). Shows token agreement, the first divergence, and
// tokens/s, TTFT and the prompt tokens each side reused, side by side.
import { useEngineStore } from '../../engine/store.ts';
import { cacheDetails, reuseText } from '../../ui/cache-report.ts';
import { formatMs, formatRate } from '../../ui/format.ts';
import { SafeText } from '../../ui/SafeText.tsx';
import { tailForContext } from '../writer/prompts.ts';
import { useWriterStore } from '../writer/store.ts';
import { POLICIES, useInspectorStore } from './store.ts';
import type { KvPolicy } from '../../../../app/common/protocol.ts';

export function Compare() {
  const c = useInspectorStore((s) => s.compare);
  const edit = useInspectorStore((s) => s.editCompare);
  const run = useInspectorStore((s) => s.runCompare);
  const stop = useInspectorStore((s) => s.stopCompare);
  const modelLoaded = useEngineStore((s) => s.model !== null);
  const contextLength = useEngineStore((s) => s.model?.contextLength ?? null);
  const draft = useWriterStore((s) => (s.doc ? s.doc.text.slice(0, s.selection.end) : ''));
  const r = c.result;
  const cacheCell = (side: NonNullable<typeof r>['a']) =>
    side.cache ? [reuseText(side.cache, side.promptTokens), ...cacheDetails(side.cache)].join(' · ') : '–';

  const policySelect = (label: string, value: KvPolicy, onChange: (p: KvPolicy) => void) => (
    <label>
      <span className="field-label">{label}</span>
      <select aria-label={label} value={value} disabled={c.running} onChange={(e) => onChange(e.target.value as KvPolicy)}>
        {POLICIES.map((p) => <option key={p} value={p}>{p}</option>)}
      </select>
    </label>
  );

  return (
    <section className="panel" aria-label="Compare policies">
      <h2>Compare two policies</h2>
      <div className="row">
        <label className="grow">
          <span className="field-label">Prompt</span>
          {/* A textarea, not an input: a draft's line breaks are part of its tokens (and of the cached prefix). */}
          <textarea className="grow" aria-label="Compare prompt" rows={2} value={c.prompt} disabled={c.running} onChange={(e) => edit({ prompt: e.target.value })} style={{ width: '100%', resize: 'vertical' }} />
        </label>
        <label>
          <span className="field-label">Tokens</span>
          <input type="number" aria-label="Compare tokens" min={1} max={4096} value={c.maxTokens} disabled={c.running} onChange={(e) => edit({ maxTokens: Math.max(1, Math.floor(Number(e.target.value)) || 1) })} />
        </label>
        {policySelect('Policy A', c.policyA, (policyA) => edit({ policyA }))}
        {policySelect('Policy B', c.policyB, (policyB) => edit({ policyB }))}
        <button type="button" onClick={() => edit({ prompt: tailForContext(draft, contextLength, 2 * c.maxTokens) })} disabled={c.running || !draft.trim()} title="The Writer's text before the cursor: the prompt its Continue sends, whose prefix the engine may already hold">
          Use the Writer&apos;s draft
        </button>
        <label title="Measure a sample every ceil(tokens/150) steps whatever it costs; by default the engine keeps the inspector's measurements under 5% of decode time, which on a small fast model means fewer samples">
          <input type="checkbox" aria-label="Dense measurements" checked={c.dense} disabled={c.running} onChange={(e) => edit({ dense: e.target.checked })} /> Dense measurements (slower)
        </label>
        <button type="button" className="primary" onClick={() => void run()} disabled={c.running || !modelLoaded || !c.prompt}>Compare</button>
        <button type="button" className="danger" onClick={stop} disabled={!c.running}>Stop</button>
      </div>
      <p className="muted">Greedy decoding on both sides, on the loaded model with the policy chosen per run; B starts from A&apos;s prompt, so it reuses the prefix A left in the cache when the switch keeps it.</p>
      {c.phase && <p className="muted" role="status" aria-label="Compare progress">{c.phase}</p>}
      {c.error && <p className="error" role="alert">{c.error}</p>}
      {r && (
        <div aria-label="Compare result">
          <dl className="stats">
            <div><dt>Token agreement</dt><dd data-stat="agreement">{(r.comparison.agreement * 100).toFixed(1)}% ({r.comparison.matching} of {Math.max(r.comparison.lengthA, r.comparison.lengthB)})</dd></div>
            <div><dt>First divergence</dt><dd data-stat="divergence">{r.comparison.firstDivergence === null ? 'none' : `token ${r.comparison.firstDivergence}`}</dd></div>
          </dl>
          <table className="library">
            <thead><tr><th /><th>{r.a.policy} (A)</th><th>{r.b.policy} (B)</th></tr></thead>
            <tbody>
              <tr><th>Tokens/s</th><td data-stat="rate-a">{formatRate(r.a.tokensPerS)}</td><td data-stat="rate-b">{formatRate(r.b.tokensPerS)}</td></tr>
              <tr><th>TTFT</th><td data-stat="ttft-a">{formatMs(r.a.ttftMs)}</td><td data-stat="ttft-b">{formatMs(r.b.ttftMs)}</td></tr>
              <tr><th>Prompt cache</th><td data-stat="reuse-a">{cacheCell(r.a)}</td><td data-stat="reuse-b">{cacheCell(r.b)}</td></tr>
              <tr><th>Tokens</th><td>{r.a.tokens.length}</td><td>{r.b.tokens.length}</td></tr>
              <tr>
                <th>Text</th>
                <td><SafeText text={r.a.text} label={`Text under ${r.a.policy} (A)`} /></td>
                <td><SafeText text={r.b.text} label={`Text under ${r.b.policy} (B)`} /></td>
              </tr>
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
