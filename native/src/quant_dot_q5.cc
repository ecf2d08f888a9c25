// Dot kernels for Q5_0 (quant_dot.h), the legacy 5-bit type llama-quantize falls back to for rows whose
// width is not a multiple of 256 (gpt-oss-20b's 2880-wide rows, Gemma 4's Q4_K_M): the scalar
// reference, AVX-512 (F/BW/VL/DQ + VNNI) and AVX2 (+FMA, F16C).
//
// Weight block (ggml-common.h block_q5_0, ggml type 6): 32 elements in 22 bytes,
//   fp16 d | uint8 qh[4] (bit j of the little-endian uint32: the fifth bit of element j) |
//   uint8 qs[16] (element j in the low nibble of qs[j], j+16 in the high)
//   x[j] = ((qs[j] & 15 | bit j << 4) − 16) · d,  x[j+16] = ((qs[j] >> 4 | bit j+16 << 4) − 16) · d
// as ggml-quants.c's dequantize_row_q5_0.
//
// Activations: Q8_0's (quant_dot_q.cc): int8 q [k], float d [k/32], int32 −8·Σq [k/32], int32
// −128·Σq [k/32], by the same quantizer (the kernels take Q8_0's quantize_act of the same impl), so
// a block's integer dot Σ (u − 16)·q is exact everywhere, then × (d_w · d_x) in fp32. Only the order
// of the float sums differs between implementations:
//   scalar   Σ (u − 16)·q per block, s += d_w · d_x · float(Σ)
//   AVX-512  the unsigned codes u (0..31: nibble | fifth bit from a byte mask of qh) straight into
//            vpdpbusd, started from −16·Σq (= 2 × the activation row's −8·Σq, exact) per 4-byte lane
//            (as Q4_0's −8·Σq in quant_dot_q.cc). Two blocks (one zmm) a step.
//   AVX2     the codes u − 16 (signed), then ggml's AVX2 int8 dot: vpmaddubsw(|w|, sign(q, w)),
//            vpmaddwd by ones (|pair| ≤ 2·16·128, never saturates).
// Per call size:
//   1-7 tokens           tiles of R rows × T tokens of accumulators in registers (4 × 4, AVX2 4 × 2);
//                        decode (1-2 tokens) one row at a time, one stream through the weights, the
//                        lines asked for ahead
//   8 tokens and more    prefill: 16 (AVX-512) or 8 (AVX2) rows a vector, their codes laid out
//                        transposed once per chunk of blocks and shared by up to 64 tokens; the two
//                        give the same bits
// No allocation, no threads; weight loads end at a block's last byte (no over-read of the mapping).
// The layout follows quant_dot_mxfp4.cc, whose blocks are also 32 elements against Q8_0's activations.
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

constexpr uint64_t kQK = 32;   // elements per block
constexpr size_t kBlock = 22;  // fp16 d + qh[4] + 16 bytes of nibbles
constexpr size_t kQh = 2;      // offset of qh in a block
constexpr size_t kQs = 6;      // offset of qs in a block

size_t q5_0_row_bytes(uint64_t k) { return static_cast<size_t>(k / kQK) * kBlock; }

inline float block_d(const uint8_t* blk) {
  uint16_t h;
  std::memcpy(&h, blk, 2);
  return lh_fp16_to_fp32(h);
}
inline uint32_t block_qh(const uint8_t* blk) {
  uint32_t qh;
  std::memcpy(&qh, blk + kQh, 4);
  return qh;
}

// The activation row is Q8_0's (quant_dot_q.cc): int8 q [k], then float d, int32 −8·Σq, int32
// −128·Σq per block: k + 12·k/32 bytes.
inline size_t act_row_bytes_of(uint64_t k) { return static_cast<size_t>(k) + static_cast<size_t>(k / kQK) * 12; }

