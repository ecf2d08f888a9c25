// Stop strings over streamed text. Text arrives in pieces (one per token, as the stream decoder
// gives it); a stop string may be split across any number of pieces. The matcher holds back the
// longest tail that could still begin a stop string, so a stop string is never emitted, not even
// in part, and on a stop it emits exactly the text before the stop string.
//
// Which stop wins: the one that ENDS first in the text; among those ending at the same place,
// the longest (it starts earliest). That makes the result independent of how the text was cut
// into pieces: stops ["ab", "abc"] on "xabc" emit "x" whether "xabc" arrives whole or as
// "x" "a" "b" "c". Matching is by UTF-16 code units, exact (no case folding, no Unicode
// normalisation: "é" as U+00E9 does not match "e" + U+0301).
import { UsageError } from '../../common/errors.ts';

export interface StopStep {
  /** Text that is now safe to show. */
  emit: string;
  /** A stop string was found; `emit` is what came before it, and nothing follows. */
  stopped: boolean;
}

/** Checks a list of stop strings: each a non-empty string. Throws UsageError naming the index. */
export function validateStopStrings(stopStrings: readonly string[]): void {
  if (!Array.isArray(stopStrings)) throw new UsageError('stopStrings must be an array of strings', { field: 'stopStrings' });
  stopStrings.forEach((stop, i) => {
    if (typeof stop !== 'string' || stop.length === 0) {
      throw new UsageError(`stopStrings[${i}] must be a non-empty string`, { field: 'stopStrings', index: i });
    }
  });
}

export class StopMatcher {
  private readonly stops: readonly string[];
  private held = '';
  private done = false;
  private matchedStop: string | undefined;

  constructor(stopStrings: readonly string[]) {
    validateStopStrings(stopStrings);
    this.stops = [...new Set(stopStrings)];
  }

  /** True once a stop string has been seen. */
  get stopped(): boolean {
    return this.done;
  }

  /** The stop string that ended the text, if any. */
  get matched(): string | undefined {
    return this.matchedStop;
  }

  /** Text that is held back (a possible start of a stop string), not yet emitted. */
  get pending(): string {
    return this.held;
  }

  /** Feeds one piece. After a stop, further pieces are ignored ({ emit: '', stopped: true }). */
  push(piece: string): StopStep {
    if (this.done) return { emit: '', stopped: true };
    const text = this.held + piece;
    if (this.stops.length === 0) return { emit: text, stopped: false };

    // the earliest-ending complete match (the held text never contains one: it would have stopped)
    let bestEnd = Infinity;
    let bestStart = 0;
    let bestStop = '';
    for (const stop of this.stops) {
      const at = text.indexOf(stop);
      if (at < 0) continue;
      const end = at + stop.length;
      if (end < bestEnd || (end === bestEnd && at < bestStart)) {
        bestEnd = end;
        bestStart = at;
        bestStop = stop;
      }
    }
    if (bestEnd !== Infinity) {
      this.done = true;
      this.matchedStop = bestStop;
      this.held = '';
      return { emit: text.slice(0, bestStart), stopped: true };
    }

    // hold back the longest suffix that is a proper prefix of some stop string
    const keep = this.heldSuffixLength(text);
    this.held = text.slice(text.length - keep);
    return { emit: text.slice(0, text.length - keep), stopped: false };
  }

  /** End of the stream without a stop: the held-back text, which is then final. */
  flush(): string {
    const rest = this.done ? '' : this.held;
    this.held = '';
    return rest;
  }

  private heldSuffixLength(text: string): number {
    let best = 0;
    for (const stop of this.stops) {
      const max = Math.min(stop.length - 1, text.length);
      for (let len = max; len > best; len--) {
        if (text.endsWith(stop.slice(0, len))) {
          best = len;
          break;
        }
      }
    }
    return best;
  }
}
