// InfiniGen speculation kernels: partial-key scores for a KV group and the threshold statistics.
// See infinigen_score.h for the arithmetic contract (bit-identical across implementations).
#include "infinigen_score.h"

#include <algorithm>
#include <cmath>

#include "cpu_level.h"
#include "fp16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LH_X86 1
#endif

namespace {

// Partial-key tiles are read one after another, but each holds p·8 halfs (304 bytes at p = 19)
// and the loop spends ~p·HB FMAs on one: the hardware prefetcher alone left the scoring waiting on
// its loads (perf: the conversion after each tile load was the hot instruction). So the loops ask
// for the tiles kPrefetchTiles ahead, into L2 (prefetcht1, as attention.cc asks for its scattered
// rows). One layer's job at 32K on the Zen 5 host (speculator_bench 32 32 32768 4 6 19 1 and
// 4 32 ..., two runs each): MHA ~5.8 ms with prefetcht0 8 tiles ahead (the first version; t0 hardly
// fetched on that host, which is why 4-32 tiles ahead then looked all the same), ~5.0 with
// prefetcht1 8 ahead, ~4.5 24 ahead, ~4.6 48 or 96 ahead; GQA ~1.37 ms at every distance (its
// scoring is bound by the float64 FMAs: 8 heads per tile load).
constexpr uint32_t kPrefetchTiles = 24;
constexpr int kTilePrefetchLocality = 2;  // prefetcht1: into L2 (see above)

// Asks for tiles [t, t + count) of kp (tiles of `tile` halfs), clipped to the `tiles` there are.
// (Written with a byte counter from 0: g++ 12 deleted the same loop written over [from, to) pointers,
// or behind an early return, as a loop without effects.)
inline void prefetch_tiles(const uint16_t* kp, uint32_t t, uint32_t count, size_t tile, uint32_t tiles) {
  const uint32_t n = t >= tiles ? 0 : tiles - t < count ? tiles - t : count;
  const uintptr_t from = reinterpret_cast<uintptr_t>(kp) + t * tile * sizeof(uint16_t);  // no pointer past the store is formed
  for (size_t off = 0; off < n * tile * sizeof(uint16_t); off += 64) __builtin_prefetch(reinterpret_cast<const void*>(from + off), 0, kTilePrefetchLocality);
}

// ---------------------------------------------------------------------------------------------
// Portable (the scalar reference)
// ---------------------------------------------------------------------------------------------
void score_group_portable(const uint16_t* kp, uint32_t p, uint32_t slots, const float* q, uint32_t group, double scale,
                          double* out, size_t out_stride, double* max, uint32_t* finite, int64_t skip) {
  bool all_finite = true;
  for (uint32_t hh = 0; hh < group; ++hh) {
    const float* qh = q + static_cast<size_t>(hh) * p;
    double* o = out + hh * out_stride;
    double m = -INFINITY;
    for (uint32_t j = 0; j < slots; ++j) {
      if (j == skip) {  // not read (see the header): −∞, outside max and the finiteness check
        o[j] = -INFINITY;
        continue;
      }
      const uint16_t* kt = kp + static_cast<size_t>(j >> 3) * p * 8 + (j & 7);
      double acc = 0;
      for (uint32_t i = 0; i < p; ++i) acc += static_cast<double>(qh[i]) * static_cast<double>(lh_fp16_to_fp32(kt[i * 8]));
      const double s = acc * scale;
      o[j] = s;
      m = std::max(m, s);
      all_finite = all_finite && std::isfinite(s);
    }
    if (max != nullptr) max[hh] = m;
  }
  if (finite != nullptr) *finite = all_finite ? 1 : 0;
}

uint32_t count_above_portable(const double* s, uint32_t n, double threshold) {
  uint32_t c = 0;
  for (uint32_t j = 0; j < n; ++j) c += s[j] > threshold ? 1 : 0;
  return c;
}

void combine_portable(const double* s, size_t stride, uint32_t group, const double* m, uint32_t n, double* comb, double* lo,
                      double* hi) {
  double l = INFINITY, h = -INFINITY;
  for (uint32_t j = 0; j < n; ++j) {
    double best = -INFINITY;
    for (uint32_t hh = 0; hh < group; ++hh) best = std::max(best, s[hh * stride + j] - m[hh]);
    comb[j] = best;
    l = std::min(l, best);
    h = std::max(h, best);
  }
  *lo = l;
  *hi = h;
}

inline uint32_t bucket_of(double x, double lo, double inv) { return lh_spec_bucket(x, lo, inv); }

void histogram_portable(const double* v, uint32_t n, double lo, double inv, uint32_t* hist) {
  for (uint32_t i = 0; i < kSpecBuckets; ++i) hist[i] = 0;
  for (uint32_t j = 0; j < n; ++j) ++hist[bucket_of(v[j], lo, inv)];
}

uint32_t collect_portable(const double* v, uint32_t n, double lo, double inv, uint32_t b, int32_t* out) {
  uint32_t r = 0;
  for (uint32_t j = 0; j < n; ++j) {
    out[r] = static_cast<int32_t>(j);
    r += bucket_of(v[j], lo, inv) >= b ? 1 : 0;
  }
  return r;
}

#ifdef LH_X86
// ---------------------------------------------------------------------------------------------
// AVX2 + FMA + F16C
// ---------------------------------------------------------------------------------------------
// TB tiles of 8 slots × HB heads per step: 2·TB·HB float64 accumulators (<= 8, so the FMA latency
// chains of different tiles/heads overlap), each tile element converted once for the HB heads.
// Accumulation per lane: fma(q_i, k_i, acc) for i = 0..p−1 from acc = 0, i.e. the scalar loop's
// roundings (the product is exact). Scores of the lanes set in `lanes` (bit r: slot j0 + r) are
// stored; max and the finiteness check see only those.
struct Avx2Track {
  __m256d mx[4], chk[4];  // per head of the chunk: running max, Σ (s − s) (NaN once a score is not finite)
};

template <int TB, int HB>
__attribute__((target("avx2,fma,f16c"))) inline void score_step(const uint16_t* kt, uint32_t p, const double* qd, size_t qstride,
                                                                  __m256d scale, double* const* o, uint32_t j0, uint32_t lanes,
                                                                  Avx2Track& tr) {
  __m256d acc[TB][HB][2];
  for (int t = 0; t < TB; ++t)
    for (int h = 0; h < HB; ++h) acc[t][h][0] = acc[t][h][1] = _mm256_setzero_pd();
  const size_t tile = static_cast<size_t>(p) * 8;
  for (uint32_t i = 0; i < p; ++i) {
    __m256d qi[HB];
    for (int h = 0; h < HB; ++h) qi[h] = _mm256_broadcast_sd(qd + h * qstride + i);
    for (int t = 0; t < TB; ++t) {
      const __m256 k8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kt + t * tile + i * 8)));
      const __m256d klo = _mm256_cvtps_pd(_mm256_castps256_ps128(k8));
      const __m256d khi = _mm256_cvtps_pd(_mm256_extractf128_ps(k8, 1));
      for (int h = 0; h < HB; ++h) {
        acc[t][h][0] = _mm256_fmadd_pd(qi[h], klo, acc[t][h][0]);
        acc[t][h][1] = _mm256_fmadd_pd(qi[h], khi, acc[t][h][1]);
      }
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int h = 0; h < HB; ++h) {
      const __m256d lo = _mm256_mul_pd(acc[t][h][0], scale), hi = _mm256_mul_pd(acc[t][h][1], scale);
      double* dst = o[h] + j0 + t * 8;
      if (lanes == 0xFFu) {
        _mm256_storeu_pd(dst, lo);
        _mm256_storeu_pd(dst + 4, hi);
        tr.mx[h] = _mm256_max_pd(lo, _mm256_max_pd(hi, tr.mx[h]));  // max_pd(x, m) keeps m when x is NaN
        tr.chk[h] = _mm256_add_pd(tr.chk[h], _mm256_add_pd(_mm256_sub_pd(lo, lo), _mm256_sub_pd(hi, hi)));
      } else {  // a masked tile: the last, partial one or the one holding `skip` (TB == 1 there)
        alignas(32) double tmp[8];
        _mm256_store_pd(tmp, lo);
        _mm256_store_pd(tmp + 4, hi);
        alignas(32) double mtmp[4];
        _mm256_store_pd(mtmp, tr.mx[h]);
        double m = mtmp[0];
        bool fin = true;
        for (uint32_t r = 0; r < 8; ++r) {
          if (((lanes >> r) & 1u) == 0) continue;
          dst[r] = tmp[r];
          m = tmp[r] > m ? tmp[r] : m;
          fin = fin && std::isfinite(tmp[r]);
        }
        tr.mx[h] = _mm256_max_pd(_mm256_set1_pd(m), tr.mx[h]);
        if (!fin) tr.chk[h] = _mm256_set1_pd(NAN);
      }
    }
}

