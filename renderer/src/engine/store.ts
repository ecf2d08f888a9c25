// Engine slice: the engine process state (for the banner) and the loaded model (the writer needs
// its context length and whether it has a chat template).
import { create } from 'zustand';
import type { ModelInfo } from '../../../app/common/protocol.ts';
import type { EngineStatus } from '../../../app/common/window-api.ts';

export interface EngineState {
  status: EngineStatus;
  model: ModelInfo | null;
  setStatus(status: EngineStatus): void;
  setModel(model: ModelInfo | null): void;
}

export const useEngineStore = create<EngineState>()((set) => ({
  status: { state: 'starting' },
  model: null,
  setStatus: (status) =>
    // A crashed engine forgets its model; drafts live in the writer's slice and are untouched.
    set((state) => ({ status, model: status.state === 'crashed' || status.state === 'restarting' ? null : state.model })),
  setModel: (model) => set({ model }),
}));

export function resetEngineStore(): void {
  useEngineStore.setState({ status: { state: 'starting' }, model: null });
}
