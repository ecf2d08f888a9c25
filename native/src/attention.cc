// Decode attention, optimised: tiled online softmax (one pass over K and V, nothing allocated; the
// tiles live on the stack), chosen at run time by cpuid:
//   - grouped kernels, AVX-512 and AVX2+FMA+F16C (decode_grouped): per KV head, each tile of 16
//     K/V rows is read and widened to fp32 once and serves every query head of the group; scores
//     8 or 16 at a time, a vector exp, P·V for several heads per V load. Reading a row once per
//     group instead of once per head is what lets GQA approach memory speed.
//   - the per-head kernels (decode_online), portable and AVX2: per (row, head) a dot, a scalar exp
//     and an axpy. The AVX2 one stays as LH_ATTN_AVX2_PER_HEAD (the baseline of
//     bench/attention-kernel.mjs, and the grouped kernels' fallback above kTileMaxDim).
// The scalar reference is reference/attention_ref.cc.
#include "attention.h"

#include <pthread.h>

#include <cmath>
#include <type_traits>

#include "cpu_level.h"
#include "fp16.h"
#include "kv_pool.h"
#include "parallel_ranges.h"
#include "worker_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LH_X86 1
#include <immintrin.h>
#endif

namespace {

constexpr uint32_t kTile = 32;  // tokens per tile of the portable and per-head kernels: 32 scores on the stack
constexpr uint32_t kRowTileLanes = 16;   // rows per tile of the grouped kernels (kRowTile below)
constexpr uint32_t kHeadBatchLanes = 16; // query heads per batch of the grouped kernels (kHeadBatch below)

// ---------------------------------------------------------------------------------------------
// Row operations, portable
// ---------------------------------------------------------------------------------------------
inline float widen(uint16_t h) { return lh_fp16_to_fp32(h); }
inline float widen(float f) { return f; }
inline float widen(int8_t i) { return static_cast<float>(i); }  // int8: the row scale is applied outside

struct PortableOps {
  // dot(q, k): q (n) fp32, k (n) fp16, fp32 or int8 (unscaled)
  template <class T>
  static inline float dot(const float* q, const T* k, size_t n) {
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;  // four chains: fewer dependent adds
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += q[i + 0] * widen(k[i + 0]);
      s1 += q[i + 1] * widen(k[i + 1]);
      s2 += q[i + 2] * widen(k[i + 2]);
      s3 += q[i + 3] * widen(k[i + 3]);
    }
    for (; i < n; ++i) s0 += q[i] * widen(k[i]);
    return (s0 + s1) + (s2 + s3);
  }
  // out += p * v: out (n) fp32, v (n) fp16, fp32 or int8 (p carries the int8 row scale)
  template <class T>
  static inline void axpy(float* out, float p, const T* v, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] += p * widen(v[i]);
  }
  // out *= c: out (n)
  static inline void scale(float* out, float c, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] *= c;
  }
};

#ifdef LH_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// ---------------------------------------------------------------------------------------------
// Row operations, AVX2 + FMA + F16C (8 lanes; tails scalar)
// ---------------------------------------------------------------------------------------------
struct Avx2Ops {
  static inline __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static inline __m256 load8(const int8_t* p) {  // 8 bytes -> 8 int32 -> 8 floats (exact)
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static inline float one(uint16_t h) { return _cvtsh_ss(h); }
  static inline float one(float f) { return f; }
  static inline float one(int8_t i) { return static_cast<float>(i); }
  static inline float hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
  }
  template <class T>
  static inline float dot(const float* q, const T* k, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 0), load8(k + i + 0), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8(k + i + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), load8(k + i + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), load8(k + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), a0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) s += q[i] * one(k[i]);
    return s;
  }
  template <class T>
  static inline void axpy(float* out, float p, const T* v, size_t n) {
    const __m256 pp = _mm256_set1_ps(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pp, load8(v + i), _mm256_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] += p * one(v[i]);
  }
  static inline void scale(float* out, float c, size_t n) {
    const __m256 cc = _mm256_set1_ps(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(cc, _mm256_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] *= c;
  }
};

// ---------------------------------------------------------------------------------------------
// Tile operations of the grouped kernel, AVX2 + FMA + F16C (see decode_grouped below).
// Buffers here are the driver's stack tiles: rows of dp floats (head_dim rounded up to kLanes,
// zero padded), 32-byte aligned.
// ---------------------------------------------------------------------------------------------
struct Avx2Tile {
  static constexpr uint32_t kLanes = 8;