// block b's activation scale d
inline float act_d(const uint8_t* xr, uint64_t k, uint64_t b) {
  float d;
  std::memcpy(&d, xr + k + 4 * b, 4);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Scalar (the reference)
// ---------------------------------------------------------------------------------------------
void q5_0_dot_scalar(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  for (uint32_t t = 0; t < n_tok; ++t) {
    const uint8_t* xr = xq + t * act_row_bytes_of(k);
    const int8_t* q = reinterpret_cast<const int8_t*>(xr);
    for (uint32_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      float s = 0.0f;
      for (uint64_t b = 0; b < k / kQK; ++b) {
        const uint8_t* blk = row + b * kBlock;
        const uint32_t qh = block_qh(blk);
        const int8_t* qb = q + b * kQK;
        int32_t isum = 0;
        for (uint32_t j = 0; j < 16; ++j) {
          const int lo = static_cast<int>((blk[kQs + j] & 15) | (((qh >> j) & 1u) << 4)) - 16;
          const int hi = static_cast<int>((blk[kQs + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
          isum += lo * qb[j] + hi * qb[j + 16];
        }
        s += block_d(blk) * act_d(xr, k, b) * static_cast<float>(isum);
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

// The unsigned codes u (0..31) of blocks b, b+1 (has2: b+1 exists, else its half is code 0 against
// zero activations) of one row, in element order: the nibbles of [qs_b, qs_b, qs_b+1, qs_b+1] with the
// odd 16-byte lanes shifted by 4, masked, and 0x10 where the 64-bit mask qh_b | qh_b+1 << 32 has
// the element's bit.
LH_QD512 inline __m512i load_codes_pair(const uint8_t* row, uint64_t b, bool has2) {
  const uint8_t* blk = row + b * kBlock;
  const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQs)));
  const __m256i hi = has2 ? _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kBlock + kQs))) : _mm256_setzero_si256();
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  const __m512i sh = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0);
  const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(z, sh), _mm512_set1_epi8(0x0F));
  const uint64_t bits = static_cast<uint64_t>(block_qh(blk)) | (has2 ? static_cast<uint64_t>(block_qh(blk + kBlock)) << 32 : 0);
  return _mm512_or_si512(nib, _mm512_maskz_mov_epi8(static_cast<__mmask64>(bits), _mm512_set1_epi8(0x10)));
}

// [d_b ×8, d_b+1 ×8]
LH_QD512 inline __m512 load_scale_pair(const uint8_t* row, uint64_t b, bool has2) {
  const __m128 d01 = _mm_setr_ps(block_d(row + b * kBlock), has2 ? block_d(row + (b + 1) * kBlock) : 0.0f, 0.0f, 0.0f);
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(d01));
}

template <int R, int T>
LH_QD512 void q5_0_tile_avx512(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y,
                               size_t y_stride) {
  const uint64_t nb = k / kQK;
  const __m512i off = _mm512_set1_epi8(16), zero = _mm512_setzero_si512();
  const __m512i pair_lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (uint64_t b = 0; b < nb; b += 2) {
    const bool has2 = b + 1 < nb;
    __m512i xv[T], base[T];
    __m512 dx[T];
    for (int t = 0; t < T; ++t) {
      const uint8_t* xr = xq + t * x_row_bytes;
      xv[t] = has2 ? _mm512_loadu_si512(xr + b * kQK) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xr + b * kQK);
      const __m128 d01 = _mm_setr_ps(act_d(xr, k, b), has2 ? act_d(xr, k, b + 1) : 0.0f, 0.0f, 0.0f);
      dx[t] = _mm512_permutexvar_ps(pair_lanes, _mm512_zextps128_ps512(d01));
      base[t] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, xv[t]));  // −16·Σq per lane
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      if (R == 1) lh_qdot_prefetch_ahead(row + b * kBlock, 1);  // decode: a line per pair (44 bytes) keeps pace
      const __m512i wv = load_codes_pair(row, b, has2);
      const __m512 dw = load_scale_pair(row, b, has2);
      for (int t = 0; t < T; ++t) {
        const __m512i dot = _mm512_dpbusd_epi32(base[t], wv, xv[t]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx[t]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int R, int T>
struct Tile512 { static constexpr tile_fn fn = &q5_0_tile_avx512<R, T>; };

// Prefill (kPrefillMinTokens tokens or more): 16 rows at once, one row a 32-bit lane. Per chunk of
// kPrefillChunk blocks the rows' codes u are laid out once, transposed: wt[b][j] holds dword j
// (codes 4j..4j+3) of block b of the 16 rows, dw[b] their scales d. Per (token, block): the integer
// dot of all 16 rows is 8 vpdpbusd against the token's dword j broadcast, started from the block's
// −16·Σq (= 2 × the activation row's −8·Σq), then one FMA by dw·d_x: each (row, token) sums its
// blocks in order whatever the rows beside it (any split of the rows: the same bits).
constexpr uint32_t kPrefillMinTokens = 8;
constexpr uint32_t kPrefillChunk = 32;   // blocks: wt 16 KiB
constexpr uint32_t kPrefillTokens = 64;  // tokens per pass: acc 4 KiB

LH_QD512 void q5_0_prefill16(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes,
                             uint32_t n_tok, float* y, size_t y_stride) {
  const uint64_t nb = k / kQK;
  alignas(64) int32_t wt[kPrefillChunk][8][16];
  alignas(64) float dw[kPrefillChunk][16];
  alignas(64) uint8_t codes[16][64];  // one block pair of each row, before the transpose
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
          if (r >= n_rows) {
            _mm512_store_si512(codes[r], _mm512_setzero_si512());
            dw[b][r] = 0.0f;
            if (has2) dw[b + 1][r] = 0.0f;
            continue;
          }
          const uint8_t* row = w + r * w_row_bytes;
          _mm512_store_si512(codes[r], load_codes_pair(row, c0 + b, has2));
          dw[b][r] = block_d(row + (c0 + b) * kBlock);
          if (has2) dw[b + 1][r] = block_d(row + (c0 + b + 1) * kBlock);
        }
        for (uint32_t h = 0; h < (has2 ? 2u : 1u); ++h)
          for (int j = 0; j < 8; ++j)
            _mm512_store_si512(wt[b + h][j], _mm512_i32gather_epi32(row_at, codes[0] + 32 * h + 4 * j, 1));
      }
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * x_row_bytes;
        const int32_t* neg8 = reinterpret_cast<const int32_t*>(xr + k + (k / kQK) * 4);
        __m512 a = _mm512_load_ps(acc[t]);
        for (uint32_t b = 0; b < nc; ++b) {
          const uint64_t blk = c0 + b;
          int32_t n8;
          std::memcpy(&n8, neg8 + blk, 4);
          __m512i sum = _mm512_set1_epi32(2 * n8);  // −16·Σq
          for (int j = 0; j < 8; ++j) {
            int32_t x4;
            std::memcpy(&x4, xr + blk * kQK + 4 * j, 4);
            sum = _mm512_dpbusd_epi32(sum, _mm512_load_si512(wt[b][j]), _mm512_set1_epi32(x4));
          }
          a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(_mm512_load_ps(dw[b]), _mm512_set1_ps(act_d(xr, k, blk))), a);
        }
        _mm512_store_ps(acc[t], a);
      }
    }
    for (uint32_t t = 0; t < tn; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * y_stride, live, _mm512_load_ps(acc[t]));
  }
}

