// Skewing matrices (ARCHITECTURE.md §4.1): per layer ℓ and KV head g, A_{ℓ,g} = the eigenvectors of
// QᵀQ, where Q stacks post-RoPE queries seen during a calibration run. A is orthogonal, so
// (qA)·(kA) = q·k exactly, but after the rotation a few columns carry most of the energy of q —
// which is what lets a partial dot product over ⌊r·d⌋ columns rank tokens like the full one.
//
// GQA: ONE matrix per KV head, built from the group's query heads AVERAGED per token. The keys of a
// KV head are stored once (rotated by one A), and every query head of the group must be rotated by
// that same A for (qA)·(kA) = q·k to hold. Skewing per query head (the authors' artifact) gives
// each query head a different rotation of the shared keys and produces wrong text.
//
// Query head h belongs to KV head ⌊h / g⌋ with g = heads / kvHeads (the repeat_kv layout of
// llama.cpp and transformers).
import { UsageError } from '../../common/errors.ts';
import { symmetricEigen } from './eigen.ts';

/** The calibrated rotations of one model. */
export interface SkewMatrices {
  readonly layers: number;
  /** every layer's (without perLayer; with it, the largest) */
  readonly kvHeads: number;
  /** d: every layer's (without perLayer; with it, the largest) */
  readonly headDim: number;
  /**
   * [layers, kvHeads, d, d] row-major per matrix; A[i, j] = component i of eigenvector j (columns).
   * With perLayer, layer after layer at each layer's own kvHeads_ℓ × d_ℓ × d_ℓ (skewMatrix finds them).
   */
  readonly matrices: Float32Array;
  /** [layers, kvHeads, d] eigenvalues of QᵀQ/T, descending: mean energy of each skewed column (per layer's shape with perLayer). */
  readonly eigenvalues: Float32Array;
  /** [layers] query tokens each layer was calibrated on. */
  readonly samples: Uint32Array;
  /**
   * [layer] KV heads and head dim of each layer where layers differ (Gemma 4's window and global
   * layers); a layer with kvHeads 0 has no matrices (a KV-shared layer, which nothing speculates for).
   */
  readonly perLayer?: readonly LayerHeads[];
}

/** The KV heads and head dim of one layer's keys. */
export interface LayerHeads {
  readonly kvHeads: number;
  readonly headDim: number;
}

/** Layer ℓ's KV heads and head dim in a set of skew matrices. */
export function skewLayerHeads(m: Pick<SkewMatrices, 'kvHeads' | 'headDim' | 'perLayer'>, layer: number): LayerHeads {
  return m.perLayer?.[layer] ?? m;
}

/** Where layer ℓ's matrices start in `matrices` (elements), and its eigenvalues in `eigenvalues`. */
export function skewLayerOffsets(m: Pick<SkewMatrices, 'kvHeads' | 'headDim' | 'perLayer'>, layer: number): { matrices: number; eigenvalues: number } {
  if (m.perLayer === undefined) return { matrices: layer * m.kvHeads * m.headDim * m.headDim, eigenvalues: layer * m.kvHeads * m.headDim };
  let matrices = 0;
  let eigenvalues = 0;
  for (let l = 0; l < layer; l++) {
    const { kvHeads, headDim: d } = m.perLayer[l]!;
    matrices += kvHeads * d * d;
    eigenvalues += kvHeads * d;
  }
  return { matrices, eigenvalues };
}

/** Shape of a model's attention, as the kv code needs it. */
export interface HeadShape {
  readonly layers: number;
  /** query heads */
  readonly heads: number;
  readonly kvHeads: number;
  /** d */
  readonly headDim: number;
}

export function checkHeadShape(shape: HeadShape): void {
  const { layers, heads, kvHeads, headDim } = shape;
  for (const [name, v] of Object.entries({ layers, heads, kvHeads, headDim })) {
    if (!Number.isInteger(v) || v < 1) throw new UsageError(`${name} must be a positive integer, got ${v}`, { field: name, value: v });
  }
  if (heads % kvHeads !== 0) {
    throw new UsageError(`query heads (${heads}) must be a multiple of KV heads (${kvHeads})`, { heads, kvHeads });
  }
}

/**
 * Accumulates QᵀQ per layer and KV head in float64, then eigen-decomposes it.
 * Memory: layers·kvHeads·d² doubles (32 layers × 8 KV heads × 128² = 32 MiB).
 */
export class SkewCalibrator {
  readonly shape: HeadShape;
  /** [layer] each layer's KV heads and head dim when they differ (kvHeads 0: a layer nothing is calibrated for) */
  private readonly perLayer: readonly LayerHeads[] | undefined;
  /** [layers, kvHeads, d, d] Σ_t a_t a_tᵀ (upper triangle only until finish); per layer's shape with perLayer */
  private readonly gram: Float64Array;
  /** [layers] tokens added */
  private readonly samples: Uint32Array;
  /** [d] scratch: the group-averaged query of one token */
  private readonly avg: Float64Array;

  constructor(layers: number, kvHeads: number, heads: number, headDim: number, perLayer?: readonly LayerHeads[]) {
    this.shape = { layers, heads, kvHeads, headDim };
    checkHeadShape(this.shape);
    if (perLayer !== undefined) {
      if (perLayer.length !== layers) throw new UsageError(`skew calibration: ${perLayer.length} layer shapes for ${layers} layers`, {});
      perLayer.forEach(({ kvHeads: g, headDim: d }, l) => {
        if (!(Number.isInteger(g) && g >= 0 && Number.isInteger(d) && d >= 1) || (g > 0 && heads % g !== 0)) throw new UsageError(`skew calibration: layer ${l} has ${g} KV heads of ${d} for ${heads} query heads`, { layer: l });
      });
    }
    this.perLayer = perLayer;
    this.gram = new Float64Array(skewLayerOffsets({ kvHeads, headDim, perLayer }, layers).matrices);
    this.samples = new Uint32Array(layers);
    this.avg = new Float64Array(perLayer ? Math.max(...perLayer.map((x) => x.headDim)) : headDim);
  }

