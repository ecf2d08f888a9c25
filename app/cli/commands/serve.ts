// longhand serve [--model PATH] [--port N] … : the browser-mode / OpenAI-compatible server on
// 127.0.0.1. The first line on stdout is the page URL with the per-run token (npm start and the
// tests read it); everything else goes to stderr. Ctrl-C or SIGTERM closes the engine and exits 0.
// Before anything starts, the window UI is built when renderer/dist is missing or older than its
// sources (renderer-build.ts); a failed build ends the command with vite's message.
import { spawn } from 'node:child_process';
import { resolve as resolvePath } from 'node:path';
import { UsageError } from '../../common/errors.ts';
import { DENSE_ENGINES, DEVICES, KV_TYPES } from '../../common/protocol.ts';
import { EngineClient } from '../../engine/client.ts';
import { EngineSession } from '../../server/engine-session.ts';
import { kvPoolBytes } from '../../server/metrics.ts';
import { ensureRenderer, RendererBuildError } from '../../server/renderer-build.ts';
import { LOOPBACK_HOST, startServer } from '../../server/serve.ts';
import { defaultDataDir, engineEnv } from '../../server/services/data-dir.ts';
import type { CliIO } from '../main.ts';
import { oneOf, parseCommandArgs, positiveInteger } from '../parse-args.ts';
import { POLICY_HELP, POLICY_OPTIONS, policyLoadOptions } from '../policy-options.ts';

const HELP = `usage: longhand serve [--model PATH] [options]

  --model PATH          a .gguf file or a Hugging Face folder to load (without it, load one in the
                        page's Models view; until then the API answers 503 engine_not_loaded)
  --port N              port on 127.0.0.1 (default 0: a free port)
  --host 127.0.0.1      the only host allowed: the server never listens beyond this machine
  --open                open the page in the default browser
  --context N           context window (default: trained context, at most 4096)
  --threads N           threads for the dense work
  --dense E             who runs the dense layers: auto (default: native C++ over the file's own
                        blocks where its kernels cover every weight type, else onnxruntime), native, onnx
  --kv-type T           KV-cache precision: fp16 (default), fp32, int8 (one scale per row)
  --device D            ${DEVICES.join('|')} (default cpu); webgpu: offload mode on onnxruntime's
                        WebGPU provider, any adapter (a software one too); auto: WebGPU on a hardware
                        adapter with float16, else cpu
  --policy P            KV policy of the loaded model (default full); a request may choose its own
                        with the 'longhand' extension field (app/server/README.md)
${POLICY_HELP}
  --data-dir PATH       documents, settings and downloaded models (default ${defaultDataDir()})

The first line printed is the page URL with this run's token. API clients send
'Authorization: Bearer <token>' to /v1/models, /v1/completions, /v1/chat/completions and /metrics.`;

/** Tries the platform's opener; a missing one is not an error (the URL is printed anyway). */
export function openInBrowser(url: string): void {
  const [command, args] = process.platform === 'darwin' ? ['open', [url]] : process.platform === 'win32' ? ['cmd', ['/c', 'start', '""', url]] : ['xdg-open', [url]];
  try {
    const child = spawn(command, args, { stdio: 'ignore', detached: true });
    child.on('error', () => {});
    child.unref();
  } catch {
    // no opener: the user copies the URL
  }
}

function port(value: string | undefined): number {
  if (value === undefined) return 0;
  if (!/^\d+$/.test(value) || Number(value) > 65535) throw new UsageError(`--port must be an integer from 0 to 65535, got '${value}'`);
  return Number(value);
}

export async function runServe(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: 'string' },
    port: { type: 'string' },
    host: { type: 'string' },
    open: { type: 'boolean' },
    context: { type: 'string' },
    threads: { type: 'string' },
    dense: { type: 'string' },
    'kv-type': { type: 'string' },
    device: { type: 'string' },
    'data-dir': { type: 'string' },
    ...POLICY_OPTIONS,
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.out(`${HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  if (values.host !== undefined && values.host !== LOOPBACK_HOST) throw new UsageError(`--host must be ${LOOPBACK_HOST}: the server holds a local model and never listens beyond this machine (got '${values.host}')`);
  const listenPort = port(values.port);
  const contextLength = positiveInteger(values.context, '--context');
  const threads = positiveInteger(values.threads, '--threads');
  const dense = oneOf(values.dense, DENSE_ENGINES, '--dense') ?? 'auto';
  const kvType = oneOf(values['kv-type'], KV_TYPES, '--kv-type') ?? 'fp16';
  const device = oneOf(values.device, DEVICES, '--device') ?? 'cpu';
  const policy = policyLoadOptions(values);

  const dataDir = values['data-dir'] ? resolvePath(values['data-dir']) : defaultDataDir();
  try {
    await ensureRenderer({ log: (line) => io.err(`${line}\n`) });
  } catch (error) {
    if (!(error instanceof RendererBuildError)) throw error;
    io.err(`longhand serve: ${error.message}\n`);
    return 1;
  }
  // Document snapshots go beside the documents (<data dir>/kv-snapshots); restarts keep the folder.
  const startEngine = () => EngineClient.start({ env: engineEnv(dataDir) });
  const engine = await startEngine();
  // The session may replace the engine process (a restart after a crash): close whichever runs.
  const session = new EngineSession(engine, { startEngine, log: (line) => io.err(`${line}\n`) });
  try {
    if (values.model) {
      io.err(`loading ${values.model}…\n`);
      const model = await session.load({ modelPath: values.model, device, kvType, dense, ...policy, ...(threads ? { threads } : {}), ...(contextLength ? { contextLength } : {}) });
      io.err(`loaded ${session.modelId} (${model.architecture}, ${model.layers} layers, context ${model.contextLength}, KV pool ${(kvPoolBytes(model) / 2 ** 20).toFixed(2)} MiB ${model.kvType}${model.dense ? `, dense ${model.dense}` : ''}) in ${model.loadMs.toFixed(0)} ms\n`);
    }
    const server = await startServer({ session, port: listenPort, dataDir, log: (line) => io.err(`${line}\n`) });
    io.out(`${server.url}\n`);
    io.err(`OpenAI-compatible API at http://${LOOPBACK_HOST}:${server.port}/v1 (Authorization: Bearer ${server.token}); Ctrl-C stops\n`);
    if (values.open) openInBrowser(server.url);

    const signal = await new Promise<NodeJS.Signals>((resolve) => {
      process.once('SIGINT', () => resolve('SIGINT'));
      process.once('SIGTERM', () => resolve('SIGTERM'));
    });
    io.err(`${signal}: stopping\n`);
    await server.close();
    return 0;
  } finally {
    await session.close();
  }
}
