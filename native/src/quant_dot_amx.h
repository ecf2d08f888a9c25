// AMX tile instructions for the prefill kernels of quant_dot_q.cc (Q4_0, Q8_0) and quant_dot_k.cc
// (Q4_K, Q5_K, Q6_K), LH_QDOT_AMX (quant_dot.h says when a CPU runs it). A tile is up to 16 rows of
// up to 64 bytes; a tile dot C[m][n] += Σ_k A[m][k]·B[k/4][4n + k%4] sums int8 products in int32,
// A = tokens' codes read in place (16 rows at the activation stride), B = 16 weight rows transposed
// into dwords (lh_transpose_16x8's layout), C = int32 [16 tokens][16 rows].
//
// Written as assembly rather than GCC 12's intrinsics: its _tile_loadd has no memory clobber, so a
// store to the B buffer could be moved past the tile load that reads it; clang's need the amx target.
// The tile configuration is per thread: each kernel call loads its own and releases the tiles at the
// end (the thread's context switches then stop saving 8 KiB of tile data).
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#define LH_TILE_LOADD(tmm, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #tmm ::"r"(static_cast<const void*>(base)), "r"(static_cast<long>(stride)) : "memory")
#define LH_TILE_STORED(tmm, base) __asm__ volatile("tilestored %%tmm" #tmm ", (%0,%1,1)" ::"r"(static_cast<void*>(base)), "r"(64L) : "memory")
#define LH_TILE_ZERO(tmm) __asm__ volatile("tilezero %%tmm" #tmm ::)
#define LH_TDPBSUD(c, a, b) __asm__ volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)  // c += a (s8) · b (u8)
#define LH_TDPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)  // c += a (s8) · b (s8)

struct alignas(64) lh_amx_tile_config {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per tile row
  uint8_t rows[16] = {};
};

// tile i: rows[i] rows of colsb[i] bytes, for i < n (the others unused)
inline void lh_amx_configure(int n, const uint8_t* rows, const uint16_t* colsb) {
  lh_amx_tile_config c;
  for (int i = 0; i < n; ++i) c.rows[i] = rows[i], c.colsb[i] = colsb[i];
  __asm__ volatile("ldtilecfg %0" ::"m"(c) : "memory");
}
inline void lh_amx_release() { __asm__ volatile("tilerelease" ::: "memory"); }
#endif
