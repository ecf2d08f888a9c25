// Inspector slice: every generation's step metrics (from any view) in a ring buffer of the last
// SNAPSHOT_CAPACITY samples, which generations are running, and the policy comparison.
// It subscribes to each engine client as the client is created, so samples are collected from
// start-up, not only while the inspector is on screen.
import { create } from 'zustand';
import type { CacheReport, KvPolicy, Prompt } from '../../../../app/common/protocol.ts';
import { onEngineClientCreated, type EngineClient } from '../../engine/client.ts';
import { useEngineStore } from '../../engine/store.ts';
import { services } from '../../services.ts';
import { compareTokens, type Snapshot, type TokenComparison } from './data.ts';
import { RingBuffer } from './ring.ts';
import { addRouting, newRouting } from './routing.ts';
import { parseRunsJsonl, type Run } from './runs.ts';

export const SNAPSHOT_CAPACITY = 600;
/** Generations kept whole (prompt, tokens, every sample) for the token map, recall, memory and A/B views. */
export const RUN_CAPACITY = 8;
/** Samples kept per run (a long generation keeps its first ones; 10 a second for 6 minutes). */
export const RUN_SAMPLE_CAPACITY = 4000;
/** Top-k log-probabilities the comparison asks for on both sides (the engine's most). */
export const COMPARE_LOGPROBS = 20;
/** Measured samples a comparison asks for per side: one every N decode steps, about this many over the run. */
export const COMPARE_SAMPLES = 150;
export const compareSampleEvery = (maxTokens: number): number => Math.max(1, Math.ceil(maxTokens / COMPARE_SAMPLES));

/** Policies the protocol names; each can be chosen per generation (a refusal comes back as the run's error). */
export { POLICIES } from '../../engine/policies.ts';

export interface CompareSide {
  policy: KvPolicy;
  /** The generation's request id (its run in the inspector). */
  requestId: string;
  /** The prompt as the engine tokenized it (B runs on A's). */
  promptIds: number[];
  tokens: number[];
  text: string;
  tokensPerS: number | null;
  ttftMs: number | null;
  promptTokens: number;
  /** How this side used the cached prefix (null from engines that keep no cache). */
  cache: CacheReport | null;
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
  /** Measure every sampled step asked for, whatever it costs (default: the engine keeps the inspector under 5% of decode time). */
  dense: boolean;
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
  /** Bumps when a run changes (runs() reads them). */
  runsVersion: number;
  /** The run the views show (null: the newest). */
  selectedRun: string | null;
  /** Why the last file could not be loaded. */
  loadError: string | null;
  selectRun(requestId: string | null): void;
  /** Replaces the runs with those of an exported JSON lines file (offline viewing). */
  loadRuns(text: string): void;
  clear(): void;
  editCompare(patch: Partial<Pick<CompareState, 'prompt' | 'maxTokens' | 'policyA' | 'policyB' | 'dense'>>): void;
  runCompare(): Promise<void>;
  stopCompare(): void;
}

const ring = new RingBuffer<Snapshot>(SNAPSHOT_CAPACITY);
let seq = 0;
/** Runs by request id, oldest first (Map order). */
const runMap = new Map<string, Run>();

/** The recorded runs, oldest first. */
export function runs(): Run[] {
  return [...runMap.values()];
}

export function runById(requestId: string | null | undefined): Run | undefined {
  return requestId ? runMap.get(requestId) : undefined;
}

/** The run the views show: the selected one, else the newest with samples, else the newest. */
export function currentRun(selected: string | null): Run | undefined {
  const all = runs();
  return (selected ? runMap.get(selected) : undefined) ?? [...all].reverse().find((r) => r.samples.length > 0) ?? all.at(-1);
}

function touchRuns(): void {
  useInspectorStore.setState((s) => ({ runsVersion: s.runsVersion + 1 }));
}

/** The collected samples, oldest first (the newest `n` when given). */
export function snapshots(n?: number): Snapshot[] {
  return ring.toArray(n);
}

const initialCompare: CompareState = { prompt: 'Once upon a time', maxTokens: 64, policyA: 'full', policyB: 'infinigen', dense: false, running: false, phase: null, result: null, error: null };

let compareStop: (() => void) | null = null;
let compareStopped = false;

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export const useInspectorStore = create<InspectorState>()((set, get) => ({
  version: 0,
  latest: null,
  running: [],
  compare: initialCompare,
  runsVersion: 0,
  selectedRun: null,
  loadError: null,

  selectRun: (requestId) => set({ selectedRun: requestId }),

  loadRuns: (text) => {
    let loaded: Run[];
    try {
      loaded = parseRunsJsonl(text);
    } catch (e) {
      set({ loadError: message(e) });
      return;
    }
    if (loaded.length === 0) {
      set({ loadError: 'The file holds no runs or samples.' });
      return;
    }
    runMap.clear();
    for (const r of loaded) runMap.set(r.requestId, r);
    const last = [...loaded].reverse().find((r) => r.samples.length > 0) ?? loaded.at(-1)!;
    set((s) => ({ runsVersion: s.runsVersion + 1, selectedRun: last.requestId, loadError: null }));
  },

  clear: () => {
    ring.clear();
    runMap.clear();
    set((s) => ({ version: s.version + 1, latest: null, runsVersion: s.runsVersion + 1, selectedRun: null }));
  },

  editCompare: (patch) => set((s) => ({ compare: { ...s.compare, ...patch, error: null } })),

  runCompare: async () => {
    const { compare } = get();
    if (compare.running) return;
    const engine = services().engine;
    if (!useEngineStore.getState().model) {
      set((s) => ({ compare: { ...s.compare, error: 'Load a model on the Models page first; both policies run on it.' } }));
      return;
    }
    const update = (patch: Partial<CompareState>): void => set((s) => ({ compare: { ...s.compare, ...patch } }));
    compareStopped = false;
    update({ running: true, phase: null, result: null, error: null });
    try {
      // A first, then B on A's very prompt ids: the engine keeps the sequence A left (prompt +
      // A's tokens), so B reuses the whole prompt prefix when the policy switch keeps the cache.
      update({ phase: `Generating ${compare.maxTokens} tokens greedily with ${compare.policyA} (A)…` });
      const a = await generateGreedy(engine, { text: compare.prompt }, compare.maxTokens, compare.policyA, compare.dense, (cancel) => (compareStop = cancel));
      set({ selectedRun: a.requestId });
      if (compareStopped) throw new Error('stopped');
      update({ phase: `Generating ${compare.maxTokens} tokens greedily with ${compare.policyB} (B), from A's cached prompt…` });
      const b = await generateGreedy(engine, a.promptIds.length > 0 ? { ids: a.promptIds } : { text: compare.prompt }, compare.maxTokens, compare.policyB, compare.dense, (cancel) => (compareStop = cancel));
      update({ result: { a, b, comparison: compareTokens(a.tokens, b.tokens) } });
    } catch (e) {
      update({ error: compareStopped ? 'Stopped.' : message(e) });
    } finally {
      compareStop = null;
      update({ running: false, phase: null });
    }
  },

  stopCompare: () => {
    compareStopped = true;
    compareStop?.();
  },
}));

