// lh_qdot_kernels_for: which family file has the type, and which implementation this CPU runs.
#include "quant_dot.h"

#include <initializer_list>

#include "cpu_level.h"

namespace {
// What the CPU itself runs, ignoring the cap of cpu_level.h.
bool cpu_runs(lh_qdot_impl impl) {
  switch (impl) {
    case LH_QDOT_AUTO:
    case LH_QDOT_SCALAR:
      return true;
#if defined(__x86_64__)
    case LH_QDOT_AVX2: {
      static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
      return has;
    }
    case LH_QDOT_AVX512: {
      static const bool has = cpu_runs(LH_QDOT_AVX2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                              __builtin_cpu_supports("avx512vnni");
      return has;
    }
    case LH_QDOT_AMX: {
      static const bool has = cpu_runs(LH_QDOT_AVX512) && lh_cpu_amx_usable();
      return has;
    }
#else
    case LH_QDOT_AVX2:
    case LH_QDOT_AVX512:
    case LH_QDOT_AMX:
      return false;
#endif
  }
  return false;
}

// The level of cpu_level.h an implementation belongs to (the cap allows it or not).
lh_cpu_level level_of(lh_qdot_impl impl) {
  switch (impl) {
    case LH_QDOT_AVX2: return LH_CPU_AVX2;
    case LH_QDOT_AVX512: return LH_CPU_AVX512;
    case LH_QDOT_AMX: return LH_CPU_AMX;
    case LH_QDOT_AUTO:
    case LH_QDOT_SCALAR: break;
  }
  return LH_CPU_PORTABLE;
}
}  // namespace

bool lh_qdot_available(lh_qdot_impl impl) { return cpu_runs(impl) && lh_cpu_level_allows(level_of(impl)); }

bool lh_qdot_kernels_for(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out) {
  if (out == nullptr) return false;
  if (impl == LH_QDOT_AUTO) {
    // best first; a family without that impl for the type falls through to the next
    for (const lh_qdot_impl i : {LH_QDOT_AMX, LH_QDOT_AVX512, LH_QDOT_AVX2, LH_QDOT_SCALAR})
      if (lh_qdot_kernels_for(type, i, out)) return true;
    return false;
  }
  if (!lh_qdot_available(impl)) return false;
  lh_qdot_kernels k{};
  if (!lh_qdot_q_kernels(type, impl, &k) && !lh_qdot_k_kernels(type, impl, &k) && !lh_qdot_mxfp4_kernels(type, impl, &k) &&
      !lh_qdot_q5_kernels(type, impl, &k) && !lh_qdot_q1_kernels(type, impl, &k))
    return false;
  *out = k;
  return true;
}
