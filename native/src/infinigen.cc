// InfiniGen selection, the speculation worker, gather with a reuse cache, and attention over the
// gathered rows. See infinigen.h for the contract and select-reference.ts for the rule.
#include "infinigen.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "attention.h"
#include "fp16.h"
#include "infinigen_score.h"
#include "parallel_ranges.h"
#include "worker_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

uint64_t lh_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// ---------------------------------------------------------------------------------------------
// Selection (port of select-reference.ts; float64 like the reference, so both pick the same slots)
// ---------------------------------------------------------------------------------------------
namespace {

inline float widen_key(float f) { return f; }
inline float widen_key(uint16_t h) { return lh_fp16_to_fp32(h); }

bool knobs_ok(const lh_infinigen_knobs* k) {
  return k != nullptr && k->alpha > 0 && std::isfinite(k->alpha) && k->cap > 0 && k->cap <= 1;
}

// ⌊fraction·N⌋ with the reference's 1e-9 slack.
inline uint32_t fraction_of(double fraction, uint32_t N) { return static_cast<uint32_t>(std::floor(fraction * N + 1e-9)); }

}  // namespace

namespace {

// The n-th largest of vals[0..c) (1 <= n < c; finite values; vals is reordered) and, in *above, how
// many values are strictly larger. A histogram of 1024 linear buckets over [min, max] finds the
// bucket holding the n-th value in two passes; only that bucket is partially sorted. Bucketing is
// monotone in the value, so every value in a higher bucket is >= every value in a lower one.
double nth_largest(double* vals, uint32_t c, uint32_t n, uint32_t* above) {
  constexpr uint32_t kBuckets = 1024;
  double lo = vals[0], hi = vals[0];
  for (uint32_t i = 1; i < c; ++i) {
    lo = vals[i] < lo ? vals[i] : lo;
    hi = vals[i] > hi ? vals[i] : hi;
  }
  uint32_t hist[kBuckets] = {};
  const double inv = hi > lo ? kBuckets / (hi - lo) : 0.0;  // inf spread: inv 0, one bucket
  auto bucket = [lo, inv](double v) -> uint32_t {
    const double b = (v - lo) * inv;
    return b >= kBuckets - 1 ? kBuckets - 1 : static_cast<uint32_t>(b);
  };
  for (uint32_t i = 0; i < c; ++i) ++hist[bucket(vals[i])];
  uint32_t b = kBuckets - 1, higher = 0;  // values in buckets above b
  while (higher + hist[b] < n) higher += hist[b--];
  uint32_t m = 0;  // the bucket's values, compacted to the front
  for (uint32_t i = 0; i < c; ++i)
    if (bucket(vals[i]) == b) vals[m++] = vals[i];
  const uint32_t need = n - higher;  // 1..m
  std::nth_element(vals, vals + (need - 1), vals + m, [](double x, double y) { return x > y; });
  const double tau = vals[need - 1];
  uint32_t larger = higher;
  for (uint32_t i = 0; i < need - 1; ++i) larger += vals[i] > tau ? 1 : 0;
  *above = larger;
  return tau;
}

// The rule after scoring (steps 5 of §4.5), shared by lh_infinigen_select and the speculator.
// s (heads, slots): scores, -inf for non-candidates; N > 0 candidates; a sparse layer.
// comb (slots) and vals (slots) are scratch. Writes each KV head's top-n slots ascending.
lh_status select_from_scores(const double* s, uint32_t heads, uint32_t kvh, uint32_t slots, const uint8_t* cand, uint32_t N,
                             const lh_infinigen_knobs* knobs, double* comb, double* vals, int32_t* selected,
                             size_t selected_stride, uint32_t* n_out, int32_t* counts) {
  const uint32_t group = heads / kvh;
  double max_of[LH_MAX_HEADS];  // (heads) m_h
  double total = 0;
  for (uint32_t h = 0; h < heads; ++h) {
    const double* sh = s + static_cast<size_t>(h) * slots;
    double m = -INFINITY;
    bool finite = true;
    for (uint32_t j = 0; j < slots; ++j) {
      const bool is_cand = cand == nullptr || cand[j] != 0;
      finite = finite && (!is_cand || std::isfinite(sh[j]));
      m = std::max(m, sh[j]);
    }
    if (!finite) return LH_BAD_ARGUMENT;
    max_of[h] = m;
    const double threshold = m - knobs->alpha;
    int32_t c = 0;
    for (uint32_t j = 0; j < slots; ++j) c += sh[j] > threshold ? 1 : 0;
    if (counts != nullptr) counts[h] = c;
    total += c;
  }
  const double mean = total / heads;
  const uint32_t n = std::max<uint32_t>(1, std::min<uint32_t>(static_cast<uint32_t>(std::floor(mean)), fraction_of(knobs->cap, N)));
  *n_out = n;
  for (uint32_t g = 0; g < kvh; ++g) {
    int32_t* row = selected + g * selected_stride;
    // combined score per candidate: the best of the group's heads, each relative to its own max
    uint32_t c = 0;
    for (uint32_t j = 0; j < slots; ++j) {
      if (cand != nullptr && cand[j] == 0) continue;
      double best = -INFINITY;
      for (uint32_t h = g * group; h < (g + 1) * group; ++h) best = std::max(best, s[static_cast<size_t>(h) * slots + j] - max_of[h]);
      comb[j] = best;
      vals[c++] = best;
    }
    if (n >= c) {  // every candidate
      uint32_t r = 0;
      for (uint32_t j = 0; j < slots; ++j)
        if (cand == nullptr || cand[j] != 0) row[r++] = static_cast<int32_t>(j);
      continue;
    }
    // top n by (larger score first, ties -> lower slot): tau = the n-th largest value; every slot
    // above tau is in, and the lowest slots holding exactly tau fill the rest. One ascending pass
    // then yields the set already sorted, which is what the reuse cache and the attention want.
    uint32_t above = 0;
    const double tau = nth_largest(vals, c, n, &above);
    uint32_t ties_left = n - above, r = 0;
    for (uint32_t j = 0; j < slots && r < n; ++j) {
      if (cand != nullptr && cand[j] == 0) continue;
      if (comb[j] > tau || (comb[j] == tau && ties_left > 0)) {
        if (comb[j] == tau) --ties_left;
        row[r++] = static_cast<int32_t>(j);
      }
    }
  }
  return LH_OK;
}

// Every candidate, ascending, for each KV head (dense layers, N = 0, fallbacks).
void select_all(uint32_t kvh, uint32_t slots, const uint8_t* cand, int32_t* selected, size_t selected_stride) {
  for (uint32_t g = 0; g < kvh; ++g) {
    int32_t* row = selected + g * selected_stride;
    uint32_t c = 0;
    for (uint32_t j = 0; j < slots; ++j)
      if (cand == nullptr || cand[j] != 0) row[c++] = static_cast<int32_t>(j);
  }
}

// Scores of row-major partial keys (the generic input): per slot, acc += q[i]·k[i] in float64 for
// i = 0..p−1 in order, then · scale. Non-candidates get -inf.
template <class T>
void score_rows(const lh_select_input* in, const T* k, double* s) {
  const uint32_t group = in->heads / in->kv_heads, p = in->p;
  for (uint32_t h = 0; h < in->heads; ++h) {
    const size_t g = h / group;
    const float* q = in->q_partial + static_cast<size_t>(h) * p;
    for (uint32_t j = 0; j < in->slots; ++j) {
      double& out = s[static_cast<size_t>(h) * in->slots + j];
      if (in->candidates != nullptr && in->candidates[j] == 0) {
        out = -INFINITY;
        continue;
      }
      const T* kj = k + g * in->head_stride + static_cast<size_t>(j) * p;
      double acc = 0;
      for (uint32_t i = 0; i < p; ++i) acc += static_cast<double>(q[i]) * static_cast<double>(widen_key(kj[i]));
      out = acc * in->scale;
    }
  }
}

}  // namespace