// A tile with lanes that must not be read (past `slots`, where the main thread's append() writes the
// new token, or `skip`, the slot it overwrites on a full evicting pool): only the lanes in `lanes` are
// copied, each as its own 2-byte load, into a zeroed tile that the vector step reads instead. Its
// other lanes are neither read from the pool nor stored.
template <int HB>
__attribute__((target("avx2,fma,f16c"))) void score_masked_tile(const uint16_t* kt, uint32_t p, const double* qd, size_t qstride,
                                                                 __m256d scale, double* const* o, uint32_t j0, uint32_t lanes,
                                                                 uint16_t* local, Avx2Track& tr) {
  for (uint32_t i = 0; i < p; ++i)
    for (uint32_t r = 0; r < 8; ++r) local[i * 8 + r] = ((lanes >> r) & 1u) != 0 ? kt[i * 8 + r] : 0;
  score_step<1, HB>(local, p, qd, qstride, scale, o, j0, lanes, tr);
}

// One tile: read in place when every lane is wanted, else through score_masked_tile.
template <int HB>
__attribute__((target("avx2,fma,f16c"))) inline void score_tile(const uint16_t* kt, uint32_t p, const double* qd, size_t qstride,
                                                                  __m256d scale, double* const* o, uint32_t j0, uint32_t lanes,
                                                                  uint16_t* local, Avx2Track& tr) {
  if (lanes == 0xFFu) score_step<1, HB>(kt, p, qd, qstride, scale, o, j0, lanes, tr);
  else score_masked_tile<HB>(kt, p, qd, qstride, scale, o, j0, lanes, local, tr);
}

