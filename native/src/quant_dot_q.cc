// Dot kernels for F32, F16, Q4_0, Q8_0 (quant_dot.h): the scalar reference of every type, the
// AVX-512 (F/BW/VL/DQ + VNNI) kernels and the AVX2 (+FMA, F16C) ones. The AVX2 impl quantizes the
// activations with the scalar quantizer (the same bytes by definition).
//
// Activation layouts (act_row_bytes(k)):
//   F32, F16     k floats, a copy of x with ±Inf made NaN (4k bytes); the dot is fp32 FMA (F16
//                weights widened).
//   Q4_0, Q8_0   int8 q [k] then float d [k/32] (k + k/8 bytes): per block of 32, as ggml's
//                quantize_row_q8_0 does: d = amax/127, id = 1/d, q = round-to-nearest-even(x·id)
//                (ggml's SIMD quantizer rounds so; its scalar one rounds ties away), but d kept in
//                fp32 where ggml rounds it to fp16. amax < 2^-100 (or 0) -> d = 0, q = 0 (1/d would
//                overflow). A block with a NaN/Inf -> d = NaN, q = 0, so every dot of the token is NaN.
//
// The integer part of a block's dot is exact in every implementation:
//   Q8_0: Σ w·q (scalar); AVX-512 vpdpbusd on (w ^ 0x80) = w + 128 (unsigned) × q, minus 128·Σq
//   Q4_0: Σ (u-8)·q (scalar); AVX-512 vpdpbusd on the nibbles u (unsigned) × q, minus 8·Σq
// (the Σq term is computed once per token and block and is the accumulator vpdpbusd starts from),
// then × d_w·d_x in fp32. Only the order of the float sums differs between implementations.
//
// The AVX-512 tile: R rows × T tokens of accumulators in registers, two blocks (64 elements, one
// zmm) per step; each unpacked weight pair is reused for T tokens, each token's pair for R rows.
#include <cmath>
#include <cstring>

#include "fp16.h"
#include "quant_dot.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LH_X86 1
#include <immintrin.h>
#endif

namespace {

constexpr uint64_t kQK = 32;            // elements per Q4_0 / Q8_0 block
constexpr size_t kQ4Block = 18;         // fp16 d + 16 bytes of nibbles
constexpr size_t kQ8Block = 34;         // fp16 d + 32 int8
constexpr float kTinyAmax = 0x1p-100f;  // below: the block quantizes to zero (1/d would overflow)

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return h;
}
inline float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------------
size_t f32_row_bytes(uint64_t k) { return static_cast<size_t>(k) * 4; }
size_t f16_row_bytes(uint64_t k) { return static_cast<size_t>(k) * 2; }
size_t q4_0_row_bytes(uint64_t k) { return static_cast<size_t>(k / kQK) * kQ4Block; }
size_t q8_0_row_bytes(uint64_t k) { return static_cast<size_t>(k / kQK) * kQ8Block; }
size_t float_act_row_bytes(uint64_t k) { return static_cast<size_t>(k) * 4; }
size_t q8_act_row_bytes(uint64_t k) { return static_cast<size_t>(k) + static_cast<size_t>(k / kQK) * 4; }

// ---------------------------------------------------------------------------------------------
// Activations, scalar (the reference every implementation matches bit for bit)
// ---------------------------------------------------------------------------------------------
// A copy, with ±Inf made NaN: an Inf times weights of both signs would give ±Inf or NaN per row,
// and the contract is NaN for every dot of a token with a non-finite input.
void float_quantize_act(const float* x, uint64_t k, uint8_t* out) {
  for (uint64_t i = 0; i < k; ++i) {
    const float v = std::isfinite(x[i]) ? x[i] : NAN;
    std::memcpy(out + 4 * i, &v, 4);
  }
}