lh_status lh_infinigen_select(uint32_t layer, const lh_select_input* in, const lh_infinigen_knobs* knobs,
                              const lh_select_scratch* scratch, int32_t* selected, size_t selected_stride,
                              uint32_t* n_out, uint32_t* candidates_out, int32_t* counts) {
  if (in == nullptr || !knobs_ok(knobs) || scratch == nullptr || selected == nullptr || n_out == nullptr ||
      candidates_out == nullptr)
    return LH_BAD_ARGUMENT;
  const uint32_t heads = in->heads, kvh = in->kv_heads, p = in->p, slots = in->slots;
  if (heads == 0 || kvh == 0 || heads % kvh != 0 || p == 0 || heads > LH_MAX_HEADS || selected_stride < slots ||
      in->head_stride < static_cast<size_t>(slots) * p || lh_kv_type_bytes(in->k_type) == 0 || !(in->scale > 0) ||
      !std::isfinite(in->scale))
    return LH_BAD_ARGUMENT;
  if (slots > 0 && (in->q_partial == nullptr || in->k_partial == nullptr || scratch->scores == nullptr ||
                    scratch->combined == nullptr || scratch->values == nullptr))
    return LH_BAD_ARGUMENT;
  const uint8_t* cand = in->candidates;
  uint32_t N = 0;
  for (uint32_t j = 0; j < slots; ++j) N += (cand == nullptr || cand[j] != 0) ? 1 : 0;
  *candidates_out = N;
  if (N == 0 || layer < knobs->dense_layers) {
    select_all(kvh, slots, cand, selected, selected_stride);
    *n_out = N;
    return LH_OK;
  }
  if (in->k_type == LH_KV_F32) score_rows(in, static_cast<const float*>(in->k_partial), scratch->scores);
  else score_rows(in, static_cast<const uint16_t*>(in->k_partial), scratch->scores);
  return select_from_scores(scratch->scores, heads, kvh, slots, cand, N, knobs, scratch->combined, scratch->values, selected,
                            selected_stride, n_out, counts);
}

// ---------------------------------------------------------------------------------------------
// The speculator
// ---------------------------------------------------------------------------------------------
// One thread's scratch for phase A of a KV group (the worker's, and the main thread's when it helps).
struct lh_group_scratch {
  double* gscores;  // (group, gstride) scores of one KV group's heads
  double* combined; // (capacity)
  double* values;   // (2 · capacity)
  int32_t* list;    // (capacity + 8) slots of the top buckets
};

struct lh_speculator {
  lh_kv_pool* pool;
  lh_speculator_config cfg;
  uint32_t layers, kvh, d, p, heads, group, dense, sparse;
  uint32_t rows;          // listed rows per KV head: the largest n + the current token
  size_t row_bytes;       // bytes of one K (or V) row
  // The device-side reuse cache, as bookkeeping: on the CPU provider attention reads the selected
  // rows in place (ARCHITECTURE.md §3), so nothing is copied; which rows a device would already
  // hold is tracked to count hits, misses and the bytes that would have crossed.
  int32_t* staged;        // (sparse layer, buffer 2, kv_head, rows) slots held, ascending; the active
                          // buffer is also the row list attention reads: [selected slots, current token]
  int32_t* staged_pos;    // (sparse layer, buffer 2, kv_head, rows) token position of each staged row,
                          // evicting pools only (an evicted slot reused by a new token is a miss, not a
                          // stale hit); without eviction a slot keeps its token until clear_staging
  uint32_t* staged_n;     // (sparse layer, buffer 2) rows held per KV head
  uint8_t* active;        // (sparse layer) which buffer is current
  float* qspec;           // (layer, heads, head_dim) copied at begin()
  uint32_t* job_len;      // (layer) N at begin()
  uint64_t* job_appends;  // (layer) pool appends at begin() (evicting pools)
  uint8_t* job_cand;      // (layer, capacity) candidate flags copied at begin() (evicting pools)
  int32_t* job_victim;    // (layer) the victim reserved at begin(), -1 if none: append() overwrites its
                          // rows while the job runs, so the job reads neither its partial row nor its counter
  uint8_t* state;         // (layer) 0 idle, 1 queued or running, 2 done
  lh_layer_stats* stats;  // (layer)
  // worker scratch
  float* qtilde;          // (heads, p)
  size_t gstride;         // capacity rounded up to 8
  int32_t* top_slots;     // (kv_head, rows) each group's top K slots, ascending (phase A)
  double* top_vals;       // (kv_head, rows) their combined scores
  uint64_t* bits;         // (capacity / 64 rounded up) zero between uses: the reuse cache's slot marks
  int32_t* sel;           // (kv_head, capacity)
  uint32_t* sel_n;        // (layer) latest n
  lh_attention_params* attn;  // (layer) each layer's attention block (sinks pointing into attn_sinks)
  float* attn_sinks;          // (layer, heads) copies of the layers' sinks (where set)
  // queue
  uint32_t* queue;        // (layers) ring
  uint32_t q_head, q_count;
  // phase A shared by the worker and, while it waits in attend(), the main thread: groups are claimed
  // from claim = (job tag << 32) | next group; the job's inputs below are written before claim is
  // published (release) and read after it is loaded (acquire); done counts finished groups.
  lh_group_scratch* scr;           // (n_scr) side worker: [0] worker, [1] main thread; inline: one per pool thread
  uint32_t n_scr;
  lh_worker_pool* inline_pool;     // inline: the shared pool while begin() holds its lock
  std::atomic<uint64_t> claim;
  std::atomic<uint32_t> done;
  uint32_t running_layer;          // under mu: the layer whose job the worker runs (or layers: none)
  uint32_t running_tag, tag_seq;   // under mu: that job's tag; the last tag handed out
  uint32_t a_N, a_cands, a_K;      // the published job's inputs
  const uint8_t* a_cand;
  int32_t a_victim;
  const uint16_t* a_kp;
  size_t a_tiles;          // tiles of 8 partial rows per KV head in the job's layer
  double* g_count;                 // (kv_head) Σ_h c_h of each group
  uint8_t* g_ok;                   // (kv_head) 0: a non-finite candidate score in the group
  bool stop;
  bool sync_ready;                 // mu and the condition variables are initialised
  bool thread_started;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_job, cv_done;
};

