// Accuracy of a KV policy against 'full' (ARCHITECTURE.md §8): teacher-forced over a text's tokens.
//
//   ids ─► prefill ids[0..P) (dense under every policy) ─► for i = P .. n−2: decode(ids[i]) and
//          compare the logits that predict ids[i+1] ─► perplexity, top-1 agreement with the
//          reference, KL(reference ‖ policy), fetch ratio and bytes per token from lastStepStats().
//
// Every prediction compared comes from a decode step, so a sparse policy is exercised on each one
// (InfiniGen only selects in decode). The reference is either a second runner stepped in lockstep
// (memory O(vocab)) or logits recorded before (referenceLogits), which benchmarks reuse across settings.
// Pure logic over ModelRunner; no I/O.
import type { StepStats, ModelRunner } from '../forward/model-runner.ts';
import { kvRowBytes } from '../model/memory-estimate.ts';

/** Default prompt tokens before teacher forcing starts (short, so most positions are decode steps). */
export const DEFAULT_PREFILL_TOKENS = 8;

export interface TeacherForceOptions {
  /** Tokens prefilled before the decode steps (default 8; at least 1, less than the text). */
  prefillTokens?: number;
  signal?: AbortSignal;
}

/** Logits of each prediction made by a decode step: [i] predicts ids[P + 1 + i]. */
export async function referenceLogits(runner: ModelRunner, ids: readonly number[], opts: TeacherForceOptions = {}): Promise<Float32Array[]> {
  const out: Float32Array[] = [];
  await teacherForce(runner, ids, opts, (_i, logits) => {
    out.push(logits.slice());
  });
  return out;
}

/** Runs the teacher-forced pass; `onStep(i, logits, stats)` for each decode step i (predicting ids[P + 1 + i]). */
export async function teacherForce(
  runner: ModelRunner,
  ids: readonly number[],
  opts: TeacherForceOptions,
  onStep: (i: number, logits: Float32Array, stats: StepStats | undefined) => void | Promise<void>,
): Promise<void> {
  const P = checkPrefill(ids.length, opts.prefillTokens);
  if (ids.length > runner.contextLength) throw new RangeError(`the text has ${ids.length} tokens, the context holds ${runner.contextLength}`);
  runner.reset();
  await runner.prefill(ids.slice(0, P), opts.signal);
  for (let t = P; t < ids.length - 1; t++) {
    const logits = await runner.decode(ids[t]!, opts.signal);
    await onStep(t - P, logits, runner.lastStepStats());
  }
}

function checkPrefill(n: number, prefill = DEFAULT_PREFILL_TOKENS): number {
  if (!Number.isInteger(prefill) || prefill < 1) throw new RangeError(`prefillTokens must be a positive integer, got ${prefill}`);
  if (n < prefill + 2) throw new RangeError(`the text needs at least ${prefill + 2} tokens (prefill ${prefill} + 2), has ${n}`);
  return prefill;
}

export interface AccuracyResult {
  /** predictions compared (decode steps) */
  positions: number;
  /** exp(mean NLL of the next token) under the policy and under the reference */
  perplexity: number;
  referencePerplexity: number;
  /** perplexity / referencePerplexity */
  perplexityRatio: number;
  /** share of positions whose argmax equals the reference's */
  top1Agreement: number;
  /** mean KL(reference ‖ policy) in nats */
  meanKl: number;
  /** mean over steps of the step's fetch ratio (mean over sparse layers; 1 without step figures) */
  fetchRatio: number;
  /** mean K+V bytes moved per step (all layers); dense bytes when the runner has no step figures */
  bytesPerToken: number;
}

/** Adds up the per-position comparison; result() gives the means. */
export class AccuracyAccumulator {
  private n = 0;
  private agree = 0;
  private nll = 0;
  private nllRef = 0;
  private kl = 0;
  private fetch = 0;
  private bytes = 0;

  /**
   * One prediction: `ref` and `logits` [vocab], `next` the true next id, `stats` the policy's step
   * figures, `denseBytes` what the step moves when every past row is read (used without stats).
   */
  add(ref: Float32Array, logits: Float32Array, next: number, stats: StepStats | undefined, denseBytes: number): void {
    const lr = logSoftmax(ref);
    const lp = logSoftmax(logits);
    this.n++;
    if (argmax(ref) === argmax(logits)) this.agree++;
    this.nll -= lp[next]!;
    this.nllRef -= lr[next]!;
    let kl = 0;
    for (let j = 0; j < lr.length; j++) {
      const p = Math.exp(lr[j]!);
      if (p > 0) kl += p * (lr[j]! - lp[j]!);
    }
    this.kl += Math.max(0, kl);
    this.fetch += stats ? stats.fetchRatio : 1;
    this.bytes += stats ? stats.bytes : denseBytes;
  }

