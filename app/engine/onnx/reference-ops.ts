// Plain TypeScript versions of the dense ops, written for clarity, not speed: the yardstick the
// ONNX graphs are tested against. Accumulation in float64; results rounded to float32.
// Shapes: activations are row-major [rows, features]; weights are PyTorch order [out, in].

import type { RopeLayout } from '../model/types.ts';

/** y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ w;  x: [rows, d] */
export function rmsnorm(x: Float32Array, w: Float32Array, eps: number): Float32Array {
  const d = w.length;
  const y = new Float32Array(x.length);
  for (let r = 0; r < x.length / d; r++) {
    let ss = 0;
    for (let i = 0; i < d; i++) ss += x[r * d + i]! ** 2;
    const inv = 1 / Math.sqrt(ss / d + eps);
    for (let i = 0; i < d; i++) y[r * d + i] = x[r * d + i]! * inv * w[i]!;
  }
  return y;
}

/** y[r] = (x[r] − mean) / sqrt(var + eps) ⊙ w + b;  x: [rows, d] */
export function layernorm(x: Float32Array, w: Float32Array, b: Float32Array, eps: number): Float32Array {
  const d = w.length;
  const y = new Float32Array(x.length);
  for (let r = 0; r < x.length / d; r++) {
    let mean = 0;
    for (let i = 0; i < d; i++) mean += x[r * d + i]!;
    mean /= d;
    let v = 0;
    for (let i = 0; i < d; i++) v += (x[r * d + i]! - mean) ** 2;
    const inv = 1 / Math.sqrt(v / d + eps);
    for (let i = 0; i < d; i++) y[r * d + i] = (x[r * d + i]! - mean) * inv * w[i]! + b[i]!;
  }
  return y;
}

/** y = x · Wᵀ (+ bias);  x: [rows, in], W: [out, in] → y: [rows, out] */
export function linear(x: Float32Array, w: Float32Array, outF: number, inF: number, bias?: Float32Array): Float32Array {
  const rows = x.length / inF;
  const y = new Float32Array(rows * outF);
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < outF; o++) {
      let s = bias ? bias[o]! : 0;
      for (let i = 0; i < inF; i++) s += x[r * inF + i]! * w[o * inF + i]!;
      y[r * outF + o] = s;
    }
  }
  return y;
}

/** y = a · b;  a: [m, k], b: [k, n] */
export function matmul(a: Float32Array, b: Float32Array, m: number, k: number, n: number): Float32Array {
  const y = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let t = 0; t < k; t++) s += a[i * k + t]! * b[t * n + j]!;
      y[i * n + j] = s;
    }
  }
  return y;
}

export const silu = (v: number): number => v / (1 + Math.exp(-v));

/**
 * RoPE, unscaled: x [rows, heads·headDim], row r at position positions[r]; angle for pair i is
 * position · θ^(−2i/d). 'interleaved' rotates (2i, 2i+1), 'neox' rotates (i, i + d/2).
 */
export function rope(x: Float32Array, positions: readonly number[], heads: number, headDim: number, theta: number, layout: RopeLayout): Float32Array {
  const y = new Float32Array(x.length);
  const width = heads * headDim;
  const half = headDim / 2;
  for (let r = 0; r < positions.length; r++) {
    const pos = positions[r]!;
    for (let h = 0; h < heads; h++) {
      const base = r * width + h * headDim;
      for (let i = 0; i < half; i++) {
        const angle = pos * theta ** (-(2 * i) / headDim);
        const c = Math.cos(angle);
        const s = Math.sin(angle);
        const [a, b] = layout === 'interleaved' ? [base + 2 * i, base + 2 * i + 1] : [base + i, base + i + half];
        const xa = x[a]!;
        const xb = x[b]!;
        y[a] = xa * c - xb * s;
        y[b] = xb * c + xa * s;
      }
    }
  }
  return y;
}