// x [k] -> q int8 [k] at out, d float [k/32] at out + k
void q8_quantize_act_scalar(const float* x, uint64_t k, uint8_t* out) {
  int8_t* q = reinterpret_cast<int8_t*>(out);
  uint8_t* dp = out + k;
  for (uint64_t b = 0; b < k / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.0f;
    bool finite = true;
    for (uint64_t j = 0; j < kQK; ++j) {
      finite = finite && std::isfinite(xb[j]);
      const float a = std::fabs(xb[j]);
      amax = a > amax ? a : amax;
    }
    float d = 0.0f;
    if (!finite) {
      d = NAN;
      std::memset(q + b * kQK, 0, kQK);
    } else if (!(amax >= kTinyAmax)) {
      std::memset(q + b * kQK, 0, kQK);
    } else {
      d = amax / 127.0f;
      const float id = 1.0f / d;
      for (uint64_t j = 0; j < kQK; ++j) q[b * kQK + j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
    }
    std::memcpy(dp + b * 4, &d, 4);
  }
}

// ---------------------------------------------------------------------------------------------
// Dots, scalar
// ---------------------------------------------------------------------------------------------
template <class RowDot>
void scalar_tile(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, const uint8_t* xq, size_t act_bytes, uint32_t n_tok, float* y,
                 size_t y_stride, const RowDot& row_dot) {
  for (uint32_t t = 0; t < n_tok; ++t)
    for (uint32_t r = 0; r < n_rows; ++r) y[t * y_stride + r] = row_dot(w + r * w_row_bytes, xq + t * act_bytes);
}

void f32_dot_scalar(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                    size_t y_stride) {
  scalar_tile(w, w_row_bytes, n_rows, xq, float_act_row_bytes(k), n_tok, y, y_stride, [k](const uint8_t* wr, const uint8_t* xr) {
    float s = 0.0f;
    for (uint64_t i = 0; i < k; ++i) s += load_f32(wr + 4 * i) * load_f32(xr + 4 * i);
    return s;
  });
}

void f16_dot_scalar(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                    size_t y_stride) {
  scalar_tile(w, w_row_bytes, n_rows, xq, float_act_row_bytes(k), n_tok, y, y_stride, [k](const uint8_t* wr, const uint8_t* xr) {
    float s = 0.0f;
    for (uint64_t i = 0; i < k; ++i) s += lh_fp16_to_fp32(load_u16(wr + 2 * i)) * load_f32(xr + 4 * i);
    return s;
  });
}

void q4_0_dot_scalar(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  scalar_tile(w, w_row_bytes, n_rows, xq, q8_act_row_bytes(k), n_tok, y, y_stride, [k](const uint8_t* wr, const uint8_t* xr) {
    const int8_t* q = reinterpret_cast<const int8_t*>(xr);
    float s = 0.0f;
    for (uint64_t b = 0; b < k / kQK; ++b) {
      const uint8_t* blk = wr + b * kQ4Block;
      const int8_t* qb = q + b * kQK;
      int32_t isum = 0;
      for (uint32_t j = 0; j < 16; ++j) {
        isum += (static_cast<int32_t>(blk[2 + j] & 15) - 8) * qb[j];
        isum += (static_cast<int32_t>(blk[2 + j] >> 4) - 8) * qb[j + 16];
      }
      s += lh_fp16_to_fp32(load_u16(blk)) * load_f32(xr + k + 4 * b) * static_cast<float>(isum);
    }
    return s;
  });
}

void q8_0_dot_scalar(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  scalar_tile(w, w_row_bytes, n_rows, xq, q8_act_row_bytes(k), n_tok, y, y_stride, [k](const uint8_t* wr, const uint8_t* xr) {
    const int8_t* q = reinterpret_cast<const int8_t*>(xr);
    float s = 0.0f;
    for (uint64_t b = 0; b < k / kQK; ++b) {
      const uint8_t* blk = wr + b * kQ8Block;
      const int8_t* wq = reinterpret_cast<const int8_t*>(blk + 2);
      const int8_t* qb = q + b * kQK;
      int32_t isum = 0;
      for (uint32_t j = 0; j < kQK; ++j) isum += static_cast<int32_t>(wq[j]) * qb[j];
      s += lh_fp16_to_fp32(load_u16(blk)) * load_f32(xr + k + 4 * b) * static_cast<float>(isum);
    }
    return s;
  });
}

#ifdef LH_X86
// ---------------------------------------------------------------------------------------------
// AVX-512 F/BW/VL/DQ + VNNI. Per-function target attributes: the build's baseline is x86-64-v2.
// ---------------------------------------------------------------------------------------------
#define LH_QD512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
// g++ 12 warns "__Y may be used uninitialized" inside its own AVX-512 headers (see attention.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// Bit-identical to q8_quantize_act_scalar: the same IEEE divisions and products, vcvtps2dq rounds
// to nearest even like nearbyint (MXCSR default), the same tiny / non-finite rules.
LH_QD512 void q8_quantize_act_avx512(const float* x, uint64_t k, uint8_t* out) {
  uint8_t* dp = out + k;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (uint64_t b = 0; b < k / kQK; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * kQK), x1 = _mm512_loadu_ps(x + b * kQK + 16);
    // 0x99: QNaN, +Inf, -Inf, SNaN
    const bool finite = (_mm512_fpclass_ps_mask(x0, 0x99) | _mm512_fpclass_ps_mask(x1, 0x99)) == 0;
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    float d = 0.0f;
    __m128i q0 = _mm_setzero_si128(), q1 = q0;
    if (!finite) {
      d = NAN;
    } else if (amax >= kTinyAmax) {
      d = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(1.0f / d);
      q0 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)));
      q1 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * kQK), q0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * kQK + 16), q1);
    std::memcpy(dp + b * 4, &d, 4);
  }
}