  // dst (dp) = the row src (d elements of T) as fp32, zeros in [d, dp). int8: unscaled values.
  static inline void widen(float* dst, const uint16_t* src, size_t d, size_t dp) {
    size_t i = 0;
    for (; i + 8 <= d; i += 8) _mm256_store_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < d; ++i) dst[i] = _cvtsh_ss(src[i]);
    for (; i < dp; ++i) dst[i] = 0.0f;
  }
  static inline void widen(float* dst, const float* src, size_t d, size_t dp) {
    size_t i = 0;
    for (; i + 8 <= d; i += 8) _mm256_store_ps(dst + i, _mm256_loadu_ps(src + i));
    for (; i < d; ++i) dst[i] = src[i];
    for (; i < dp; ++i) dst[i] = 0.0f;
  }
  static inline void widen(float* dst, const int8_t* src, size_t d, size_t dp) {
    size_t i = 0;
    for (; i + 8 <= d; i += 8)
      _mm256_store_ps(dst + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i)))));
    for (; i < d; ++i) dst[i] = static_cast<float>(src[i]);
    for (; i < dp; ++i) dst[i] = 0.0f;
  }

  // exp(x) per lane: Cephes' expf polynomial on r = x - n·ln2 (|r| <= ln2/2, n = round(x·log2 e)),
  // scaled by 2^n as two halves (2^(n>>1) · 2^(n - (n>>1)): n reaches 128 near ln(FLT_MAX), one
  // power of two would overflow). Within ~2 ulp of exp over [-87.3, 88.72]; below -87.3 (results
  // under FLT_MIN, -inf included) exactly 0, so no denormal ever enters the sums; above: +inf;
  // NaN stays NaN. test_attention_exp holds it to that.
  static inline __m256 exp(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.7228394f);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);  // ln2 split in two (Cephes C1, C2)
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i e1 = _mm256_srai_epi32(ni, 1), e2 = _mm256_sub_epi32(ni, e1);
    const __m256i bias = _mm256_set1_epi32(127);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, bias), 23)));
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, bias), 23)));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }

  // 8 dot products at once: lane t = q · kb[t], kb rows t = 0..7 of dp floats. One accumulator a
  // row, then a transposing add tree, so each score costs no horizontal sum of its own.
  static inline __m256 dots8(const float* q, const float* kb, size_t dp) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (size_t i = 0; i < dp; i += 8) {
      const __m256 qv = _mm256_load_ps(q + i);
      a0 = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + 0 * dp + i), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + 1 * dp + i), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + 2 * dp + i), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + 3 * dp + i), a3);
      a4 = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + 4 * dp + i), a4);
      a5 = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + 5 * dp + i), a5);
      a6 = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + 6 * dp + i), a6);
      a7 = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + 7 * dp + i), a7);
    }
    return tree8(a0, a1, a2, a3, a4, a5, a6, a7);
  }

  static inline float hmax(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
  }

  // Lanes t >= n (past the tile's rows) set to -inf: weight 0.
  static inline __m256 mask_tail(__m256 s, int32_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, live);
  }
  // NaN or +inf lanes (the scores that make a head NaN).
  static inline bool any_bad(__m256 s) {
    const __m256 b = _mm256_or_ps(_mm256_cmp_ps(s, s, _CMP_UNORD_Q), _mm256_cmp_ps(s, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ));
    return _mm256_movemask_ps(b) != 0;
  }

  // acc of NH heads (rows of dp floats, dp apart) = acc · corr[h] + sum_t p[h][t] · vb[t], NV
  // vectors of each in registers: each V load serves NH FMAs.
  template <int NH, int NV>
  static inline void pv_chunk(float* acc, size_t dp, const float* corr, const float* p, const float* vb, uint32_t n) {
    __m256 r[NH][NV];
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < NV; ++k) r[h][k] = _mm256_mul_ps(_mm256_load_ps(acc + h * dp + 8 * k), _mm256_set1_ps(corr[h]));
    for (uint32_t t = 0; t < n; ++t) {
      __m256 v[NV];
      for (int k = 0; k < NV; ++k) v[k] = _mm256_load_ps(vb + t * dp + 8 * k);
      for (int h = 0; h < NH; ++h) {
        const __m256 pb = _mm256_broadcast_ss(p + h * kRowTileLanes + t);
        for (int k = 0; k < NV; ++k) r[h][k] = _mm256_fmadd_ps(pb, v[k], r[h][k]);
      }
    }
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < NV; ++k) _mm256_store_ps(acc + h * dp + 8 * k, r[h][k]);
  }
  template <int NH>
  static inline void pv_heads(float* acc, size_t dp, const float* corr, const float* p, const float* vb, uint32_t n) {
    size_t i = 0;
    for (; i + 32 <= dp; i += 32) pv_chunk<NH, 4>(acc + i, dp, corr, p, vb + i, n);
    for (; i < dp; i += 8) pv_chunk<NH, 1>(acc + i, dp, corr, p, vb + i, n);
  }

  // 8 accumulators -> one vector: lane t = sum of a[t] (the transposing add tree of dots8).
  static inline __m256 tree8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6, __m256 a7) {
    const __m256 b0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m256 b1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    return _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
  }
  // Scores of two heads over the tile's rows (16, or fewer: quarters wholly past n are skipped and
  // left 0), 4 rows a pass, so each K load serves two FMAs: sa[0] rows 0-7 and sa[1] rows 8-15 of
  // head a, sb the same of head b.
  static inline void dots16x2(const float* qa, const float* qb, const float* kb, size_t dp, uint32_t n, __m256* sa, __m256* sb) {
    __m256 pass[4];  // lanes 0-3 head a, 4-7 head b, rows 4·quarter ..
    for (uint32_t quarter = 0; quarter < 4; ++quarter) {
      if (4 * quarter >= n) {
        pass[quarter] = _mm256_setzero_ps();
        continue;
      }
      const float* k4 = kb + static_cast<size_t>(4 * quarter) * dp;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (size_t i = 0; i < dp; i += 8) {
        const __m256 qva = _mm256_load_ps(qa + i), qvb = _mm256_load_ps(qb + i);
        const __m256 k0 = _mm256_load_ps(k4 + i), k1 = _mm256_load_ps(k4 + dp + i);
        const __m256 k2 = _mm256_load_ps(k4 + 2 * dp + i), k3 = _mm256_load_ps(k4 + 3 * dp + i);
        a0 = _mm256_fmadd_ps(qva, k0, a0);
        a1 = _mm256_fmadd_ps(qva, k1, a1);
        a2 = _mm256_fmadd_ps(qva, k2, a2);
        a3 = _mm256_fmadd_ps(qva, k3, a3);
        b0 = _mm256_fmadd_ps(qvb, k0, b0);
        b1 = _mm256_fmadd_ps(qvb, k1, b1);
        b2 = _mm256_fmadd_ps(qvb, k2, b2);
        b3 = _mm256_fmadd_ps(qvb, k3, b3);
      }
      pass[quarter] = tree8(a0, a1, a2, a3, b0, b1, b2, b3);
    }
    sa[0] = _mm256_permute2f128_ps(pass[0], pass[1], 0x20);
    sa[1] = _mm256_permute2f128_ps(pass[2], pass[3], 0x20);
    sb[0] = _mm256_permute2f128_ps(pass[0], pass[1], 0x31);
    sb[1] = _mm256_permute2f128_ps(pass[2], pass[3], 0x31);
  }

  // One tile for the nb heads of a batch: q (nb, dp), acc (nb, dp); m (16) running maxes, l (16,
  // 16) per-lane partial denominators, bad (16); kb / vb (16, dp) the tile's rows (rows n..15
  // zero); sc, vs (16) row scales (lanes n..15 zero). Scores two heads at a time; the correction
  // exp for 8 heads at once; P·V two heads at a time (8 accumulators + 4 V vectors of 16 registers).
  // Soft-capped lanes: cap · tanh(x / cap) per lane, scalar (the capped kernels only).
  static inline __m256 softcap(__m256 x, float cap) {
    alignas(32) float v[8];
    _mm256_store_ps(v, x);
    for (float& e : v) e = lh_attention_softcap(e, cap);
    return _mm256_load_ps(v);
  }
  static inline void heads_tile(const float* q, float* acc, uint32_t nb, const float* kb, const float* vb, size_t dp, uint32_t n,
                                const float* sc, const float* vs, float* m, float* l, bool* bad) {
    heads_tile_impl<false>(q, acc, nb, kb, vb, dp, n, sc, vs, m, l, bad, 0.0f);
  }
  // heads_tile with the scaled scores soft-capped (cap > 0) before the tail mask and the max.
  static inline void heads_tile_capped(const float* q, float* acc, uint32_t nb, const float* kb, const float* vb, size_t dp, uint32_t n,
                                       const float* sc, const float* vs, float* m, float* l, bool* bad, float cap) {
    heads_tile_impl<true>(q, acc, nb, kb, vb, dp, n, sc, vs, m, l, bad, cap);
  }
  template <bool kCap>
  static inline __attribute__((always_inline)) void heads_tile_impl(const float* q, float* acc, uint32_t nb, const float* kb, const float* vb,
                                                                    size_t dp, uint32_t n, const float* sc, const float* vs, float* m, float* l,
                                                                    bool* bad, float cap) {
    alignas(32) float p[kHeadBatchLanes * kRowTileLanes];  // (nb, 16) weights
    alignas(32) float corr[kHeadBatchLanes];               // (16) accumulator corrections
    alignas(32) float sub[kHeadBatchLanes];                // (16) what each head's scores are shifted by
    alignas(32) float tmax[kHeadBatchLanes];               // (16) each head's max over this tile
    __m256 s[kHeadBatchLanes][2];                          // (nb) scores: rows 0-7, 8-15
    uint32_t j = 0;
    for (; j + 2 <= nb; j += 2) dots16x2(q + j * dp, q + (j + 1) * dp, kb, dp, n, s[j], s[j + 1]);
    if (j < nb) {
      s[j][0] = dots8(q + j * dp, kb, dp);
      s[j][1] = n > 8 ? dots8(q + j * dp, kb + 8 * dp, dp) : _mm256_setzero_ps();
    }
    const __m256 sc0 = _mm256_load_ps(sc), sc1 = _mm256_load_ps(sc + 8);
    for (j = 0; j < kHeadBatchLanes; ++j) {
      if (j >= nb) {
        tmax[j] = -INFINITY;
        continue;
      }
      if constexpr (kCap) {
        s[j][0] = mask_tail(softcap(_mm256_mul_ps(s[j][0], sc0), cap), static_cast<int32_t>(n));
        s[j][1] = mask_tail(softcap(_mm256_mul_ps(s[j][1], sc1), cap), static_cast<int32_t>(n) - 8);
      } else {
        s[j][0] = mask_tail(_mm256_mul_ps(s[j][0], sc0), static_cast<int32_t>(n));  // rows past n: -inf, weight 0
        s[j][1] = mask_tail(_mm256_mul_ps(s[j][1], sc1), static_cast<int32_t>(n) - 8);
      }
      if (any_bad(s[j][0]) || any_bad(s[j][1])) bad[j] = true;
      tmax[j] = hmax(_mm256_max_ps(s[j][0], s[j][1]));
    }
    for (j = 0; j < kHeadBatchLanes; j += 8) {  // the step of (m, l) for 8 heads at once
      const __m256 mo = _mm256_load_ps(m + j);
      const __m256 mn = _mm256_max_ps(_mm256_load_ps(tmax + j), mo);  // a NaN tile max: that head is bad anyway
      // A head whose scores so far are all -inf: weights exp(s - 0) = 0, correction 1 (exp(-inf - -inf) would be NaN).
      const __m256 none = _mm256_cmp_ps(mn, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
      _mm256_store_ps(corr + j, _mm256_blendv_ps(exp(_mm256_sub_ps(mo, mn)), _mm256_set1_ps(1.0f), none));
      _mm256_store_ps(sub + j, _mm256_blendv_ps(mn, _mm256_setzero_ps(), none));
      _mm256_store_ps(m + j, mn);
    }
    for (j = 0; j < nb; ++j) {
      const __m256 sj = _mm256_set1_ps(sub[j]), cj = _mm256_set1_ps(corr[j]);
      __m256 p0 = exp(_mm256_sub_ps(s[j][0], sj)), p1 = exp(_mm256_sub_ps(s[j][1], sj));
      float* lj = l + j * kRowTileLanes;
      _mm256_store_ps(lj, _mm256_fmadd_ps(_mm256_load_ps(lj), cj, p0));
      _mm256_store_ps(lj + 8, _mm256_fmadd_ps(_mm256_load_ps(lj + 8), cj, p1));
      if (vs != nullptr) {
        p0 = _mm256_mul_ps(p0, _mm256_load_ps(vs));
        p1 = _mm256_mul_ps(p1, _mm256_load_ps(vs + 8));
      }
      _mm256_store_ps(p + j * kRowTileLanes, p0);
      _mm256_store_ps(p + j * kRowTileLanes + 8, p1);
    }
    j = 0;
    for (; j + 2 <= nb; j += 2) pv_heads<2>(acc + j * dp, dp, corr + j, p + j * kRowTileLanes, vb, n);
    for (; j < nb; ++j) pv_heads<1>(acc + j * dp, dp, corr + j, p + j * kRowTileLanes, vb, n);
  }
  // The softmax denominator of a head from its per-lane partials (16).
  static inline float denominator(const float* l) {
    const __m256 v = _mm256_add_ps(_mm256_load_ps(l), _mm256_load_ps(l + 8));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
  }
};
#pragma GCC pop_options
#endif

#ifdef LH_X86
// ---------------------------------------------------------------------------------------------
// Tile operations of the grouped kernel, AVX-512 (F, BW, VL, DQ) + FMA + F16C: 16 lanes, masked
// loads for row tails, one transposing add tree for 16 dot products. Per-function target
// attributes (not a pragma block: the fuzz build rewrites the one AVX2 pragma block for clang).
// Same contract and layout as Avx2Tile, rows padded to a multiple of 16.
// ---------------------------------------------------------------------------------------------
#define LH_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
// g++ 12 warns "__Y (may be) used uninitialized" inside its own AVX-512 headers wherever an intrinsic
// built on _mm512_undefined_ps (a deliberate self-initialised placeholder) is inlined: a false
// positive of the header, not of this code. Silenced for the AVX-512 code only (through
// exp_avx512 below).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
struct Avx512Tile {
  static constexpr uint32_t kLanes = 16;

