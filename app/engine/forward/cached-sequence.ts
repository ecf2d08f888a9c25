// The sequence the loaded model's KV pool holds, as token ids, and prefix reuse over it.
//
//   generate(prompt) ─► reuse(prompt): the longest common prefix of the cached ids and the prompt,
//       at most prompt.length − 1 (the last prompt token always runs: its logits pick the first
//       token), cut back to a point where every policy's state is exact (runner.resumePoint) ─►
//       the pool is truncated there (later rows are freed, not left as candidates) ─► prefill runs
//       only the rest ─► decode appends; the ids follow every token that reaches the pool.
//
// Rules: only K/V computed with full attention at every layer are reused: prompt tokens (prefill is
// dense under every policy) and tokens decoded under 'full'. A token decoded under a sparse policy
// attended a subset at some layers, so its later layers' K/V differ from what a prefill of the same
// text computes; the next prompt recomputes it (and everything after it). That is what makes a
// reused run give token for token the text of a fresh run of the same prompt, for every policy.
// A pool that has evicted holds no prefix of the text any more, so it is never reused (the
// cache starts empty and done.cache.dropped says 'evicted'). A cancelled prefill keeps the chunks
// that ran through every layer (the runner does not roll them back), so the next prompt with the
// same start resumes there. Correctness rests on token ids alone: any cached sequence that shares a
// prefix with the prompt is a valid start, whichever document or request left it.
import { LonghandError } from '../../common/errors.ts';
import type { TokenRunner } from '../generate/loop.ts';
import type { ModelRunner } from './model-runner.ts';

export interface ReusePlan {
  /** prompt tokens whose K/V stay in the pool */
  reused: number;
  /** why cached tokens could not be used at all */
  dropped?: 'disabled' | 'evicted';
}

export class CachedSequence implements TokenRunner {
  /** ids of the tokens in the pool, in position order (ids[i] is at position i) */
  private ids: number[] = [];
  /** positions 0..exact−1 hold K/V computed with full attention at every layer (reusable) */
  private exact = 0;

  constructor(readonly runner: ModelRunner) {}

  get contextLength(): number {
    return this.runner.contextLength;
  }

  get eosIds(): readonly number[] {
    return this.runner.eosIds;
  }

  /** The cached token ids (position order). */
  get tokens(): readonly number[] {
    return this.ids;
  }

  /** Leading cached tokens whose K/V a prefill of the same text would compute too (what reuse and snapshots keep). */
  get exactTokens(): number {
    return this.exact;
  }

  /** Cuts the cache back to what `prompt` can reuse (see the file comment); prefill() then runs the rest. */
  reuse(prompt: readonly number[], allow: boolean): ReusePlan {
    this.checkInSync();
    const had = this.ids.length;
    if (!allow) {
      this.clear();
      return had > 0 ? { reused: 0, dropped: 'disabled' } : { reused: 0 };
    }
    if (this.runner.evictions().some((n) => n > 0)) {
      this.clear();
      return { reused: 0, dropped: 'evicted' };
    }
    const limit = Math.min(this.exact, prompt.length - 1);
    let common = 0;
    while (common < limit && this.ids[common] === prompt[common]) common++;
    const at = this.runner.resumePoint(common);
    this.cut(at);
    return { reused: at };
  }

  /** Runs the prompt tokens after the cached ones; `prompt` must start with them (reuse() did that). */
  async prefill(prompt: readonly number[], signal?: AbortSignal): Promise<Float32Array> {
    this.checkInSync();
    const n = this.ids.length;
    for (let i = 0; i < n; i++) {
      if (prompt[i] !== this.ids[i]) throw new LonghandError('INTERNAL', `prefill: the prompt differs from the cached sequence at position ${i} (reuse() was not called with it)`);
    }
    if (prompt.length <= n) throw new LonghandError('INTERNAL', `prefill: all ${prompt.length} prompt tokens are cached; reuse() keeps at most prompt.length − 1`);
    try {
      return await this.runner.prefill(prompt.slice(n), signal);
    } finally {
      // success: the whole prompt; an abort: the chunks that completed; another failure: what was there
      this.ids = prompt.slice(0, this.runner.position);
      this.exact = this.ids.length; // prefill attends densely under every policy
    }
  }

  async decode(id: number): Promise<Float32Array> {
    const logits = await this.runner.decode(id);
    this.ids.push(id);
    if (this.exact === this.ids.length - 1 && this.runner.policy === 'full') this.exact += 1;
    return logits;
  }

  /** Empties the cache. */
  clear(): void {
    this.runner.reset();
    this.ids = [];
    this.exact = 0;
  }

  /** The ids and rows of a restored snapshot are in the pool now. */
  adoptRestored(ids: readonly number[]): void {
    this.ids = ids.slice();
    this.exact = this.ids.length;
    this.checkInSync();
  }

  private cut(n: number): void {
    if (n < this.ids.length) {
      if (n === 0) this.runner.reset();
      else this.runner.truncate(n);
      this.ids.length = n;
    }
    this.exact = Math.min(this.exact, n);
  }

  private checkInSync(): void {
    if (this.runner.position !== this.ids.length) {
      throw new LonghandError('INTERNAL', `the cached sequence has ${this.ids.length} ids but the pool holds ${this.runner.position} tokens`);
    }
  }
}
