// Writer slice: the open document (autosaved through documents.save, debounced), the cursor,
// and the one generation at a time whose text streams into a SUGGESTION that the user accepts
// (inserted at the cursor, or replacing the selection for a rewrite) or rejects.
import { create } from 'zustand';
import type { Document, DocumentSummary } from '../../../../app/common/app-api.ts';
import type { Prompt } from '../../../../app/common/protocol.ts';
import type { Generation, GenerationMetrics } from '../../engine/client.ts';
import { useEngineStore } from '../../engine/store.ts';
import { services } from '../../services.ts';
import { countWords } from '../../ui/format.ts';
import { useSettingsStore } from '../settings/store.ts';
import { continuePrompt, instructionPrompt, rewritePrompt } from './prompts.ts';

export const AUTOSAVE_MS = 1000;
/** After a failed save, try again this much later (the draft stays in memory meanwhile). */
export const AUTOSAVE_RETRY_MS = 5000;

export type GenerationMode = 'continue' | 'rewrite' | 'instruction' | 'longform';

export interface Suggestion {
  mode: GenerationMode;
  text: string;
  /** What accepting replaces: an empty range inserts at the cursor. */
  start: number;
  end: number;
  streaming: boolean;
  error: string | null;
  /** Long-form: steps run so far. */
  steps: number;
}

export interface WriterState {
  documents: DocumentSummary[];
  doc: Document | null;
  dirty: boolean;
  saving: boolean;
  saveError: string | null;
  selection: { start: number; end: number };
  /** Where the editor should put the caret next (after an accept); the editor clears it. */
  caretRequest: number | null;
  suggestion: Suggestion | null;
  metrics: GenerationMetrics | null;
  maxTokens: number;
  targetWords: number;
  instruction: string;
  error: string | null;
  init(): Promise<void>;
  openDocument(id: string): Promise<void>;
  newDocument(): Promise<void>;
  setText(text: string): void;
  setTitle(title: string): void;
  setSelection(start: number, end: number): void;
  clearCaretRequest(): void;
  setMaxTokens(n: number): void;
  setTargetWords(n: number): void;
  setInstruction(text: string): void;
  continueWriting(): void;
  rewriteSelection(): void;
  writeFromInstruction(): void;
  longForm(): void;
  stop(): void;
  accept(): void;
  reject(): void;
  flushSave(): Promise<void>;
}

let saveTimer: ReturnType<typeof setTimeout> | undefined;
let active: Generation | null = null;
let stopRequested = false;

const initial = {
  documents: [] as DocumentSummary[],
  doc: null,
  dirty: false,
  saving: false,
  saveError: null,
  selection: { start: 0, end: 0 },
  caretRequest: null,
  suggestion: null,
  metrics: null,
  maxTokens: 256,
  targetWords: 1000,
  instruction: '',
  error: null,
};

