// onnxruntime sessions for the engine's graphs. This is the only module (with its tests) that
// touches onnxruntime-node; the rest of the engine passes plain TensorData in and out.
//
// Defaults chosen for one session per layer: no spinning of idle intra-op threads (otherwise the
// sessions' thread pools spin against each other: measured 10x slower), sequential execution,
// one inter-op thread. session.run blocks the JS thread while it computes. No CPU memory arena:
// each session's arena keeps its largest activations for good (17 sessions on a 16-layer model held
// ~250 MiB more after a 128-token prefill chunk than without), while plain allocations of that size
// go back to the system.

import * as ort from 'onnxruntime-node';

import { OnnxError } from './errors.ts';
import type { TensorData } from './graph-builder.ts';
import { encodeModel } from './onnx-proto.ts';

export type ProviderName = 'cpu' | 'webgpu' | 'cuda' | 'tensorrt' | 'dml' | 'coreml' | (string & {});

export interface ProviderInfo {
  name: string;
  /** Shipped inside the onnxruntime-node package (others need separately installed libraries). */
  bundled: boolean;
}

export interface EngineSessionOptions {
  /** Intra-op threads (default: onnxruntime's choice, one per physical core). */
  intraOpThreads?: number;
  /** In order of preference; default ['cpu']. */
  executionProviders?: readonly ProviderName[];
  /** Let idle intra-op threads spin (default false: right for many sessions in one process). */
  allowSpinning?: boolean;
  graphOptimizationLevel?: 'disabled' | 'basic' | 'extended' | 'all';
  /** onnxruntime's per-session CPU memory arena (default false: see the top of this file). */
  cpuMemArena?: boolean;
  /** Name used in error messages (e.g. 'layer3.pre'). */
  label?: string;
  /**
   * Also write the optimised graph to `modelPath` and its initializers of at least 1 KiB, with the
   * blobs the kernels pre-pack from them (MatMulNBits' packed B), to `externalFile` beside it
   * (onnxruntime's session.save_external_prepacked_constant_initializers). A session later created
   * from `modelPath` with graphOptimizationLevel 'disabled' maps that file and hands the kernels
   * their packed blobs instead of packing again (the stage cache, forward/stage-cache.ts: the 953M
   * Q8_0 fixture's 17 sessions in 2.4-2.5 s instead of 12.5 s). onnxruntime 1.30 writes the blobs at unaligned
   * offsets, and MatMulNBits under accuracy_level 4 (CompInt8) computes garbage from a blob mapped
   * at an offset that is not a multiple of 64: run alignExternalData (external-data-align.ts) on
   * the saved files before loading them (session.test.ts shows both).
   */
  saveOptimized?: { modelPath: string; externalFile: string };
  /**
   * Outputs left on the provider's device (WebGPU: preferredOutputLocation 'gpu-buffer'): run()
   * returns them as DeviceTensor, which a later run takes as a feed without a copy through the host
   * (the dense stages' hidden state between layer graphs). Ignored on other providers.
   */
  keepOnDevice?: readonly string[];
}

/**
 * An output kept on the device (EngineSessionOptions.keepOnDevice): fed to later runs as it is, and
 * disposed by whoever holds it last. Its values are never read on the host: onnxruntime-node 1.30
 * aborts the whole process (an uncatchable C++ terminate) on getData() of a WebGPU tensor, so
 * `data` throws a typed error instead of ever reaching it.
 */
export class DeviceTensor {
  readonly onDevice = true;
  readonly elemType: TensorData['elemType'];
  readonly dims: readonly number[];
  private disposed = false;
  constructor(
    readonly tensor: ort.Tensor,
    private readonly name: string,
  ) {
    this.elemType = tensor.type as TensorData['elemType'];
    this.dims = [...tensor.dims];
  }

  get data(): never {
    throw new OnnxError('ONNX_SESSION_FAILED', `${this.name} is kept on the device and is never read on the host`, { output: this.name });
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.tensor.dispose();
  }
}

