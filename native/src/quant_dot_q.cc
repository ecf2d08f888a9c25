// Dot kernels for F32, F16, Q4_0, Q8_0 (quant_dot.h): the scalar reference of every type, the
// AVX-512 (F/BW/VL/DQ + VNNI) kernels and the AVX2 (+FMA, F16C) ones. The AVX2 impl quantizes the
// activations with the scalar quantizer (the same bytes by definition).
//
// Activation layouts (act_row_bytes(k)):
//   F32, F16     k floats, a copy of x with ±Inf made NaN (4k bytes); the dot is fp32 FMA (F16
//                weights widened).
//   Q4_0, Q8_0   int8 q [k], float d [k/32], int32 neg8 [k/32], int32 neg128 [k/32] (k + 12·k/32
//                bytes): per block of 32, as ggml's x86 quantize_row_q8_0 (AVX/AVX2, and the
//                quantize_mat_q8_0 of its repacked Q4_0 path) does: id = 127/amax, q =
//                round-to-nearest-even(x·id) (ggml's scalar reference takes id = 1/(amax/127) and
//                rounds ties away; the SIMD code is what llama.cpp runs here), and d = amax/127
//                rounded to fp16 (block_q8_0.d is fp16, and every ggml dot multiplies by that
//                rounded value), stored widened to a float. The q come from the unrounded 127/amax,
//                as in ggml. amax < 2^-100 (or 0) -> d = 0, q = 0 (127/amax would overflow; ggml's d
//                rounds to fp16 zero far above that, so the block adds 0 to the dot either way).
//                amax/127 >= 65520 rounds to d = Inf, as in ggml. A block with a NaN/Inf -> d = NaN,
//                q = 0, so every dot of the token is NaN. neg8 = -8·Σq and neg128 = -128·Σq: the
//                offsets of the unsigned weights (below) that the AVX-512 prefill kernel starts its
//                sums from. MXFP4 (quant_dot_mxfp4.cc) reads the same rows.
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
#include "quant_dot_amx.h"
#include "quant_dot_transpose.h"

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
size_t q8_act_row_bytes(uint64_t k) { return static_cast<size_t>(k) + static_cast<size_t>(k / kQK) * 12; }
// where the per-block arrays of a Q4_0/Q8_0 activation row start
inline const float* act_d(const uint8_t* xr, uint64_t k) { return reinterpret_cast<const float*>(xr + k); }
inline const int32_t* act_neg8(const uint8_t* xr, uint64_t k) { return reinterpret_cast<const int32_t*>(xr + k + (k / kQK) * 4); }
inline const int32_t* act_neg128(const uint8_t* xr, uint64_t k) { return reinterpret_cast<const int32_t*>(xr + k + (k / kQK) * 8); }

// The block offsets of a quantized row: -8·Σq and -128·Σq of each block (every quantizer).
void write_block_offsets(uint8_t* out, uint64_t k) {
  const int8_t* q = reinterpret_cast<const int8_t*>(out);
  for (uint64_t b = 0; b < k / kQK; ++b) {
    int32_t sum = 0;
    for (uint64_t j = 0; j < kQK; ++j) sum += q[b * kQK + j];
    const int32_t n8 = -8 * sum, n128 = -128 * sum;
    std::memcpy(out + k + (k / kQK) * 4 + 4 * b, &n8, 4);
    std::memcpy(out + k + (k / kQK) * 8 + 4 * b, &n128, 4);
  }
}

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

// A block's scale as ggml stores it (block_q8_0.d = FP32_TO_FP16(amax/127)) and its dots read it:
// rounded to fp16 (ties to even), kept in a float. The q are quantized with the unrounded 127/amax.
inline float fp16_rounded_scale(float amax) { return lh_fp16_to_fp32(lh_fp32_to_fp16(amax / 127.0f)); }

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
      const float id = 127.0f / amax;
      for (uint64_t j = 0; j < kQK; ++j) q[b * kQK + j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
      d = fp16_rounded_scale(amax);
    }
    std::memcpy(dp + b * 4, &d, 4);
  }
  write_block_offsets(out, k);
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
      d = fp16_rounded_scale(amax);
      const __m512 id = _mm512_set1_ps(127.0f / amax);
      q0 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)));
      q1 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * kQK), q0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * kQK + 16), q1);
    std::memcpy(dp + b * 4, &d, 4);
  }
  write_block_offsets(out, k);
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

// The fp16 d of a row's 16 blocks from `grp` (its first block) on: word permutes over the group's
// bytes for a full Q8_0 group (four windows of 128 bytes, four blocks each: d at words 17j), else a
// gather (its loads stalled the decode loop on the first touch of each line: perf). in_group < 16:
// the gather, masked, so nothing past the row is read.
// word indices into a 128-byte window of 4 Q8_0 blocks (d at words 0, 17, 34, 51), placed at result
// words 4·win .. 4·win + 3
struct Q8ScaleWords {
  alignas(64) int16_t idx[4][32];
  constexpr Q8ScaleWords() : idx{} {
    for (int win = 0; win < 4; ++win)
      for (int j = 0; j < 4; ++j) idx[win][4 * win + j] = static_cast<int16_t>(17 * j);
  }
};
constexpr Q8ScaleWords kQ8ScaleWords{};

