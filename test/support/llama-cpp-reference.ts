// llama.cpp as a reference for our engine: teacher-forced next-token distributions over the
// FULL vocabulary, read through node-llama-cpp (prebuilt CPU binaries only; never downloads or
// builds), so our logits can be compared with llama.cpp's on the same GGUF file.
//
// How the full distribution is obtained: LlamaContextSequence.controlledEvaluate with
// `generateNext: { probabilities: true }` on every input token (one decode, logits for every
// position) and temperature 0. Temperature 0 makes node-llama-cpp's sampler chain the greedy
// sampler alone (no top-k / top-p / min-p stage that would trim the candidates), so the addon
// returns every token of the vocabulary: it softmaxes the raw logits in float32 (max-subtracted
// expf, float32 sum) and hands back a Map<token, prob> with vocabSize entries (512 for
// stories260K). The map's size is checked against the GGUF vocabulary on every position.
//
// Log-probabilities: ln(prob) in float64, renormalised in float64 by ln(Σ prob) (the float32
// sum is off by ~1e-6), then stored as float32. A probability that underflowed to 0 in float32
// (a logit more than ~103 below the maximum) becomes −Infinity: its true value is not
// recoverable from node-llama-cpp's API (it exposes no raw logits). Between ~87 and ~103 below
// the maximum the float32 probability is subnormal and its log is only roughly right. Those
// tokens carry probability < 1e-38, so they change no KL figure; `underflowed` counts them.
//
// KV cache: kvType 'f32' (the default, as the reference run reference-greedy.json) sets
// node-llama-cpp's experimentalKvCacheKeyType/ValueType to F32; 'f16' is llama.cpp's default.
// Flash attention is off; threads default to 1 (the reference run's setting).
import { getLlama, LlamaLogLevel, type ControlledEvaluateInputItem, type Llama, type LlamaModel, type Token } from 'node-llama-cpp';

export interface LlamaCppLogProbsOptions {
  /** Evaluation threads (default 1). */
  threads?: number;
  /** Context size (default ids.length + 1: node-llama-cpp keeps one cell free; llama.cpp may round it up). */
  contextSize?: number;
  /** KV cache element type (default 'f32'). */
  kvType?: 'f32' | 'f16';
  /**
   * Only these positions' distributions (ascending; default every position). Every id is still
   * evaluated; a full-vocabulary distribution costs node-llama-cpp a Map of vocabSize entries, so
   * a 152K vocabulary asks for a few positions, not all of them.
   */
  positions?: readonly number[];
  /** Also return llama.cpp's greedy next token (temperature 0) at every position (cheap). */
  greedy?: boolean;
}

export interface LlamaCppLogProbs {
  /** Per position t: log-softmax over the whole vocabulary of the next token after ids[0..t]. */
  logProbs: Float32Array[];
  vocabSize: number;
  /** How many (position, token) probabilities underflowed to 0 in float32 (now −Infinity). */
  underflowed: number;
  /** The positions of logProbs (options.positions, or every position). */
  positions: number[];
  /** With options.greedy: llama.cpp's greedy next token after ids[0..t], for every t. */
  greedy?: number[];
}

let llamaPromise: Promise<Llama> | undefined;
const models = new Map<string, Promise<LlamaModel>>();

function llamaInstance(): Promise<Llama> {
  llamaPromise ??= getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  return llamaPromise;
}

function loadModel(modelPath: string): Promise<LlamaModel> {
  let model = models.get(modelPath);
  if (model === undefined) {
    model = llamaInstance().then((llama) => llama.loadModel({ modelPath, gpuLayers: 0 }));
    models.set(modelPath, model);
    // a failed load is not cached
    model.catch(() => models.delete(modelPath));
  }
  return model;
}

/** The vocabulary size the GGUF declares (tokenizer.ggml.tokens), when present. */
function declaredVocabSize(model: LlamaModel): number | undefined {
  const metadata = model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: readonly unknown[] } } };
  return metadata.tokenizer?.ggml?.tokens?.length;
}

/**
 * Teacher-forced next-token log-probabilities from llama.cpp: element t is the log-softmax over
 * the full vocabulary after reading ids[0..t] (so ids.length positions). The model and the Llama
 * instance are cached between calls; free them with disposeLlamaCpp().
 */