export function newDocumentId(now = Date.now()): string {
  return `d-${now.toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

function blankDocument(): Document {
  return { id: newDocumentId(), title: 'Untitled', text: '', updatedAt: Date.now() };
}

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export const useWriterStore = create<WriterState>()((set, get) => {
  const scheduleSave = (delay = AUTOSAVE_MS): void => {
    if (saveTimer !== undefined) clearTimeout(saveTimer);
    saveTimer = setTimeout(() => {
      saveTimer = undefined;
      void get().flushSave();
    }, delay);
  };

  const sampling = () => useSettingsStore.getState().saved?.sampling;

  /**
   * Runs one generation into the suggestion; resolves with its result, or null when it failed.
   * `document`: the id of the document whose text the prompt is (continue, long-form), so the
   * engine reuses that document's cached prefix (restoring its snapshot if it holds another
   * sequence) and saves the cache for it afterwards. Rewrites and instructions wrap other text
   * around the draft: saving their cache would replace the document's useful snapshot.
   */
  const run = async (prompt: Prompt, maxTokens: number, document?: string) => {
    const sample = sampling();
    const params = { maxTokens, ...(sample ? { sampling: sample } : {}), ...(document ? { document } : {}) };
    const generation = services().engine.generate(prompt, params, {
      onText: (text) => set((s) => (s.suggestion ? { suggestion: { ...s.suggestion, text: s.suggestion.text + text } } : {})),
      onMetrics: (metrics) => set({ metrics }),
    });
    active = generation;
    try {
      return await generation.result;
    } catch (e) {
      set((s) => ({ suggestion: s.suggestion ? { ...s.suggestion, error: message(e) } : null }));
      return null;
    } finally {
      if (active === generation) active = null;
    }
  };

  const begin = (mode: GenerationMode, start: number, end: number): boolean => {
    if (get().suggestion?.streaming || !get().doc) return false;
    stopRequested = false;
    set({ suggestion: { mode, text: '', start, end, streaming: true, error: null, steps: 0 }, metrics: null, error: null });
    return true;
  };

  const end = (): void => set((s) => ({ suggestion: s.suggestion ? { ...s.suggestion, streaming: false } : null }));

  const contextLength = () => useEngineStore.getState().model?.contextLength ?? null;

  return {
    ...initial,

    init: async () => {
      try {
        const documents = await services().api.app({ kind: 'documents.list' });
        set({ documents });
        const latest = [...documents].sort((a, b) => b.updatedAt - a.updatedAt)[0];
        if (latest) await get().openDocument(latest.id);
        else set({ doc: blankDocument(), dirty: false });
      } catch (e) {
        set({ error: `Could not read your documents: ${message(e)}`, doc: get().doc ?? blankDocument() });
      }
    },

    openDocument: async (id) => {
      if (get().suggestion?.streaming) return;
      await get().flushSave();
      try {
        const doc = await services().api.app({ kind: 'documents.get', id });
        set({ doc, dirty: false, suggestion: null, metrics: null, selection: { start: doc.text.length, end: doc.text.length }, caretRequest: doc.text.length });
      } catch (e) {
        set({ error: `Could not open the document: ${message(e)}` });
      }
    },

    newDocument: async () => {
      if (get().suggestion?.streaming) return;
      await get().flushSave();
      set({ doc: blankDocument(), dirty: false, suggestion: null, metrics: null, selection: { start: 0, end: 0 }, caretRequest: 0 });
    },

    setText: (text) => {
      const { doc } = get();
      if (!doc || doc.text === text) return;
      set({ doc: { ...doc, text }, dirty: true });
      scheduleSave();
    },

    setTitle: (title) => {
      const { doc } = get();
      if (!doc) return;
      set({ doc: { ...doc, title: title.slice(0, 200) }, dirty: true });
      scheduleSave();
    },

    setSelection: (start, end) => set({ selection: { start: Math.min(start, end), end: Math.max(start, end) } }),
    clearCaretRequest: () => set({ caretRequest: null }),
    setMaxTokens: (maxTokens) => set({ maxTokens }),
    setTargetWords: (targetWords) => set({ targetWords }),
    setInstruction: (instruction) => set({ instruction }),

    flushSave: async () => {
      if (saveTimer !== undefined) {
        clearTimeout(saveTimer);
        saveTimer = undefined;
      }
      const { doc, dirty } = get();
      if (!doc || !dirty) return;
      const saving = { ...doc, updatedAt: Date.now() };
      set({ saving: true });
      try {
        const { updatedAt } = await services().api.app({ kind: 'documents.save', document: saving });
        const summary: DocumentSummary = { id: saving.id, title: saving.title, updatedAt, words: countWords(saving.text) };
        set((s) => ({
          saving: false,
          saveError: null,
          // Still dirty if the user typed while the save was in flight.
          dirty: s.doc?.id === saving.id ? s.doc.text !== saving.text || s.doc.title !== saving.title : s.dirty,
          doc: s.doc?.id === saving.id ? { ...s.doc, updatedAt } : s.doc,
          documents: [summary, ...s.documents.filter((d) => d.id !== saving.id)],
        }));
      } catch (e) {
        set({ saving: false, saveError: message(e) });
        scheduleSave(AUTOSAVE_RETRY_MS);
      }
    },

    continueWriting: () => {
      const { doc, selection, maxTokens } = get();
      if (!doc) return;
      const at = selection.end;
      const before = doc.text.slice(0, at);
      if (!before.trim() || !begin('continue', at, at)) return;
      void run(continuePrompt(before, contextLength(), maxTokens), maxTokens, doc.id).then(end);
    },

    rewriteSelection: () => {
      const { doc, selection, maxTokens } = get();
      if (!doc || selection.end <= selection.start) return;
      const selected = doc.text.slice(selection.start, selection.end);
      if (!selected.trim() || !begin('rewrite', selection.start, selection.end)) return;
      const chat = useEngineStore.getState().model?.chatTemplate ?? true;
      const tokens = Math.max(maxTokens, Math.ceil(selected.length / 2));
      void run(rewritePrompt(selected, chat), tokens).then(end);
    },

    writeFromInstruction: () => {
      const { doc, selection, maxTokens, instruction } = get();
      if (!doc || !instruction.trim()) return;
      const at = selection.end;
      if (!begin('instruction', at, at)) return;
      void run(instructionPrompt(instruction.trim(), doc.text.slice(0, at), contextLength(), maxTokens), maxTokens).then(end);
    },

    longForm: () => {
      const { doc, selection, maxTokens, targetWords } = get();
      if (!doc) return;
      const at = selection.end;
      const before = doc.text.slice(0, at);
      if (!before.trim() || !begin('longform', at, at)) return;
      // Each step leaves room for its prompt: at most half the context.
      const context = contextLength();
      const stepTokens = context ? Math.min(maxTokens, Math.max(16, Math.floor(context / 2))) : maxTokens;
      void (async () => {
        // Step until the suggestion holds the target word count, the user stops, or the
        // engine ends for a reason more text cannot fix (context full, error, a step with nothing).
        for (;;) {
          const written = get().suggestion?.text ?? '';
          if (stopRequested || countWords(written) >= targetWords) break;
          const result = await run(continuePrompt(before + written, context, stepTokens), stepTokens, doc.id);
          set((s) => (s.suggestion ? { suggestion: { ...s.suggestion, steps: s.suggestion.steps + 1 } } : {}));
          if (!result || result.text.length === 0) break;
          if (result.stopReason !== 'maxTokens' && result.stopReason !== 'eos') break;
        }
        end();
      })();
    },

    stop: () => {
      stopRequested = true;
      active?.cancel();
    },

    accept: () => {
      const { doc, suggestion } = get();
      if (!doc || !suggestion || suggestion.streaming) return;
      const text = doc.text.slice(0, suggestion.start) + suggestion.text + doc.text.slice(suggestion.end);
      const caret = suggestion.start + suggestion.text.length;
      set({ doc: { ...doc, text }, dirty: true, suggestion: null, selection: { start: caret, end: caret }, caretRequest: caret });
      scheduleSave();
    },

    reject: () => {
      if (get().suggestion?.streaming) return;
      set({ suggestion: null });
    },
  };
});

export function resetWriterStore(): void {
  if (saveTimer !== undefined) clearTimeout(saveTimer);
  saveTimer = undefined;
  active = null;
  stopRequested = false;
  useWriterStore.setState(initial);
}
