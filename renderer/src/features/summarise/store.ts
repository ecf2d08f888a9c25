// Summarise slice: the document (opened or pasted), its token count against the loaded model's
// context, the user's overflow policy, and one summarising run at a time (one generation, or one
// per part and then the combining ones), streamed into the summary.
import { create } from 'zustand';
import type { Generation, GenerationMetrics } from '../../engine/client.ts';
import { useEngineStore } from '../../engine/store.ts';
import { services } from '../../services.ts';
import { useSettingsStore } from '../settings/store.ts';
import { partDocumentId, summaryDocumentId } from './document-id.ts';
import { documentBudget, groupToFit, joinIds, planSummary, truncateMiddle, type OverflowPolicy } from './plan.ts';
import { COMBINE_PREFIX, CUT_MARKER, PART_PREFIX, SEPARATOR, SUFFIX, SUMMARY_PREFIX } from './prompts.ts';
import { readSource, type SourceKind } from './source.ts';

export type Phase =
  | { kind: 'whole' }
  | { kind: 'part'; index: number; count: number }
  | { kind: 'combine'; summaries: number; group: number; groups: number };

export interface Overhead {
  modelPath: string;
  /** Tokens of the instruction around a document (the longer of the whole and part prefixes, + suffix). */
  tokens: number;
  markerTokens: number;
}

export interface SummariseState {
  text: string;
  sourceName: string;
  sourceKind: SourceKind;
  reading: string | null;
  readError: string | null;
  /** Tokens of `text` (null: not counted yet, or no model). */
  tokenCount: number | null;
  countedText: string | null;
  overhead: Overhead | null;
  countError: string | null;
  policy: OverflowPolicy;
  maxSummaryTokens: number;
  running: boolean;
  phase: Phase | null;
  /** A refusal or what was done to make the document fit (e.g. how many tokens were cut). */
  notice: { tone: 'refused' | 'info'; text: string } | null;
  partSummaries: string[];
  summary: string;
  error: string | null;
  metrics: GenerationMetrics | null;
  copied: boolean;
  setText(text: string): void;
  openFile(file: File): Promise<void>;
  setPolicy(policy: OverflowPolicy): void;
  setMaxSummaryTokens(n: number): void;
  count(): Promise<void>;
  summarise(): Promise<void>;
  stop(): void;
  copy(): Promise<void>;
}

const initial = {
  text: '',
  sourceName: '',
  sourceKind: 'paste' as SourceKind,
  reading: null,
  readError: null,
  tokenCount: null,
  countedText: null,
  overhead: null,
  countError: null,
  policy: 'stop' as OverflowPolicy,
  maxSummaryTokens: 256,
  running: false,
  phase: null,
  notice: null,
  partSummaries: [] as string[],
  summary: '',
  error: null,
  metrics: null,
  copied: false,
};

let active: Generation | null = null;
let stopRequested = false;

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));
const n = (value: number): string => value.toLocaleString('en-US');

class Stopped extends Error {}

/** The instruction pieces as token ids (prefixes carry the model's BOS; the rest do not). */
async function instructionIds() {
  const engine = services().engine;
  const [whole, part, combine, suffix, marker, separator] = await Promise.all([
    engine.tokenize(SUMMARY_PREFIX, true),
    engine.tokenize(PART_PREFIX, true),
    engine.tokenize(COMBINE_PREFIX, true),
    engine.tokenize(SUFFIX, false),
    engine.tokenize(CUT_MARKER, false),
    engine.tokenize(SEPARATOR, false),
  ]);
  return { whole, part, combine, suffix, marker, separator };
}

