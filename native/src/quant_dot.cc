// lh_qdot_kernels_for: which family file has the type, and which implementation this CPU runs.
#include "quant_dot.h"

#include <initializer_list>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {
#if defined(__x86_64__)
// AMX-TILE and AMX-INT8 in cpuid, the tile state enabled by the OS in XCR0 (bits 17, 18), and this
// process granted the right to use it: Linux hands the 8 KiB tile-data state out only on request
// (ARCH_REQ_XCOMP_PERM), and refuses it where a thread's signal stack is too small to save it.
bool amx_usable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
  if (!tile || !int8) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false;  // OSXSAVE: xgetbv works
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif
}  // namespace

bool lh_qdot_available(lh_qdot_impl impl) {
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
      static const bool has = lh_qdot_available(LH_QDOT_AVX2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                              __builtin_cpu_supports("avx512vnni");
      return has;
    }
    case LH_QDOT_AMX: {
      static const bool has = lh_qdot_available(LH_QDOT_AVX512) && amx_usable();
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
  if (!lh_qdot_q_kernels(type, impl, &k) && !lh_qdot_k_kernels(type, impl, &k)) return false;
  *out = k;
  return true;
}
