// Settings: the cache policy and its knobs, the pool budget, device, threads, context, sampling
// defaults, theme, a remote OpenAI-compatible endpoint, and the engine's document snapshots
// (SnapshotsPanel: figures, size cap, Clear).
import { useEffect, type ReactNode } from 'react';
import type { Settings } from '../../../../app/common/app-api.ts';
import { POLICIES } from '../../engine/policies.ts';
import { SnapshotsPanel } from './SnapshotsPanel.tsx';
import { useSettingsStore, validateSettings } from './store.ts';

// Restated from app/common (the renderer may import only types from there).
const DEVICES: Settings['device'][] = ['auto', 'cpu', 'webgpu', 'cuda', 'dml', 'coreml'];
const KV_TYPES: Settings['kvType'][] = ['fp16', 'fp32'];
const THEMES: Settings['theme'][] = ['system', 'light', 'dark'];
const MIB = 1024 * 1024;

function Field({ label, hint, problem, children }: { label: string; hint?: string; problem?: string | undefined; children: ReactNode }) {
  return (
    <div className="field">
      <label>
        <span className="field-label">{label}</span>
        {children}
      </label>
      {hint && <span className="field-hint">{hint}</span>}
      {problem && <span className="field-problem" role="alert">{problem}</span>}
    </div>
  );
}

function NumberInput({ value, onChange, step, min, max }: { value: number; onChange: (n: number) => void; step?: number; min?: number; max?: number }) {
  return <input type="number" value={Number.isFinite(value) ? value : ''} step={step ?? 'any'} min={min} max={max} onChange={(e) => onChange(e.target.value === '' ? Number.NaN : Number(e.target.value))} />;
}