export const useSummariseStore = create<SummariseState>()((set, get) => {
  const sampling = () => useSettingsStore.getState().saved?.sampling;

  /**
   * One generation on a token-id prompt; `into` says where its text streams. `document`: the id
   * the engine keeps this prompt's cache under (the document, or one of its parts), so summarising
   * the same text again reuses it; the combining runs (a prompt made of summaries) pass none.
   */
  const run = async (ids: number[], into: (text: string) => void, document?: string): Promise<string> => {
    if (stopRequested) throw new Stopped();
    const { maxSummaryTokens } = get();
    const sample = sampling();
    const params = { maxTokens: maxSummaryTokens, ...(sample ? { sampling: sample } : {}), ...(document ? { document } : {}) };
    const generation = services().engine.generate({ ids }, params, {
      onText: into,
      onMetrics: (metrics) => set({ metrics }),
    });
    active = generation;
    try {
      const result = await generation.result;
      if (result.stopReason === 'cancelled' || stopRequested) throw new Stopped();
      if (result.stopReason === 'error') throw new Error(result.metrics.error?.message ?? 'the engine stopped with an error');
      return result.text.trim();
    } finally {
      if (active === generation) active = null;
    }
  };

  const streamSummary = (text: string): void => set((s) => ({ summary: s.summary + text }));
  const streamPart = (index: number) => (text: string) =>
    set((s) => {
      const parts = [...s.partSummaries];
      parts[index] = (parts[index] ?? '') + text;
      return { partSummaries: parts };
    });

  return {
    ...initial,

    setText: (text) => set({ text, sourceKind: 'paste', sourceName: '', readError: null, notice: null }),

    openFile: async (file) => {
      set({ reading: `Reading ${file.name}…`, readError: null, notice: null });
      try {
        const { kind, text } = await readSource(file, (progress) => set({ reading: progress }));
        set({ text, sourceKind: kind, sourceName: file.name, reading: null });
      } catch (e) {
        set({ reading: null, readError: message(e) });
      }
    },

    setPolicy: (policy) => set({ policy, notice: null }),
    setMaxSummaryTokens: (maxSummaryTokens) => set({ maxSummaryTokens }),

    count: async () => {
      const { text } = get();
      const model = useEngineStore.getState().model;
      if (!model || !text) {
        set({ tokenCount: null, countedText: null, countError: null });
        return;
      }
      try {
        const engine = services().engine;
        const ids = await engine.tokenize(text, false);
        let overhead = get().overhead;
        if (overhead?.modelPath !== model.path) {
          const pieces = await instructionIds();
          overhead = { modelPath: model.path, tokens: Math.max(pieces.whole.length, pieces.part.length) + pieces.suffix.length, markerTokens: pieces.marker.length };
        }
        // A newer text may have been counted meanwhile: keep the count of the text shown.
        if (get().text === text) set({ tokenCount: ids.length, countedText: text, overhead, countError: null });
      } catch (e) {
        set({ countError: message(e) });
      }
    },

    summarise: async () => {
      const { text, policy, maxSummaryTokens, running } = get();
      const model = useEngineStore.getState().model;
      if (running || !text.trim()) return;
      if (!model) {
        set({ error: 'Load a model on the Models page first.' });
        return;
      }
      stopRequested = false;
      set({ running: true, phase: null, notice: null, partSummaries: [], summary: '', error: null, metrics: null, copied: false });
      try {
        const engine = services().engine;
        const [ids, pieces] = await Promise.all([engine.tokenize(text, false), instructionIds()]);
        const context = model.contextLength;
        const overheadTokens = Math.max(pieces.whole.length, pieces.part.length) + pieces.suffix.length;
        set({ tokenCount: ids.length, countedText: text, overhead: { modelPath: model.path, tokens: overheadTokens, markerTokens: pieces.marker.length } });
        const budget = documentBudget({ contextLength: context, overheadTokens, maxSummaryTokens });
        const documentId = summaryDocumentId(text);
        const plan = planSummary(ids, budget, policy, { markerTokens: pieces.marker.length, maxSummaryTokens });

        if (plan.kind === 'refuse') {
          set({ notice: { tone: 'refused', text: plan.message } });
          return;
        }
        if (plan.kind === 'fits') {
          set({ phase: { kind: 'whole' } });
          await run([...pieces.whole, ...plan.ids, ...pieces.suffix], streamSummary, documentId);
          return;
        }
        if (plan.kind === 'truncate') {
          set({
            phase: { kind: 'whole' },
            notice: {
              tone: 'info',
              text: `The document is ${n(ids.length)} tokens; ${n(plan.dropped)} tokens were cut from the middle. The summary covers the first ${n(plan.head.length)} and the last ${n(plan.tail.length)} tokens.`,
            },
          });
          await run([...pieces.whole, ...plan.head, ...pieces.marker, ...plan.tail, ...pieces.suffix], streamSummary, documentId);
          return;
        }

        // split: summarise each part, then combine the summaries (in rounds, if they do not fit at once).
        const count = plan.parts.length;
        set({ notice: { tone: 'info', text: `The document is ${n(ids.length)} tokens; it is summarised in ${count} parts of at most ${n(budget)} tokens, then the part summaries are combined.` } });
        let summaries: string[] = [];
        for (const [index, part] of plan.parts.entries()) {
          set({ phase: { kind: 'part', index: index + 1, count } });
          summaries.push(await run([...pieces.part, ...part, ...pieces.suffix], streamPart(index), partDocumentId(documentId, index)));
        }
        const combineBudget = context - pieces.combine.length - pieces.suffix.length - maxSummaryTokens;
        for (;;) {
          const runs = await Promise.all(summaries.map((s) => engine.tokenize(s, false)));
          const groups = groupToFit(
            runs.map((r) => r.length),
            combineBudget,
            pieces.separator.length,
          );
          const groupIds = (group: number[]): number[] => {
            const joined = joinIds(group.map((i) => runs[i] ?? []), pieces.separator);
            if (joined.length <= combineBudget) return joined;
            const cut = truncateMiddle(joined, Math.max(1, combineBudget - pieces.marker.length));
            return [...cut.head, ...pieces.marker, ...cut.tail];
          };
          if (groups.length <= 1) {
            set({ phase: { kind: 'combine', summaries: summaries.length, group: 1, groups: 1 } });
            await run([...pieces.combine, ...groupIds(groups[0] ?? []), ...pieces.suffix], streamSummary);
            return;
          }
          const next: string[] = [];
          for (const [g, group] of groups.entries()) {
            set({ phase: { kind: 'combine', summaries: summaries.length, group: g + 1, groups: groups.length } });
            next.push(await run([...pieces.combine, ...groupIds(group), ...pieces.suffix], () => undefined));
          }
          summaries = next;
        }
      } catch (e) {
        if (e instanceof Stopped) set({ error: null, notice: { tone: 'info', text: 'Stopped. What was written so far is kept.' } });
        else set({ error: message(e) });
      } finally {
        active = null;
        set({ running: false, phase: null });
      }
    },

    stop: () => {
      stopRequested = true;
      active?.cancel();
    },

    copy: async () => {
      const { summary } = get();
      if (!summary) return;
      try {
        await navigator.clipboard.writeText(summary);
        set({ copied: true });
      } catch (e) {
        set({ error: `Could not copy: ${message(e)}` });
      }
    },
  };
});

export function resetSummariseStore(): void {
  active = null;
  stopRequested = false;
  useSummariseStore.setState(initial);
}
