// Settings slice: what the host saved (`saved`) and the form's working copy (`draft`).
// settings.get answers with every default filled in, so the renderer restates no defaults; the
// few ranges below only give early feedback — the host validates again with SettingsSchema.
import { create } from 'zustand';
import type { Settings } from '../../../../app/common/app-api.ts';
import { services } from '../../services.ts';

export type SettingsStatus = 'idle' | 'loading' | 'saving' | 'saved' | 'error';

export interface SettingsState {
  saved: Settings | null;
  draft: Settings | null;
  warning: string | null;
  status: SettingsStatus;
  error: string | null;
  load(): Promise<void>;
  edit(patch: Partial<Settings>): void;
  editSampling(patch: Partial<Settings['sampling']>): void;
  editRemote(patch: Partial<Settings['remote']>): void;
  revert(): void;
  save(): Promise<boolean>;
  /** Saves one change straight away (e.g. the last model path after a load). */
  patchSaved(patch: Partial<Settings>): Promise<void>;
}

const initial = { saved: null, draft: null, warning: null, status: 'idle' as SettingsStatus, error: null };

/** Early checks that mirror SettingsSchema's ranges; returns field → problem. */
export function validateSettings(s: Settings): Record<string, string> {
  const problems: Record<string, string> = {};
  const check = (field: string, ok: boolean, message: string): void => {
    if (!ok) problems[field] = message;
  };
  const int = Number.isInteger;
  check('alpha', s.alpha >= 0 && s.alpha <= 50, 'alpha is 0–50');
  check('partialRatio', s.partialRatio > 0 && s.partialRatio <= 1, 'r is in (0, 1]');
  check('fetchCap', s.fetchCap > 0 && s.fetchCap <= 1, 'cap is in (0, 1]');
  check('denseLayers', int(s.denseLayers) && s.denseLayers >= 0 && s.denseLayers <= 256, 'dense layers: a whole number 0–256');
  check('poolBudgetBytes', int(s.poolBudgetBytes) && s.poolBudgetBytes >= 0, 'the budget is 0 or more');
  check('threads', int(s.threads) && s.threads >= 0 && s.threads <= 256, 'threads: 0 (all cores) to 256');
  check('contextLength', int(s.contextLength) && s.contextLength >= 0, 'context: 0 (model default) or more tokens');
  check('temperature', s.sampling.temperature >= 0 && s.sampling.temperature <= 100, 'temperature is 0–100');
  check('topK', int(s.sampling.topK) && s.sampling.topK >= 0, 'top-k: a whole number, 0 = off');
  check('topP', s.sampling.topP > 0 && s.sampling.topP <= 1, 'top-p is in (0, 1]');
  check('minP', s.sampling.minP >= 0 && s.sampling.minP <= 1, 'min-p is 0–1');
  check('repetitionPenalty', s.sampling.repetitionPenalty > 0 && s.sampling.repetitionPenalty <= 10, 'repetition penalty is in (0, 10]');
  if (s.remote.enabled) check('remoteUrl', /^https?:\/\/\S+$/.test(s.remote.baseUrl), 'the endpoint URL starts with http:// or https://');
  return problems;
}

export const useSettingsStore = create<SettingsState>()((set, get) => ({
  ...initial,
  load: async () => {
    set({ status: 'loading', error: null });
    try {
      const { settings, warning } = await services().api.app({ kind: 'settings.get' });
      set({ saved: settings, draft: structuredClone(settings), warning, status: 'idle' });
    } catch (e) {
      set({ status: 'error', error: (e as Error).message });
    }
  },
  edit: (patch) => set((s) => (s.draft ? { draft: { ...s.draft, ...patch }, status: 'idle' } : {})),
  editSampling: (patch) => set((s) => (s.draft ? { draft: { ...s.draft, sampling: { ...s.draft.sampling, ...patch } }, status: 'idle' } : {})),
  editRemote: (patch) => set((s) => (s.draft ? { draft: { ...s.draft, remote: { ...s.draft.remote, ...patch } }, status: 'idle' } : {})),
  revert: () => set((s) => ({ draft: s.saved ? structuredClone(s.saved) : null, status: 'idle', error: null })),
  save: async () => {
    const { draft } = get();
    if (!draft) return false;
    const problems = validateSettings(draft);
    if (Object.keys(problems).length > 0) {
      set({ status: 'error', error: Object.values(problems).join('; ') });
      return false;
    }
    set({ status: 'saving', error: null });
    try {
      const { settings } = await services().api.app({ kind: 'settings.save', settings: draft });
      set({ saved: settings, draft: structuredClone(settings), status: 'saved' });
      return true;
    } catch (e) {
      set({ status: 'error', error: (e as Error).message });
      return false;
    }
  },
  patchSaved: async (patch) => {
    const { saved, draft } = get();
    if (!saved) return;
    try {
      const { settings } = await services().api.app({ kind: 'settings.save', settings: { ...saved, ...patch } });
      set({ saved: settings, draft: draft ? { ...draft, ...patch } : structuredClone(settings) });
    } catch (e) {
      set({ error: (e as Error).message });
    }
  },
}));

export function resetSettingsStore(): void {
  useSettingsStore.setState(initial);
}