inline LH_QD512 float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

// ---- F32 / F16: R rows × T tokens, 16 elements a step, masked loads for the tail of k ----
template <bool kF16>
LH_QD512 inline __m512 load_w(const uint8_t* row, uint64_t i, __mmask16 m) {
  if (kF16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
  return _mm512_maskz_loadu_ps(m, row + 4 * i);
}

template <bool kF16, int R, int T>
LH_QD512 void float_tile(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  uint64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(xq + t * x_row_bytes + 4 * i);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load_w<kF16>(w + r * w_row_bytes, i, 0xFFFF);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (i < k) {
    const __mmask16 m = static_cast<__mmask16>((1u << (k - i)) - 1);
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, xq + t * x_row_bytes + 4 * i);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load_w<kF16>(w + r * w_row_bytes, i, m);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = hsum(acc[r][t]);
}

// ---- Q4_0 / Q8_0: R rows × T tokens, one block pair (64 elements, one zmm) a step ----
// Weights of blocks b, b+1 (has2: b+1 exists) of one row as unsigned bytes in element order, the
// pair's scales as [d_b ×8, d_b+1 ×8]. Loads end at a block's last byte: no over-read.
template <bool kQ4>
LH_QD512 inline __m512i load_wpair(const uint8_t* row, uint64_t b, bool has2) {
  if (kQ4) {
    // [qs_b, qs_b, qs_b+1, qs_b+1] (16 bytes each), odd 16-byte lanes shifted by 4: then the low
    // nibbles (weights 0..15) and the high ones (16..31) of each block are in element order.
    const uint8_t* p = row + b * kQ4Block + 2;
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i hi = has2 ? _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQ4Block))) : _mm256_setzero_si256();
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    const __m512i sh = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(z, sh), _mm512_set1_epi8(0x0F));
  }
  const uint8_t* p = row + b * kQ8Block + 2;
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = has2 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kQ8Block)) : _mm256_setzero_si256();
  return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8(static_cast<char>(0x80)));
}

LH_QD512 inline __m512 expand_pair(__m128 d01) {
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(d01));
}

template <bool kQ4>
LH_QD512 inline __m512 load_dwpair(const uint8_t* row, uint64_t b, bool has2) {
  constexpr size_t bs = kQ4 ? kQ4Block : kQ8Block;
  const uint32_t h0 = load_u16(row + b * bs), h1 = has2 ? load_u16(row + (b + 1) * bs) : 0;
  return expand_pair(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (h1 << 16)))));
}

