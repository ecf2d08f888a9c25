// Dot kernels for the K-quants Q4_K, Q5_K, Q6_K (quant_dot.h): GGUF super-blocks of 256 weights
// read in place, activations quantized like ggml's quantize_row_q8_K (one float scale per 256,
// int8 codes) into a layout of our own that the AVX-512 dot loads without shuffles.
//
// Weight blocks (ggml-quants; gguf_repack.cc dequantizes the same layouts):
//   Q4_K  144 B: fp16 d, fp16 dmin, scales[12] (8 sub-blocks of 32: 6-bit scale, 6-bit min), qs[128]
//         qs[32j + l]: low nibble = element 64j + l, high nibble = element 64j + 32 + l
//         w = d·sc_s·q - dmin·m_s
//   Q5_K  176 B: d, dmin, scales[12], qh[32] (bit s of qh[l]: 5th bit of element 32s + l), qs[128]
//   Q6_K  210 B: ql[128], qh[64], int8 scales[16] (sub-blocks of 16), fp16 d;  w = d·sc·(q6 - 32)
//
// Activation row: k/256 blocks of 320 bytes (a multiple of 64, so a 64-byte aligned row keeps
// every code load aligned):
//   Q4_K, Q5_K  [0, 256)   int8 codes, sub-blocks in the order 0 2 1 3 4 6 5 7 (32 bytes each): the
//                          order of the nibbles of one 64-byte load of qs (low nibbles of qs[0..63]
//                          are sub-blocks 0 and 2), so codes and weights line up lane by lane
//               [256, 288) float fb[8] = d_x · (sum of the 32 codes of sub-block j), j = 0..7
//               [288, 292) float d_x;  [292, 320) zero
//   Q6_K        [0, 256)   int8 codes in element order
//               [256, 288) int16 bs[16] = sum of the 16 codes of sub-block j
//               [288, 292) float d_x;  [292, 320) zero
// Quantization (all impls run the same scalar quantize_act, so the codes are the same bits):
// amax = max|x|, iscale = 127/amax, q = round-half-even(x·iscale), d_x = 1/iscale (ggml's q8_K,
// with the scale's sign positive). A block with a non-finite input gets d_x = NaN and zero codes,
// so every dot of that token is NaN; a block with amax below 2^-100 is all zeros (d_x = 0).
//
// The dot of one weight row with one activation row, per super-block:
//   Q4_K/Q5_K  (d·d_x)·Σ_s sc_s·Σ_l q_w·q_x  -  Σ_s (dmin·m_s)·fb_s
//   Q6_K       (d·d_x)·Σ_s sc_s·(Σ_l q6·q_x - 32·bs_s)        (integer part exact in int32)
// summed in float over the row. SCALAR and AVX512 compute the same integers and the same float
// products; only the order of the float sums differs.
//
// AVX512 (F/BW/VL/DQ + VNNI): per weight super-block the codes are unpacked once into four 64-byte
// vectors and the scales into word vectors; then for each of up to 8 tokens vpmaddubsw (u8 code ×
// s8 activation -> int16 pairs, never saturating: 2·63·127 < 32767) and vpdpwssd (pairs × sub-block
// scale, summed into int32) give the integer part. Prefill of Q6_K reuses the unpacked block over 8
// tokens; Q4_K/Q5_K prefill transposes 16 rows per sub-block for vpdpbusd (k45_prefill16).
// AVX2 (+FMA, F16C; no VNNI): the same integers 32 codes at a time, vpmaddubsw then vpmaddwd by
// the sub-block scale, tokens in groups of 4; for CPUs without AVX-512 VNNI.
#include <cmath>
#include <cstring>

#include "fp16.h"
#include "quant_dot.h"
#include "quant_dot_amx.h"
#include "quant_dot_transpose.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr uint64_t QK = 256;
constexpr size_t ACT_BLOCK = 320;
constexpr size_t ACT_SUMS = 256;  // fb[8] floats (Q4_K/Q5_K) or bs[16] int16 (Q6_K)
constexpr size_t ACT_D = 288;     // float d_x

size_t row_bytes_q4k(uint64_t k) { return static_cast<size_t>(k / QK * 144); }
size_t row_bytes_q5k(uint64_t k) { return static_cast<size_t>(k / QK * 176); }
size_t row_bytes_q6k(uint64_t k) { return static_cast<size_t>(k / QK * 210); }
size_t act_row_bytes(uint64_t k) { return static_cast<size_t>(k / QK * ACT_BLOCK); }

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return lh_fp16_to_fp32(h);
}

inline float float_at(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// Where element e (0..255) of a super-block sits in the Q4_K/Q5_K activation block: sub-block
// s = e/32 goes to slot (s/4)·4 + (s%2)·2 + (s%4)/2 (0 2 1 3 4 6 5 7 read slot by slot).
inline uint32_t k45_pos(uint32_t e) {
  const uint32_t s = e / 32, slot = (s / 4) * 4 + (s % 2) * 2 + (s % 4) / 2;
  return slot * 32 + e % 32;
}

// ggml's nearest_int: round half to even for |v| < 2^22 without depending on the rounding mode.
inline int32_t nearest_int(float v) {
  const float t = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// One super-block of 256 floats -> codes q[256] in element order, d_x. Returns false when the
// block has a non-finite input (q zeroed, *d = NaN).
bool quantize_block(const float* x, int8_t* q, float* d) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < 256; i++) {
    const float a = std::fabs(x[i]);
    finite = finite && std::isfinite(a);  // no early exit: the loop stays a vectorisable max
    amax = a > amax ? a : amax;
  }
  if (!finite || !(amax >= 0x1p-100f)) {
    std::memset(q, 0, 256);
    *d = finite ? 0.0f : std::nanf("");
    return finite;
  }
  const float iscale = 127.0f / amax;
  for (int i = 0; i < 256; i++) {
    int32_t v = nearest_int(iscale * x[i]);
    v = v > 127 ? 127 : (v < -127 ? -127 : v);
    q[i] = static_cast<int8_t>(v);
  }
  *d = 1.0f / iscale;
  return true;
}