template <int TB, int HB>
__attribute__((target("avx2,fma,f16c"))) void score_heads(const uint16_t* kp, uint32_t p, uint32_t slots, int64_t skip,
                                                           const double* qd, size_t qstride, __m256d scale, double* const* o,
                                                           Avx2Track& tr) {
  const size_t tile = static_cast<size_t>(p) * 8;
  const uint32_t full = slots / 8;  // whole tiles
  const int64_t skip_tile = skip >= 0 && skip < slots ? skip / 8 : -1;
  const uint32_t skip_lanes = skip_tile >= 0 ? 0xFFu & ~(1u << (skip & 7)) : 0xFFu;
  alignas(32) uint16_t local[8 * LH_MAX_HEAD_DIM];  // (p, 8): a masked tile
  // lanes of tile u to score: all but skip's lane in skip's tile. (The score_tile calls stay out of
  // lambdas: clang does not give a lambda this function's target attribute, and __m256d needs it.)
  const auto lanes_of = [&](uint32_t u, uint32_t lanes) { return u == skip_tile ? lanes & skip_lanes : lanes; };
  uint32_t t = 0;
  for (; t + TB <= full; t += TB) {
    if (skip_tile >= t && skip_tile < t + TB) {
      for (uint32_t u = t; u < t + TB; ++u) score_tile<HB>(kp + u * tile, p, qd, qstride, scale, o, u * 8, lanes_of(u, 0xFFu), local, tr);
      continue;
    }
    prefetch_tiles(kp, t + kPrefetchTiles, TB, tile, full);
    score_step<TB, HB>(kp + t * tile, p, qd, qstride, scale, o, t * 8, 0xFFu, tr);
  }
  for (; t < full; ++t) score_tile<HB>(kp + t * tile, p, qd, qstride, scale, o, t * 8, lanes_of(t, 0xFFu), local, tr);
  if (slots % 8 != 0) score_tile<HB>(kp + t * tile, p, qd, qstride, scale, o, t * 8, lanes_of(t, (1u << (slots % 8)) - 1), local, tr);
  if (skip_tile >= 0)
    for (int h = 0; h < HB; ++h) o[h][skip] = -INFINITY;
}