template <bool kQ4, int R, int T>
LH_QD512 void q_tile(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  const uint64_t nb = k / kQK;
  // vpdpbusd(c, q) = c·Σq per 4 bytes: the offset of the unsigned weights (8 for nibbles, 128 for w ^ 0x80)
  const __m512i off = _mm512_set1_epi8(kQ4 ? 8 : static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (uint64_t b = 0; b < nb; b += 2) {
    const bool has2 = b + 1 < nb;
    __m512i xv[T], base[T];
    __m512 dx[T];
    for (int t = 0; t < T; ++t) {
      const uint8_t* xr = xq + t * x_row_bytes;
      const float* dxp = reinterpret_cast<const float*>(xr + k) + b;
      if (has2) {
        xv[t] = _mm512_loadu_si512(xr + b * kQK);
        dx[t] = expand_pair(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(dxp))));  // unaligned 8 bytes
      } else {
        xv[t] = _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xr + b * kQK);
        dx[t] = expand_pair(_mm_load_ss(dxp));
      }
      base[t] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, xv[t]));  // -offset·Σq per lane
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      const __m512i wv = load_wpair<kQ4>(row, b, has2);
      const __m512 dw = load_dwpair<kQ4>(row, b, has2);
      for (int t = 0; t < T; ++t) {
        const __m512i dot = _mm512_dpbusd_epi32(base[t], wv, xv[t]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx[t]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = hsum(acc[r][t]);
}

using tile_fn = void (*)(const uint8_t*, size_t, uint64_t, const uint8_t*, size_t, float*, size_t);

template <int R, int T>
struct F32Tile { static constexpr tile_fn fn = &float_tile<false, R, T>; };
template <int R, int T>
struct F16Tile { static constexpr tile_fn fn = &float_tile<true, R, T>; };
template <int R, int T>
struct Q4Tile { static constexpr tile_fn fn = &q_tile<true, R, T>; };
template <int R, int T>
struct Q8Tile { static constexpr tile_fn fn = &q_tile<false, R, T>; };

constexpr int kR = 4;  // rows per tile
constexpr int kT = 4;  // tokens per tile

// Rows in groups of up to kR, tokens in groups of up to kT; a [rows][tokens] table of the tile
// instantiations covers the remainders.

template <template <int, int> class Tile>
struct Table {
  tile_fn fn[kR][kT];
  constexpr Table() : fn{{Tile<1, 1>::fn, Tile<1, 2>::fn, Tile<1, 3>::fn, Tile<1, 4>::fn},
                         {Tile<2, 1>::fn, Tile<2, 2>::fn, Tile<2, 3>::fn, Tile<2, 4>::fn},
                         {Tile<3, 1>::fn, Tile<3, 2>::fn, Tile<3, 3>::fn, Tile<3, 4>::fn},
                         {Tile<4, 1>::fn, Tile<4, 2>::fn, Tile<4, 3>::fn, Tile<4, 4>::fn}} {}
};

template <template <int, int> class Tile>
void run_tiles(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes, uint32_t n_tok,
               float* y, size_t y_stride) {
  static constexpr Table<Tile> table{};
  for (uint32_t r0 = 0; r0 < n_rows; r0 += kR) {
    const uint32_t rr = n_rows - r0 < static_cast<uint32_t>(kR) ? n_rows - r0 : kR;
    for (uint32_t t0 = 0; t0 < n_tok; t0 += kT) {
      const uint32_t tt = n_tok - t0 < static_cast<uint32_t>(kT) ? n_tok - t0 : kT;
      table.fn[rr - 1][tt - 1](w + r0 * w_row_bytes, w_row_bytes, k, xq + t0 * x_row_bytes, x_row_bytes, y + t0 * y_stride + r0, y_stride);
    }
  }
}

void f32_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                    size_t y_stride) {
  run_tiles<F32Tile>(w, w_row_bytes, n_rows, k, xq, float_act_row_bytes(k), n_tok, y, y_stride);
}
void f16_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                    size_t y_stride) {
  run_tiles<F16Tile>(w, w_row_bytes, n_rows, k, xq, float_act_row_bytes(k), n_tok, y, y_stride);
}
void q4_0_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  run_tiles<Q4Tile>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
}
void q8_0_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  run_tiles<Q8Tile>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
}


