// Navigation slice: which view the sidebar shows.
import { create } from 'zustand';

export const VIEWS = [
  { id: 'writer', label: 'Writer' },
  { id: 'summarise', label: 'Summarise' },
  { id: 'models', label: 'Models' },
  { id: 'inspector', label: 'Inspector' },
  { id: 'settings', label: 'Settings' },
] as const;
export type ViewId = (typeof VIEWS)[number]['id'];

export interface ShellState {
  view: ViewId;
  go(view: ViewId): void;
}

export const useShellStore = create<ShellState>()((set) => ({
  view: 'writer',
  go: (view) => set({ view }),
}));

export function resetShellStore(): void {
  useShellStore.setState({ view: 'writer' });
}