export async function llamaCppLogProbs(modelPath: string, ids: readonly number[], options: LlamaCppLogProbsOptions = {}): Promise<LlamaCppLogProbs> {
  if (ids.length === 0) throw new Error('llamaCppLogProbs: no token ids');
  const threads = options.threads ?? 1;
  const kvType = options.kvType ?? 'f32';
  // node-llama-cpp decodes only while contextSize − 1 − (tokens so far) > 0: one cell stays free
  const contextSize = options.contextSize ?? ids.length + 1;
  if (!Number.isInteger(threads) || threads < 1) throw new Error(`llamaCppLogProbs: threads must be a positive integer, got ${threads}`);
  if (!Number.isInteger(contextSize) || contextSize <= ids.length) throw new Error(`llamaCppLogProbs: contextSize ${contextSize} must exceed the ${ids.length} ids (node-llama-cpp keeps one cell free)`);

  const model = await loadModel(modelPath);
  const declared = declaredVocabSize(model);
  for (const id of ids) {
    if (!Number.isInteger(id) || id < 0 || (declared !== undefined && id >= declared)) throw new Error(`llamaCppLogProbs: token id ${id} is outside the vocabulary (${declared ?? '?'})`);
  }
  const kvCacheType = kvType === 'f32' ? 'F32' : 'F16';
  const context = await model.createContext({
    contextSize,
    batchSize: Math.min(contextSize, 512),
    threads,
    flashAttention: false,
    experimentalKvCacheKeyType: kvCacheType,
    experimentalKvCacheValueType: kvCacheType,
  });
  try {
    if (context.contextSize <= ids.length) throw new Error(`llamaCppLogProbs: llama.cpp made a context of ${context.contextSize} for ${ids.length} ids`);
    const sequence = context.getSequence();
    // A full context would make node-llama-cpp erase the oldest tokens from the KV cache and go on
    // ("context shift"): the later positions would silently lose their history. Fail instead.
    const contextShift = {
      strategy: (): never => {
        throw new Error(`llamaCppLogProbs: the context (${context.contextSize}) ran out of space for ${ids.length} ids`);
      },
    };
    const positions = options.positions === undefined ? ids.map((_, t) => t) : [...options.positions];
    if (positions.some((t, i) => !Number.isInteger(t) || t < 0 || t >= ids.length || (i > 0 && t <= positions[i - 1]!))) {
      throw new Error(`llamaCppLogProbs: positions must ascend within 0..${ids.length - 1}`);
    }
    const wanted = new Set(positions);
    const greedy = options.greedy === true;
    const results = await sequence.controlledEvaluate(
      ids.map((id, t): ControlledEvaluateInputItem =>
        wanted.has(t) || greedy ? [id as Token, { generateNext: { ...(wanted.has(t) ? { probabilities: true } : {}), ...(greedy ? { token: true } : {}), options: { temperature: 0 } } }] : (id as Token),
      ),
      { contextShift },
    );

    let vocabSize = declared ?? 0;
    let underflowed = 0;
    const logProbs: Float32Array[] = [];
    for (const t of positions) {
      const probabilities = results[t]?.next.probabilities;
      if (probabilities === undefined) throw new Error(`llamaCppLogProbs: llama.cpp returned no probabilities at position ${t}`);
      if (vocabSize === 0) vocabSize = probabilities.size;
      if (probabilities.size !== vocabSize) throw new Error(`llamaCppLogProbs: llama.cpp returned ${probabilities.size} probabilities at position ${t}, expected the full vocabulary (${vocabSize})`);
      let sum = 0;
      for (const p of probabilities.values()) sum += p;
      const logSum = Math.log(sum);
      const row = new Float32Array(vocabSize).fill(Number.NaN);
      for (const [id, p] of probabilities) {
        if (id < 0 || id >= vocabSize) throw new Error(`llamaCppLogProbs: token id ${id} out of range at position ${t}`);
        if (p <= 0) underflowed++;
        row[id] = p > 0 ? Math.log(p) - logSum : -Infinity;
      }
      if (row.some(Number.isNaN)) throw new Error(`llamaCppLogProbs: some token ids are missing at position ${t}`);
      logProbs.push(row);
    }
    const next = greedy ? ids.map((_, t) => Number(results[t]?.next.token ?? -1)) : undefined;
    return { logProbs, vocabSize, underflowed, positions, ...(next ? { greedy: next } : {}) };
  } finally {
    await context.dispose();
  }
}