  result(): AccuracyResult {
    const n = Math.max(1, this.n);
    return {
      positions: this.n,
      perplexity: Math.exp(this.nll / n),
      referencePerplexity: Math.exp(this.nllRef / n),
      perplexityRatio: Math.exp((this.nll - this.nllRef) / n),
      top1Agreement: this.agree / n,
      meanKl: this.kl / n,
      fetchRatio: this.fetch / n,
      bytesPerToken: this.bytes / n,
    };
  }
}

/** K+V bytes of reading every row of `positions` past tokens in every layer. */
export function denseStepBytes(runner: ModelRunner, hyper: { layers: number; kvHeads: number; headDim: number }, positions: number): number {
  return positions * hyper.layers * hyper.kvHeads * 2 * kvRowBytes(runner.kvType, hyper.headDim);
}

export interface CompareOptions extends TeacherForceOptions {
  hyper: { layers: number; kvHeads: number; headDim: number };
}

/**
 * Teacher-forces `ids` through `candidate` and compares each prediction with `reference`: a runner
 * stepped in lockstep, or the logits referenceLogits() recorded with the same prefill.
 */
export async function compareWithReference(candidate: ModelRunner, reference: ModelRunner | readonly Float32Array[], ids: readonly number[], opts: CompareOptions): Promise<AccuracyResult> {
  const P = checkPrefill(ids.length, opts.prefillTokens);
  const acc = new AccuracyAccumulator();
  if (Array.isArray(reference)) {
    const refs = reference as readonly Float32Array[];
    if (refs.length !== ids.length - P - 1) throw new RangeError(`reference logits cover ${refs.length} positions, the text ${ids.length - P - 1}`);
    await teacherForce(candidate, ids, opts, (i, logits, stats) => {
      acc.add(refs[i]!, logits, ids[P + 1 + i]!, stats, denseStepBytes(candidate, opts.hyper, P + i));
    });
    return acc.result();
  }
  const ref = reference as ModelRunner;
  if (ref === candidate) throw new RangeError('the reference and the candidate must be different runners');
  ref.reset();
  await ref.prefill(ids.slice(0, P), opts.signal);
  await teacherForce(candidate, ids, opts, async (i, logits, stats) => {
    const r = await ref.decode(ids[P + i]!, opts.signal);
    acc.add(r, logits, ids[P + 1 + i]!, stats, denseStepBytes(candidate, opts.hyper, P + i));
  });
  return acc.result();
}

export interface DivergenceResult {
  /** greedy ids after the prompt, per runner */
  reference: number[];
  candidate: number[];
  /** index (0-based, among generated tokens) of the first differing token; null when none differ */
  firstDivergence: number | null;
}

/** Greedy free runs of `tokens` tokens from the same prompt under both runners. */
export async function firstDivergence(reference: ModelRunner, candidate: ModelRunner, prompt: readonly number[], tokens: number, signal?: AbortSignal): Promise<DivergenceResult> {
  if (!Number.isInteger(tokens) || tokens < 1) throw new RangeError(`tokens must be a positive integer, got ${tokens}`);
  if (prompt.length < 1) throw new RangeError('the prompt needs at least one token');
  const run = async (r: ModelRunner): Promise<number[]> => {
    r.reset();
    const n = Math.min(tokens, r.contextLength - prompt.length);
    let logits = await r.prefill(prompt, signal);
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      const id = argmax(logits);
      out.push(id);
      if (i + 1 < n) logits = await r.decode(id, signal);
    }
    return out;
  };
  const a = await run(reference);
  const b = await run(candidate);
  let first: number | null = null;
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) {
      first = i;
      break;
    }
  }
  return { reference: a, candidate: b, firstDivergence: first };
}

export function argmax(x: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

/** log softmax in float64. */
export function logSoftmax(x: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < x.length; i++) max = Math.max(max, x[i]!);
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += Math.exp(x[i]! - max);
  const lse = max + Math.log(sum);
  const out = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = x[i]! - lse;
  return out;
}