template <bool kQ4>
LH_QD512 inline __m256i group_scales(const uint8_t* grp, uint32_t in_group, __mmask16 live, __m512i d_at) {
  if (!kQ4 && in_group == 16) {
    __m512i d = _mm512_setzero_si512();
    for (int win = 0; win < 4; ++win) {
      const uint8_t* p = grp + win * 4 * kQ8Block;
      const __m512i words = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), _mm512_load_si512(kQ8ScaleWords.idx[win]), _mm512_loadu_si512(p + 64));
      d = _mm512_mask_blend_epi16(static_cast<__mmask32>(0xFu << (4 * win)), d, words);
    }
    return _mm512_castsi512_si256(d);
  }
  return _mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, d_at, grp, 1));
}

// Decode (one or two tokens): the same integer dots as q_tile, but the weight scales of 16 blocks
// come from one gather (fp16 d at a fixed stride) and one conversion per row, and are multiplied by
// the tokens' 16 scales once; each block pair then takes its lanes with one permute. q_tile's
// per-pair scalar loads, conversion and expansion of d_w made Q4_0 decode run at 24% of the read
// bandwidth (native_tests --bench-dot).
template <bool kQ4, int R, int T>
LH_QD512 void q_decode(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  constexpr int bs = kQ4 ? static_cast<int>(kQ4Block) : static_cast<int>(kQ8Block);
  const uint64_t nb = k / kQK;
  const __m512i off = _mm512_set1_epi8(kQ4 ? 8 : static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  // byte offsets of the 16 blocks' d in a row, and lanes [pair's first block ×8, second ×8]
  const __m512i d_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(bs));
  const __m512i pair_lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (uint64_t g = 0; g < nb; g += 16) {
    const uint32_t in_group = nb - g < 16 ? static_cast<uint32_t>(nb - g) : 16u;
    const __mmask16 live = static_cast<__mmask16>((1u << in_group) - 1u);
    // d_w·d_x of the group's blocks, per row and token
    __m512 dd[R][T];
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes + g * bs;
      const __m512 dw = _mm512_cvtph_ps(group_scales<kQ4>(row, in_group, live, d_at));
      for (int t = 0; t < T; ++t) dd[r][t] = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(live, reinterpret_cast<const float*>(xq + t * x_row_bytes + k) + g));
    }
    for (uint32_t p = 0; 2 * p < in_group; ++p) {
      const uint64_t b = g + 2 * p;
      const bool has2 = 2 * p + 1 < in_group;
      const __m512i lanes = _mm512_add_epi32(pair_lanes, _mm512_set1_epi32(static_cast<int>(2 * p)));
      __m512i xv[T], base[T];
      for (int t = 0; t < T; ++t) {
        const uint8_t* xr = xq + t * x_row_bytes + b * kQK;
        xv[t] = has2 ? _mm512_loadu_si512(xr) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xr);
        base[t] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, xv[t]));  // -offset·Σq per lane
      }
      for (int r = 0; r < R; ++r) {
        lh_qdot_prefetch_ahead(w + r * w_row_bytes + b * bs, 1);  // a line per pair (2 × 18 or 34 bytes)
        const __m512i wv = load_wpair<kQ4>(w + r * w_row_bytes, b, has2);
        for (int t = 0; t < T; ++t) {
          const __m512i dot = _mm512_dpbusd_epi32(base[t], wv, xv[t]);
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(lanes, dd[r][t]), acc[r][t]);
        }
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
template <int R, int T>
struct Q4Decode { static constexpr tile_fn fn = &q_decode<true, R, (T < 2 ? T : 2)>; };
template <int R, int T>
struct Q8Decode { static constexpr tile_fn fn = &q_decode<false, R, (T < 2 ? T : 2)>; };

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
  // decode (one or two tokens): one row at a time, one stream through the weights (see q_decode)
  const uint32_t rows_per_tile = n_tok <= 2 ? 1u : static_cast<uint32_t>(kR);
  for (uint32_t r0 = 0; r0 < n_rows; r0 += rows_per_tile) {
    const uint32_t rr = n_rows - r0 < rows_per_tile ? n_rows - r0 : rows_per_tile;
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
// Q4_0 decode of one token, four blocks a step: the 4 × 16 bytes of nibbles are gathered into one
// zmm (low nibbles of blocks b..b+3 in one vector, high nibbles in another), against the token's
// codes laid out the same way once per call (x_lo: elements 0..15 of each block, x_hi: 16..31,
// with -8·Σq per 4-byte lane precomputed): 2 vpdpbusd per 128 weights where q_decode needed 2 per
// 64 and the nibble shuffles of each pair. Stack: k + k/2 bytes (capped by kQ4StackK).
constexpr uint64_t kQ4StackK = 16384;

LH_QD512 void q4_decode_one(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xr, float* y) {
  const uint64_t nb = k / kQK, ng = (nb + 3) / 4;
  alignas(64) uint8_t x_lo[kQ4StackK / 2], x_hi[kQ4StackK / 2];  // [ng][64]
  alignas(64) int32_t base[kQ4StackK / 8];                        // [ng][16]
  const __m512i zero = _mm512_setzero_si512(), eights = _mm512_set1_epi8(8), m4 = _mm512_set1_epi8(0x0F);
  for (uint64_t g = 0; g < ng; ++g) {
    __m128i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      const uint64_t b = 4 * g + j;
      lo[j] = b < nb ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(xr + b * kQK)) : _mm_setzero_si128();
      hi[j] = b < nb ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(xr + b * kQK + 16)) : _mm_setzero_si128();
    }
    const __m512i l = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(lo[1], lo[0])), _mm256_set_m128i(lo[3], lo[2]), 1);
    const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(hi[1], hi[0])), _mm256_set_m128i(hi[3], hi[2]), 1);
    _mm512_store_si512(x_lo + 64 * g, l);
    _mm512_store_si512(x_hi + 64 * g, h);
    _mm512_store_si512(base + 16 * g, _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, eights, l), eights, h)));
  }
  const float* dx = reinterpret_cast<const float*>(xr + k);
  const __m512i d_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(static_cast<int>(kQ4Block)));
  const __m512i quad_lanes = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i d_words = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 63, 54, 45, 36, 27, 18, 9, 0);
  const __m512i d_words_hi = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 63, 54, 45, 36, 27, 18, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  for (uint32_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + r * w_row_bytes;
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t g16 = 0; g16 < nb; g16 += 16) {
      const uint32_t in16 = nb - g16 < 16 ? static_cast<uint32_t>(nb - g16) : 16u;
      const __mmask16 live = static_cast<__mmask16>((1u << in16) - 1u);
      const uint8_t* grp = row + g16 * kQ4Block;
      __m256i d16;
      if (in16 == 16) {
        // the 16 fp16 d at bytes 18j: words 9j of [0, 128) for j < 8 and of [144, 272) for the rest,
        // two word permutes over loads that also bring the group's lines in (a gather here stalled
        // the loop: 35% of its time under perf)
        const __m512i t = _mm512_permutex2var_epi16(_mm512_loadu_si512(grp), d_words, _mm512_loadu_si512(grp + 64));
        const __m512i u = _mm512_permutex2var_epi16(_mm512_loadu_si512(grp + 144), d_words_hi, _mm512_loadu_si512(grp + 208));
        d16 = _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xFF00u, t, u));
      } else {
        d16 = _mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(zero, live, d_at, grp, 1));
      }
      const __m512 dd = _mm512_mul_ps(_mm512_cvtph_ps(d16), _mm512_maskz_loadu_ps(live, dx + g16));
      for (uint32_t q = 0; 4 * q < in16; ++q) {
        const uint64_t b = g16 + 4 * q, g = b / 4;
        const uint8_t* p = row + b * kQ4Block + 2;
        lh_qdot_prefetch_ahead(p, 64);  // 4 blocks, 72 bytes: a line a step keeps pace
        __m256i q01, q23;
        if (b + 4 <= nb) {
          q01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQ4Block)), 1);
          q23 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * kQ4Block))),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 3 * kQ4Block)), 1);
        } else {  // the last 1..3 blocks: the missing ones are zero (their codes are zero too)
          __m128i part[4];
          for (int j = 0; j < 4; ++j) part[j] = b + j < nb ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j * kQ4Block)) : _mm_setzero_si128();
          q01 = _mm256_set_m128i(part[1], part[0]);
          q23 = _mm256_set_m128i(part[3], part[2]);
        }
        const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q01), q23, 1);
        const __m512i wl = _mm512_and_si512(z, m4), wh = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
        __m512i dot = _mm512_dpbusd_epi32(_mm512_load_si512(base + 16 * g), wl, _mm512_load_si512(x_lo + 64 * g));
        dot = _mm512_dpbusd_epi32(dot, wh, _mm512_load_si512(x_hi + 64 * g));
        const __m512 scale = _mm512_permutexvar_ps(_mm512_add_epi32(quad_lanes, _mm512_set1_epi32(static_cast<int>(4 * q))), dd);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
      }
    }
    y[r] = hsum(acc);
  }
}

