// The window's generations through a remote OpenAI-compatible endpoint (Settings → remote), in
// Electron: what app/server/engine-session.ts does for browser mode. Each `generate` from the
// renderer reads the remote settings first; with remote.enabled it is answered here by
// RemoteEngine (app/server/remote-engine.ts, plain fetch; it imports only a *type* from the
// server's engine session, so nothing of app/engine comes along) and never reaches the engine
// host; its events go back on the renderer's port with the request's id, and a `cancel` naming
// it aborts the HTTP request (→ done 'cancelled'). load, unload, tokenize and cancels of local
// generations go to the host as before.
//
// Order: one connection's requests are routed one after another (a generate waits for its
// settings read), so a cancel or an unload never overtakes the generate before it.
import { LonghandError } from '../common/errors.ts';
import type { EngineEvent, EngineRequest, ErrorPayload } from '../common/protocol.ts';
import { RemoteEngine, type RemoteConfig } from '../server/remote-engine.ts';

export interface RemoteRelayOptions {
  /** The remote endpoint in force, or undefined for the local engine; asked before each generate. */
  config: () => Promise<RemoteConfig | undefined>;
  /** Tests may pass their own fetch. */
  fetch?: typeof fetch;
  log?: (message: string) => void;
}

/** One renderer connection's router: remote generations here, the rest to `forward`. */
export interface RemoteRoute {
  handle(request: EngineRequest): void;
  /** The renderer's port closed: remote generations in flight are aborted. */
  close(): void;
}

export class RemoteRelay {
  private engine: { key: string; engine: RemoteEngine } | undefined;
  private readonly log: (message: string) => void;

  constructor(private readonly options: RemoteRelayOptions) {
    this.log = options.log ?? ((message) => console.warn(message));
  }

  /** A router for one connection: `deliver` posts to the renderer, `forward` sends to the host. */
  open(deliver: (event: EngineEvent) => void, forward: (request: EngineRequest) => void): RemoteRoute {
    const active = new Map<string, AbortController>();
    let closed = false;
    let chain: Promise<void> = Promise.resolve();

    const route = async (request: EngineRequest): Promise<void> => {
      if (closed) return;
      if (request.kind === 'cancel') {
        const running = active.get(request.target);
        if (running) running.abort();
        else forward(request);
        return;
      }
      if (request.kind !== 'generate') {
        forward(request);
        return;
      }
      let engine: RemoteEngine | undefined;
      try {
        engine = await this.remoteEngine();
      } catch (error) {
        deliver({ kind: 'error', requestId: request.requestId, error: payloadOf(error) });
        return;
      }
      if (closed) return;
      if (!engine) {
        forward(request);
        return;
      }
      const abort = new AbortController();
      active.set(request.requestId, abort);
      void this.run(engine, request, abort.signal, deliver).finally(() => active.delete(request.requestId));
    };

    return {
      handle: (request) => {
        chain = chain.then(() => route(request)).catch((error: unknown) => this.log(`[remote] routing failed: ${String(error)}`));
      },
      close: () => {
        closed = true;
        for (const abort of active.values()) abort.abort();
        active.clear();
      },
    };
  }

  /** The RemoteEngine for the settings in force (kept while they stay the same), or undefined. */
  private async remoteEngine(): Promise<RemoteEngine | undefined> {
    let config: RemoteConfig | undefined;
    try {
      config = await this.options.config();
    } catch (error) {
      this.log(`[remote] could not read the remote settings: ${String(error)}`);
      return undefined;
    }
    if (!config) return undefined;
    const key = JSON.stringify(config);
    if (this.engine?.key !== key) this.engine = { key, engine: new RemoteEngine(config, this.options.fetch ? { fetch: this.options.fetch } : {}) }; // throws BAD_ARGUMENT for a bad URL
    return this.engine.engine;
  }

  private async run(engine: RemoteEngine, request: Extract<EngineRequest, { kind: 'generate' }>, signal: AbortSignal, deliver: (event: EngineEvent) => void): Promise<void> {
    const { requestId } = request;
    try {
      for await (const event of engine.generate(request.prompt, request.params, signal)) deliver({ ...event, requestId } as EngineEvent);
    } catch (error) {
      deliver({ kind: 'error', requestId, error: payloadOf(error) });
    }
  }
}

function payloadOf(error: unknown): ErrorPayload {
  if (error instanceof LonghandError) return { code: error.code, message: error.message, details: { ...error.details } };
  return { code: 'INTERNAL', message: error instanceof Error ? error.message : String(error), details: {} };
}