// ---------------------------------------------------------------------------------------------
// AVX2 + FMA + F16C (CPUs without AVX-512 VNNI: most desktop Intel parts since Alder Lake).
// Q4_0 / Q8_0 as ggml's AVX2 dot: per block of 32 the signed weights w and codes q meet in
// vpmaddubsw(|w|, sign(q, w)) (never saturating: 2·128·127 < 32767), vpmaddwd by ones (int32 × 8),
// converted to float (exact: |Σ| <= 32·128·127 < 2^24) and FMA'd by d_w·d_x. F32/F16: 8 elements a
// step, the tail of k in scalar. Tiles of up to 4 rows × 2 tokens (16 ymm registers).
// ---------------------------------------------------------------------------------------------
#define LH_QD2 __attribute__((target("avx2,fma,f16c")))

inline LH_QD2 float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

template <bool kF16, int R, int T>
LH_QD2 void float_tile_avx2(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  uint64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(reinterpret_cast<const float*>(xq + t * x_row_bytes) + i);
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      const __m256 wv = kF16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)))
                             : _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      const uint8_t* xr = xq + t * x_row_bytes;
      float s = hsum8(acc[r][t]);
      for (uint64_t j = i; j < k; ++j) s += (kF16 ? lh_fp16_to_fp32(load_u16(row + 2 * j)) : load_f32(row + 4 * j)) * load_f32(xr + 4 * j);
      y[t * y_stride + r] = s;
    }
}

// the 32 signed weights of block b in element order
template <bool kQ4>
LH_QD2 inline __m256i load_block_avx2(const uint8_t* row, uint64_t b) {
  if (kQ4) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * kQ4Block + 2));
    // low lane: low nibbles (elements 0..15), high lane: high nibbles (16..31)
    const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
    return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
  }
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * kQ8Block + 2));
}

// Σ w·q of one block as 8 int32 lanes, converted to float
LH_QD2 inline __m256 block_dot_avx2(__m256i wv, __m256i xv) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

template <bool kQ4, int R, int T>
LH_QD2 void q_tile_avx2(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  constexpr size_t bs = kQ4 ? kQ4Block : kQ8Block;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (uint64_t b = 0; b < k / kQK; ++b) {
    __m256i xv[T];
    float dx[T];
    for (int t = 0; t < T; ++t) {
      xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * x_row_bytes + b * kQK));
      dx[t] = load_f32(xq + t * x_row_bytes + k + 4 * b);
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      const __m256i wv = load_block_avx2<kQ4>(row, b);
      const float dw = _cvtsh_ss(load_u16(row + b * bs));
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(block_dot_avx2(wv, xv[t]), _mm256_set1_ps(dw * dx[t]), acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = hsum8(acc[r][t]);
}

template <int R, int T>
struct F32Tile2 { static constexpr tile_fn fn = &float_tile_avx2<false, R, T>; };
template <int R, int T>
struct F16Tile2 { static constexpr tile_fn fn = &float_tile_avx2<true, R, T>; };
template <int R, int T>
struct Q4Tile2 { static constexpr tile_fn fn = &q_tile_avx2<true, R, T>; };
template <int R, int T>
struct Q8Tile2 { static constexpr tile_fn fn = &q_tile_avx2<false, R, T>; };

template <template <int, int> class Tile>
struct Table2 {
  tile_fn fn[4][2];
  constexpr Table2()
      : fn{{Tile<1, 1>::fn, Tile<1, 2>::fn}, {Tile<2, 1>::fn, Tile<2, 2>::fn}, {Tile<3, 1>::fn, Tile<3, 2>::fn}, {Tile<4, 1>::fn, Tile<4, 2>::fn}} {}
};

template <template <int, int> class Tile>
void run_tiles_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes, uint32_t n_tok,
                    float* y, size_t y_stride) {
  static constexpr Table2<Tile> table{};
  for (uint32_t r0 = 0; r0 < n_rows; r0 += 4) {
    const uint32_t rr = n_rows - r0 < 4u ? n_rows - r0 : 4u;
    for (uint32_t t0 = 0; t0 < n_tok; t0 += 2) {
      const uint32_t tt = n_tok - t0 < 2u ? n_tok - t0 : 2u;
      table.fn[rr - 1][tt - 1](w + r0 * w_row_bytes, w_row_bytes, k, xq + t0 * x_row_bytes, x_row_bytes, y + t0 * y_stride + r0, y_stride);
    }
  }
}

