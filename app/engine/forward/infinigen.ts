// InfiniGen inside the forward pass (ARCHITECTURE.md §4): the knobs, the skew calibration and its
// disk cache, the per-prompt partial columns, and the per-step figures the runner keeps.
//
//   first prefill from position 0 ──► skew A per layer and KV head: the cache file of this model's
//       SHA-256, else calibrate: the prompt's own post-RoPE queries when it has >= CALIBRATION_TOKENS
//       tokens, else CALIBRATION_TOKENS tokens the model generates greedily from BOS (the runner does
//       that run, then forgets it) ──► after the prompt: columns C = top ⌊r·d⌋ of Σ|qA| + Σ|kA| over
//       the prompt, per layer and KV head ──► pool.setPartialProjection(ℓ, A[:, C]) rebuilds the
//       partial keys of the prompt natively; appends write them from then on.
//   decode ──► the runner hands q_spec (stage ℓ−1's output) to the native speculator (begin), which
//       selects and gathers layer ℓ's rows on its thread while layer ℓ−1 finishes.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { UsageError } from '../../common/errors.ts';
import { choosePartialColumnsForLayer, DEFAULT_PARTIAL_RATIO, partialCount } from '../kv/partial-columns.ts';
import { ALPHA_LLAMA_LIKE } from '../kv/select-reference.ts';
import { readSkewCache, writeSkewCache, type SkewMeta } from '../kv/skew-file.ts';
import { SkewCalibrator, skewMatrix, type HeadShape, type SkewMatrices } from '../kv/skew.ts';
import type { LoadedModel } from '../model/types.ts';
import type { KvPool, SpeculatorLayerStats } from '../../../native/index.js';

/** Tokens of a calibration run (the paper's calibration is a few hundred tokens of text). */
export const CALIBRATION_TOKENS = 256;
/** Prompt tokens kept for choosing the partial columns (the first ones; bounds the memory). */
export const COLUMN_SAMPLE_TOKENS = 4096;

export interface InfinigenOptions {
  /** Score margin below each head's maximum (default 5, Llama-like). */
  alpha?: number;
  /** r: partial columns ⌊r·headDim⌋ (default 0.3). */
  partialRatio?: number;
  /** Most tokens a KV head fetches, as a fraction of the context (default 0.2). */
  fetchCap?: number;
  /** Layers below this attend to everything (default 2). */
  denseLayers?: number;
  /** Where the skew file goes (default os.tmpdir()/longhand-cache; the engine passes the app's cache dir). */
  cacheDir?: string;
  /** Ignore a cached skew file and calibrate again (the new file replaces it). */
  recalibrate?: boolean;
  /** SHA-256 of the model file when the caller knows it (skips hashing the file). */
  modelSha256?: string;
  /** Per-layer attention recall in the step figures (costs a full score pass per sparse layer). */
  inspect?: boolean;
}

export interface InfinigenSettings {
  alpha: number;
  partialRatio: number;
  fetchCap: number;
  denseLayers: number;
  cacheDir: string;
  recalibrate: boolean;
  modelSha256: string | undefined;
  inspect: boolean;
  /** p = ⌊r·d⌋ */
  partialDim: number;
}

export function infinigenSettings(o: InfinigenOptions, headDim: number, layers: number): InfinigenSettings {
  const alpha = o.alpha ?? ALPHA_LLAMA_LIKE;
  const partialRatio = o.partialRatio ?? DEFAULT_PARTIAL_RATIO;
  const fetchCap = o.fetchCap ?? 0.2;
  const denseLayers = o.denseLayers ?? 2;
  if (!(alpha > 0) || !Number.isFinite(alpha)) throw new UsageError(`infinigen.alpha must be a positive number, got ${alpha}`, { field: 'alpha' });
  if (!(fetchCap > 0 && fetchCap <= 1)) throw new UsageError(`infinigen.fetchCap must be in (0, 1], got ${fetchCap}`, { field: 'fetchCap' });
  if (!Number.isInteger(denseLayers) || denseLayers < 0) throw new UsageError(`infinigen.denseLayers must be a non-negative integer, got ${denseLayers}`, { field: 'denseLayers' });
  return {
    alpha,
    partialRatio,
    fetchCap,
    denseLayers: Math.min(denseLayers, layers),
    cacheDir: o.cacheDir ?? path.join(os.tmpdir(), 'longhand-cache'),
    recalibrate: o.recalibrate === true,
    modelSha256: o.modelSha256,
    inspect: o.inspect === true,
    partialDim: partialCount(partialRatio, headDim), // validates r
  };
}

