// Supervises the engine host process (ARCHITECTURE.md §1): starts it, connects one message
// channel per window to it, relays and tracks requests, and when the process dies turns what
// Electron reports into a typed reason, rejects what was in flight and decides whether to
// restart. Plain TypeScript with the process factory injected, so every rule is tested under
// Node with fakes (test/electron/engine-supervisor.test.ts); index.ts plugs in
// utilityProcess.fork and MessageChannelMain.
//
// Rules:
//  - A crash restarts the host after a backoff of 500 ms · 2^(n−1) (at most 8 s), n = crashes in
//    the last 60 s; a 4th crash within 60 s stops automatic restarts.
//  - Never restarted automatically after an out-of-memory, nor after the same model crashed the
//    host while loading twice (a deterministic load failure).
//  - Every request that crossed to the host and has not had its answer (loaded, unloaded,
//    tokenized, done, error) is answered with an ENGINE_CRASHED error naming the reason.
//  - restart() (the user asked) always starts a fresh host and forgets the crash count.
import { parseEngineEvent, type EngineEvent, type EngineRequest, type ErrorPayload } from '../common/protocol.ts';
import type { EngineStatus } from '../common/window-api.ts';

/** One end of a message channel: Electron's MessagePortMain, or a fake in tests. */
export interface PortLike {
  postMessage(message: unknown): void;
  on(event: 'message', listener: (event: { data: unknown }) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  start(): void;
  close(): void;
}

/** The engine host process: Electron's UtilityProcess, or a fake in tests. */
export interface HostProcess {
  readonly pid: number | undefined;
  postMessage(message: unknown, transfer?: PortLike[]): void;
  kill(): boolean;
  on(event: 'spawn', listener: () => void): unknown;
  on(event: 'exit', listener: (code: number) => void): unknown;
  on(event: 'error', listener: (type: string, location: string, report: string) => void): unknown;
}

/** What app's 'child-process-gone' says about the host (details.reason, details.exitCode). */
export interface GoneDetails {
  reason: string;
  exitCode: number;
}

export type CrashReason = Extract<EngineStatus, { state: 'crashed' }>['reason'];

/** The message main sends the host with each port (the host's side: app/engine/host/utility-channel.ts). */
export interface ConnectMessage {
  kind: 'connect';
  client: string;
}

export interface SupervisorOptions {
  fork: () => HostProcess;
  createChannel: () => { port1: PortLike; port2: PortLike };
  log?: (message: string) => void;
  now?: () => number;
  maxRestarts?: number;
  restartWindowMs?: number;
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** A host that has not said 'ready' by then is killed and reported as launch-failed. */
  readyTimeoutMs?: number;
  /** How long to wait after 'exit' for app's 'child-process-gone' details. */
  exitSettleMs?: number;
}

// Windows' exit code for an out-of-memory termination (Chromium's kOomExceptionCode).
const WINDOWS_OOM_EXIT_CODES = new Set([0xe0000008, 0xe0000008 - 2 ** 32]);
const OOM_FATAL_ERROR = /out of memory|heap limit|allocation failed|oom/i;

/** Turns what is known about an unexpected exit into one typed reason and a readable message. */
export function classifyExit(input: {
  exitCode: number | null;
  gone?: GoneDetails;
  fatalError?: string;
  everReady: boolean;
  readyTimedOut?: boolean;
  loadingModel?: string;
}): { reason: CrashReason; message: string } {
  const code = input.gone?.exitCode ?? input.exitCode;
  const codeText = code === null || code === undefined ? '' : ` (exit code ${code})`;
  const during = input.loadingModel ? ` while loading ${baseName(input.loadingModel)}` : '';
  const goneReason = input.gone?.reason;
  if (goneReason === 'oom' || goneReason === 'memory-eviction' || (code !== null && WINDOWS_OOM_EXIT_CODES.has(code)) || (input.fatalError !== undefined && OOM_FATAL_ERROR.test(input.fatalError))) {
    return { reason: 'oom', message: `The engine ran out of memory${during}. Try a smaller model, a shorter context or a smaller KV budget, then restart the engine.` };
  }
  if (input.readyTimedOut) return { reason: 'launch-failed', message: 'The engine did not start in time and was stopped.' };
  if (goneReason === 'launch-failed' || goneReason === 'integrity-failure' || (!input.everReady && goneReason === undefined)) {
    const why = goneReason === 'integrity-failure' ? ': the application files failed their integrity check (reinstall Longhand)' : codeText;
    return { reason: 'launch-failed', message: `The engine could not start${why}.` };
  }
  if (goneReason === 'killed') {
    return { reason: 'killed', message: `The engine process was killed${during} (by the system or another program; often because memory ran low).` };
  }
  return { reason: 'crashed', message: `The engine crashed${during}${codeText}.` };
}

function baseName(path: string): string {
  return path.split(/[\\/]/).filter(Boolean).pop() ?? path;
}

interface Client {
  id: string;
  deliver: (event: EngineEvent) => void;
  hostPort: PortLike | undefined;
  /** Requests that crossed (or wait to cross) and have no answer yet: requestId → load path or ''. */
  inFlight: Map<string, string>;
  /** Requests made while no host was connected, sent on the next connect. */
  pending: EngineRequest[];
}

interface Generation {
  process: HostProcess;
  control: PortLike;
  everReady: boolean;
  expectedExit: boolean;
  readyTimedOut: boolean;
  exited: boolean;
  exitCode: number | null;
  gone: GoneDetails | undefined;
  fatalError: string | undefined;
  readyTimer: ReturnType<typeof setTimeout> | undefined;
  settleTimer: ReturnType<typeof setTimeout> | undefined;
}

const MAX_PENDING = 256;
const TERMINAL_EVENTS = new Set<EngineEvent['kind']>(['loaded', 'unloaded', 'tokenized', 'snapshots', 'done', 'error']);

export class EngineSupervisor {
  private readonly options: Required<SupervisorOptions>;
  private readonly clients = new Map<string, Client>();
  private readonly statusListeners = new Set<(status: EngineStatus) => void>();
  private current: Generation | undefined;
  private restartTimer: ReturnType<typeof setTimeout> | undefined;
  private crashTimes: number[] = [];
  /** Model path → how many times the host died while loading it (reset by a successful load). */
  private readonly loadCrashes = new Map<string, number>();
  private state: EngineStatus = { state: 'starting' };
  private stopped = false;