static bool group_phase_a(const lh_speculator* sp, const lh_group_scratch& w, uint32_t g, const uint16_t* kp_layer, uint32_t N,
                          const uint8_t* cand, int32_t victim, uint32_t cands, uint32_t K, double* counts_out);

// Claims and runs phase A groups of the job tagged `tag` until none is left (or another job is
// published); w is the calling thread's scratch. Returns how many groups it ran.
static uint32_t run_claimed_groups(lh_speculator* sp, uint32_t tag, const lh_group_scratch& w) {
  uint32_t ran = 0;
  uint64_t c = sp->claim.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(c >> 32) != tag || static_cast<uint32_t>(c) >= sp->kvh) return ran;
    if (!sp->claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    const uint32_t g = static_cast<uint32_t>(c);
    double cnt = 0;
    sp->g_ok[g] = group_phase_a(sp, w, g, sp->a_kp, sp->a_N, sp->a_cand, sp->a_victim, sp->a_cands, sp->a_K, &cnt) ? 1 : 0;
    sp->g_count[g] = cnt;
    sp->done.fetch_add(1, std::memory_order_release);
    ++ran;
    c = sp->claim.load(std::memory_order_acquire);
  }
}

namespace {

inline size_t sidx(const lh_speculator* sp, uint32_t layer, uint32_t buf) { return static_cast<size_t>(layer - sp->dense) * 2 + buf; }
inline int32_t* staged_slots(const lh_speculator* sp, uint32_t layer, uint32_t buf, uint32_t g) {
  return sp->staged + (sidx(sp, layer, buf) * sp->kvh + g) * sp->rows;
}
inline int32_t* staged_positions(const lh_speculator* sp, uint32_t layer, uint32_t buf, uint32_t g) {
  return sp->staged_pos + (sidx(sp, layer, buf) * sp->kvh + g) * sp->rows;
}
// The latest selection of (layer, g), ascending, then the current token once attend() ran.
inline int32_t* keep_list(const lh_speculator* sp, uint32_t layer, uint32_t g) {
  return staged_slots(sp, layer, sp->active[layer - sp->dense], g);
}
inline int32_t pool_pos(const lh_speculator* sp, uint32_t layer, uint32_t g, uint32_t slot) {
  return sp->pool->pos[lh_kv_pool_slot_index(sp->pool, layer, g, slot)];
}
// The slot of the current token (appended after begin()).
inline uint32_t current_slot(const lh_speculator* sp, uint32_t layer) {
  return sp->pool->evict != 0 ? static_cast<uint32_t>(lh_kv_pool_last_slot(sp->pool, layer)) : sp->job_len[layer];
}

// The k-th largest of v[0..c) (1 <= k <= c, finite values, lo / hi their min / max) and, in *above,
// how many are strictly larger; v is left as it is, buf (c) is scratch. The same histogram search as
// nth_largest without its min/max pass and without reordering v (the combine pass found lo and hi).
double kth_largest(const double* v, uint32_t c, uint32_t k, double lo, double hi, double* buf, uint32_t* above) {
  constexpr uint32_t kBuckets = 1024;
  uint32_t hist[kBuckets] = {};
  const double inv = hi > lo ? kBuckets / (hi - lo) : 0.0;
  auto bucket = [lo, inv](double x) -> uint32_t {
    const double b = (x - lo) * inv;
    return b >= kBuckets - 1 ? kBuckets - 1 : static_cast<uint32_t>(b);
  };
  for (uint32_t i = 0; i < c; ++i) ++hist[bucket(v[i])];
  uint32_t b = kBuckets - 1, higher = 0;
  while (higher + hist[b] < k) higher += hist[b--];
  uint32_t m = 0;
  for (uint32_t i = 0; i < c; ++i) {  // branch-free compaction of bucket b's values
    buf[m] = v[i];
    m += bucket(v[i]) == b ? 1 : 0;
  }
  const uint32_t need = k - higher;  // 1..m
  std::nth_element(buf, buf + (need - 1), buf + m, [](double x, double y) { return x > y; });
  const double tau = buf[need - 1];
  uint32_t larger = higher;
  for (uint32_t i = 0; i < need - 1; ++i) larger += buf[i] > tau ? 1 : 0;
  *above = larger;
  return tau;
}

// The top k of (value desc, slot asc) among the listed entries, ascending by slot: every value above
// tau (the k-th largest, `above` of them larger) and the first k − above holding exactly tau.
// vals[r] belongs to slot slots[r] (slots == null: slot r); cand (indexed by slot) may be null.
uint32_t take_top(const double* vals, const int32_t* slots, uint32_t count, const uint8_t* cand, double tau, uint32_t above,
                  uint32_t k, int32_t* out_slots, double* out_vals) {
  uint32_t ties_left = k - above, r = 0;
  for (uint32_t j = 0; j < count && r < k; ++j) {
    const int32_t slot = slots != nullptr ? slots[j] : static_cast<int32_t>(j);
    if (cand != nullptr && cand[slot] == 0) continue;
    const double x = vals[j];
    const bool tie = x == tau && ties_left > 0;
    out_slots[r] = slot;
    if (out_vals != nullptr) out_vals[r] = x;
    r += (x > tau || tie) ? 1 : 0;
    ties_left -= tie ? 1 : 0;
  }
  return r;
}

}  // namespace

// The group's top K by kth_largest over all of comb (the plain route; group_phase_a lists the top buckets instead).
static bool group_top_fallback(const lh_group_scratch& w, const double* comb, uint32_t N, uint32_t K, double lo, double hi,
                               int32_t* ts, double* tv) {
  uint32_t above = 0;
  const double tau = kth_largest(comb, N, K, lo, hi, w.values, &above);
  take_top(comb, nullptr, N, nullptr, tau, above, K, ts, tv);
  return true;
}

