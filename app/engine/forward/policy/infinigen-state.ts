// InfiniGen's knobs and sequence state (ARCHITECTURE.md §3–§4): the skew calibration and its disk
// cache, and the partial columns of the cached sequence. policy/infinigen.ts drives the speculator
// with them; the runner keeps this state across policy switches (a ChunkObserver, row-policy.ts).
//
//   a prefill while the skew is unknown ──► skew A per layer and KV head: the cache file of this
//       model's SHA-256, else calibrate: the prompt's own post-RoPE queries when it has >=
//       CALIBRATION_TOKENS tokens (or tokens are cached already), else CALIBRATION_TOKENS tokens the
//       model generates greedily from BOS (the runner does that run, then forgets it)
//   every chunk that runs through all layers (prefill chunk or decode step) ──► its q/k rows at
//       positions < COLUMN_SAMPLE_TOKENS are folded into Σ|qA| and Σ|kA| per layer and KV head
//   after every prompt ──► columns C = top ⌊r·d⌋ of Σ|qA| + Σ|kA| over the sequence's first
//       COLUMN_SAMPLE_TOKENS positions ──► pool.setPartialProjection(ℓ, A[:, C]) where C changed
//       rebuilds the partial keys of the stored tokens natively; appends write them from then on.
//   decode ──► policy/infinigen.ts hands q_spec (stage ℓ−1's output) to the native speculator, which
//       selects and gathers layer ℓ's rows on its thread while layer ℓ−1 finishes.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { UsageError } from '../../../common/errors.ts';
import { DEFAULT_PARTIAL_RATIO, partialCount } from '../../kv/partial-columns.ts';
import { ALPHA_LLAMA_LIKE } from '../../kv/select-reference.ts';
import { readSkewCache, writeSkewCache, type SkewMeta } from '../../kv/skew-file.ts';
import { SkewCalibrator, skewLayerOffsets, skewMatrix, type HeadShape, type LayerHeads, type SkewMatrices } from '../../kv/skew.ts';
import type { LoadedModel } from '../../model/types.ts';
import { skewEnergy, type KvPool } from '../../../../native/index.js';

/** Tokens of a calibration run (the paper's calibration is a few hundred tokens of text). */
export const CALIBRATION_TOKENS = 256;
/** The sequence's first positions whose q/k energies choose the partial columns (bounds the work). */
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
  /** Where the speculation runs (default 'auto'; see SpeculationPlacement). */
  speculation?: SpeculationPlacement;
}

/**
 * 'side-thread': on the speculator's own native thread, overlapping the next layer's dense work.
 * 'inline': inside the step on the runner's threads (the native pool the dense stages use), its KV
 * groups and the sparse attention split over them. 'auto': side-thread while the machine has a core
 * beyond the runner's threads, else inline (there a side thread would only take turns with the dense
 * threads: bench/long-context.mjs, GQA, 2 threads on 2 cores, 32K: dense 74.5 ms a step beside the
 * side thread against 38.5 without it). Same selections and bits in every placement.
 */
export type SpeculationPlacement = 'auto' | 'side-thread' | 'inline';
const SPECULATION_PLACEMENTS: readonly SpeculationPlacement[] = ['auto', 'side-thread', 'inline'];