/** Frees the cached models and the Llama instance. */
export async function disposeLlamaCpp(): Promise<void> {
  const pending = [...models.values()];
  models.clear();
  const llama = llamaPromise;
  llamaPromise = undefined;
  for (const model of await Promise.allSettled(pending)) if (model.status === 'fulfilled') await model.value.dispose();
  if (llama !== undefined) await (await llama).dispose();
}

// ─── comparing distributions ────────────────────────────────────────────────────────────────

/** ln Σ exp over the finite entries (−Infinity when there are none). */
function logSumExp(values: ArrayLike<number>): number {
  let max = -Infinity;
  for (let i = 0; i < values.length; i++) max = Math.max(max, values[i] as number);
  if (max === -Infinity) return -Infinity;
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += Math.exp((values[i] as number) - max);
  return max + Math.log(sum);
}

/**
 * KL(P_ref ‖ P_ours) = Σ p_ref (log p_ref − log p_ours) for one position, in float64, both sides
 * renormalised first (so a float32 normalisation error is not counted as divergence). Tokens
 * with p_ref = 0 (underflow, −Infinity) contribute nothing; a token with p_ref > 0 and
 * p_ours = 0 makes it Infinity.
 */
export function klDivergence(ref: ArrayLike<number>, ours: ArrayLike<number>): number {
  if (ref.length !== ours.length) throw new Error(`klDivergence: vocabulary sizes differ (${ref.length} vs ${ours.length})`);
  const refLse = logSumExp(ref);
  const oursLse = logSumExp(ours);
  let kl = 0;
  for (let i = 0; i < ref.length; i++) {
    const r = (ref[i] as number) - refLse;
    if (r === -Infinity) continue;
    kl += Math.exp(r) * (r - ((ours[i] as number) - oursLse));
  }
  // rounding can leave a tiny negative value for identical distributions
  return Math.max(0, kl);
}

/** Mean over positions of KL(P_ref ‖ P_ours); both arguments are per-position log-probabilities. */
export function meanKl(ref: readonly ArrayLike<number>[], ours: readonly ArrayLike<number>[]): number {
  if (ref.length !== ours.length) throw new Error(`meanKl: ${ref.length} reference positions, ${ours.length} of ours`);
  if (ref.length === 0) throw new Error('meanKl: no positions');
  let sum = 0;
  for (let t = 0; t < ref.length; t++) sum += klDivergence(ref[t] as ArrayLike<number>, ours[t] as ArrayLike<number>);
  return sum / ref.length;
}

/** Ids of the k largest values, largest first; ties go to the lower id. */
export function topK(values: ArrayLike<number>, k: number): number[] {
  const ids = Array.from({ length: values.length }, (_, i) => i);
  ids.sort((a, b) => (values[b] as number) - (values[a] as number) || a - b);
  return ids.slice(0, k);
}

/**
 * The largest |ref − ours| log-probability difference over the reference's top-k tokens of every
 * position (both given as log-probabilities, compared as they are).
 */
export function maxAbsLogProbDiffTopK(ref: readonly ArrayLike<number>[], ours: readonly ArrayLike<number>[], k: number): number {
  if (ref.length !== ours.length) throw new Error(`maxAbsLogProbDiffTopK: ${ref.length} reference positions, ${ours.length} of ours`);
  let max = 0;
  for (let t = 0; t < ref.length; t++) {
    const r = ref[t] as ArrayLike<number>;
    const o = ours[t] as ArrayLike<number>;
    if (r.length !== o.length) throw new Error(`maxAbsLogProbDiffTopK: vocabulary sizes differ at position ${t} (${r.length} vs ${o.length})`);
    for (const id of topK(r, k)) max = Math.max(max, Math.abs((r[id] as number) - (o[id] as number)));
  }
  return max;
}
