// The adapter report (issue 33): the Vulkan device Dawn would take, and what onnxruntime can run on it.
// On a machine with an adapter (test/support/webgpu.ts: SwiftShader from chromium where there is no
// GPU), the report is read in a child started with the adapter's environment and checked against
// what the Vulkan loader lists there; this process (no adapter environment) shows the other answer.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../../test/support/models.ts';
import { webgpuForTests } from '../../../test/support/webgpu.ts';
import { vulkanDevices, type VulkanDevice } from '../../../native/index.js';
import { adapterLine, describeWebgpuAdapter, preferredDevice, vendorName } from './webgpu-adapter.ts';

const device = (type: number, name: string): VulkanDevice => ({ name, vendorId: 0x10de, deviceId: 1, apiVersion: 0, driverVersion: 0, type, shaderFloat16: true, storageBuffer16Bit: true, featuresKnown: true });

describe('the WebGPU adapter report', () => {
  it("takes the device Dawn's high-performance preference takes: discrete, integrated, virtual, then software", () => {
    expect(preferredDevice([device(4, 'cpu'), device(1, 'igpu'), device(2, 'dgpu')])!.name).toBe('dgpu');
    expect(preferredDevice([device(4, 'cpu'), device(1, 'igpu')])!.name).toBe('igpu');
    expect(preferredDevice([device(4, 'cpu'), device(0, 'other')])!.name).toBe('cpu');
    expect(preferredDevice([])).toBeUndefined();
    expect([vendorName(0x10de), vendorName(0x1ae0), vendorName(0x10005), vendorName(0xabcd)]).toEqual(['NVIDIA', 'Google', 'Mesa', '0xabcd']);
    expect(adapterLine({ name: 'X', vendor: 'Y', software: true, float16: false })).toBe('X (Y; software; float16 no)');
  });

  it('vulkanDevices answers, not throws, where there is no loader; a bad argument is NATIVE_BAD_ARGUMENT', () => {
    const none = vulkanDevices('/nonexistent/libvulkan.so.1');
    expect(none.step).toBe(1);
    expect(none.devices).toEqual([]);
    expect(none.error).toMatch(/cannot open \/nonexistent\/libvulkan\.so\.1/);
    expect(() => vulkanDevices('')).toThrow(expect.objectContaining({ code: 'NATIVE_BAD_ARGUMENT' }));
  });

  it('in this process: available exactly when the provider starts, and then identified', async () => {
    const r = await describeWebgpuAdapter();
    if (!r.available) {
      expect(r.reason).toBeTruthy();
      expect(r.info).toBeUndefined();
      return;
    }
    expect(r.info!.name).not.toBe('');
  });

  const setup = webgpuForTests();
  it.skipIf(!setup)(`with the adapter's environment (${setup?.source ?? 'none'}): name, vendor, software and float16 as the Vulkan loader and onnxruntime see them`, () => {
    const script = `
      import { describeWebgpuAdapter } from './app/engine/device/webgpu-adapter.ts';
      console.log(JSON.stringify(await describeWebgpuAdapter()));`;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: PROJECT_ROOT, env: setup!.env, encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout.trim().split('\n').pop()!) as Awaited<ReturnType<typeof describeWebgpuAdapter>>;
    expect(report.available).toBe(true);
    const seen = setup!.adapter!;
    expect(report.info!.name).toBe(seen.name);
    expect(report.info!.vendor).toBe(vendorName(seen.vendorId));
    expect(report.info!.software).toBe(seen.type === 4);
    expect(report.info!.float16).toBe(seen.float16);
    if (/SwiftShader/.test(seen.name)) {
      // SwiftShader: Google's CPU rasteriser, no shader-f16 (fp16 graphs fail at run())
      expect(report.info).toMatchObject({ vendor: 'Google', software: true, float16: false });
      expect(report.info!.note).toMatch(/no float16: KV rows and graphs run in float32/);
      expect(report.vulkan).toMatchObject({ type: 4, shaderFloat16: false });
    }
    console.log(`WebGPU adapter (${setup!.source}): ${adapterLine(report.info!)}; ${report.info!.note}`);
  });
});