/** The speculator's inlineThreads (native/index.d.ts) for a runner on `threads` threads: 0 = its own thread. */
export function speculatorInlineThreads(placement: SpeculationPlacement, threads: number, cores = os.availableParallelism()): number {
  return placement === 'inline' || (placement === 'auto' && threads >= cores) ? threads : 0;
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
  speculation: SpeculationPlacement;
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
  const speculation = o.speculation ?? 'auto';
  if (!SPECULATION_PLACEMENTS.includes(speculation)) throw new UsageError(`infinigen.speculation must be one of ${SPECULATION_PLACEMENTS.join(', ')}, got ${String(speculation)}`, { field: 'speculation' });
  return {
    alpha,
    partialRatio,
    fetchCap,
    denseLayers: Math.min(denseLayers, layers),
    cacheDir: o.cacheDir ?? path.join(os.tmpdir(), 'longhand-cache'),
    recalibrate: o.recalibrate === true,
    modelSha256: o.modelSha256,
    inspect: o.inspect === true,
    speculation,
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

/** Column energies are checkpointed every this many positions: where a reused prefix may end exactly. */
export const COLUMN_CHECKPOINT_EVERY = 64;

/**
 * What InfiniGen's state is made for: the heads, and where layers differ (Gemma 4), each layer's KV
 * heads and head dim — kvHeads 0 for a layer nothing speculates for (a KV-shared layer: no keys of
 * its own, no partial rows; the plan runs it dense).
 */
export interface InfinigenShape extends HeadShape {
  readonly perLayer?: readonly LayerHeads[];
}

/** Layer ℓ's KV heads and head dim (kvHeads 0: not speculated). */
export function infinigenLayerHeads(shape: InfinigenShape, layer: number): LayerHeads {
  return shape.perLayer?.[layer] ?? shape;
}

/** Σ|qA| and Σ|kA| per sparse layer over positions 0..observed−1 (each [kvHeads·d], float64). */
interface ColumnEnergies {
  q: Float64Array[];
  k: Float64Array[];
}

/** InfiniGen's part of a snapshot: the column energies at the snapshot's end and the checkpoints below it. */
export interface InfinigenSequenceState {
  /** positions whose rows are in the energies (min(tokens, COLUMN_SAMPLE_TOKENS)) */
  observed: number;
  /** checkpoint positions, ascending */
  checkpoints: number[];
  /** [1 + checkpoints, 2 (q, k), sparse layers, kvHeads·d] float64 (each layer at its own kvHeads·d) */
  data: Float64Array;
}

/** One committed chunk (prefill chunk or decode step) whose rows are not folded into the energies yet. */
interface PendingRows {
  /** position of the chunk's first token */
  p0: number;
  /** tokens kept (the ones below COLUMN_SAMPLE_TOKENS) */
  T: number;
  /** per layer (undefined below denseLayers): q [T, heads·d] and k [T, kvHeads·d] */
  q: (Float32Array | undefined)[];
  k: (Float32Array | undefined)[];
}

/**
 * The per-model and per-sequence InfiniGen state the runner keeps: the skew (cached on disk), the
 * calibrator while one runs, and the partial columns of the cached sequence.
 *
 * Partial columns (ARCHITECTURE.md §4.2) are a function of the sequence: after every prompt they are
 * chosen again from Σ|qA| + Σ|kA| over the sequence's first COLUMN_SAMPLE_TOKENS positions, prompt
 * and generated tokens alike. So a sequence reached by reusing a cached prefix chooses the same
 * columns a fresh prefill of the whole prompt chooses. The energies are folded token by token in
 * position order (float64), checkpointed every COLUMN_CHECKPOINT_EVERY positions; a cache cut back
 * to position n is exact when n is a checkpoint or the current end (resumePoint says where).
 */
export class InfinigenState {
  skew: SkewMatrices | undefined;
  /** set while a calibration run collects queries */
  calibrator: SkewCalibrator | undefined;
  /** columns chosen and projections set: decode may speculate */
  ready = false;
  /** where the skew came from, for logs and tests */
  skewSource: 'cache' | 'prompt' | 'self-generated' | undefined;
  private sha: string | undefined;
  private triedCache = false;
  /** positions 0..observed−1 are in the energies */
  private observed = 0;
  /** a truncate to a position that was not a checkpoint: the energies miss some tokens until reset */
  private inexact = false;
  private energies: ColumnEnergies;
  /**
   * position → energies of positions 0..position−1: multiples of COLUMN_CHECKPOINT_EVERY, and the
   * position before the last folded token (a prompt run again ends there: its last token always runs)
   */
  private readonly checkpoints = new Map<number, ColumnEnergies>();
  /** the one checkpoint that is not a multiple of COLUMN_CHECKPOINT_EVERY (−1: none) */
  private tail = -1;
  private pending: PendingRows[] = [];
  /** the chunk being run: rows per layer until it completes (commitChunk) or fails (discardChunk) */
  private chunk: { p0: number; T: number; q: (Float32Array | undefined)[]; k: (Float32Array | undefined)[] } | undefined;
  /** per layer: the columns in use ([kvHeads, p]), to skip rebuilding partial keys when unchanged */
  private columns: (Int32Array | undefined)[];

  constructor(
    /** replaced by a policy switch that changes only the speculator's knobs (alpha, fetchCap) */
    public settings: InfinigenSettings,
    readonly shape: InfinigenShape,
    private readonly model: LoadedModel,
  ) {
    this.energies = this.zeroEnergies();
    this.columns = Array.from({ length: shape.layers }, () => undefined);
  }

  private async meta(): Promise<SkewMeta> {
    this.sha ??= this.settings.modelSha256 ?? (await modelSha256(this.model));
    const { layers, kvHeads, headDim, perLayer } = this.shape;
    return { modelSha256: this.sha, layers, kvHeads, headDim, ...(perLayer ? { perLayer } : {}) };
  }

  /** SHA-256 of the model file (hashed once). */
  async modelSha256(): Promise<string> {
    return (await this.meta()).modelSha256;
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
    const { layers, kvHeads, heads, headDim, perLayer } = this.shape;
    this.calibrator = new SkewCalibrator(layers, kvHeads, heads, headDim, perLayer);
  }

  async finishCalibration(source: 'prompt' | 'self-generated'): Promise<void> {
    const c = this.calibrator!;
    this.calibrator = undefined;
    this.skew = c.finish();
    this.skewSource = source;
    await writeSkewCache(this.settings.cacheDir, this.skew, await this.meta());
    this.fold();
  }

  /** Takes the skew of another state of the same model (a policy switch that keeps the cache). */
  adoptSkew(other: InfinigenState): void {
    if (!other.skew) return;
    this.skew = other.skew;
    this.skewSource = other.skewSource;
    this.sha = other.sha;
  }

  /** Starts a prefill chunk of T tokens at p0; observe() keeps its rows until commitChunk. */
  startChunk(p0: number, T: number): void {
    this.chunk = { p0, T, q: [], k: [] };
  }

  /** One layer's q/k of the running chunk (q [T, heads·d], k [T, kvHeads·d]): fed to a calibration, kept for the column energies. */
  observe(layer: number, q: Float32Array, k: Float32Array, T: number): void {
    const { heads } = this.shape;
    const { kvHeads, headDim: d } = infinigenLayerHeads(this.shape, layer);
    if (kvHeads === 0) return; // a layer nothing speculates for
    this.calibrator?.addQueries(layer, q, T);
    const c = this.chunk;
    if (!c || layer < this.settings.denseLayers || c.p0 >= COLUMN_SAMPLE_TOKENS) return;
    const keep = Math.min(T, COLUMN_SAMPLE_TOKENS - c.p0);
    c.q[layer] = q.slice(0, keep * heads * d);
    c.k[layer] = k.slice(0, keep * kvHeads * d);
  }

  /** The chunk ran through every layer: its rows count from now on (folded at once when the skew is known). */
  commitChunk(): void {
    const c = this.chunk;
    this.chunk = undefined;
    if (!c || c.p0 >= COLUMN_SAMPLE_TOKENS) return;
    this.pending.push({ p0: c.p0, T: Math.min(c.T, COLUMN_SAMPLE_TOKENS - c.p0), q: c.q, k: c.k });
    if (this.skew) this.fold();
  }

  /** The running chunk failed or was aborted: its rows never happened. */
  discardChunk(): void {
    this.chunk = undefined;
  }

  /**
   * Folds the pending rows into the energies in position order (native skewEnergy, fp64 sums added
   * token by token, so where a run is split does not change the bits), stopping at each checkpoint:
   * every COLUMN_CHECKPOINT_EVERY positions, and before each chunk's last token (the tail).
   */
  private fold(): void {
    const skew = this.skew;
    if (!skew) return;
    const { layers, heads } = this.shape;
    const dense = this.settings.denseLayers;
    for (const rows of this.pending) {
      if (rows.p0 !== this.observed) this.inexact = true; // a gap (truncate between checkpoints): positions no longer line up
      for (let t = 0; t < rows.T; ) {
        if (t === rows.T - 1 && !this.inexact && this.observed % COLUMN_CHECKPOINT_EVERY !== 0) {
          if (this.tail >= 0) this.checkpoints.delete(this.tail);
          this.tail = this.observed;
          this.checkpoints.set(this.observed, copyEnergies(this.energies));
        }
        const toCheckpoint = COLUMN_CHECKPOINT_EVERY - (this.observed % COLUMN_CHECKPOINT_EVERY);
        const end = Math.min(t + toCheckpoint, t < rows.T - 1 ? rows.T - 1 : rows.T);
        for (let l = dense; l < layers; l++) {
          const q = rows.q[l];
          const k = rows.k[l];
          if (!q || !k) continue;
          const { kvHeads, headDim: d } = infinigenLayerHeads(this.shape, l);
          const at = skewLayerOffsets(skew, l).matrices;
          const A = skew.matrices.subarray(at, at + kvHeads * d * d); // [kvHeads, d, d]
          skewEnergy(q.subarray(t * heads * d, end * heads * d), k.subarray(t * kvHeads * d, end * kvHeads * d), end - t, heads, kvHeads, d, A, this.energies.q[l - dense]!, this.energies.k[l - dense]!);
        }
        this.observed += end - t;
        t = end;
        if (!this.inexact && this.observed % COLUMN_CHECKPOINT_EVERY === 0) this.checkpoints.set(this.observed, copyEnergies(this.energies));
      }
    }
    this.pending = [];
  }

  /**
   * The largest position <= n at which a cache cut keeps the column energies exact: n past
   * COLUMN_SAMPLE_TOKENS, the end of what was observed when n is at or after it (decode steps are not
   * observed: under InfiniGen they attend sparsely, so they are never reused and the next prompt
   * prefills them again), else the checkpoint at or below n (0 when none, or when inexact).
   */
  resumePoint(n: number): number {
    if (this.inexact) return 0;
    if (this.observed >= COLUMN_SAMPLE_TOKENS && n >= COLUMN_SAMPLE_TOKENS) return n;
    if (n >= this.observed) return this.observed; // tokens after it (decoded) are not in the energies
    if (n === this.tail && this.checkpoints.has(n)) return n;
    const cp = n - (n % COLUMN_CHECKPOINT_EVERY);
    return cp > 0 && this.checkpoints.has(cp) ? cp : 0;
  }

  /** The cache keeps its first n tokens: the energies go back to the checkpoint at or below n. */
  truncate(n: number): void {
    this.chunk = undefined;
    this.pending = this.pending.filter((r) => r.p0 + r.T <= n);
    if (n >= this.observed) return;
    if (n === 0) {
      this.clearSequence();
      return;
    }
    const cp = n === this.tail ? n : n - (n % COLUMN_CHECKPOINT_EVERY);
    const saved = this.checkpoints.get(cp);
    this.energies = saved ? copyEnergies(saved) : this.zeroEnergies();
    this.observed = saved ? cp : 0;
    if (this.observed !== n) this.inexact = true; // tokens observed..n−1 stay in the pool but not in the energies
    for (const at of [...this.checkpoints.keys()]) if (at > this.observed) this.checkpoints.delete(at);
    if (this.tail > this.observed) this.tail = -1;
  }

  /** The cache was emptied: no sequence, no columns. */
  clearSequence(): void {
    this.energies = this.zeroEnergies();
    this.observed = 0;
    this.inexact = false;
    this.checkpoints.clear();
    this.tail = -1;
    this.pending = [];
    this.chunk = undefined;
    this.ready = false;
  }

  /**
   * After a prompt: chooses the columns of every sparse layer from the energies and sets the pool's
   * projections where they changed (that rebuilds the partial keys of every stored token natively).
   */
  choosePartialColumns(pool: KvPool): void {
    this.fold();
    const skew = this.skew!;
    const { layers } = this.shape;
    const dense = this.settings.denseLayers;
    for (let l = dense; l < layers; l++) {
      const { kvHeads, headDim: d } = infinigenLayerHeads(this.shape, l);
      if (kvHeads === 0) continue; // reads another layer's rows: no partial keys of its own
      const p = this.shape.perLayer ? partialCount(this.settings.partialRatio, d) : this.settings.partialDim;
      const qE = this.energies.q[l - dense]!;
      const kE = this.energies.k[l - dense]!;
      const cols = new Int32Array(kvHeads * p); // [kvHeads, p]
      for (let g = 0; g < kvHeads; g++) {
        const energy = new Float64Array(d); // [d]
        for (let j = 0; j < d; j++) energy[j] = qE[g * d + j]! + kE[g * d + j]!;
        cols.set(topColumns(energy, p), g * p);
      }
      const before = this.columns[l];
      if (before && before.every((c, i) => c === cols[i])) continue;
      this.columns[l] = cols;
      const proj = new Float32Array(kvHeads * d * p); // [kvHeads, d, p] = A[:, C]
      for (let g = 0; g < kvHeads; g++) {
        const A = skewMatrix(skew, l, g);
        for (let j = 0; j < d; j++) for (let i = 0; i < p; i++) proj[(g * d + j) * p + i] = A[j * d + cols[g * p + i]!]!;
      }
      pool.setPartialProjection(l, proj);
    }
    this.ready = layers > dense;
  }

  /** The columns in use for a layer ([kvHeads, p], ascending per head), once chosen. */
  columnsOf(layer: number): Int32Array | undefined {
    return this.columns[layer];
  }

  /**
   * What a snapshot of the sequence's first n positions keeps of this state: the energies at n and
   * the checkpoints below it. n must be a resumePoint (exact there).
   */
  exportSequence(n: number): InfinigenSequenceState {
    this.fold();
    if (this.resumePoint(n) !== n) throw new RangeError(`InfiniGen sequence state: position ${n} is not exact (resume point ${this.resumePoint(n)})`);
    const at = n >= this.observed ? this.energies : n === 0 ? this.zeroEnergies() : this.checkpoints.get(n)!;
    const below = [...this.checkpoints.keys()].filter((cp) => cp <= n).sort((a, b) => a - b);
    const per = this.energyLength();
    const data = new Float64Array((1 + below.length) * per); // [1 + checkpoints, 2 (q, k), sparse layers, kvHeads·d]
    writeEnergies(at, data, 0);
    below.forEach((cp, i) => writeEnergies(this.checkpoints.get(cp)!, data, (i + 1) * per));
    return { observed: Math.min(n, this.observed), checkpoints: below, data };
  }

  /** Restores exportSequence's result (a snapshot); the columns follow at the next choosePartialColumns. */
  importSequence(s: InfinigenSequenceState): void {
    const per = this.energyLength();
    if (s.data.length !== (1 + s.checkpoints.length) * per) throw new RangeError(`InfiniGen sequence state: ${s.data.length} values, expected ${(1 + s.checkpoints.length) * per}`);
    this.clearSequence();
    this.energies = readEnergies(s.data, 0, this.shape, this.settings.denseLayers);
    s.checkpoints.forEach((at, i) => this.checkpoints.set(at, readEnergies(s.data, (i + 1) * per, this.shape, this.settings.denseLayers)));
    this.tail = s.checkpoints.find((at) => at % COLUMN_CHECKPOINT_EVERY !== 0) ?? -1;
    this.observed = s.observed;
    this.columns = this.columns.map(() => undefined);
  }

  /** Identity of the skew matrices (SHA-256 of their bytes), for snapshots; undefined before one is known. */
  skewId(): string | undefined {
    if (!this.skew) return undefined;
    const m = this.skew.matrices;
    return createHash('sha256').update(new Uint8Array(m.buffer, m.byteOffset, m.byteLength)).digest('hex');
  }

  private energyLength(): number {
    let n = 0;
    for (let l = this.settings.denseLayers; l < this.shape.layers; l++) n += energyWidth(this.shape, l);
    return 2 * n;
  }

  private zeroEnergies(): ColumnEnergies {
    const { layers } = this.shape;
    const dense = Math.min(this.settings.denseLayers, layers);
    const widths = Array.from({ length: layers - dense }, (_, i) => energyWidth(this.shape, dense + i));
    return { q: widths.map((w) => new Float64Array(w)), k: widths.map((w) => new Float64Array(w)) };
  }
}

/** The p columns of largest energy, ascending (ties: the lower column, as choosePartialColumns). */
function topColumns(energy: Float64Array, p: number): Int32Array {
  const order = Array.from({ length: energy.length }, (_, j) => j).sort((a, b) => energy[b]! - energy[a]! || a - b);
  return Int32Array.from(order.slice(0, p)).sort();
}

function copyEnergies(e: ColumnEnergies): ColumnEnergies {
  return { q: e.q.map((x) => x.slice()), k: e.k.map((x) => x.slice()) };
}

function writeEnergies(e: ColumnEnergies, out: Float64Array, at: number): void {
  let o = at;
  for (const x of [...e.q, ...e.k]) {
    out.set(x, o);
    o += x.length;
  }
}

/** Elements of layer ℓ's energies: kvHeads·d (0 for a layer nothing speculates for). */
function energyWidth(shape: InfinigenShape, layer: number): number {
  const { kvHeads, headDim } = infinigenLayerHeads(shape, layer);
  return kvHeads * headDim;
}

function readEnergies(data: Float64Array, at: number, shape: InfinigenShape, denseLayers: number): ColumnEnergies {
  const dense = Math.min(denseLayers, shape.layers);
  const widths = Array.from({ length: shape.layers - dense }, (_, i) => energyWidth(shape, dense + i));
  const total = widths.reduce((a, b) => a + b, 0);
  const q: Float64Array[] = [];
  const k: Float64Array[] = [];
  let o = at;
  for (const w of widths) {
    q.push(data.slice(o, o + w));
    k.push(data.slice(o + total, o + total + w));
    o += w;
  }
  return { q, k };
}