void quantize_act_k45(const float* x, uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / QK; b++, x += QK, out += ACT_BLOCK) {
    int8_t q[256];
    float d;
    quantize_block(x, q, &d);
    std::memset(out, 0, ACT_BLOCK);
    for (uint32_t e = 0; e < 256; e++) out[k45_pos(e)] = static_cast<uint8_t>(q[e]);
    for (int s = 0; s < 8; s++) {
      int32_t sum = 0;
      for (int l = 0; l < 32; l++) sum += q[32 * s + l];
      const float fb = d * static_cast<float>(sum);
      std::memcpy(out + ACT_SUMS + 4 * s, &fb, 4);
    }
    std::memcpy(out + ACT_D, &d, 4);
  }
}

void quantize_act_q6k(const float* x, uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / QK; b++, x += QK, out += ACT_BLOCK) {
    int8_t q[256];
    float d;
    quantize_block(x, q, &d);
    std::memset(out, 0, ACT_BLOCK);
    std::memcpy(out, q, 256);
    for (int s = 0; s < 16; s++) {
      int32_t sum = 0;
      for (int l = 0; l < 16; l++) sum += q[16 * s + l];
      const int16_t bs = static_cast<int16_t>(sum);
      std::memcpy(out + ACT_SUMS + 2 * s, &bs, 2);
    }
    std::memcpy(out + ACT_D, &d, 4);
  }
}

// Q4_K / Q5_K: 6-bit scale and min of sub-block s from the 12 packed bytes p (ggml's get_scale_min_k4).
inline void scale_min_k4(int s, const uint8_t* p, int32_t* sc, int32_t* m) {
  if (s < 4) {
    *sc = p[s] & 63;
    *m = p[s + 4] & 63;
  } else {
    *sc = (p[s + 4] & 0x0f) | ((p[s - 4] >> 6) << 4);
    *m = (p[s + 4] >> 4) | ((p[s] >> 6) << 4);
  }
}

// ---- scalar reference ----

template <bool FIVE>
float dot_k45_scalar(const uint8_t* w, uint64_t nb, const uint8_t* xq) {
  float acc = 0.0f;
  for (uint64_t b = 0; b < nb; b++, w += FIVE ? 176 : 144, xq += ACT_BLOCK) {
    const float d = half_at(w), dmin = half_at(w + 2);
    const uint8_t* qh = w + 16;
    const uint8_t* qs = w + (FIVE ? 48 : 16);
    const int8_t* q8 = reinterpret_cast<const int8_t*>(xq);
    int32_t isum = 0;
    float mins = 0.0f;
    for (int s = 0; s < 8; s++) {
      int32_t sc, m;
      scale_min_k4(s, w + 4, &sc, &m);
      int32_t sub = 0;
      for (uint32_t l = 0; l < 32; l++) {
        const uint8_t byte = qs[32 * (s / 2) + l];
        int32_t code = (s % 2) ? (byte >> 4) : (byte & 0x0f);
        if (FIVE) code |= ((qh[l] >> s) & 1) << 4;
        sub += code * q8[k45_pos(32 * s + l)];
      }
      isum += sc * sub;
      mins += (dmin * static_cast<float>(m)) * float_at(xq + ACT_SUMS + 4 * s);
    }
    acc += (d * float_at(xq + ACT_D)) * static_cast<float>(isum);
    acc -= mins;
  }
  return acc;
}

float dot_q6k_scalar(const uint8_t* w, uint64_t nb, const uint8_t* xq) {
  float acc = 0.0f;
  for (uint64_t b = 0; b < nb; b++, w += 210, xq += ACT_BLOCK) {
    const int8_t* q8 = reinterpret_cast<const int8_t*>(xq);
    int32_t isum = 0;
    for (int s = 0; s < 16; s++) {
      int32_t sub = 0;
      for (int i = 0; i < 16; i++) {
        const int e = 16 * s + i;  // element: half h, quarter j (32 each), l
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        const uint8_t lq = w[64 * h + 32 * (j % 2) + l];
        const int32_t lo = (j < 2) ? (lq & 0x0f) : (lq >> 4);
        const int32_t hi = (w[128 + 32 * h + l] >> (2 * j)) & 3;
        sub += (lo | (hi << 4)) * q8[e];
      }
      int16_t bs;
      std::memcpy(&bs, xq + ACT_SUMS + 2 * s, 2);
      isum += static_cast<int8_t>(w[192 + s]) * (sub - 32 * bs);
    }
    acc += (half_at(w + 208) * float_at(xq + ACT_D)) * static_cast<float>(isum);
  }
  return acc;
}

template <int TYPE>
void dot_tile_scalar(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                     size_t y_stride) {
  const uint64_t nb = k / QK;
  const size_t arb = act_row_bytes(k);
  for (uint32_t t = 0; t < n_tok; t++)
    for (uint32_t r = 0; r < n_rows; r++) {
      const uint8_t* wr = w + r * w_row_bytes;
      const uint8_t* xt = xq + t * arb;
      float v;
      if (TYPE == LH_QDOT_Q4_K) v = dot_k45_scalar<false>(wr, nb, xt);
      else if (TYPE == LH_QDOT_Q5_K) v = dot_k45_scalar<true>(wr, nb, xt);
      else v = dot_q6k_scalar(wr, nb, xt);
      y[t * y_stride + r] = v;
    }
}

// ---- AVX-512 ----
#if defined(__x86_64__)
#define LH_K512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
// GCC 12 warns about the intrinsics' own _mm512_undefined_* placeholders (as in attention.cc)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

