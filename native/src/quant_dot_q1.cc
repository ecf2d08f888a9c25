// Dot kernels for Q4_1 and Q5_1 (quant_dot.h), the legacy types with a per-block minimum: llama-quantize's
// fallback for Q5_K rows whose width is not a multiple of 256 (Q5_K_M files), and old Q4_1 / Q5_1 files.
// The scalar reference, AVX-512 (F/BW/VL/DQ + VNNI) and AVX2 (+FMA, F16C).
//
// Weight blocks (ggml-common.h block_q4_1 / block_q5_1, ggml types 3 / 7): 32 elements,
//   Q4_1 (20 bytes): fp16 d | fp16 m | uint8 qs[16]
//   Q5_1 (24 bytes): fp16 d | fp16 m | uint8 qh[4] (bit j: the fifth bit of element j) | uint8 qs[16]
//   x[j] = u_j · d + m, u_j = qs[j] & 15 (| bit j << 4), u_j+16 = qs[j] >> 4 (| bit j+16 << 4)
// as ggml-quants.c's dequantize_row_q4_1 / _q5_1.
//
// Activations: Q8_0's (quant_dot_q.cc; llama.cpp takes q8_1 for these, the same int8 codes with the
// block's d·Σq): int8 q [k], float d [k/32], int32 −8·Σq [k/32], int32 −128·Σq [k/32], by the same
// quantizer, so a block's Σ u·q and Σ q are exact integers everywhere. Then, in fp32:
//   Σ_block x·x_act = d_w·d_x·Σ u·q + m_w·d_x·Σ q
// Only the order of the float sums differs between implementations:
//   scalar   s += d_w·d_x·float(Σ u·q); s += m_w·d_x·float(Σ q) per block
//   AVX-512  unsigned codes u straight into vpdpbusd; Σ q per 4-byte lane by vpdpbusd of ones; two
//            FMAs per block pair (tiles), or per block with Σ q from the activation row (prefill)
//   AVX2     vpmaddubsw(u, q) (|pair| ≤ 2·31·128, never saturates), vpmaddwd by ones
// Per call size as quant_dot_q5.cc: tiles for 1-7 tokens (decode one row at a time), 16-row (AVX-512)
// / 8-row (AVX2) transposed prefills from 8 tokens, the two prefills the same bits.
// No allocation, no threads; weight loads end at a block's last byte.
#include <cmath>
#include <cstring>

#include "fp16.h"
#include "quant_dot.h"
#include "quant_dot_transpose.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LH_X86 1
#include <immintrin.h>
#endif

namespace {

constexpr uint64_t kQK = 32;  // elements per block

// The two layouts: kFive (Q5_1) has qh after m.
template <bool kFive>
struct Fmt {
  static constexpr size_t kBlock = kFive ? 24 : 20;
  static constexpr size_t kQs = kFive ? 8 : 4;
  static size_t row_bytes(uint64_t k) { return static_cast<size_t>(k / kQK) * kBlock; }
};

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return lh_fp16_to_fp32(h);
}
inline uint32_t qh_at(const uint8_t* blk) {
  uint32_t qh;
  std::memcpy(&qh, blk + 4, 4);
  return qh;
}

inline size_t act_row_bytes_of(uint64_t k) { return static_cast<size_t>(k) + static_cast<size_t>(k / kQK) * 12; }
inline float act_d(const uint8_t* xr, uint64_t k, uint64_t b) {
  float d;
  std::memcpy(&d, xr + k + 4 * b, 4);
  return d;
}
// Σq of block b, from the row's −8·Σq (exact)
inline int32_t act_sum(const uint8_t* xr, uint64_t k, uint64_t b) {
  int32_t n8;
  std::memcpy(&n8, xr + k + (k / kQK) * 4 + 4 * b, 4);
  return n8 / -8;
}

