// Engine host process entry. Started by EngineClient (CLI, tests, browser-mode server) with
// child_process.fork, later by Electron's utilityProcess: onnxruntime blocks the thread it
// runs on and a native fault must not take the window with it, so the engine lives here.
import { createEngineCore } from '../engine.ts';
import { serveEngine, type EngineChannel } from './serve.ts';

function childProcessChannel(): EngineChannel {
  if (!process.send) throw new Error('the engine host must be started with an IPC channel (child_process.fork)');
  return {
    send: (event) => void process.send!(event),
    onMessage: (handler) => void process.on('message', handler),
  };
}

const channel = childProcessChannel();
serveEngine(channel, createEngineCore(), process.pid);
// The parent going away (or closing the channel) ends the host.
process.on('disconnect', () => process.exit(0));
