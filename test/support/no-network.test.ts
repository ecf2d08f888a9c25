import net from 'node:net';
import { describe, expect, it } from 'vitest';

describe('network guard', () => {
  it('refuses connections to other hosts', () => {
    expect(() => net.connect({ host: '93.184.216.34', port: 80 })).toThrow(/tried to reach the network/);
  });

  it('allows loopback', async () => {
    const server = net.createServer((socket) => socket.end('ok'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as net.AddressInfo;
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = net.connect({ host: '127.0.0.1', port });
      let data = '';
      socket.on('data', (chunk) => (data += chunk.toString()));
      socket.on('end', () => resolve(data));
      socket.on('error', reject);
    });
    server.close();
    expect(reply).toBe('ok');
  });
});