  constructor(options: SupervisorOptions) {
    this.options = {
      log: (message) => console.warn(message),
      now: () => Date.now(),
      maxRestarts: 3,
      restartWindowMs: 60_000,
      backoffBaseMs: 500,
      backoffMaxMs: 8_000,
      readyTimeoutMs: 30_000,
      exitSettleMs: 100,
      ...options,
    };
  }

  get status(): EngineStatus {
    return this.state;
  }

  onStatus(listener: (status: EngineStatus) => void): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  /** Starts the host (once; later starts go through restart()). */
  start(): void {
    if (this.current || this.stopped) return;
    this.setStatus({ state: 'starting' });
    this.launch();
  }

  /** A window's engine channel: events for its requests go to `deliver`. */
  addClient(id: string, deliver: (event: EngineEvent) => void): void {
    this.removeClient(id);
    const client: Client = { id, deliver, hostPort: undefined, inFlight: new Map(), pending: [] };
    this.clients.set(id, client);
    if (this.current && !this.current.exited) this.connect(client);
  }

  /** The window went away (closed, reloaded): its host port closes; the host cancels nothing by itself. */
  removeClient(id: string): void {
    const client = this.clients.get(id);
    if (!client) return;
    this.clients.delete(id);
    client.hostPort?.close();
  }

  /** A request the IPC layer has already validated. */
  send(id: string, request: EngineRequest): void {
    const client = this.clients.get(id);
    if (!client) return;
    if (request.kind !== 'cancel') client.inFlight.set(request.requestId, request.kind === 'load' ? request.options.modelPath : '');
    if (client.hostPort) {
      client.hostPort.postMessage(request);
      return;
    }
    if (this.state.state === 'crashed' && !this.state.willRestart) {
      this.reject(client, request.requestId, `The engine is not running: ${this.state.message}`, this.state.reason);
      return;
    }
    if (client.pending.length >= MAX_PENDING) {
      this.reject(client, request.requestId, 'The engine is restarting and too many requests are waiting.', 'crashed');
      return;
    }
    client.pending.push(request);
  }