LH_K512 inline float hsum512(__m512 v) {
  __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

LH_K512 inline float hsum256(__m256 s) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

LH_K512 inline float half_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One Q4_K/Q5_K super-block unpacked: codes w[v] (64 bytes: vector v = low (v even) or high
// nibbles of qs[64·(v/2) .. +63]), scale words s[v] (sub-block scale of each int16 pair lane),
// fm = dmin·m_s as floats, d.
struct k45_block {
  __m512i w[4];
  __m512i s[4];
  __m256 fm;
  float d;
};

template <bool FIVE>
LH_K512 inline void unpack_k45(const uint8_t* b, k45_block* u) {
  u->d = half_f16c(b);
  const float dmin = half_f16c(b + 2);
  uint32_t p[3];
  std::memcpy(p, b + 4, 12);
  // 8 scales and 8 mins as bytes (get_scale_min_k4 four sub-blocks at a time)
  const uint32_t sc_lo = p[0] & 0x3f3f3f3fu, m_lo = p[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (p[2] & 0x0f0f0f0fu) | (((p[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((p[2] >> 4) & 0x0f0f0f0fu) | (((p[1] >> 6) & 0x03030303u) << 4);
  const __m128i sc8 = _mm_cvtsi64_si128(static_cast<long long>(static_cast<uint64_t>(sc_hi) << 32 | sc_lo));
  const __m128i m8 = _mm_cvtsi64_si128(static_cast<long long>(static_cast<uint64_t>(m_hi) << 32 | m_lo));
  u->fm = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8)));
  const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sc8));
  // vector v: words 0..15 -> scale (v/2)·4 + v%2, words 16..31 -> that + 2
  for (int v = 0; v < 4; v++) {
    const short a = static_cast<short>((v / 2) * 4 + v % 2), c = static_cast<short>(a + 2);
    const __m512i idx = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(a), _mm512_set1_epi16(c));
    u->s[v] = _mm512_permutexvar_epi16(idx, sc16);
  }
  const uint8_t* qs = b + (FIVE ? 48 : 16);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int c = 0; c < 2; c++) {
    const __m512i q = _mm512_loadu_si512(qs + 64 * c);
    u->w[2 * c] = _mm512_and_si512(q, m4);
    u->w[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
  }
  if (FIVE) {
    // the 5th bits: bytes l of vector v's low half are sub-block (v/2)·4 + v%2, high half that + 2
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
    const __m512i sixteen = _mm512_set1_epi8(16);
    for (int v = 0; v < 4; v++) {
      const int sa = (v / 2) * 4 + v % 2;
      const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1u << sa)), _mm256_set1_epi8(static_cast<char>(1u << (sa + 2))), 1);
      u->w[v] = _mm512_mask_add_epi8(u->w[v], _mm512_test_epi8_mask(qh, bit), u->w[v], sixteen);
    }
  }
}

// Rows × T tokens: row r's super-blocks each unpacked once, then used by T tokens.
template <bool FIVE, int T>
LH_K512 void rows_k45_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t nb, const uint8_t* xq, size_t arb, float* y,
                             size_t y_stride) {
  const size_t bb = FIVE ? 176 : 144;
  for (uint32_t r = 0; r < n_rows; r++) {
    const uint8_t* wr = w + r * w_row_bytes;
    __m512 acc[T];
    __m256 accm[T];
    for (int t = 0; t < T; t++) {
      acc[t] = _mm512_setzero_ps();
      accm[t] = _mm256_setzero_ps();
    }
    for (uint64_t b = 0; b < nb; b++) {
      k45_block u;
      lh_qdot_prefetch_ahead(wr + b * bb, bb);
      unpack_k45<FIVE>(wr + b * bb, &u);
      const __m512 dw = _mm512_set1_ps(u.d);
      for (int t = 0; t < T; t++) {
        const uint8_t* x = xq + t * arb + b * ACT_BLOCK;
        __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(u.w[0], _mm512_loadu_si512(x)), u.s[0]);
        p = _mm512_dpwssd_epi32(p, _mm512_maddubs_epi16(u.w[1], _mm512_loadu_si512(x + 64)), u.s[1]);
        p = _mm512_dpwssd_epi32(p, _mm512_maddubs_epi16(u.w[2], _mm512_loadu_si512(x + 128)), u.s[2]);
        p = _mm512_dpwssd_epi32(p, _mm512_maddubs_epi16(u.w[3], _mm512_loadu_si512(x + 192)), u.s[3]);
        const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(float_at(x + ACT_D)));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dd, acc[t]);
        accm[t] = _mm256_fmadd_ps(u.fm, _mm256_loadu_ps(reinterpret_cast<const float*>(x + ACT_SUMS)), accm[t]);
      }
    }
    for (int t = 0; t < T; t++) y[t * y_stride + r] = hsum512(acc[t]) - hsum256(accm[t]);
  }
}

alignas(64) constexpr uint16_t kWordIndex[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

struct q6k_block {
  __m512i w[4];
  __m512i s[4];
  __m512i n32s;  // words 0..15: -32·scale_s, words 16..31: 0
  float d;
};

LH_K512 inline void unpack_q6k(const uint8_t* b, q6k_block* u) {
  u->d = half_f16c(b + 208);
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
  u->n32s = _mm512_zextsi256_si512(_mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32)));
  const __m512i sc = _mm512_castsi256_si512(sc16);
  const __m512i word_eighths = _mm512_srli_epi16(_mm512_loadu_si512(kWordIndex), 3);  // word w -> w/8
  for (int v = 0; v < 4; v++) {  // vector v: elements 64v .. 64v+63 = sub-blocks 4v .. 4v+3, 8 words each
    const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16(static_cast<short>(4 * v)), word_eighths);
    u->s[v] = _mm512_permutexvar_epi16(idx, sc);
  }
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  // low 256-bit half shifts (elements 32j+l with j even), high half the odd j: the 2 bits of qh
  const __m512i shl_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  for (int h = 0; h < 2; h++) {
    const __m512i ql = _mm512_loadu_si512(b + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
    // elements 128h + [0, 64): low nibbles of ql, qh bits 0-1 (first 32) and 2-3 (next 32)
    u->w[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl_lo), m30));
    // elements 128h + [64, 128): high nibbles, qh bits 4-5 and 6-7
    u->w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(_mm512_srlv_epi16(qh, shr_hi), m30));
  }
}

template <int T>
LH_K512 void rows_q6k_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t nb, const uint8_t* xq, size_t arb, float* y,
                             size_t y_stride) {
  for (uint32_t r = 0; r < n_rows; r++) {
    const uint8_t* wr = w + r * w_row_bytes;
    __m512 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (uint64_t b = 0; b < nb; b++) {
      q6k_block u;
      lh_qdot_prefetch_ahead(wr + b * 210, 210);
      unpack_q6k(wr + b * 210, &u);
      const __m512 dw = _mm512_set1_ps(u.d);
      for (int t = 0; t < T; t++) {
        const uint8_t* x = xq + t * arb + b * ACT_BLOCK;
        const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + ACT_SUMS)));
        __m512i p = _mm512_madd_epi16(bs, u.n32s);
        p = _mm512_dpwssd_epi32(p, _mm512_maddubs_epi16(u.w[0], _mm512_loadu_si512(x)), u.s[0]);
        p = _mm512_dpwssd_epi32(p, _mm512_maddubs_epi16(u.w[1], _mm512_loadu_si512(x + 64)), u.s[1]);
        p = _mm512_dpwssd_epi32(p, _mm512_maddubs_epi16(u.w[2], _mm512_loadu_si512(x + 128)), u.s[2]);
        p = _mm512_dpwssd_epi32(p, _mm512_maddubs_epi16(u.w[3], _mm512_loadu_si512(x + 192)), u.s[3]);
        const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(float_at(x + ACT_D)));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dd, acc[t]);
      }
    }
    for (int t = 0; t < T; t++) y[t * y_stride + r] = hsum512(acc[t]);
  }
}