// Prefill (many tokens): 16 rows a tile, transposed once per chunk of 32 blocks into the layout
// vpdpbusd wants with the token's codes broadcast: wt[b][j] holds dword j (codes 4j..4j+3) of block
// b of all 16 rows, one row a lane. A (token, block) is then 8 vpdpbusd with a broadcast memory
// operand, started from the block's -offset·Σq, and one FMA by d_w[16 rows]·d_x: 12 instructions
// for 16 rows × 32 weights where q_tile spends ~4 per row and block. The transposition (an 8×8
// dword transpose per 256-bit half) is paid once per tile and chunk and shared by up to 64 tokens.
// Each (row, token) sums its blocks in order, one FMA chain.
constexpr uint32_t kPrefillBlocks = 32;   // blocks per chunk: wt is 16 KB, in L1 beside the tokens' codes
constexpr uint32_t kPrefillTokens = 64;   // tokens per pass: acc is 4 KB
constexpr uint32_t kPrefillMinTokens = 8; // below, the transposition is not paid back: q_tile

// One block of 16 rows (the first n_rows live, the rest zero) laid out for an integer dot over 16
// rows at once: the codes transposed into wt (dword j of every row, lh_transpose_16x8) and the rows'
// fp16 scales into dw. kSigned: the codes as they weigh (Q4_0 u − 8, Q8_0 w), for a tile dot;
// else unsigned for vpdpbusd (Q4_0 u, Q8_0 w + 128), whose offsets the activation row carries.
template <bool kQ4, bool kSigned>
LH_QD512 inline void lay_out_block(const uint8_t* blk, size_t w_row_bytes, uint32_t n_rows, __mmask16 live, __m512i row_at, int32_t (*wt)[16],
                                   float* dw) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(static_cast<char>(0x80)), eight = _mm256_set1_epi8(8);
  __m256i rows[16];
  for (uint32_t r = 0; r < 16; ++r) {
    if (r >= n_rows) {
      rows[r] = _mm256_setzero_si256();
    } else if (kQ4) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + r * w_row_bytes + 2));
      const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);  // nibbles 0..15, 16..31
      rows[r] = kSigned ? _mm256_sub_epi8(u, eight) : u;
    } else {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + r * w_row_bytes + 2));
      rows[r] = kSigned ? v : _mm256_xor_si256(v, flip);  // w + 128
    }
  }
  __m512i cols[8];
  lh_transpose_16x8(rows, cols);
  for (int j = 0; j < 8; ++j) _mm512_store_si512(wt[j], cols[j]);
  const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, row_at, blk, 1);
  _mm512_store_ps(dw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
}

