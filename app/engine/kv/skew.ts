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
  readonly kvHeads: number;
  /** d */
  readonly headDim: number;
  /** [layers, kvHeads, d, d] row-major per matrix; A[i, j] = component i of eigenvector j (columns). */
  readonly matrices: Float32Array;
  /** [layers, kvHeads, d] eigenvalues of QᵀQ/T, descending: mean energy of each skewed column. */
  readonly eigenvalues: Float32Array;
  /** [layers] query tokens each layer was calibrated on. */
  readonly samples: Uint32Array;
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
  /** [layers, kvHeads, d, d] Σ_t a_t a_tᵀ (upper triangle only until finish) */
  private readonly gram: Float64Array;
  /** [layers] tokens added */
  private readonly samples: Uint32Array;
  /** [d] scratch: the group-averaged query of one token */
  private readonly avg: Float64Array;

  constructor(layers: number, kvHeads: number, heads: number, headDim: number) {
    this.shape = { layers, heads, kvHeads, headDim };
    checkHeadShape(this.shape);
    this.gram = new Float64Array(layers * kvHeads * headDim * headDim);
    this.samples = new Uint32Array(layers);
    this.avg = new Float64Array(headDim);
  }

  /**
   * Adds T tokens of post-RoPE queries of one layer. `q`: [T, heads·d] (token-major, head after
   * head, as the q projection writes them). Non-finite values are rejected (they would poison A).
   */
  addQueries(layer: number, q: Float32Array, T: number): void {
    const { layers, heads, kvHeads, headDim: d } = this.shape;
    if (!Number.isInteger(layer) || layer < 0 || layer >= layers) throw new UsageError(`layer ${layer} is outside 0..${layers - 1}`, { layer });
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
        const base = (layer * kvHeads + g) * d * d;
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
    const { layers, kvHeads, headDim: d } = this.shape;
    const matrices = new Float32Array(layers * kvHeads * d * d);
    const eigenvalues = new Float32Array(layers * kvHeads * d);
    const full = new Float64Array(d * d); // [d, d] symmetric QᵀQ/T of one head
    for (let l = 0; l < layers; l++) {
      const T = this.samples[l]!;
      if (T === 0) throw new UsageError(`skew calibration: layer ${l} received no queries`, { layer: l });
      for (let g = 0; g < kvHeads; g++) {
        const base = (l * kvHeads + g) * d * d;
        for (let i = 0; i < d; i++) {
          for (let j = i; j < d; j++) {
            const x = this.gram[base + i * d + j]! / T;
            full[i * d + j] = x;
            full[j * d + i] = x;
          }
        }
        const { values, vectors } = symmetricEigen(full, d);
        matrices.set(vectors, base);
        eigenvalues.set(values, (l * kvHeads + g) * d);
      }
    }
    return { layers, kvHeads, headDim: d, matrices, eigenvalues, samples: Uint32Array.from(this.samples) };
  }
}

/** [d, d] view of A_{layer, kvHead} (no copy). */
export function skewMatrix(m: SkewMatrices, layer: number, kvHead: number): Float32Array {
  const dd = m.headDim * m.headDim;
  const at = (layer * m.kvHeads + kvHead) * dd;
  return m.matrices.subarray(at, at + dd);
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