/** A feed or an output: host data, or a tensor left on the device by an earlier run. */
export type StageValue = TensorData | DeviceTensor;

/** onnxruntime-node's version (what a cache of onnxruntime's own files must be keyed by). */
export function onnxruntimeVersion(): string {
  return ort.env.versions.node ?? ort.env.versions.common;
}

/** The execution providers this onnxruntime-node build knows about. */
export function listProviders(): ProviderInfo[] {
  return ort.listSupportedBackends().map((b) => ({ name: b.name, bundled: b.bundled }));
}

function checkProviders(providers: readonly string[], label: string): void {
  const known = listProviders();
  for (const p of providers) {
    if (!known.some((k) => k.name === p)) {
      throw new OnnxError('ONNX_PROVIDER_UNAVAILABLE', `${label}: execution provider '${p}' is not in this onnxruntime-node build (it has: ${known.map((k) => k.name).join(', ')})`, {
        provider: p,
        available: known.map((k) => k.name).join(','),
      });
    }
  }
}

function toOrtTensor(t: StageValue): ort.Tensor {
  if (t instanceof DeviceTensor) return t.tensor;
  return new ort.Tensor(t.elemType, t.data, [...t.dims]);
}

function fromOrtTensor(name: string, t: ort.Tensor): TensorData {
  const dims = [...t.dims];
  switch (t.type) {
    case 'float32':
      return { elemType: 'float32', dims, data: t.data as Float32Array };
    case 'float16': {
      // onnxruntime-common hands out Float16Array where the platform has it, Uint16Array otherwise
      const d = t.data as unknown as ArrayBufferView;
      return { elemType: 'float16', dims, data: new Uint16Array(d.buffer, d.byteOffset, d.byteLength / 2) };
    }
    case 'uint8':
      return { elemType: 'uint8', dims, data: t.data as Uint8Array };
    case 'int8':
      return { elemType: 'int8', dims, data: t.data as Int8Array };
    case 'int32':
      return { elemType: 'int32', dims, data: t.data as Int32Array };
    case 'int64':
      return { elemType: 'int64', dims, data: t.data as BigInt64Array };
    default:
      throw new OnnxError('ONNX_SESSION_FAILED', `output ${name} has element type ${t.type}, which the engine does not read`, { output: name, type: t.type });
  }
}

/** A compiled graph. `run` blocks the calling thread for the duration of the computation. */
export class EngineSession {
  readonly label: string;
  readonly providers: readonly string[];
  private session: ort.InferenceSession | undefined;

  constructor(session: ort.InferenceSession, label: string, providers: readonly string[]) {
    this.session = session;
    this.label = label;
    this.providers = providers;
  }

  get inputNames(): readonly string[] {
    return this.live().inputNames;
  }

  get outputNames(): readonly string[] {
    return this.live().outputNames;
  }

  private live(): ort.InferenceSession {
    if (!this.session) throw new OnnxError('ONNX_SESSION_FAILED', `${this.label}: session used after release()`, { session: this.label });
    return this.session;
  }

  async run(feeds: Readonly<Record<string, StageValue>>, outputNames?: readonly string[]): Promise<Record<string, StageValue>> {
    const session = this.live();
    const ortFeeds: Record<string, ort.Tensor> = {};
    for (const [name, t] of Object.entries(feeds)) ortFeeds[name] = toOrtTensor(t);
    let results: ort.InferenceSession.ReturnType;
    try {
      results = outputNames ? await session.run(ortFeeds, [...outputNames]) : await session.run(ortFeeds);
    } catch (cause) {
      throw new OnnxError('ONNX_SESSION_FAILED', `${this.label}: run failed: ${(cause as Error).message}`, { session: this.label }, { cause });
    }
    const out: Record<string, StageValue> = {};
    for (const [name, t] of Object.entries(results)) out[name] = t.location === 'gpu-buffer' ? new DeviceTensor(t, `${this.label}.${name}`) : fromOrtTensor(name, t);
    return out;
  }

