// Comparing an attention output with the scalar reference's, for inputs a fuzzer chose.
//
// Both sides compute softmax(scale·q·Kᵀ)·V in fp32 from the same fp16/fp32 rows; they differ in
// summation order, FMA contraction and (online softmax) the order the running maximum moves. The
// bound below follows from that: a score is off by at most ~(d+2)·eps·S (S = scale·Σ|q_i·k_ti|,
// the largest absolute dot product of the head), which perturbs each weight by that relative
// amount; the weighted sum of values then moves by at most ~2·that·V (V = largest |v|), plus
// ~tokens·eps·V of summation error. A factor 4 covers both sides' errors and the normalisation.
// Non-finite outputs must match position for position (attention.h's rules), finite ones within
// the bound; the palette in fuzz_input.h keeps every finite sum far from overflow.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"

struct HeadBound {
  double tol;  // allowed |opt - ref| for every element of the head's output
};

// k_at(t, i), v_at(t, i): element i of row t of the head's KV head, widened to float.
template <class KAt, class VAt>
HeadBound attention_bound(const float* q, uint32_t d, uint32_t tokens, float scale, KAt k_at, VAt v_at) {
  double s_abs = 0, v_abs = 0;
  for (uint32_t t = 0; t < tokens; ++t) {
    double s = 0;
    for (uint32_t i = 0; i < d; ++i) {
      const double x = std::fabs(static_cast<double>(q[i]) * k_at(t, i));
      if (std::isfinite(x)) s += x;
      const double v = std::fabs(static_cast<double>(v_at(t, i)));
      if (std::isfinite(v) && v > v_abs) v_abs = v;
    }
    s *= std::fabs(static_cast<double>(scale));
    if (s > s_abs) s_abs = s;
  }
  const double eps = 0x1p-24;
  return {4.0 * v_abs * eps * (4.0 * (d + 2) * (1.0 + s_abs) + 2.0 * tokens + 16.0) + 1e-30};
}

// Checks one head's output (d elements) against the reference's; aborts with `what` on a mismatch.
inline void expect_close(const float* got, const float* ref, uint32_t d, const HeadBound& b, const char* what, uint32_t head) {
  for (uint32_t i = 0; i < d; ++i) {
    const bool gf = std::isfinite(got[i]), rf = std::isfinite(ref[i]);
    FUZZ_CHECK(gf == rf, "%s: head %u element %u is %a, reference %a (non-finite parity)", what, head, i, static_cast<double>(got[i]),
               static_cast<double>(ref[i]));
    if (!gf) continue;
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    FUZZ_CHECK(e <= b.tol, "%s: head %u element %u is %.9g, reference %.9g (|e| %.3g > tol %.3g)", what, head, i,
               static_cast<double>(got[i]), static_cast<double>(ref[i]), e, b.tol);
  }
}