  // lanes [0, k) of 16 (k >= 16: all). Masked loads only for row tails: on this Zen 5 a masked
  // load from memory made the contiguous full-attention pass 2x slower (MHA 32k: 27.7 vs 11.8 ms).
  static inline __mmask16 first_lanes(size_t k) { return k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << k) - 1); }

  LH_AVX512 static inline void widen(float* dst, const uint16_t* src, size_t d, size_t dp) {
    size_t i = 0;
    for (; i + 16 <= d; i += 16) _mm512_store_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    for (; i < dp; i += 16)
      _mm512_store_ps(dst + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_lanes(i < d ? d - i : 0), src + i)));
  }
  LH_AVX512 static inline void widen(float* dst, const float* src, size_t d, size_t dp) {
    size_t i = 0;
    for (; i + 16 <= d; i += 16) _mm512_store_ps(dst + i, _mm512_loadu_ps(src + i));
    for (; i < dp; i += 16) _mm512_store_ps(dst + i, _mm512_maskz_loadu_ps(first_lanes(i < d ? d - i : 0), src + i));
  }
  LH_AVX512 static inline void widen(float* dst, const int8_t* src, size_t d, size_t dp) {
    size_t i = 0;
    for (; i + 16 <= d; i += 16)
      _mm512_store_ps(dst + i, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)))));
    for (; i < dp; i += 16)
      _mm512_store_ps(dst + i, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(first_lanes(i < d ? d - i : 0), src + i))));
  }

  // Avx2Tile::exp on 16 lanes, the same bits (vscalefps multiplies by 2^n exactly, as the two
  // power-of-two multiplies there do, and the result range keeps both away from under/overflow).
  LH_AVX512 static inline __m512 exp(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.7228394f);
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    y = _mm512_scalef_ps(y, n);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
  }

  // 16 dot products: lane t = q · kb[t], kb rows t = 0..15 of dp floats. Accumulator s holds row
  // 4·(s % 4) + s / 4: the add tree below (512 -> 256 -> 128 bit folds, then an in-lane 4x4
  // transpose-add) leaves accumulator s in lane 4·(s % 4) + s / 4, i.e. every row in its own lane.
  LH_AVX512 static inline __m512 dots16(const float* q, const float* kb, size_t dp) {
    __m512 a[16];
    for (int s = 0; s < 16; ++s) a[s] = _mm512_setzero_ps();
    for (size_t i = 0; i < dp; i += 16) {
      const __m512 qv = _mm512_load_ps(q + i);
      for (int s = 0; s < 16; ++s) a[s] = _mm512_fmadd_ps(qv, _mm512_load_ps(kb + static_cast<size_t>(4 * (s % 4) + s / 4) * dp + i), a[s]);
    }
    return tree16(a);
  }

  // Scores of two heads over the tile's 16 rows at once: 8 rows a pass, accumulators for
  // (head a, rows r..r+7) and (head b, the same rows), so each K load serves two FMAs (one q load
  // per head per pass). The tree puts head a's 8 rows in lanes 0-7 and head b's in 8-15 (the same
  // slot order as dots16: slot s holds output lane 4·(s % 4) + s / 4); two passes are regrouped
  // into one vector a head.
  // The add (or max) tree: 16 vectors in, lane 4·(s % 4) + s / 4 of the result = the sum (max)
  // of the 16 lanes of a[s]. Each lane only ever combines lanes of one input vector.
  template <bool kMax>
  LH_AVX512 static inline __m512 op(__m512 x, __m512 y) { return kMax ? _mm512_max_ps(x, y) : _mm512_add_ps(x, y); }
  template <bool kMax = false>
  LH_AVX512 static inline __m512 tree16(const __m512* a) {
    __m512 b[8], c[4];
    for (int k = 0; k < 8; ++k)
      b[k] = op<kMax>(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44), _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    for (int k = 0; k < 4; ++k)
      c[k] = op<kMax>(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0x88), _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0xDD));
    const __m512 d0 = op<kMax>(_mm512_unpacklo_ps(c[0], c[1]), _mm512_unpackhi_ps(c[0], c[1]));
    const __m512 d1 = op<kMax>(_mm512_unpacklo_ps(c[2], c[3]), _mm512_unpackhi_ps(c[2], c[3]));
    return op<kMax>(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(d0), _mm512_castps_pd(d1))),
                    _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(d0), _mm512_castps_pd(d1))));
  }
  LH_AVX512 static inline void dots16x2(const float* qa, const float* qb, const float* kb, size_t dp, __m512* sa, __m512* sb) {
    __m512 pass[2];
    for (int half = 0; half < 2; ++half) {
      const float* k8 = kb + static_cast<size_t>(8 * half) * dp;
      __m512 a[16];
      for (int s = 0; s < 16; ++s) a[s] = _mm512_setzero_ps();
      for (size_t i = 0; i < dp; i += 16) {
        const __m512 qva = _mm512_load_ps(qa + i), qvb = _mm512_load_ps(qb + i);
        for (int lane = 0; lane < 8; ++lane) {  // output lane `lane` (head a) and lane + 8 (head b) hold row `lane`
          const __m512 kv = _mm512_load_ps(k8 + static_cast<size_t>(lane) * dp + i);
          const int sa_slot = 4 * (lane % 4) + lane / 4, sb_slot = 4 * ((lane + 8) % 4) + (lane + 8) / 4;
          a[sa_slot] = _mm512_fmadd_ps(qva, kv, a[sa_slot]);
          a[sb_slot] = _mm512_fmadd_ps(qvb, kv, a[sb_slot]);
        }
      }
      pass[half] = tree16(a);
    }
    *sa = _mm512_shuffle_f32x4(pass[0], pass[1], 0x44);  // head a: rows 0-7 | rows 8-15
    *sb = _mm512_shuffle_f32x4(pass[0], pass[1], 0xEE);  // head b
  }

  // acc of NH heads (rows of dp floats, dp apart) = acc · corr[h] + sum_t p[h][t] · vb[t], NV
  // vectors of each at a time in registers: each V load serves NH FMAs.
  template <int NH, int NV>
  LH_AVX512 static inline void pv_chunk(float* acc, size_t dp, const float* corr, const float* p, const float* vb, uint32_t n) {
    __m512 r[NH][NV];
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < NV; ++k) r[h][k] = _mm512_mul_ps(_mm512_load_ps(acc + h * dp + 16 * k), _mm512_set1_ps(corr[h]));
    for (uint32_t t = 0; t < n; ++t) {
      __m512 v[NV];
      for (int k = 0; k < NV; ++k) v[k] = _mm512_load_ps(vb + t * dp + 16 * k);
      for (int h = 0; h < NH; ++h) {
        const __m512 pb = _mm512_set1_ps(p[h * kRowTileLanes + t]);
        for (int k = 0; k < NV; ++k) r[h][k] = _mm512_fmadd_ps(pb, v[k], r[h][k]);
      }
    }
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < NV; ++k) _mm512_store_ps(acc + h * dp + 16 * k, r[h][k]);
  }
  template <int NH>
  LH_AVX512 static inline void pv_heads(float* acc, size_t dp, const float* corr, const float* p, const float* vb, uint32_t n) {
    size_t i = 0;
    for (; i + 64 <= dp; i += 64) pv_chunk<NH, 4>(acc + i, dp, corr, p, vb + i, n);
    for (; i < dp; i += 16) pv_chunk<NH, 1>(acc + i, dp, corr, p, vb + i, n);
  }

  // One tile for the nb heads of a batch: q (nb, dp), acc (nb, dp); m (16) running maxes, l (16,
  // 16) per-lane partial denominators, bad (16); kb / vb (16, dp) the tile's rows; sc, vs (16) row
  // scales. Scores two heads at a time; the online-softmax step for all heads at once where it is
  // per head (tile max by one max tree over the heads, one exp for every head's correction); the
  // weights' exp per head; P·V four heads at a time.
  LH_AVX512 static inline __m512 softcap(__m512 x, float cap) {
    alignas(64) float v[16];
    _mm512_store_ps(v, x);
    for (float& e : v) e = lh_attention_softcap(e, cap);
    return _mm512_load_ps(v);
  }
  LH_AVX512 static inline void heads_tile(const float* q, float* acc, uint32_t nb, const float* kb, const float* vb, size_t dp, uint32_t n,
                                          const float* sc, const float* vs, float* m, float* l, bool* bad) {
    heads_tile_impl<false>(q, acc, nb, kb, vb, dp, n, sc, vs, m, l, bad, 0.0f);
  }
  LH_AVX512 static inline void heads_tile_capped(const float* q, float* acc, uint32_t nb, const float* kb, const float* vb, size_t dp, uint32_t n,
                                                 const float* sc, const float* vs, float* m, float* l, bool* bad, float cap) {
    heads_tile_impl<true>(q, acc, nb, kb, vb, dp, n, sc, vs, m, l, bad, cap);
  }
  template <bool kCap>
  LH_AVX512 static inline __attribute__((always_inline)) void heads_tile_impl(const float* q, float* acc, uint32_t nb, const float* kb,
                                                                              const float* vb, size_t dp, uint32_t n, const float* sc,
                                                                              const float* vs, float* m, float* l, bool* bad, float cap) {
    alignas(64) float p[kHeadBatchLanes * kRowTileLanes];  // (nb, 16) weights
    alignas(64) float corr[kHeadBatchLanes];               // (16) accumulator corrections
    alignas(64) float sub[kHeadBatchLanes];                // (16) what each head's scores are shifted by
    __m512 s[kHeadBatchLanes];                             // (nb) scores, one vector a head
    __m512 slot[kHeadBatchLanes];                          // the same in max-tree slot order, -inf past nb
    uint32_t j = 0;
    for (; j + 2 <= nb; j += 2) dots16x2(q + j * dp, q + (j + 1) * dp, kb, dp, &s[j], &s[j + 1]);
    if (j < nb) s[j] = dots16(q + j * dp, kb, dp);
    const __m512 scv = _mm512_load_ps(sc), ninf = _mm512_set1_ps(-INFINITY), pinf = _mm512_set1_ps(INFINITY);
    const __mmask16 live = first_lanes(n);
    for (j = 0; j < kHeadBatchLanes; ++j) {
      if (j < nb) {
        if constexpr (kCap) s[j] = _mm512_mask_blend_ps(live, ninf, softcap(_mm512_mul_ps(s[j], scv), cap));
        else s[j] = _mm512_mask_blend_ps(live, ninf, _mm512_mul_ps(s[j], scv));  // rows past n: -inf, weight 0
        if ((_mm512_cmp_ps_mask(s[j], s[j], _CMP_UNORD_Q) | _mm512_cmp_ps_mask(s[j], pinf, _CMP_EQ_OQ)) != 0) bad[j] = true;
      }
      slot[4 * (j % 4) + j / 4] = j < nb ? s[j] : ninf;
    }
    const __m512 mo = _mm512_load_ps(m);
    const __m512 mn = _mm512_max_ps(tree16<true>(slot), mo);  // lane j: new running max of head j (a NaN lane: that head is bad)
    // A head whose scores so far are all -inf: weights exp(s - 0) = 0, correction 1 (exp(-inf - -inf) would be NaN).
    const __mmask16 none = _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ);
    _mm512_store_ps(corr, _mm512_mask_blend_ps(none, exp(_mm512_sub_ps(mo, mn)), _mm512_set1_ps(1.0f)));
    _mm512_store_ps(sub, _mm512_mask_blend_ps(none, mn, _mm512_setzero_ps()));
    _mm512_store_ps(m, mn);
    const __m512 vsv = vs != nullptr ? _mm512_load_ps(vs) : _mm512_set1_ps(1.0f);
    for (j = 0; j < nb; ++j) {
      __m512 pj = exp(_mm512_sub_ps(s[j], _mm512_set1_ps(sub[j])));
      _mm512_store_ps(l + j * kRowTileLanes, _mm512_fmadd_ps(_mm512_load_ps(l + j * kRowTileLanes), _mm512_set1_ps(corr[j]), pj));
      if (vs != nullptr) pj = _mm512_mul_ps(pj, vsv);
      _mm512_store_ps(p + j * kRowTileLanes, pj);
    }
    j = 0;
    for (; j + 4 <= nb; j += 4) pv_heads<4>(acc + j * dp, dp, corr + j, p + j * kRowTileLanes, vb, n);
    for (; j < nb; ++j) pv_heads<1>(acc + j * dp, dp, corr + j, p + j * kRowTileLanes, vb, n);
  }
  // The softmax denominator of a head from its per-lane partials (16).
  LH_AVX512 static inline float denominator(const float* l) { return _mm512_reduce_add_ps(_mm512_load_ps(l)); }
};
#endif

// Max that propagates NaN (plain `a > b ? a : b` would drop a NaN score and, with it, the
// NaN the reference produces for that head).
inline float max_nan(float a, float b) {
  if (a != a || b != b) return NAN;
  return a > b ? a : b;
}

// Asks for rows rows[from..to) of a head block (each d elements of T) to be brought into cache.
// Into L2, not L1 (locality 2: prefetcht1): on the Zen 5 host a prefetcht0 (locality 3) or
// prefetchnta of the next tile's scattered rows did nothing measurable, while prefetcht1 made a
// listed 10% of 32,768 rows from cold caches 2.3x faster on GQA 32/4 (1.09 -> 0.48 ms a layer, one
// thread) and 2.6x on MHA (6.7 -> 2.6 ms); asking 2-8 tiles ahead did no better than one. A row
// waiting in L2 costs the tile's loads a few cycles, on any x86.
constexpr int kRowPrefetchLocality = 2;
template <class T>
inline void prefetch_rows(const T* base, const int32_t* rows, uint32_t from, uint32_t to, size_t d) {
  const size_t bytes = d * sizeof(T);
  for (uint32_t t = from; t < to; ++t) {
    const char* r = reinterpret_cast<const char*>(base + static_cast<size_t>(rows[t]) * d);
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(r + off, 0, kRowPrefetchLocality);
  }
}