__attribute__((target("avx2,fma,f16c"))) void score_group_avx2(const uint16_t* kp, uint32_t p, uint32_t slots, const float* q,
                                                               uint32_t group, double scale, double* out, size_t out_stride,
                                                               double* max, uint32_t* finite, int64_t skip) {
  const __m256d sc = _mm256_set1_pd(scale);
  double qd[4 * LH_MAX_HEAD_DIM];
  bool all_finite = true;
  for (uint32_t h0 = 0; h0 < group; h0 += 4) {  // chunks of up to 4 heads
    const uint32_t hb = std::min<uint32_t>(4, group - h0);
    for (uint32_t h = 0; h < hb; ++h)
      for (uint32_t i = 0; i < p; ++i) qd[h * p + i] = q[static_cast<size_t>(h0 + h) * p + i];
    double* o[4];
    Avx2Track tr;
    for (uint32_t h = 0; h < 4; ++h) {
      o[h] = out + (h0 + std::min(h, hb - 1)) * out_stride;
      tr.mx[h] = _mm256_set1_pd(-INFINITY);
      tr.chk[h] = _mm256_setzero_pd();
    }
    switch (hb) {
      case 1: score_heads<4, 1>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      case 2: score_heads<2, 2>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      case 3: score_heads<1, 3>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      default: score_heads<1, 4>(kp, p, slots, skip, qd, p, sc, o, tr); break;
    }
    for (uint32_t h = 0; h < hb; ++h) {
      alignas(32) double m4[4], c4[4];
      _mm256_store_pd(m4, tr.mx[h]);
      _mm256_store_pd(c4, tr.chk[h]);
      double m = m4[0];
      for (int r = 1; r < 4; ++r) m = m4[r] > m ? m4[r] : m;
      if (max != nullptr) max[h0 + h] = m;
      for (int r = 0; r < 4; ++r) all_finite = all_finite && !std::isnan(c4[r]);
    }
  }
  if (finite != nullptr) *finite = all_finite ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// AVX-512 (F/DQ + F16C): the AVX2 kernel's arithmetic on 8 float64 lanes, one tile of 8 slots per
// vector, so each (tile, element) needs one conversion and one FMA per head instead of two. The
// per-lane sequence of FMAs is the AVX2 one (and the scalar loop's roundings): the same bits.
// ---------------------------------------------------------------------------------------------
#define LH_SCORE512 __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma,f16c")))
// GCC 12 flags the intrinsics' _mm512_undefined_pd() pass-through operand (as in attention.cc)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

struct Avx512Track {
  __m512d mx[8], chk[8];  // per head of the chunk: running max, Σ (s − s) (NaN once a score is not finite)
};

template <int TB, int HB>
LH_SCORE512 inline void score_step512(const uint16_t* kt, uint32_t p, const double* qd, size_t qstride, __m512d scale,
                                      double* const* o, uint32_t j0, uint32_t lanes, Avx512Track& tr) {
  __m512d acc[TB][HB];
  for (int t = 0; t < TB; ++t)
    for (int h = 0; h < HB; ++h) acc[t][h] = _mm512_setzero_pd();
  const size_t tile = static_cast<size_t>(p) * 8;
  for (uint32_t i = 0; i < p; ++i) {
    __m512d qi[HB];
    for (int h = 0; h < HB; ++h) qi[h] = _mm512_set1_pd(qd[h * qstride + i]);
    for (int t = 0; t < TB; ++t) {
      const __m512d k8 = _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kt + t * tile + i * 8))));
      for (int h = 0; h < HB; ++h) acc[t][h] = _mm512_fmadd_pd(qi[h], k8, acc[t][h]);
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int h = 0; h < HB; ++h) {
      const __m512d s = _mm512_mul_pd(acc[t][h], scale);
      double* dst = o[h] + j0 + t * 8;
      if (lanes == 0xFFu) {
        _mm512_storeu_pd(dst, s);
        tr.mx[h] = _mm512_max_pd(s, tr.mx[h]);  // max_pd(x, m) keeps m when x is NaN
        tr.chk[h] = _mm512_add_pd(tr.chk[h], _mm512_sub_pd(s, s));
      } else {  // a masked tile (TB == 1 there): only the wanted lanes are stored and tracked
        const __mmask8 k = static_cast<__mmask8>(lanes);
        _mm512_mask_storeu_pd(dst, k, s);
        tr.mx[h] = _mm512_mask_max_pd(tr.mx[h], k, s, tr.mx[h]);
        tr.chk[h] = _mm512_mask_add_pd(tr.chk[h], k, tr.chk[h], _mm512_sub_pd(s, s));
      }
    }
}

