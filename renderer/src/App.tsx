// The shell: sidebar navigation, the engine banner, and the current view. Settings are read
// once at start (theme, sampling defaults, last model path).
import { useEffect, type JSX } from 'react';
import { InspectorView } from './features/inspector/InspectorView.tsx';
import { ModelsView } from './features/models/ModelsView.tsx';
import { SettingsView } from './features/settings/SettingsView.tsx';
import { useSettingsStore } from './features/settings/store.ts';
import { SummariseView } from './features/summarise/SummariseView.tsx';
import { WriterView } from './features/writer/WriterView.tsx';
import { useShellStore, VIEWS, type ViewId } from './shell/store.ts';
import { EngineBanner } from './ui/EngineBanner.tsx';

const VIEW_COMPONENTS: Record<ViewId, () => JSX.Element> = {
  writer: WriterView,
  summarise: SummariseView,
  models: ModelsView,
  inspector: InspectorView,
  settings: SettingsView,
};

function useTheme(): void {
  const theme = useSettingsStore((s) => s.saved?.theme ?? 'system');
  useEffect(() => {
    document.documentElement.dataset.theme = theme;
  }, [theme]);
}

export function App() {
  const view = useShellStore((s) => s.view);
  const go = useShellStore((s) => s.go);
  const loadSettings = useSettingsStore((s) => s.load);
  useTheme();

  useEffect(() => {
    void loadSettings();
  }, [loadSettings]);

  const View = VIEW_COMPONENTS[view];
  return (
    <div className="app">
      <nav className="sidebar" aria-label="Sections">
        <div className="brand">Longhand</div>
        <ul>
          {VIEWS.map((v) => (
            <li key={v.id}>
              <button type="button" className={v.id === view ? 'nav-item active' : 'nav-item'} aria-current={v.id === view ? 'page' : undefined} onClick={() => go(v.id)}>
                {v.label}
              </button>
            </li>
          ))}
        </ul>
      </nav>
      <main className="main">
        <EngineBanner />
        <View />
      </main>
    </div>
  );
}
