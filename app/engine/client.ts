// A client of the engine host: starts the host process, sends protocol requests, and turns
// the events back into promises and async iterators. The CLI, the tests and the browser-mode
// server use it; Electron's main process speaks the same protocol over a MessagePort.
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LonghandError, type ErrorCode } from '../common/errors.ts';
import {
  parseEngineEvent,
  type EngineEvent,
  type EngineRequestInput,
  type ErrorPayload,
  type GenerateParamsInput,
  type LoadOptionsInput,
  type LoadProgress,
  type ModelInfo,
  type Prompt,
  type SessionFileRequest,
  type SnapshotStatsPayload,
  type TestFaultRequest,
} from '../common/protocol.ts';

const HOST_ENTRY = join(dirname(fileURLToPath(import.meta.url)), 'host', 'main.ts');

type Listener = (event: EngineEvent) => void;

/** How the host process ended, and the ENGINE_CRASHED error its in-flight requests got. */
export interface EngineExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  error: LonghandError;
}

/** Signals that mean the process itself faulted (Chromium counts the same ones as a crash). */
const FAULT_SIGNALS = new Set(['SIGSEGV', 'SIGBUS', 'SIGILL', 'SIGFPE', 'SIGABRT', 'SIGTRAP', 'SIGSYS']);

/** ENGINE_CRASHED naming the signal or exit code; details: code, signal. */
export function engineExitError(code: number | null, signal: NodeJS.Signals | null): LonghandError {
  const why = signal
    ? FAULT_SIGNALS.has(signal)
      ? `crashed with ${signal} (a fault in native code)`
      : `was killed by ${signal}`
    : `exited with code ${code}`;
  return new LonghandError('ENGINE_CRASHED', `the engine process ${why}`, { code, signal });
}

export function errorFromPayload(payload: ErrorPayload): LonghandError {
  return new LonghandError(payload.code, payload.message, payload.details);
}

export class EngineClient {
  private readonly listeners = new Map<string, Listener>();
  private exitError: LonghandError | undefined;
  private exit: EngineExit | undefined;
  private readonly exitListeners: ((exit: EngineExit) => void)[] = [];

  private constructor(
    private readonly child: ChildProcess,
    readonly pid: number,
  ) {
    child.on('message', (message) => {
      let event: EngineEvent;
      try {
        event = parseEngineEvent(message);
      } catch {
        return; // a host that speaks another protocol: ignore what we cannot read
      }
      if ('requestId' in event) this.listeners.get(event.requestId)?.(event);
    });
    child.on('exit', (code, signal) => {
      this.exitError = engineExitError(code, signal);
      for (const listener of [...this.listeners.values()]) {
        listener({ kind: 'error', requestId: '', error: this.exitError.toJSON() as ErrorPayload });
      }
      this.listeners.clear();
      this.exit = { code, signal, error: this.exitError };
      for (const listener of this.exitListeners.splice(0)) listener(this.exit);
    });
  }

  /** Set once the host process has ended. */
  get exited(): EngineExit | undefined {
    return this.exit;
  }

  /**
   * Calls `listener` once when the host process ends (at once if it already has), after every
   * in-flight request got its ENGINE_CRASHED error. Returns an unsubscribe function.
   */
  onExit(listener: (exit: EngineExit) => void): () => void {
    if (this.exit) {
      listener(this.exit);
      return () => undefined;
    }
    this.exitListeners.push(listener);
    return () => {
      const index = this.exitListeners.indexOf(listener);
      if (index >= 0) this.exitListeners.splice(index, 1);
    };
  }