// Asks for the int8 scales of rows rows[from..to) (one float each, scattered like the rows).
inline void prefetch_scales(const float* base, const int32_t* rows, uint32_t from, uint32_t to) {
  for (uint32_t t = from; t < to; ++t) __builtin_prefetch(base + rows[t], 0, kRowPrefetchLocality);
}

// The outputs of KV head g's query heads from their accumulators (out), maxes m and denominators l:
// out · 1/l, the sink (if any) joining l as e^{sink − m}. A head with m = −inf (no finite score) is
// NaN: without a sink through 0 · (1/0), with one explicitly.
inline void finish_online(const lh_attention_args* a, uint32_t g, uint32_t group, const float* m, const float* l) {
  const size_t d = a->head_dim;
  for (uint32_t j = 0; j < group; ++j) {
    const size_t h = static_cast<size_t>(g) * group + j;
    float* out = a->out + h * d;
    float den = l[j];
    if (a->sinks != nullptr) den = m[j] == -INFINITY ? NAN : den + std::exp(a->sinks[h] - m[j]);
    const float inv = 1.0f / den;
    for (size_t i = 0; i < d; ++i) out[i] *= inv;
  }
}

// ---------------------------------------------------------------------------------------------
// The driver: online softmax over tiles, per KV head, for each query head of its group.
// Per query head h: running max m[h], running sum l[h], unnormalised accumulator out[h].
// T = int8_t: row r of head g also has scales ksg[r], vsg[r]; the score is dot * ksg[r] * scale
// and the value row is added with weight p * vsg[r]. For fp16/fp32 the scales are not read and
// the arithmetic is exactly that of the unscaled kernel.
// ---------------------------------------------------------------------------------------------
template <class Ops, class T, bool kIndexed>
inline __attribute__((always_inline)) void decode_online(const lh_attention_args* a) {
  constexpr bool kInt8 = std::is_same<T, int8_t>::value;
  const uint32_t group = a->heads / a->kv_heads;
  const size_t d = a->head_dim;
  const size_t scale_stride = a->head_stride / d;  // int8: scales per KV head (rows per head stride)
  float m[LH_MAX_HEADS];  // (group) running max of the heads of one group
  float l[LH_MAX_HEADS];  // (group) running softmax denominator
  float s[kTile];         // (tile) scores of one head over one tile
  for (uint32_t g = 0; g < a->kv_heads; ++g) {
    const T* kg = static_cast<const T*>(a->k) + g * a->head_stride;  // (tokens, head_dim)
    const T* vg = static_cast<const T*>(a->v) + g * a->head_stride;  // (tokens, head_dim)
    const int32_t* rows = kIndexed ? a->rows + g * a->rows_stride : nullptr;  // (tokens) rows of this head
    const float* ksg = kInt8 ? a->k_scale + g * scale_stride : nullptr;  // (head_stride / head_dim) int8 key scales
    const float* vsg = kInt8 ? a->v_scale + g * scale_stride : nullptr;  // (head_stride / head_dim) int8 value scales
    for (uint32_t j = 0; j < group; ++j) {
      m[j] = -INFINITY;
      l[j] = 0.0f;
      float* out = a->out + (static_cast<size_t>(g) * group + j) * d;
      for (size_t i = 0; i < d; ++i) out[i] = 0.0f;
    }
    if (kIndexed) prefetch_rows(kg, rows, 0, a->tokens < kTile ? a->tokens : kTile, d);
    for (uint32_t t0 = 0; t0 < a->tokens; t0 += kTile) {
      const uint32_t n = a->tokens - t0 < kTile ? a->tokens - t0 : kTile;
      if (kIndexed) {
        // Listed rows are scattered: the hardware prefetcher cannot guess them, so ask for this
        // tile's values and the next tile's keys now; the dot products hide their latency.
        prefetch_rows(vg, rows, t0, t0 + n, d);
        const uint32_t next_end = t0 + n + kTile < a->tokens ? t0 + n + kTile : a->tokens;
        prefetch_rows(kg, rows, t0 + n, next_end, d);
        if constexpr (kInt8) {
          prefetch_scales(vsg, rows, t0, t0 + n);
          prefetch_scales(ksg, rows, t0 + n, next_end);
        }
      }
      for (uint32_t j = 0; j < group; ++j) {
        const size_t h = static_cast<size_t>(g) * group + j;
        const float* q = a->q + h * d;  // (head_dim)
        float* out = a->out + h * d;    // (head_dim)
        float tile_max = -INFINITY;
        for (uint32_t t = 0; t < n; ++t) {
          const size_t r = kIndexed ? static_cast<size_t>(rows[t0 + t]) : t0 + t;
          if constexpr (kInt8) s[t] = Ops::dot(q, kg + r * d, d) * ksg[r] * a->scale;
          else s[t] = Ops::dot(q, kg + r * d, d) * a->scale;
          tile_max = max_nan(tile_max, s[t]);
        }
        const float m_new = max_nan(m[j], tile_max);
        // Everything so far is -inf: weights are 0 (not exp(-inf - -inf) = NaN); if the whole
        // head stays -inf, l stays 0 and the final 0 * (1/0) gives NaN like the reference.
        const bool none = m_new == -INFINITY;
        const float corr = none ? 1.0f : std::exp(m[j] - m_new);
        if (corr != 1.0f) {
          l[j] *= corr;
          Ops::scale(out, corr, d);
        }
        for (uint32_t t = 0; t < n; ++t) {
          const float p = none ? 0.0f : std::exp(s[t] - m_new);
          l[j] += p;
          const size_t r = kIndexed ? static_cast<size_t>(rows[t0 + t]) : t0 + t;
          Ops::axpy(out, kInt8 ? p * vsg[r] : p, vg + r * d, d);
        }
        m[j] = m_new;
      }
    }
    finish_online(a, g, group, m, l);
  }
}

// ---------------------------------------------------------------------------------------------
// decode_online with a sliding window and/or soft-capped logits (attention_params.h): each tile
// takes the next kTile rows of the list (or of 0..tokens−1) that lie inside the window, and each
// score is capped after scaling. Otherwise the same online softmax; no prefetching (the window
// keeps the rows few and recent).
// ---------------------------------------------------------------------------------------------
template <class Ops, class T, bool kIndexed>
inline __attribute__((always_inline)) void decode_online_ext(const lh_attention_args* a) {
  constexpr bool kInt8 = std::is_same<T, int8_t>::value;
  const uint32_t group = a->heads / a->kv_heads;
  const size_t d = a->head_dim;
  const size_t scale_stride = a->head_stride / d;  // rows per KV head stride (int8 scales, positions)
  const bool capped = a->softcap != 0.0f;
  const int64_t newest = a->query_position, oldest = newest - static_cast<int64_t>(a->window);  // visible: (oldest, newest]
  float m[LH_MAX_HEADS];  // (group) running max
  float l[LH_MAX_HEADS];  // (group) running denominator
  float s[kTile];         // (tile) scores of one head
  size_t vis[kTile];      // (tile) the tile's rows, inside the window
  for (uint32_t g = 0; g < a->kv_heads; ++g) {
    const T* kg = static_cast<const T*>(a->k) + g * a->head_stride;
    const T* vg = static_cast<const T*>(a->v) + g * a->head_stride;
    const int32_t* rows = kIndexed ? a->rows + g * a->rows_stride : nullptr;
    const float* ksg = kInt8 ? a->k_scale + g * scale_stride : nullptr;
    const float* vsg = kInt8 ? a->v_scale + g * scale_stride : nullptr;
    const int32_t* pg = a->window != 0 ? a->positions + g * scale_stride : nullptr;  // (rows) positions
    for (uint32_t j = 0; j < group; ++j) {
      m[j] = -INFINITY;
      l[j] = 0.0f;
      float* out = a->out + (static_cast<size_t>(g) * group + j) * d;
      for (size_t i = 0; i < d; ++i) out[i] = 0.0f;
    }
    uint32_t src = 0;
    for (;;) {
      uint32_t n = 0;
      while (n < kTile && src < a->tokens) {
        const size_t r = kIndexed ? static_cast<size_t>(rows[src]) : lh_attention_token_row(a, src);
        ++src;
        if (pg != nullptr && (pg[r] <= oldest || pg[r] > newest)) continue;
        vis[n++] = r;
      }
      if (n == 0) break;
      for (uint32_t j = 0; j < group; ++j) {
        const size_t h = static_cast<size_t>(g) * group + j;
        const float* q = a->q + h * d;
        float* out = a->out + h * d;
        float tile_max = -INFINITY;
        for (uint32_t t = 0; t < n; ++t) {
          const size_t r = vis[t];
          if constexpr (kInt8) s[t] = Ops::dot(q, kg + r * d, d) * ksg[r] * a->scale;
          else s[t] = Ops::dot(q, kg + r * d, d) * a->scale;
          if (capped) s[t] = lh_attention_softcap(s[t], a->softcap);
          tile_max = max_nan(tile_max, s[t]);
        }
        const float m_new = max_nan(m[j], tile_max);
        const bool none = m_new == -INFINITY;
        const float corr = none ? 1.0f : std::exp(m[j] - m_new);
        if (corr != 1.0f) {
          l[j] *= corr;
          Ops::scale(out, corr, d);
        }
        for (uint32_t t = 0; t < n; ++t) {
          const float p = none ? 0.0f : std::exp(s[t] - m_new);
          l[j] += p;
          Ops::axpy(out, kInt8 ? p * vsg[vis[t]] : p, vg + vis[t] * d, d);
        }
        m[j] = m_new;
      }
    }
    finish_online(a, g, group, m, l);
  }
}

// ---------------------------------------------------------------------------------------------
// The grouped driver: per KV head g, its query heads in batches of up to kHeadBatch, over tiles
// of kRowTile rows. Each tile's K and V rows are read and widened to fp32 once (into stack tiles)
// and serve every head of the batch; per head the tile's scores are computed 8 or 16 at a time,
// the online-softmax step runs on whole vectors with a vector exp, and the tile's P·V is added
// into the head's accumulator (a stack row, written to out only at the end). What one head
// computes depends only on its own q, the rows and their order: not on the batch, the thread or
// whether the rows came through a list, so threads and listed rows give the same bits.
// T = int8_t: score = dot · (k_scale[r] · scale), weight p · v_scale[r].
// Non-finite: a NaN or +inf score marks the head `bad` (its output is NaN, like the reference);
// a head whose scores are all -inf ends with m = -inf and is NaN too; -inf scores get weight 0.
// ---------------------------------------------------------------------------------------------
constexpr uint32_t kRowTile = kRowTileLanes;      // rows per tile: 16 scores a head, 2 AVX2 / 1 AVX-512 vector
constexpr uint32_t kHeadBatch = kHeadBatchLanes;  // query heads of one KV head sharing each tile (a GQA group)
constexpr uint32_t kTileMaxDim = 256;  // the grouped kernels' head_dim limit (stack tiles); above: per-head kernel