// Phase A of one KV group g (lh_speculator's job; the §4.5 rule split so that a group's scores stay
// in cache): the scores of the group's heads, each head's max and count c_h, the combined score
// per candidate, and the group's top K = min(⌊cap·N⌋, N) by (combined desc, slot asc) kept ascending
// in top_slots / top_vals. The final n <= K, and the top n of the whole order are the top n of that
// list, so phase B picks exactly what select_from_scores picks. False on a non-finite candidate score.
static bool group_phase_a(const lh_speculator* sp, const lh_group_scratch& w, uint32_t g, const uint16_t* kp_layer, uint32_t N,
                          const uint8_t* cand, int32_t victim, uint32_t cands, uint32_t K, double* counts_out) {
  const uint32_t group = sp->group;
  const size_t stride = sp->gstride, tiles_per_head = sp->a_tiles;
  const uint16_t* kp = kp_layer + static_cast<size_t>(g) * tiles_per_head * sp->p * 8;
  double* gs = w.gscores;
  double m[LH_MAX_HEADS];
  uint32_t finite = 1;
  // the victim is not a candidate (cand[victim] == 0) and append() may be writing its partial row: not read
  lh_spec_score_group(kp, sp->p, N, sp->qtilde + static_cast<size_t>(g) * group * sp->p, group, sp->cfg.scale, gs, stride,
                      m, &finite, LH_ATTN_AUTO, victim);
  if (cand != nullptr) {  // evicting pools: non-candidates score -inf; max and finiteness over candidates
    finite = 1;
    for (uint32_t hh = 0; hh < group; ++hh) {
      double* row = gs + hh * stride;
      double mh = -INFINITY;
      for (uint32_t j = 0; j < N; ++j) {
        if (cand[j] == 0) row[j] = -INFINITY;
        else if (!std::isfinite(row[j])) finite = 0;
        mh = std::max(mh, row[j]);
      }
      m[hh] = mh;
    }
  }
  if (finite == 0) return false;
  double total = 0;
  for (uint32_t hh = 0; hh < group; ++hh) total += lh_spec_count_above(gs + hh * stride, N, m[hh] - sp->cfg.knobs.alpha);
  *counts_out = total;
  double* comb = w.combined;
  double lo = 0, hi = 0;
  lh_spec_combine(gs, stride, group, m, N, comb, &lo, &hi);
  int32_t* ts = sp->top_slots + static_cast<size_t>(g) * sp->rows;
  double* tv = sp->top_vals + static_cast<size_t>(g) * sp->rows;
  if (K >= cands) {  // every candidate
    uint32_t r = 0;
    for (uint32_t j = 0; j < N; ++j)
      if (cand == nullptr || cand[j] != 0) {
        ts[r] = static_cast<int32_t>(j);
        tv[r++] = comb[j];
      }
    return true;
  }
  uint32_t above = 0;
  double tau;
  if (cand == nullptr) {
    // the bucket b holding the K-th largest (kth_largest's histogram), then the slots of buckets >= b
    // in slot order (about K of them); the K-th largest among those is the K-th largest of all, and
    // every slot holding it or more is listed, so the ascending pick below is the same as over comb
    const double inv = hi > lo ? kSpecBuckets / (hi - lo) : 0.0;  // inf spread: inv 0, one bucket
    uint32_t hist[kSpecBuckets];
    lh_spec_histogram(comb, N, lo, inv, hist);
    uint32_t b = kSpecBuckets - 1, higher = 0;
    while (higher + hist[b] < K) higher += hist[b--];
    int32_t* list = w.list;
    const uint32_t m = lh_spec_collect(comb, N, lo, inv, b, list);
    if (m != higher + hist[b]) return group_top_fallback(w, comb, N, K, lo, hi, ts, tv);  // never: the same buckets
    // the listed values; those of bucket b (the rest are above it) go to buf, where the need-th largest is tau
    double* lv = w.values;
    double* buf = lv + m;  // values has room for 2·N
    uint32_t nb = 0;
    for (uint32_t r = 0; r < m; ++r) {
      const double x = comb[list[r]];
      lv[r] = x;
      buf[nb] = x;
      nb += lh_spec_bucket(x, lo, inv) == b ? 1 : 0;
    }
    const uint32_t need = K - higher;  // 1..nb (nb == hist[b])
    if (need > nb) return group_top_fallback(w, comb, N, K, lo, hi, ts, tv);  // never (same buckets)
    std::nth_element(buf, buf + (need - 1), buf + nb, [](double x, double y) { return x > y; });
    tau = buf[need - 1];
    above = higher;
    for (uint32_t r = 0; r < need - 1; ++r) above += buf[r] > tau ? 1 : 0;
    take_top(lv, list, m, nullptr, tau, above, K, ts, tv);
    return true;
  } else {
    uint32_t c = 0;
    for (uint32_t j = 0; j < N; ++j)
      if (cand[j] != 0) w.values[c++] = comb[j];
    tau = nth_largest(w.values, c, K, &above);
  }
  take_top(comb, nullptr, N, cand, tau, above, K, ts, tv);
  return true;
}

// Phase B: n given, each KV group's top n from its top-K list, ascending, into sel.
static void group_phase_b(lh_speculator* sp, uint32_t g, uint32_t n, uint32_t K) {
  const int32_t* ts = sp->top_slots + static_cast<size_t>(g) * sp->rows;
  const double* tv = sp->top_vals + static_cast<size_t>(g) * sp->rows;
  int32_t* row = sp->sel + static_cast<size_t>(g) * sp->pool->capacity;
  if (n >= K) {
    std::memcpy(row, ts, static_cast<size_t>(K) * sizeof(int32_t));
    return;
  }
  double lo = tv[0], hi = tv[0];
  for (uint32_t r = 1; r < K; ++r) {
    lo = std::min(lo, tv[r]);
    hi = std::max(hi, tv[r]);
  }
  uint32_t above = 0;
  const double tau = kth_largest(tv, K, n, lo, hi, sp->scr[0].values, &above);
  take_top(tv, ts, K, nullptr, tau, above, n, row, nullptr);
}

