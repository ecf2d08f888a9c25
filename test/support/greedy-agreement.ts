// Our greedy continuation of a prompt held against llama.cpp's: we generate `steps` ids greedily,
// then llama.cpp reads prompt + our ids teacher-forced and names its own greedy choice after every
// prefix (llamaCppLogProbs with greedy), with full distributions at the `checkAt` steps for the top-5
// log-prob gap. `matched` counts the steps where llama.cpp, given our history, picks our id: all of
// them exactly when its own greedy run would have been ours.
import type { ModelRunner } from '../../app/engine/forward/model-runner.ts';
import { llamaCppLogProbs, maxAbsLogProbDiffTopK } from './llama-cpp-reference.ts';
import { argmax, logSoftmax } from './reference-forward.ts';

export interface GreedyAgreement {
  /** our greedy ids, `steps` of them */
  generated: number[];
  /** steps at which llama.cpp's greedy next token (after prompt + generated[0..i−1]) is ours */
  matched: number;
  /** the largest |Δ log p| over each checked step's top 5 tokens */
  top5: number;
}

export interface GreedyAgreementOptions {
  /** ids to generate (default 200) */
  steps?: number;
  /** steps whose full distributions are compared (default 0, 1, 49, 99, 149, 199) */
  checkAt?: readonly number[];
  /** called after each decode (e.g. to read what the step routed) */
  afterDecode?: () => void;
}

/** Resets `runner`, prefills `prompt`, generates greedily and asks llama.cpp (the F32 KV cache, one thread) about every step. */
export async function greedyAgreement(runner: ModelRunner, modelPath: string, prompt: readonly number[], options: GreedyAgreementOptions = {}): Promise<GreedyAgreement> {
  const steps = options.steps ?? 200;
  const checkAt = options.checkAt ?? [0, 1, 49, 99, 149, 199].filter((i) => i < steps);
  runner.reset();
  let logits = await runner.prefill([...prompt]);
  const generated: number[] = [];
  const ours: Float64Array[] = [];
  for (let i = 0; i < steps; i++) {
    if (checkAt.includes(i)) ours.push(logSoftmax(logits));
    generated.push(argmax(logits));
    if (i === steps - 1) break;
    logits = await runner.decode(generated[i]!);
    options.afterDecode?.();
  }
  // llama.cpp's next token after prompt + generated[0..i−1] is at position prompt.length − 1 + i
  const sequence = [...prompt, ...generated].slice(0, -1);
  const reference = await llamaCppLogProbs(modelPath, sequence, { kvType: 'f32', threads: 1, greedy: true, positions: checkAt.map((i) => prompt.length - 1 + i) });
  const theirs = reference.greedy!.slice(prompt.length - 1);
  return { generated, matched: generated.filter((id, i) => theirs[i] === id).length, top5: maxAbsLogProbDiffTopK(reference.logProbs, ours, 5) };
}