// Prefill (many tokens), Q4_K / Q5_K, as quant_dot_q.cc's q_prefill16: 16 rows a tile, each row's
// super-blocks unpacked (unpack_k45: codes already in the activation's slot order) and each
// 32-code sub-block transposed once per tile and chunk into the layout vpdpbusd wants, wt[slot][j]
// holding dword j of all 16 rows. A (token, sub-block) is then 8 vpdpbusd against the token's codes
// broadcast, one FMA by d·sc_s per row and one by dmin·m_s against the token's fb_s; the super-block
// ends with one FMA by d_x. rows_k45_avx512 spent ~17 instructions per row, token and 256 weights
// (vpmaddubsw + vpdpwssd pairs, code loads used once per row); this ~11 per 16 rows × 32 weights.
// Float products differ from the scalar reference's integer Σ sc_s·sub_s only by rounding (each
// sub_s is exact in int32 and in float: |sub_s| <= 31·127·32 < 2^24).
constexpr uint32_t kKPrefillSupers = 4;      // super-blocks per chunk: 32 sub-blocks, wt is 16 KB
constexpr uint32_t kKPrefillTokens = 64;     // tokens per pass: acc is 4 KB
constexpr uint32_t kKPrefillMinTokens = 8;   // below, the transposition is not paid back: rows_k45_avx512

// slot q of the activation block holds sub-block kSlotSub[q] (quantize_act_k45's k45_pos)
constexpr int kSlotSub[8] = {0, 2, 1, 3, 4, 6, 5, 7};

template <bool FIVE>
LH_K512 void k45_prefill16(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t nb, const uint8_t* xq, size_t arb, uint32_t n_tok,
                           float* y, size_t y_stride) {
  const size_t bb = FIVE ? 176 : 144;
  alignas(64) int32_t wt[kKPrefillSupers * 8][8][16];  // [super-block·8 + slot][dword j][row]
  alignas(64) float dsc[kKPrefillSupers * 8][16];      // d·sc of the slot's sub-block, per row
  alignas(64) float dm[kKPrefillSupers * 8][16];       // dmin·m of the slot's sub-block, per row
  alignas(64) uint8_t codes[16][256];                  // one super-block of each row, slot order
  alignas(64) float acc[kKPrefillTokens][16];
  const __mmask16 live = static_cast<__mmask16>((1u << n_rows) - 1u);  // n_rows <= 16
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kKPrefillTokens) {
    const uint32_t tn = n_tok - t0 < kKPrefillTokens ? n_tok - t0 : kKPrefillTokens;
    for (uint32_t t = 0; t < tn; ++t) _mm512_store_ps(acc[t], _mm512_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kKPrefillSupers) {
      const uint32_t nc = nb - c0 < kKPrefillSupers ? static_cast<uint32_t>(nb - c0) : kKPrefillSupers;
      for (uint32_t b = 0; b < nc; ++b) {
        for (uint32_t r = 0; r < 16; ++r) {
          if (r >= n_rows) {
            std::memset(codes[r], 0, 256);
            for (int q = 0; q < 8; ++q) dsc[8 * b + q][r] = dm[8 * b + q][r] = 0.0f;
            continue;
          }
          const uint8_t* blk = w + r * w_row_bytes + (c0 + b) * bb;
          k45_block u;
          unpack_k45<FIVE>(blk, &u);
          for (int v = 0; v < 4; ++v) _mm512_store_si512(codes[r] + 64 * v, u.w[v]);
          const float dmin = half_f16c(blk + 2);
          for (int q = 0; q < 8; ++q) {
            int32_t sc, m;
            scale_min_k4(kSlotSub[q], blk + 4, &sc, &m);
            dsc[8 * b + q][r] = u.d * static_cast<float>(sc);
            dm[8 * b + q][r] = dmin * static_cast<float>(m);
          }
        }
        for (int q = 0; q < 8; ++q) {
          __m256i rows[16];
          for (int r = 0; r < 16; ++r) rows[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[r] + 32 * q));
          __m512i cols[8];
          lh_transpose_16x8(rows, cols);
          for (int j = 0; j < 8; ++j) _mm512_store_si512(wt[8 * b + q][j], cols[j]);
        }
      }
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * arb;
        __m512 a = _mm512_load_ps(acc[t]);
        for (uint32_t b = 0; b < nc; ++b) {
          const uint8_t* xb = xr + (c0 + b) * ACT_BLOCK;
          const float* fb = reinterpret_cast<const float*>(xb + ACT_SUMS);
          __m512 sums = _mm512_setzero_ps(), mins = _mm512_setzero_ps();
          for (int q = 0; q < 8; ++q) {
            const uint8_t* xc = xb + 32 * q;
            __m512i dot = _mm512_setzero_si512();
            for (int j = 0; j < 8; ++j) {
              int32_t x4;
              std::memcpy(&x4, xc + 4 * j, 4);
              dot = _mm512_dpbusd_epi32(dot, _mm512_load_si512(wt[8 * b + q][j]), _mm512_set1_epi32(x4));
            }
            sums = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_load_ps(dsc[8 * b + q]), sums);
            mins = _mm512_fmadd_ps(_mm512_load_ps(dm[8 * b + q]), _mm512_set1_ps(fb[kSlotSub[q]]), mins);
          }
          a = _mm512_sub_ps(_mm512_fmadd_ps(sums, _mm512_set1_ps(float_at(xb + ACT_D)), a), mins);
        }
        _mm512_store_ps(acc[t], a);
      }
    }
    for (uint32_t t = 0; t < tn; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * y_stride, live, _mm512_load_ps(acc[t]));
  }
}

