// The engine host's side of Electron's utilityProcess (runs IN the host process, not in main).
// Main sends `{ kind: 'connect', client }` with one MessagePortMain per connection (one for the
// supervisor's readiness check, one per window); each becomes an engine channel that the host
// serves with serveEngine(channel, core, pid). It imports nothing (no electron), so tests run it
// under plain Node.
/** The host's end of one port (Electron's MessagePortMain in a utility process). */
export interface HostPortLike {
  postMessage(message: unknown): void;
  on(event: 'message', listener: (event: { data: unknown }) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  start(): void;
}

/** `process.parentPort` in an Electron utility process. */
export interface ParentPortLike {
  on(event: 'message', listener: (event: { data: unknown; ports: readonly HostPortLike[] }) => void): unknown;
}

/** Structurally the EngineChannel of app/engine/host/serve.ts (main may not import the engine). */
export interface UtilityEngineChannel<Event = unknown> {
  send(event: Event): void;
  onMessage(handler: (message: unknown) => void): void;
  /** Called when main closes this connection (window gone, engine restarting). */
  onClose(handler: () => void): void;
  readonly client: string;
}

/** Turns each port main sends into a channel and hands it to `serve`. Returns nothing; runs for the process's life. */
export function acceptUtilityConnections<Event = unknown>(parentPort: ParentPortLike, serve: (channel: UtilityEngineChannel<Event>) => void): void {
  parentPort.on('message', ({ data, ports }) => {
    const message = data as { kind?: unknown; client?: unknown } | null;
    const port = ports[0];
    if (!message || message.kind !== 'connect' || typeof message.client !== 'string' || !port || ports.length !== 1) return;
    serve(portChannel<Event>(port, message.client));
  });
}

export function portChannel<Event = unknown>(port: HostPortLike, client: string): UtilityEngineChannel<Event> {
  let closed = false;
  const closeHandlers: Array<() => void> = [];
  port.on('close', () => {
    closed = true;
    for (const handler of closeHandlers) handler();
  });
  return {
    client,
    send: (event) => {
      if (!closed) port.postMessage(event);
    },
    onMessage: (handler) => {
      port.on('message', ({ data }) => handler(data));
      port.start();
    },
    onClose: (handler) => void closeHandlers.push(handler),
  };
}