/** SHA-256 of a GGUF file, or of a Hugging Face folder's config.json and *.safetensors (sorted by name). */
export async function modelSha256(model: LoadedModel): Promise<string> {
  const hash = createHash('sha256');
  const files = (await stat(model.path)).isDirectory()
    ? (await readdir(model.path)).filter((f) => f === 'config.json' || f.endsWith('.safetensors')).sort().map((f) => path.join(model.path, f))
    : [model.path];
  for (const f of files) {
    await new Promise<void>((resolve, reject) => {
      createReadStream(f)
        .on('data', (b) => hash.update(b))
        .on('end', resolve)
        .on('error', reject);
    });
  }
  return hash.digest('hex');
}

/** Per layer of one decode step. Times in ms; *Ns are CLOCK_MONOTONIC ns (process.hrtime.bigint()). */
export interface InfinigenLayerStats {
  layer: number;
  /** below denseLayers: attends to everything, no speculation */
  dense: boolean;
  /** tokens per KV head attended besides the current one (N for dense layers) */
  selected: number;
  /** N, the past tokens that could be attended */
  candidates: number;
  /** selected / candidates (1 for dense layers, 0 when N = 0) */
  fetchRatio: number;
  /** K+V bytes that would cross to a device (the reuse cache's misses; all rows for dense layers) */
  bytes: number;
  hits: number;
  misses: number;
  speculationMs: number;
  gatherMs: number;
  /** the main thread waited for the gather this long before the attention */
  waitMs: number;
  attentionMs: number;
  /** share of the true softmax mass covered by the attended set (inspect only) */
  recall?: number;
  /** begin() queued the job (main thread) */
  beginNs?: number;
  /** the native job (q̃, selection, gather) of this layer */
  jobStartNs?: number;
  jobEndNs?: number;
  /** the onnxruntime stage that ran while this layer's job was in flight (post(ℓ−1) ⨾ pre(ℓ)) */
  stageStartNs?: number;
  stageEndNs?: number;
}

export interface InfinigenStepStats {
  /** tokens in the cache before the step */
  position: number;
  layers: InfinigenLayerStats[];
  /** mean fetch ratio over the sparse layers */
  fetchRatio: number;
  bytes: number;
  hits: number;
  misses: number;
  /** hits / (hits + misses) over the sparse layers (0 when nothing was gathered) */
  hitRate: number;
  /** Under a pool byte budget: tokens evicted since the cache was reset (total, per layer) and in this step. */
  evictions?: { total: number; step: number; perLayer: number[] };
}

export function layerStatsFrom(layer: number, s: SpeculatorLayerStats, bytesNote: { recall?: number; stageStartNs?: number; stageEndNs?: number }): InfinigenLayerStats {
  return {
    layer,
    dense: false,
    selected: s.n,
    candidates: s.candidates,
    fetchRatio: s.candidates > 0 ? s.n / s.candidates : 0,
    bytes: s.bytes,
    hits: s.hits,
    misses: s.misses,
    speculationMs: s.specNs / 1e6,
    gatherMs: s.gatherNs / 1e6,
    waitMs: s.waitNs / 1e6,
    attentionMs: s.attnNs / 1e6,
    beginNs: s.beginNs,
    jobStartNs: s.jobStartNs,
    jobEndNs: s.jobEndNs,
    ...bytesNote,
  };
}

export function summarizeStep(position: number, layers: InfinigenLayerStats[]): InfinigenStepStats {
  const sparse = layers.filter((l) => !l.dense);
  let hits = 0;
  let misses = 0;
  let bytes = 0;
  for (const l of layers) {
    bytes += l.bytes;
    hits += l.hits;
    misses += l.misses;
  }
  const fetchRatio = sparse.length > 0 ? sparse.reduce((a, l) => a + l.fetchRatio, 0) / sparse.length : 1;
  return { position, layers, fetchRatio, bytes, hits, misses, hitRate: hits + misses > 0 ? hits / (hits + misses) : 0 };
}

/**
 * The per-model and per-prompt InfiniGen state the runner keeps: the skew (cached on disk), the
 * calibrator while one runs, and the prompt's queries/keys until the columns are chosen.
 */