namespace {

struct InlineGroups {
  lh_speculator* sp;
  uint32_t tag;
};

// Pool ranges of parts: part r claims groups with scratch r.
void run_inline_groups(void* ctx, uint32_t begin, uint32_t end) {
  const InlineGroups* job = static_cast<const InlineGroups*>(ctx);
  for (uint32_t r = begin; r < end; ++r) run_claimed_groups(job->sp, job->tag, job->sp->scr[r]);
}

void run_job(lh_speculator* sp, uint32_t layer, uint32_t tag) {
  lh_layer_stats& st = sp->stats[layer];
  st.job_start_ns = lh_now_ns();
  const uint32_t N = sp->job_len[layer];
  const lh_kv_pool* pool = sp->pool;
  const size_t d = sp->d, p = sp->p;
  // q̃_h = q_spec_h · A_{layer, g}[:, C]
  const float* qs = sp->qspec + static_cast<size_t>(layer) * sp->heads * d;
  for (uint32_t h = 0; h < sp->heads; ++h) {
    const float* proj = pool->proj + (static_cast<size_t>(layer) * sp->kvh + h / sp->group) * d * p;  // (d, p)
    float* qt = sp->qtilde + h * p;
    for (size_t i = 0; i < p; ++i) qt[i] = 0.0f;
    for (size_t j = 0; j < d; ++j) {
      const float x = qs[h * d + j];
      for (size_t i = 0; i < p; ++i) qt[i] += x * proj[j * p + i];
    }
  }
  const uint8_t* cand = pool->evict != 0 ? sp->job_cand + static_cast<size_t>(layer) * pool->capacity : nullptr;
  uint32_t cands = 0;
  for (uint32_t j = 0; j < N; ++j) cands += (cand == nullptr || cand[j] != 0) ? 1 : 0;
  uint32_t n = 0;
  lh_status sel_st = LH_OK;
  if (cands == 0) {
    sp->claim.store((static_cast<uint64_t>(tag) << 32) | sp->kvh, std::memory_order_release);  // nothing to claim
    select_all(sp->kvh, N, cand, sp->sel, pool->capacity);
  } else {
    // §4.5 per KV group (phase A: scores, counts, the group's top ⌊cap·N⌋), then n and each group's top n
    const uint32_t K = std::min(std::max<uint32_t>(1, fraction_of(sp->cfg.knobs.cap, cands)), cands);  // n <= K
    sp->a_N = N;
    sp->a_cands = cands;
    sp->a_K = K;
    sp->a_cand = cand;
    sp->a_victim = cand != nullptr ? sp->job_victim[layer] : -1;
    sp->a_kp = lh_kv_pool_partial_rows(pool, layer);
    sp->a_tiles = lh_kv_pool_partial_slots(pool, layer) / 8;
    sp->done.store(0, std::memory_order_relaxed);
    sp->claim.store(static_cast<uint64_t>(tag) << 32, std::memory_order_release);  // the main thread may help from here
    if (sp->cfg.inline_threads > 0) {
      // inline: every pool thread claims groups with its own scratch (claiming balances uneven groups)
      InlineGroups job{sp, tag};
      const uint32_t parts = std::min(sp->cfg.inline_threads, sp->kvh);
      lh_worker_pool_run(sp->inline_pool, parts, parts, run_inline_groups, &job);
    } else {
      run_claimed_groups(sp, tag, sp->scr[0]);
    }
    while (sp->done.load(std::memory_order_acquire) < sp->kvh) sched_yield();  // a group the main thread still runs
    double total = 0;
    for (uint32_t g = 0; g < sp->kvh; ++g) {
      if (sp->g_ok[g] == 0) sel_st = LH_BAD_ARGUMENT;
      total += sp->g_count[g];
    }
    if (sel_st == LH_OK) {
      n = std::max<uint32_t>(1, std::min<uint32_t>(static_cast<uint32_t>(std::floor(total / sp->heads)), fraction_of(sp->cfg.knobs.cap, cands)));
      for (uint32_t g = 0; g < sp->kvh; ++g) group_phase_b(sp, g, n, K);
    }
  }
  if (sel_st != LH_OK) {
    // a non-finite score: fall back to the newest candidates rather than fail the step
    // (ascending; a reserved victim is never among them)
    n = 0;
    for (uint32_t j = N; j-- > 0 && n < sp->rows - 1;)
      if (cand == nullptr || cand[j] != 0) ++n;
    for (uint32_t g = 0; g < sp->kvh; ++g) {
      uint32_t r = n;
      for (uint32_t j = N; j-- > 0 && r > 0;)
        if (cand == nullptr || cand[j] != 0) sp->sel[static_cast<size_t>(g) * pool->capacity + --r] = static_cast<int32_t>(j);
    }
  }
  if (pool->evict != 0)  // prefetch counters (§5): +1 per KV head that selects a slot, then aging (beside append())
    lh_kv_pool_note_job(sp->pool, layer, N, sp->job_victim[layer], sp->sel, pool->capacity, sp->kvh, n);
  const uint64_t t1 = lh_now_ns();
  // the reuse cache: merge the previous staged list with the new selection (both ascending); a row
  // staged before with the same token is a hit, anything else a miss that would cross to the device
  const uint32_t prev = sp->active[layer - sp->dense], cur = 1 - prev;
  const uint32_t np = sp->staged_n[sidx(sp, layer, prev)];
  const bool evicting = pool->evict != 0;  // only then can a slot change its token between steps
  uint32_t hits = 0, misses = 0;
  for (uint32_t g = 0; g < sp->kvh; ++g) {
    const int32_t* sel = sp->sel + static_cast<size_t>(g) * pool->capacity;
    const int32_t* old = staged_slots(sp, layer, prev, g);
    int32_t* now = staged_slots(sp, layer, cur, g);
    const int32_t* old_pos = staged_positions(sp, layer, prev, g);
    int32_t* now_pos = staged_positions(sp, layer, cur, g);
    if (!evicting) {
      // a bit per slot: mark the rows staged before, test the new ones, clear (no data-dependent branches)
      uint64_t* bits = sp->bits;
      for (uint32_t i = 0; i < np; ++i) bits[static_cast<uint32_t>(old[i]) >> 6] |= 1ull << (old[i] & 63);
      uint32_t h = 0;
      for (uint32_t r = 0; r < n; ++r) {
        const int32_t slot = sel[r];
        now[r] = slot;
        h += static_cast<uint32_t>(bits[static_cast<uint32_t>(slot) >> 6] >> (slot & 63)) & 1u;
      }
      for (uint32_t i = 0; i < np; ++i) bits[static_cast<uint32_t>(old[i]) >> 6] = 0;
      hits += h;
      misses += n - h;
      continue;
    }
    uint32_t i = 0;
    for (uint32_t r = 0; r < n; ++r) {
      const int32_t slot = sel[r];
      now[r] = slot;
      now_pos[r] = pool_pos(sp, layer, g, static_cast<uint32_t>(slot));
      while (i < np && old[i] < slot) ++i;
      if (i < np && old[i] == slot && old_pos[i] == now_pos[r]) ++hits;
      else ++misses;
    }
  }
  sp->staged_n[sidx(sp, layer, cur)] = n;
  sp->active[layer - sp->dense] = static_cast<uint8_t>(cur);
  sp->sel_n[layer] = n;
  const uint64_t t2 = lh_now_ns();
  st.n = n;
  st.candidates = cands;
  st.hits = hits;
  st.misses = misses;
  st.bytes = static_cast<uint64_t>(misses) * 2 * sp->row_bytes;
  st.spec_ns = t1 - st.job_start_ns;
  st.gather_ns = t2 - t1;
  st.job_end_ns = t2;
  st.valid = 1;
}

void* worker_main(void* arg) {
  lh_speculator* sp = static_cast<lh_speculator*>(arg);
  pthread_mutex_lock(&sp->mu);
  for (;;) {
    while (sp->q_count == 0 && !sp->stop) pthread_cond_wait(&sp->cv_job, &sp->mu);
    if (sp->q_count == 0 && sp->stop) break;
    const uint32_t layer = sp->queue[sp->q_head];
    const uint32_t tag = ++sp->tag_seq;
    sp->running_layer = layer;
    sp->running_tag = tag;
    pthread_cond_broadcast(&sp->cv_done);  // a main thread waiting for this layer may now help
    pthread_mutex_unlock(&sp->mu);
    run_job(sp, layer, tag);
    pthread_mutex_lock(&sp->mu);
    sp->running_layer = sp->layers;
    sp->q_head = (sp->q_head + 1) % sp->layers;
    sp->q_count -= 1;
    sp->state[layer] = 2;
    pthread_cond_broadcast(&sp->cv_done);
  }
  pthread_mutex_unlock(&sp->mu);
  return nullptr;
}

template <class T>
T* zalloc(size_t n) {
  return static_cast<T*>(std::calloc(n == 0 ? 1 : n, sizeof(T)));
}

// Waits until layer's job is done; false if it was never begun.
// While the worker runs this layer's job, the waiting thread scores groups of it too (the two cores
// split phase A when the main thread would otherwise sleep).
bool wait_layer(lh_speculator* sp, uint32_t layer) {
  const uint64_t t0 = lh_now_ns();
  pthread_mutex_lock(&sp->mu);
  uint32_t helped = 0;  // the tag this thread already helped
  while (sp->state[layer] == 1) {
    if (sp->running_layer == layer && sp->running_tag != helped) {
      const uint32_t tag = sp->running_tag;
      helped = tag;
      pthread_mutex_unlock(&sp->mu);
      // the worker publishes the job's groups after q̃ (microseconds): wait for its tag, then claim
      uint64_t c = sp->claim.load(std::memory_order_acquire);
      while (static_cast<int32_t>(static_cast<uint32_t>(c >> 32) - tag) < 0) {  // tags only grow
        sched_yield();
        c = sp->claim.load(std::memory_order_acquire);
      }
      run_claimed_groups(sp, tag, sp->scr[1]);
      pthread_mutex_lock(&sp->mu);
      continue;
    }
    pthread_cond_wait(&sp->cv_done, &sp->mu);
  }
  const bool ok = sp->state[layer] == 2;
  pthread_mutex_unlock(&sp->mu);
  sp->stats[layer].wait_ns = lh_now_ns() - t0;
  return ok;
}

}  // namespace

