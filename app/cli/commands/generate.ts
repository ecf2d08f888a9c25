// longhand generate --model PATH --prompt TEXT … : one generation through the engine host.
// Without --json the text streams to stdout as it is made; with --json one object is printed
// at the end. Ctrl-C cancels the generation (the engine stops between tokens) and still prints.
import { readFileSync, writeFileSync } from 'node:fs';
import { UsageError } from '../../common/errors.ts';
import { DENSE_ENGINES, DEVICES, KV_TYPES, SESSION_FILES_ENV, type CacheReport, type GenerateParams, type Prompt, type Sampling, type StopReason, type Timings } from '../../common/protocol.ts';
import { EngineClient } from '../../engine/client.ts';
import type { CliIO } from '../main.ts';
import { oneOf, parseCommandArgs, positiveInteger } from '../parse-args.ts';
import { number, POLICY_HELP, POLICY_OPTIONS, policyLoadOptions } from '../policy-options.ts';

const HELP = `usage: longhand generate --model PATH (--prompt TEXT | --prompt-file F) [options]

  --model PATH          a .gguf file or a Hugging Face folder
  --prompt TEXT         the text to continue
  --prompt-file F       read the prompt from a file
  --chat                wrap the prompt as a user message in the model's chat template
  --max-tokens N        tokens to generate (default 256)
  --temperature T       0 = greedy (default 0.8)
  --top-k K             0 = off (default 40)
  --top-p P             1 = off (default 0.95)
  --min-p P             0 = off (default 0.05)
  --repeat-penalty R    1 = off (default 1)
  --seed S              sampling seed
  --stop TEXT           stop string (repeatable)
  --context N           context window (default: trained context, at most 4096)
  --kv-type T           KV-cache precision: fp16 (default), fp32, int8 (one scale per row)
  --threads N           threads for the dense work
  --dense E             who runs the dense layers: auto (default: native C++ over the file's own
                        blocks where its kernels cover every weight type, else onnxruntime), native, onnx
  --device D            ${DEVICES.join('|')} (default cpu); webgpu: offload mode on onnxruntime's
                        WebGPU provider, any adapter (a software one too); auto: WebGPU on a hardware
                        adapter with float16, else cpu
  --policy P            KV policy: full (default), infinigen, streaming, h2o, quest, oracle, snapkv, window
${POLICY_HELP}
  --pool-budget BYTES   byte budget of the KV pool; smaller than the full cache evicts (full, infinigen)
  --inspect             measure attention recall (slower)
  --offload             offload mode: decode attention in an onnxruntime graph over a device-side
                        row buffer fed only the rows it lacks (policies full, infinigen)
  --metrics FILE        write the sampled per-step metrics as JSON lines
  --load-session F      start from the KV cache saved in F (a snapshot that does not fit the model,
                        KV type or policy, or is damaged, is refused with its reason and the prompt
                        is prefilled instead)
  --save-session F      save the KV cache to F after the generation (atomically)
  --json                print one JSON object (promptIds, tokenIds, text, stopReason, dense, timings)`;

