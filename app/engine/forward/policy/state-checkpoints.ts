// Checkpoints of a comparison policy's own state (H2O's mass, SnapKV's window queries) at prompt
// chunk ends, so that a cut back into a prompt (an edit in the middle of a draft, a Continue after
// decode steps, a snapshot) lands where the state is what a fresh prefill leaves. At most `max` are
// kept; past that the one whose removal leaves the smallest gap goes (never the newest, the end of
// the latest prompt, where a Continue cuts back to), so a long prompt keeps points spread over its
// whole length, as kv/ring-checkpoints.ts does for the rings.

import { thinnestCheckpoint } from '../../kv/ring-checkpoints.ts';

/** Checkpoints per policy (H2O, SnapKV): each costs H2O kvHeads·E floats and SnapKV window·heads·d floats per sparse layer. */
export const POLICY_CHECKPOINTS = 8;

export class StateCheckpoints<T> {
  /** ascending positions and their states */
  private readonly held: { at: number; state: T }[] = [];

  constructor(private readonly max: number = POLICY_CHECKPOINTS) {}

  /** Keeps `state()` at position `at` (after every older one; an existing one at `at` stays). */
  take(at: number, state: () => T): void {
    if (this.max <= 0 || this.get(at) !== undefined) return;
    this.held.push({ at, state: state() });
    this.held.sort((a, b) => a.at - b.at);
    while (this.held.length > this.max) this.held.splice(thinnestCheckpoint(this.held), 1);
  }

  get(at: number): T | undefined {
    return this.held.find((h) => h.at === at)?.state;
  }

  /** The newest position <= n held, or undefined. */
  atOrBefore(n: number): number | undefined {
    for (let i = this.held.length - 1; i >= 0; i--) if (this.held[i]!.at <= n) return this.held[i]!.at;
    return undefined;
  }

  /** Positions held, ascending. */
  positions(): number[] {
    return this.held.map((h) => h.at);
  }

  /** Forgets the checkpoints past n (their state is of text that is cut away). */
  truncate(n: number): void {
    while (this.held.length > 0 && this.held[this.held.length - 1]!.at > n) this.held.pop();
  }
}
