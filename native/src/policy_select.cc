// The comparison policies' selection over the pool. See policy_select.h for the rules; each function
// follows its TypeScript reference (app/engine/kv/policies-reference.ts) step by step, in the same
// order of operations, so that the same inputs give the same slots.
#include "policy_select.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "attention.h"
#include "cpu_level.h"
#include "sparse_attention.h"
#include "worker_pool.h"

namespace {

// Math.max / Math.min of JS: NaN if either is NaN; −0 < +0.
inline double js_max(double a, double b) {
  if (a != a || b != b) return NAN;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
inline double js_min(double a, double b) {
  if (a != a || b != b) return NAN;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

// The ranking key of topk.ts: NaN ranks as −inf.
inline double rank_key(double s) { return s != s ? -INFINITY : s; }

// Carves aligned pieces out of the caller's scratch.
struct Carver {
  uint8_t* at;
  size_t left;
  template <class T>
  T* take(size_t n) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(at);
    const size_t pad = (alignof(T) - p % alignof(T)) % alignof(T);
    const size_t need = pad + n * sizeof(T);
    if (need > left) return nullptr;
    T* out = reinterpret_cast<T*>(at + pad);
    at += need;
    left -= need;
    return out;
  }
};

// Logits of qh against n slots of KV head g (slot_at(i) gives the i-th), into out (n): the bits of
// lh_attention_score for each, computed 8 slots at a time, each lane its own sum in element order
// (independent chains: the adds no longer wait on each other).
template <class T, class Widen, class SlotAt>
void lane_scores(const T* rows, const float* row_scale, uint32_t d, const float* qh, uint32_t n, SlotAt slot_at, float scale, Widen widen,
                 float* out) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const T* r[8];
    for (int l = 0; l < 8; ++l) r[l] = rows + static_cast<size_t>(slot_at(i + l)) * d;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t e = 0; e < d; ++e) {
      const float qe = qh[e];
      for (int l = 0; l < 8; ++l) acc[l] += qe * widen(r[l][e]);
    }
    for (int l = 0; l < 8; ++l) out[i + l] = scale * (row_scale != nullptr ? acc[l] * row_scale[slot_at(i + l)] : acc[l]);
  }
  for (; i < n; ++i) {
    const T* r = rows + static_cast<size_t>(slot_at(i)) * d;
    float acc = 0.0f;
    for (uint32_t e = 0; e < d; ++e) acc += qh[e] * widen(r[e]);
    out[i] = scale * (row_scale != nullptr ? acc * row_scale[slot_at(i)] : acc);
  }
}

#if defined(__x86_64__)
// 8 rows of 8 floats -> their 8 columns (c[k] lane r = r[r][k])
__attribute__((target("avx2"))) inline void transpose8x8(const __m256 r[8], __m256 c[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    c[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    c[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

// lane_scores for fp16 (kF16) or fp32 rows with d % 8 == 0 on AVX2 + F16C: 8 slots a vector, each
// row's elements 8 at a time transposed in registers, then per element a product and a sum. The
// target has no FMA, so nothing is contracted: each lane is the scalar lane's separately rounded
// products and in-order sums, i.e. lh_attention_score's bits.
template <bool kF16, class SlotAt>
__attribute__((target("avx2,f16c"))) void lane_scores_avx2(const void* rows, uint32_t d, const float* qh, uint32_t n, SlotAt slot_at,
                                                            float scale, float* out) {
  const __m256 sc = _mm256_set1_ps(scale);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    size_t at[8];
    for (int l = 0; l < 8; ++l) at[l] = static_cast<size_t>(slot_at(i + l)) * d;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t e0 = 0; e0 < d; e0 += 8) {
      __m256 r[8], c[8];
      for (int l = 0; l < 8; ++l) {
        if constexpr (kF16) r[l] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(rows) + at[l] + e0)));
        else r[l] = _mm256_loadu_ps(static_cast<const float*>(rows) + at[l] + e0);
      }
      transpose8x8(r, c);
      for (int k = 0; k < 8; ++k) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(qh[e0 + k]), c[k]));
    }
    _mm256_storeu_ps(out + i, _mm256_mul_ps(sc, acc));
  }
  for (; i < n; ++i) {  // the tail, as lane_scores's
    float acc = 0.0f;
    for (uint32_t e = 0; e < d; ++e) {
      const size_t x = static_cast<size_t>(slot_at(i)) * d + e;
      acc += qh[e] * (kF16 ? lh_fp16_to_fp32(static_cast<const uint16_t*>(rows)[x]) : static_cast<const float*>(rows)[x]);
    }
    out[i] = scale * acc;
  }
}

