// How closely our forward pass follows llama.cpp on one GGUF file: both engines teacher-force the
// same token ids (F32 KV cache on llama.cpp's side, fp32 KV on ours, one thread each) and the
// next-token distributions are compared position by position. Shared by the engine tests that hold
// each weight type to a bound (app/engine/forward/llama-cpp*.test.ts).
import { createModelRunner } from '../../app/engine/forward/model-runner.ts';
import { loadModel } from '../../app/engine/model/load-model.ts';
import { llamaCppLogProbs, maxAbsLogProbDiffTopK, meanKl } from './llama-cpp-reference.ts';
import { logSoftmax } from './reference-forward.ts';

export interface Agreement {
  /** mean KL(llama.cpp ‖ ours) over the positions */
  kl: number;
  /** the largest |log p| gap over each position's top 5 tokens */
  top5: number;
  /** the weight types in the file, sorted (what the bound was applied to) */
  dtypes: string[];
}

export async function llamaCppAgreement(path: string, ids: readonly number[]): Promise<Agreement> {
  const reference = await llamaCppLogProbs(path, [...ids], { kvType: 'f32', threads: 1 });
  const model = await loadModel(path);
  try {
    const runner = await createModelRunner(model, { kvType: 'fp32', contextLength: 128, prefillChunk: 32 });
    const logits = await runner.prefill([...ids], undefined, { allLogits: true });
    await runner.dispose();
    const V = model.hyper.vocabSize;
    const ours = ids.map((_, t) => logSoftmax(logits.subarray(t * V, (t + 1) * V)));
    const dtypes = [...new Set([...model.tensors.values()].map((t) => t.dtype))].sort();
    return { kl: meanKl(reference.logProbs, ours), top5: maxAbsLogProbDiffTopK(reference.logProbs, ours, 5), dtypes };
  } finally {
    model.close();
  }
}
