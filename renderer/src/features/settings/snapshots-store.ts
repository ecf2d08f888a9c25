// Settings → Document snapshots: the engine host's folder of per-document KV snapshots (its
// figures, the size cap, Clear). The host owns the folder and keeps the cap; the window only asks
// (the `snapshots` engine request) and never names a path.
import { create } from 'zustand';
import type { SnapshotStats } from '../../engine/client.ts';
import { services } from '../../services.ts';

const MIB = 1024 * 1024;

export interface SnapshotsState {
  stats: SnapshotStats | null;
  /** The cap field, in MiB (NaN while the field is empty). */
  capMiB: number;
  busy: 'loading' | 'saving' | 'clearing' | null;
  error: string | null;
  /** What the last action did, for the status line. */
  done: string | null;
  refresh(): Promise<void>;
  editCap(mib: number): void;
  saveCap(): Promise<void>;
  clear(): Promise<void>;
}

const initial = { stats: null, capMiB: Number.NaN, busy: null, error: null, done: null };

const message = (e: unknown): string => (e instanceof Error ? e.message : String((e as { message?: unknown } | null)?.message ?? e));

/** The cap field's problem, or null: a whole number of MiB, 0 or more (0 keeps none). */
export function capProblem(mib: number): string | null {
  return Number.isInteger(mib) && mib >= 0 && mib * MIB <= Number.MAX_SAFE_INTEGER ? null : 'the cap is a whole number of MiB, 0 or more';
}

export const useSnapshotsStore = create<SnapshotsState>()((set, get) => {
  const act = async (busy: NonNullable<SnapshotsState['busy']>, call: () => Promise<SnapshotStats>, done: (stats: SnapshotStats) => string | null): Promise<void> => {
    set({ busy, error: null, done: null });
    try {
      const stats = await call();
      set({ stats, capMiB: Math.round(stats.capBytes / MIB), busy: null, done: done(stats) });
    } catch (e) {
      set({ busy: null, error: message(e) });
    }
  };
  return {
    ...initial,
    refresh: () => act('loading', () => services().engine.snapshots('stats'), () => null),
    editCap: (capMiB) => set({ capMiB, done: null, error: null }),
    saveCap: async () => {
      const { capMiB } = get();
      if (capProblem(capMiB)) return;
      await act('saving', () => services().engine.snapshots('setCap', capMiB * MIB), () => 'Cap saved.');
    },
    clear: () => act('clearing', () => services().engine.snapshots('clear'), () => 'Snapshots cleared.'),
  };
});

export function resetSnapshotsStore(): void {
  useSnapshotsStore.setState(initial);
}
