// Inspector slice: every generation's step metrics (from any view) in a ring buffer of the last
// SNAPSHOT_CAPACITY samples, which generations are running, and the policy comparison.
// It subscribes to each engine client as the client is created, so samples are collected from
// start-up, not only while the inspector is on screen.
import { create } from 'zustand';
import type { KvPolicy } from '../../../../app/common/protocol.ts';
import { onEngineClientCreated, type EngineClient, type LoadOptionsInput } from '../../engine/client.ts';
import { useEngineStore } from '../../engine/store.ts';
import { services } from '../../services.ts';
import { useSettingsStore } from '../settings/store.ts';
import { compareTokens, type Snapshot, type TokenComparison } from './data.ts';
import { RingBuffer } from './ring.ts';

export const SNAPSHOT_CAPACITY = 600;

/** Policies the protocol names (only full and infinigen run today; others answer BAD_ARGUMENT). */
export const POLICIES: readonly KvPolicy[] = ['full', 'infinigen', 'h2o', 'streaming', 'quest', 'snapkv', 'oracle'];

export interface CompareSide {
  policy: KvPolicy;
  tokens: number[];
  text: string;
  tokensPerS: number | null;
}

export interface CompareResult {
  a: CompareSide;
  b: CompareSide;
  comparison: TokenComparison;
}

export interface CompareState {
  prompt: string;
  maxTokens: number;
  policyA: KvPolicy;
  policyB: KvPolicy;
  running: boolean;
  phase: string | null;
  result: CompareResult | null;
  error: string | null;
}

export interface InspectorState {
  /** Bumps on every sample (components read the ring itself). */
  version: number;
  latest: Snapshot | null;
  /** Request ids of generations in flight. */
  running: string[];
  compare: CompareState;
  clear(): void;
  editCompare(patch: Partial<Pick<CompareState, 'prompt' | 'maxTokens' | 'policyA' | 'policyB'>>): void;
  runCompare(): Promise<void>;
  stopCompare(): void;
}

const ring = new RingBuffer<Snapshot>(SNAPSHOT_CAPACITY);
let seq = 0;

/** The collected samples, oldest first (the newest `n` when given). */
export function snapshots(n?: number): Snapshot[] {
  return ring.toArray(n);
}

const initialCompare: CompareState = { prompt: 'Once upon a time', maxTokens: 64, policyA: 'full', policyB: 'infinigen', running: false, phase: null, result: null, error: null };

let compareStop: (() => void) | null = null;
let compareStopped = false;

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export const useInspectorStore = create<InspectorState>()((set, get) => ({
  version: 0,
  latest: null,
  running: [],
  compare: initialCompare,

  clear: () => {
    ring.clear();
    set((s) => ({ version: s.version + 1, latest: null }));
  },

  editCompare: (patch) => set((s) => ({ compare: { ...s.compare, ...patch, error: null } })),

  runCompare: async () => {
    const { compare } = get();
    if (compare.running) return;
    const engine = services().engine;
    const model = useEngineStore.getState().model;
    if (!model) {
      set((s) => ({ compare: { ...s.compare, error: 'Load a model on the Models page first; the comparison reloads it under each policy.' } }));
      return;
    }
    const original = engine.lastLoadOptions ?? optionsFromModel(model);
    const update = (patch: Partial<CompareState>): void => set((s) => ({ compare: { ...s.compare, ...patch } }));
    compareStopped = false;
    update({ running: true, phase: null, result: null, error: null });
    let reloaded = false;
    try {
      const side = async (policy: KvPolicy, label: string): Promise<CompareSide> => {
        if (compareStopped) throw new Error('stopped');
        update({ phase: `Loading the model with policy ${policy} (${label})…` });
        reloaded = true; // even a refused load may have unloaded the user's model
        useEngineStore.getState().setModel(await engine.load({ ...original, policy }));
        if (compareStopped) throw new Error('stopped');
        update({ phase: `Generating ${compare.maxTokens} tokens greedily with ${policy} (${label})…` });
        return generateGreedy(engine, compare.prompt, compare.maxTokens, policy, (cancel) => (compareStop = cancel));
      };
      const a = await side(compare.policyA, 'A');
      const b = await side(compare.policyB, 'B');
      update({ result: { a, b, comparison: compareTokens(a.tokens, b.tokens) } });
    } catch (e) {
      update({ error: compareStopped ? 'Stopped.' : message(e) });
    } finally {
      compareStop = null;
      if (reloaded) {
        update({ phase: 'Reloading your model with its own settings…' });
        try {
          useEngineStore.getState().setModel(await engine.load(original));
        } catch (e) {
          update({ error: `Could not reload your model as it was: ${message(e)}. Load it again on the Models page.` });
        }
      }
      update({ running: false, phase: null });
    }
  },

  stopCompare: () => {
    compareStopped = true;
    compareStop?.();
  },
}));