void q5_0_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  if (n_tok >= kPrefillMinTokens) {
    for (uint32_t r0 = 0; r0 < n_rows; r0 += 16)
      q5_0_prefill16(w + r0 * w_row_bytes, w_row_bytes, n_rows - r0 < 16 ? n_rows - r0 : 16, k, xq, act_row_bytes_of(k), n_tok, y + r0, y_stride);
    return;
  }
  run_tiles<4, 4, Tile512>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
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

// the 32 unsigned codes u (0..31) of block b in element order (low lane: low nibbles, high lane:
// high): byte i of the fifth bits is byte i/8 of qh spread over 8 bytes, tested against bit i % 8
LH_QD2 inline __m256i load_codes_avx2(const uint8_t* row, uint64_t b) {
  const uint8_t* blk = row + b * kBlock;
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQs));
  const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(block_qh(blk))),
                                             _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

// Σ w·q of one block (w = u − 16, signed) as 8 int32 lanes, converted to float (exact: |Σ| ≤ 32·16·128)
LH_QD2 inline __m256 block_dot_avx2(__m256i wv, __m256i xv) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// A accumulators per (row, token), block b into b % A: decode (A = 4) lets four FMA chains overlap;
// the prefill tiles (A = 1) have R·T chains already. Every row of one call sums in one order (any
// split of the rows gives the same bits).
template <int R, int T, int A>
LH_QD2 void q5_0_tile_avx2(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  const uint64_t nb = k / kQK;
  __m256 acc[R][T][A];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      for (int a = 0; a < A; ++a) acc[r][t][a] = _mm256_setzero_ps();
  for (uint64_t b = 0; b < nb; ++b) {
    __m256i xv[T];
    float dx[T];
    for (int t = 0; t < T; ++t) {
      xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * x_row_bytes + b * kQK));
      dx[t] = act_d(xq + t * x_row_bytes, k, b);
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      if (A > 1) lh_qdot_prefetch_ahead(row + b * kBlock, 1);
      const __m256i wv = _mm256_sub_epi8(load_codes_avx2(row, b), _mm256_set1_epi8(16));
      const float dw = _cvtsh_ss(static_cast<unsigned short>(row[b * kBlock] | row[b * kBlock + 1] << 8));
      for (int t = 0; t < T; ++t) acc[r][t][b % A] = _mm256_fmadd_ps(block_dot_avx2(wv, xv[t]), _mm256_set1_ps(dw * dx[t]), acc[r][t][b % A]);
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
struct Tile2 { static constexpr tile_fn fn = &q5_0_tile_avx2<R, T, 1>; };

// Prefill (kPrefillMinTokens tokens or more), AVX2: q5_0_prefill16's scheme on 8 rows a ymm, with
// vpmaddubsw for vpdpbusd: codes u (unsigned, ≤ 31) × the token's dword j broadcast (signed, |q| ≤
// 128) give int16 pair sums ≤ 2·31·128; four of them summed in int16 (≤ 31744, no wrap), then
// vpmaddwd by ones to int32, onto −16·Σq; one FMA per token and block by the 8 rows' dw·d_x.
LH_QD2 void q5_0_prefill8_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes,
                               uint32_t n_tok, float* y, size_t y_stride) {
  const uint64_t nb = k / kQK;
  alignas(32) int32_t wt[kPrefillChunk][8][8];  // [block][dword j][row]
  alignas(32) float dw[kPrefillChunk][8];
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
            dw[b][r] = 0.0f;
            continue;
          }
          const uint8_t* row = w + r * w_row_bytes;
          rows[r] = load_codes_avx2(row, c0 + b);
          dw[b][r] = block_d(row + (c0 + b) * kBlock);
        }
        lh_transpose_8x8(rows, cols);
        for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(wt[b][j]), cols[j]);
      }
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * x_row_bytes;
        const int32_t* neg8 = reinterpret_cast<const int32_t*>(xr + k + (k / kQK) * 4);
        __m256 a = _mm256_load_ps(acc[t]);
        for (uint32_t b = 0; b < nc; ++b) {
          const uint64_t blk = c0 + b;
          int32_t n8;
          std::memcpy(&n8, neg8 + blk, 4);
          __m256i sum = _mm256_set1_epi32(2 * n8);  // −16·Σq
          for (int half = 0; half < 2; ++half) {
            __m256i s16 = _mm256_setzero_si256();
            for (int j = 4 * half; j < 4 * half + 4; ++j) {
              int32_t x4;
              std::memcpy(&x4, xr + blk * kQK + 4 * j, 4);
              s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(wt[b][j])), _mm256_set1_epi32(x4)));
            }
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(s16, ones));
          }
          a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(_mm256_load_ps(dw[b]), _mm256_set1_ps(act_d(xr, k, blk))), a);
        }
        _mm256_store_ps(acc[t], a);
      }
    }
    for (uint32_t t = 0; t < tn; ++t)
      for (uint32_t r = 0; r < n_rows; ++r) y[(t0 + t) * y_stride + r] = acc[t][r];
  }
}

