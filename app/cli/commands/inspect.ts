// longhand inspect <path> [--json] [--context N] [--kv-type fp16|fp32|int8]
import { UsageError } from '../../common/errors.ts';
import { adapterLine, describeWebgpuAdapter, type WebgpuAdapter } from '../../engine/device/webgpu-adapter.ts';
import { inspectModel, type ModelReport } from '../../engine/model/inspect.ts';
import { loadModel } from '../../engine/model/load-model.ts';
import { KV_ELEMENT_BYTES, type KvElementType } from '../../engine/model/memory-estimate.ts';
import type { CliIO } from '../main.ts';
import { oneOf, parseCommandArgs, positiveInteger } from '../parse-args.ts';

const HELP = `usage: longhand inspect <path> [--json] [--context N] [--kv-type fp16|fp32|int8]

  <path>          a .gguf file or a Hugging Face folder (config.json + safetensors)
  --json          print one JSON object instead of a table
  --context N     tokens of context for the KV-cache estimate (default: the trained context)
  --kv-type T     KV row precision for the estimate (default fp16)

The report ends with the WebGPU adapter onnxruntime finds here (what --device webgpu runs on):
its name, vendor, whether it is a software rasteriser and whether it computes in float16.`;

export async function runInspect(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    json: { type: 'boolean' },
    context: { type: 'string' },
    'kv-type': { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.out(`${HELP}\n`);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError(`expected one model path, got ${positionals.length}`);
  const contextTokens = positiveInteger(values.context, '--context');
  const kvType = oneOf(values['kv-type'], Object.keys(KV_ELEMENT_BYTES) as KvElementType[], '--kv-type');

  const model = await loadModel(positionals[0]!);
  try {
    const report = inspectModel(model, { contextTokens, kvType });
    const webgpu = await describeWebgpuAdapter();
    const devices = { webgpu: webgpu.available ? { available: true, ...webgpu.info! } : { available: false, reason: webgpu.reason } };
    io.out(values.json ? `${JSON.stringify({ ...report, devices }, null, 2)}\n` : formatReport(report) + formatDevices(webgpu));
  } finally {
    model.close();
  }
  return 0;
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

/**
 * The layer pattern (W: sliding window, G: global) and each layer's KV pool bytes at the context:
 * a global layer every token, a window layer its ring (+ its share of the ring checkpoints).
 */
export function formatKvLayers(m: ModelReport['memory']): string[] {
  const layers = m.kvLayers;
  if (layers.length === 0) return [];
  const windows = [...new Set(layers.filter((l) => l.kind === 'window').map((l) => l.window))];
  // every layer in order: a KV-shared one (Gemma 4) in lower case, keeping no rows of its own
  const shared = m.kvSharedLayers;
  const letters = [...layers.map((l) => ({ layer: l.layer, c: l.kind === 'window' ? 'W' : 'G' })), ...shared.map((l) => ({ layer: l.layer, c: l.kind === 'window' ? 'w' : 'g' }))];
  const pattern = letters.sort((a, b) => a.layer - b.layer).map((l) => l.c).join('');
  const sharedNote = shared.length > 0 ? `; w/g: KV-shared, reading ${shared.map((l) => `${l.layer}→${l.source}`).join(', ')}` : '';
  const sum = (kind: string, f: (l: (typeof layers)[number]) => number): number => layers.filter((l) => l.kind === kind).reduce((s, l) => s + f(l), 0);
  const lines = [
    `  layer pattern             ${pattern}${windows.length > 0 ? `  (W: sliding window ${windows.join('/')}, as a ring; G: global${sharedNote})` : `  (G: global${sharedNote})`}`,
    `  KV pool per layer (rows + positions; window layers: ring slots + checkpoints):`,
  ];
  for (const l of layers) {
    const kind = l.kind === 'window' ? `window ${l.window}` : 'global';
    const extra = l.checkpointBytes > 0 ? ` + ${formatBytes(l.checkpointBytes)} checkpoints` : '';
    lines.push(`    layer ${String(l.layer).padStart(3)}  ${kind.padEnd(12)} ${String(l.slots).padStart(8)} slots  ${formatBytes(l.poolBytes)}${extra}`);
  }
  const windowBytes = sum('window', (l) => l.poolBytes + l.checkpointBytes);
  lines.push(`  KV pool total             ${formatBytes(m.kvPoolBytes)} (window layers ${formatBytes(windowBytes)}, global layers ${formatBytes(sum('global', (l) => l.poolBytes))})`);
  return lines;
}

function formatReport(r: ModelReport): string {
  const m = r.memory;
  const types = Object.entries(r.weightTypes)
    .map(([type, t]) => `${type} ×${t.tensors} (${formatBytes(t.bytes)})`)
    .join(', ');
  const verdict = (fits: boolean) => (fits ? 'fits' : 'does NOT fit');
  const lines = [
    `model          ${r.path}`,
    `format         ${r.format}, architecture ${r.architecture} (${r.family})`,
    `parameters     ${r.parameters.toLocaleString('en-US')}`,
    `shape          dim ${r.hiddenSize}, ${r.layers} layers, ${r.heads} heads, ${r.kvHeads} KV heads, head dim ${r.headDim}, ffn ${r.ffnSize}`,
    ...(r.moe
      ? [
          `experts        ${r.moe.experts} per layer, ${r.moe.expertsUsed} per token, each ${r.moe.expertFfn} wide (mixture of experts: the MLP)`,
          `               ${formatBytes(r.moe.expertBytes)} of expert weights (routers included), ${formatBytes(r.moe.expertBytesPerToken)} read per token`,
        ]
      : []),
    `vocabulary     ${r.vocabSize}`,
    `trained ctx    ${r.trainedContext}`,
    `weight types   ${types}`,
    `chat template  ${r.chatTemplate ? 'yes' : 'no'}`,
    '',
    `memory at ${m.contextTokens} tokens of context (KV ${m.kvType}):`,
    `  weights in RAM            ${formatBytes(m.weightsBytes)}`,
    `  KV cache (full)           ${formatBytes(m.kvFullBytes)}`,
    ...formatKvLayers(m),
    `  partial keys (InfiniGen)  ${formatBytes(m.partialKeyBytes)}`,
    `  staged rows (InfiniGen)   ${formatBytes(m.stagedKvBytes)}`,
    `  total, full cache         ${formatBytes(m.totalFullBytes)}  ${verdict(m.fitsFull)}`,
    `  total, InfiniGen          ${formatBytes(m.totalInfinigenBytes)}  ${verdict(m.fitsInfinigen)}`,
    `  free memory now           ${formatBytes(m.freeBytes)} of ${formatBytes(m.totalBytes)}`,
    `  largest context that fits ${m.maxContextThatFits} tokens`,
    `offload mode (--offload), device vs host:`,
    `  device: weights           ${formatBytes(m.offload.deviceWeightsBytes)}`,
    `  device: row buffer, full  ${formatBytes(m.offload.deviceRowBufferFullBytes)}`,
    `  device: row buffer, InfiniGen ${formatBytes(m.offload.deviceRowBufferInfinigenBytes)} (CPU provider; other providers hold every slot, as full)`,
    `  host: KV pool             ${formatBytes(m.offload.hostKvBytes)} full, ${formatBytes(m.offload.hostKvInfinigenBytes)} InfiniGen (with partial keys)`,
  ];
  return `${lines.join('\n')}\n`;
}

/** The WebGPU adapter section: what `--device webgpu` would run on, or why there is none. */
function formatDevices(webgpu: WebgpuAdapter): string {
  if (!webgpu.available) return `devices:\n  webgpu                    none (${webgpu.reason})\n`;
  const info = webgpu.info!;
  return `devices:\n  webgpu                    ${adapterLine(info)}${info.note ? `\n                            ${info.note}` : ''}\n`;
}