// A tile with lanes that must not be read: see score_masked_tile (the same copy into a zeroed tile).
template <int HB>
LH_SCORE512 void score_masked_tile512(const uint16_t* kt, uint32_t p, const double* qd, size_t qstride, __m512d scale,
                                      double* const* o, uint32_t j0, uint32_t lanes, uint16_t* local, Avx512Track& tr) {
  for (uint32_t i = 0; i < p; ++i)
    for (uint32_t r = 0; r < 8; ++r) local[i * 8 + r] = ((lanes >> r) & 1u) != 0 ? kt[i * 8 + r] : 0;
  score_step512<1, HB>(local, p, qd, qstride, scale, o, j0, lanes, tr);
}

template <int HB>
LH_SCORE512 inline void score_tile512(const uint16_t* kt, uint32_t p, const double* qd, size_t qstride, __m512d scale,
                                      double* const* o, uint32_t j0, uint32_t lanes, uint16_t* local, Avx512Track& tr) {
  if (lanes == 0xFFu) score_step512<1, HB>(kt, p, qd, qstride, scale, o, j0, lanes, tr);
  else score_masked_tile512<HB>(kt, p, qd, qstride, scale, o, j0, lanes, local, tr);
}

template <int TB, int HB>
LH_SCORE512 void score_heads512(const uint16_t* kp, uint32_t p, uint32_t slots, int64_t skip, const double* qd, size_t qstride,
                                __m512d scale, double* const* o, Avx512Track& tr) {
  const size_t tile = static_cast<size_t>(p) * 8;
  const uint32_t full = slots / 8;
  const int64_t skip_tile = skip >= 0 && skip < slots ? skip / 8 : -1;
  const uint32_t skip_lanes = skip_tile >= 0 ? 0xFFu & ~(1u << (skip & 7)) : 0xFFu;
  alignas(64) uint16_t local[8 * LH_MAX_HEAD_DIM];
  uint32_t t = 0;
  for (; t + TB <= full; t += TB) {
    if (skip_tile >= t && skip_tile < t + TB) {
      for (uint32_t u = t; u < t + TB; ++u)
        score_tile512<HB>(kp + u * tile, p, qd, qstride, scale, o, u * 8, u == skip_tile ? skip_lanes : 0xFFu, local, tr);
      continue;
    }
    prefetch_tiles(kp, t + kPrefetchTiles, TB, tile, full);
    score_step512<TB, HB>(kp + t * tile, p, qd, qstride, scale, o, t * 8, 0xFFu, tr);
  }
  for (; t < full; ++t) score_tile512<HB>(kp + t * tile, p, qd, qstride, scale, o, t * 8, t == skip_tile ? skip_lanes : 0xFFu, local, tr);
  if (slots % 8 != 0) {
    const uint32_t lanes = (1u << (slots % 8)) - 1;
    score_tile512<HB>(kp + t * tile, p, qd, qstride, scale, o, t * 8, t == skip_tile ? lanes & skip_lanes : lanes, local, tr);
  }
  if (skip_tile >= 0)
    for (int h = 0; h < HB; ++h) o[h][skip] = -INFINITY;
}