/**
 * One greedy run under `policy` (chosen for this generation: the loaded model stays as the user
 * loaded it), with prefix reuse on. Keeps the prompt ids the engine used, for the other side.
 */
async function generateGreedy(engine: EngineClient, prompt: Prompt, maxTokens: number, policy: KvPolicy, dense: boolean, onCancel: (cancel: () => void) => void): Promise<CompareSide> {
  const tokens: number[] = [];
  let promptIds: number[] = [];
  let requestId: string | null = null;
  const off = engine.onGenerationEvent((event) => {
    if (event.requestId !== requestId) return;
    if (event.kind === 'token') tokens[event.index] = event.id;
    else if (event.kind === 'prompt') promptIds = event.ids;
  });
  try {
    const generation = engine.generate(prompt, { maxTokens, stopOnEos: false, policy, logprobs: COMPARE_LOGPROBS, inspectEvery: compareSampleEvery(maxTokens), ...(dense ? { inspectBudget: 1 } : {}), sampling: { temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1 } });
    requestId = generation.requestId;
    onCancel(() => generation.cancel());
    const result = await generation.result;
    if (result.stopReason === 'cancelled') throw new Error('stopped');
    if (result.stopReason === 'error') throw new Error(result.metrics.error?.message ?? `the ${policy} run failed`);
    const { metrics } = result;
    return { policy, requestId: generation.requestId, promptIds, tokens: tokens.filter((t) => t !== undefined), text: result.text, tokensPerS: metrics.tokensPerS, ttftMs: metrics.ttftMs, promptTokens: metrics.promptTokens, cache: metrics.cache };
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
    const run = runMap.get(requestId);
    if (run && run.samples.length < RUN_SAMPLE_CAPACITY) {
      run.samples.push(metrics);
      run.policy ||= metrics.policy;
    }
    useInspectorStore.setState((s) => ({ version: s.version + 1, latest: snapshot, runsVersion: run ? s.runsVersion + 1 : s.runsVersion }));
  });
  const offEvents = client.onGenerationEvent((event) => {
    if (event.kind === 'prompt') {
      // a live generation replaces what a loaded file showed
      if ([...runMap.values()].some((r) => r.loaded)) runMap.clear();
      // the loaded model's layer kinds (window layers keep rings) mark the token map's and recall's layers
      const kvLayers = useEngineStore.getState().model?.kvLayers?.map((l) => (l.kind === 'window' ? { kind: l.kind, window: l.window } : { kind: l.kind }));
      runMap.set(event.requestId, { requestId: event.requestId, policy: '', contextLength: event.contextLength, promptIds: event.ids, pieces: event.pieces ?? [], tokens: [], samples: [], ...(kvLayers ? { kvLayers } : {}) });
      while (runMap.size > RUN_CAPACITY) runMap.delete(runMap.keys().next().value!);
      touchRuns();
      useInspectorStore.setState((s) => (s.running.includes(event.requestId) ? {} : { running: [...s.running, event.requestId] }));
    } else if (event.kind === 'routing') {
      const run = runMap.get(event.requestId);
      const experts = useEngineStore.getState().model?.experts?.count;
      if (run && experts !== undefined) {
        run.routing ??= newRouting(experts, event);
        addRouting(run.routing, event);
      }
    } else if (event.kind === 'token') {
      const run = runMap.get(event.requestId);
      if (run) run.tokens[event.index] = event.top ? { id: event.id, text: event.text, top: event.top } : { id: event.id, text: event.text };
    } else if (event.kind === 'done') {
      const run = runMap.get(event.requestId);
      if (run) {
        if (event.policy) run.policy = event.policy;
        if (event.text && run.tokens.length > 0) {
          // text the stop matcher or UTF-8 decoder held back belongs to the last token
          const last = run.tokens[run.tokens.length - 1]!;
          run.tokens[run.tokens.length - 1] = { ...last, text: last.text + event.text };
        }
        touchRuns();
      }
      useInspectorStore.setState((s) => ({ running: s.running.filter((id) => id !== event.requestId) }));
    }
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
  runMap.clear();
  seq = 0;
  compareStop = null;
  compareStopped = false;
  useInspectorStore.setState({ version: 0, latest: null, running: [], compare: initialCompare, runsVersion: 0, selectedRun: null, loadError: null });
}