bool cpu_has_avx2_f16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has && lh_cpu_level_allows(LH_CPU_AVX2);
}
#endif

template <class SlotAt>
void scores_of(const lh_kv_pool* pool, uint32_t layer, const float* qh, uint32_t g, uint32_t n, SlotAt slot_at, float scale, float* out) {
  const size_t head = lh_kv_pool_slot_index(pool, layer, g, 0);  // slot 0 of (layer, g) in the per-slot regions
  const size_t base = head * pool->head_dim;
  const uint32_t d = pool->head_dim;
#if defined(__x86_64__)
  if (d % 8 == 0 && pool->kv_type != LH_KV_I8 && cpu_has_avx2_f16c()) {
    if (pool->kv_type == LH_KV_F32) lane_scores_avx2<false>(static_cast<const float*>(pool->k) + base, d, qh, n, slot_at, scale, out);
    else lane_scores_avx2<true>(static_cast<const uint16_t*>(pool->k) + base, d, qh, n, slot_at, scale, out);
    return;
  }
#endif
  switch (pool->kv_type) {
    case LH_KV_I8:
      lane_scores(static_cast<const int8_t*>(pool->k) + base, pool->ks + head, d, qh, n, slot_at, scale,
                  [](int8_t x) { return static_cast<float>(x); }, out);
      break;
    case LH_KV_F32:
      lane_scores(static_cast<const float*>(pool->k) + base, static_cast<const float*>(nullptr), d, qh, n, slot_at, scale, [](float x) { return x; }, out);
      break;
    default:
      lane_scores(static_cast<const uint16_t*>(pool->k) + base, static_cast<const float*>(nullptr), d, qh, n, slot_at, scale,
                  [](uint16_t x) { return lh_fp16_to_fp32(x); }, out);
      break;
  }
}

// quest's bound of one query head over pages [0, pages) of one KV head (its bounds (max_pages, d)):
// bound[P] = Σ_i js_max(q_i·min_i, q_i·max_i) in double, i in order. The products of two fp32 values
// are exact in double, so any route to them gives the same bits; the sum of each page stays in order.
void quest_bounds_scalar(const float* qh, uint32_t d, const float* page_min, const float* page_max, uint32_t from, uint32_t pages, double* bound) {
  for (uint32_t P = from; P < pages; ++P) {
    double u = 0;
    const size_t at = static_cast<size_t>(P) * d;
    for (uint32_t i = 0; i < d; ++i) {
      const double qi = qh[i];
      u += js_max(qi * page_min[at + i], qi * page_max[at + i]);
    }
    bound[P] = u;
  }
}

#if defined(__x86_64__)

// Eight pages at a time, one double lane each (its own sum, in element order): the scalar version's
// bits. The pages' bounds are transposed 8 elements at a time in registers (gathers are several
// times slower on this project's VMs). max_pd differs from js_max only on the sign of a zero
// (js_max(−0, +0) = +0), which no sum that starts at +0 can see (+0 + −0 = +0), and on NaN, put back
// by an unordered compare.
__attribute__((target("avx2"))) void quest_bounds_avx2(const float* qh, uint32_t d, const float* page_min, const float* page_max, uint32_t pages,
                                                       double* bound) {
  const __m256d nan = _mm256_set1_pd(NAN);
  uint32_t P = 0;
  for (; d % 8 == 0 && P + 8 <= pages; P += 8) {
    const float* mn = page_min + static_cast<size_t>(P) * d;
    const float* mx = page_max + static_cast<size_t>(P) * d;
    __m256d u[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
    for (uint32_t i0 = 0; i0 < d; i0 += 8) {
      __m256 ra[8], rb[8], ca[8], cb[8];
      for (int r = 0; r < 8; ++r) {
        ra[r] = _mm256_loadu_ps(mn + static_cast<size_t>(r) * d + i0);
        rb[r] = _mm256_loadu_ps(mx + static_cast<size_t>(r) * d + i0);
      }
      transpose8x8(ra, ca);
      transpose8x8(rb, cb);
      for (int k = 0; k < 8; ++k) {
        const __m256d qi = _mm256_set1_pd(static_cast<double>(qh[i0 + k]));
        for (int h = 0; h < 2; ++h) {
          const __m256d pa = _mm256_mul_pd(qi, _mm256_cvtps_pd(h == 0 ? _mm256_castps256_ps128(ca[k]) : _mm256_extractf128_ps(ca[k], 1)));
          const __m256d pb = _mm256_mul_pd(qi, _mm256_cvtps_pd(h == 0 ? _mm256_castps256_ps128(cb[k]) : _mm256_extractf128_ps(cb[k], 1)));
          const __m256d m = _mm256_blendv_pd(_mm256_max_pd(pa, pb), nan, _mm256_cmp_pd(pa, pb, _CMP_UNORD_Q));
          u[h] = _mm256_add_pd(u[h], m);
        }
      }
    }
    _mm256_storeu_pd(bound + P, u[0]);
    _mm256_storeu_pd(bound + P + 4, u[1]);
  }
  quest_bounds_scalar(qh, d, page_min, page_max, P, pages, bound);
}
#endif

}  // namespace

