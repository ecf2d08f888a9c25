// Render-rate limits for streamed output: token text is flushed at most once per animation
// frame, live metrics at most 10 times a second. Both are injectable so tests can drive them.

export type FrameScheduler = (callback: () => void) => () => void;

/** requestAnimationFrame where there is one (a hidden tab pauses it; 50 ms timers elsewhere). */
export const animationFrame: FrameScheduler = (callback) => {
  if (typeof requestAnimationFrame === 'function') {
    const id = requestAnimationFrame(() => callback());
    return () => cancelAnimationFrame(id);
  }
  const id = setTimeout(callback, 16);
  return () => clearTimeout(id);
};

/** Collects text pieces and hands them over concatenated, once per frame. */
export class TextBatcher {
  private pending = '';
  private cancelFrame: (() => void) | undefined;

  constructor(
    private readonly deliver: (text: string) => void,
    private readonly schedule: FrameScheduler = animationFrame,
  ) {}

  push(text: string): void {
    if (text.length === 0) return;
    this.pending += text;
    this.cancelFrame ??= this.schedule(() => {
      this.cancelFrame = undefined;
      this.flush();
    });
  }

  /** Delivers whatever is pending now (before a `done`, so no text is lost or reordered). */
  flush(): void {
    this.cancelFrame?.();
    this.cancelFrame = undefined;
    if (this.pending.length === 0) return;
    const text = this.pending;
    this.pending = '';
    this.deliver(text);
  }
}

/** Calls `fn` with the latest value at most once per `intervalMs` (leading + trailing edge). */
export class Throttle<T> {
  private last = -Infinity;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private latest: T | undefined;
  private hasLatest = false;

  constructor(
    private readonly fn: (value: T) => void,
    private readonly intervalMs = 100,
    private readonly now: () => number = () => performance.now(),
  ) {}

  push(value: T): void {
    this.latest = value;
    this.hasLatest = true;
    const wait = this.last + this.intervalMs - this.now();
    if (wait <= 0) this.fire();
    else this.timer ??= setTimeout(() => this.fire(), wait);
  }

  /** Fires a pending value now (the final metrics of a generation are never dropped). */
  flush(): void {
    if (this.hasLatest) this.fire();
  }

  cancel(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.hasLatest = false;
  }

  private fire(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.hasLatest) return;
    this.hasLatest = false;
    this.last = this.now();
    this.fn(this.latest as T);
  }
}