// ---------------------------------------------------------------------------------------------
// Scalar (the reference)
// ---------------------------------------------------------------------------------------------
template <bool kFive>
void q1_dot_scalar(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  using F = Fmt<kFive>;
  for (uint32_t t = 0; t < n_tok; ++t) {
    const uint8_t* xr = xq + t * act_row_bytes_of(k);
    const int8_t* q = reinterpret_cast<const int8_t*>(xr);
    for (uint32_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      float s = 0.0f;
      for (uint64_t b = 0; b < k / kQK; ++b) {
        const uint8_t* blk = row + b * F::kBlock;
        const uint32_t qh = kFive ? qh_at(blk) : 0;
        const int8_t* qb = q + b * kQK;
        int32_t isum = 0;
        for (uint32_t j = 0; j < 16; ++j) {
          const int lo = (blk[F::kQs + j] & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
          const int hi = (blk[F::kQs + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
          isum += lo * qb[j] + hi * qb[j + 16];
        }
        const float dx = act_d(xr, k, b);
        s += half_at(blk) * dx * static_cast<float>(isum);
        s += half_at(blk + 2) * dx * static_cast<float>(act_sum(xr, k, b));
      }
      y[t * y_stride + r] = s;
    }
  }
}

#ifdef LH_X86
using tile_fn = void (*)(const uint8_t*, size_t, uint64_t, const uint8_t*, size_t, float*, size_t);

// Rows in groups of up to R, tokens in groups of up to T, a [rows][tokens] table of tile
// instantiations for the remainders; decode (≤ 2 tokens) one row at a time.
template <int R, int T, template <int, int> class Tile>
struct Table {
  tile_fn fn[R][T];
  constexpr Table() : fn{} {
    fill<0>();
  }
  template <int I>
  constexpr void fill() {
    if constexpr (I < R * T) {
      fn[I / T][I % T] = Tile<I / T + 1, I % T + 1>::fn;
      fill<I + 1>();
    }
  }
};

template <int R, int T, template <int, int> class Tile>
void run_tiles(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  static constexpr Table<R, T, Tile> table{};
  const size_t x_row_bytes = act_row_bytes_of(k);
  const uint32_t rows_per_tile = n_tok <= 2 ? 1u : static_cast<uint32_t>(R);
  const uint32_t toks_per_tile = n_tok <= 2 ? n_tok : static_cast<uint32_t>(T);
  for (uint32_t r0 = 0; r0 < n_rows; r0 += rows_per_tile) {
    const uint32_t rr = n_rows - r0 < rows_per_tile ? n_rows - r0 : rows_per_tile;
    for (uint32_t t0 = 0; t0 < n_tok; t0 += toks_per_tile) {
      const uint32_t tt = n_tok - t0 < toks_per_tile ? n_tok - t0 : toks_per_tile;
      table.fn[rr - 1][tt - 1](w + r0 * w_row_bytes, w_row_bytes, k, xq + t0 * x_row_bytes, x_row_bytes, y + t0 * y_stride + r0, y_stride);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AVX-512 F/BW/VL/DQ + VNNI
// ---------------------------------------------------------------------------------------------
#define LH_QD512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The unsigned codes u of blocks b, b+1 (has2: b+1 exists, else zero codes against zero activations)
// of one row in element order, as quant_dot_q5.cc's load_codes_pair.
template <bool kFive>
LH_QD512 inline __m512i load_codes_pair(const uint8_t* row, uint64_t b, bool has2) {
  using F = Fmt<kFive>;
  const uint8_t* blk = row + b * F::kBlock;
  const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + F::kQs)));
  const __m256i hi = has2 ? _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + F::kBlock + F::kQs))) : _mm256_setzero_si256();
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  const __m512i sh = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0);
  const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(z, sh), _mm512_set1_epi8(0x0F));
  if (!kFive) return nib;
  const uint64_t bits = static_cast<uint64_t>(qh_at(blk)) | (has2 ? static_cast<uint64_t>(qh_at(blk + F::kBlock)) << 32 : 0);
  return _mm512_or_si512(nib, _mm512_maskz_mov_epi8(static_cast<__mmask64>(bits), _mm512_set1_epi8(0x10)));
}

// [f(b) ×8, f(b+1) ×8] of the fp16 at byte `at` of blocks b, b+1 (d: 0, m: 2)
template <bool kFive>
LH_QD512 inline __m512 load_half_pair(const uint8_t* row, uint64_t b, bool has2, size_t at) {
  using F = Fmt<kFive>;
  const __m128 d01 = _mm_setr_ps(half_at(row + b * F::kBlock + at), has2 ? half_at(row + (b + 1) * F::kBlock + at) : 0.0f, 0.0f, 0.0f);
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(d01));
}