void lh_quest_page_bounds(const float* qh, uint32_t d, const float* page_min, const float* page_max, uint32_t pages, double* bound) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && lh_cpu_level_allows(LH_CPU_AVX2)) {
    quest_bounds_avx2(qh, d, page_min, page_max, pages, bound);
    return;
  }
#endif
  quest_bounds_scalar(qh, d, page_min, page_max, 0, pages, bound);
}

namespace {

bool pool_shape_ok(const lh_kv_pool* pool, uint32_t layer, uint32_t heads) {
  return lh_kv_pool_live(pool) && layer < pool->layers && heads >= 1 && heads <= LH_MAX_HEADS && heads % pool->kv_heads == 0;
}

// body(part, g0, g1) for `parts` contiguous ranges of the KV heads, [r·kv/parts, (r+1)·kv/parts), on
// the shared pool (worker_pool.h). A KV head's work stays on one thread, in its usual order, so the
// results do not depend on `parts`.
template <class Body>
void kv_head_parts(uint32_t parts, uint32_t kv_heads, Body& body) {
  struct Ctx {
    Body* body;
    uint32_t parts, kv_heads;
  } ctx{&body, parts, kv_heads};
  lh_worker_pool* pool = lh_shared_pool_lock();
  lh_worker_pool_run(
      pool, parts, parts,
      [](void* c, uint32_t b, uint32_t e) {
        const Ctx* x = static_cast<const Ctx*>(c);
        for (uint32_t r = b; r < e; ++r)
          (*x->body)(r, static_cast<uint32_t>(static_cast<uint64_t>(r) * x->kv_heads / x->parts),
                     static_cast<uint32_t>(static_cast<uint64_t>(r + 1) * x->kv_heads / x->parts));
      },
      &ctx);
  lh_shared_pool_unlock();
}

// A float's bits as an unsigned key in the same order: larger float, larger key (−0 just under +0,
// −inf lowest; no NaN comes here).
inline uint32_t order_key(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
inline float from_order_key(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) != 0 ? (k & 0x7FFFFFFFu) : ~k;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The k-th largest (1 <= k <= n) of vals[0, n) (no NaN), equal (==) to what std::nth_element puts
// at k − 1 in descending order (a −0 found where that has a +0 compares equal). Radix select on
// order_key: three counting passes of 11, 11 and 10 bits, each over the values that share the digits
// chosen so far. At 32,768 values nth_element's partitions, whose compares the branch predictor
// cannot guess, were ~55% of an H2O head's selection.
float kth_largest(const float* vals, size_t n, size_t k) {
  constexpr uint32_t kShift[3] = {21, 10, 0}, kDigits[3] = {2048, 2048, 1024};
  uint32_t count[2048];  // (digits) how many values of the current prefix carry each digit
  uint32_t prefix = 0, mask = 0;
  size_t rank = k;  // rank of the wanted value among those of the current prefix, largest first
  for (int level = 0; level < 3; ++level) {
    const uint32_t shift = kShift[level], digit_mask = kDigits[level] - 1;
    std::memset(count, 0, kDigits[level] * sizeof(uint32_t));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t key = order_key(vals[i]);
      if ((key & mask) == prefix) ++count[(key >> shift) & digit_mask];
    }
    uint32_t d = digit_mask;
    while (rank > count[d]) rank -= count[d--];  // digits from the top; stops at or before 0 (rank <= their sum)
    prefix |= d << shift;
    mask |= digit_mask << shift;
  }
  return from_order_key(prefix);
}

// H2O's selection of KV head g (see lh_select_h2o) into out (<= budget slots); returns the count. The
// rule of lh_top_indices over the older live slots, on their fp32 masses directly (as doubles they
// rank the same: the conversion is exact; NaN as −inf): the k-th largest mass found among the
// candidates' values alone, then one pass in slot order keeps every larger one and the lowest slots
// holding it, and evicts for good every other older slot. vals: scratch of N floats.
size_t h2o_head(const float* a, uint8_t* m, uint32_t N, uint32_t budget, uint32_t recent_start, float* vals, int32_t* out) {
  uint32_t live_recent = 0;
  for (uint32_t j = recent_start; j < N; ++j) live_recent += m[j] != 0 ? 1 : 0;
  const auto key = [](float x) { return x != x ? -INFINITY : x; };
  size_t cands = 0;
  for (uint32_t j = 0; j < recent_start; ++j) {
    vals[cands] = key(a[j]);
    cands += m[j] != 0 ? 1 : 0;
  }
  const size_t k = budget - live_recent;
  size_t c = 0;
  if (k >= cands) {  // every older live slot is kept
    for (uint32_t j = 0; j < recent_start; ++j)
      if (m[j] != 0) out[c++] = static_cast<int32_t>(j);
  } else if (k == 0) {
    for (uint32_t j = 0; j < recent_start; ++j) m[j] = 0;
  } else {
    const float tau = kth_largest(vals, cands, k);
    size_t above = 0;  // candidates strictly above tau: fewer than k of them
    for (size_t i = 0; i < cands; ++i) above += vals[i] > tau ? 1 : 0;
    size_t ties = k - above;
    for (uint32_t j = 0; j < recent_start; ++j) {
      const float x = key(a[j]);
      const bool live = m[j] != 0, tie = live && x == tau && ties > 0, keep = c < k && live && (x > tau || tie);
      if (keep) out[c++] = static_cast<int32_t>(j);  // out holds `budget`: no store past the kept ones
      ties -= tie && keep ? 1 : 0;
      m[j] = keep ? 1 : 0;  // evicted for good when not kept
    }
  }
  for (uint32_t j = recent_start; j < N; ++j)
    if (m[j] != 0) out[c++] = static_cast<int32_t>(j);
  return c;
}

}  // namespace