template <int TYPE, int T>
LH_K512 void rows_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t nb, const uint8_t* xq, size_t arb, float* y,
                         size_t y_stride) {
  if (TYPE == LH_QDOT_Q4_K) rows_k45_avx512<false, T>(w, w_row_bytes, n_rows, nb, xq, arb, y, y_stride);
  else if (TYPE == LH_QDOT_Q5_K) rows_k45_avx512<true, T>(w, w_row_bytes, n_rows, nb, xq, arb, y, y_stride);
  else rows_q6k_avx512<T>(w, w_row_bytes, n_rows, nb, xq, arb, y, y_stride);
}

// Tokens in groups of 8 (the unpacked block stays in registers across them), the rest by a
// group of its own size.
template <int TYPE>
LH_K512 void dot_tile_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                             size_t y_stride) {
  const uint64_t nb = k / QK;
  const size_t arb = act_row_bytes(k);
  // Q6_K's 16-code sub-blocks made the transposed prefill slower than rows_q6k_avx512 here
  // (0.0118-0.0132 against 0.0105-0.0112 ns per element and token, native_tests --bench-dot)
  if (TYPE != LH_QDOT_Q6_K && n_tok >= kKPrefillMinTokens) {
    for (uint32_t r0 = 0; r0 < n_rows; r0 += 16) {
      const uint32_t rows = n_rows - r0 < 16 ? n_rows - r0 : 16;
      k45_prefill16<TYPE == LH_QDOT_Q5_K>(w + r0 * w_row_bytes, w_row_bytes, rows, nb, xq, arb, n_tok, y + r0, y_stride);
    }
    return;
  }
  uint32_t t = 0;
  for (; t + 8 <= n_tok; t += 8) rows_avx512<TYPE, 8>(w, w_row_bytes, n_rows, nb, xq + t * arb, arb, y + t * y_stride, y_stride);
  const uint8_t* x = xq + t * arb;
  float* yt = y + t * y_stride;
  switch (n_tok - t) {
    case 1: rows_avx512<TYPE, 1>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    case 2: rows_avx512<TYPE, 2>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    case 3: rows_avx512<TYPE, 3>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    case 4: rows_avx512<TYPE, 4>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    case 5: rows_avx512<TYPE, 5>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    case 6: rows_avx512<TYPE, 6>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    case 7: rows_avx512<TYPE, 7>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    default: break;
  }
}

// ---- AMX-INT8 (prefill of 16 tokens or more) ----
// A tile dot sums 16 tokens × 16 rows × 64 codes in int32 in one instruction, but it cannot scale
// sub-blocks: Q4_K's sub-block scales are 6-bit (× a 5-bit code: no int8 product), Q6_K's int8.
// So each scale is split into base-8 digits, sc = Σ_h 8^h·digit_h, and the weight codes are
// multiplied by each digit into one B operand per digit (products fit a byte: Q4_K/Q5_K digits
// 0..7 × codes <= 31 <= 217 unsigned; Q6_K digits -3..4 × (q6 - 32) in [-128, 124] signed). Per
// super-block and digit, C_h = Σ over its 256 codes of x · code·digit_h, and Σ_h 8^h·C_h is, exactly,
// the scalar reference's isum = Σ_s sc_s·sub_s (Q6_K's -32·bs term folded into the signed codes).
// The float part is then the scalar reference's products in its order (acc + (d·d_x)·isum, minus
// the mins summed sub-block by sub-block), so the results are the scalar reference's bits.
//
// Tiles (quant_dot_amx.h): 0 A = 16 tokens' 64 codes (read in place at stride arb; a last group of
// < 16 tokens from a zero-padded copy), 1 B = 64 codes of 16 rows, row j holding dword j of every
// weight row (the layout k45_prefill16 builds), 2..4 C_h = int32 [16 tokens][16 rows].
//
// fp-contract=off: the float part must be the scalar reference's separate products and sums, and
// GCC would otherwise fuse a _mm512_mul_ps into the _mm512_add_ps that takes it (an FMA rounds once)
#if defined(__clang__)
#define LH_KAMX LH_K512
#else
#define LH_KAMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"), optimize("fp-contract=off")))
#endif

// every tile here is 16 rows × 64 bytes
inline void amx_configure(int n_tiles) {
  const uint8_t rows[5] = {16, 16, 16, 16, 16};
  const uint16_t colsb[5] = {64, 64, 64, 64, 64};
  lh_amx_configure(n_tiles, rows, colsb);
}

constexpr uint32_t kAmxSupers = 2;      // super-blocks per chunk: B operands 16 KB (Q4_K/Q5_K), 24 KB (Q6_K)
constexpr uint32_t kAmxTokens = 256;     // tokens per pass: acc 16 KB; the operands are laid out once per pass
constexpr uint32_t kAmxMinTokens = 16;  // one full tile of tokens; below, the AVX-512 kernels

// One row tile's super-blocks as B operands: [super-block][digit][dword row kk = k/4 of the
// activation block's code order][weight row]; a B tile is 16 consecutive dword rows (64 codes).
template <int DIGITS>
struct amx_operands {
  alignas(64) int32_t wt[kAmxSupers][DIGITS][64][16];
  alignas(64) float d[kAmxSupers][16];      // d, per row
  alignas(64) float dm[kAmxSupers][8][16];  // Q4_K/Q5_K: dmin·m_s, sub-block s in element order, per row
};

// Tokens [g0, g0 + gn) of the pass (gn <= 16) against super-block b of the operands: isum[t][r].
// xa: the group's first token's activation block b; pad: 16 × 256 bytes for a group of < 16.
template <int DIGITS, bool SIGNED>
LH_KAMX inline void amx_isum(const int32_t (*wt)[64][16], const uint8_t* xa, size_t arb, uint32_t gn, uint8_t (*pad)[256], int32_t (*isum)[16]) {
  const uint8_t* a = xa;
  size_t stride = arb;
  if (gn < 16) {
    for (uint32_t i = 0; i < gn; ++i) std::memcpy(pad[i], xa + i * arb, 256);
    a = pad[0];
    stride = 256;
  }
  alignas(64) int32_t c[DIGITS][16][16];
  LH_TILE_ZERO(2);
  if (DIGITS > 1) LH_TILE_ZERO(3);
  if (DIGITS > 2) LH_TILE_ZERO(4);
  for (int p = 0; p < 4; ++p) {
    LH_TILE_LOADD(0, a + 64 * p, stride);
    for (int h = 0; h < DIGITS; ++h) {
      LH_TILE_LOADD(1, wt[h][16 * p], 64);
      if (SIGNED) {
        if (h == 0) LH_TDPBSSD(2, 0, 1);
        else if (h == 1) LH_TDPBSSD(3, 0, 1);
        else LH_TDPBSSD(4, 0, 1);
      } else {
        if (h == 0) LH_TDPBSUD(2, 0, 1);
        else if (h == 1) LH_TDPBSUD(3, 0, 1);
        else LH_TDPBSUD(4, 0, 1);
      }
    }
  }
  LH_TILE_STORED(2, c[0]);
  if (DIGITS > 1) LH_TILE_STORED(3, c[1]);
  if (DIGITS > 2) LH_TILE_STORED(4, c[2]);
  for (uint32_t i = 0; i < gn; ++i) {
    __m512i s = _mm512_load_si512(c[DIGITS - 1][i]);
    for (int h = DIGITS - 2; h >= 0; --h) s = _mm512_add_epi32(_mm512_slli_epi32(s, 3), _mm512_load_si512(c[h][i]));
    _mm512_store_si512(isum[i], s);
  }
}

