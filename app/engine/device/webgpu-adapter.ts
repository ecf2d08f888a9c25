// Which GPU adapter onnxruntime's WebGPU provider runs on here, and what it can do (issue 33).
//
// onnxruntime-node tells JS nothing about the adapter Dawn picked, so the engine asks the same Vulkan
// loader Dawn uses on Linux (native vulkanDevices) and takes the device Dawn's high-performance
// preference would take: a discrete GPU, else an integrated one, else a virtual one, else a CPU
// (software) device. Whether the provider computes in float16 is asked of onnxruntime itself
// (probeFloat16: a cast through float16 run on the device), since that is what the graphs need.
//
// A software adapter (Vulkan device type CPU: SwiftShader, Mesa's lavapipe) computes correctly and
// far slower than the CPU path (SwiftShader: ~0.1-0.3 s per 256x4096 MatMul on this machine's
// CPUs); `--device auto` never picks one, `--device webgpu` uses it because it was asked for.
import { vulkanDevices, type VulkanDevice } from '../../../native/index.js';
import { probeFloat16, probeProvider } from '../onnx/session.ts';
import type { AdapterInfo } from '../../common/protocol.ts';

/** Vulkan device types (VkPhysicalDeviceType) in Dawn's high-performance order. */
const PREFERENCE = [2, 1, 3, 4, 0] as const;
const TYPE_NAMES: Record<number, string> = { 0: 'other', 1: 'integrated GPU', 2: 'discrete GPU', 3: 'virtual GPU', 4: 'CPU (software)' };

/** PCI and Khronos vendor ids seen on Vulkan devices. */
const VENDORS: Record<number, string> = {
  0x1002: 'AMD',
  0x1010: 'ImgTec',
  0x10de: 'NVIDIA',
  0x13b5: 'ARM',
  0x5143: 'Qualcomm',
  0x8086: 'Intel',
  0x106b: 'Apple',
  0x1ae0: 'Google',
  0x10005: 'Mesa',
  0x10006: 'PoCL',
};

export interface WebgpuAdapter {
  /** the WebGPU provider starts here (an adapter exists) */
  available: boolean;
  /** why not, when it does not (onnxruntime's message) */
  reason?: string;
  /** what the report shows; undefined when no adapter is available */
  info?: AdapterInfo;
  /** the Vulkan device taken to be Dawn's (undefined: Vulkan not readable here, e.g. another OS) */
  vulkan?: VulkanDevice;
}

export function vendorName(id: number): string {
  return VENDORS[id] ?? `0x${id.toString(16)}`;
}

/** The Vulkan device Dawn's high-performance preference picks among `devices`. */
export function preferredDevice(devices: readonly VulkanDevice[]): VulkanDevice | undefined {
  for (const type of PREFERENCE) {
    const d = devices.find((x) => x.type === type);
    if (d) return d;
  }
  return undefined;
}

/** The adapter the WebGPU provider would run on, probed now (~0.1-1 s: it starts the provider twice). */
export async function describeWebgpuAdapter(): Promise<WebgpuAdapter> {
  // On Linux Dawn has only Vulkan: without a loader or a device there is no adapter, and asking Dawn
  // anyway prints its own warning on stderr ("Couldn't load Vulkan") into every command's output
  const listed = process.platform === 'linux' ? vulkanDevices() : undefined;
  if (listed && listed.step !== 0) return { available: false, reason: `no Vulkan: ${listed.error}` };
  if (listed && listed.devices.length === 0) return { available: false, reason: 'no Vulkan device (the loader lists none)' };
  const started = await probeProvider('webgpu');
  if (!started.ok) return { available: false, reason: shortReason(started.message ?? 'unknown reason') };
  const vulkan = listed && listed.step === 0 ? preferredDevice(listed.devices) : undefined;
  const float16 = (await probeFloat16('webgpu')).ok;
  const software = vulkan ? vulkan.type === 4 : null;
  const info: AdapterInfo = {
    name: vulkan?.name ?? 'unknown',
    vendor: vulkan ? vendorName(vulkan.vendorId) : 'unknown',
    software,
    float16,
    note: [
      vulkan ? `Vulkan ${TYPE_NAMES[vulkan.type] ?? 'device'}` : `adapter not identified (${listed?.error ?? 'Vulkan is read on Linux only'})`,
      software ? 'a software rasteriser: correct, slower than the CPU path' : undefined,
      float16 ? undefined : 'no float16: KV rows and graphs run in float32',
    ]
      .filter((x) => x !== undefined)
      .join('; '),
  };
  return { available: true, info, ...(vulkan ? { vulkan } : {}) };
}

/** onnxruntime's message without its source location and check text: "Failed to get a WebGPU adapter: No supported adapters". */
export function shortReason(message: string): string {
  const m = /was false\.\s*(.*)$/s.exec(message);
  return (m ? m[1]! : message).trim();
}

/** One line for logs and `longhand inspect`: name, vendor, software or not, float16. */
export function adapterLine(info: AdapterInfo): string {
  const kind = info.software === null ? 'software or not unknown' : info.software ? 'software' : 'hardware';
  return `${info.name} (${info.vendor}; ${kind}; float16 ${info.float16 ? 'yes' : 'no'})`;
}