export function SettingsView() {
  const { draft, saved, status, error, warning, load, edit, editSampling, editRemote, save, revert } = useSettingsStore();

  useEffect(() => {
    if (!saved && status === 'idle') void load();
  }, [saved, status, load]);

  if (!draft) {
    return (
      <section className="view" aria-label="Settings">
        <h1>Settings</h1>
        <p>{status === 'error' ? `Could not read the settings: ${error}` : 'Loading settings…'}</p>
      </section>
    );
  }

  const problems = validateSettings(draft);
  const dirty = JSON.stringify(draft) !== JSON.stringify(saved);
  const s = draft.sampling;

  return (
    <section className="view settings" aria-label="Settings">
      <h1>Settings</h1>
      {warning && <p className="notice">{warning}</p>}
      <form
        noValidate
        onSubmit={(e) => {
          e.preventDefault();
          void save();
        }}
      >
        <fieldset>
          <legend>KV cache policy</legend>
          <Field label="Policy">
            <select value={draft.policy} onChange={(e) => edit({ policy: e.target.value as Settings['policy'] })}>
              {POLICIES.map((p) => <option key={p} value={p}>{p}</option>)}
            </select>
          </Field>
          <Field label="Alpha (α)" hint="Score margin below each head's maximum: 5 for Llama-like, 4 for OPT-like." problem={problems.alpha}>
            <NumberInput value={draft.alpha} step={0.5} min={0} max={50} onChange={(alpha) => edit({ alpha })} />
          </Field>
          <Field label="Partial ratio (r)" hint="Share of each head's columns kept as partial keys." problem={problems.partialRatio}>
            <NumberInput value={draft.partialRatio} step={0.05} min={0} max={1} onChange={(partialRatio) => edit({ partialRatio })} />
          </Field>
          <Field label="Fetch cap" hint="Most tokens fetched per step, as a share of the context." problem={problems.fetchCap}>
            <NumberInput value={draft.fetchCap} step={0.01} min={0} max={1} onChange={(fetchCap) => edit({ fetchCap })} />
          </Field>
          <Field label="Dense layers" hint="Layers at the bottom that attend to everything." problem={problems.denseLayers}>
            <NumberInput value={draft.denseLayers} step={1} min={0} max={256} onChange={(denseLayers) => edit({ denseLayers })} />
          </Field>
          <Field label="Pool budget (MiB)" hint="0 = the full cache at the context length." problem={problems.poolBudgetBytes}>
            <NumberInput value={draft.poolBudgetBytes / MIB} step={64} min={0} onChange={(mib) => edit({ poolBudgetBytes: Number.isFinite(mib) ? Math.round(mib * MIB) : Number.NaN })} />
          </Field>
          <Field label="KV type">
            <select value={draft.kvType} onChange={(e) => edit({ kvType: e.target.value as Settings['kvType'] })}>
              {KV_TYPES.map((t) => <option key={t} value={t}>{t}</option>)}
            </select>
          </Field>
        </fieldset>

        <fieldset>
          <legend>Engine</legend>
          <Field label="Device">
            <select value={draft.device} onChange={(e) => edit({ device: e.target.value as Settings['device'] })}>
              {DEVICES.map((d) => <option key={d} value={d}>{d}</option>)}
            </select>
          </Field>
          <Field label="Threads" hint="0 = all cores." problem={problems.threads}>
            <NumberInput value={draft.threads} step={1} min={0} max={256} onChange={(threads) => edit({ threads })} />
          </Field>
          <Field label="Context length" hint="Tokens; 0 = min(trained context, 4096)." problem={problems.contextLength}>
            <NumberInput value={draft.contextLength} step={256} min={0} onChange={(contextLength) => edit({ contextLength })} />
          </Field>
        </fieldset>

        <fieldset>
          <legend>Sampling defaults</legend>
          <Field label="Temperature" hint="0 = greedy." problem={problems.temperature}>
            <NumberInput value={s.temperature} step={0.05} min={0} max={100} onChange={(temperature) => editSampling({ temperature })} />
          </Field>
          <Field label="Top-k" hint="0 = off." problem={problems.topK}>
            <NumberInput value={s.topK} step={1} min={0} onChange={(topK) => editSampling({ topK })} />
          </Field>
          <Field label="Top-p" hint="1 = off." problem={problems.topP}>
            <NumberInput value={s.topP} step={0.01} min={0} max={1} onChange={(topP) => editSampling({ topP })} />
          </Field>
          <Field label="Min-p" hint="0 = off." problem={problems.minP}>
            <NumberInput value={s.minP} step={0.01} min={0} max={1} onChange={(minP) => editSampling({ minP })} />
          </Field>
          <Field label="Repetition penalty" hint="1 = off." problem={problems.repetitionPenalty}>
            <NumberInput value={s.repetitionPenalty} step={0.05} min={0} max={10} onChange={(repetitionPenalty) => editSampling({ repetitionPenalty })} />
          </Field>
        </fieldset>

        <fieldset>
          <legend>Appearance</legend>
          <Field label="Theme">
            <select value={draft.theme} onChange={(e) => edit({ theme: e.target.value as Settings['theme'] })}>
              {THEMES.map((t) => <option key={t} value={t}>{t}</option>)}
            </select>
          </Field>
        </fieldset>

        <fieldset>
          <legend>Remote endpoint (OpenAI-compatible)</legend>
          <p className="field-hint">Stored for a later step; generation still uses the local engine.</p>
          <label className="field field-inline">
            <input type="checkbox" checked={draft.remote.enabled} onChange={(e) => editRemote({ enabled: e.target.checked })} />
            <span className="field-label">Use the remote endpoint</span>
          </label>
          <Field label="Endpoint URL" problem={problems.remoteUrl}>
            <input type="url" value={draft.remote.baseUrl} placeholder="https://example.com/v1" onChange={(e) => editRemote({ baseUrl: e.target.value })} />
          </Field>
          <Field label="API key">
            <input type="password" autoComplete="off" value={draft.remote.apiKey} onChange={(e) => editRemote({ apiKey: e.target.value })} />
          </Field>
          <Field label="Remote model">
            <input type="text" value={draft.remote.model} onChange={(e) => editRemote({ model: e.target.value })} />
          </Field>
        </fieldset>

        <div className="actions">
          <button type="submit" className="primary" disabled={status === 'saving' || Object.keys(problems).length > 0}>
            {status === 'saving' ? 'Saving…' : 'Save settings'}
          </button>
          <button type="button" onClick={revert} disabled={!dirty}>Revert</button>
          <span role="status" className="status-text">
            {status === 'saved' && !dirty ? 'Saved.' : ''}
            {status === 'error' && error ? `Not saved: ${error}` : ''}
          </span>
        </div>
      </form>
      <SnapshotsPanel />
    </section>
  );
}