export async function runGenerate(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: 'string' },
    prompt: { type: 'string' },
    'prompt-file': { type: 'string' },
    chat: { type: 'boolean' },
    'max-tokens': { type: 'string' },
    temperature: { type: 'string' },
    'top-k': { type: 'string' },
    'top-p': { type: 'string' },
    'min-p': { type: 'string' },
    'repeat-penalty': { type: 'string' },
    seed: { type: 'string' },
    stop: { type: 'string', multiple: true },
    context: { type: 'string' },
    'kv-type': { type: 'string' },
    threads: { type: 'string' },
    dense: { type: 'string' },
    device: { type: 'string' },
    ...POLICY_OPTIONS,
    'pool-budget': { type: 'string' },
    inspect: { type: 'boolean' },
    offload: { type: 'boolean' },
    metrics: { type: 'string' },
    'load-session': { type: 'string' },
    'save-session': { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.out(`${HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  if (!values.model) throw new UsageError('--model is required');
  if ((values.prompt === undefined) === (values['prompt-file'] === undefined)) throw new UsageError('give exactly one of --prompt and --prompt-file');

  let text = values.prompt;
  if (values['prompt-file'] !== undefined) {
    try {
      text = readFileSync(values['prompt-file'], 'utf8');
    } catch (error) {
      throw new UsageError(`cannot read --prompt-file ${values['prompt-file']}: ${(error as NodeJS.ErrnoException).code ?? error}`);
    }
  }
  const prompt: Prompt = values.chat ? { messages: [{ role: 'user', content: text! }] } : { text: text! };

  const sampling: Partial<Sampling> = {};
  const assign = <K extends keyof Sampling>(key: K, value: Sampling[K] | undefined) => {
    if (value !== undefined) sampling[key] = value;
  };
  assign('temperature', number(values.temperature, '--temperature'));
  assign('topK', number(values['top-k'], '--top-k'));
  assign('topP', number(values['top-p'], '--top-p'));
  assign('minP', number(values['min-p'], '--min-p'));
  assign('repetitionPenalty', number(values['repeat-penalty'], '--repeat-penalty'));
  assign('seed', number(values.seed, '--seed'));
  const params: Partial<GenerateParams> = { sampling: sampling as Sampling, stopStrings: values.stop ?? [] };
  const maxTokens = positiveInteger(values['max-tokens'], '--max-tokens');
  if (maxTokens !== undefined) params.maxTokens = maxTokens;

  const device = oneOf(values.device, DEVICES, '--device') ?? 'cpu';
  const kvType = oneOf(values['kv-type'], KV_TYPES, '--kv-type') ?? 'fp16';
  const threads = positiveInteger(values.threads, '--threads');
  const dense = oneOf(values.dense, DENSE_ENGINES, '--dense') ?? 'auto';
  const contextLength = positiveInteger(values.context, '--context');
  const { policy, infinigen, sparse } = policyLoadOptions(values);
  const metricsLines: string[] = [];

  const sessions = values['load-session'] !== undefined || values['save-session'] !== undefined;
  // a host that takes file paths for snapshots: only one the CLI starts for itself
  const engine = await EngineClient.start(sessions ? { env: { ...process.env, [SESSION_FILES_ENV]: '1' } } : {});
  const abort = new AbortController();
  const onSigint = () => abort.abort();
  process.on('SIGINT', onSigint);
  try {
    const model = await engine.load({
      modelPath: values.model,
      device,
      kvType,
      policy,
      infinigen,
      sparse,
      inspect: values.inspect ?? false,
      ...(values.offload === true ? { offload: true } : {}),
      poolBudgetBytes: positiveInteger(values['pool-budget'], '--pool-budget') ?? 0,
      dense,
      ...(threads ? { threads } : {}),
      ...(contextLength ? { contextLength } : {}),
    }, loadProgressLine(io));
    if (values['load-session'] !== undefined) {
      try {
        const loaded = await engine.sessionFile('load', values['load-session']);
        io.err(`loaded session ${values['load-session']}: ${loaded.tokens} tokens in ${loaded.ms.toFixed(0)} ms\n`);
      } catch (error) {
        const e = error as { code?: string; message?: string };
        io.err(`longhand generate: ${e.code ?? 'ERROR'}: ${e.message ?? String(error)}; the prompt is prefilled instead\n`);
      }
    }
    let promptIds: number[] = [];
    const tokenIds: number[] = [];
    let generated = '';
    let stopReason: StopReason = 'error';
    let timings: Timings | undefined;
    let error: { code: string; message: string } | undefined;
    let cache: CacheReport | undefined;
    for await (const event of engine.generate(prompt, params, abort.signal)) {
      if (event.kind === 'prompt') promptIds = event.ids;
      else if (event.kind === 'token') {
        tokenIds.push(event.id);
        generated += event.text;
        if (!values.json) io.out(event.text);
      } else if (event.kind === 'metrics') {
        if (values.metrics !== undefined) metricsLines.push(JSON.stringify(event.metrics));
      } else if (event.kind === 'done') {
        // the tail the stop matcher or the UTF-8 decoder held back until the end
        generated += event.text;
        if (!values.json) io.out(event.text);
        stopReason = event.stopReason;
        timings = event.timings;
        error = event.error;
        cache = event.cache;
      }
    }
    if (values.metrics !== undefined) writeFileSync(values.metrics, metricsLines.length > 0 ? `${metricsLines.join('\n')}\n` : '');
    let savedSession: { tokens: number; bytes: number; ms: number } | undefined;
    // a session that cannot be written must not cost the text: it is reported after it, and the exit is 1
    let sessionError: { code: string; message: string } | undefined;
    if (values['save-session'] !== undefined) {
      try {
        savedSession = await engine.sessionFile('save', values['save-session']);
      } catch (failure) {
        const e = failure as { code?: string; message?: string };
        sessionError = { code: e.code ?? 'INTERNAL', message: e.message ?? String(failure) };
      }
    }
    if (values.json) {
      const result = { promptIds, tokenIds, text: generated, stopReason, ...(model.dense ? { dense: model.dense } : {}), timings: { loadMs: model.loadMs, ...timings }, ...(cache ? { cache } : {}), ...(savedSession ? { savedSession } : {}), ...(sessionError ? { sessionError } : {}), ...(error ? { error } : {}) };
      io.out(`${JSON.stringify(result)}\n`);
    } else {
      io.out('\n');
      const t = timings;
      if (t) io.err(`[${stopReason}] ${tokenIds.length} tokens, TTFT ${t.ttftMs.toFixed(0)} ms, prefill ${t.prefillTokensPerS.toFixed(1)} tok/s, decode ${t.decodeTokensPerS.toFixed(1)} tok/s${model.dense ? `, dense ${model.dense}` : ''}${cache ? `, reused ${cache.reusedTokens} of ${promptIds.length} prompt tokens` : ''}\n`);
      if (savedSession) io.err(`saved session ${values['save-session']}: ${savedSession.tokens} tokens, ${savedSession.bytes} bytes in ${savedSession.ms.toFixed(0)} ms\n`);
    }
    if (error) io.err(`longhand generate: ${error.code}: ${error.message}\n`);
    if (sessionError) io.err(`longhand generate: the session was not saved: ${sessionError.code}: ${sessionError.message}\n`);
    return stopReason === 'error' || sessionError ? 1 : 0;
  } finally {
    process.off('SIGINT', onSigint);
    await engine.close();
  }
}

/**
 * Load progress on a terminal: one line rewritten in place ("loading 7/17 stages"), ended when the
 * last stage is built. Nothing when stderr is not a terminal (pipes and tests read stderr as lines).
 */
function loadProgressLine(io: CliIO): ((progress: { done: number; total: number }) => void) | undefined {
  if (process.stderr.isTTY !== true) return undefined;
  return ({ done, total }) => io.err(`\rloading ${done}/${total} stages${done === total ? '\n' : ''}`);
}
