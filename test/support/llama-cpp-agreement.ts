// How closely our forward pass follows llama.cpp on one GGUF file: both engines teacher-force the
// same token ids (F32 KV cache on llama.cpp's side, fp32 KV on ours, one thread each) and the
// next-token distributions are compared position by position. Shared by the engine tests that hold
// each weight type to a bound (app/engine/forward/llama-cpp*.test.ts).
import { createModelRunner, type DenseEngine } from '../../app/engine/forward/model-runner.ts';
import { loadModel } from '../../app/engine/model/load-model.ts';
import { llamaCppLogProbs, maxAbsLogProbDiffTopK, meanKl } from './llama-cpp-reference.ts';
import { logSoftmax } from './reference-forward.ts';

export interface Agreement {
  /** mean KL(llama.cpp ‖ ours) over the positions */
  kl: number;
  /** KL(llama.cpp ‖ ours) at each position, in order */
  each: number[];
  /** the median of `each` (a rare position where a quantized file routes or rounds the other way moves the mean, not this) */
  median: number;
  /** the largest |log p| gap over each position's top 5 tokens */
  top5: number;
  /** the weight types in the file, sorted (what the bound was applied to) */
  dtypes: string[];
  /** who ran our dense stages (model-runner.ts `dense`) */
  dense: 'native' | 'onnx';
}

/**
 * The agreement of our forward pass with llama.cpp, once per dense engine asked for (llama.cpp's
 * side is computed once), over every position or only `positions` (large vocabularies): 'auto' is what a user gets; 'native' and 'onnx' force one (a model the
 * native stages cannot run makes 'native' throw, naming why).
 */
export async function llamaCppAgreements(
  path: string,
  ids: readonly number[],
  engines: readonly DenseEngine[],
  positions?: readonly number[],
  runnerOptions: { contextLength?: number; prefillChunk?: number } = {},
): Promise<Agreement[]> {
  const reference = await llamaCppLogProbs(path, [...ids], { kvType: 'f32', threads: 1, ...(positions ? { positions } : {}) });
  const model = await loadModel(path);
  try {
    const results: Agreement[] = [];
    for (const dense of engines) {
      const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 128, prefillChunk: 32, ...runnerOptions, dense });
      const logits = await runner.prefill([...ids], undefined, { allLogits: true });
      const engine = runner.dense.engine;
      await runner.dispose();
      const V = model.hyper.vocabSize;
      const ours = reference.positions.map((t) => logSoftmax(logits.subarray(t * V, (t + 1) * V)));
      const dtypes = [...new Set([...model.tensors.values()].map((t) => t.dtype))].sort();
      const each = ours.map((o, i) => meanKl([reference.logProbs[i]!], [o]));
      results.push({ kl: meanKl(reference.logProbs, ours), each, median: median(each), top5: maxAbsLogProbDiffTopK(reference.logProbs, ours, 5), dtypes, dense: engine });
    }
    return results;
  } finally {
    model.close();
  }
}

function median(xs: readonly number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** llamaCppAgreements with the engine a user gets ('auto'). */
export async function llamaCppAgreement(path: string, ids: readonly number[]): Promise<Agreement> {
  return (await llamaCppAgreements(path, ids, ['auto']))[0]!;
}
