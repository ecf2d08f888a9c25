// A small RFC 6455 WebSocket server side (no dependency): the handshake, unfragmented text
// frames, client masking, ping/pong and close. Fragmented and binary messages are refused
// with close code 1003; messages over 1 MiB with 1009; protocol violations with 1002.
//
// EngineRelay speaks the engine protocol over one connection, for the renderer in browser
// mode: the client sends EngineRequestInput JSON (checked with parseEngineRequest), the
// server answers with engine events stamped with the client's requestId (a load's
// loadProgress events too, to that client only, before its `loaded`). Generations go through
// the server's FIFO queue like HTTP requests; `cancel` works on queued and running ones;
// closing the socket cancels everything it started.
//
// Besides the engine protocol, the relay tells the window the engine process's state
// (`{kind:'engineStatus', status}`: on every change, and on connect unless it is 'ready') and takes
// `{kind:'restartEngine', requestId}` (restart the crashed engine and reload its model). With the
// test-only fault hook enabled (startServer's testFaults), `{kind:'testFault', requestId, fault}`
// is passed to the engine host, which then dies of a real native fault.
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { isLonghandError } from '../common/errors.ts';
import {
  parseEngineRequest,
  parseTestFaultRequest,
  RestartEngineRequestSchema,
  type EngineEvent,
  type EngineRequest,
  type ErrorPayload,
  type RelayStatusEvent,
  type TestFaultRequest,
} from '../common/protocol.ts';
import type { EngineSession } from './engine-session.ts';
import { MAX_BODY_BYTES } from './http.ts';
import { QueueAbortedError } from './queue.ts';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
const MAX_MESSAGE_BYTES = MAX_BODY_BYTES;

const OP_CONTINUATION = 0x0;
const OP_TEXT = 0x1;
const OP_BINARY = 0x2;
const OP_CLOSE = 0x8;
const OP_PING = 0x9;
const OP_PONG = 0xa;

export function acceptKey(key: string): string {
  return createHash('sha1').update(key + GUID).digest('base64');
}

