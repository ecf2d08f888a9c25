// Symmetric eigen-decomposition for the skewing matrices (ARCHITECTURE.md §4.1): A = eigenvectors
// of QᵀQ, d×d with d = 8…128. Plain float64 TypeScript, no dependencies, so the native port and
// any later change can be checked against it.
//
// Method: Householder reduction to tridiagonal form, then the implicit QL algorithm with Wilkinson
// shifts on the tridiagonal matrix, accumulating every rotation into V (the EISPACK tred2/tql2
// pair, in the arrangement of Golub & Van Loan §8.3 and the public-domain JAMA port). O(d³) with
// a small constant: about 1 ms at d = 64 and a few ms at d = 128, against ~10× that for cyclic
// Jacobi. Both give eigenvectors orthonormal to ~1e-15.
//
// Output conventions (so the native port can be compared element by element):
//  - eigenvalues in descending order;
//  - eigenvectors are the COLUMNS of a row-major d×d matrix: vectors[i*d + j] = component i of
//    eigenvector j;
//  - sign: each eigenvector's component of largest magnitude is positive (lowest index on ties).
//    Vectors of a repeated eigenvalue are any orthonormal basis of its eigenspace.
import { LonghandError, UsageError } from '../../common/errors.ts';

export interface SymmetricEigen {
  /** Dimension d. */
  readonly d: number;
  /** [d] eigenvalues, descending. */
  readonly values: Float64Array;
  /** [d, d] row-major; column j is the unit eigenvector of values[j]. */
  readonly vectors: Float64Array;
}

/** QL iterations allowed per eigenvalue before we call the input pathological (typical: 1–3). */
const MAX_QL_ITERATIONS = 60;
const EPS = 2 ** -52;

/**
 * Eigenvalues and orthonormal eigenvectors of the symmetric matrix `a` ([d, d] row-major; only
 * symmetric input is accepted: |a_ij − a_ji| ≤ 1e-9·max|a|). The input is not modified.
 * Throws UsageError for a wrong length, non-finite entries or an asymmetric matrix.
 */
export function symmetricEigen(a: Float64Array | Float32Array, d: number): SymmetricEigen {
  checkInput(a, d);
  const v = Float64Array.from(a); // [d, d] becomes the accumulated orthogonal transform
  const diag = new Float64Array(d); // [d] diagonal of the tridiagonal form, then eigenvalues
  const off = new Float64Array(d); // [d] sub-diagonal of the tridiagonal form
  if (d === 1) {
    diag[0] = a[0]!;
    v[0] = 1;
  } else {
    tridiagonalize(v, diag, off, d);
    tridiagonalQl(v, diag, off, d);
  }
  return sortAndFixSigns(diag, v, d);
}

function checkInput(a: Float64Array | Float32Array, d: number): void {
  if (!Number.isInteger(d) || d < 1) throw new UsageError(`eigen: dimension must be a positive integer, got ${d}`, { d });
  if (a.length !== d * d) throw new UsageError(`eigen: expected ${d * d} entries for ${d}×${d}, got ${a.length}`, { d, length: a.length });
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    if (!Number.isFinite(x)) throw new UsageError(`eigen: entry ${i} is not finite (${x})`, { index: i });
    scale = Math.max(scale, Math.abs(x));
  }
  const tol = 1e-9 * scale;
  for (let i = 0; i < d; i++) {
    for (let j = i + 1; j < d; j++) {
      if (Math.abs(a[i * d + j]! - a[j * d + i]!) > tol) {
        throw new UsageError(`eigen: matrix is not symmetric at (${i}, ${j})`, { row: i, col: j });
      }
    }
  }
}

/**
 * Householder reduction of the symmetric matrix held in `v` to tridiagonal form T = Qᵀ A Q.
 * On return `diag` holds T's diagonal, `off[i]` the element T[i, i−1] (off[0] = 0), and `v` holds Q.
 */
