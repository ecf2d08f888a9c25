// The engine host's dispatcher, independent of the transport: it reads requests from a
// channel, checks them against the protocol, runs them on the core and sends events back.
// Generations run one at a time; a cancel aborts the named generation between tokens (and
// between layers during prefill).
import { isLonghandError, LonghandError } from '../../common/errors.ts';
import { parseEngineRequest, parseSessionFileRequest, parseTestFaultRequest, PROTOCOL_VERSION, type EngineEvent, type EngineRequest, type ErrorPayload, type TestFaultRequest } from '../../common/protocol.ts';
import type { EngineCore } from './engine-core.ts';
import { SnapshotSettings } from './snapshot-settings.ts';

/** A bidirectional message pipe: a child-process IPC channel, a MessagePort, a WebSocket, or a direct call. */
export interface EngineChannel {
  send(event: EngineEvent): void;
  onMessage(handler: (message: unknown) => void): void;
}

export function errorPayload(error: unknown): ErrorPayload {
  if (isLonghandError(error)) return { code: error.code, message: error.message, details: { ...error.details } };
  const code = (error as { code?: unknown } | null)?.code;
  if (code === 'PROTOCOL_BAD_MESSAGE') return { code, message: (error as Error).message, details: {} };
  const message = error instanceof Error ? error.message : String(error);
  return { code: 'NATIVE_INTERNAL', message: `internal error: ${message}`, details: {} };
}

export interface ServeOptions {
  /**
   * The test-only fault hook (main.ts passes native/index.js testFault when LONGHAND_TEST_FAULTS=1
   * is in this process's environment). Without it a `testFault` message is an unknown request.
   */
  testFault?: (kind: TestFaultRequest['fault']) => never;
  /**
   * Document snapshots shared by every connection of this process (main.ts configures them once
   * from LONGHAND_SNAPSHOT_DIR); default: the core's as they are.
   */
  snapshots?: SnapshotSettings;
  /** Requests wait for this first (main.ts: the snapshot folder configured). Must not reject. */
  ready?: Promise<void>;
  /**
   * Accept `sessionFile` requests, which name file paths (main.ts: LONGHAND_SESSION_FILES=1, set by
   * the CLI). Without it they are unknown requests, so no window can make the host touch a path.
   */
  sessionFiles?: boolean;
}

export function serveEngine(channel: EngineChannel, core: EngineCore, pid: number, options: ServeOptions = {}): void {
  /** The running generation, if any: its request id and how to stop it. */
  let active: { requestId: string; abort: AbortController } | undefined;
  /** Requests run in arrival order, except cancels, which act at once. */
  let queue: Promise<void> = (options.ready ?? Promise.resolve()).catch(() => undefined);
  const snapshots = options.snapshots ?? new SnapshotSettings(core);

  const fail = (requestId: string, error: unknown) => channel.send({ kind: 'error', requestId, error: errorPayload(error) });

  async function run(request: EngineRequest): Promise<void> {
    switch (request.kind) {
      case 'load': {
        const model = await core.load(request.options, ({ done, total }) => channel.send({ kind: 'loadProgress', requestId: request.requestId, done, total }));
        channel.send({ kind: 'loaded', requestId: request.requestId, model });
        return;
      }
      case 'unload':
        await core.unload();
        channel.send({ kind: 'unloaded', requestId: request.requestId });
        return;
      case 'tokenize':
        channel.send({ kind: 'tokenized', requestId: request.requestId, ids: core.tokenize(request.text, request.addSpecial) });
        return;
      case 'generate': {
        const abort = active?.requestId === request.requestId ? active.abort : new AbortController();
        try {
          for await (const event of core.generate(request.prompt, request.params, abort.signal)) {
            channel.send({ ...event, requestId: request.requestId } as EngineEvent);
          }
        } finally {
          active = undefined;
        }
        return;
      }
      case 'snapshots':
        channel.send({ kind: 'snapshots', requestId: request.requestId, stats: await snapshots.handle(request.action, request.capBytes) });
        return;
      case 'cancel':
        return; // handled on arrival
    }
  }

  channel.onMessage((message) => {
    // Acted on at arrival, like a cancel, so a test can fault the process mid-generation.
    if (options.testFault && (message as { kind?: unknown } | null)?.kind === 'testFault') {
      try {
        options.testFault(parseTestFaultRequest(message).fault);
      } catch (error) {
        // A malformed request, or an addon built before the hook existed: the process lives on.
        const requestId = (message as { requestId?: unknown }).requestId;
        fail(typeof requestId === 'string' ? requestId : '', error);
      }
      return;
    }
    if (options.sessionFiles && (message as { kind?: unknown } | null)?.kind === 'sessionFile') {
      const requestId = typeof (message as { requestId?: unknown }).requestId === 'string' ? (message as { requestId: string }).requestId : '';
      queue = queue.then(async () => {
        try {
          const r = parseSessionFileRequest(message);
          const done = r.action === 'save' ? await core.saveSnapshot(r.path) : await core.loadSnapshot(r.path);
          channel.send({ kind: 'sessionFile', requestId: r.requestId, action: r.action, ...done });
        } catch (error) {
          fail(requestId, error);
        }
      });
      return;
    }
    let request: EngineRequest;
    try {
      request = parseEngineRequest(message);
    } catch (error) {
      const requestId = typeof (message as { requestId?: unknown })?.requestId === 'string' ? (message as { requestId: string }).requestId : '';
      fail(requestId, error);
      return;
    }
    if (request.kind === 'cancel') {
      if (active?.requestId === request.target) active.abort.abort();
      return;
    }
    if (request.kind === 'generate' && active) {
      fail(request.requestId, new LonghandError('ENGINE_BUSY', `a generation (${active.requestId}) is already running; cancel it or wait`));
      return;
    }
    // A generation is "active" from its arrival, so a cancel that comes before it starts still counts.
    if (request.kind === 'generate') active = { requestId: request.requestId, abort: new AbortController() };
    queue = queue.then(() => run(request).catch((error: unknown) => fail(request.requestId, error)));
  });

  channel.send({ kind: 'ready', protocol: PROTOCOL_VERSION, pid });
}