LH_SCORE512 void score_group_avx512(const uint16_t* kp, uint32_t p, uint32_t slots, const float* q, uint32_t group, double scale,
                                    double* out, size_t out_stride, double* max, uint32_t* finite, int64_t skip) {
  const __m512d sc = _mm512_set1_pd(scale);
  double qd[8 * LH_MAX_HEAD_DIM];
  bool all_finite = true;
  for (uint32_t h0 = 0; h0 < group; h0 += 8) {  // chunks of up to 8 heads
    const uint32_t hb = std::min<uint32_t>(8, group - h0);
    for (uint32_t h = 0; h < hb; ++h)
      for (uint32_t i = 0; i < p; ++i) qd[h * p + i] = q[static_cast<size_t>(h0 + h) * p + i];
    double* o[8];
    Avx512Track tr;
    for (uint32_t h = 0; h < 8; ++h) {
      o[h] = out + (h0 + std::min(h, hb - 1)) * out_stride;
      tr.mx[h] = _mm512_set1_pd(-INFINITY);
      tr.chk[h] = _mm512_setzero_pd();
    }
    // TB·HB accumulators <= 16 of the 32 registers
    switch (hb) {
      case 1: score_heads512<8, 1>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      case 2: score_heads512<4, 2>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      case 3: score_heads512<4, 3>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      case 4: score_heads512<4, 4>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      case 5: score_heads512<2, 5>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      case 6: score_heads512<2, 6>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      case 7: score_heads512<2, 7>(kp, p, slots, skip, qd, p, sc, o, tr); break;
      default: score_heads512<2, 8>(kp, p, slots, skip, qd, p, sc, o, tr); break;
    }
    for (uint32_t h = 0; h < hb; ++h) {
      if (max != nullptr) max[h0 + h] = _mm512_reduce_max_pd(tr.mx[h]);
      all_finite = all_finite && _mm512_cmp_pd_mask(tr.chk[h], tr.chk[h], _CMP_UNORD_Q) == 0;
    }
  }
  if (finite != nullptr) *finite = all_finite ? 1 : 0;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

__attribute__((target("avx2"))) uint32_t count_above_avx2(const double* s, uint32_t n, double threshold) {
  const __m256d t = _mm256_set1_pd(threshold);
  __m256i c0 = _mm256_setzero_si256(), c1 = _mm256_setzero_si256();
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    c0 = _mm256_sub_epi64(c0, _mm256_castpd_si256(_mm256_cmp_pd(_mm256_loadu_pd(s + j), t, _CMP_GT_OQ)));
    c1 = _mm256_sub_epi64(c1, _mm256_castpd_si256(_mm256_cmp_pd(_mm256_loadu_pd(s + j + 4), t, _CMP_GT_OQ)));
  }
  alignas(32) int64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(c0, c1));
  uint64_t c = static_cast<uint64_t>(lanes[0] + lanes[1] + lanes[2] + lanes[3]);
  for (; j < n; ++j) c += s[j] > threshold ? 1 : 0;
  return static_cast<uint32_t>(c);
}