void f32_dot_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  run_tiles_avx2<F32Tile2>(w, w_row_bytes, n_rows, k, xq, float_act_row_bytes(k), n_tok, y, y_stride);
}
void f16_dot_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  run_tiles_avx2<F16Tile2>(w, w_row_bytes, n_rows, k, xq, float_act_row_bytes(k), n_tok, y, y_stride);
}
void q4_0_dot_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  run_tiles_avx2<Q4Tile2>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
}
void q8_0_dot_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  run_tiles_avx2<Q8Tile2>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // LH_X86

}  // namespace

bool lh_qdot_q_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out) {
  lh_qdot_kernels k{};
  k.type = type;
  k.impl = impl;
  switch (type) {
    case LH_QDOT_F32:
      k.block_elems = 1;
      k.row_bytes = f32_row_bytes;
      k.act_row_bytes = float_act_row_bytes;
      k.quantize_act = float_quantize_act;
      k.dot_tile = f32_dot_scalar;
      break;
    case LH_QDOT_F16:
      k.block_elems = 1;
      k.row_bytes = f16_row_bytes;
      k.act_row_bytes = float_act_row_bytes;
      k.quantize_act = float_quantize_act;
      k.dot_tile = f16_dot_scalar;
      break;
    case LH_QDOT_Q4_0:
      k.block_elems = kQK;
      k.row_bytes = q4_0_row_bytes;
      k.act_row_bytes = q8_act_row_bytes;
      k.quantize_act = q8_quantize_act_scalar;
      k.dot_tile = q4_0_dot_scalar;
      break;
    case LH_QDOT_Q8_0:
      k.block_elems = kQK;
      k.row_bytes = q8_0_row_bytes;
      k.act_row_bytes = q8_act_row_bytes;
      k.quantize_act = q8_quantize_act_scalar;
      k.dot_tile = q8_0_dot_scalar;
      break;
    default:
      return false;
  }
  switch (impl) {
    case LH_QDOT_SCALAR:
      break;
#ifdef LH_X86
    case LH_QDOT_AVX512:
      switch (type) {
        case LH_QDOT_F32: k.dot_tile = f32_dot_avx512; break;
        case LH_QDOT_F16: k.dot_tile = f16_dot_avx512; break;
        case LH_QDOT_Q4_0: k.quantize_act = q8_quantize_act_avx512; k.dot_tile = q4_0_dot_avx512; break;
        case LH_QDOT_Q8_0: k.quantize_act = q8_quantize_act_avx512; k.dot_tile = q8_0_dot_avx512; break;
      }
      break;
    case LH_QDOT_AVX2:
      switch (type) {
        case LH_QDOT_F32: k.dot_tile = f32_dot_avx2; break;
        case LH_QDOT_F16: k.dot_tile = f16_dot_avx2; break;
        case LH_QDOT_Q4_0: k.dot_tile = q4_0_dot_avx2; break;
        case LH_QDOT_Q8_0: k.dot_tile = q8_0_dot_avx2; break;
      }
      break;
#endif
    default:
      return false;
  }
  *out = k;
  return true;
}