size_t lh_top_indices(const double* scores, size_t n, size_t k, const uint8_t* mask, int32_t* idx, int32_t* out) {
  size_t c = 0;
  for (size_t j = 0; j < n; ++j)
    if (mask == nullptr || mask[j] != 0) idx[c++] = static_cast<int32_t>(j);
  if (k >= c) {
    std::memcpy(out, idx, c * sizeof(int32_t));
    return c;
  }
  if (k == 0) return 0;
  // a strict total order: larger key first, then the lower slot
  auto before = [scores](int32_t a, int32_t b) {
    const double ka = rank_key(scores[a]), kb = rank_key(scores[b]);
    return ka == kb ? a < b : ka > kb;
  };
  std::nth_element(idx, idx + (k - 1), idx + c, before);
  std::memcpy(out, idx, k * sizeof(int32_t));
  std::sort(out, out + k);
  return k;
}

size_t lh_select_streaming(uint32_t N, uint32_t sinks, uint32_t window, int32_t* out) {
  const uint32_t s = std::min(sinks, N);
  const uint32_t from = window >= N ? 0 : N - window;  // the recent window [N − window, N)
  size_t c = 0;
  for (uint32_t j = 0; j < s; ++j) out[c++] = static_cast<int32_t>(j);
  for (uint32_t j = std::max(s, from); j < N; ++j) out[c++] = static_cast<int32_t>(j);
  return c;
}