function tridiagonalize(v: Float64Array, diag: Float64Array, off: Float64Array, n: number): void {
  for (let j = 0; j < n; j++) diag[j] = v[(n - 1) * n + j]!;

  for (let i = n - 1; i > 0; i--) {
    // Scale row i (columns < i) to avoid under/overflow in the Householder vector.
    let scale = 0;
    let h = 0;
    for (let k = 0; k < i; k++) scale += Math.abs(diag[k]!);
    if (scale === 0) {
      off[i] = diag[i - 1]!;
      for (let j = 0; j < i; j++) {
        diag[j] = v[(i - 1) * n + j]!;
        v[i * n + j] = 0;
        v[j * n + i] = 0;
      }
    } else {
      for (let k = 0; k < i; k++) {
        diag[k] = diag[k]! / scale;
        h += diag[k]! * diag[k]!;
      }
      let f = diag[i - 1]!;
      let g = Math.sqrt(h);
      if (f > 0) g = -g;
      off[i] = scale * g;
      h -= f * g;
      diag[i - 1] = f - g;
      for (let j = 0; j < i; j++) off[j] = 0;

      // p = A·u / h (in off), using the lower triangle of the remaining block.
      for (let j = 0; j < i; j++) {
        f = diag[j]!;
        v[j * n + i] = f;
        g = off[j]! + v[j * n + j]! * f;
        for (let k = j + 1; k <= i - 1; k++) {
          g += v[k * n + j]! * diag[k]!;
          off[k] = off[k]! + v[k * n + j]! * f;
        }
        off[j] = g;
      }
      f = 0;
      for (let j = 0; j < i; j++) {
        off[j] = off[j]! / h;
        f += off[j]! * diag[j]!;
      }
      const hh = f / (h + h);
      for (let j = 0; j < i; j++) off[j] = off[j]! - hh * diag[j]!;
      // A ← A − u·qᵀ − q·uᵀ on the lower triangle.
      for (let j = 0; j < i; j++) {
        f = diag[j]!;
        g = off[j]!;
        for (let k = j; k <= i - 1; k++) v[k * n + j] = v[k * n + j]! - (f * off[k]! + g * diag[k]!);
        diag[j] = v[(i - 1) * n + j]!;
        v[i * n + j] = 0;
      }
    }
    diag[i] = h;
  }

  // Accumulate the Householder reflections into Q.
  for (let i = 0; i < n - 1; i++) {
    v[(n - 1) * n + i] = v[i * n + i]!;
    v[i * n + i] = 1;
    const h = diag[i + 1]!;
    if (h !== 0) {
      for (let k = 0; k <= i; k++) diag[k] = v[k * n + i + 1]! / h;
      for (let j = 0; j <= i; j++) {
        let g = 0;
        for (let k = 0; k <= i; k++) g += v[k * n + i + 1]! * v[k * n + j]!;
        for (let k = 0; k <= i; k++) v[k * n + j] = v[k * n + j]! - g * diag[k]!;
      }
    }
    for (let k = 0; k <= i; k++) v[k * n + i + 1] = 0;
  }
  for (let j = 0; j < n; j++) {
    diag[j] = v[(n - 1) * n + j]!;
    v[(n - 1) * n + j] = 0;
  }
  v[(n - 1) * n + n - 1] = 1;
  off[0] = 0;
}

/**
 * Implicit QL with Wilkinson shifts on the tridiagonal (diag, off), applying each Givens rotation
 * to the columns of `v`. On return `diag` holds the eigenvalues (unsorted), `v` the eigenvectors.
 */
function tridiagonalQl(v: Float64Array, diag: Float64Array, off: Float64Array, n: number): void {
  for (let i = 1; i < n; i++) off[i - 1] = off[i]!;
  off[n - 1] = 0;

  let shiftSum = 0;
  let tst1 = 0;
  for (let l = 0; l < n; l++) {
    // Find the first negligible sub-diagonal element at or after l.
    tst1 = Math.max(tst1, Math.abs(diag[l]!) + Math.abs(off[l]!));
    let m = l;
    while (m < n - 1 && Math.abs(off[m]!) > EPS * tst1) m++;

    if (m > l) {
      let iterations = 0;
      do {
        if (++iterations > MAX_QL_ITERATIONS) {
          throw new LonghandError('INTERNAL', `eigen: QL did not converge for eigenvalue ${l} of ${n}`, { l, n });
        }
        // Wilkinson shift from the leading 2×2 block.
        let g = diag[l]!;
        let p = (diag[l + 1]! - g) / (2 * off[l]!);
        let r = Math.hypot(p, 1);
        if (p < 0) r = -r;
        diag[l] = off[l]! / (p + r);
        diag[l + 1] = off[l]! * (p + r);
        const dl1 = diag[l + 1]!;
        let h = g - diag[l]!;
        for (let i = l + 2; i < n; i++) diag[i] = diag[i]! - h;
        shiftSum += h;

        // The implicit QL sweep from m−1 down to l.
        p = diag[m]!;
        let c = 1;
        let c2 = c;
        let c3 = c;
        const el1 = off[l + 1]!;
        let s = 0;
        let s2 = 0;
        for (let i = m - 1; i >= l; i--) {
          c3 = c2;
          c2 = c;
          s2 = s;
          g = c * off[i]!;
          h = c * p;
          r = Math.hypot(p, off[i]!);
          off[i + 1] = s * r;
          s = off[i]! / r;
          c = p / r;
          p = c * diag[i]! - s * g;
          diag[i + 1] = h + s * (c * g + s * diag[i]!);
          for (let k = 0; k < n; k++) {
            const row = k * n;
            h = v[row + i + 1]!;
            v[row + i + 1] = s * v[row + i]! + c * h;
            v[row + i] = c * v[row + i]! - s * h;
          }
        }
        p = (-s * s2 * c3 * el1 * off[l]!) / dl1;
        off[l] = s * p;
        diag[l] = c * p;
      } while (Math.abs(off[l]!) > EPS * tst1);
    }
    diag[l] = diag[l]! + shiftSum;
    off[l] = 0;
  }
}

/** Sort descending (stable: equal eigenvalues keep their order) and apply the sign convention. */
function sortAndFixSigns(diag: Float64Array, v: Float64Array, d: number): SymmetricEigen {
  const order = Array.from({ length: d }, (_, i) => i).sort((x, y) => diag[y]! - diag[x]! || x - y);
  const values = new Float64Array(d); // [d]
  const vectors = new Float64Array(d * d); // [d, d], columns = eigenvectors
  for (let j = 0; j < d; j++) {
    const src = order[j]!;
    values[j] = diag[src]!;
    let big = 0;
    let bigAbs = -1;
    for (let i = 0; i < d; i++) {
      const x = v[i * d + src]!;
      if (Math.abs(x) > bigAbs + 1e-12) {
        bigAbs = Math.abs(x);
        big = x;
      }
    }
    const sign = big < 0 ? -1 : 1;
    for (let i = 0; i < d; i++) vectors[i * d + j] = sign * v[i * d + src]!;
  }
  return { d, values, vectors };
}
