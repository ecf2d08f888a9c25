// The shared engine of the seeded mutation fuzzers (vitest suites next to each reader, and
// bench/fuzz-readers.mjs for the long run). A target names its seed inputs, a mutator and an
// `exercise` that runs the reader on one input and returns an outcome class ('ok', or the typed
// error's code and stage); anything else thrown is a crash. There is no coverage feedback: the
// outcome class stands in for it, so a mutant whose class was not seen before joins the corpus
// and later mutants may start from it (stacked mutations reach deeper checks).
import { mulberry32 } from '../../fixtures/rng.ts';

export type Random = () => number;
export const seededRandom = (seed: number): Random => mulberry32(seed);
export const int = (random: Random, n: number): number => Math.floor(random() * n);
export const pick = <T>(random: Random, items: readonly T[]): T => items[int(random, items.length)]!;

export interface Mutant<I> {
  input: I;
  /** What the mutator did, for the report of a crash or a slow case. */
  what: string;
}

export interface FuzzTarget<I> {
  name: string;
  /** Valid inputs to start from (each must exercise to 'ok'). */
  seeds(): { name: string; input: I }[];
  mutate(input: I, random: Random): Mutant<I>;
  /** Runs the reader; returns the outcome class, or throws when the outcome is a crash. */
  exercise(input: I): string;
}

/** A case that threw something other than the reader's typed error. */
export class FuzzCrash extends Error {
  constructor(
    readonly target: string,
    readonly what: string,
    readonly seed: number,
    cause: unknown,
  ) {
    super(`${target}: seed ${seed} (${what}) threw ${cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause)}`, { cause });
    this.name = 'FuzzCrash';
  }
}

export interface FuzzReport {
  target: string;
  executions: number;
  /** Outcome class → count. */
  outcomes: Map<string, number>;
  /** Seeds plus mutants kept because their outcome class was new. */
  corpus: number;
  crashes: FuzzCrash[];
  /** Cases slower than the hang limit. */
  hangs: { what: string; seed: number; ms: number }[];
  slowest: { what: string; seed: number; ms: number };
  ms: number;
}

export interface FuzzOptions {
  seed: number;
  /** Stop after this many cases... */
  cases?: number;
  /** ...or after this much time (whichever comes first). */
  seconds?: number;
  /** A case slower than this counts as a hang (synchronous readers cannot be interrupted). */
  hangMs?: number;
  /** Stop at the first crash (tests) or collect them all (the bench). */
  stopOnCrash?: boolean;
}

/**
 * Runs `target` from its seeds. Each case's randomness comes from (options.seed, case index), so a
 * reported case can be replayed alone with `replay`.
 */
export function fuzz<I>(target: FuzzTarget<I>, options: FuzzOptions): FuzzReport {
  const hangMs = options.hangMs ?? 2_000;
  const corpus = target.seeds().map((seed) => seed.input);
  const report: FuzzReport = { target: target.name, executions: 0, outcomes: new Map(), corpus: corpus.length, crashes: [], hangs: [], slowest: { what: '', seed: 0, ms: 0 }, ms: 0 };
  for (const seed of target.seeds()) {
    const outcome = target.exercise(seed.input);
    if (outcome !== 'ok') throw new Error(`${target.name}: seed input ${seed.name} is not valid (${outcome})`);
  }
  const seen = new Set<string>(['ok']);
  const started = performance.now();
  const deadline = options.seconds === undefined ? Infinity : started + options.seconds * 1000;
  const maxCases = options.cases ?? Infinity;
  for (let i = 0; i < maxCases && performance.now() < deadline; i++) {
    const caseSeed = (options.seed + Math.imul(i, 0x9e3779b1)) >>> 0;
    const random = seededRandom(caseSeed);
    const parent = corpus[int(random, corpus.length)]!;
    const { input, what } = target.mutate(parent, random);
    const t0 = performance.now();
    let outcome: string;
    try {
      outcome = target.exercise(input);
    } catch (error) {
      const crash = new FuzzCrash(target.name, what, caseSeed, error);
      if (options.stopOnCrash) throw crash;
      report.crashes.push(crash);
      outcome = 'CRASH';
    }
    const ms = performance.now() - t0;
    report.executions++;
    report.outcomes.set(outcome, (report.outcomes.get(outcome) ?? 0) + 1);
    if (ms > report.slowest.ms) report.slowest = { what, seed: caseSeed, ms };
    if (ms > hangMs) report.hangs.push({ what, seed: caseSeed, ms });
    if (!seen.has(outcome) && outcome !== 'CRASH') {
      seen.add(outcome);
      corpus.push(input);
    }
  }
  report.corpus = corpus.length;
  report.ms = performance.now() - started;
  return report;
}

export function formatReport(report: FuzzReport): string {
  const classes = [...report.outcomes].sort((a, b) => b[1] - a[1]).map(([name, n]) => `    ${name.padEnd(48)} ${n}`);
  return [
    `${report.target}: ${report.executions} executions in ${(report.ms / 1000).toFixed(1)} s, ${report.outcomes.size} outcome classes, corpus ${report.corpus}, crashes ${report.crashes.length}, hangs ${report.hangs.length}, slowest ${report.slowest.ms.toFixed(1)} ms (seed ${report.slowest.seed}: ${report.slowest.what.slice(0, 100)})`,
    ...classes,
    ...report.crashes.slice(0, 5).map((crash) => `    crash: ${crash.message.slice(0, 300)}`),
  ].join('\n');
}

// ---- text mutations shared by the JSON and template targets ----

/** Flip 1–4 random bits of the UTF-8 bytes (may produce invalid UTF-8, decoded with U+FFFD). */
export function flipBytes(text: string, random: Random): Mutant<string> {
  const bytes = new TextEncoder().encode(text);
  const at: number[] = [];
  for (let n = 1 + int(random, 4); n > 0 && bytes.length > 0; n--) {
    const p = int(random, bytes.length);
    bytes[p]! ^= 1 << int(random, 8);
    at.push(p);
  }
  return { input: new TextDecoder().decode(bytes), what: `bit flips at ${at.join(',')}` };
}

export function truncate(text: string, random: Random): Mutant<string> {
  const n = int(random, text.length);
  return { input: text.slice(0, n), what: `truncated to ${n} chars` };
}

/** Insert `piece` at a random position. */
export function splice(text: string, random: Random, piece: string, label: string): Mutant<string> {
  const at = int(random, text.length + 1);
  return { input: text.slice(0, at) + piece + text.slice(at), what: `${label} at ${at}` };
}

/** Copy or delete a random span. */
export function shuffleSpan(text: string, random: Random): Mutant<string> {
  const from = int(random, text.length);
  const length = 1 + int(random, 40);
  if (random() < 0.5) return { input: text.slice(0, from) + text.slice(from + length), what: `deleted ${length} chars at ${from}` };
  const to = int(random, text.length + 1);
  return { input: text.slice(0, to) + text.slice(from, from + length) + text.slice(to), what: `copied ${length} chars from ${from} to ${to}` };
}