__attribute__((target("avx2"))) void combine_avx2(const double* s, size_t stride, uint32_t group, const double* m, uint32_t n,
                                                  double* comb, double* lo, double* hi) {
  __m256d l = _mm256_set1_pd(INFINITY), h = _mm256_set1_pd(-INFINITY);
  uint32_t j = 0;
  for (; j + 4 <= n; j += 4) {
    __m256d best = _mm256_sub_pd(_mm256_loadu_pd(s + j), _mm256_set1_pd(m[0]));
    for (uint32_t hh = 1; hh < group; ++hh)
      best = _mm256_max_pd(_mm256_sub_pd(_mm256_loadu_pd(s + hh * stride + j), _mm256_set1_pd(m[hh])), best);
    _mm256_storeu_pd(comb + j, best);
    l = _mm256_min_pd(best, l);
    h = _mm256_max_pd(best, h);
  }
  alignas(32) double l4[4], h4[4];
  _mm256_store_pd(l4, l);
  _mm256_store_pd(h4, h);
  double lv = l4[0], hv = h4[0];
  for (int r = 1; r < 4; ++r) {
    lv = std::min(lv, l4[r]);
    hv = std::max(hv, h4[r]);
  }
  for (; j < n; ++j) {
    double best = -INFINITY;
    for (uint32_t hh = 0; hh < group; ++hh) best = std::max(best, s[hh * stride + j] - m[hh]);
    comb[j] = best;
    lv = std::min(lv, best);
    hv = std::max(hv, best);
  }
  *lo = lv;
  *hi = hv;
}

// Buckets in 4 lanes (min then truncation: the same integer as bucket_of), counted into 4
// interleaved histograms so that runs of equal buckets do not serialise on one counter.
__attribute__((target("avx2"))) void histogram_avx2(const double* v, uint32_t n, double lo, double inv, uint32_t* hist) {
  uint32_t h4[4][kSpecBuckets] = {};
  const __m256d lov = _mm256_set1_pd(lo), invv = _mm256_set1_pd(inv), top = _mm256_set1_pd(kSpecBuckets - 1);
  uint32_t j = 0;
  alignas(16) int32_t idx[4];
  for (; j + 4 <= n; j += 4) {
    const __m256d x = _mm256_min_pd(_mm256_mul_pd(_mm256_sub_pd(_mm256_loadu_pd(v + j), lov), invv), top);
    _mm_store_si128(reinterpret_cast<__m128i*>(idx), _mm256_cvttpd_epi32(x));
    ++h4[0][idx[0]];
    ++h4[1][idx[1]];
    ++h4[2][idx[2]];
    ++h4[3][idx[3]];
  }
  for (; j < n; ++j) ++h4[0][bucket_of(v[j], lo, inv)];
  for (uint32_t i = 0; i < kSpecBuckets; ++i) hist[i] = h4[0][i] + h4[1][i] + h4[2][i] + h4[3][i];
}

// pshufb patterns moving the int32 lanes whose mask bit is set to the front (16 masks of 4 lanes).
struct CompactLut {
  alignas(16) uint8_t shuf[16][16];
  CompactLut() {
    for (int m = 0; m < 16; ++m) {
      int r = 0;  // lanes placed so far
      for (int lane = 0; lane < 4; ++lane) {
        if ((m & (1 << lane)) == 0) continue;
        for (int byte = 0; byte < 4; ++byte) shuf[m][r * 4 + byte] = static_cast<uint8_t>(lane * 4 + byte);
        ++r;
      }
      for (int i = r * 4; i < 16; ++i) shuf[m][i] = 0x80;
    }
  }
};
const CompactLut kCompact;

__attribute__((target("avx2,popcnt"))) uint32_t collect_avx2(const double* v, uint32_t n, double lo, double inv, uint32_t b,
                                                            int32_t* out) {
  const __m256d lov = _mm256_set1_pd(lo), invv = _mm256_set1_pd(inv), bv = _mm256_set1_pd(static_cast<double>(b));
  __m128i base = _mm_setr_epi32(0, 1, 2, 3);
  const __m128i four = _mm_set1_epi32(4);
  uint32_t r = 0, j = 0;
  // bucket >= b  <=>  (x − lo)·inv >= b for b <= kSpecBuckets − 1 (truncation of a value >= 0)
  for (; j + 4 <= n; j += 4) {
    const __m256d x = _mm256_mul_pd(_mm256_sub_pd(_mm256_loadu_pd(v + j), lov), invv);
    const int m = _mm256_movemask_pd(_mm256_cmp_pd(x, bv, _CMP_GE_OQ));
    const __m128i packed = _mm_shuffle_epi8(base, _mm_load_si128(reinterpret_cast<const __m128i*>(kCompact.shuf[m])));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r), packed);
    r += static_cast<uint32_t>(__builtin_popcount(static_cast<unsigned>(m)));
    base = _mm_add_epi32(base, four);
  }
  for (; j < n; ++j) {
    out[r] = static_cast<int32_t>(j);
    r += bucket_of(v[j], lo, inv) >= b ? 1 : 0;
  }
  return r;
}