// Q4_K / Q5_K: scale digits lo = sc & 7 (h = 0) and hi = sc >> 3 (h = 1); codes <= 31, so a dword of
// four codes times a digit is four byte products with no carry between them.
template <bool FIVE>
LH_KAMX void k45_operands_amx(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint32_t nc, amx_operands<2>* o) {
  const size_t bb = FIVE ? 176 : 144;
  alignas(64) uint8_t codes[16][256];  // one super-block of each row, slot order
  alignas(64) int32_t digit[2][8][16];  // [h][slot][row]
  for (uint32_t b = 0; b < nc; ++b) {
    for (uint32_t r = 0; r < 16; ++r) {
      if (r >= n_rows) {
        std::memset(codes[r], 0, 256);
        for (int q = 0; q < 8; ++q) digit[0][q][r] = digit[1][q][r] = 0, o->dm[b][q][r] = 0.0f;
        o->d[b][r] = 0.0f;
        continue;
      }
      const uint8_t* blk = w + r * w_row_bytes + b * bb;
      k45_block u;
      unpack_k45<FIVE>(blk, &u);
      for (int v = 0; v < 4; ++v) _mm512_store_si512(codes[r] + 64 * v, u.w[v]);
      o->d[b][r] = u.d;
      const float dmin = half_f16c(blk + 2);
      for (int q = 0; q < 8; ++q) {
        int32_t s, m;
        scale_min_k4(kSlotSub[q], blk + 4, &s, &m);
        digit[0][q][r] = s & 7;
        digit[1][q][r] = s >> 3;
        o->dm[b][kSlotSub[q]][r] = dmin * static_cast<float>(m);
      }
    }
    for (int q = 0; q < 8; ++q) {
      __m256i rows[16];
      for (int r = 0; r < 16; ++r) rows[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[r] + 32 * q));
      __m512i cols[8];
      lh_transpose_16x8(rows, cols);
      for (int h = 0; h < 2; ++h) {
        const __m512i dg = _mm512_load_si512(digit[h][q]);
        for (int j = 0; j < 8; ++j) _mm512_store_si512(o->wt[b][h][8 * q + j], _mm512_mullo_epi32(cols[j], dg));
      }
    }
  }
}

// Q6_K: scale digits in -3..4 (sc = d0 + 8·d1 + 64·d2 for every int8 sc), multiplied into the
// signed codes q6 - 32 before the transposition (byte products by 16-bit multiplies).
LH_KAMX void q6k_operands_amx(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint32_t nc, amx_operands<3>* o) {
  alignas(64) int8_t codes[3][16][256];  // [h][row]: (q6 - 32)·digit_h, element order
  const __m512i word_eighths = _mm512_srli_epi16(_mm512_loadu_si512(kWordIndex), 3);
  const __m512i thirty_two = _mm512_set1_epi8(32), low_bytes = _mm512_set1_epi16(0x00ff);
  const __m256i three = _mm256_set1_epi16(3), seven = _mm256_set1_epi16(7);
  for (uint32_t b = 0; b < nc; ++b) {
    for (uint32_t r = 0; r < 16; ++r) {
      if (r >= n_rows) {
        for (int h = 0; h < 3; ++h) std::memset(codes[h][r], 0, 256);
        o->d[b][r] = 0.0f;
        continue;
      }
      const uint8_t* blk = w + r * w_row_bytes + b * 210;
      q6k_block u;
      unpack_q6k(blk, &u);
      o->d[b][r] = u.d;
      // the 16 scales' digits as words: d = ((s + 3) & 7) - 3, s = (s - d) / 8
      __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
      __m256i dg[3];
      for (int h = 0; h < 2; ++h) {
        dg[h] = _mm256_sub_epi16(_mm256_and_si256(_mm256_add_epi16(s, three), seven), three);
        s = _mm256_srai_epi16(_mm256_sub_epi16(s, dg[h]), 3);
      }
      dg[2] = s;
      for (int v = 0; v < 4; ++v) {  // vector v: elements 64v .. 64v+63 = sub-blocks 4v .. 4v+3
        const __m512i c = _mm512_sub_epi8(u.w[v], thirty_two);
        const __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(c, 8), 8), odd = _mm512_srai_epi16(c, 8);
        const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16(static_cast<short>(4 * v)), word_eighths);
        for (int h = 0; h < 3; ++h) {
          const __m512i dw = _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(dg[h]));
          const __m512i lo = _mm512_and_si512(_mm512_mullo_epi16(even, dw), low_bytes), hi = _mm512_slli_epi16(_mm512_mullo_epi16(odd, dw), 8);
          _mm512_store_si512(codes[h][r] + 64 * v, _mm512_or_si512(lo, hi));
        }
      }
    }
    for (int h = 0; h < 3; ++h)
      for (int q = 0; q < 8; ++q) {
        __m256i rows[16];
        for (int r = 0; r < 16; ++r) rows[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[h][r] + 32 * q));
        __m512i cols[8];
        lh_transpose_16x8(rows, cols);
        for (int j = 0; j < 8; ++j) _mm512_store_si512(o->wt[b][h][8 * q + j], cols[j]);
      }
  }
}

