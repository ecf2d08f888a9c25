// Force-included (-include) into the core's sources when they are built with clang for fuzzing.
// clang 14 (Debian 12's) rejects __builtin_cpu_supports("f16c"), which attention.cc uses to pick
// the AVX2+FMA+F16C kernel at run time (g++ accepts it). This maps the builtin onto cpuid so the
// fuzz build picks the same kernel as the addon does, without touching the sources (the AVX-512
// features too, for the avx512 kernel).
#pragma once

#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#include <cstring>

static inline bool lh_fuzz_cpu_supports(const char* feature) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
  bool ymm = false, zmm = false;
  if (osxsave && avx) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    ymm = (lo & 6u) == 6u;        // the OS saves XMM and YMM state
    zmm = ymm && (lo & 0xe0u) == 0xe0u;  // ... and the AVX-512 opmask and ZMM state
  }
  if (std::strcmp(feature, "f16c") == 0) return ymm && ((c >> 29) & 1u);
  if (std::strcmp(feature, "fma") == 0) return ymm && ((c >> 12) & 1u);
  if (std::strcmp(feature, "avx2") == 0) {
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    if (!__get_cpuid_count(7, 0, &a7, &b7, &c7, &d7)) return false;
    return ymm && ((b7 >> 5) & 1u);
  }
  // AVX-512 (attention.cc's avx512 kernel): CPUID 7.0 EBX bits F 16, DQ 17, BW 30, VL 31
  const int bit = std::strcmp(feature, "avx512f") == 0 ? 16 : std::strcmp(feature, "avx512dq") == 0 ? 17
                : std::strcmp(feature, "avx512bw") == 0 ? 30 : std::strcmp(feature, "avx512vl") == 0 ? 31 : -1;
  if (bit >= 0) {
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    if (!__get_cpuid_count(7, 0, &a7, &b7, &c7, &d7)) return false;
    return zmm && ((b7 >> bit) & 1u);
  }
  return false;
}
#define __builtin_cpu_supports(feature) lh_fuzz_cpu_supports(feature)
#endif