template <bool kQ4>
LH_QD512 void q_prefill16(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes,
                          uint32_t n_tok, float* y, size_t y_stride) {
  constexpr size_t bs = kQ4 ? kQ4Block : kQ8Block;
  const uint64_t nb = k / kQK;
  alignas(64) int32_t wt[kPrefillBlocks][8][16];
  alignas(64) float dw[kPrefillBlocks][16];
  alignas(64) float acc[kPrefillTokens][16];
  const __mmask16 live = static_cast<__mmask16>((1u << n_rows) - 1u);  // n_rows <= 16
  const __m512i row_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(static_cast<int>(w_row_bytes)));
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kPrefillTokens) {
    const uint32_t tn = n_tok - t0 < kPrefillTokens ? n_tok - t0 : kPrefillTokens;
    for (uint32_t t = 0; t < tn; ++t) _mm512_store_ps(acc[t], _mm512_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kPrefillBlocks) {
      const uint32_t nc = nb - c0 < kPrefillBlocks ? static_cast<uint32_t>(nb - c0) : kPrefillBlocks;
      for (uint32_t b = 0; b < nc; ++b) lay_out_block<kQ4, false>(w + (c0 + b) * bs, w_row_bytes, n_rows, live, row_at, wt[b], dw[b]);
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * x_row_bytes;
        const int32_t* off = (kQ4 ? act_neg8(xr, k) : act_neg128(xr, k)) + c0;
        const float* dx = act_d(xr, k) + c0;
        const int32_t* codes = reinterpret_cast<const int32_t*>(xr + c0 * kQK);  // 4 codes a dword, unaligned
        __m512 a = _mm512_load_ps(acc[t]);
        for (uint32_t b = 0; b < nc; ++b) {
          __m512i dot = _mm512_set1_epi32(off[b]);
          for (int j = 0; j < 8; ++j) {
            int32_t x4;
            std::memcpy(&x4, codes + 8 * b + j, 4);
            dot = _mm512_dpbusd_epi32(dot, _mm512_load_si512(wt[b][j]), _mm512_set1_epi32(x4));
          }
          a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(_mm512_load_ps(dw[b]), _mm512_set1_ps(dx[b])), a);
        }
        _mm512_store_ps(acc[t], a);
      }
    }
    for (uint32_t t = 0; t < tn; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * y_stride, live, _mm512_load_ps(acc[t]));
  }
}