template <bool kFive, int R, int T>
LH_QD512 void q1_tile_avx512(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  using F = Fmt<kFive>;
  const uint64_t nb = k / kQK;
  const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  const __m512i pair_lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (uint64_t b = 0; b < nb; b += 2) {
    const bool has2 = b + 1 < nb;
    __m512i xv[T];
    __m512 dx[T], sq[T];
    for (int t = 0; t < T; ++t) {
      const uint8_t* xr = xq + t * x_row_bytes;
      xv[t] = has2 ? _mm512_loadu_si512(xr + b * kQK) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xr + b * kQK);
      const __m128 d01 = _mm_setr_ps(act_d(xr, k, b), has2 ? act_d(xr, k, b + 1) : 0.0f, 0.0f, 0.0f);
      dx[t] = _mm512_permutexvar_ps(pair_lanes, _mm512_zextps128_ps512(d01));
      sq[t] = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ones, xv[t]));  // Σq per lane
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      if (R == 1) lh_qdot_prefetch_ahead(row + b * F::kBlock, 1);
      const __m512i wv = load_codes_pair<kFive>(row, b, has2);
      const __m512 dw = load_half_pair<kFive>(row, b, has2, 0), mw = load_half_pair<kFive>(row, b, has2, 2);
      for (int t = 0; t < T; ++t) {
        const __m512i dot = _mm512_dpbusd_epi32(zero, wv, xv[t]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx[t]), acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(sq[t], _mm512_mul_ps(mw, dx[t]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int R, int T>
struct Tile512_4 { static constexpr tile_fn fn = &q1_tile_avx512<false, R, T>; };
template <int R, int T>
struct Tile512_5 { static constexpr tile_fn fn = &q1_tile_avx512<true, R, T>; };

constexpr uint32_t kPrefillMinTokens = 8;
constexpr uint32_t kPrefillChunk = 32;   // blocks: wt 16 KiB
constexpr uint32_t kPrefillTokens = 64;  // tokens per pass: acc 4 KiB

// Prefill: quant_dot_q5.cc's q5_0_prefill16 with the sum started from 0 and a second FMA per (token,
// block) for the minimum: float(Σq) · (m_w · d_x).
template <bool kFive>
LH_QD512 void q1_prefill16(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes, uint32_t n_tok,
                           float* y, size_t y_stride) {
  using F = Fmt<kFive>;
  const uint64_t nb = k / kQK;
  alignas(64) int32_t wt[kPrefillChunk][8][16];
  alignas(64) float dw[kPrefillChunk][16];
  alignas(64) float mw[kPrefillChunk][16];
  alignas(64) uint8_t codes[16][64];
  alignas(64) float acc[kPrefillTokens][16];
  const __m512i row_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(64));
  const __mmask16 live = static_cast<__mmask16>((1u << n_rows) - 1u);
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kPrefillTokens) {
    const uint32_t tn = n_tok - t0 < kPrefillTokens ? n_tok - t0 : kPrefillTokens;
    for (uint32_t t = 0; t < tn; ++t) _mm512_store_ps(acc[t], _mm512_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kPrefillChunk) {
      const uint32_t nc = nb - c0 < kPrefillChunk ? static_cast<uint32_t>(nb - c0) : kPrefillChunk;
      for (uint32_t b = 0; b < nc; b += 2) {
        const bool has2 = b + 1 < nc;
        for (uint32_t r = 0; r < 16; ++r) {
          for (uint32_t h = 0; h < (has2 ? 2u : 1u); ++h) {
            const uint8_t* blk = w + r * w_row_bytes + (c0 + b + h) * F::kBlock;
            dw[b + h][r] = r < n_rows ? half_at(blk) : 0.0f;
            mw[b + h][r] = r < n_rows ? half_at(blk + 2) : 0.0f;
          }
          _mm512_store_si512(codes[r], r < n_rows ? load_codes_pair<kFive>(w + r * w_row_bytes, c0 + b, has2) : _mm512_setzero_si512());
        }
        for (uint32_t h = 0; h < (has2 ? 2u : 1u); ++h)
          for (int j = 0; j < 8; ++j) _mm512_store_si512(wt[b + h][j], _mm512_i32gather_epi32(row_at, codes[0] + 32 * h + 4 * j, 1));
      }
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * x_row_bytes;
        __m512 a = _mm512_load_ps(acc[t]);
        for (uint32_t b = 0; b < nc; ++b) {
          const uint64_t blk = c0 + b;
          __m512i sum = _mm512_setzero_si512();
          for (int j = 0; j < 8; ++j) {
            int32_t x4;
            std::memcpy(&x4, xr + blk * kQK + 4 * j, 4);
            sum = _mm512_dpbusd_epi32(sum, _mm512_load_si512(wt[b][j]), _mm512_set1_epi32(x4));
          }
          const __m512 dx = _mm512_set1_ps(act_d(xr, k, blk));
          a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(_mm512_load_ps(dw[b]), dx), a);
          a = _mm512_fmadd_ps(_mm512_set1_ps(static_cast<float>(act_sum(xr, k, blk))), _mm512_mul_ps(_mm512_load_ps(mw[b]), dx), a);
        }
        _mm512_store_ps(acc[t], a);
      }
    }
    for (uint32_t t = 0; t < tn; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * y_stride, live, _mm512_load_ps(acc[t]));
  }
}