  async release(): Promise<void> {
    const s = this.session;
    this.session = undefined;
    if (s) await s.release();
  }
}

/**
 * A session on a device provider alone (no 'cpu' listed) runs every node there or fails to compile:
 * onnxruntime would otherwise put nodes the provider lacks on the CPU and copy their inputs and
 * outputs across every run, bytes the offload path's count would not see.
 */
function onDeviceOnly(providers: readonly string[]): { disable_cpu_ep_fallback?: string } {
  return providers.includes('cpu') ? {} : { disable_cpu_ep_fallback: '1' };
}

/** onnxruntime's SessionOptions for our defaults (exported for tests and benchmarks). */
export function sessionOptions(options: EngineSessionOptions = {}): ort.InferenceSession.SessionOptions {
  const providers = options.executionProviders ?? ['cpu'];
  const opts: ort.InferenceSession.SessionOptions = {
    executionProviders: [...providers],
    executionMode: 'sequential',
    interOpNumThreads: 1,
    graphOptimizationLevel: options.graphOptimizationLevel ?? 'all',
    enableCpuMemArena: options.cpuMemArena ?? false,
    extra: { session: { intra_op: { allow_spinning: options.allowSpinning ? '1' : '0' }, ...onDeviceOnly(providers) } },
  };
  if (options.intraOpThreads !== undefined) opts.intraOpNumThreads = options.intraOpThreads;
  if (options.keepOnDevice && options.keepOnDevice.length > 0 && providers[0] === 'webgpu') {
    opts.preferredOutputLocation = Object.fromEntries(options.keepOnDevice.map((name) => [name, 'gpu-buffer' as const]));
  }
  if (options.saveOptimized) {
    opts.optimizedModelFilePath = options.saveOptimized.modelPath;
    opts.extra = {
      session: {
        intra_op: { allow_spinning: options.allowSpinning ? '1' : '0' },
        ...onDeviceOnly(providers),
        save_external_prepacked_constant_initializers: '1',
        // a bare file name: onnxruntime writes it beside the model and records it relative to it
        optimized_model_external_initializers_file_name: options.saveOptimized.externalFile,
        optimized_model_external_initializers_min_size_in_bytes: '1024',
      },
    };
  }
  return opts;
}

/**
 * Compiles a serialised model, or the model file at a path (its external data beside it, mapped).
 * Providers not in this onnxruntime build fail before onnxruntime is
 * called; a listed provider that cannot start on this machine (no adapter, library missing) fails
 * as ONNX_PROVIDER_UNAVAILABLE naming it. There is no silent fallback to the CPU: callers that
 * want one ask `probeProvider` first.
 */
export async function createSession(model: Uint8Array | string, options: EngineSessionOptions = {}): Promise<EngineSession> {
  const label = options.label ?? 'graph';
  const providers = options.executionProviders ?? ['cpu'];
  checkProviders(providers, label);
  try {
    const opts = sessionOptions(options);
    const session = typeof model === 'string' ? await ort.InferenceSession.create(model, opts) : await ort.InferenceSession.create(model, opts);
    return new EngineSession(session, label, providers);
  } catch (cause) {
    const message = errorMessage(cause);
    // Which provider failed? onnxruntime's messages usually name it; otherwise probe each one.
    let provider = providers.find((p) => p !== 'cpu' && message.toLowerCase().includes(p.toLowerCase()));
    if (provider === undefined) {
      for (const p of providers) {
        if (p !== 'cpu' && !(await probeProvider(p)).ok) {
          provider = p;
          break;
        }
      }
    }
    if (provider !== undefined) {
      throw new OnnxError('ONNX_PROVIDER_UNAVAILABLE', `${label}: execution provider '${provider}' could not start: ${message}`, { session: label, provider }, { cause });
    }
    throw new OnnxError('ONNX_SESSION_FAILED', `${label}: onnxruntime rejected the model: ${message}`, { session: label, providers: providers.join(',') }, { cause });
  }
}

function errorMessage(cause: unknown): string {
  return (cause instanceof Error ? cause.message : String(cause)).trim();
}