/** Completes the handshake, or returns why the upgrade request is not a valid WebSocket one. */
export function acceptWebSocket(req: IncomingMessage, socket: Socket, head: Buffer): WebSocketConnection | string {
  if (req.method !== 'GET') return 'a WebSocket handshake must be a GET';
  if (req.headers.upgrade?.toLowerCase() !== 'websocket') return 'Upgrade: websocket is required';
  if (req.headers['sec-websocket-version'] !== '13') return 'only WebSocket version 13 is supported';
  const key = req.headers['sec-websocket-key'];
  if (typeof key !== 'string' || Buffer.from(key, 'base64').length !== 16) return 'a 16-byte Sec-WebSocket-Key is required';
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${acceptKey(key)}\r\n\r\n`);
  const ws = new WebSocketConnection(socket);
  if (head.length > 0) ws.receive(head);
  return ws;
}

export class WebSocketConnection {
  private buffer: Buffer = Buffer.alloc(0);
  private closeSent = false;
  private ended = false;
  private readonly messageHandlers: ((text: string) => void)[] = [];
  private readonly closeHandlers: (() => void)[] = [];
  private readonly decoder = new TextDecoder('utf-8', { fatal: true });

  constructor(private readonly socket: Socket) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.finish());
  }

  onMessage(handler: (text: string) => void): void {
    this.messageHandlers.push(handler);
  }

  onClose(handler: () => void): void {
    if (this.ended) handler();
    else this.closeHandlers.push(handler);
  }

  get open(): boolean {
    return !this.closeSent && !this.ended;
  }

  send(text: string): void {
    if (this.open) this.frame(OP_TEXT, Buffer.from(text, 'utf8'));
  }

  /** Starts the closing handshake; the socket ends when the client answers (or after 1 s). */
  close(code = 1000, reason = ''): void {
    if (this.closeSent || this.ended) return;
    const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
    payload.writeUInt16BE(code, 0);
    payload.write(reason, 2);
    this.frame(OP_CLOSE, payload);
    this.closeSent = true;
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }

  /** Parses as many whole frames as the buffer holds. */
  receive(chunk: Buffer): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    while (!this.ended && this.buffer.length >= 2) {
      const b0 = this.buffer[0]!;
      const b1 = this.buffer[1]!;
      const fin = (b0 & 0x80) !== 0;
      const opcode = b0 & 0x0f;
      let length = b1 & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (this.buffer.length < 4) return;
        length = this.buffer.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (this.buffer.length < 10) return;
        const big = this.buffer.readBigUInt64BE(2);
        if (big > BigInt(MAX_MESSAGE_BYTES)) return this.fail(1009, 'message too big');
        length = Number(big);
        offset = 10;
      }
      if ((b0 & 0x70) !== 0) return this.fail(1002, 'reserved bits set');
      if ((b1 & 0x80) === 0) return this.fail(1002, 'client frames must be masked');
      if (length > MAX_MESSAGE_BYTES) return this.fail(1009, 'message too big');
      if (this.buffer.length < offset + 4 + length) return;
      const mask = this.buffer.subarray(offset, offset + 4);
      const payload = Buffer.from(this.buffer.subarray(offset + 4, offset + 4 + length));
      for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i & 3]!;
      this.buffer = this.buffer.subarray(offset + 4 + length);
      this.handleFrame(fin, opcode, payload);
    }
  }

  private handleFrame(fin: boolean, opcode: number, payload: Buffer): void {
    if (opcode >= OP_CLOSE && (!fin || payload.length > 125)) return this.fail(1002, 'bad control frame');
    switch (opcode) {
      case OP_CLOSE: {
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1000;
        if (!this.closeSent) {
          this.frame(OP_CLOSE, payload.length >= 2 ? payload.subarray(0, 2) : Buffer.alloc(0));
          this.closeSent = true;
        }
        void code;
        this.socket.end();
        return;
      }
      case OP_PING:
        if (!this.closeSent) this.frame(OP_PONG, payload);
        return;
      case OP_PONG:
        return;
      case OP_TEXT: {
        if (!fin) return this.fail(1003, 'fragmented messages are not supported');
        let text: string;
        try {
          text = this.decoder.decode(payload);
        } catch {
          return this.fail(1007, 'text is not valid UTF-8');
        }
        if (this.closeSent) return;
        for (const handler of this.messageHandlers) handler(text);
        return;
      }
      case OP_CONTINUATION:
        return this.fail(1003, 'fragmented messages are not supported');
      case OP_BINARY:
        return this.fail(1003, 'binary messages are not supported');
      default:
        return this.fail(1002, `unknown opcode ${opcode}`);
    }
  }

  private fail(code: number, reason: string): void {
    this.buffer = Buffer.alloc(0);
    this.close(code, reason);
    this.socket.end();
  }

  private frame(opcode: number, payload: Buffer): void {
    let header: Buffer;
    if (payload.length < 126) header = Buffer.from([0x80 | opcode, payload.length]);
    else if (payload.length < 65536) {
      header = Buffer.alloc(4);
      header[0] = 0x80 | opcode;
      header[1] = 126;
      header.writeUInt16BE(payload.length, 2);
    } else {
      header = Buffer.alloc(10);
      header[0] = 0x80 | opcode;
      header[1] = 127;
      header.writeBigUInt64BE(BigInt(payload.length), 2);
    }
    this.socket.write(Buffer.concat([header, payload]));
  }

  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    for (const handler of this.closeHandlers.splice(0)) handler();
  }
}

function payloadOf(error: unknown): ErrorPayload {
  if (isLonghandError(error)) return { code: error.code, message: error.message, details: { ...error.details } };
  if ((error as { code?: unknown } | null)?.code === 'PROTOCOL_BAD_MESSAGE') return { code: 'PROTOCOL_BAD_MESSAGE', message: (error as Error).message, details: {} };
  return { code: 'INTERNAL', message: error instanceof Error ? error.message : String(error), details: {} };
}

/** The request id of the 'loaded' event a new connection receives when a model is already loaded. */
export const CURRENT_MODEL_REQUEST = 'server:current-model';

export interface RelayOptions {
  /** Pass `testFault` requests to the engine host (test-only; LONGHAND_TEST_FAULTS=1). */
  testFaults?: boolean;
}

export class EngineRelay {
  /** Generations this connection started and that have not ended: requestId → their abort. */
  private readonly active = new Map<string, AbortController>();

  constructor(
    private readonly ws: WebSocketConnection,
    private readonly session: EngineSession,
    private readonly options: RelayOptions = {},
  ) {
    ws.onMessage((text) => this.receive(text));
    const offStatus = session.onStatus((status) => {
      // The reloaded model first, so the window knows it before it sees 'ready'.
      if (status.state === 'ready') this.announceModel();
      this.send({ kind: 'engineStatus', status });
    });
    ws.onClose(() => {
      offStatus();
      for (const abort of this.active.values()) abort.abort();
    });
    // An open socket means a ready engine (the bridge assumes so on open); a page that connects
    // while it is down or restarting is told at once.
    if (session.status.state !== 'ready') this.send({ kind: 'engineStatus', status: session.status });
    this.announceModel();
  }

  close(): void {
    this.ws.close(1001, 'server closing');
  }

  /**
   * A page that connects (or reloads), or whose engine restarted, learns which model is loaded
   * (--model, an earlier page's load, the reload after a restart) without asking: an unsolicited
   * 'loaded' under CURRENT_MODEL_REQUEST.
   */
  private announceModel(): void {
    const model = this.session.model;
    if (model) this.send({ kind: 'loaded', requestId: CURRENT_MODEL_REQUEST, model });
  }

  private send(event: EngineEvent | RelayStatusEvent): void {
    this.ws.send(JSON.stringify(event));
  }

  private fail(requestId: string, error: unknown): void {
    this.send({ kind: 'error', requestId, error: payloadOf(error) });
  }

  private receive(text: string): void {
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch (error) {
      return this.fail('', Object.assign(new Error(`bad request: not JSON: ${(error as Error).message}`), { code: 'PROTOCOL_BAD_MESSAGE' }));
    }
    const kind = (message as { kind?: unknown } | null)?.kind;
    if (kind === 'restartEngine') return this.restart(message);
    if (kind === 'testFault' && this.options.testFaults) return this.testFault(message);
    let request: EngineRequest;
    try {
      request = parseEngineRequest(message);
    } catch (error) {
      const id = (message as { requestId?: unknown } | null)?.requestId;
      return this.fail(typeof id === 'string' ? id : '', error);
    }
    const { requestId } = request;
    switch (request.kind) {
      case 'generate':
        return this.generate(request);
      case 'cancel':
        this.active.get(request.target)?.abort();
        return;
      case 'tokenize':
        this.session.tokenize(request.text, request.addSpecial).then(
          (ids) => this.send({ kind: 'tokenized', requestId, ids }),
          (error: unknown) => this.fail(requestId, error),
        );
        return;
      case 'load':
        // Progress goes to this page only: it asked, and its Models view shows the bar.
        this.session.load(request.options, ({ done, total }) => this.send({ kind: 'loadProgress', requestId, done, total })).then(
          (model) => this.send({ kind: 'loaded', requestId, model }),
          (error: unknown) => this.fail(requestId, error),
        );
        return;
      case 'snapshots':
        this.session.snapshots(request.action, request.capBytes).then(
          (stats) => this.send({ kind: 'snapshots', requestId, stats }),
          (error: unknown) => this.fail(requestId, error),
        );
        return;
      case 'unload':
        this.session.unload().then(
          () => this.send({ kind: 'unloaded', requestId }),
          (error: unknown) => this.fail(requestId, error),
        );
        return;
    }
  }

  /** The window's Restart button; the outcome reaches every window as engineStatus events. */
  private restart(message: unknown): void {
    const parsed = RestartEngineRequestSchema.safeParse(message);
    if (!parsed.success) {
      const id = (message as { requestId?: unknown }).requestId;
      return this.fail(typeof id === 'string' ? id : '', Object.assign(new Error(`bad request: restartEngine: ${parsed.error.issues[0]?.message ?? 'does not match'}`), { code: 'PROTOCOL_BAD_MESSAGE' }));
    }
    void this.session.restart();
  }

  private testFault(message: unknown): void {
    let fault: TestFaultRequest;
    try {
      fault = parseTestFaultRequest(message);
    } catch (error) {
      const id = (message as { requestId?: unknown }).requestId;
      return this.fail(typeof id === 'string' ? id : '', error);
    }
    // Resolves when the process dies (the session reports it); rejects when the host refuses.
    this.session.engine.testFault(fault.fault).catch((error: unknown) => this.fail(fault.requestId, error));
  }

  private generate(request: Extract<EngineRequest, { kind: 'generate' }>): void {
    const { requestId } = request;
    if (this.active.has(requestId)) return this.fail(requestId, Object.assign(new Error(`requestId ${requestId} is already running`), { code: 'PROTOCOL_BAD_MESSAGE' }));
    const abort = new AbortController();
    this.active.set(requestId, abort);
    this.session
      .generate(request.prompt, request.params, abort.signal, (event) => this.send({ ...event, requestId }), { allowRemote: true })
      .catch((error: unknown) => {
        if (error instanceof QueueAbortedError) {
          // Cancelled before its turn: still exactly one `done`, as the protocol promises.
          const timings = { ttftMs: 0, prefillMs: 0, decodeMs: 0, prefillTokensPerS: 0, decodeTokensPerS: 0, totalMs: 0 };
          this.send({ kind: 'done', requestId, stopReason: 'cancelled', text: '', promptTokens: 0, completionTokens: 0, timings });
        } else this.fail(requestId, error);
      })
      .finally(() => this.active.delete(requestId));
  }
}
