// llama.cpp's greedy choice at every position of a teacher-forced sequence, cheaply: one decode
// (node-llama-cpp's controlledEvaluate) asking at each position for the token its greedy sampler
// (temperature 0: argmax) picks, and the full distribution only at the positions `fullAt` names.
// A greedy generation agrees with llama.cpp's id for id exactly when, fed our sequence, llama.cpp
// picks our next token at every step — and asking for the token alone skips the full-vocabulary
// probability map (32K+ entries, sorted) at every position, ~8 s per 220 positions of a 32064
// vocabulary on this machine. Log-probabilities as llama-cpp-reference.ts computes them.
import { getLlama, LlamaLogLevel, type ControlledEvaluateInputItem, type Token } from 'node-llama-cpp';

export interface LlamaCppGreedy {
  /** next[t]: llama.cpp's argmax after reading ids[0..t]. */
  next: number[];
  /** Log-softmax over the vocabulary at the positions asked for (fullAt). */
  logProbs: Map<number, Float32Array>;
}

/** llama.cpp's greedy next token after every prefix of `ids` (F32 KV cache, one thread), and full distributions at `fullAt`. */
export async function llamaCppGreedy(modelPath: string, ids: readonly number[], options: { contextSize: number; fullAt: (t: number) => boolean }): Promise<LlamaCppGreedy> {
  if (options.contextSize <= ids.length) throw new Error(`llamaCppGreedy: contextSize ${options.contextSize} must exceed the ${ids.length} ids`);
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
  try {
    const context = await model.createContext({
      contextSize: options.contextSize,
      batchSize: Math.min(options.contextSize, 512),
      threads: 1,
      flashAttention: false,
      experimentalKvCacheKeyType: 'F32',
      experimentalKvCacheValueType: 'F32',
    });
    try {
      const contextShift = {
        strategy: (): never => {
          throw new Error(`llamaCppGreedy: the context (${context.contextSize}) ran out of space for ${ids.length} ids`);
        },
      };
      const results = await context.getSequence().controlledEvaluate(
        ids.map((id, t): ControlledEvaluateInputItem => [id as Token, { generateNext: { token: true, probabilities: options.fullAt(t), options: { temperature: 0 } } }]),
        { contextShift },
      );
      const next: number[] = [];
      const logProbs = new Map<number, Float32Array>();
      for (let t = 0; t < ids.length; t++) {
        const r = results[t]?.next;
        if (r?.token === undefined) throw new Error(`llamaCppGreedy: no token at position ${t}`);
        next.push(Number(r.token));
        if (!options.fullAt(t)) continue;
        const probabilities = r.probabilities;
        if (probabilities === undefined) throw new Error(`llamaCppGreedy: no probabilities at position ${t}`);
        let sum = 0;
        for (const p of probabilities.values()) sum += p;
        const row = new Float32Array(probabilities.size).fill(Number.NaN);
        for (const [id, p] of probabilities) row[id] = p > 0 ? Math.log(p) - Math.log(sum) : -Infinity;
        if (row.some(Number.isNaN)) throw new Error(`llamaCppGreedy: token ids missing from the distribution at position ${t}`);
        logProbs.set(t, row);
      }
      return { next, logProbs };
    } finally {
      await context.dispose();
    }
  } finally {
    await model.dispose();
  }
}
