// The engine core's side of engine-webgpu.test.ts, run with a WebGPU adapter's environment
// (test/support/webgpu.ts): one load, then the same sequence of generate requests as the test runs on
// the CPU, printed as one JSON line (the load's model info, and per request its ids, policy and cache).
//
//   argv[2]  JSON { load: LoadOptionsInput, requests: { prompt: number[], params: GenerateParamsInput }[] }
import { GenerateParamsSchema, LoadOptionsSchema, type GenerateParamsInput, type LoadOptionsInput, type ModelInfo } from '../common/protocol.ts';
import { createEngineCore } from './engine.ts';

export interface EngineScript {
  load: LoadOptionsInput;
  requests: { prompt: number[]; params: GenerateParamsInput }[];
}

export interface EngineScriptResult {
  info: ModelInfo;
  runs: { ids: number[]; policy: string; reusedTokens: number; stopReason: string }[];
  log: string[];
}

/** Runs `script` on an engine core (here in the child; the test runs it in-process on the CPU). */
export async function runEngineScript(script: EngineScript): Promise<EngineScriptResult> {
  const log: string[] = [];
  const core = createEngineCore((line) => log.push(line));
  try {
    const info = await core.load(LoadOptionsSchema.parse(script.load));
    const runs: EngineScriptResult['runs'] = [];
    for (const r of script.requests) {
      const ids: number[] = [];
      let done: { policy?: string; cache?: { reusedTokens: number }; stopReason: string; error?: unknown } | undefined;
      for await (const e of core.generate({ ids: r.prompt }, GenerateParamsSchema.parse(r.params), new AbortController().signal)) {
        if (e.kind === 'token') ids.push(e.id);
        else if (e.kind === 'done') done = e;
      }
      if (done?.stopReason !== 'maxTokens') throw new Error(`generation ended with ${done?.stopReason}: ${JSON.stringify(done?.error)}`);
      runs.push({ ids, policy: done.policy ?? '', reusedTokens: done.cache?.reusedTokens ?? 0, stopReason: done.stopReason });
    }
    return { info, runs, log };
  } finally {
    await core.unload();
  }
}

if (process.argv[1]?.endsWith('engine-webgpu.child.ts')) {
  console.log(JSON.stringify(await runEngineScript(JSON.parse(process.argv[2]!) as EngineScript)));
}