lh_status lh_select_h2o(const float* acc, uint8_t* live, uint32_t kv_heads, size_t C, uint32_t N, uint32_t budget, uint32_t recent,
                        int32_t* slots, uint32_t* offsets, void* scratch, size_t scratch_bytes, uint32_t threads) {
  if (acc == nullptr || live == nullptr || slots == nullptr || offsets == nullptr || scratch == nullptr || kv_heads == 0) return LH_BAD_ARGUMENT;
  if (recent > budget || N > C) return LH_BAD_ARGUMENT;
  const uint32_t recent_start = N > recent ? N - recent : 0;
  offsets[0] = 0;
  const uint32_t parts = std::min(threads, kv_heads);
  const size_t part_bytes = lh_select_scratch_bytes(N);
  if (parts > 1 && N > 0 && scratch_bytes >= parts * part_bytes) {
    // each head's list at slots + g·budget (its bound), counts kept; then moved down in head order
    uint32_t counts[LH_MAX_KV_HEADS];
    if (kv_heads > LH_MAX_KV_HEADS) return LH_BAD_ARGUMENT;
    auto body = [&](uint32_t r, uint32_t g0, uint32_t g1) {
      Carver cv{static_cast<uint8_t*>(scratch) + r * part_bytes, part_bytes};
      float* vals = cv.take<float>(N);
      for (uint32_t g = g0; g < g1; ++g)
        counts[g] = static_cast<uint32_t>(h2o_head(acc + g * C, live + g * C, N, budget, recent_start, vals, slots + static_cast<size_t>(g) * budget));
    };
    kv_head_parts(parts, kv_heads, body);
    size_t total = 0;
    for (uint32_t g = 0; g < kv_heads; ++g) {
      if (total != static_cast<size_t>(g) * budget) std::memmove(slots + total, slots + static_cast<size_t>(g) * budget, counts[g] * sizeof(int32_t));
      total += counts[g];
      offsets[g + 1] = static_cast<uint32_t>(total);
    }
    return LH_OK;
  }
  Carver cv{static_cast<uint8_t*>(scratch), scratch_bytes};
  float* vals = cv.take<float>(N);  // (N) the older live slots' masses, for the top-k search
  if (N > 0 && vals == nullptr) return LH_BAD_ARGUMENT;
  size_t total = 0;
  for (uint32_t g = 0; g < kv_heads; ++g) {
    total += h2o_head(acc + g * C, live + g * C, N, budget, recent_start, vals, slots + total);
    offsets[g + 1] = static_cast<uint32_t>(total);
  }
  return LH_OK;
}

namespace {
void h2o_accumulate_heads(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t group, uint32_t h0, uint32_t h1, float* acc,
                          size_t C, uint32_t n, const int32_t* slots, const uint32_t* offsets, const lh_attention_params* attn, float* scratch);
}  // namespace

lh_status lh_h2o_accumulate(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, float* acc, size_t C, uint32_t n,
                            const int32_t* slots, const uint32_t* offsets, const lh_attention_params* attn, float* scratch,
                            size_t scratch_floats, uint32_t threads) {
  if (!pool_shape_ok(pool, layer, heads) || q == nullptr || acc == nullptr || scratch == nullptr) return LH_BAD_ARGUMENT;
  if (lh_attention_params_check(attn, heads) != LH_OK) return LH_BAD_ARGUMENT;
  const uint32_t len = lh_kv_pool_length(pool, layer), kvh = pool->kv_heads, group = heads / kvh;
  if (slots == nullptr) {
    if (n > len || n > C) return LH_BAD_ARGUMENT;
  } else {
    if (offsets == nullptr || offsets[0] != 0) return LH_BAD_ARGUMENT;
    for (uint32_t g = 0; g < kvh; ++g) {
      if (offsets[g + 1] < offsets[g]) return LH_BAD_ARGUMENT;
      for (uint32_t i = offsets[g]; i < offsets[g + 1]; ++i)
        if (slots[i] < 0 || static_cast<uint32_t>(slots[i]) >= len || static_cast<size_t>(slots[i]) >= C) return LH_BAD_ARGUMENT;
    }
  }
  size_t longest = 0;
  for (uint32_t g = 0; g < kvh; ++g) longest = std::max<size_t>(longest, slots == nullptr ? n : offsets[g + 1] - offsets[g]);
  const size_t per = lh_h2o_scratch_floats(longest);
  if (per > scratch_floats) return LH_BAD_ARGUMENT;
  const uint32_t parts = std::min(threads, kvh);
  if (parts > 1 && scratch_floats >= parts * per) {  // KV heads split, each part its own slice of the scratch
    auto body = [&](uint32_t r, uint32_t g0, uint32_t g1) {
      h2o_accumulate_heads(pool, layer, q, group, g0 * group, g1 * group, acc, C, n, slots, offsets, attn, scratch + r * per);
    };
    kv_head_parts(parts, kvh, body);
    return LH_OK;
  }
  h2o_accumulate_heads(pool, layer, q, group, 0, heads, acc, C, n, slots, offsets, attn, scratch);
  return LH_OK;
}

