// Loaded before every test file: any attempt to reach a host other than this machine fails
// the test at once, so "no test reaches the network" is checked, not hoped for.
import net from 'node:net';

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost|::ffff:127\.\d+\.\d+\.\d+)$/i;

function hostOf(args: unknown[]): string | undefined {
  const [first, second] = args;
  // net.connect() passes its already-normalised [options, callback] array as one argument.
  if (Array.isArray(first)) return hostOf(first);
  if (typeof first === 'object' && first !== null && !Array.isArray(first)) {
    const options = first as { host?: string; path?: string };
    if (options.path !== undefined) return undefined; // unix socket / named pipe
    return options.host ?? 'localhost';
  }
  if (typeof first === 'number') return typeof second === 'string' ? second : 'localhost';
  return undefined; // a path string: unix socket
}

const originalConnect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function guardedConnect(this: net.Socket, ...args: unknown[]) {
  const host = hostOf(args);
  if (host !== undefined && !LOOPBACK.test(host)) {
    throw new Error(`test tried to reach the network (${host}); tests may only use 127.0.0.1`);
  }
  return (originalConnect as (...a: unknown[]) => net.Socket).apply(this, args);
} as typeof net.Socket.prototype.connect;