/** A one-node model (Relu on float32 [1]): what a provider probe compiles. */
let probe: Uint8Array | undefined;
function probeModel(): Uint8Array {
  probe ??= encodeModel({
    irVersion: 8,
    opsetImports: [{ domain: '', version: 13 }],
    graph: {
      name: 'probe',
      nodes: [{ opType: 'Relu', inputs: ['x'], outputs: ['y'] }],
      initializers: [],
      inputs: [{ name: 'x', elemType: 'float32', dims: [1] }],
      outputs: [{ name: 'y', elemType: 'float32', dims: [1] }],
    },
  });
  return probe;
}

export interface ProbeResult {
  provider: string;
  ok: boolean;
  /** onnxruntime's message when it could not start. */
  message?: string;
  /** Time to create (and release) a one-node session, ms. */
  ms: number;
}

/** Whether `provider` can start on this machine: compiles a one-node model with it alone. */
export async function probeProvider(provider: ProviderName): Promise<ProbeResult> {
  const t0 = performance.now();
  if (!listProviders().some((k) => k.name === provider)) {
    return { provider, ok: false, message: `not in this onnxruntime-node build`, ms: 0 };
  }
  try {
    const s = await ort.InferenceSession.create(probeModel(), { executionProviders: [provider], extra: { session: { intra_op: { allow_spinning: '0' } } } });
    await s.release();
    return { provider, ok: true, ms: performance.now() - t0 };
  } catch (cause) {
    return { provider, ok: false, message: errorMessage(cause), ms: performance.now() - t0 };
  }
}

/** Cast float32 [1] → float16 → float32: what a float16 probe runs (compiling alone is not enough). */
let probeF16: Uint8Array | undefined;
function probeFloat16Model(): Uint8Array {
  probeF16 ??= encodeModel({
    irVersion: 8,
    opsetImports: [{ domain: '', version: 13 }],
    graph: {
      name: 'probe_f16',
      nodes: [
        { opType: 'Cast', inputs: ['x'], outputs: ['h'], attributes: [{ name: 'to', type: 'INT', value: 10 }] },
        { opType: 'Cast', inputs: ['h'], outputs: ['y'], attributes: [{ name: 'to', type: 'INT', value: 1 }] },
      ],
      initializers: [],
      inputs: [{ name: 'x', elemType: 'float32', dims: [1] }],
      outputs: [{ name: 'y', elemType: 'float32', dims: [1] }],
    },
  });
  return probeF16;
}

/**
 * Whether `provider` computes in float16 on this machine: runs a float32 → float16 → float32 cast on
 * it alone (the CPU fallback disabled). On WebGPU a device without the shader-f16 feature (SwiftShader)
 * compiles such a graph and fails only at run() ("requires f16 but the device does not support it").
 */
export async function probeFloat16(provider: ProviderName): Promise<ProbeResult> {
  const t0 = performance.now();
  if (!listProviders().some((k) => k.name === provider)) return { provider, ok: false, message: `not in this onnxruntime-node build`, ms: 0 };
  let s: ort.InferenceSession | undefined;
  try {
    // severity 4 (fatal only): the failed run on a device without float16 is the answer, not an error to print
    s = await ort.InferenceSession.create(probeFloat16Model(), { executionProviders: [provider], logSeverityLevel: 4, extra: { session: { disable_cpu_ep_fallback: '1', intra_op: { allow_spinning: '0' } } } });
    const out = await s.run({ x: new ort.Tensor('float32', Float32Array.of(1.5), [1]) });
    const y = (out.y as ort.Tensor).data as Float32Array;
    if (y[0] !== 1.5) return { provider, ok: false, message: `float16 round trip of 1.5 gave ${y[0]}`, ms: performance.now() - t0 };
    return { provider, ok: true, ms: performance.now() - t0 };
  } catch (cause) {
    return { provider, ok: false, message: errorMessage(cause), ms: performance.now() - t0 };
  } finally {
    await s?.release();
  }
}
