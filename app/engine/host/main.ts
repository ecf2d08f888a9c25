// Engine host process entry. onnxruntime blocks the thread it runs on and a native fault must
// not take the window with it, so the engine lives in its own process:
//   - under Electron, a utilityProcess: main sends one MessagePort per connection (its own
//     readiness check, then one per window) through process.parentPort;
//   - everywhere else (CLI, tests, browser-mode server), a child_process.fork with an IPC channel.
import { SESSION_FILES_ENV, TEST_FAULTS_ENV } from '../../common/protocol.ts';
import { testFault } from '../../../native/index.js';
import { createEngineCore } from '../engine.ts';
import { serveEngine, type EngineChannel, type ServeOptions } from './serve.ts';
import { SnapshotSettings } from './snapshot-settings.ts';
import { acceptUtilityConnections, type ParentPortLike } from './utility-channel.ts';

const parentPort = (process as NodeJS.Process & { parentPort?: ParentPortLike }).parentPort;
const core = createEngineCore();
// Test-only: with LONGHAND_TEST_FAULTS=1 (which also makes the addon export the hook), a
// `testFault` message kills this process with a real native fault. Users never set it.
// Document snapshots in the folder the starting process named (LONGHAND_SNAPSHOT_DIR), set up
// once for every connection; requests wait until that is done.
const snapshots = new SnapshotSettings(core);
const serveOptions: ServeOptions = {
  snapshots,
  ready: snapshots.start(process.env),
  ...(process.env[TEST_FAULTS_ENV] === '1' ? { testFault } : {}),
  // the CLI's --save-session / --load-session: only a host the CLI started takes file paths
  sessionFiles: process.env[SESSION_FILES_ENV] === '1',
};

if (parentPort) {
  // Every window's connection shares the one loaded model; each has its own generation slot.
  acceptUtilityConnections<Parameters<EngineChannel['send']>[0]>(parentPort, (channel) => serveEngine(channel, core, process.pid, serveOptions));
} else {
  if (!process.send) throw new Error('the engine host must be started with an IPC channel (child_process.fork) or as an Electron utility process');
  const channel: EngineChannel = {
    send: (event) => void process.send!(event),
    onMessage: (handler) => void process.on('message', handler),
  };
  serveEngine(channel, core, process.pid, serveOptions);
  // The parent going away (or closing the channel) ends the host.
  process.on('disconnect', () => process.exit(0));
}