  /** From app's 'child-process-gone' for this service: the reason Electron saw. */
  noteProcessGone(details: GoneDetails): void {
    const generation = this.current;
    if (!generation) return;
    generation.gone = { reason: details.reason, exitCode: details.exitCode };
    if (generation.exited && generation.settleTimer) {
      clearTimeout(generation.settleTimer);
      generation.settleTimer = undefined;
      this.handleExit(generation);
    }
  }

  /** The user asked: a fresh host now, crash history forgotten. Resolves when it is ready (or failed again). */
  restart(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    this.crashTimes = [];
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    const old = this.current;
    if (old && !old.exited) {
      old.expectedExit = true;
      this.teardown(old, 'The engine was restarted.', 'killed');
      old.process.kill();
    }
    this.current = undefined;
    this.setStatus({ state: 'restarting', attempt: 1 });
    const settled = new Promise<void>((resolve) => {
      const off = this.onStatus((status) => {
        if (status.state === 'ready' || status.state === 'crashed') {
          off();
          resolve();
        }
      });
    });
    this.launch();
    return settled;
  }

  /** App quit: stop the host and never restart it. */
  stop(): void {
    this.stopped = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    const generation = this.current;
    if (generation && !generation.exited) {
      generation.expectedExit = true;
      this.teardown(generation, 'The application is quitting.', 'killed');
      generation.process.kill();
    }
  }

  // ── internals ──────────────────────────────────────────────────────────────────────────────

  private launch(): void {
    let child: HostProcess;
    try {
      child = this.options.fork();
    } catch (error) {
      this.options.log(`[engine] could not start the engine host: ${String(error)}`);
      this.afterCrash({ reason: 'launch-failed', message: `The engine could not start: ${error instanceof Error ? error.message : String(error)}.` });
      return;
    }
    const { port1, port2 } = this.options.createChannel();
    const generation: Generation = {
      process: child,
      control: port1,
      everReady: false,
      expectedExit: false,
      readyTimedOut: false,
      exited: false,
      exitCode: null,
      gone: undefined,
      fatalError: undefined,
      readyTimer: undefined,
      settleTimer: undefined,
    };
    this.current = generation;
    port1.on('message', ({ data }) => {
      if (this.current !== generation) return;
      const event = readEvent(data);
      if (event?.kind === 'ready' && !generation.everReady) {
        generation.everReady = true;
        if (generation.readyTimer) clearTimeout(generation.readyTimer);
        this.setStatus({ state: 'ready', pid: event.pid });
      }
    });
    port1.start();
    child.on('exit', (code) => {
      generation.exited = true;
      generation.exitCode = code;
      if (generation.readyTimer) clearTimeout(generation.readyTimer);
      if (generation.expectedExit) return;
      if (generation.gone) this.handleExit(generation);
      else generation.settleTimer = setTimeout(() => this.handleExit(generation), this.options.exitSettleMs);
    });
    child.on('error', (type, location) => {
      generation.fatalError = `${type} ${location}`;
      this.options.log(`[engine] fatal error in the engine host: ${type} at ${location}`);
    });
    child.postMessage({ kind: 'connect', client: 'supervisor' } satisfies ConnectMessage, [port2]);
    for (const client of this.clients.values()) this.connect(client);
    generation.readyTimer = setTimeout(() => {
      if (generation.everReady || generation.exited) return;
      this.options.log(`[engine] the host did not say ready within ${this.options.readyTimeoutMs} ms; stopping it`);
      generation.readyTimedOut = true;
      child.kill();
    }, this.options.readyTimeoutMs);
  }

  private connect(client: Client): void {
    const generation = this.current;
    if (!generation) return;
    const { port1, port2 } = this.options.createChannel();
    client.hostPort = port1;
    port1.on('message', ({ data }) => {
      if (this.current !== generation || client.hostPort !== port1) return;
      const event = readEvent(data);
      if (!event) {
        this.options.log('[engine] dropped an event that does not match the protocol');
        return;
      }
      if (event.kind === 'ready') return; // the supervisor reports readiness as a status
      if (TERMINAL_EVENTS.has(event.kind) && 'requestId' in event) {
        const loading = client.inFlight.get(event.requestId);
        if (event.kind === 'loaded' && loading) this.loadCrashes.delete(loading);
        client.inFlight.delete(event.requestId);
      }
      client.deliver(event);
    });
    port1.start();
    generation.process.postMessage({ kind: 'connect', client: client.id } satisfies ConnectMessage, [port2]);
    const pending = client.pending.splice(0);
    for (const request of pending) port1.postMessage(request);
  }

