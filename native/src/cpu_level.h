// The instruction-set level the kernels may use: what the CPU has, and a cap that forces every
// dispatch of the native code to choose at most a given level.
//
// Why a cap: the benchmarks of issue 35 compare the AVX2 kernels with llama.cpp's AVX2 build, and a
// session's host may have AVX-512 or AMX. With the cap at LH_CPU_AVX2 such a host runs exactly the
// kernels an AVX2-only CPU runs: every `*_AUTO` choice (quant_dot's lh_qdot_kernels_for, attention's
// LH_ATTN_AUTO, the speculator's scoring, the policies' score loops, the KV pool's fp16 stores) and
// every `*_available` question answer as if the CPU had nothing above the cap, so an explicit
// request for a kernel above it is refused (LH_BAD_ARGUMENT, "the CPU cannot run it") like on a
// CPU without it.
//
// The levels, each including the ones below:
//   LH_CPU_PORTABLE  the x86-64-v2 baseline the binary is compiled for (no runtime-chosen kernels)
//   LH_CPU_AVX2      AVX2 + FMA + F16C (the AVX2 kernels of quant_dot, attention, scoring)
//   LH_CPU_AVX512    AVX-512 F/BW/VL/DQ (attention's kernels; quant_dot's also need AVX512-VNNI)
//   LH_CPU_AMX       AMX-TILE + AMX-INT8, usable by this process (quant_dot's prefill tiles)
//
// The cap starts at LH_CPU_AMX (nothing capped: every dispatch is as it was before the cap
// existed). The addon sets it once, when it loads, from LONGHAND_CPU_LEVEL (addon.cc); native_tests
// does the same. Kernels already chosen (a DenseStage built before) keep theirs.
#pragma once

#include <cstdint>

#include "status.h"

enum lh_cpu_level : uint32_t {
  LH_CPU_PORTABLE = 0,
  LH_CPU_AVX2 = 1,
  LH_CPU_AVX512 = 2,
  LH_CPU_AMX = 3,
};

// The environment variable the addon and native_tests read: portable | avx2 | avx512 | amx.
constexpr const char* LH_CPU_LEVEL_ENV = "LONGHAND_CPU_LEVEL";

// "portable", "avx2", "avx512", "amx" (the names LONGHAND_CPU_LEVEL takes). Never null.
const char* lh_cpu_level_name(lh_cpu_level level);

// The level named `name` (lh_cpu_level_name's names, exact). False for anything else (null too).
bool lh_cpu_level_parse(const char* name, lh_cpu_level* out);

// The highest level this CPU (and OS: AMX's tile state) runs, ignoring the cap. Cached.
lh_cpu_level lh_cpu_level_detected();

// The level the dispatch uses now: the lower of the cap and what the CPU has.
lh_cpu_level lh_cpu_level_effective();

// True while the cap was lowered by lh_cpu_level_force below the CPU's own level.
bool lh_cpu_level_forced();

// Caps every later dispatch at `level`. LH_BAD_ARGUMENT (cap unchanged) when the CPU lacks that
// level or it is not one of the enum's values. Forcing the detected level (or LH_CPU_AMX on an
// AMX host) restores the uncapped behaviour.
lh_status lh_cpu_level_force(lh_cpu_level level);

// Does the cap let a dispatch choose a kernel of `level`? Cheap (one relaxed atomic load): the
// kernels' availability checks call it on every dispatch. Says nothing about the CPU itself.
bool lh_cpu_level_allows(lh_cpu_level level);

// AMX-TILE and AMX-INT8 in cpuid, the tile state enabled by the OS, and this process granted its
// use (Linux's arch_prctl, asked once). False off x86-64. Not capped.
bool lh_cpu_amx_usable();