namespace {
// lh_h2o_accumulate's query heads [h0, h1) in order (whole KV groups), with scratch of
// lh_h2o_scratch_floats(their longest list) floats.
void h2o_accumulate_heads(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t group, uint32_t h0, uint32_t h1, float* acc,
                          size_t C, uint32_t n, const int32_t* slots, const uint32_t* offsets, const lh_attention_params* attn, float* scratch) {
  const uint32_t d = pool->head_dim;
  const float scale = attn->scale, cap = attn->softcap;
  for (uint32_t h = h0; h < h1; ++h) {
    const uint32_t g = h / group;
    const float* qh = q + static_cast<size_t>(h) * d;
    float* a = acc + g * C;
    const uint32_t count = slots == nullptr ? n : offsets[g + 1] - offsets[g];
    const int32_t* list = slots == nullptr ? nullptr : slots + offsets[g];
    float* sc = scratch;  // (count) this head's logits over its list
    // (count) their exp(s − max), each computed once (its bits are the same wherever it is used)
    double* ex = reinterpret_cast<double*>(reinterpret_cast<uintptr_t>(scratch + count + 2) & ~static_cast<uintptr_t>(7));
    if (list == nullptr) scores_of(pool, layer, qh, g, count, [](uint32_t i) { return i; }, scale, sc);
    else scores_of(pool, layer, qh, g, count, [list](uint32_t i) { return static_cast<uint32_t>(list[i]); }, scale, sc);
    if (cap > 0.0f)
      for (uint32_t i = 0; i < count; ++i) sc[i] = lh_attention_softcap(sc[i], cap);
    // as sparse-policies.ts accumulate(): max, sum of exp(s − max) in list order, then += e / sum
    double mx = -INFINITY;
    for (uint32_t i = 0; i < count; ++i) mx = js_max(mx, sc[i]);
    double sum = 0;
    for (uint32_t i = 0; i < count; ++i) sum += (ex[i] = std::exp(static_cast<double>(sc[i]) - mx));
    if (attn->sinks != nullptr) sum += std::exp(static_cast<double>(attn->sinks[h]) - mx);  // the sink's share of the mass goes nowhere
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t j = list == nullptr ? i : static_cast<uint32_t>(list[i]);
      a[j] = static_cast<float>(static_cast<double>(a[j]) + ex[i] / sum);
    }
  }
}
}  // namespace

lh_status lh_quest_extend_bounds(const lh_kv_pool* pool, uint32_t layer, float* page_min, float* page_max, uint32_t max_pages,
                                 uint32_t page_size, uint32_t from, uint32_t to) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers || page_min == nullptr || page_max == nullptr || page_size == 0) return LH_BAD_ARGUMENT;
  if (to > lh_kv_pool_length(pool, layer) || (to > from && (to - 1) / page_size >= max_pages)) return LH_BAD_ARGUMENT;
  const uint32_t d = pool->head_dim;
  float row[LH_MAX_HEAD_DIM];
  for (uint32_t j = from; j < to; ++j) {
    const size_t P = j / page_size;
    for (uint32_t g = 0; g < pool->kv_heads; ++g) {
      lh_kv_pool_read(pool, LH_KV_KEY, layer, g, j, row, nullptr);  // what readK returns
      const size_t at = (g * static_cast<size_t>(max_pages) + P) * d;
      for (uint32_t i = 0; i < d; ++i) {
        page_min[at + i] = static_cast<float>(js_min(page_min[at + i], row[i]));
        page_max[at + i] = static_cast<float>(js_max(page_max[at + i], row[i]));
      }
    }
  }
  return LH_OK;
}