template <bool kFive>
void q1_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  if (n_tok >= kPrefillMinTokens) {
    for (uint32_t r0 = 0; r0 < n_rows; r0 += 16)
      q1_prefill16<kFive>(w + r0 * w_row_bytes, w_row_bytes, n_rows - r0 < 16 ? n_rows - r0 : 16, k, xq, act_row_bytes_of(k), n_tok, y + r0, y_stride);
    return;
  }
  if (kFive) run_tiles<4, 4, Tile512_5>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
  else run_tiles<4, 4, Tile512_4>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// AVX2 + FMA + F16C
// ---------------------------------------------------------------------------------------------
#define LH_QD2 __attribute__((target("avx2,fma,f16c")))

inline LH_QD2 float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// the 32 unsigned codes u of block b in element order (low lane: low nibbles, high lane: high)
template <bool kFive>
LH_QD2 inline __m256i load_codes_avx2(const uint8_t* row, uint64_t b) {
  using F = Fmt<kFive>;
  const uint8_t* blk = row + b * F::kBlock;
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + F::kQs));
  const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
  if (!kFive) return nib;
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh_at(blk))),
                                             _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

// Σ u·q (u unsigned ≤ 31) of one block as 8 int32 lanes, as float (exact)
LH_QD2 inline __m256 block_dot_avx2(__m256i uv, __m256i xv) {
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(uv, xv), _mm256_set1_epi16(1)));
}

template <bool kFive, int R, int T, int A>
LH_QD2 void q1_tile_avx2(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  using F = Fmt<kFive>;
  const uint64_t nb = k / kQK;
  __m256 acc[R][T][A];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      for (int a = 0; a < A; ++a) acc[r][t][a] = _mm256_setzero_ps();
  const __m256i ones8 = _mm256_set1_epi8(1);
  for (uint64_t b = 0; b < nb; ++b) {
    __m256i xv[T];
    __m256 sq[T];
    float dx[T];
    for (int t = 0; t < T; ++t) {
      xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * x_row_bytes + b * kQK));
      dx[t] = act_d(xq + t * x_row_bytes, k, b);
      sq[t] = block_dot_avx2(ones8, xv[t]);  // Σq per lane
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      if (A > 1) lh_qdot_prefetch_ahead(row + b * F::kBlock, 1);
      const __m256i uv = load_codes_avx2<kFive>(row, b);
      const float dw = half_at(row + b * F::kBlock), mw = half_at(row + b * F::kBlock + 2);
      for (int t = 0; t < T; ++t) {
        acc[r][t][b % A] = _mm256_fmadd_ps(block_dot_avx2(uv, xv[t]), _mm256_set1_ps(dw * dx[t]), acc[r][t][b % A]);
        acc[r][t][b % A] = _mm256_fmadd_ps(sq[t], _mm256_set1_ps(mw * dx[t]), acc[r][t][b % A]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      __m256 s = acc[r][t][0];
      for (int a = 1; a < A; ++a) s = _mm256_add_ps(s, acc[r][t][a]);
      y[t * y_stride + r] = hsum8(s);
    }
}

template <int R, int T>
struct Tile2_4 { static constexpr tile_fn fn = &q1_tile_avx2<false, R, T, 1>; };
template <int R, int T>
struct Tile2_5 { static constexpr tile_fn fn = &q1_tile_avx2<true, R, T, 1>; };

// Prefill, AVX2: q1_prefill16's integers and float operations on 8 rows a ymm (its bits); codes u ≤ 31
// × q: int16 pair sums ≤ 2·31·128, four summed ≤ 31744 (no wrap), then vpmaddwd by ones.
template <bool kFive>
LH_QD2 void q1_prefill8_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes, uint32_t n_tok,
                             float* y, size_t y_stride) {
  using F = Fmt<kFive>;
  const uint64_t nb = k / kQK;
  alignas(32) int32_t wt[kPrefillChunk][8][8];
  alignas(32) float dw[kPrefillChunk][8];
  alignas(32) float mw[kPrefillChunk][8];
  alignas(32) float acc[kPrefillTokens][8];
  const __m256i ones = _mm256_set1_epi16(1);
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kPrefillTokens) {
    const uint32_t tn = n_tok - t0 < kPrefillTokens ? n_tok - t0 : kPrefillTokens;
    for (uint32_t t = 0; t < tn; ++t) _mm256_store_ps(acc[t], _mm256_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kPrefillChunk) {
      const uint32_t nc = nb - c0 < kPrefillChunk ? static_cast<uint32_t>(nb - c0) : kPrefillChunk;
      for (uint32_t b = 0; b < nc; ++b) {
        __m256i rows[8], cols[8];
        for (uint32_t r = 0; r < 8; ++r) {
          if (r >= n_rows) {
            rows[r] = _mm256_setzero_si256();
            dw[b][r] = mw[b][r] = 0.0f;
            continue;
          }
          const uint8_t* row = w + r * w_row_bytes;
          rows[r] = load_codes_avx2<kFive>(row, c0 + b);
          dw[b][r] = half_at(row + (c0 + b) * F::kBlock);
          mw[b][r] = half_at(row + (c0 + b) * F::kBlock + 2);
        }
        lh_transpose_8x8(rows, cols);
        for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(wt[b][j]), cols[j]);
      }
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * x_row_bytes;
        __m256 a = _mm256_load_ps(acc[t]);
        for (uint32_t b = 0; b < nc; ++b) {
          const uint64_t blk = c0 + b;
          __m256i sum = _mm256_setzero_si256();
          for (int half = 0; half < 2; ++half) {
            __m256i s16 = _mm256_setzero_si256();
            for (int j = 4 * half; j < 4 * half + 4; ++j) {
              int32_t x4;
              std::memcpy(&x4, xr + blk * kQK + 4 * j, 4);
              s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(wt[b][j])), _mm256_set1_epi32(x4)));
            }
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(s16, ones));
          }
          const __m256 dx = _mm256_set1_ps(act_d(xr, k, blk));
          a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(_mm256_load_ps(dw[b]), dx), a);
          a = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(act_sum(xr, k, blk))), _mm256_mul_ps(_mm256_load_ps(mw[b]), dx), a);
        }
        _mm256_store_ps(acc[t], a);
      }
    }
    for (uint32_t t = 0; t < tn; ++t)
      for (uint32_t r = 0; r < n_rows; ++r) y[(t0 + t) * y_stride + r] = acc[t][r];
  }
}

