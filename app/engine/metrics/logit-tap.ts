// Top-k log-probabilities of every logits row a generation samples from (GenerateParams.logprobs),
// for the inspector's A/B view: per step, top-1 agreement and KL between two policies' runs.
// It wraps the TokenRunner the loop drives, so neither the loop nor the forward pass changes: the
// first row comes from prefill (it picks token 0), each later one from decode (token i+1).
// The distribution is the model's own (softmax of the raw logits), whatever the sampler settings.
import type { TokenRunner } from '../generate/loop.ts';

export type TopLogprobs = [id: number, logprob: number][];

/** The k largest of softmax(logits) as [id, log p], most likely first (ties: lower id first). */
export function topLogprobs(logits: Float32Array, k: number): TopLogprobs {
  const n = logits.length;
  if (k <= 0 || n === 0) return [];
  let max = -Infinity;
  for (let i = 0; i < n; i++) {
    const x = logits[i]!;
    if (x > max) max = x; // NaN never wins
  }
  if (!Number.isFinite(max)) return [];
  let z = 0;
  for (let i = 0; i < n; i++) {
    const x = logits[i]!;
    if (x === x) z += Math.exp(x - max);
  }
  const logZ = max + Math.log(z);
  // k is small (<= 20): keep a sorted list of the best
  const ids: number[] = [];
  for (let i = 0; i < n; i++) {
    const x = logits[i]!;
    if (!(x === x)) continue;
    if (ids.length === k && x <= logits[ids[k - 1]!]!) continue;
    let at = ids.length;
    while (at > 0 && logits[ids[at - 1]!]! < x) at--;
    ids.splice(at, 0, i);
    if (ids.length > k) ids.pop();
  }
  return ids.map((id) => [id, Math.min(0, logits[id]! - logZ)]);
}

/** A TokenRunner that records the top-k of each row it returns, in order, for take(). */
export class LogitTap implements TokenRunner {
  private readonly queue: TopLogprobs[] = [];

  constructor(
    private readonly inner: TokenRunner,
    private readonly k: number,
  ) {}

  get contextLength(): number {
    return this.inner.contextLength;
  }

  get eosIds(): readonly number[] {
    return this.inner.eosIds;
  }

  async prefill(ids: readonly number[], signal?: AbortSignal): Promise<Float32Array> {
    return this.record(await this.inner.prefill(ids, signal));
  }

  async decode(id: number): Promise<Float32Array> {
    return this.record(await this.inner.decode(id));
  }

  /** The top-k of the row the next token was sampled from (undefined when none is queued). */
  take(): TopLogprobs | undefined {
    return this.queue.shift();
  }

  private record(logits: Float32Array): Float32Array {
    this.queue.push(topLogprobs(logits, this.k));
    return logits;
  }
}
