// Column energies of skewed rows: see skew_energy.h. One product row y = x · A_g at a time:
// y[j] = Σ_i x[i] A_g[i, j] walks A_g row by row (contiguous), so the j loop vectorises.
#include "skew_energy.h"

#include <cmath>

#include "cpu_level.h"

namespace {

constexpr uint32_t kMaxD = 1024;

// always_inline: inlined into run_avx2, these compile with its AVX2/FMA target
template <bool kAvx2>
__attribute__((always_inline)) inline void accumulate_row(const float* x, const float* a, uint32_t d, float* y, double* energy) {
  for (uint32_t j = 0; j < d; j++) y[j] = 0.0f;
  for (uint32_t i = 0; i < d; i++) {
    const float xi = x[i];
    const float* arow = a + static_cast<size_t>(i) * d;
    for (uint32_t j = 0; j < d; j++) y[j] += xi * arow[j];
  }
  for (uint32_t j = 0; j < d; j++) energy[j] += std::fabs(static_cast<double>(y[j]));
}

template <bool kAvx2>
__attribute__((always_inline)) inline void run(const float* q, const float* k, size_t tokens, uint32_t heads, uint32_t kv_heads, uint32_t d, const float* a, double* qe,
         double* ke) {
  float y[kMaxD];  // (d) one product row
  const uint32_t group = heads / kv_heads;
  for (size_t t = 0; t < tokens; t++) {
    for (uint32_t g = 0; g < kv_heads; g++) {
      const float* A = a + static_cast<size_t>(g) * d * d;
      for (uint32_t h = g * group; h < (g + 1) * group; h++) accumulate_row<kAvx2>(q + (t * heads + h) * d, A, d, y, qe + static_cast<size_t>(g) * d);
      accumulate_row<kAvx2>(k + (t * kv_heads + g) * d, A, d, y, ke + static_cast<size_t>(g) * d);
    }
  }
}

__attribute__((target("avx2,fma"))) void run_avx2(const float* q, const float* k, size_t tokens, uint32_t heads, uint32_t kv_heads,
                                                  uint32_t d, const float* a, double* qe, double* ke) {
  run<true>(q, k, tokens, heads, kv_heads, d, a, qe, ke);
}

bool bad(const float* q, const float* k, uint32_t heads, uint32_t kv_heads, uint32_t d, const float* a, const double* qe, const double* ke) {
  return q == nullptr || k == nullptr || a == nullptr || qe == nullptr || ke == nullptr || d == 0 || d > kMaxD || kv_heads == 0 ||
         heads == 0 || heads % kv_heads != 0;
}

}  // namespace

lh_status lh_skew_energy(const float* q, const float* k, size_t tokens, uint32_t heads, uint32_t kv_heads, uint32_t d, const float* a,
                         double* q_energy, double* k_energy) {
  if (bad(q, k, heads, kv_heads, d, a, q_energy, k_energy)) return LH_BAD_ARGUMENT;
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && lh_cpu_level_allows(LH_CPU_AVX2)) run_avx2(q, k, tokens, heads, kv_heads, d, a, q_energy, k_energy);
  else run<false>(q, k, tokens, heads, kv_heads, d, a, q_energy, k_energy);
  return LH_OK;
}

lh_status lh_skew_energy_ref(const float* q, const float* k, size_t tokens, uint32_t heads, uint32_t kv_heads, uint32_t d, const float* a,
                             double* q_energy, double* k_energy) {
  if (bad(q, k, heads, kv_heads, d, a, q_energy, k_energy)) return LH_BAD_ARGUMENT;
  const uint32_t group = heads / kv_heads;
  for (size_t t = 0; t < tokens; t++) {
    for (uint32_t g = 0; g < kv_heads; g++) {
      const float* A = a + static_cast<size_t>(g) * d * d;
      for (uint32_t h = g * group; h <= (g + 1) * group; h++) {
        // h == (g + 1) * group stands for the key row
        const bool key = h == (g + 1) * group;
        const float* x = key ? k + (t * kv_heads + g) * d : q + (t * heads + h) * d;
        double* e = (key ? k_energy : q_energy) + static_cast<size_t>(g) * d;
        for (uint32_t j = 0; j < d; j++) {
          double s = 0;
          for (uint32_t i = 0; i < d; i++) s += static_cast<double>(x[i]) * A[static_cast<size_t>(i) * d + j];
          e[j] += std::fabs(s);
        }
      }
    }
  }
  return LH_OK;
}