  private handleExit(generation: Generation): void {
    generation.settleTimer = undefined;
    if (this.current !== generation) return;
    const loadingModel = this.loadingModel();
    const { reason, message } = classifyExit({
      exitCode: generation.exitCode,
      gone: generation.gone,
      fatalError: generation.fatalError,
      everReady: generation.everReady,
      readyTimedOut: generation.readyTimedOut,
      loadingModel,
    });
    this.options.log(`[engine] host exited: ${reason}: ${message}`);
    if (loadingModel !== undefined) this.loadCrashes.set(loadingModel, (this.loadCrashes.get(loadingModel) ?? 0) + 1);
    this.teardown(generation, message, reason);
    this.current = undefined;
    this.afterCrash({ reason, message, loadingModel });
  }

  private afterCrash(crash: { reason: CrashReason; message: string; loadingModel?: string }): void {
    const now = this.options.now();
    this.crashTimes = this.crashTimes.filter((time) => time > now - this.options.restartWindowMs);
    this.crashTimes.push(now);
    let refusal: string | undefined;
    if (this.stopped) refusal = '';
    else if (crash.reason === 'oom') refusal = 'It is not restarted automatically after running out of memory.';
    else if (crash.loadingModel !== undefined && (this.loadCrashes.get(crash.loadingModel) ?? 0) >= 2) {
      refusal = `Loading ${baseName(crash.loadingModel)} crashed the engine twice; it is not restarted automatically.`;
    } else if (this.crashTimes.length > this.options.maxRestarts) {
      refusal = `It crashed ${this.crashTimes.length} times within ${Math.round(this.options.restartWindowMs / 1000)} s; it is not restarted automatically.`;
    }
    const willRestart = refusal === undefined;
    const message = refusal ? `${crash.message} ${refusal}` : crash.message;
    // Anything queued for the next host: rejected now when no host will come.
    if (!willRestart) for (const client of this.clients.values()) this.rejectAll(client, message, crash.reason);
    this.setStatus({ state: 'crashed', reason: crash.reason, message, willRestart });
    if (!willRestart) return;
    const attempt = this.crashTimes.length;
    const delay = Math.min(this.options.backoffBaseMs * 2 ** (attempt - 1), this.options.backoffMaxMs);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (this.stopped) return;
      this.setStatus({ state: 'restarting', attempt });
      this.launch();
    }, delay);
  }

  /** The model of a load that was in flight, if any. */
  private loadingModel(): string | undefined {
    for (const client of this.clients.values()) {
      for (const path of client.inFlight.values()) if (path !== '') return path;
    }
    return undefined;
  }

  private teardown(generation: Generation, message: string, reason: CrashReason): void {
    if (generation.readyTimer) clearTimeout(generation.readyTimer);
    generation.control.close();
    for (const client of this.clients.values()) {
      client.hostPort?.close();
      client.hostPort = undefined;
      this.rejectAll(client, message, reason);
    }
  }

  private rejectAll(client: Client, message: string, reason: CrashReason): void {
    client.pending = [];
    for (const requestId of [...client.inFlight.keys()]) this.reject(client, requestId, message, reason);
  }

  private reject(client: Client, requestId: string, message: string, reason: CrashReason): void {
    client.inFlight.delete(requestId);
    const error: ErrorPayload = { code: 'ENGINE_CRASHED', message, details: { reason } };
    client.deliver({ kind: 'error', requestId, error });
  }

  private setStatus(status: EngineStatus): void {
    this.state = status;
    for (const listener of [...this.statusListeners]) listener(status);
  }
}

function readEvent(data: unknown): EngineEvent | undefined {
  try {
    return parseEngineEvent(data);
  } catch {
    return undefined;
  }
}
