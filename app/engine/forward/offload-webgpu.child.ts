// The WebGPU side of offload-webgpu.test.ts, run in a child process that test/support/webgpu.ts starts
// with the adapter's environment (the Vulkan loader is found at process start). It loads the model,
// runs each requested greedy generation on the offload path with device 'webgpu' and prints one JSON
// line: per run the ids, every step's logits (float32, base64) and the offload figures per step and layer.
//
//   argv[2]  JSON { modelPath, prompt: number[], runs: { label, steps, options: ModelRunnerOptions }[] }
import { loadModel } from '../model/load-model.ts';
import { createModelRunner, type ModelRunnerOptions } from './model-runner.ts';
import type { OffloadStepStats } from './placement/offload-attention.ts';

export interface ChildRequest {
  modelPath: string;
  prompt: number[];
  runs: { label: string; steps: number; options: ModelRunnerOptions }[];
}

export interface ChildRun {
  label: string;
  ids: number[];
  /** [steps · vocab] float32 as base64 */
  logits: string;
  offload: OffloadStepStats[];
  evictions: number;
  ms: number;
}

function argmax(a: Float32Array): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i]! > a[best]!) best = i;
  return best;
}

const request = JSON.parse(process.argv[2]!) as ChildRequest;
const model = await loadModel(request.modelPath);
const out: ChildRun[] = [];
try {
  for (const run of request.runs) {
    const t0 = performance.now();
    const r = await createModelRunner(model, { ...run.options, device: 'webgpu', offload: true });
    try {
      const vocab = r.vocabSize;
      const logits = new Float32Array(run.steps * vocab);
      const ids: number[] = [];
      const offload: OffloadStepStats[] = [];
      let l = await r.prefill(request.prompt);
      for (let i = 0; i < run.steps; i++) {
        logits.set(l, i * vocab);
        const best = argmax(l);
        ids.push(best);
        l = await r.decode(best);
        const st = r.lastOffloadStep?.();
        if (st) offload.push(st);
      }
      const evictions = r.evictions().reduce((a, b) => a + b, 0);
      out.push({ label: run.label, ids, logits: Buffer.from(logits.buffer).toString('base64'), offload, evictions, ms: performance.now() - t0 });
    } finally {
      await r.dispose();
    }
  }
} finally {
  model.close();
}
console.log(JSON.stringify(out));