namespace {
// KV head g's chosen pages (ascending, returns how many): per query head of its group the bounds
// U_{h,P}, combined as max over the group of (U_{h,P} − max_P U_{h,P}), the top `top_pages` of them.
// bound, combined: (pages) double; idx, chosen: (pages) int32.
size_t quest_head_pages(const float* q, uint32_t group, uint32_t g, uint32_t d, const float* page_min, const float* page_max,
                        uint32_t max_pages, uint32_t pages, uint32_t top_pages, double* bound, double* combined, int32_t* idx,
                        int32_t* chosen) {
  for (uint32_t P = 0; P < pages; ++P) combined[P] = -INFINITY;
  for (uint32_t h = g * group; h < (g + 1) * group; ++h) {
    const size_t at = g * static_cast<size_t>(max_pages) * d;
    lh_quest_page_bounds(q + static_cast<size_t>(h) * d, d, page_min + at, page_max + at, pages, bound);
    double mx = -INFINITY;
    for (uint32_t P = 0; P < pages; ++P) mx = js_max(mx, bound[P]);
    for (uint32_t P = 0; P < pages; ++P) combined[P] = js_max(combined[P], bound[P] - mx);
  }
  return lh_top_indices(combined, pages, top_pages, nullptr, idx, chosen);
}

// lh_select_quest's KV heads over `threads` pool threads, then the slot lists in head order.
lh_status select_quest_threads(const float* q, uint32_t group, uint32_t kv_heads, uint32_t d, const float* page_min, const float* page_max,
                               uint32_t max_pages, uint32_t N, uint32_t page_size, uint32_t top_pages, uint32_t pages, int32_t* slots,
                               uint32_t* offsets, uint8_t* scratch, size_t scratch_bytes, uint32_t threads) {
  const uint32_t parts = std::min(threads, kv_heads);
  const size_t part_bytes = pages * (2 * sizeof(double) + sizeof(int32_t)) + 64;
  Carver cv{scratch, scratch_bytes};
  uint8_t* part_scratch = cv.take<uint8_t>(parts * part_bytes);
  int32_t* chosen = cv.take<int32_t>(static_cast<size_t>(kv_heads) * pages);
  uint32_t counts[LH_MAX_KV_HEADS];
  if (part_scratch == nullptr || chosen == nullptr || kv_heads > LH_MAX_KV_HEADS) return LH_BAD_ARGUMENT;  // sized by the caller's check
  auto body = [&](uint32_t r, uint32_t g0, uint32_t g1) {
    Carver part{part_scratch + r * part_bytes, part_bytes};
    double* bound = part.take<double>(pages);
    double* combined = part.take<double>(pages);
    int32_t* idx = part.take<int32_t>(pages);
    for (uint32_t g = g0; g < g1; ++g)
      counts[g] = static_cast<uint32_t>(quest_head_pages(q, group, g, d, page_min, page_max, max_pages, pages, top_pages, bound, combined, idx,
                                                         chosen + static_cast<size_t>(g) * pages));
  };
  kv_head_parts(parts, kv_heads, body);
  size_t total = 0;
  for (uint32_t g = 0; g < kv_heads; ++g) {
    const int32_t* ch = chosen + static_cast<size_t>(g) * pages;
    for (uint32_t i = 0; i < counts[g]; ++i) {
      const uint32_t P = static_cast<uint32_t>(ch[i]);
      for (uint32_t j = P * page_size; j < std::min(N, (P + 1) * page_size); ++j) slots[total++] = static_cast<int32_t>(j);
    }
    offsets[g + 1] = static_cast<uint32_t>(total);
  }
  return LH_OK;
}
}  // namespace

lh_status lh_select_quest(const float* q, uint32_t heads, uint32_t kv_heads, uint32_t d, const float* page_min, const float* page_max,
                          uint32_t max_pages, uint32_t N, uint32_t page_size, uint32_t top_pages, int32_t* slots, uint32_t* offsets,
                          void* scratch, size_t scratch_bytes, uint32_t threads) {
  if (q == nullptr || page_min == nullptr || page_max == nullptr || slots == nullptr || offsets == nullptr || scratch == nullptr) return LH_BAD_ARGUMENT;
  if (kv_heads == 0 || heads == 0 || heads % kv_heads != 0 || d == 0 || page_size == 0) return LH_BAD_ARGUMENT;
  const uint32_t pages = N / page_size + (N % page_size != 0 ? 1 : 0), group = heads / kv_heads;
  if (pages > max_pages) return LH_BAD_ARGUMENT;
  Carver cv{static_cast<uint8_t*>(scratch), scratch_bytes};
  double* bound = cv.take<double>(pages);     // (pages) U of one head
  double* combined = cv.take<double>(pages);  // (pages) over the group
  int32_t* idx = cv.take<int32_t>(pages);
  int32_t* chosen = cv.take<int32_t>(pages);
  if (pages > 0 && (bound == nullptr || combined == nullptr || idx == nullptr || chosen == nullptr)) return LH_BAD_ARGUMENT;
  // every page holds a candidate (no mask in the decode path): all pages are live
  offsets[0] = 0;
  if (threads > 1 && kv_heads > 1 && pages > 0 && scratch_bytes >= lh_quest_scratch_bytes(kv_heads, pages, threads))
    return select_quest_threads(q, group, kv_heads, d, page_min, page_max, max_pages, N, page_size, top_pages, pages, slots, offsets,
                                static_cast<uint8_t*>(scratch), scratch_bytes, threads);
  size_t total = 0;
  for (uint32_t g = 0; g < kv_heads; ++g) {
    const size_t c = quest_head_pages(q, group, g, d, page_min, page_max, max_pages, pages, top_pages, bound, combined, idx, chosen);
    for (size_t i = 0; i < c; ++i) {
      const uint32_t P = static_cast<uint32_t>(chosen[i]);
      for (uint32_t j = P * page_size; j < std::min(N, (P + 1) * page_size); ++j) slots[total++] = static_cast<int32_t>(j);
    }
    offsets[g + 1] = static_cast<uint32_t>(total);
  }
  return LH_OK;
}

