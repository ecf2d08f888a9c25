// A WebGPU adapter for the tests that run the GPU path for real (issue 33), found or set up here.
//
// onnxruntime-node's WebGPU provider (Dawn) runs on Vulkan under Linux. Most test machines have no
// GPU, and Debian 12's own software driver (Mesa 22.3 lavapipe) lacks features current Dawn needs,
// but Debian's chromium package (which CI installs for the browser tests) ships SwiftShader, a
// Vulkan rasteriser on the CPU, with its own Vulkan loader. The Vulkan loader is found through the
// dynamic linker's search path, read once when a process starts, so WebGPU work runs in a child
// process started with the environment below; that also keeps a native abort in onnxruntime (such
// as getData() on a device-resident output) to the one test that caused it.
//
// Candidates, first that runs a one-node graph on WebGPU wins:
//   1. the machine as it is (a real GPU, or a working system driver: nothing to set up);
//   2. SwiftShader from chromium: LD_LIBRARY_PATH=<chromium dir>, VK_ICD_FILENAMES=<its ICD manifest>.
// None: the tests that need it skip with a message; under CI=true that is a failure.
// SwiftShader has no float16 (fp16 graphs fail at run()), so the tests run float32 KV rows.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from './models.ts';

export interface WebgpuSetup {
  /** the environment a child process needs for the adapter (the parent's plus the loader's) */
  env: NodeJS.ProcessEnv;
  /** where the adapter came from, in words */
  source: string;
  /** what the child saw: the Vulkan device and whether float16 ran */
  adapter: { name: string; vendorId: number; type: number; float16: boolean } | null;
}

/** Folders where Debian/Ubuntu chromium packages keep SwiftShader's Vulkan loader and ICD. */
const CHROMIUM_DIRS = ['/usr/lib/chromium', '/usr/lib/chromium-browser'];

// Run in the child: start the provider, say which Vulkan device the loader lists, whether float16 runs.
const PROBE = `
import { probeProvider, probeFloat16 } from './app/engine/onnx/session.ts';
import { vulkanDevices } from './native/index.js';
import { preferredDevice } from './app/engine/device/webgpu-adapter.ts';
const started = await probeProvider('webgpu');
const listed = vulkanDevices();
const d = listed.step === 0 ? preferredDevice(listed.devices) : undefined;
const f16 = started.ok ? (await probeFloat16('webgpu')).ok : false;
console.log(JSON.stringify({ ok: started.ok, message: started.message ?? null, adapter: d ? { name: d.name, vendorId: d.vendorId, type: d.type, float16: f16 } : null }));
`;

function probe(env: NodeJS.ProcessEnv): { ok: boolean; message: string | null; adapter: WebgpuSetup['adapter'] } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', PROBE], { cwd: PROJECT_ROOT, env, encoding: 'utf8', timeout: 60_000 });
  const line = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as ReturnType<typeof probe>;
  } catch {
    return { ok: false, message: `probe exited ${r.status ?? r.signal}: ${(r.stderr ?? '').trim().split('\n').slice(-3).join(' ')}`, adapter: null };
  }
}

let cached: { setup: WebgpuSetup | undefined; tried: string[] } | undefined;

/** The first candidate whose child runs WebGPU (probed once per test process; ~1-2 s per candidate). */
export function findWebgpuAdapter(): { setup: WebgpuSetup | undefined; tried: string[] } {
  if (cached) return cached;
  const tried: string[] = [];
  const candidates: { source: string; env: NodeJS.ProcessEnv }[] = [{ source: 'the machine as it is', env: { ...process.env } }];
  for (const dir of CHROMIUM_DIRS) {
    const icd = join(dir, 'vk_swiftshader_icd.json');
    if (!existsSync(icd) || !existsSync(join(dir, 'libvulkan.so.1'))) continue;
    const ld = [dir, process.env.LD_LIBRARY_PATH].filter(Boolean).join(':');
    candidates.push({ source: `SwiftShader from ${dir}`, env: { ...process.env, LD_LIBRARY_PATH: ld, VK_ICD_FILENAMES: icd } });
  }
  for (const c of candidates) {
    const r = probe(c.env);
    if (r.ok) {
      cached = { setup: { env: c.env, source: c.source, adapter: r.adapter }, tried };
      return cached;
    }
    tried.push(`${c.source}: ${r.message ?? 'no adapter'}`);
  }
  if (candidates.length === 1) tried.push(`no SwiftShader (looked for vk_swiftshader_icd.json and libvulkan.so.1 in ${CHROMIUM_DIRS.join(', ')}; Debian's chromium package has them)`);
  cached = { setup: undefined, tried };
  return cached;
}

/** The adapter's setup, or undefined with a SKIP message; under CI=true a missing adapter throws. */
export function webgpuForTests(): WebgpuSetup | undefined {
  const { setup, tried } = findWebgpuAdapter();
  if (setup) return setup;
  const message = `no WebGPU adapter (tests of the GPU path are skipped): ${tried.join('; ')}`;
  if (process.env.CI) throw new Error(`${message}; CI must have one (.ci/run installs chromium, whose SwiftShader provides it)`);
  console.warn(`SKIP: ${message}`);
  return undefined;
}

/** Runs `script` (a module path under the project) with the adapter's environment; its stdout's last line parsed as JSON. */
export function runWithWebgpu<T>(setup: WebgpuSetup, script: string, args: readonly string[], timeoutMs: number): T {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(PROJECT_ROOT, script), ...args], { cwd: PROJECT_ROOT, env: setup.env, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 256 << 20 });
  if (r.status !== 0) {
    const why = r.signal ? `killed by ${r.signal}${r.error ? ` (${r.error.message})` : ''}` : `exit ${r.status}`;
    throw new Error(`${script} on WebGPU (${setup.source}): ${why}\n${(r.stderr ?? '').split('\n').slice(-20).join('\n')}`);
  }
  const line = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  return JSON.parse(line) as T;
}