  private heads(layer: number): LayerHeads {
    return this.perLayer?.[layer] ?? this.shape;
  }

  /**
   * Adds T tokens of post-RoPE queries of one layer. `q`: [T, heads·d] (token-major, head after
   * head, as the q projection writes them). Non-finite values are rejected (they would poison A).
   */
  addQueries(layer: number, q: Float32Array, T: number): void {
    const { layers, heads } = this.shape;
    if (!Number.isInteger(layer) || layer < 0 || layer >= layers) throw new UsageError(`layer ${layer} is outside 0..${layers - 1}`, { layer });
    const { kvHeads, headDim: d } = this.heads(layer);
    if (kvHeads === 0) throw new UsageError(`skew calibration: layer ${layer} has no keys of its own to calibrate for`, { layer });
    const layerBase = skewLayerOffsets({ ...this.shape, perLayer: this.perLayer }, layer).matrices;
    if (!Number.isInteger(T) || T < 0 || q.length < T * heads * d) {
      throw new UsageError(`queries: expected [${T}, ${heads * d}] = ${T * heads * d} floats, got ${q.length}`, { T, length: q.length });
    }
    const group = heads / kvHeads;
    const avg = this.avg;
    for (let t = 0; t < T; t++) {
      for (let g = 0; g < kvHeads; g++) {
        avg.fill(0);
        for (let h = g * group; h < (g + 1) * group; h++) {
          const base = (t * heads + h) * d;
          for (let i = 0; i < d; i++) avg[i] = avg[i]! + q[base + i]!;
        }
        for (let i = 0; i < d; i++) {
          avg[i] = avg[i]! / group;
          if (!Number.isFinite(avg[i]!)) throw new UsageError(`queries: non-finite value at layer ${layer}, token ${t}, KV head ${g}`, { layer, t, g });
        }
        const base = layerBase + g * d * d;
        for (let i = 0; i < d; i++) {
          const ai = avg[i]!;
          if (ai === 0) continue;
          const row = base + i * d;
          for (let j = i; j < d; j++) this.gram[row + j] = this.gram[row + j]! + ai * avg[j]!;
        }
      }
    }
    this.samples[layer] = this.samples[layer]! + T;
  }

  /** Eigen-decomposes every layer's Gram matrices. Throws UsageError if a layer has no samples. */
  finish(): SkewMatrices {
    const { layers } = this.shape;
    const shapes = { ...this.shape, perLayer: this.perLayer };
    const end = skewLayerOffsets(shapes, layers);
    const matrices = new Float32Array(end.matrices);
    const eigenvalues = new Float32Array(end.eigenvalues);
    for (let l = 0; l < layers; l++) {
      const { kvHeads, headDim: d } = this.heads(l);
      if (kvHeads === 0) continue; // a KV-shared layer: nothing to rotate
      const at = skewLayerOffsets(shapes, l);
      const full = new Float64Array(d * d); // [d, d] symmetric QᵀQ/T of one head
      const T = this.samples[l]!;
      if (T === 0) throw new UsageError(`skew calibration: layer ${l} received no queries`, { layer: l });
      for (let g = 0; g < kvHeads; g++) {
        const base = at.matrices + g * d * d;
        for (let i = 0; i < d; i++) {
          for (let j = i; j < d; j++) {
            const x = this.gram[base + i * d + j]! / T;
            full[i * d + j] = x;
            full[j * d + i] = x;
          }
        }
        const { values, vectors } = symmetricEigen(full, d);
        matrices.set(vectors, base);
        eigenvalues.set(values, at.eigenvalues + g * d);
      }
    }
    const { kvHeads, headDim } = this.shape;
    return { layers, kvHeads, headDim, matrices, eigenvalues, samples: Uint32Array.from(this.samples), ...(this.perLayer ? { perLayer: this.perLayer } : {}) };
  }
}

/** [d, d] view of A_{layer, kvHead} (no copy). */
export function skewMatrix(m: SkewMatrices, layer: number, kvHead: number): Float32Array {
  const { headDim: d } = skewLayerHeads(m, layer);
  const at = skewLayerOffsets(m, layer).matrices + kvHead * d * d;
  return m.matrices.subarray(at, at + d * d);
}

/**
 * x·A for each row: `x` [rows, d], `A` [d, d] → [rows, d] (float64 accumulation). `out` may be
 * given to avoid allocation; it must not alias `x`.
 */
export function applySkew(x: Float32Array, A: Float32Array, d: number, out?: Float32Array): Float32Array {
  if (A.length !== d * d || x.length % d !== 0) {
    throw new UsageError(`applySkew: x has ${x.length} floats and A ${A.length} for d = ${d}`, { d, x: x.length, a: A.length });
  }
  const rows = x.length / d;
  const y = out ?? new Float32Array(rows * d); // [rows, d]
  if (y.length !== rows * d) throw new UsageError(`applySkew: out has ${y.length} floats, expected ${rows * d}`, {});
  const acc = new Float64Array(d); // [d] one output row
  for (let r = 0; r < rows; r++) {
    acc.fill(0);
    for (let i = 0; i < d; i++) {
      const xi = x[r * d + i]!;
      if (xi === 0) continue;
      const arow = i * d;
      for (let j = 0; j < d; j++) acc[j] = acc[j]! + xi * A[arow + j]!;
    }
    y.set(acc, r * d);
  }
  return y;
}
