// Writer: documents, a plain textarea (the browser's own undo and selection), word count,
// autosave, and the generation actions. Generated text appears as a separate suggestion until
// the user accepts or rejects it; the editor is read-only while one is pending.
import { useEffect, useLayoutEffect, useRef } from 'react';
import { useEngineStore } from '../../engine/store.ts';
import { useSettingsStore } from '../settings/store.ts';
import { countWords } from '../../ui/format.ts';
import { SafeText } from '../../ui/SafeText.tsx';
import { GenerationStats } from './GenerationStats.tsx';
import { useWriterStore } from './store.ts';

const MODE_LABELS = { continue: 'Continuation', rewrite: 'Rewrite', instruction: 'From instruction', longform: 'Long-form' } as const;

export function WriterView() {
  const w = useWriterStore();
  // The engine slice forgets the model when the engine crashes or restarts.
  const modelLoaded = useEngineStore((s) => s.model !== null);
  // With a remote endpoint on (Settings), generations go there and no local model is needed.
  const remote = useSettingsStore((s) => s.saved?.remote.enabled === true && s.saved.remote.baseUrl !== '');
  const editor = useRef<HTMLTextAreaElement>(null);
  const { init, doc, caretRequest, clearCaretRequest } = w;

  useEffect(() => {
    if (!useWriterStore.getState().doc) void init();
  }, [init]);

  // Save what is pending when the window goes away.
  useEffect(() => {
    const flush = (): void => void useWriterStore.getState().flushSave();
    window.addEventListener('beforeunload', flush);
    return () => {
      window.removeEventListener('beforeunload', flush);
      flush();
    };
  }, []);

  useLayoutEffect(() => {
    if (caretRequest === null || !editor.current) return;
    editor.current.focus();
    editor.current.setSelectionRange(caretRequest, caretRequest);
    clearCaretRequest();
  }, [caretRequest, clearCaretRequest]);

  if (!doc) return <section className="view" aria-label="Writer"><p>{w.error ?? 'Opening your documents…'}</p></section>;

  const streaming = w.suggestion?.streaming ?? false;
  const pending = w.suggestion !== null;
  const hasSelection = w.selection.end > w.selection.start;
  const hasTextBefore = doc.text.slice(0, w.selection.end).trim().length > 0;
  const canGenerate = (modelLoaded || remote) && !pending;
  const syncSelection = (): void => {
    const el = editor.current;
    if (el) w.setSelection(el.selectionStart, el.selectionEnd);
  };

  return (
    <section className="view writer" aria-label="Writer">
      <aside className="doc-list" aria-label="Documents">
        <button type="button" onClick={() => void w.newDocument()} disabled={streaming}>New document</button>
        <ul>
          {w.documents.map((d) => (
            <li key={d.id} className={d.id === doc.id ? 'selected' : undefined}>
              <button type="button" className="link" onClick={() => void w.openDocument(d.id)} disabled={streaming}>
                {d.title || 'Untitled'} <span className="muted">{d.words} words</span>
              </button>
            </li>
          ))}
        </ul>
      </aside>

      <div className="editor-column">
        <div className="row">
          <input className="title-input grow" aria-label="Title" value={doc.title} onChange={(e) => w.setTitle(e.target.value)} />
          <span className="muted" role="status" aria-label="Save state">
            {w.saving ? 'Saving…' : w.saveError ? `Not saved (${w.saveError}); retrying` : w.dirty ? 'Edited' : 'Saved'}
          </span>
        </div>
        {w.error && <p className="error" role="alert">{w.error}</p>}
        <textarea
          ref={editor}
          className="editor"
          aria-label="Document text"
          value={doc.text}
          readOnly={pending}
          spellCheck
          onChange={(e) => {
            w.setText(e.target.value);
            w.setSelection(e.target.selectionStart, e.target.selectionEnd);
          }}
          onSelect={syncSelection}
          onKeyUp={syncSelection}
          onMouseUp={syncSelection}
        />
        <div className="row muted">
          <span aria-label="Word count">{countWords(doc.text).toLocaleString('en-US')} words</span>
          {hasSelection && <span>· {countWords(doc.text.slice(w.selection.start, w.selection.end))} selected</span>}
          {pending && <span>· accept or reject the suggestion to keep editing</span>}
        </div>

        <div className="toolbar" aria-label="Generate">
          <button type="button" onClick={w.continueWriting} disabled={!canGenerate || !hasTextBefore} title="Continue from the text before the cursor">Continue writing</button>
          <button type="button" onClick={w.rewriteSelection} disabled={!canGenerate || !hasSelection}>Rewrite selection</button>
          <label>
            <span className="field-label">Max tokens</span>
            <input type="number" min={1} max={8192} value={w.maxTokens} onChange={(e) => w.setMaxTokens(Math.max(1, Number(e.target.value) || 1))} />
          </label>
          <form
            className="row grow"
            onSubmit={(e) => {
              e.preventDefault();
              w.writeFromInstruction();
            }}
          >
            <input className="grow" aria-label="Instruction" placeholder="Write from an instruction, e.g. “a paragraph describing the harbour at dawn”" value={w.instruction} onChange={(e) => w.setInstruction(e.target.value)} />
            <button type="submit" disabled={!canGenerate || !w.instruction.trim()}>Write</button>
          </form>
          <label>
            <span className="field-label">Target words</span>
            <input type="number" min={1} value={w.targetWords} onChange={(e) => w.setTargetWords(Math.max(1, Number(e.target.value) || 1))} />
          </label>
          <button type="button" onClick={w.longForm} disabled={!canGenerate || !hasTextBefore}>Long-form</button>
          <button type="button" className="danger" onClick={w.stop} disabled={!streaming}>Stop</button>
        </div>
        {!modelLoaded && !remote && <p className="muted">Load a model on the Models page to generate, or turn on a remote endpoint in Settings.</p>}
        {remote && <p className="muted">Generating with the remote endpoint from Settings.</p>}

        {w.suggestion && (
          <section className="suggestion" aria-label="Suggestion">
            <header className="row">
              <strong>{MODE_LABELS[w.suggestion.mode]}</strong>
              <span className="muted">{streaming ? 'writing…' : `${countWords(w.suggestion.text)} words`}</span>
              <span className="grow" />
              <button type="button" className="primary" onClick={w.accept} disabled={streaming || w.suggestion.text.length === 0}>Accept</button>
              <button type="button" onClick={w.reject} disabled={streaming}>Reject</button>
            </header>
            <SafeText text={w.suggestion.text} className="suggestion-text" label="Suggested text" live />
            {w.suggestion.error && <p className="error" role="alert">{w.suggestion.error}</p>}
          </section>
        )}
        {w.metrics && <GenerationStats metrics={w.metrics} steps={w.suggestion?.mode === 'longform' ? w.suggestion.steps : undefined} />}
      </div>
    </section>
  );
}
