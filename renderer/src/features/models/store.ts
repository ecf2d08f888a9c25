// Models slice: the path to open, the library (models.scan), the inspect report for the memory
// bar, loading into the engine, and downloads.
import { create } from 'zustand';
import type { DownloadState, ModelEntry } from '../../../../app/common/app-api.ts';
import type { LoadOptionsInput, LoadProgress } from '../../engine/client.ts';
import { useEngineStore } from '../../engine/store.ts';
import { services } from '../../services.ts';
import { useSettingsStore } from '../settings/store.ts';

export interface InspectResult {
  path: string;
  contextTokens: number;
  report: Record<string, unknown>;
}

export interface ModelsState {
  path: string;
  contextTokens: number;
  library: ModelEntry[];
  scanning: boolean;
  scanError: string | null;
  inspected: InspectResult | null;
  inspecting: boolean;
  inspectError: string | null;
  loading: boolean;
  /** The load in flight: stages built so far of how many; null before its first figure and when none runs. */
  loadProgress: LoadProgress | null;
  loadError: string | null;
  downloads: DownloadState[];
  downloadError: string | null;
  setPath(path: string): void;
  setContextTokens(tokens: number): void;
  scan(): Promise<void>;
  inspect(): Promise<void>;
  load(): Promise<void>;
  refreshDownloads(): Promise<void>;
  startDownload(url: string): Promise<void>;
  pauseDownload(id: string): Promise<void>;
  resumeDownload(id: string): Promise<void>;
}

/** Used when settings say 0 (= the model's default, min(trained, 4096)). */
export const DEFAULT_CONTEXT = 4096;

const initial = {
  path: '',
  contextTokens: DEFAULT_CONTEXT,
  library: [] as ModelEntry[],
  scanning: false,
  scanError: null,
  inspected: null,
  inspecting: false,
  inspectError: null,
  loading: false,
  loadProgress: null,
  loadError: null,
  downloads: [] as DownloadState[],
  downloadError: null,
};

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export const useModelsStore = create<ModelsState>()((set, get) => ({
  ...initial,
  setPath: (path) => set({ path, inspectError: null, loadError: null }),
  setContextTokens: (contextTokens) => set({ contextTokens }),
  scan: async () => {
    set({ scanning: true, scanError: null });
    try {
      const library = await services().api.app({ kind: 'models.scan' });
      set({ library, scanning: false });
    } catch (e) {
      set({ scanning: false, scanError: message(e) });
    }
  },
  inspect: async () => {
    const { path, contextTokens } = get();
    if (!path.trim()) return;
    set({ inspecting: true, inspectError: null });
    try {
      const request = Number.isInteger(contextTokens) && contextTokens > 0 ? { kind: 'models.inspect' as const, path, contextTokens } : { kind: 'models.inspect' as const, path };
      const report = await services().api.app(request);
      set({ inspected: { path, contextTokens, report }, inspecting: false });
    } catch (e) {
      set({ inspecting: false, inspectError: message(e), inspected: null });
    }
  },
  load: async () => {
    const { path, contextTokens } = get();
    if (!path.trim()) return;
    const settings = useSettingsStore.getState().saved;
    const options: LoadOptionsInput = { modelPath: path };
    if (settings) {
      options.device = settings.device;
      options.kvType = settings.kvType;
      if (settings.threads > 0) options.threads = settings.threads;
    }
    if (Number.isInteger(contextTokens) && contextTokens > 0) options.contextLength = contextTokens;
    set({ loading: true, loadProgress: null, loadError: null });
    try {
      const model = await services().engine.load(options, (loadProgress) => set({ loadProgress }));
      useEngineStore.getState().setModel(model);
      set({ loading: false, loadProgress: null });
      if (settings && settings.lastModelPath !== path) {
        await useSettingsStore.getState().patchSaved({ lastModelPath: path });
        // models.scan lists the recent model with its size: ask again so the Library shows it.
        await get().scan();
      }
    } catch (e) {
      set({ loading: false, loadProgress: null, loadError: message(e) });
    }
  },
  refreshDownloads: async () => {
    try {
      set({ downloads: await services().api.app({ kind: 'downloads.list' }), downloadError: null });
    } catch (e) {
      set({ downloadError: message(e) });
    }
  },
  startDownload: async (url) => {
    try {
      const started = await services().api.app({ kind: 'downloads.start', url });
      set((s) => ({ downloads: [...s.downloads.filter((d) => d.id !== started.id), started], downloadError: null }));
    } catch (e) {
      set({ downloadError: message(e) });
    }
  },
  pauseDownload: async (id) => {
    try {
      const state = await services().api.app({ kind: 'downloads.pause', id });
      set((s) => ({ downloads: s.downloads.map((d) => (d.id === id ? state : d)) }));
    } catch (e) {
      set({ downloadError: message(e) });
    }
  },
  resumeDownload: async (id) => {
    try {
      const state = await services().api.app({ kind: 'downloads.resume', id });
      set((s) => ({ downloads: s.downloads.map((d) => (d.id === id ? state : d)) }));
    } catch (e) {
      set({ downloadError: message(e) });
    }
  },
}));

export function resetModelsStore(): void {
  useModelsStore.setState(initial);
}
