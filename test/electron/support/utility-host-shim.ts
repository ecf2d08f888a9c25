// Runs the real engine host entry (app/engine/host/main.ts) in a child process the way Electron
// runs it in a utilityProcess: with a `process.parentPort` that delivers `{kind:'connect'}` plus
// one port per connection. Electron's MessagePorts cannot cross a child_process channel, so each
// port is carried over the IPC channel, tagged with its client:
//   parent → child  {kind:'connect', client} | {kind:'port', client, data} | {kind:'close', client}
//   child → parent  {client, data}
// Used by test/electron/engine-supervisor-fault.test.ts (RealUtilityProcess is the other end).
import { EventEmitter } from 'node:events';

class ShimPort extends EventEmitter {
  constructor(private readonly client: string) {
    super();
  }
  postMessage(data: unknown): void {
    process.send?.({ client: this.client, data });
  }
  start(): void {}
}

const parentPort = new EventEmitter();
const ports = new Map<string, ShimPort>();

/** Until main.ts has loaded (onnxruntime takes a moment) messages wait, as Electron's port queue would hold them. */
let loaded = false;
const early: unknown[] = [];

function deliver(raw: unknown): void {
  const message = raw as { kind: string; client: string; data?: unknown };
  if (message.kind === 'connect') {
    const port = new ShimPort(message.client);
    ports.set(message.client, port);
    parentPort.emit('message', { data: { kind: 'connect', client: message.client }, ports: [port] });
  } else if (message.kind === 'port') ports.get(message.client)?.emit('message', { data: message.data });
  else if (message.kind === 'close') {
    ports.get(message.client)?.emit('close');
    ports.delete(message.client);
  }
}

process.on('message', (raw) => (loaded ? deliver(raw) : early.push(raw)));
// A utility process ends with its app; here, with the test that forked it.
process.on('disconnect', () => process.exit(0));

Object.defineProperty(process, 'parentPort', { value: parentPort, configurable: true });
await import('../../../app/engine/host/main.ts');
loaded = true;
for (const raw of early.splice(0)) deliver(raw);