template <bool kQ4>
void prefill_rows(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes, uint32_t n_tok,
                  float* y, size_t y_stride) {
  for (uint32_t r0 = 0; r0 < n_rows; r0 += 16)
    q_prefill16<kQ4>(w + r0 * w_row_bytes, w_row_bytes, n_rows - r0 < 16 ? n_rows - r0 : 16, k, xq, x_row_bytes, n_tok, y + r0, y_stride);
}

template <bool kQ4>
void decode_rows(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes, uint32_t n_tok,
                 float* y, size_t y_stride) {
  for (uint32_t r = 0; r < n_rows; ++r) {
    if (n_tok == 1) q_decode<kQ4, 1, 1>(w + r * w_row_bytes, w_row_bytes, k, xq, x_row_bytes, y + r, y_stride);
    else q_decode<kQ4, 1, 2>(w + r * w_row_bytes, w_row_bytes, k, xq, x_row_bytes, y + r, y_stride);
  }
}

// Decode steps (one or two tokens) stream the weights once: q_decode; more tokens: q_tile.
void q4_0_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  if (n_tok == 1 && k <= kQ4StackK) q4_decode_one(w, w_row_bytes, n_rows, k, xq, y);
  else if (n_tok <= 2) decode_rows<true>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
  else if (n_tok >= kPrefillMinTokens) prefill_rows<true>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
  else run_tiles<Q4Tile>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
}
void q8_0_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  if (n_tok <= 2) decode_rows<false>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
  else if (n_tok >= kPrefillMinTokens) prefill_rows<false>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
  else run_tiles<Q8Tile>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// AMX-INT8 prefill (16 tokens or more; LH_QDOT_AMX): q_prefill16's scheme with the integer part on
// tiles (quant_dot_amx.h). The weights go in signed (Q8_0 as stored, Q4_0's nibbles as u - 8), so a
// block's tile dot is Σ w·q with no offset; 16 tokens × 16 rows × one block of 32 is one TDPBSSD
// (A = the tokens' 32 codes in place, B = the block's 16 rows transposed, C = int32 [token][row]).
// Per block, each token's accumulator takes fma(C, d_w·d_x) in block order, as q_prefill16's does:
// the same integers, the same float operations, so AMX gives AVX512's bits.
// ---------------------------------------------------------------------------------------------
constexpr uint32_t kAmxTokens = 256;     // tokens per pass: acc 16 KB; the blocks are laid out once per pass
constexpr uint32_t kAmxMinTokens = 16;   // one full tile of tokens; below, the AVX-512 kernels

template <bool kQ4>
LH_QD512 void q_prefill_amx16(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes,
                              uint32_t n_tok, float* y, size_t y_stride) {
  constexpr size_t bs = kQ4 ? kQ4Block : kQ8Block;
  const uint64_t nb = k / kQK;
  alignas(64) int32_t wt[kPrefillBlocks][8][16];        // B tiles: [block][dword j][row], signed codes
  alignas(64) float dw[kPrefillBlocks][16];             // d_w, per row
  alignas(64) float dx[16][kPrefillBlocks];             // d_x of the group's tokens (0 past the last token)
  alignas(64) int8_t pad[16][kPrefillBlocks * kQK];     // a last group of < 16 tokens' codes, zero-padded
  alignas(64) float acc[kAmxTokens][16];
  alignas(64) int32_t c[16][16];
  const __mmask16 live = static_cast<__mmask16>((1u << n_rows) - 1u);  // n_rows <= 16
  const __m512i row_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(static_cast<int>(w_row_bytes)));
  const uint8_t tile_rows[3] = {16, 8, 16};
  const uint16_t tile_cols[3] = {32, 64, 64};  // A: 16 tokens × 32 codes, B: 8 dwords × 16 rows, C
  lh_amx_configure(3, tile_rows, tile_cols);
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kAmxTokens) {
    const uint32_t tn = n_tok - t0 < kAmxTokens ? n_tok - t0 : kAmxTokens;
    for (uint32_t t = 0; t < tn; ++t) _mm512_store_ps(acc[t], _mm512_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kPrefillBlocks) {
      const uint32_t nc = nb - c0 < kPrefillBlocks ? static_cast<uint32_t>(nb - c0) : kPrefillBlocks;
      for (uint32_t b = 0; b < nc; ++b) lay_out_block<kQ4, true>(w + (c0 + b) * bs, w_row_bytes, n_rows, live, row_at, wt[b], dw[b]);
      for (uint32_t g0 = 0; g0 < tn; g0 += 16) {
        const uint32_t gn = tn - g0 < 16 ? tn - g0 : 16;
        const uint8_t* a = xq + (t0 + g0) * x_row_bytes + c0 * kQK;
        size_t stride = x_row_bytes;
        for (uint32_t i = 0; i < 16; ++i) {
          if (i < gn) std::memcpy(dx[i], act_d(xq + (t0 + g0 + i) * x_row_bytes, k) + c0, nc * sizeof(float));
          else std::memset(dx[i], 0, sizeof dx[i]);
        }
        if (gn < 16) {
          std::memset(pad, 0, sizeof pad);
          for (uint32_t i = 0; i < gn; ++i) std::memcpy(pad[i], a + i * x_row_bytes, nc * kQK);
          a = reinterpret_cast<const uint8_t*>(pad[0]);
          stride = sizeof pad[0];
        }
        __m512 sum[16];
        for (int i = 0; i < 16; ++i) sum[i] = _mm512_load_ps(acc[g0 + (i < static_cast<int>(gn) ? i : 0)]);
        for (uint32_t b = 0; b < nc; ++b) {
          LH_TILE_ZERO(2);
          LH_TILE_LOADD(0, a + b * kQK, stride);
          LH_TILE_LOADD(1, wt[b], 64);
          LH_TDPBSSD(2, 0, 1);
          LH_TILE_STORED(2, c);
          const __m512 d = _mm512_load_ps(dw[b]);
          for (int i = 0; i < 16; ++i)
            sum[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[i])), _mm512_mul_ps(d, _mm512_set1_ps(dx[i][b])), sum[i]);
        }
        for (uint32_t i = 0; i < gn; ++i) _mm512_store_ps(acc[g0 + i], sum[i]);
      }
    }
    for (uint32_t t = 0; t < tn; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * y_stride, live, _mm512_load_ps(acc[t]));
  }
  lh_amx_release();
}

