// How a document meets the model's context: pure token arithmetic, no engine, no React.
// Every prompt is [instruction prefix] + [document tokens] + [suffix], and the model still needs
// room for the summary it writes, so the document's budget is
//   context − prefix − suffix − (marker, when the middle is cut) − max summary tokens.
// A document over budget is never cut silently: the user's overflow policy says what happens.

export type OverflowPolicy = 'stop' | 'truncate-middle' | 'split';

export const OVERFLOW_POLICIES: readonly { id: OverflowPolicy; label: string; hint: string }[] = [
  { id: 'stop', label: 'Stop', hint: 'Refuse documents that do not fit.' },
  { id: 'truncate-middle', label: 'Cut the middle', hint: 'Keep the beginning and the end; the middle is left out (the count is shown).' },
  { id: 'split', label: 'Split into parts', hint: 'Summarise each part that fits, then summarise the summaries.' },
];

export interface BudgetInput {
  contextLength: number;
  /** Tokens of the instruction around the document (prefix + suffix). */
  overheadTokens: number;
  /** The most tokens the summary may take. */
  maxSummaryTokens: number;
}

/** Tokens the document itself may use in one prompt (≤ 0: not even the instruction fits). */
export function documentBudget({ contextLength, overheadTokens, maxSummaryTokens }: BudgetInput): number {
  return contextLength - overheadTokens - maxSummaryTokens;
}

export type Plan =
  | { kind: 'fits'; ids: number[] }
  /** Over budget and the policy is `stop`, or nothing can fit at all. */
  | { kind: 'refuse'; message: string; tokens: number; budget: number }
  | { kind: 'truncate'; head: number[]; tail: number[]; dropped: number }
  | { kind: 'split'; parts: number[][] };

const n = (value: number): string => value.toLocaleString('en-US');

/**
 * What to send for a document of `ids` under `policy`. `budget` is documentBudget(); for
 * `truncate-middle`, `markerTokens` (the "[…]" between head and tail) comes out of it too. `split`
 * needs room for two summaries in one prompt (`maxSummaryTokens`) so that combining converges.
 */
export function planSummary(ids: readonly number[], budget: number, policy: OverflowPolicy, options: { markerTokens?: number; maxSummaryTokens?: number } = {}): Plan {
  const tokens = ids.length;
  if (budget <= 0) {
    return { kind: 'refuse', tokens, budget, message: `The instruction and the summary's ${n(options.maxSummaryTokens ?? 0)} tokens already fill the model's context; lower the summary length or load the model with a longer context.` };
  }
  if (tokens <= budget) return { kind: 'fits', ids: [...ids] };
  if (policy === 'stop') {
    return {
      kind: 'refuse',
      tokens,
      budget,
      message: `The document is ${n(tokens)} tokens but only ${n(budget)} fit beside the instruction and the summary. Nothing was sent. Choose “Cut the middle” or “Split into parts”, shorten the text, or load the model with a longer context.`,
    };
  }
  if (policy === 'truncate-middle') {
    const keep = budget - (options.markerTokens ?? 0);
    if (keep <= 0) return { kind: 'refuse', tokens, budget, message: 'The context is too small to keep any of the document.' };
    return truncateMiddle(ids, keep);
  }
  const summary = options.maxSummaryTokens ?? 0;
  if (budget < 2 * summary) {
    return {
      kind: 'refuse',
      tokens,
      budget,
      message: `Splitting needs room for at least two summaries of ${n(summary)} tokens in one prompt (${n(2 * summary)}), but only ${n(budget)} fit. Lower the summary length or load a longer context.`,
    };
  }
  return { kind: 'split', parts: splitEven(ids, budget) };
}

/** The first ⌈keep/2⌉ and the last ⌊keep/2⌋ tokens, and how many were left out between them. */
export function truncateMiddle(ids: readonly number[], keep: number): Extract<Plan, { kind: 'truncate' }> {
  if (keep >= ids.length) return { kind: 'truncate', head: [...ids], tail: [], dropped: 0 };
  const headLength = Math.ceil(keep / 2);
  const tailLength = keep - headLength;
  return { kind: 'truncate', head: ids.slice(0, headLength), tail: tailLength > 0 ? ids.slice(ids.length - tailLength) : [], dropped: ids.length - keep };
}

/**
 * The fewest parts of at most `budget` tokens, as even as possible (lengths differ by at most
 * one; the longer parts come first), in document order, no overlap.
 */
export function splitEven(ids: readonly number[], budget: number): number[][] {
  if (budget <= 0) throw new RangeError('budget must be positive');
  if (ids.length === 0) return [];
  const count = Math.ceil(ids.length / budget);
  const base = Math.floor(ids.length / count);
  const extra = ids.length % count;
  const parts: number[][] = [];
  let at = 0;
  for (let i = 0; i < count; i++) {
    const length = base + (i < extra ? 1 : 0);
    parts.push(ids.slice(at, at + length));
    at += length;
  }
  return parts;
}

/**
 * Groups consecutive items (summaries of `sizes[i]` tokens, joined by `separatorTokens`) so each
 * group fits in `budget`; returns the indices of each group. An item larger than the budget
 * forms a group of its own (the caller cuts it).
 */
export function groupToFit(sizes: readonly number[], budget: number, separatorTokens = 0): number[][] {
  const groups: number[][] = [];
  let current: number[] = [];
  let used = 0;
  sizes.forEach((size, i) => {
    const cost = current.length === 0 ? size : used + separatorTokens + size;
    if (current.length > 0 && cost > budget) {
      groups.push(current);
      current = [i];
      used = size;
    } else {
      current.push(i);
      used = cost;
    }
  });
  if (current.length > 0) groups.push(current);
  return groups;
}

/** Joins token runs with a separator between them. */
export function joinIds(runs: readonly (readonly number[])[], separator: readonly number[]): number[] {
  const out: number[] = [];
  runs.forEach((run, i) => {
    if (i > 0) out.push(...separator);
    out.push(...run);
  });
  return out;
}