// lh_attention_available already applies the level cap (cpu_level.h); it must not be cached here,
// so the cap is asked on each call.
bool spec_has_avx512() { return lh_attention_available(LH_ATTN_AVX512); }

bool spec_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has && lh_cpu_level_allows(LH_CPU_AVX2);
}
#endif

bool use_avx512(lh_attention_impl impl) {
#ifdef LH_X86
  return impl == LH_ATTN_AVX512 || (impl == LH_ATTN_AUTO && spec_has_avx512());
#else
  return false;
#endif
}

// The AVX2 kernels also serve an AVX-512 request where no AVX-512 version exists.
bool use_avx2(lh_attention_impl impl) {
#ifdef LH_X86
  return impl == LH_ATTN_AVX2 || impl == LH_ATTN_AVX2_PER_HEAD || impl == LH_ATTN_AVX512 || (impl == LH_ATTN_AUTO && spec_has_avx2());
#else
  return false;
#endif
}

}  // namespace

lh_status lh_spec_score_group(const uint16_t* kp, uint32_t p, uint32_t slots, const float* q, uint32_t group, double scale,
                              double* out, size_t out_stride, double* max, uint32_t* finite, lh_attention_impl impl,
                              int32_t skip) {
  if (p == 0 || p > LH_MAX_HEAD_DIM || group == 0 || out_stride < slots || (slots > 0 && (kp == nullptr || q == nullptr || out == nullptr)) ||
      !lh_attention_available(impl))
    return LH_BAD_ARGUMENT;
#ifdef LH_X86
  if (use_avx512(impl)) {
    score_group_avx512(kp, p, slots, q, group, scale, out, out_stride, max, finite, skip);
    return LH_OK;
  }
  if (use_avx2(impl)) {
    score_group_avx2(kp, p, slots, q, group, scale, out, out_stride, max, finite, skip);
    return LH_OK;
  }
#endif
  score_group_portable(kp, p, slots, q, group, scale, out, out_stride, max, finite, skip);
  return LH_OK;
}

uint32_t lh_spec_count_above(const double* s, uint32_t n, double threshold, lh_attention_impl impl) {
#ifdef LH_X86
  if (use_avx2(impl)) return count_above_avx2(s, n, threshold);
#endif
  return count_above_portable(s, n, threshold);
}

void lh_spec_combine(const double* s, size_t stride, uint32_t group, const double* m, uint32_t n, double* comb, double* lo,
                     double* hi, lh_attention_impl impl) {
#ifdef LH_X86
  if (use_avx2(impl)) return combine_avx2(s, stride, group, m, n, comb, lo, hi);
#endif
  combine_portable(s, stride, group, m, n, comb, lo, hi);
}

void lh_spec_histogram(const double* v, uint32_t n, double lo, double inv, uint32_t* hist, lh_attention_impl impl) {
#ifdef LH_X86
  if (use_avx2(impl)) return histogram_avx2(v, n, lo, inv, hist);
#endif
  histogram_portable(v, n, lo, inv, hist);
}

uint32_t lh_spec_collect(const double* v, uint32_t n, double lo, double inv, uint32_t b, int32_t* out, lh_attention_impl impl) {
#ifdef LH_X86
  if (use_avx2(impl)) return collect_avx2(v, n, lo, inv, b, out);
#endif
  return collect_portable(v, n, lo, inv, b, out);
}