// ≤ 16 rows × n_tok tokens (>= 16), every token's dots over the row tile's super-blocks.
template <int TYPE>
LH_KAMX void prefill_amx(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t nb, const uint8_t* xq, size_t arb, uint32_t n_tok,
                         float* y, size_t y_stride) {
  constexpr bool Q6 = TYPE == LH_QDOT_Q6_K;
  constexpr int DIGITS = Q6 ? 3 : 2;
  const size_t bb = TYPE == LH_QDOT_Q4_K ? 144 : TYPE == LH_QDOT_Q5_K ? 176 : 210;
  amx_operands<DIGITS> o;
  alignas(64) float acc[kAmxTokens][16];
  alignas(64) int32_t isum[16][16];  // [token][row]
  alignas(64) uint8_t pad[16][256] = {};
  const __mmask16 live = static_cast<__mmask16>((1u << n_rows) - 1u);  // n_rows <= 16
  amx_configure(2 + DIGITS);
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kAmxTokens) {
    const uint32_t tn = n_tok - t0 < kAmxTokens ? n_tok - t0 : kAmxTokens;
    for (uint32_t t = 0; t < tn; ++t) _mm512_store_ps(acc[t], _mm512_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kAmxSupers) {
      const uint32_t nc = nb - c0 < kAmxSupers ? static_cast<uint32_t>(nb - c0) : kAmxSupers;
      if constexpr (Q6) q6k_operands_amx(w + c0 * bb, w_row_bytes, n_rows, nc, &o);
      else k45_operands_amx<TYPE == LH_QDOT_Q5_K>(w + c0 * bb, w_row_bytes, n_rows, nc, &o);
      for (uint32_t g0 = 0; g0 < tn; g0 += 16) {
        const uint32_t gn = tn - g0 < 16 ? tn - g0 : 16;
        for (uint32_t b = 0; b < nc; ++b) {
          const uint8_t* xa = xq + (t0 + g0) * arb + (c0 + b) * ACT_BLOCK;
          amx_isum<DIGITS, Q6>(o.wt[b], xa, arb, gn, pad, isum);
          const __m512 d = _mm512_load_ps(o.d[b]);
          for (uint32_t i = 0; i < gn; ++i) {
            const uint8_t* xb = xa + i * arb;
            __m512 a = _mm512_load_ps(acc[g0 + i]);
            a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(float_at(xb + ACT_D))), _mm512_cvtepi32_ps(_mm512_load_si512(isum[i]))));
            if (!Q6) {
              const float* fb = reinterpret_cast<const float*>(xb + ACT_SUMS);
              __m512 mins = _mm512_setzero_ps();
              for (int s = 0; s < 8; ++s) mins = _mm512_add_ps(mins, _mm512_mul_ps(_mm512_load_ps(o.dm[b][s]), _mm512_set1_ps(fb[s])));
              a = _mm512_sub_ps(a, mins);
            }
            _mm512_store_ps(acc[g0 + i], a);
          }
        }
      }
    }
    for (uint32_t t = 0; t < tn; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * y_stride, live, _mm512_load_ps(acc[t]));
  }
  lh_amx_release();
}

template <int TYPE>
LH_KAMX void dot_tile_amx(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                          size_t y_stride) {
  if (n_tok < kAmxMinTokens) {
    dot_tile_avx512<TYPE>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
    return;
  }
  const uint64_t nb = k / QK;
  const size_t arb = act_row_bytes(k);
  for (uint32_t r0 = 0; r0 < n_rows; r0 += 16) {
    const uint32_t rows = n_rows - r0 < 16 ? n_rows - r0 : 16;
    prefill_amx<TYPE>(w + r0 * w_row_bytes, w_row_bytes, rows, nb, xq, arb, n_tok, y + r0, y_stride);
  }
}

// ---- AVX2 + FMA + F16C (no VNNI) ----
// The same integers 32 codes at a time: vpmaddubsw (u8 code × s8 activation -> int16 pairs) and
// vpmaddwd by the sub-block scale (-> int32), summed over the super-block, then one float FMA.
#define LH_K2 __attribute__((target("avx2,fma,f16c")))

LH_K2 inline float hsum256_avx2(__m256 s) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

struct k45_block2 {
  __m256i w[8];  // codes of sub-block s (32 bytes)
  __m256i s[8];  // its scale in every word
  __m256 fm;     // dmin·m_s
  float d;
};

template <bool FIVE>
LH_K2 inline void unpack_k45_avx2(const uint8_t* b, k45_block2* u) {
  uint16_t h[2];
  std::memcpy(h, b, 4);
  u->d = _cvtsh_ss(h[0]);
  const float dmin = _cvtsh_ss(h[1]);
  uint32_t p[3];
  std::memcpy(p, b + 4, 12);
  const uint32_t sc_w[2] = {p[0] & 0x3f3f3f3fu, (p[2] & 0x0f0f0f0fu) | (((p[0] >> 6) & 0x03030303u) << 4)};
  const uint32_t m_w[2] = {p[1] & 0x3f3f3f3fu, ((p[2] >> 4) & 0x0f0f0f0fu) | (((p[1] >> 6) & 0x03030303u) << 4)};
  uint8_t sc[8], m[8];
  std::memcpy(sc, sc_w, 8);
  std::memcpy(m, m_w, 8);
  u->fm = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)))));
  const uint8_t* qs = b + (FIVE ? 48 : 16);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i qh = FIVE ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)) : _mm256_setzero_si256();
  for (int j = 0; j < 4; j++) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
    u->w[2 * j] = _mm256_and_si256(q, m4);
    u->w[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  }
  for (int s = 0; s < 8; s++) {
    u->s[s] = _mm256_set1_epi16(sc[s]);
    if (FIVE) {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1u << s));
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
      u->w[s] = _mm256_or_si256(u->w[s], _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
  }
}

template <bool FIVE, int T>
LH_K2 void rows_k45_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t nb, const uint8_t* xq, size_t arb, float* y,
                         size_t y_stride) {
  const size_t bb = FIVE ? 176 : 144;
  for (uint32_t r = 0; r < n_rows; r++) {
    const uint8_t* wr = w + r * w_row_bytes;
    __m256 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (uint64_t b = 0; b < nb; b++) {
      k45_block2 u;
      lh_qdot_prefetch_ahead(wr + b * bb, bb);
      unpack_k45_avx2<FIVE>(wr + b * bb, &u);
      const __m256 dw = _mm256_set1_ps(u.d);
      for (int t = 0; t < T; t++) {
        const uint8_t* x = xq + t * arb + b * ACT_BLOCK;
        __m256i p = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
          const __m256i xs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * ((s / 4) * 4 + (s % 2) * 2 + (s % 4) / 2)));
          p = _mm256_add_epi32(p, _mm256_madd_epi16(_mm256_maddubs_epi16(u.w[s], xs), u.s[s]));
        }
        const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(float_at(x + ACT_D)));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dd, acc[t]);
        acc[t] = _mm256_fnmadd_ps(u.fm, _mm256_loadu_ps(reinterpret_cast<const float*>(x + ACT_SUMS)), acc[t]);
      }
    }
    for (int t = 0; t < T; t++) y[t * y_stride + r] = hsum256_avx2(acc[t]);
  }
}