template <bool kQ4>
LH_QD512 void q_dot_amx(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                        size_t y_stride) {
  if (n_tok < kAmxMinTokens) {
    if (kQ4) q4_0_dot_avx512(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
    else q8_0_dot_avx512(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
    return;
  }
  for (uint32_t r0 = 0; r0 < n_rows; r0 += 16)
    q_prefill_amx16<kQ4>(w + r0 * w_row_bytes, w_row_bytes, n_rows - r0 < 16 ? n_rows - r0 : 16, k, xq, q8_act_row_bytes(k), n_tok, y + r0, y_stride);
}


// ---------------------------------------------------------------------------------------------
// AVX2 + FMA + F16C (CPUs without AVX-512 VNNI: most desktop Intel parts since Alder Lake).
// Q4_0 / Q8_0 as ggml's AVX2 dot: per block of 32 the signed weights w and codes q meet in
// vpmaddubsw(|w|, sign(q, w)) (never saturating: 2·128·127 < 32767), vpmaddwd by ones (int32 × 8),
// converted to float (exact: |Σ| <= 32·128·127 < 2^24) and FMA'd by d_w·d_x. F32/F16: 8 elements a
// step, the tail of k in scalar. Tiles of up to 4 rows × 2 tokens (16 ymm registers); a decode step
// takes the rows one at a time. Q4_0 from 3 tokens on, Q8_0 from 6: q_prefill_avx2 (weights laid
// out once per chunk, reused by every token).
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

// Decode (one token), AVX2: four accumulators (blocks b % 4), so four FMA chains overlap instead
// of one waiting on the last, the weight lines asked for ahead, and Q4_0's nibbles multiplied
// unsigned with the -8·Σq term from the activation row (no sign tricks). q_tile_avx2 with one
// chain read Q4_0 at 3.6 GB/s (21% of one thread's bandwidth, native_tests --bench-dot), slower
// than Q8_0 over twice the bytes; this reads 1.78 -> 0.75-0.78 ms per 5632x2048 matrix (Q8_0
// 1.26 -> 0.86-0.90).
template <bool kQ4>
LH_QD2 void q_decode_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xr, float* y) {
  constexpr size_t bs = kQ4 ? kQ4Block : kQ8Block;
  const uint64_t nb = k / kQK;
  const float* dx = act_d(xr, k);
  const int32_t* neg8 = act_neg8(xr, k);
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (uint32_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + r * w_row_bytes;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (uint64_t b = 0; b < nb; ++b) {
      lh_qdot_prefetch_ahead(row + b * bs, 1);
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + b * kQK));
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(row + b * bs)) * dx[b]);
      __m256 dot;
      if (kQ4) {
        // the nibbles u as they are (unsigned, vpmaddubsw's first operand: 2·15·127 < 32767), and
        // Σ (u - 8)·q = Σ u·q - 8·Σq with -8·Σq from the activation row, in lane 0
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * kQ4Block + 2));
        const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
        const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones);
        dot = _mm256_cvtepi32_ps(_mm256_add_epi32(sums, _mm256_zextsi128_si256(_mm_cvtsi32_si128(neg8[b]))));
      } else {
        dot = block_dot_avx2(load_block_avx2<kQ4>(row, b), xv);
      }
      acc[b % 4] = _mm256_fmadd_ps(dot, d, acc[b % 4]);
    }
    y[r] = hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  }
}