// One tile of the grouped drivers: rows r(0) .. r(n−1) of a KV head widened to fp32 into kb / vb
// (kRowTile rows of dp floats), with each row's score scale (int8: k_scale · scale) and value
// scale; rows n .. kRowTile−1 zeroed in kb with scales 0 (the score vectors read them).
template <class Ops, class T, class RowOf>
inline __attribute__((always_inline)) void fill_tile(const lh_attention_args* a, const T* kg, const T* vg, const float* ksg, const float* vsg,
                                                     uint32_t n, RowOf row_of, size_t dp, float* kb, float* vb, float* sc, float* vs) {
  constexpr bool kInt8 = std::is_same<T, int8_t>::value;
  const size_t d = a->head_dim;
  for (uint32_t t = 0; t < n; ++t) {
    const size_t r = row_of(t);
    Ops::widen(kb + t * dp, kg + r * d, d, dp);
    Ops::widen(vb + t * dp, vg + r * d, d, dp);
    sc[t] = kInt8 ? ksg[r] * a->scale : a->scale;
    vs[t] = kInt8 ? vsg[r] : 1.0f;
  }
  for (uint32_t t = n; t < kRowTile; ++t) {
    for (size_t i = 0; i < dp; ++i) kb[t * dp + i] = 0.0f;
    sc[t] = 0.0f;
    vs[t] = 0.0f;
  }
}

// A grouped head's output (head_dim floats) from its accumulator (dp floats) and softmax state:
// NaN for a head that saw a NaN or +inf score or only −inf ones, like the reference.
// sink: the head's sink logit (joins the denominator as e^{sink − m}), or null.
template <class Ops>
inline __attribute__((always_inline)) void finish_head(float* out, const float* acc, size_t d, float m, const float* l, bool bad,
                                                       const float* sink) {
  if (bad || m == -INFINITY) {
    for (size_t i = 0; i < d; ++i) out[i] = NAN;
    return;
  }
  float den = Ops::denominator(l);
  if (sink != nullptr) den += std::exp(*sink - m);
  const float inv = 1.0f / den;
  for (size_t i = 0; i < d; ++i) out[i] = acc[i] * inv;
}

template <class Ops, class T, bool kIndexed>
inline __attribute__((always_inline)) void decode_grouped(const lh_attention_args* a) {
  constexpr bool kInt8 = std::is_same<T, int8_t>::value;
  constexpr size_t L = Ops::kLanes;
  const uint32_t group = a->heads / a->kv_heads;
  const size_t d = a->head_dim;
  const size_t dp = (d + L - 1) / L * L;           // padded row length of the stack tiles
  const size_t scale_stride = a->head_stride / d;  // int8: scales per KV head (rows per head stride)
  alignas(64) float kb[kRowTile * kTileMaxDim];    // (kRowTile, dp) this tile's K rows, fp32, zero padded
  alignas(64) float vb[kRowTile * kTileMaxDim];    // (kRowTile, dp) this tile's V rows
  alignas(64) float qb[kHeadBatch * kTileMaxDim];  // (batch heads, dp) q of the batch, zero padded
  alignas(64) float acc[kHeadBatch * kTileMaxDim]; // (batch heads, dp) unnormalised outputs
  alignas(64) float sc[kRowTile];                  // (kRowTile) score scale of each row (int8: k_scale · scale)
  alignas(64) float vs[kRowTile];                  // (kRowTile) int8 value scale of each row
  alignas(64) float m[kHeadBatch];                 // (batch heads) running max
  alignas(64) float l[kHeadBatch * kRowTile];      // (batch heads, 16) running denominator, as Ops keeps it (Ops::denominator)
  bool bad[kHeadBatch];                            // (batch heads) a NaN or +inf score seen
  for (uint32_t g = 0; g < a->kv_heads; ++g) {
    const T* kg = static_cast<const T*>(a->k) + g * a->head_stride;  // (rows, head_dim)
    const T* vg = static_cast<const T*>(a->v) + g * a->head_stride;  // (rows, head_dim)
    const int32_t* rows = kIndexed ? a->rows + g * a->rows_stride : nullptr;  // (tokens) rows of this head
    const float* ksg = kInt8 ? a->k_scale + g * scale_stride : nullptr;  // (head_stride / head_dim) int8 key scales
    const float* vsg = kInt8 ? a->v_scale + g * scale_stride : nullptr;  // (head_stride / head_dim) int8 value scales
    for (uint32_t h0 = 0; h0 < group; h0 += kHeadBatch) {
      const uint32_t nb = group - h0 < kHeadBatch ? group - h0 : kHeadBatch;
      const size_t head0 = static_cast<size_t>(g) * group + h0;  // first query head of the batch
      for (uint32_t j = 0; j < nb; ++j) {
        const float* q = a->q + (head0 + j) * d;
        for (size_t i = 0; i < dp; ++i) {
          qb[j * dp + i] = i < d ? q[i] : 0.0f;
          acc[j * dp + i] = 0.0f;
        }
      }
      for (uint32_t j = 0; j < kHeadBatch; ++j) {  // all 16: the AVX-512 step reads every lane
        m[j] = -INFINITY;
        for (uint32_t i = 0; i < kRowTile; ++i) l[j * kRowTile + i] = 0.0f;
        bad[j] = false;
      }
      if (kIndexed) {
        const uint32_t first = a->tokens < kRowTile ? a->tokens : kRowTile;
        prefetch_rows(kg, rows, 0, first, d);
        prefetch_rows(vg, rows, 0, first, d);
      }
      for (uint32_t t0 = 0; t0 < a->tokens; t0 += kRowTile) {
        const uint32_t n = a->tokens - t0 < kRowTile ? a->tokens - t0 : kRowTile;
        if (kIndexed) {
          // Listed rows are scattered: the hardware prefetcher cannot guess them, so ask for the
          // next tile's rows now; this tile's arithmetic hides their latency.
          const uint32_t next_end = t0 + n + kRowTile < a->tokens ? t0 + n + kRowTile : a->tokens;
          prefetch_rows(kg, rows, t0 + n, next_end, d);
          prefetch_rows(vg, rows, t0 + n, next_end, d);
          if constexpr (kInt8) {
            prefetch_scales(ksg, rows, t0 + n, next_end);
            prefetch_scales(vsg, rows, t0 + n, next_end);
          }
        }
        fill_tile<Ops>(a, kg, vg, ksg, vsg, n, [&](uint32_t t) { return kIndexed ? static_cast<size_t>(rows[t0 + t]) : t0 + t; }, dp, kb, vb, sc, vs);
        Ops::heads_tile(qb, acc, nb, kb, vb, dp, n, sc, kInt8 ? vs : nullptr, m, l, bad);
      }
      for (uint32_t j = 0; j < nb; ++j)
        finish_head<Ops>(a->out + (head0 + j) * d, acc + j * dp, d, m[j], l + j * kRowTile, bad[j], a->sinks != nullptr ? a->sinks + head0 + j : nullptr);
    }
  }
}

