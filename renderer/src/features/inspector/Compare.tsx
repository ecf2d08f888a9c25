// One prompt under two policies: load A, greedy N tokens, load B, greedy N tokens, then the
// user's own load again. Shows token agreement, the first divergence and tokens/s side by side.
import { useEngineStore } from '../../engine/store.ts';
import { formatRate } from '../../ui/format.ts';
import { SafeText } from '../../ui/SafeText.tsx';
import { POLICIES, useInspectorStore } from './store.ts';
import type { KvPolicy } from '../../../../app/common/protocol.ts';

export function Compare() {
  const c = useInspectorStore((s) => s.compare);
  const edit = useInspectorStore((s) => s.editCompare);
  const run = useInspectorStore((s) => s.runCompare);
  const stop = useInspectorStore((s) => s.stopCompare);
  const modelLoaded = useEngineStore((s) => s.model !== null);
  const r = c.result;

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
          <input className="grow" aria-label="Compare prompt" value={c.prompt} disabled={c.running} onChange={(e) => edit({ prompt: e.target.value })} style={{ width: '100%' }} />
        </label>
        <label>
          <span className="field-label">Tokens</span>
          <input type="number" aria-label="Compare tokens" min={1} max={4096} value={c.maxTokens} disabled={c.running} onChange={(e) => edit({ maxTokens: Math.max(1, Math.floor(Number(e.target.value)) || 1) })} />
        </label>
        {policySelect('Policy A', c.policyA, (policyA) => edit({ policyA }))}
        {policySelect('Policy B', c.policyB, (policyB) => edit({ policyB }))}
        <button type="button" className="primary" onClick={() => void run()} disabled={c.running || !modelLoaded || !c.prompt}>Compare</button>
        <button type="button" className="danger" onClick={stop} disabled={!c.running}>Stop</button>
      </div>
      <p className="muted">Greedy decoding on both sides; the model is reloaded for each policy and then with your own settings.</p>
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
