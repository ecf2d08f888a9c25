// The transposition the prefill kernels of quant_dot_q.cc (Q4_0, Q8_0) and quant_dot_k.cc (Q4_K,
// Q5_K) share: 16 weight rows' 32 codes of one block become 8 vectors that hold dword j (codes
// 4j..4j+3) of all 16 rows, one row a lane, the layout vpdpbusd wants against a token's codes
// broadcast. Paid once per tile and block, shared by up to 64 tokens. lh_transpose_8x8 is the AVX2
// path's (quant_dot_q.cc's q_prefill_avx2): 8 rows, one ymm, for vpmaddubsw.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

// rows [16] (lanes) × 8 dwords each -> out[j] lane r = dword j of row r (two 8×8 transposes, one per 256-bit half)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2"))) inline void lh_transpose_16x8(const __m256i rows[16], __m512i out[8]) {
  __m512i z[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(rows[i]), rows[i + 8], 1);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i + 0] = _mm512_unpacklo_epi64(t[i + 0], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i + 0], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[0..3]: dwords 0,1,2,3 (128-bit lanes 0 and 2) and 4,5,6,7 (lanes 1 and 3) of rows 0-3 / 8-11; u[4..7] of rows 4-7 / 12-15
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int j = 0; j < 4; ++j) {
    out[j] = _mm512_permutex2var_epi64(u[j], lo, u[j + 4]);
    out[j + 4] = _mm512_permutex2var_epi64(u[j], hi, u[j + 4]);
  }
}

// rows [8] (lanes) × 8 dwords each -> out[j] lane r = dword j of row r (AVX2: unpacks within 128-bit
// lanes, then the lanes swapped across)
__attribute__((target("avx2"))) inline void lh_transpose_8x8(const __m256i rows[8], __m256i out[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(rows[i], rows[i + 1]);      // r_i[0] r_i+1[0] r_i[1] r_i+1[1] | dwords 4, 5
    t[i + 1] = _mm256_unpackhi_epi32(rows[i], rows[i + 1]);  // dwords 2, 3 | 6, 7
  }
  for (int i = 0; i < 8; i += 4) {
    u[i + 0] = _mm256_unpacklo_epi64(t[i + 0], t[i + 2]);  // dword 0 of rows i..i+3 | dword 4
    u[i + 1] = _mm256_unpackhi_epi64(t[i + 0], t[i + 2]);  // 1 | 5
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);  // 2 | 6
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);  // 3 | 7
  }
  for (int j = 0; j < 4; ++j) {
    out[j] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x20);
    out[j + 4] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x31);
  }
}
#endif
