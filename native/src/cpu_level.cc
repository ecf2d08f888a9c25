// CPU detection for the kernel levels and the cap every dispatch consults (cpu_level.h).
#include "cpu_level.h"

#include <atomic>
#include <cstring>
#include <initializer_list>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {
// The cap. LH_CPU_AMX, the top, caps nothing: the default dispatch.
std::atomic<uint32_t> g_cap{LH_CPU_AMX};

#if defined(__x86_64__)
// Linux hands the 8 KiB tile-data state out only on request (ARCH_REQ_XCOMP_PERM), and refuses it
// where a thread's signal stack is too small to save it.
bool amx_usable_now() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
  if (!tile || !int8) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false;  // OSXSAVE: xgetbv works
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG and XTILEDATA enabled by the OS
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

lh_cpu_level detect() {
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))) return LH_CPU_PORTABLE;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq")))
    return LH_CPU_AVX2;
  // AMX's kernels are quant_dot's AVX512 ones (which need VNNI) with tiles for the prefill
  if (!(__builtin_cpu_supports("avx512vnni") && lh_cpu_amx_usable())) return LH_CPU_AVX512;
  return LH_CPU_AMX;
}
#endif
}  // namespace

const char* lh_cpu_level_name(lh_cpu_level level) {
  switch (level) {
    case LH_CPU_PORTABLE: return "portable";
    case LH_CPU_AVX2: return "avx2";
    case LH_CPU_AVX512: return "avx512";
    case LH_CPU_AMX: return "amx";
  }
  return "unknown";
}

bool lh_cpu_level_parse(const char* name, lh_cpu_level* out) {
  if (name == nullptr || out == nullptr) return false;
  for (const lh_cpu_level l : {LH_CPU_PORTABLE, LH_CPU_AVX2, LH_CPU_AVX512, LH_CPU_AMX})
    if (std::strcmp(name, lh_cpu_level_name(l)) == 0) {
      *out = l;
      return true;
    }
  return false;
}

bool lh_cpu_amx_usable() {
#if defined(__x86_64__)
  static const bool usable = amx_usable_now();
  return usable;
#else
  return false;
#endif
}

lh_cpu_level lh_cpu_level_detected() {
#if defined(__x86_64__)
  static const lh_cpu_level level = detect();
  return level;
#else
  return LH_CPU_PORTABLE;
#endif
}

lh_cpu_level lh_cpu_level_effective() {
  const uint32_t cap = g_cap.load(std::memory_order_relaxed), cpu = lh_cpu_level_detected();
  return static_cast<lh_cpu_level>(cap < cpu ? cap : cpu);
}

bool lh_cpu_level_forced() { return g_cap.load(std::memory_order_relaxed) < lh_cpu_level_detected(); }

lh_status lh_cpu_level_force(lh_cpu_level level) {
  if (level > LH_CPU_AMX || level > lh_cpu_level_detected()) return LH_BAD_ARGUMENT;
  g_cap.store(level, std::memory_order_relaxed);
  return LH_OK;
}

bool lh_cpu_level_allows(lh_cpu_level level) { return level <= g_cap.load(std::memory_order_relaxed); }