void lh_speculator_destroy(lh_speculator* sp) {
  if (sp == nullptr) return;
  if (sp->thread_started) {
    pthread_mutex_lock(&sp->mu);
    sp->stop = true;
    pthread_cond_broadcast(&sp->cv_job);
    pthread_mutex_unlock(&sp->mu);
    pthread_join(sp->thread, nullptr);
  }
  if (sp->sync_ready) {
    pthread_mutex_destroy(&sp->mu);
    pthread_cond_destroy(&sp->cv_job);
    pthread_cond_destroy(&sp->cv_done);
  }
  std::free(sp->staged);
  std::free(sp->staged_pos);
  std::free(sp->job_appends);
  std::free(sp->job_cand);
  std::free(sp->job_victim);
  std::free(sp->staged_n);
  std::free(sp->active);
  std::free(sp->qspec);
  std::free(sp->job_len);
  std::free(sp->state);
  std::free(sp->stats);
  std::free(sp->qtilde);
  for (uint32_t i = 0; sp->scr != nullptr && i < sp->n_scr; ++i) {
    lh_group_scratch& w = sp->scr[i];
    std::free(w.gscores);
    std::free(w.combined);
    std::free(w.values);
    std::free(w.list);
  }
  std::free(sp->scr);
  std::free(sp->g_count);
  std::free(sp->g_ok);
  std::free(sp->top_slots);
  std::free(sp->top_vals);
  std::free(sp->bits);
  std::free(sp->sel);
  std::free(sp->sel_n);
  std::free(sp->queue);
  std::free(sp->attn);
  std::free(sp->attn_sinks);
  std::free(sp);
}

lh_status lh_speculator_create(lh_speculator** out, lh_kv_pool* pool, const lh_speculator_config* cfg) {
  if (out == nullptr) return LH_BAD_ARGUMENT;
  *out = nullptr;
  if (!lh_kv_pool_live(pool) || pool->partial_dim == 0 || cfg == nullptr || !knobs_ok(&cfg->knobs) || cfg->heads == 0 ||
      cfg->heads > LH_MAX_HEADS || cfg->heads % pool->kv_heads != 0 || !(cfg->scale > 0) || !std::isfinite(cfg->scale) ||
      cfg->inline_threads > LH_MAX_RANGE_THREADS)
    return LH_BAD_ARGUMENT;
  if (cfg->layer_attention != nullptr)
    for (uint32_t l = 0; l < pool->layers; ++l)
      if (lh_attention_params_check(&cfg->layer_attention[l], cfg->heads) != LH_OK) return LH_BAD_ARGUMENT;
  lh_speculator* sp = zalloc<lh_speculator>(1);
  if (sp == nullptr) return LH_OUT_OF_MEMORY;
  sp->pool = pool;
  sp->cfg = *cfg;
  sp->layers = pool->layers;
  sp->kvh = pool->kv_heads;
  sp->d = pool->head_dim;
  sp->p = pool->partial_dim;
  sp->heads = cfg->heads;
  sp->group = cfg->heads / pool->kv_heads;
  sp->dense = std::min(cfg->knobs.dense_layers, pool->layers);
  sp->sparse = pool->layers - sp->dense;
  sp->rows = std::max<uint32_t>(1, fraction_of(cfg->knobs.cap, pool->capacity)) + 1;
  sp->row_bytes = lh_kv_pool_row_bytes(pool);  // int8: the row's scale moves with it
  const size_t cap = pool->capacity;
  sp->staged = zalloc<int32_t>(static_cast<size_t>(sp->sparse) * 2 * sp->kvh * sp->rows);
  sp->staged_pos = zalloc<int32_t>(static_cast<size_t>(sp->sparse) * 2 * sp->kvh * sp->rows);
  sp->job_appends = zalloc<uint64_t>(sp->layers);
  sp->job_cand = zalloc<uint8_t>(pool->evict != 0 ? static_cast<size_t>(sp->layers) * cap : 1);
  sp->job_victim = zalloc<int32_t>(sp->layers);
  sp->staged_n = zalloc<uint32_t>(static_cast<size_t>(sp->sparse) * 2);
  sp->active = zalloc<uint8_t>(sp->sparse);
  sp->qspec = zalloc<float>(static_cast<size_t>(sp->layers) * sp->heads * sp->d);
  sp->job_len = zalloc<uint32_t>(sp->layers);
  sp->state = zalloc<uint8_t>(sp->layers);
  sp->stats = zalloc<lh_layer_stats>(sp->layers);
  sp->qtilde = zalloc<float>(static_cast<size_t>(sp->heads) * sp->p);
  sp->gstride = (static_cast<size_t>(pool->capacity) + 7) & ~static_cast<size_t>(7);  // the largest layer's, rounded up to 8
  sp->n_scr = std::max<uint32_t>(2, cfg->inline_threads);
  sp->scr = zalloc<lh_group_scratch>(sp->n_scr);
  bool scr_ok = sp->scr != nullptr;
  for (uint32_t i = 0; scr_ok && i < sp->n_scr; ++i) {
    lh_group_scratch& w = sp->scr[i];
    w.gscores = zalloc<double>(sp->group * sp->gstride);
    w.combined = zalloc<double>(cap);
    w.values = zalloc<double>(2 * cap);
    w.list = zalloc<int32_t>(cap + 8);
    scr_ok = w.gscores != nullptr && w.combined != nullptr && w.values != nullptr && w.list != nullptr;
  }
  sp->g_count = zalloc<double>(sp->kvh);
  sp->g_ok = zalloc<uint8_t>(sp->kvh);
  sp->running_layer = sp->layers;
  sp->claim.store(0);
  sp->done.store(0);
  sp->top_slots = zalloc<int32_t>(static_cast<size_t>(sp->kvh) * sp->rows);
  sp->top_vals = zalloc<double>(static_cast<size_t>(sp->kvh) * sp->rows);
  sp->bits = zalloc<uint64_t>(cap / 64 + 1);
  sp->sel = zalloc<int32_t>(sp->kvh * cap);
  sp->sel_n = zalloc<uint32_t>(sp->layers);
  sp->queue = zalloc<uint32_t>(sp->layers);
  sp->attn = zalloc<lh_attention_params>(sp->layers);
  sp->attn_sinks = zalloc<float>(static_cast<size_t>(sp->layers) * sp->heads);
  for (uint32_t l = 0; sp->attn != nullptr && sp->attn_sinks != nullptr && l < sp->layers; ++l) {
    sp->attn[l] = cfg->layer_attention != nullptr ? cfg->layer_attention[l] : lh_attention_params_default(sp->d);
    if (sp->attn[l].sinks != nullptr) {
      float* own = sp->attn_sinks + static_cast<size_t>(l) * sp->heads;
      std::memcpy(own, sp->attn[l].sinks, sp->heads * sizeof(float));
      sp->attn[l].sinks = own;
    }
  }
  sp->cfg.layer_attention = nullptr;  // the caller's array is not kept
  if (sp->staged == nullptr || sp->staged_pos == nullptr || sp->job_appends == nullptr || sp->job_cand == nullptr || sp->job_victim == nullptr || sp->staged_n == nullptr || sp->active == nullptr || sp->qspec == nullptr || sp->job_len == nullptr ||
      sp->state == nullptr || sp->stats == nullptr || sp->qtilde == nullptr || !scr_ok || sp->g_count == nullptr || sp->g_ok == nullptr || sp->top_slots == nullptr || sp->top_vals == nullptr || 
       sp->bits == nullptr || sp->sel == nullptr || sp->sel_n == nullptr || sp->queue == nullptr || sp->attn == nullptr || sp->attn_sinks == nullptr) {
    lh_speculator_destroy(sp);
    return LH_OUT_OF_MEMORY;
  }
  pthread_mutex_init(&sp->mu, nullptr);
  pthread_cond_init(&sp->cv_job, nullptr);
  pthread_cond_init(&sp->cv_done, nullptr);
  sp->sync_ready = true;
  if (cfg->inline_threads > 0 ? lh_shared_pool_reserve(cfg->inline_threads) != LH_OK
                              : pthread_create(&sp->thread, nullptr, worker_main, sp) != 0) {
    lh_speculator_destroy(sp);
    return LH_OUT_OF_MEMORY;
  }
  sp->thread_started = cfg->inline_threads == 0;
  *out = sp;
  return LH_OK;
}