struct q6k_block2 {
  __m256i w[8];  // codes of elements 32g .. 32g+31
  __m256i s[8];  // words 0..7: scale of sub-block 2g, words 8..15: 2g+1
  __m256i n32s;  // -32·scale_s, s = 0..15
  float d;
};

LH_K2 inline void unpack_q6k_avx2(const uint8_t* b, q6k_block2* u) {
  uint16_t h;
  std::memcpy(&h, b + 208, 2);
  u->d = _cvtsh_ss(h);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
  u->n32s = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32));
  const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
  for (int g = 0; g < 8; g++) {
    const int hh = g / 4, j = g % 4;
    u->s[g] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * g + 1]), _mm_set1_epi16(sc[2 * g]));
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * hh + 32 * (j % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * hh));
    const __m256i lo = j < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
    const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), m3), 4);
    u->w[g] = _mm256_or_si256(lo, hi);
  }
}

template <int T>
LH_K2 void rows_q6k_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t nb, const uint8_t* xq, size_t arb, float* y,
                         size_t y_stride) {
  for (uint32_t r = 0; r < n_rows; r++) {
    const uint8_t* wr = w + r * w_row_bytes;
    __m256 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (uint64_t b = 0; b < nb; b++) {
      q6k_block2 u;
      lh_qdot_prefetch_ahead(wr + b * 210, 210);
      unpack_q6k_avx2(wr + b * 210, &u);
      const __m256 dw = _mm256_set1_ps(u.d);
      for (int t = 0; t < T; t++) {
        const uint8_t* x = xq + t * arb + b * ACT_BLOCK;
        __m256i p = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + ACT_SUMS)), u.n32s);
        for (int g = 0; g < 8; g++) {
          const __m256i xs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * g));
          p = _mm256_add_epi32(p, _mm256_madd_epi16(_mm256_maddubs_epi16(u.w[g], xs), u.s[g]));
        }
        const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(float_at(x + ACT_D)));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dd, acc[t]);
      }
    }
    for (int t = 0; t < T; t++) y[t * y_stride + r] = hsum256_avx2(acc[t]);
  }
}

template <int TYPE, int T>
LH_K2 void rows_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t nb, const uint8_t* xq, size_t arb, float* y,
                     size_t y_stride) {
  if (TYPE == LH_QDOT_Q4_K) rows_k45_avx2<false, T>(w, w_row_bytes, n_rows, nb, xq, arb, y, y_stride);
  else if (TYPE == LH_QDOT_Q5_K) rows_k45_avx2<true, T>(w, w_row_bytes, n_rows, nb, xq, arb, y, y_stride);
  else rows_q6k_avx2<T>(w, w_row_bytes, n_rows, nb, xq, arb, y, y_stride);
}

// Tokens in groups of 4 (16 ymm registers: the unpacked block lives in L1, the accumulators in registers).
template <int TYPE>
LH_K2 void dot_tile_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                         size_t y_stride) {
  const uint64_t nb = k / QK;
  const size_t arb = act_row_bytes(k);
  uint32_t t = 0;
  for (; t + 4 <= n_tok; t += 4) rows_avx2<TYPE, 4>(w, w_row_bytes, n_rows, nb, xq + t * arb, arb, y + t * y_stride, y_stride);
  const uint8_t* x = xq + t * arb;
  float* yt = y + t * y_stride;
  switch (n_tok - t) {
    case 1: rows_avx2<TYPE, 1>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    case 2: rows_avx2<TYPE, 2>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    case 3: rows_avx2<TYPE, 3>(w, w_row_bytes, n_rows, nb, x, arb, yt, y_stride); break;
    default: break;
  }
}

#pragma GCC diagnostic pop
#endif

}  // namespace

bool lh_qdot_k_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out) {
  if (type != LH_QDOT_Q4_K && type != LH_QDOT_Q5_K && type != LH_QDOT_Q6_K) return false;
  lh_qdot_kernels k{};
  k.type = type;
  k.impl = impl;
  k.block_elems = 256;
  k.act_row_bytes = act_row_bytes;
  k.row_bytes = type == LH_QDOT_Q4_K ? row_bytes_q4k : type == LH_QDOT_Q5_K ? row_bytes_q5k : row_bytes_q6k;
  k.quantize_act = type == LH_QDOT_Q6_K ? quantize_act_q6k : quantize_act_k45;
  switch (impl) {
    case LH_QDOT_SCALAR:
      k.dot_tile = type == LH_QDOT_Q4_K ? dot_tile_scalar<LH_QDOT_Q4_K> : type == LH_QDOT_Q5_K ? dot_tile_scalar<LH_QDOT_Q5_K> : dot_tile_scalar<LH_QDOT_Q6_K>;
      break;
#if defined(__x86_64__)
    case LH_QDOT_AVX512:
      k.dot_tile = type == LH_QDOT_Q4_K ? dot_tile_avx512<LH_QDOT_Q4_K> : type == LH_QDOT_Q5_K ? dot_tile_avx512<LH_QDOT_Q5_K> : dot_tile_avx512<LH_QDOT_Q6_K>;
      break;
    case LH_QDOT_AMX:
      k.dot_tile = type == LH_QDOT_Q4_K ? dot_tile_amx<LH_QDOT_Q4_K> : type == LH_QDOT_Q5_K ? dot_tile_amx<LH_QDOT_Q5_K> : dot_tile_amx<LH_QDOT_Q6_K>;
      break;
    case LH_QDOT_AVX2:
      k.dot_tile = type == LH_QDOT_Q4_K ? dot_tile_avx2<LH_QDOT_Q4_K> : type == LH_QDOT_Q5_K ? dot_tile_avx2<LH_QDOT_Q5_K> : dot_tile_avx2<LH_QDOT_Q6_K>;
      break;
#endif
    default:
      return false;
  }
  *out = k;
  return true;
}