lh_status lh_snapkv_compress(const lh_kv_pool* pool, uint32_t layer, const float* obs_q, uint32_t heads, uint32_t P, uint32_t window,
                             uint32_t budget, uint32_t kernel, const lh_attention_params* attn, int32_t* slots, uint32_t* offsets,
                             void* scratch, size_t scratch_bytes) {
  if (!pool_shape_ok(pool, layer, heads) || obs_q == nullptr || slots == nullptr || offsets == nullptr || scratch == nullptr) return LH_BAD_ARGUMENT;
  if (lh_attention_params_check(attn, heads) != LH_OK) return LH_BAD_ARGUMENT;
  const float scale = attn->scale, cap = attn->softcap;
  if (window < 1 || window > budget || budget >= P || P > lh_kv_pool_length(pool, layer) || kernel < 1 || kernel % 2 != 1) return LH_BAD_ARGUMENT;
  const uint32_t kvh = pool->kv_heads, group = heads / kvh, d = pool->head_dim, prefix = P - window, half = (kernel - 1) / 2;
  Carver cv{static_cast<uint8_t*>(scratch), scratch_bytes};
  double* vote = cv.take<double>(prefix);        // (prefix) one head's summed mass
  double* pooled = cv.take<double>(prefix);      // (prefix) one head's pooled votes
  double* group_vote = cv.take<double>(prefix);  // (prefix) over the group
  float* sc = cv.take<float>(P);                 // (P) one row's logits
  int32_t* idx = cv.take<int32_t>(prefix);
  if (vote == nullptr || pooled == nullptr || group_vote == nullptr || sc == nullptr || idx == nullptr) return LH_BAD_ARGUMENT;
  offsets[0] = 0;
  size_t total = 0;
  for (uint32_t g = 0; g < kvh; ++g) {
    for (uint32_t j = 0; j < prefix; ++j) group_vote[j] = 0;
    for (uint32_t h = g * group; h < (g + 1) * group; ++h) {
      for (uint32_t j = 0; j < prefix; ++j) vote[j] = 0;
      for (uint32_t i = 0; i < window; ++i) {
        const float* qh = obs_q + (static_cast<size_t>(i) * heads + h) * d;
        const uint32_t seen = prefix + i + 1;  // causal: the row sees slots 0 .. prefix + i
        scores_of(pool, layer, qh, g, seen, [](uint32_t j) { return j; }, scale, sc);
        if (cap > 0.0f)
          for (uint32_t j = 0; j < seen; ++j) sc[j] = lh_attention_softcap(sc[j], cap);
        double mx = -INFINITY;
        for (uint32_t j = 0; j < seen; ++j) mx = js_max(mx, sc[j]);
        if (mx == -INFINITY) continue;  // softmaxRows leaves such a row at 0
        double sum = 0;
        for (uint32_t j = 0; j < seen; ++j) sum += std::exp(static_cast<double>(sc[j]) - mx);
        for (uint32_t j = 0; j < prefix; ++j) vote[j] = vote[j] + std::exp(static_cast<double>(sc[j]) - mx) / sum;
      }
      for (uint32_t j = 0; j < prefix; ++j) {
        double a = -INFINITY;
        const int64_t lo = static_cast<int64_t>(j) - half, hi = static_cast<int64_t>(j) + half;
        for (int64_t t = lo; t <= hi; ++t) a = js_max(a, t >= 0 && t < prefix ? vote[t] : -INFINITY);
        pooled[j] = a;
      }
      for (uint32_t j = 0; j < prefix; ++j) group_vote[j] = group_vote[j] + pooled[j];
    }
    size_t c = lh_top_indices(group_vote, prefix, budget - window, nullptr, idx, slots + total);
    for (uint32_t j = prefix; j < P; ++j) slots[total + c++] = static_cast<int32_t>(j);
    total += c;
    offsets[g + 1] = static_cast<uint32_t>(total);
  }
  return LH_OK;
}