template <bool kFive>
void q1_dot_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  if (n_tok <= 2) {  // decode: one row at a time, one stream through the weights
    const size_t x_row_bytes = act_row_bytes_of(k);
    for (uint32_t r = 0; r < n_rows; ++r) {
      if (n_tok == 1) q1_tile_avx2<kFive, 1, 1, 4>(w + r * w_row_bytes, w_row_bytes, k, xq, x_row_bytes, y + r, y_stride);
      else q1_tile_avx2<kFive, 1, 2, 4>(w + r * w_row_bytes, w_row_bytes, k, xq, x_row_bytes, y + r, y_stride);
    }
    return;
  }
  if (n_tok >= kPrefillMinTokens) {
    for (uint32_t r0 = 0; r0 < n_rows; r0 += 8)
      q1_prefill8_avx2<kFive>(w + r0 * w_row_bytes, w_row_bytes, n_rows - r0 < 8 ? n_rows - r0 : 8, k, xq, act_row_bytes_of(k), n_tok, y + r0, y_stride);
    return;
  }
  if (kFive) run_tiles<4, 2, Tile2_5>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
  else run_tiles<4, 2, Tile2_4>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // LH_X86

}  // namespace

bool lh_qdot_q1_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out) {
  if (type != LH_QDOT_Q4_1 && type != LH_QDOT_Q5_1) return false;
  const bool five = type == LH_QDOT_Q5_1;
  // the activations are Q8_0's, quantized by Q8_0's quantizer of the same impl (the same bytes in every impl)
  lh_qdot_kernels q8{};
  if (!lh_qdot_q_kernels(LH_QDOT_Q8_0, impl == LH_QDOT_AMX ? LH_QDOT_AVX512 : impl, &q8)) return false;
  lh_qdot_kernels k{};
  k.type = type;
  k.impl = impl;
  k.block_elems = kQK;
  k.row_bytes = five ? Fmt<true>::row_bytes : Fmt<false>::row_bytes;
  k.act_row_bytes = q8.act_row_bytes;
  k.quantize_act = q8.quantize_act;
  switch (impl) {
    case LH_QDOT_SCALAR: k.dot_tile = five ? q1_dot_scalar<true> : q1_dot_scalar<false>; break;
#ifdef LH_X86
    case LH_QDOT_AVX512: k.dot_tile = five ? q1_dot_avx512<true> : q1_dot_avx512<false>; break;
    case LH_QDOT_AVX2: k.dot_tile = five ? q1_dot_avx2<true> : q1_dot_avx2<false>; break;
#endif
    default: return false;  // AMX: none; AUTO then takes AVX-512's
  }
  *out = k;
  return true;
}