/** Load options that reproduce `model` when the client never saw its load (e.g. loaded before a restart of the window). */
function optionsFromModel(model: NonNullable<ReturnType<typeof useEngineStore.getState>['model']>): LoadOptionsInput {
  const settings = useSettingsStore.getState().saved;
  return {
    modelPath: model.path,
    device: model.device,
    threads: model.threads,
    contextLength: model.contextLength,
    kvType: model.kvType,
    policy: model.policy,
    ...(settings ? { infinigen: { alpha: settings.alpha, partialRatio: settings.partialRatio, fetchCap: settings.fetchCap, denseLayers: settings.denseLayers } } : {}),
  };
}

async function generateGreedy(engine: EngineClient, prompt: string, maxTokens: number, policy: KvPolicy, onCancel: (cancel: () => void) => void): Promise<CompareSide> {
  const tokens: number[] = [];
  let requestId: string | null = null;
  const off = engine.onGenerationEvent((event) => {
    if (event.kind === 'token' && event.requestId === requestId) tokens[event.index] = event.id;
  });
  try {
    const generation = engine.generate({ text: prompt }, { maxTokens, stopOnEos: false, sampling: { temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1 } });
    requestId = generation.requestId;
    onCancel(() => generation.cancel());
    const result = await generation.result;
    if (result.stopReason === 'cancelled') throw new Error('stopped');
    if (result.stopReason === 'error') throw new Error(result.metrics.error?.message ?? `the ${policy} run failed`);
    return { policy, tokens: tokens.filter((t) => t !== undefined), text: result.text, tokensPerS: result.metrics.tokensPerS };
  } finally {
    off();
  }
}

// ── collection ──────────────────────────────────────────────────────────────────────────────

let detach: (() => void) | null = null;

function attach(client: EngineClient): void {
  detach?.();
  const offMetrics = client.onStepMetrics(({ requestId, metrics }) => {
    seq += 1;
    const snapshot: Snapshot = { seq, requestId, receivedAt: Date.now(), metrics };
    ring.push(snapshot);
    useInspectorStore.setState((s) => ({ version: s.version + 1, latest: snapshot }));
  });
  const offEvents = client.onGenerationEvent((event) => {
    if (event.kind === 'prompt') useInspectorStore.setState((s) => (s.running.includes(event.requestId) ? {} : { running: [...s.running, event.requestId] }));
    else if (event.kind === 'done') useInspectorStore.setState((s) => ({ running: s.running.filter((id) => id !== event.requestId) }));
  });
  const offStatus = client.onStatus((status) => {
    if (status.state === 'crashed' || status.state === 'restarting') useInspectorStore.setState({ running: [] });
  });
  detach = () => {
    offMetrics();
    offEvents();
    offStatus();
  };
}

onEngineClientCreated(attach);

export function resetInspectorStore(): void {
  ring.clear();
  seq = 0;
  compareStop = null;
  compareStopped = false;
  useInspectorStore.setState({ version: 0, latest: null, running: [], compare: initialCompare });
}