lh_status lh_speculator_begin(lh_speculator* sp, uint32_t layer, const float* q_spec) {
  if (sp == nullptr || q_spec == nullptr || !lh_kv_pool_live(sp->pool) || layer >= sp->layers || layer < sp->dense ||
      sp->pool->proj_set[layer] == 0)
    return LH_BAD_ARGUMENT;
  pthread_mutex_lock(&sp->mu);
  const bool busy = sp->state[layer] == 1;
  pthread_mutex_unlock(&sp->mu);
  if (busy) return LH_BAD_ARGUMENT;  // one job per layer at a time
  const size_t w = static_cast<size_t>(sp->heads) * sp->d;
  std::memcpy(sp->qspec + layer * w, q_spec, w * sizeof(float));
  if (sp->pool->evict != 0) {
    // a full layer: the victim of the coming append leaves the candidate set before selection runs
    const lh_status st = lh_kv_pool_reserve_victim(sp->pool, layer);
    if (st != LH_OK) return st;
    const size_t cap = sp->pool->capacity;
    std::memcpy(sp->job_cand + layer * cap, lh_kv_pool_candidates(sp->pool, layer), lh_kv_pool_length(sp->pool, layer));
    const lh_kv_evict_layer* e = lh_kv_pool_evict_state(sp->pool, layer);
    sp->job_appends[layer] = e->appends;
    sp->job_victim[layer] = e->pending != 0 ? static_cast<int32_t>(e->pending - 1) : -1;
  }
  sp->job_len[layer] = lh_kv_pool_length(sp->pool, layer);
  sp->stats[layer] = lh_layer_stats{};
  sp->stats[layer].begin_ns = lh_now_ns();
  if (sp->cfg.inline_threads > 0) {  // the job now, on the shared pool
    pthread_mutex_lock(&sp->mu);
    const uint32_t tag = ++sp->tag_seq;
    sp->state[layer] = 1;
    pthread_mutex_unlock(&sp->mu);
    sp->inline_pool = lh_shared_pool_lock();
    run_job(sp, layer, tag);
    sp->inline_pool = nullptr;
    lh_shared_pool_unlock();
    pthread_mutex_lock(&sp->mu);
    sp->state[layer] = 2;
    pthread_mutex_unlock(&sp->mu);
    return LH_OK;
  }
  pthread_mutex_lock(&sp->mu);
  sp->state[layer] = 1;
  sp->queue[(sp->q_head + sp->q_count) % sp->layers] = layer;
  sp->q_count += 1;
  pthread_cond_signal(&sp->cv_job);
  pthread_mutex_unlock(&sp->mu);
  return LH_OK;
}

void lh_speculator_drain(lh_speculator* sp) {
  if (sp == nullptr) return;
  pthread_mutex_lock(&sp->mu);
  while (sp->q_count > 0) pthread_cond_wait(&sp->cv_done, &sp->mu);
  pthread_mutex_unlock(&sp->mu);
}

void lh_speculator_clear_staging(lh_speculator* sp) {
  if (sp == nullptr) return;
  lh_speculator_drain(sp);
  for (uint32_t i = 0; i < sp->sparse * 2; ++i) sp->staged_n[i] = 0;
  for (uint32_t l = 0; l < sp->layers; ++l) {
    sp->state[l] = 0;
    sp->sel_n[l] = 0;
    sp->stats[l] = lh_layer_stats{};
  }
}