// decode_grouped with a sliding window and/or soft-capped logits: each tile takes the next kRowTile
// rows of the list (or of 0..tokens−1) inside the window; heads_tile caps the scaled scores.
template <class Ops, class T, bool kIndexed, bool kCap>
inline __attribute__((always_inline)) void decode_grouped_ext(const lh_attention_args* a) {
  constexpr bool kInt8 = std::is_same<T, int8_t>::value;
  constexpr size_t L = Ops::kLanes;
  const uint32_t group = a->heads / a->kv_heads;
  const size_t d = a->head_dim;
  const size_t dp = (d + L - 1) / L * L;
  const size_t scale_stride = a->head_stride / d;
  const int64_t newest = a->query_position, oldest = newest - static_cast<int64_t>(a->window);  // visible: (oldest, newest]
  alignas(64) float kb[kRowTile * kTileMaxDim];
  alignas(64) float vb[kRowTile * kTileMaxDim];
  alignas(64) float qb[kHeadBatch * kTileMaxDim];
  alignas(64) float acc[kHeadBatch * kTileMaxDim];
  alignas(64) float sc[kRowTile];
  alignas(64) float vs[kRowTile];
  alignas(64) float m[kHeadBatch];
  alignas(64) float l[kHeadBatch * kRowTile];
  bool bad[kHeadBatch];
  size_t vis[kRowTile];  // (tile) the tile's rows, inside the window
  for (uint32_t g = 0; g < a->kv_heads; ++g) {
    const T* kg = static_cast<const T*>(a->k) + g * a->head_stride;
    const T* vg = static_cast<const T*>(a->v) + g * a->head_stride;
    const int32_t* rows = kIndexed ? a->rows + g * a->rows_stride : nullptr;
    const float* ksg = kInt8 ? a->k_scale + g * scale_stride : nullptr;
    const float* vsg = kInt8 ? a->v_scale + g * scale_stride : nullptr;
    const int32_t* pg = a->window != 0 ? a->positions + g * scale_stride : nullptr;
    for (uint32_t h0 = 0; h0 < group; h0 += kHeadBatch) {
      const uint32_t nb = group - h0 < kHeadBatch ? group - h0 : kHeadBatch;
      const size_t head0 = static_cast<size_t>(g) * group + h0;
      for (uint32_t j = 0; j < nb; ++j) {
        const float* q = a->q + (head0 + j) * d;
        for (size_t i = 0; i < dp; ++i) {
          qb[j * dp + i] = i < d ? q[i] : 0.0f;
          acc[j * dp + i] = 0.0f;
        }
      }
      for (uint32_t j = 0; j < kHeadBatch; ++j) {
        m[j] = -INFINITY;
        for (uint32_t i = 0; i < kRowTile; ++i) l[j * kRowTile + i] = 0.0f;
        bad[j] = false;
      }
      uint32_t src = 0;
      for (;;) {
        uint32_t n = 0;
        while (n < kRowTile && src < a->tokens) {
          const size_t r = kIndexed ? static_cast<size_t>(rows[src]) : lh_attention_token_row(a, src);
          ++src;
          if (pg != nullptr && (pg[r] <= oldest || pg[r] > newest)) continue;
          vis[n++] = r;
        }
        if (n == 0) break;
        fill_tile<Ops>(a, kg, vg, ksg, vsg, n, [&](uint32_t t) { return vis[t]; }, dp, kb, vb, sc, vs);
        if constexpr (kCap) Ops::heads_tile_capped(qb, acc, nb, kb, vb, dp, n, sc, kInt8 ? vs : nullptr, m, l, bad, a->softcap);
        else Ops::heads_tile(qb, acc, nb, kb, vb, dp, n, sc, kInt8 ? vs : nullptr, m, l, bad);
      }
      for (uint32_t j = 0; j < nb; ++j)
        finish_head<Ops>(a->out + (head0 + j) * d, acc + j * dp, d, m[j], l + j * kRowTile, bad[j], a->sinks != nullptr ? a->sinks + head0 + j : nullptr);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Causal prefill on the grouped driver: the chunk's queries of one KV head share its rows. For KV
// head g the "virtual heads" are (query i, head j of g's group), i major; batches of kHeadBatch of
// them walk the rows once: each tile is widened once and serves every virtual head of the batch
// that reaches it, where decode-per-query read it once per query. A virtual head of query i stops
// at its own prefix (tokens − queries + i + 1 rows); heads that end inside a tile run that tile
// with their own n (tokens nondecrease along the batch, so equal n are runs). Every head meets the
// same tiles with the same n in the same order as its own decode (decode_grouped), and heads_tile
// computes each head from its own lanes only (rows past n are −inf before the max, and P·V stops
// at n), so each query's output is decode's bit for bit, whatever the batch or thread.
// Batches first, first + step, ... (of every KV head) run here.
// ---------------------------------------------------------------------------------------------
template <class Ops, class T, bool kCap>
inline __attribute__((always_inline)) void prefill_grouped(const lh_attention_args* a, uint32_t queries, uint32_t first, uint32_t step) {
  constexpr bool kInt8 = std::is_same<T, int8_t>::value;
  constexpr size_t L = Ops::kLanes;
  const uint32_t group = a->heads / a->kv_heads;
  const size_t d = a->head_dim;
  const size_t dp = (d + L - 1) / L * L;
  const size_t width = static_cast<size_t>(a->heads) * d;  // floats per query token in q and out
  const size_t scale_stride = a->head_stride / d;
  const uint32_t before = a->tokens - queries;              // rows before the chunk's first token
  const uint64_t virtual_heads = static_cast<uint64_t>(queries) * group;  // per KV head
  const uint64_t batches = (virtual_heads + kHeadBatch - 1) / kHeadBatch;
  alignas(64) float kb[kRowTile * kTileMaxDim];    // (kRowTile, dp) this tile's K rows, fp32, zero padded
  alignas(64) float vb[kRowTile * kTileMaxDim];    // (kRowTile, dp) this tile's V rows
  alignas(64) float qb[kHeadBatch * kTileMaxDim];  // (batch heads, dp) q of the batch's virtual heads
  alignas(64) float acc[kHeadBatch * kTileMaxDim]; // (batch heads, dp) unnormalised outputs
  alignas(64) float sc[kRowTile];                  // (kRowTile) score scale of each row
  alignas(64) float vs[kRowTile];                  // (kRowTile) int8 value scale of each row
  alignas(64) float m[kHeadBatch];                 // (batch heads) running max
  alignas(64) float l[kHeadBatch * kRowTile];      // (batch heads, 16) running denominators
  bool bad[kHeadBatch];                            // (batch heads) a NaN or +inf score seen
  alignas(64) float run_m[kHeadBatch];             // a run's state at lane 0 (heads_tile reads m as one aligned vector)
  alignas(64) float run_l[kHeadBatch * kRowTile];
  bool run_bad[kHeadBatch];
  uint32_t rows_of[kHeadBatch];                    // (batch heads) rows each virtual head attends
  size_t at[kHeadBatch];                           // (batch heads) float offset of its q and out
  uint32_t head_of[kHeadBatch];                    // (batch heads) its query head (for its sink)
  for (uint32_t g = 0; g < a->kv_heads; ++g) {
    const T* kg = static_cast<const T*>(a->k) + g * a->head_stride;  // (rows, head_dim)
    const T* vg = static_cast<const T*>(a->v) + g * a->head_stride;
    const float* ksg = kInt8 ? a->k_scale + g * scale_stride : nullptr;
    const float* vsg = kInt8 ? a->v_scale + g * scale_stride : nullptr;
    for (uint64_t b = first; b < batches; b += step) {
      const uint64_t v0 = b * kHeadBatch;
      const uint32_t nb = static_cast<uint32_t>(virtual_heads - v0 < kHeadBatch ? virtual_heads - v0 : kHeadBatch);
      for (uint32_t j = 0; j < nb; ++j) {
        const uint64_t v = v0 + j;
        const uint32_t i = static_cast<uint32_t>(v / group), h = static_cast<uint32_t>(v % group);
        rows_of[j] = before + i + 1;
        at[j] = i * width + (static_cast<size_t>(g) * group + h) * d;
        head_of[j] = g * group + h;
        for (size_t e = 0; e < dp; ++e) {
          qb[j * dp + e] = e < d ? a->q[at[j] + e] : 0.0f;
          acc[j * dp + e] = 0.0f;
        }
      }
      for (uint32_t j = 0; j < kHeadBatch; ++j) {
        m[j] = -INFINITY;
        for (uint32_t e = 0; e < kRowTile; ++e) l[j * kRowTile + e] = 0.0f;
        bad[j] = false;
      }
      const uint32_t last = rows_of[nb - 1];
      for (uint32_t t0 = 0; t0 < last; t0 += kRowTile) {
        const uint32_t n_tile = last - t0 < kRowTile ? last - t0 : kRowTile;
        fill_tile<Ops>(a, kg, vg, ksg, vsg, n_tile, [&](uint32_t t) { return static_cast<size_t>(t0 + t); }, dp, kb, vb, sc, vs);
        uint32_t j = 0;
        while (j < nb && rows_of[j] <= t0) ++j;  // heads whose prefix ended before this tile
        while (j < nb) {
          const uint32_t n = rows_of[j] - t0 < kRowTile ? rows_of[j] - t0 : kRowTile;
          uint32_t end = j + 1;
          while (end < nb && (rows_of[end] - t0 < kRowTile ? rows_of[end] - t0 : kRowTile) == n) ++end;
          if (j == 0 && end == nb) {
            if constexpr (kCap) Ops::heads_tile_capped(qb, acc, nb, kb, vb, dp, n, sc, kInt8 ? vs : nullptr, m, l, bad, a->softcap);
        else Ops::heads_tile(qb, acc, nb, kb, vb, dp, n, sc, kInt8 ? vs : nullptr, m, l, bad);
          } else {
            const uint32_t rn = end - j;
            for (uint32_t k = 0; k < kHeadBatch; ++k) run_m[k] = k < rn ? m[j + k] : -INFINITY;
            for (uint32_t k = 0; k < rn; ++k) {
              for (uint32_t e = 0; e < kRowTile; ++e) run_l[k * kRowTile + e] = l[(j + k) * kRowTile + e];
              run_bad[k] = bad[j + k];
            }
            if constexpr (kCap) Ops::heads_tile_capped(qb + j * dp, acc + j * dp, rn, kb, vb, dp, n, sc, kInt8 ? vs : nullptr, run_m, run_l, run_bad, a->softcap);
            else Ops::heads_tile(qb + j * dp, acc + j * dp, rn, kb, vb, dp, n, sc, kInt8 ? vs : nullptr, run_m, run_l, run_bad);
            for (uint32_t k = 0; k < rn; ++k) {
              m[j + k] = run_m[k];
              for (uint32_t e = 0; e < kRowTile; ++e) l[(j + k) * kRowTile + e] = run_l[k * kRowTile + e];
              bad[j + k] = run_bad[k];
            }
          }
          j = end;
        }
      }
      for (uint32_t j = 0; j < nb; ++j)
        finish_head<Ops>(a->out + at[j], acc + j * dp, d, m[j], l + j * kRowTile, bad[j], a->sinks != nullptr ? a->sinks + head_of[j] : nullptr);
    }
  }
}

template <class Ops, bool kCap = false>
inline __attribute__((always_inline)) void prefill_grouped_typed(const lh_attention_args* a, uint32_t queries, uint32_t first, uint32_t step) {
  switch (a->kv_type) {
    case LH_KV_F32: prefill_grouped<Ops, float, kCap>(a, queries, first, step); break;
    case LH_KV_I8: prefill_grouped<Ops, int8_t, kCap>(a, queries, first, step); break;
    default: prefill_grouped<Ops, uint16_t, kCap>(a, queries, first, step); break;
  }
}

template <class Ops, bool kIndexed>
inline __attribute__((always_inline)) void run_grouped_typed(const lh_attention_args* a) {
  switch (a->kv_type) {
    case LH_KV_F32: decode_grouped<Ops, float, kIndexed>(a); break;
    case LH_KV_I8: decode_grouped<Ops, int8_t, kIndexed>(a); break;
    default: decode_grouped<Ops, uint16_t, kIndexed>(a); break;
  }
}

// One instantiation per (row operations, element type, listed rows or not).
template <class Ops, bool kIndexed>
inline __attribute__((always_inline)) void run_typed(const lh_attention_args* a) {
  switch (a->kv_type) {
    case LH_KV_F32: decode_online<Ops, float, kIndexed>(a); break;
    case LH_KV_I8: decode_online<Ops, int8_t, kIndexed>(a); break;
    default: decode_online<Ops, uint16_t, kIndexed>(a); break;
  }
}

// The window / soft-cap variants (sinks alone run the plain kernels). They are compiled as functions
// of their own (the run_*_ext below, never inlined), so the plain kernels' functions are exactly what
// they were before the variants existed: the same code, the same inlining.
inline bool needs_ext(const lh_attention_args* a) { return a->window != 0 || a->softcap != 0.0f; }

template <class Ops, bool kIndexed>
inline __attribute__((always_inline)) void run_grouped_ext(const lh_attention_args* a) {
  const bool cap = a->softcap != 0.0f;
  switch (a->kv_type) {
    case LH_KV_F32: cap ? decode_grouped_ext<Ops, float, kIndexed, true>(a) : decode_grouped_ext<Ops, float, kIndexed, false>(a); break;
    case LH_KV_I8: cap ? decode_grouped_ext<Ops, int8_t, kIndexed, true>(a) : decode_grouped_ext<Ops, int8_t, kIndexed, false>(a); break;
    default: cap ? decode_grouped_ext<Ops, uint16_t, kIndexed, true>(a) : decode_grouped_ext<Ops, uint16_t, kIndexed, false>(a); break;
  }
}

template <class Ops, bool kIndexed>
inline __attribute__((always_inline)) void run_typed_ext(const lh_attention_args* a) {
  switch (a->kv_type) {
    case LH_KV_F32: decode_online_ext<Ops, float, kIndexed>(a); break;
    case LH_KV_I8: decode_online_ext<Ops, int8_t, kIndexed>(a); break;
    default: decode_online_ext<Ops, uint16_t, kIndexed>(a); break;
  }
}

__attribute__((noinline)) void run_portable_ext(const lh_attention_args* a) {
  if (a->rows != nullptr) run_typed_ext<PortableOps, true>(a);
  else run_typed_ext<PortableOps, false>(a);
}

void run_portable(const lh_attention_args* a) {
  if (needs_ext(a)) run_portable_ext(a);
  else if (a->rows != nullptr) run_typed<PortableOps, true>(a);
  else run_typed<PortableOps, false>(a);
}

#ifdef LH_X86
// The previous AVX2 kernel: per (row, head) a dot, a scalar exp and an axpy. LH_ATTN_AVX2_PER_HEAD,
// the grouped kernels' fallback above kTileMaxDim, and the baseline bench/attention-kernel.mjs
// measures against.
__attribute__((target("avx2,fma,f16c"), noinline)) void run_avx2_per_head_ext(const lh_attention_args* a) {
  if (a->rows != nullptr) run_typed_ext<Avx2Ops, true>(a);
  else run_typed_ext<Avx2Ops, false>(a);
}
__attribute__((target("avx2,fma,f16c"))) void run_avx2_per_head(const lh_attention_args* a) {
  if (needs_ext(a)) run_avx2_per_head_ext(a);
  else if (a->rows != nullptr) run_typed<Avx2Ops, true>(a);
  else run_typed<Avx2Ops, false>(a);
}

// MHA (one query head per KV head) runs the per-head kernel too: with nothing to share, the grouped
// AVX2 tiles lose to it (bench/attention-kernel.mjs, MHA 32/32, one thread: 0.771 vs 0.704 ms at
// 2,048 rows, 12.22 vs 12.01 at 32,768, a listed 10% of 8,192 rows 0.499 vs 0.425); AVX-512's wins.
__attribute__((target("avx2,fma,f16c"), noinline)) void run_avx2_ext(const lh_attention_args* a) {
  if (a->rows != nullptr) run_grouped_ext<Avx2Tile, true>(a);
  else run_grouped_ext<Avx2Tile, false>(a);
}
__attribute__((target("avx2,fma,f16c"))) void run_avx2(const lh_attention_args* a) {
  if (a->head_dim > kTileMaxDim || a->heads == a->kv_heads) run_avx2_per_head(a);
  else if (needs_ext(a)) run_avx2_ext(a);
  else if (a->rows != nullptr) run_grouped_typed<Avx2Tile, true>(a);
  else run_grouped_typed<Avx2Tile, false>(a);
}

LH_AVX512 __attribute__((noinline)) void run_avx512_ext(const lh_attention_args* a) {
  if (a->rows != nullptr) run_grouped_ext<Avx512Tile, true>(a);
  else run_grouped_ext<Avx512Tile, false>(a);
}
LH_AVX512 void run_avx512(const lh_attention_args* a) {
  if (a->head_dim > kTileMaxDim) run_avx2_per_head(a);
  else if (needs_ext(a)) run_avx512_ext(a);
  else if (a->rows != nullptr) run_grouped_typed<Avx512Tile, true>(a);
  else run_grouped_typed<Avx512Tile, false>(a);
}

// Causal prefill batches (prefill_grouped) where decode runs the grouped kernel: AVX-512 up to
// kTileMaxDim, AVX2 for GQA up to kTileMaxDim (its MHA decode is the per-head kernel).
// The soft-capped batches are functions of their own, like the decode variants.
__attribute__((target("avx2,fma,f16c"), noinline)) void prefill_avx2_cap(const lh_attention_args* a, uint32_t queries, uint32_t first, uint32_t step) {
  prefill_grouped_typed<Avx2Tile, true>(a, queries, first, step);
}
__attribute__((target("avx2,fma,f16c"))) void prefill_avx2(const lh_attention_args* a, uint32_t queries, uint32_t first, uint32_t step) {
  if (a->softcap != 0.0f) prefill_avx2_cap(a, queries, first, step);
  else prefill_grouped_typed<Avx2Tile>(a, queries, first, step);
}
LH_AVX512 __attribute__((noinline)) void prefill_avx512_cap(const lh_attention_args* a, uint32_t queries, uint32_t first, uint32_t step) {
  prefill_grouped_typed<Avx512Tile, true>(a, queries, first, step);
}
LH_AVX512 void prefill_avx512(const lh_attention_args* a, uint32_t queries, uint32_t first, uint32_t step) {
  if (a->softcap != 0.0f) prefill_avx512_cap(a, queries, first, step);
  else prefill_grouped_typed<Avx512Tile>(a, queries, first, step);
}

LH_AVX512 void exp_avx512(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = Avx512Tile::first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, k, Avx512Tile::exp(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

__attribute__((target("avx2,fma,f16c"))) void exp_avx2(const float* x, float* y, size_t n) {
  alignas(32) float buf[8];
  for (size_t i = 0; i < n; i += 8) {
    const size_t k = n - i < 8 ? n - i : 8;
    for (size_t j = 0; j < 8; ++j) buf[j] = j < k ? x[i + j] : 0.0f;
    _mm256_store_ps(buf, Avx2Tile::exp(_mm256_load_ps(buf)));
    for (size_t j = 0; j < k; ++j) y[i + j] = buf[j];
  }
}

// What the CPU has, at most the level cap of cpu_level.h allows (LONGHAND_CPU_LEVEL): every choice
// below (LH_ATTN_AUTO, lh_attention_available) goes through these two.
bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has && lh_cpu_level_allows(LH_CPU_AVX2);
}

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
                          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has && lh_cpu_level_allows(LH_CPU_AVX512);
}
#endif

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

}  // namespace

// Checks args for `queries` query tokens (q and out hold queries * heads * head_dim floats).
static lh_status check_queries(const lh_attention_args* a, uint32_t queries) {
  if (a == nullptr || a->q == nullptr || a->k == nullptr || a->v == nullptr || a->out == nullptr)
    return LH_BAD_ARGUMENT;
  if (lh_kv_type_bytes(a->kv_type) == 0 || queries == 0 || queries > a->tokens) return LH_BAD_ARGUMENT;
  if (a->tokens == 0 || a->kv_heads == 0 || a->heads == 0 || a->heads > LH_MAX_HEADS ||
      a->heads % a->kv_heads != 0 || a->head_dim == 0 || a->head_dim > LH_MAX_HEAD_DIM)
    return LH_BAD_ARGUMENT;
  size_t kv_elems = static_cast<size_t>(a->kv_heads - 1) * a->head_stride + static_cast<size_t>(a->tokens) * a->head_dim;
  if (a->rows == nullptr) {
    if (a->head_stride < static_cast<size_t>(a->tokens) * a->head_dim) return LH_BAD_ARGUMENT;
  } else {
    // listed rows: decode only, each row inside its head's stride
    if (queries != 1 || a->rows_stride < a->tokens || a->head_stride < a->head_dim) return LH_BAD_ARGUMENT;
    const size_t row_limit = a->head_stride / a->head_dim;
    for (uint32_t g = 0; g < a->kv_heads; ++g)
      for (uint32_t t = 0; t < a->tokens; ++t) {
        const int32_t r = a->rows[g * a->rows_stride + t];
        if (r < 0 || static_cast<size_t>(r) >= row_limit) return LH_BAD_ARGUMENT;
      }
    kv_elems = static_cast<size_t>(a->kv_heads) * a->head_stride;
  }
  if (a->ring_slots != 0) {
    // a ring is walked by the window kernels only; its slots lie inside each head's stride
    if (a->window == 0 || a->ring_start >= a->ring_slots || a->tokens > a->ring_slots || a->ring_slots > a->head_stride / a->head_dim) return LH_BAD_ARGUMENT;
    if (a->rows == nullptr) kv_elems = static_cast<size_t>(a->kv_heads - 1) * a->head_stride + static_cast<size_t>(a->ring_slots) * a->head_dim;
  }
  const size_t qo_bytes = static_cast<size_t>(queries) * a->heads * a->head_dim * sizeof(float);
  const size_t kv_bytes = kv_elems * lh_kv_type_bytes(a->kv_type);
  if (overlaps(a->out, qo_bytes, a->q, qo_bytes) || overlaps(a->out, qo_bytes, a->k, kv_bytes) ||
      overlaps(a->out, qo_bytes, a->v, kv_bytes))
    return LH_BAD_ARGUMENT;
  if (!std::isfinite(a->softcap) || a->softcap < 0.0f) return LH_BAD_ARGUMENT;
  if (a->window != 0) {
    // positions are indexed like the rows
    if (a->positions == nullptr || a->head_stride % a->head_dim != 0) return LH_BAD_ARGUMENT;
  }
  if (a->kv_type == LH_KV_I8) {
    // scales are indexed like the rows: one per head_dim elements of each head's stride
    if (a->k_scale == nullptr || a->v_scale == nullptr || a->head_stride % a->head_dim != 0) return LH_BAD_ARGUMENT;
    const size_t scale_bytes = (kv_elems / a->head_dim) * sizeof(float);
    if (overlaps(a->out, qo_bytes, a->k_scale, scale_bytes) || overlaps(a->out, qo_bytes, a->v_scale, scale_bytes))
      return LH_BAD_ARGUMENT;
  }
  return LH_OK;
}

lh_status lh_attention_check(const lh_attention_args* a) { return check_queries(a, 1); }

lh_status lh_attention_prefill_check(const lh_attention_args* a, uint32_t queries) { return check_queries(a, queries); }

bool lh_attention_available(lh_attention_impl impl) {
  switch (impl) {
    case LH_ATTN_AUTO:
    case LH_ATTN_PORTABLE:
      return true;
    case LH_ATTN_AVX2:
    case LH_ATTN_AVX2_PER_HEAD:
#ifdef LH_X86
      return cpu_has_avx2();
#else
      return false;
#endif
    case LH_ATTN_AVX512:
#ifdef LH_X86
      return cpu_has_avx512();
#else
      return false;
#endif
  }
  return false;
}

const char* lh_attention_impl_name(lh_attention_impl impl) {
  switch (impl) {
    case LH_ATTN_AUTO:
      return lh_attention_impl_name(lh_attention_available(LH_ATTN_AVX512) ? LH_ATTN_AVX512
                                    : lh_attention_available(LH_ATTN_AVX2) ? LH_ATTN_AVX2
                                                                           : LH_ATTN_PORTABLE);
    case LH_ATTN_PORTABLE:
      return "portable";
    case LH_ATTN_AVX2:
      return "avx2-fma-f16c";
    case LH_ATTN_AVX2_PER_HEAD:
      return "avx2-per-head";
    case LH_ATTN_AVX512:
      return "avx512";
  }
  return "unknown";
}

lh_status lh_attention_vector_exp(lh_attention_impl impl, const float* x, float* y, size_t n) {
  if (x == nullptr || y == nullptr || !lh_attention_available(impl)) return LH_BAD_ARGUMENT;
#ifdef LH_X86
  if (impl == LH_ATTN_AUTO) impl = cpu_has_avx512() ? LH_ATTN_AVX512 : cpu_has_avx2() ? LH_ATTN_AVX2 : LH_ATTN_PORTABLE;
  if (impl == LH_ATTN_AVX2) {
    exp_avx2(x, y, n);
    return LH_OK;
  }
  if (impl == LH_ATTN_AVX512) {
    exp_avx512(x, y, n);
    return LH_OK;
  }
#endif
  return LH_BAD_ARGUMENT;
}

namespace {
// The chosen implementation over checked args.
void run_impl(const lh_attention_args* a, lh_attention_impl impl) {
#ifdef LH_X86
  if (impl == LH_ATTN_AVX2_PER_HEAD) {
    run_avx2_per_head(a);
    return;
  }
  if (impl == LH_ATTN_AVX512 || (impl == LH_ATTN_AUTO && cpu_has_avx512())) {
    run_avx512(a);
    return;
  }
  if (impl == LH_ATTN_AVX2 || (impl == LH_ATTN_AUTO && cpu_has_avx2())) {
    run_avx2(a);
    return;
  }
#endif
  run_portable(a);
}

struct KvHeadSplit {
  const lh_attention_args* a;
  lh_attention_impl impl;
};

// KV heads [g0, g1) of a checked decode, with their query heads: the same kernel over the args cut
// down to those heads (q, out, k, v, rows and int8 scales all start at head g0), so every head is
// computed exactly as in the whole call.
void decode_kv_heads(void* ctx, uint32_t g0, uint32_t g1) {
  const KvHeadSplit* s = static_cast<const KvHeadSplit*>(ctx);
  const lh_attention_args* a = s->a;
  const uint32_t group = a->heads / a->kv_heads;
  const size_t d = a->head_dim, eb = lh_kv_type_bytes(a->kv_type);
  const size_t qo_at = static_cast<size_t>(g0) * group * d;  // first float of head g0·group in q and out
  lh_attention_args part = *a;
  part.q = a->q + qo_at;
  part.out = a->out + qo_at;
  part.k = static_cast<const uint8_t*>(a->k) + g0 * a->head_stride * eb;
  part.v = static_cast<const uint8_t*>(a->v) + g0 * a->head_stride * eb;
  part.heads = (g1 - g0) * group;
  part.kv_heads = g1 - g0;
  if (a->rows != nullptr) part.rows = a->rows + g0 * a->rows_stride;
  if (a->kv_type == LH_KV_I8) {
    part.k_scale = a->k_scale + g0 * (a->head_stride / d);
    part.v_scale = a->v_scale + g0 * (a->head_stride / d);
  }
  if (a->sinks != nullptr) part.sinks = a->sinks + qo_at / d;
  if (a->window != 0) part.positions = a->positions + g0 * (a->head_stride / d);
  run_impl(&part, s->impl);
}
}  // namespace

lh_status lh_attention_decode(const lh_attention_args* a, lh_attention_impl impl) {
  return lh_attention_decode_threads(a, 1, impl);
}

namespace {
// min(threads, kv_heads, work / min_work), at least 1; work as attention.h's
// lh_attention_decode_threads_used counts it.
uint32_t threads_for_work(const lh_attention_args* a, uint32_t threads, uint64_t min_work) {
  const uint64_t dim_scale = a->head_dim > 64 ? a->head_dim : 64;
  const uint64_t work = static_cast<uint64_t>(a->tokens) * (a->heads + LH_ATTENTION_ROW_WORK * a->kv_heads) * dim_scale / 64;
  uint64_t used = work / min_work;
  if (used > threads) used = threads;
  if (used > a->kv_heads) used = a->kv_heads;
  return used < 1 ? 1u : static_cast<uint32_t>(used);
}
}  // namespace

uint32_t lh_attention_decode_threads_used(const lh_attention_args* a, uint32_t threads) {
  // Starting and joining a thread costs ~100 us on this VM (measured: pthread_create + join after
  // the other core idled 1.5 ms, i.e. the vCPU's wake-up), so a thread needs ~300 us of work to pay.
  // The grouped kernels' cost (bench/attention-kernel.mjs, AVX-512, one thread) is a score per
  // (token, query head) plus about four scores' worth per (token, KV head) row read: GQA 32/4 at
  // 32,768 tokens 2.5 ms (1.6 ns a unit), MHA 32/32 10.9 ms (2.1 ns). Counting query heads alone
  // (32,768 pairs a thread) split GQA 32/4 at 2,048 tokens, where two threads took 0.26 ms and one
  // 0.15. Now: MHA 32/32 splits from 1,639 tokens, GQA 32/4 from 5,462. A KV head is never split
  // (its rows serve its group). Those units were timed at head_dim 64: a wider head costs in
  // proportion (Qwen3's 128 at GQA 32/8 and 2,048 tokens: one thread 1.24 ms a layer on a Zen 4
  // host, which the unscaled units kept on one thread while two halve it); narrower heads keep
  // the 64-dim units (no split sooner than before).
  return threads_for_work(a, threads, LH_ATTENTION_MIN_WORK_PER_THREAD);
}

uint32_t lh_attention_decode_pool_threads_used(const lh_attention_args* a, uint32_t threads) {
  return threads_for_work(a, threads, LH_ATTENTION_POOL_MIN_WORK_PER_THREAD);
}

lh_status lh_attention_decode_threads(const lh_attention_args* a, uint32_t threads, lh_attention_impl impl) {
  const lh_status st = lh_attention_check(a);
  if (st != LH_OK) return st;
  if (!lh_attention_available(impl) || threads == 0 || threads > LH_MAX_ATTENTION_THREADS) return LH_BAD_ARGUMENT;
  KvHeadSplit split{a, impl};
  lh_parallel_ranges(a->kv_heads, lh_attention_decode_threads_used(a, threads), decode_kv_heads, &split);
  return LH_OK;
}

lh_status lh_attention_decode_pool(const lh_attention_args* a, lh_worker_pool* pool, uint32_t threads, lh_attention_impl impl) {
  const lh_status st = lh_attention_check(a);
  if (st != LH_OK) return st;
  if (!lh_attention_available(impl) || threads == 0 || threads > LH_MAX_ATTENTION_THREADS) return LH_BAD_ARGUMENT;
  KvHeadSplit split{a, impl};
  lh_worker_pool_run(pool, a->kv_heads, threads, decode_kv_heads, &split);
  return LH_OK;
}

// Causal prefill: each query reads rows 0 .. tokens - queries + i. On the grouped kernels the
// queries of a batch share every tile (prefill_grouped); elsewhere one decode per chunk token, a
// query's K/V tiles staying hot in cache for the next query, whose prefix is one row longer.
namespace {
// Which batched prefill (prefill_grouped) serves these args with `impl`: 0 none (one decode per
// query), 1 AVX2, 2 AVX-512 — the kernel decode would run, so the bits are decode's.
int grouped_prefill_kind(const lh_attention_args* a, lh_attention_impl impl) {
#ifdef LH_X86
  if (a->head_dim > kTileMaxDim || impl == LH_ATTN_AVX2_PER_HEAD || a->window != 0) return 0;  // a window: each query its own rows
  if (impl == LH_ATTN_AVX512 || (impl == LH_ATTN_AUTO && cpu_has_avx512())) return 2;
  if ((impl == LH_ATTN_AVX2 || (impl == LH_ATTN_AUTO && cpu_has_avx2())) && a->heads != a->kv_heads) return 1;
#else
  (void)a;
  (void)impl;
#endif
  return 0;
}

// The units a prefill's threads share: batches of kHeadBatch virtual heads per KV head, or queries.
uint64_t prefill_units(const lh_attention_args* a, uint32_t queries, int kind) {
  if (kind == 0) return queries;
  const uint64_t virtual_heads = static_cast<uint64_t>(queries) * (a->heads / a->kv_heads);
  return (virtual_heads + kHeadBatch - 1) / kHeadBatch;
}

// Queries first, first + step, ... of a checked prefill: each one the decode of its own prefix.
// With a grouped kind, batches first, first + step, ... instead (same bits).
void prefill_queries(const lh_attention_args* a, uint32_t queries, uint32_t first, uint32_t step, lh_attention_impl impl) {
#ifdef LH_X86
  const int kind = grouped_prefill_kind(a, impl);
  if (kind == 2) {
    prefill_avx512(a, queries, first, step);
    return;
  }
  if (kind == 1) {
    prefill_avx2(a, queries, first, step);
    return;
  }
#endif
  const size_t width = static_cast<size_t>(a->heads) * a->head_dim;  // floats per query token
  lh_attention_args one = *a;
  for (uint32_t i = first; i < queries; i += step) {
    one.q = a->q + i * width;
    one.out = a->out + i * width;
    one.tokens = a->tokens - queries + i + 1;
    if (a->window != 0) one.query_position = a->positions[lh_attention_token_row(a, one.tokens - 1)];  // the query's own row (KV head 0's)
    run_impl(&one, impl);
  }
}

struct PrefillShare {
  const lh_attention_args* a;
  uint32_t queries, first, step;
  lh_attention_impl impl;
};

void* prefill_share_main(void* arg) {
  const PrefillShare* s = static_cast<const PrefillShare*>(arg);
  prefill_queries(s->a, s->queries, s->first, s->step, s->impl);
  return nullptr;
}
}  // namespace

lh_status lh_attention_prefill(const lh_attention_args* a, uint32_t queries, lh_attention_impl impl) {
  return lh_attention_prefill_threads(a, queries, 1, impl);
}

lh_status lh_attention_prefill_threads(const lh_attention_args* a, uint32_t queries, uint32_t threads, lh_attention_impl impl) {
  const lh_status st = check_queries(a, queries);
  if (st != LH_OK) return st;
  if (!lh_attention_available(impl) || threads == 0 || threads > LH_MAX_ATTENTION_THREADS) return LH_BAD_ARGUMENT;
  if (queries == 1) return lh_attention_decode_threads(a, threads, impl);  // one query: split its KV heads instead
  const uint64_t units = prefill_units(a, queries, grouped_prefill_kind(a, impl));
  const uint32_t used = threads < units ? threads : static_cast<uint32_t>(units);
  PrefillShare shares[LH_MAX_ATTENTION_THREADS];
  pthread_t ids[LH_MAX_ATTENTION_THREADS];
  bool started[LH_MAX_ATTENTION_THREADS] = {};
  for (uint32_t t = 1; t < used; ++t) {
    shares[t] = PrefillShare{a, queries, t, used, impl};
    started[t] = pthread_create(&ids[t], nullptr, prefill_share_main, &shares[t]) == 0;
  }
  prefill_queries(a, queries, 0, used, impl);
  for (uint32_t t = 1; t < used; ++t) {
    if (started[t]) pthread_join(ids[t], nullptr);
    else prefill_queries(a, queries, t, used, impl);  // no thread to be had: this thread does its share
  }
  return LH_OK;
}
