// The single engine serves one generation at a time (a second one gets ENGINE_BUSY), so every
// job that uses it waits here, first in, first out. A job whose client went away while it
// waited is dropped when its turn comes, without touching the engine.
export class QueueAbortedError extends Error {
  constructor() {
    super('the request was abandoned while it waited in the queue');
  }
}

export class EngineQueue {
  private tail: Promise<void> = Promise.resolve();
  private waitingCount = 0;
  private runningCount = 0;

  /** Jobs waiting for their turn (the running one not included). */
  get waiting(): number {
    return this.waitingCount;
  }

  get running(): boolean {
    return this.runningCount > 0;
  }

  run<T>(job: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    this.waitingCount++;
    const result = this.tail.then(async () => {
      this.waitingCount--;
      if (signal?.aborted) throw new QueueAbortedError();
      this.runningCount++;
      try {
        return await job();
      } finally {
        this.runningCount--;
      }
    });
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}