namespace {
// Checks that the layer's job ran and the current token is the one slot appended since begin().
lh_status ready_for_attention(lh_speculator* sp, uint32_t layer, const float* q, const float* out) {
  if (sp == nullptr || q == nullptr || out == nullptr || !lh_kv_pool_live(sp->pool) || layer >= sp->layers || layer < sp->dense)
    return LH_BAD_ARGUMENT;
  if (!wait_layer(sp, layer)) return LH_BAD_ARGUMENT;
  if (sp->pool->evict != 0) {
    if (lh_kv_pool_evict_state(sp->pool, layer)->appends != sp->job_appends[layer] + 1) return LH_BAD_ARGUMENT;
  } else if (lh_kv_pool_length(sp->pool, layer) != sp->job_len[layer] + 1) {
    return LH_BAD_ARGUMENT;
  }
  return LH_OK;
}
}  // namespace

lh_status lh_speculator_attend(lh_speculator* sp, uint32_t layer, const float* q, float* out, uint32_t threads) {
  if (threads == 0 || threads > LH_MAX_ATTENTION_THREADS) return LH_BAD_ARGUMENT;
  const lh_status st = ready_for_attention(sp, layer, q, out);
  if (st != LH_OK) return st;
  const uint64_t t0 = lh_now_ns();
  const uint32_t buf = sp->active[layer - sp->dense];
  const uint32_t n = sp->sel_n[layer];
  const uint32_t cur_slot = current_slot(sp, layer);
  for (uint32_t g = 0; g < sp->kvh; ++g) {  // the current token after the selected rows; it stays staged
    staged_slots(sp, layer, buf, g)[n] = static_cast<int32_t>(cur_slot);
    if (sp->pool->evict != 0) staged_positions(sp, layer, buf, g)[n] = pool_pos(sp, layer, g, cur_slot);
  }
  sp->staged_n[sidx(sp, layer, buf)] = n + 1;
  // attention reads the listed pool rows in place: [selected slots ascending, current slot]
  lh_attention_args a{};
  a.q = q;
  a.k = lh_kv_pool_k_rows(sp->pool, layer);
  a.v = lh_kv_pool_v_rows(sp->pool, layer);
  a.out = out;
  a.head_stride = lh_kv_pool_head_stride(sp->pool, layer);
  a.tokens = n + 1;
  a.heads = sp->heads;
  a.kv_heads = sp->kvh;
  a.head_dim = sp->d;
  lh_attention_args_set_params(&a, &sp->attn[layer]);  // default: scale 1/√head_dim and nothing else
  a.kv_type = sp->pool->kv_type;
  a.k_scale = lh_kv_pool_k_scales(sp->pool, layer);  // int8: (kv_head, capacity), indexed like the rows; else null
  a.v_scale = lh_kv_pool_v_scales(sp->pool, layer);
  a.rows = keep_list(sp, layer, 0);
  a.rows_stride = sp->rows;
  if (a.window != 0) {
    a.positions = lh_kv_pool_positions(sp->pool, layer);  // (kv_head, capacity), indexed like the rows
    a.query_position = pool_pos(sp, layer, 0, cur_slot);
  }
  lh_status done;
  if (sp->cfg.inline_threads > 0) {
    lh_worker_pool* pool = lh_shared_pool_lock();
    done = lh_attention_decode_pool(&a, pool, std::min(threads, sp->cfg.inline_threads));
    lh_shared_pool_unlock();
  } else {
    done = lh_attention_decode_threads(&a, threads);
  }
  sp->stats[layer].attn_ns = lh_now_ns() - t0;
  return done;
}

lh_status lh_speculator_attend_ref(lh_speculator* sp, uint32_t layer, const float* q, float* out) {
  const lh_status st = ready_for_attention(sp, layer, q, out);
  if (st != LH_OK) return st;
  const int32_t* lists[LH_MAX_KV_HEADS];
  for (uint32_t g = 0; g < sp->kvh; ++g) lists[g] = keep_list(sp, layer, g);
  return lh_attention_gathered_ref(sp->pool, layer, lists, sp->sel_n[layer], current_slot(sp, layer), q, sp->heads, out, &sp->attn[layer]);
}

lh_status lh_speculator_recall(lh_speculator* sp, uint32_t layer, const float* q, double* recall) {
  if (sp == nullptr || q == nullptr || recall == nullptr || layer >= sp->layers || layer < sp->dense || sp->state[layer] != 2)
    return LH_BAD_ARGUMENT;
  const uint32_t len = lh_kv_pool_length(sp->pool, layer);
  const uint32_t n = sp->sel_n[layer];
  const uint32_t cur = current_slot(sp, layer);
  const lh_attention_params& attn = sp->attn[layer];
  const float scale = attn.scale;
  const int64_t newest = pool_pos(sp, layer, 0, cur), oldest = newest - static_cast<int64_t>(attn.window);
  double total = 0;
  float row[LH_MAX_HEAD_DIM];
  double* s = sp->scr[0].combined;  // (len) worker scratch: the worker is idle for this layer; drain to be sure
  lh_speculator_drain(sp);
  for (uint32_t h = 0; h < sp->heads; ++h) {
    const uint32_t g = h / sp->group;
    double m = -INFINITY;
    for (uint32_t t = 0; t < len; ++t) {
      int32_t p = 0;
      lh_kv_pool_read(sp->pool, LH_KV_KEY, layer, g, t, row, &p);
      if (attn.window != 0 && (p <= oldest || p > newest)) {  // outside the window: no mass
        s[t] = -INFINITY;
        continue;
      }
      double acc = 0;
      for (uint32_t i = 0; i < sp->d; ++i) acc += static_cast<double>(q[h * sp->d + i]) * row[i];
      s[t] = acc * scale;
      if (attn.softcap > 0.0f) s[t] = attn.softcap * std::tanh(s[t] / attn.softcap);
      m = std::max(m, s[t]);
    }
    double z = 0, covered = 0;  // over the rows only: a sink's share is no row's, and no selection misses it
    const int32_t* sel = keep_list(sp, layer, g);
    uint32_t r = 0;
    for (uint32_t t = 0; t < len; ++t) {
      if (s[t] == -INFINITY) continue;
      const double w = std::exp(s[t] - m);
      z += w;
      while (r < n && static_cast<uint32_t>(sel[r]) < t) ++r;
      if ((r < n && static_cast<uint32_t>(sel[r]) == t) || t == cur) covered += w;
    }
    total += covered / z;
  }
  *recall = total / sp->heads;
  return LH_OK;
}

const int32_t* lh_speculator_selected(lh_speculator* sp, uint32_t layer, uint32_t kv_head, uint32_t* n) {
  if (sp == nullptr || n == nullptr || layer >= sp->layers || layer < sp->dense || kv_head >= sp->kvh || sp->state[layer] != 2) return nullptr;
  *n = sp->sel_n[layer];
  return keep_list(sp, layer, kv_head);
}

const lh_layer_stats* lh_speculator_stats(lh_speculator* sp, uint32_t layer) {
  if (sp == nullptr || layer >= sp->layers) return nullptr;
  return &sp->stats[layer];
}