// Prefill (many tokens), AVX2: q_prefill16's scheme on 256-bit registers without vpdpbusd. A tile
// of up to 16 rows (G groups of 8, one row a 32-bit lane) is laid out once per chunk of blocks:
// wt[b][g][p][j] holds dword j (codes 4j..4j+3) of plane p of block b of the group's 8 rows
// (lh_transpose_8x8), dw[b][g] the rows' d. Per (token, block, group), against the token's dword j
// broadcast, j = 0..7:
//   Q4_0  one plane, the nibbles u (unsigned): 8 vpmaddubsw summed in int16 (16 products u·q per
//         lane: 16·15·128 = 30720 < 32767, so neither the saturation nor the adds ever bite), one
//         vpmaddwd to int32, plus −8·Σq from the activation row: Σ (u−8)·q.
//   Q8_0  planes |w| and w: vpmaddubsw(|w|, sign(q, w)) (pairs ≤ 2·128·127 < 32767; |−128| is 128
//         unsigned), vpmaddwd to int32 per dword, as ggml's AVX2 dot: Σ w·q. (Two nibble planes of
//         w + 128 with Q4_0's int16 sums ran 0.0220 ns/el/tok against this one's 0.0169.)
// then one FMA by d_w[8 rows]·d_x. q_tile_avx2 spends ~8 instructions per row, token and block and
// unpacks each weight block again for every second token. The integers are exact, and each (row,
// token) sums its blocks in order with the same fma(float(Σ), d_w·d_x, acc) as q_prefill16: AVX512's
// bits.
//
// From how many tokens on (below: q_decode_avx2 or q_tile_avx2): 2048 x 2048 in 32-row pieces,
// q_tile_avx2's time over this one's was, Q4_0: 0.91x at 2 tokens, 1.23x at 3, 1.84x at 8, 2.1x at
// 12; Q8_0 (q_tile_avx2 needs no nibble unpacking there): 0.91x at 4 tokens, 1.03x at 5, 1.07x at
// 6, 1.18x at 8, 1.31x at 12 (two runs on one shared 2-core host, AMD EPYC).
template <bool kQ4>
struct Prefill2 {
  static constexpr int kPlanes = kQ4 ? 1 : 2;
  static constexpr uint32_t kBlocks = kPrefillBlocks / kPlanes;  // per chunk: wt is 16 KB for 16 rows either way
  static constexpr uint32_t kMinTokens = kQ4 ? 3 : 6;
};

// One block of 8 rows (the first n_rows live, the rest zero) laid out for q_prefill_avx2.
template <bool kQ4>
LH_QD2 inline void lay_out_block8(const uint8_t* blk, size_t w_row_bytes, uint32_t n_rows, int32_t (*wt)[8][8], float* dw) {
  constexpr int P = Prefill2<kQ4>::kPlanes;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i rows[P][8];
  alignas(16) uint16_t d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t r = 0; r < 8; ++r) {
    if (r >= n_rows) {
      for (int p = 0; p < P; ++p) rows[p][r] = _mm256_setzero_si256();
      continue;
    }
    const uint8_t* row = blk + r * w_row_bytes;
    if (kQ4) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
      rows[0][r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);  // nibbles 0..15, 16..31
    } else {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2));
      rows[0][r] = _mm256_sign_epi8(v, v);  // |w|
      rows[P - 1][r] = v;
    }
    d[r] = load_u16(row);
  }
  for (int p = 0; p < P; ++p) {
    __m256i cols[8];
    lh_transpose_8x8(rows[p], cols);
    for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(wt[p][j]), cols[j]);
  }
  _mm256_store_ps(dw, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d))));
}

