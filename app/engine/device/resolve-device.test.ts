// Which device a load runs on (engine.ts resolveDevice, issue 33), for every kind of adapter report:
// 'auto' takes WebGPU only on an identified hardware adapter with float16 and otherwise says why it
// stays on the CPU; 'webgpu' takes any adapter (a software one too: it was asked for) and says which;
// no adapter is DEVICE_UNAVAILABLE with the reason. (The real adapters here: webgpu-adapter.test.ts.)
import { describe, expect, it } from 'vitest';
import type { AdapterInfo } from '../../common/protocol.ts';
import { resolveDevice } from '../engine.ts';
import type { WebgpuAdapter } from './webgpu-adapter.ts';

const adapter = (info: Partial<AdapterInfo>): (() => Promise<WebgpuAdapter>) => async () => ({ available: true, info: { name: 'GPU', vendor: 'NVIDIA', software: false, float16: true, ...info } });
const none = async (): Promise<WebgpuAdapter> => ({ available: false, reason: 'no Vulkan: cannot open libvulkan.so.1' });

async function resolve(device: 'auto' | 'webgpu' | 'cpu', describe: () => Promise<WebgpuAdapter>) {
  const log: string[] = [];
  const r = await resolveDevice(device, (line) => log.push(line), describe);
  return { r, log: log.join('\n') };
}

describe('resolveDevice', () => {
  it('auto: WebGPU on an identified hardware adapter with float16', async () => {
    const { r, log } = await resolve('auto', adapter({ name: 'NVIDIA GeForce RTX 4070' }));
    expect(r).toMatchObject({ device: 'webgpu', adapter: { name: 'NVIDIA GeForce RTX 4070', software: false, float16: true } });
    expect(log).toMatch(/device auto: WebGPU on NVIDIA GeForce RTX 4070 \(NVIDIA; hardware; float16 yes\)/);
  });

  it('auto: the CPU with a software adapter, an unidentified one, one without float16, or none; each says why', async () => {
    for (const [describe, why] of [
      [adapter({ name: 'SwiftShader Device (Subzero)', vendor: 'Google', software: true, float16: false }), /is a software rasteriser, slower than the CPU path \(ask for --device webgpu to use it anyway\); using cpu/],
      [adapter({ name: 'unknown', vendor: 'unknown', software: null }), /could not be identified; using cpu/],
      [adapter({ float16: false }), /has no float16; using cpu/],
      [none, /no WebGPU adapter here \(no Vulkan: cannot open libvulkan\.so\.1\); using cpu/],
    ] as const) {
      const { r, log } = await resolve('auto', describe);
      expect(r).toEqual({ device: 'cpu' });
      expect(log).toMatch(why);
    }
  });

  it('webgpu: any adapter, a software one included, named in the log; none is DEVICE_UNAVAILABLE with the reason', async () => {
    const { r, log } = await resolve('webgpu', adapter({ name: 'SwiftShader Device (Subzero)', vendor: 'Google', software: true, float16: false, note: 'no float16' }));
    expect(r).toMatchObject({ device: 'webgpu', adapter: { software: true } });
    expect(log).toBe('device webgpu: SwiftShader Device (Subzero) (Google; software; float16 no) — no float16');
    await expect(resolve('webgpu', none)).rejects.toMatchObject({ code: 'DEVICE_UNAVAILABLE', message: expect.stringMatching(/device webgpu is not available: no Vulkan: cannot open libvulkan\.so\.1/) });
  });

  it('cpu asks nothing of the GPU', async () => {
    const { r, log } = await resolve('cpu', () => Promise.reject(new Error('not asked')));
    expect(r).toEqual({ device: 'cpu' });
    expect(log).toBe('');
  });
});