  /** Starts an engine host process and waits until it says it is ready. */
  static async start(options: { env?: NodeJS.ProcessEnv } = {}): Promise<EngineClient> {
    const child = fork(HOST_ENTRY, [], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: options.env ?? process.env,
    });
    const pid = await new Promise<number>((resolve, reject) => {
      const onMessage = (message: unknown) => {
        const event = parseEngineEvent(message);
        if (event.kind === 'ready') {
          child.off('exit', onExit);
          child.off('message', onMessage);
          resolve(event.pid);
        }
      };
      const onExit = (code: number | null) => reject(new LonghandError('ENGINE_CRASHED', `the engine process failed to start (exit ${code})`, { code }));
      child.on('message', onMessage);
      child.once('exit', onExit);
      child.once('error', (error) => reject(new LonghandError('ENGINE_CRASHED', `the engine process failed to start: ${error.message}`)));
    });
    return new EngineClient(child, pid);
  }

  private send(request: EngineRequestInput | SessionFileRequest): void {
    if (this.exitError) throw this.exitError;
    this.child.send(request);
  }

  /** One request, one answer event (or a typed error). */
  private call<K extends EngineEvent['kind']>(
    request: EngineRequestInput | SessionFileRequest,
    answer: K,
    onProgress?: (event: Extract<EngineEvent, { kind: 'loadProgress' }>) => void,
  ): Promise<Extract<EngineEvent, { kind: K }>> {
    return new Promise((resolve, reject) => {
      this.listeners.set(request.requestId, (event) => {
        if (event.kind === 'loadProgress') {
          onProgress?.(event);
          return;
        }
        this.listeners.delete(request.requestId);
        if (event.kind === answer) resolve(event as Extract<EngineEvent, { kind: K }>);
        else if (event.kind === 'error') reject(errorFromPayload(event.error));
        else reject(new LonghandError('PROTOCOL_BAD_MESSAGE', `expected '${answer}', got '${event.kind}'`));
      });
      try {
        this.send(request);
      } catch (error) {
        this.listeners.delete(request.requestId);
        reject(error);
      }
    });
  }

  /** `onProgress`: the host's loadProgress events (stages of the forward pass built so far). */
  async load(options: LoadOptionsInput, onProgress?: (progress: LoadProgress) => void): Promise<ModelInfo> {
    return (await this.call({ kind: 'load', requestId: randomUUID(), options }, 'loaded', onProgress && (({ done, total }) => onProgress({ done, total })))).model;
  }

  async unload(): Promise<void> {
    await this.call({ kind: 'unload', requestId: randomUUID() }, 'unloaded');
  }

  async tokenize(text: string, addSpecial = true): Promise<number[]> {
    return (await this.call({ kind: 'tokenize', requestId: randomUUID(), text, addSpecial }, 'tokenized')).ids;
  }

  /**
   * Saves the cached sequence to `path` or replaces it with the one saved there. Only a host started
   * with LONGHAND_SESSION_FILES=1 in its environment takes these (the CLI's); others refuse them.
   */
  async sessionFile(action: 'save' | 'load', path: string): Promise<{ tokens: number; bytes: number; ms: number }> {
    const { tokens, bytes, ms } = await this.call({ kind: 'sessionFile', requestId: randomUUID(), action, path }, 'sessionFile');
    return { tokens, bytes, ms };
  }

  /** Document snapshots: the folder's figures, a new size cap, or all deleted (see the 'snapshots' request). */
  async snapshots(action: 'stats' | 'setCap' | 'clear', capBytes?: number): Promise<SnapshotStatsPayload> {
    return (await this.call({ kind: 'snapshots', requestId: randomUUID(), action, ...(capBytes !== undefined ? { capBytes } : {}) }, 'snapshots')).stats;
  }

  /**
   * Streams one generation's events (prompt, token…, done). Aborting `signal` sends a cancel;
   * the stream still ends with `done` (stopReason 'cancelled'). A request the engine refuses
   * throws its typed error.
   */
  async *generate(prompt: Prompt, params: GenerateParamsInput = {}, signal?: AbortSignal): AsyncGenerator<Extract<EngineEvent, { kind: 'prompt' | 'routing' | 'token' | 'metrics' | 'done' }>> {
    const requestId = randomUUID();
    const pending: EngineEvent[] = [];
    let wake: (() => void) | undefined;
    this.listeners.set(requestId, (event) => {
      pending.push(event);
      wake?.();
    });
    const onAbort = () => {
      if (!this.exitError) this.child.send({ kind: 'cancel', requestId: randomUUID(), target: requestId } satisfies EngineRequestInput);
    };
    try {
      this.send({ kind: 'generate', requestId, prompt, params });
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
      for (;;) {
        while (pending.length === 0) await new Promise<void>((resolve) => (wake = resolve));
        const event = pending.shift()!;
        if (event.kind === 'error') throw errorFromPayload(event.error);
        if (event.kind === 'prompt' || event.kind === 'routing' || event.kind === 'token' || event.kind === 'metrics') yield event;
        else if (event.kind === 'done') {
          yield event;
          return;
        }
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      this.listeners.delete(requestId);
    }
  }

  /** Ends the host process (gracefully: disconnect; then SIGKILL after `graceMs`). */
  async close(graceMs = 2000): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.disconnect();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  }

  /**
   * Test only: asks the host to kill itself with a real native fault. Resolves with the exit when
   * the process dies; rejects with the host's typed error when it refuses (a host started
   * without LONGHAND_TEST_FAULTS=1 answers PROTOCOL_BAD_MESSAGE and lives on).
   */
  testFault(fault: TestFaultRequest['fault']): Promise<EngineExit> {
    const requestId = randomUUID();
    return new Promise((resolve, reject) => {
      const off = this.onExit((exit) => {
        this.listeners.delete(requestId);
        resolve(exit);
      });
      this.listeners.set(requestId, (event) => {
        this.listeners.delete(requestId);
        if (event.kind === 'error' && event.requestId === requestId) {
          off();
          reject(errorFromPayload(event.error));
        }
      });
      if (this.exitError) return; // onExit has already resolved
      this.child.send({ kind: 'testFault', requestId, fault } satisfies TestFaultRequest);
    });
  }

  /** For tests of crash handling. */
  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.child.kill(signal);
  }
}

export function isErrorCode(error: unknown, code: ErrorCode): boolean {
  return error instanceof LonghandError && error.code === code;
}