template <bool kQ4, int G>
LH_QD2 void q_prefill_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes,
                           uint32_t n_tok, float* y, size_t y_stride) {
  constexpr size_t bs = kQ4 ? kQ4Block : kQ8Block;
  constexpr int P = Prefill2<kQ4>::kPlanes;
  constexpr uint32_t kChunk = Prefill2<kQ4>::kBlocks;
  const uint64_t nb = k / kQK;
  alignas(32) int32_t wt[kChunk][G][P][8][8];  // [block][group][plane][dword j][row]
  alignas(32) float dw[kChunk][G][8];
  alignas(32) float acc[kPrefillTokens][G][8];
  const __m256i ones = _mm256_set1_epi16(1);
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kPrefillTokens) {
    const uint32_t tn = n_tok - t0 < kPrefillTokens ? n_tok - t0 : kPrefillTokens;
    for (uint32_t t = 0; t < tn; ++t)
      for (int g = 0; g < G; ++g) _mm256_store_ps(acc[t][g], _mm256_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kChunk) {
      const uint32_t nc = nb - c0 < kChunk ? static_cast<uint32_t>(nb - c0) : kChunk;
      for (uint32_t b = 0; b < nc; ++b)
        for (int g = 0; g < G; ++g) {
          const uint32_t live = n_rows > 8u * g ? n_rows - 8u * g : 0u;
          lay_out_block8<kQ4>(w + 8 * g * w_row_bytes + (c0 + b) * bs, w_row_bytes, live < 8 ? live : 8, wt[b][g], dw[b][g]);
        }
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * x_row_bytes;
        const int32_t* off = act_neg8(xr, k) + c0;  // Q4_0's (Q8_0 sums Σ w·q directly)
        const float* dx = act_d(xr, k) + c0;
        const uint8_t* codes = xr + c0 * kQK;
        __m256 a[G];
        for (int g = 0; g < G; ++g) a[g] = _mm256_load_ps(acc[t][g]);
        for (uint32_t b = 0; b < nc; ++b) {
          __m256i sum[G];  // Q4_0: int16 pair sums; Q8_0: int32 dots
          for (int g = 0; g < G; ++g) sum[g] = _mm256_setzero_si256();
          for (int j = 0; j < 8; ++j) {
            int32_t x4;
            std::memcpy(&x4, codes + b * kQK + 4 * j, 4);  // unaligned
            const __m256i xv = _mm256_set1_epi32(x4);
            for (int g = 0; g < G; ++g) {
              const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wt[b][g][0][j]));
              if (kQ4) {
                sum[g] = _mm256_add_epi16(sum[g], _mm256_maddubs_epi16(w0, xv));
              } else {
                const __m256i ws = _mm256_load_si256(reinterpret_cast<const __m256i*>(wt[b][g][P - 1][j]));
                sum[g] = _mm256_add_epi32(sum[g], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, _mm256_sign_epi8(xv, ws)), ones));
              }
            }
          }
          const __m256 dxv = _mm256_set1_ps(dx[b]);
          for (int g = 0; g < G; ++g) {
            const __m256i dot = kQ4 ? _mm256_add_epi32(_mm256_madd_epi16(sum[g], ones), _mm256_set1_epi32(off[b])) : sum[g];
            a[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(_mm256_load_ps(dw[b][g]), dxv), a[g]);
          }
        }
        for (int g = 0; g < G; ++g) _mm256_store_ps(acc[t][g], a[g]);
      }
    }
    for (uint32_t t = 0; t < tn; ++t)
      for (int g = 0; g < G; ++g) {
        const uint32_t live = n_rows > 8u * g ? n_rows - 8u * g : 0u;
        float* yt = y + (t0 + t) * y_stride + 8 * g;
        if (live >= 8) _mm256_storeu_ps(yt, _mm256_load_ps(acc[t][g]));
        else
          for (uint32_t r = 0; r < live; ++r) yt[r] = acc[t][g][r];
      }
  }
}

template <bool kQ4>
LH_QD2 void q_prefill_rows_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                                size_t y_stride) {
  const size_t x_row_bytes = q8_act_row_bytes(k);
  for (uint32_t r0 = 0; r0 < n_rows; r0 += 16) {
    const uint32_t rn = n_rows - r0 < 16 ? n_rows - r0 : 16;
    if (rn > 8) q_prefill_avx2<kQ4, 2>(w + r0 * w_row_bytes, w_row_bytes, rn, k, xq, x_row_bytes, n_tok, y + r0, y_stride);
    else q_prefill_avx2<kQ4, 1>(w + r0 * w_row_bytes, w_row_bytes, rn, k, xq, x_row_bytes, n_tok, y + r0, y_stride);
  }
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
  // decode (one or two tokens): one row at a time, one stream through the weights (see q_decode)
  const uint32_t rows_per_tile = n_tok <= 2 ? 1u : 4u;
  for (uint32_t r0 = 0; r0 < n_rows; r0 += rows_per_tile) {
    const uint32_t rr = n_rows - r0 < rows_per_tile ? n_rows - r0 : rows_per_tile;
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
  if (n_tok == 1) return q_decode_avx2<true>(w, w_row_bytes, n_rows, k, xq, y);
  if (n_tok >= Prefill2<true>::kMinTokens) return q_prefill_rows_avx2<true>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
  run_tiles_avx2<Q4Tile2>(w, w_row_bytes, n_rows, k, xq, q8_act_row_bytes(k), n_tok, y, y_stride);
}
void q8_0_dot_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  if (n_tok == 1) return q_decode_avx2<false>(w, w_row_bytes, n_rows, k, xq, y);
  if (n_tok >= Prefill2<false>::kMinTokens) return q_prefill_rows_avx2<false>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
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
    case LH_QDOT_AMX:  // Q4_0 and Q8_0 only: F32 and F16 have no AMX kernels (AUTO then takes AVX512's)
      switch (type) {
        case LH_QDOT_Q4_0: k.quantize_act = q8_quantize_act_avx512; k.dot_tile = q_dot_amx<true>; break;
        case LH_QDOT_Q8_0: k.quantize_act = q8_quantize_act_avx512; k.dot_tile = q_dot_amx<false>; break;
        default: return false;
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