export class InfinigenState {
  skew: SkewMatrices | undefined;
  /** set while a calibration run collects queries */
  calibrator: SkewCalibrator | undefined;
  /** per layer: the prompt's q [T, heads·d] and k [T, kvHeads·d] chunks, while choosing columns */
  private promptQ: Float32Array[][] | undefined;
  private promptK: Float32Array[][] | undefined;
  private promptTokens = 0;
  /** columns chosen and projections set: decode may speculate */
  ready = false;
  /** where the skew came from, for logs and tests */
  skewSource: 'cache' | 'prompt' | 'self-generated' | undefined;
  private sha: string | undefined;
  private triedCache = false;

  constructor(
    readonly settings: InfinigenSettings,
    readonly shape: HeadShape,
    private readonly model: LoadedModel,
  ) {}

  private async meta(): Promise<SkewMeta> {
    this.sha ??= this.settings.modelSha256 ?? (await modelSha256(this.model));
    return { modelSha256: this.sha, layers: this.shape.layers, kvHeads: this.shape.kvHeads, headDim: this.shape.headDim };
  }

  /** Loads the cached skew once (unless recalibrate). True when a skew is known. */
  async loadCached(): Promise<boolean> {
    if (this.skew) return true;
    if (this.triedCache || this.settings.recalibrate) return false;
    this.triedCache = true;
    const r = await readSkewCache(this.settings.cacheDir, await this.meta());
    if (r.status !== 'hit') return false;
    this.skew = r.skew;
    this.skewSource = 'cache';
    return true;
  }

  startCalibration(): void {
    const { layers, kvHeads, heads, headDim } = this.shape;
    this.calibrator = new SkewCalibrator(layers, kvHeads, heads, headDim);
  }

  async finishCalibration(source: 'prompt' | 'self-generated'): Promise<void> {
    const c = this.calibrator!;
    this.calibrator = undefined;
    this.skew = c.finish();
    this.skewSource = source;
    await writeSkewCache(this.settings.cacheDir, this.skew, await this.meta());
  }

  startPrompt(): void {
    this.ready = false;
    this.promptQ = Array.from({ length: this.shape.layers }, () => []);
    this.promptK = Array.from({ length: this.shape.layers }, () => []);
    this.promptTokens = 0;
  }

  get collectingPrompt(): boolean {
    return this.promptQ !== undefined;
  }

  /** One layer's q/k of a chunk (T tokens): kept for the columns, fed to a running calibration. */
  observe(layer: number, q: Float32Array, k: Float32Array, T: number): void {
    this.calibrator?.addQueries(layer, q, T);
    if (this.promptQ && this.promptTokens < COLUMN_SAMPLE_TOKENS) {
      const keep = Math.min(T, COLUMN_SAMPLE_TOKENS - this.promptTokens);
      const { heads, kvHeads, headDim: d } = this.shape;
      this.promptQ[layer]!.push(q.slice(0, keep * heads * d));
      this.promptK![layer]!.push(k.slice(0, keep * kvHeads * d));
      if (layer === this.shape.layers - 1) this.promptTokens += keep;
    }
  }

  /** Chooses the columns of every sparse layer from the kept prompt rows and sets the pool's projections. */
  choosePartialColumns(pool: KvPool): void {
    const skew = this.skew!;
    const { layers, kvHeads, headDim: d } = this.shape;
    const p = this.settings.partialDim;
    const T = this.promptTokens;
    for (let l = this.settings.denseLayers; l < layers; l++) {
      const q = concat(this.promptQ![l]!);
      const k = concat(this.promptK![l]!);
      const cols = choosePartialColumnsForLayer(skew, this.shape, l, q, k, T, this.settings.partialRatio); // [kvHeads, p]
      const proj = new Float32Array(kvHeads * d * p); // [kvHeads, d, p] = A[:, C]
      for (let g = 0; g < kvHeads; g++) {
        const A = skewMatrix(skew, l, g);
        for (let j = 0; j < d; j++) for (let i = 0; i < p; i++) proj[(g * d + j) * p + i] = A[j * d + cols[g * p + i]!]!;
      }
      pool.setPartialProjection(l, proj);
    }
    this.promptQ = undefined;
    this.promptK = undefined;
    this.ready = layers > this.settings.denseLayers;
  }

  abandonPrompt(): void {
    this.promptQ = undefined;
    this.promptK = undefined;
  }
}

function concat(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