void q5_0_dot_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                   size_t y_stride) {
  if (n_tok <= 2) {  // decode: one row at a time, one stream through the weights
    const size_t x_row_bytes = act_row_bytes_of(k);
    for (uint32_t r = 0; r < n_rows; ++r) {
      if (n_tok == 1) q5_0_tile_avx2<1, 1, 4>(w + r * w_row_bytes, w_row_bytes, k, xq, x_row_bytes, y + r, y_stride);
      else q5_0_tile_avx2<1, 2, 4>(w + r * w_row_bytes, w_row_bytes, k, xq, x_row_bytes, y + r, y_stride);
    }
    return;
  }
  if (n_tok >= kPrefillMinTokens) {
    for (uint32_t r0 = 0; r0 < n_rows; r0 += 8)
      q5_0_prefill8_avx2(w + r0 * w_row_bytes, w_row_bytes, n_rows - r0 < 8 ? n_rows - r0 : 8, k, xq, act_row_bytes_of(k), n_tok, y + r0, y_stride);
    return;
  }
  run_tiles<4, 2, Tile2>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // LH_X86

}  // namespace

bool lh_qdot_q5_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out) {
  if (type != LH_QDOT_Q5_0) return false;
  // the activations are Q8_0's, quantized by Q8_0's quantizer of the same impl (the same bytes in every impl)
  lh_qdot_kernels q8{};
  if (!lh_qdot_q_kernels(LH_QDOT_Q8_0, impl == LH_QDOT_AMX ? LH_QDOT_AVX512 : impl, &q8)) return false;
  lh_qdot_kernels k{};
  k.type = type;
  k.impl = impl;
  k.block_elems = kQK;
  k.row_bytes = q5_0_row_bytes;
  k.act_row_bytes = q8.act_row_bytes;
  k.quantize_act = q8.quantize_act;
  switch (impl) {
    case LH_QDOT_SCALAR: k.dot_tile = q5_0_dot_scalar; break;
#ifdef LH_X86
    case LH_QDOT_AVX512: k.dot_tile = q5_0_dot_avx512; break;
    case LH_QDOT_AVX2: k.dot_tile = q5_0_dot_avx2; break;
#endif
    default: return false;  // AMX: no tile kernel for Q5_0; AUTO then takes AVX-512's
  }
  *out = k;
  return true;
}
