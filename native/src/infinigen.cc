// InfiniGen selection, the speculation worker, gather with a reuse cache, and attention over the
// gathered rows. See infinigen.h for the contract and select-reference.ts for the rule.
#include "infinigen.h"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "attention.h"
#include "fp16.h"

uint64_t lh_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// ---------------------------------------------------------------------------------------------
// Selection (port of select-reference.ts; float64 like the reference, so both pick the same slots)
// ---------------------------------------------------------------------------------------------
namespace {

inline double key_elem(const void* rows, uint32_t type, size_t i) {
  return type == LH_KV_F32 ? static_cast<double>(static_cast<const float*>(rows)[i])
                           : static_cast<double>(lh_fp16_to_fp32(static_cast<const uint16_t*>(rows)[i]));
}

bool knobs_ok(const lh_infinigen_knobs* k) {
  return k != nullptr && k->alpha > 0 && std::isfinite(k->alpha) && k->cap > 0 && k->cap <= 1;
}

// ⌊fraction·N⌋ with the reference's 1e-9 slack.
inline uint32_t fraction_of(double fraction, uint32_t N) { return static_cast<uint32_t>(std::floor(fraction * N + 1e-9)); }

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
                    scratch->combined == nullptr || scratch->order == nullptr))
    return LH_BAD_ARGUMENT;
  const uint8_t* cand = in->candidates;
  uint32_t N = 0;
  for (uint32_t j = 0; j < slots; ++j) N += (cand == nullptr || cand[j] != 0) ? 1 : 0;
  *candidates_out = N;
  if (N == 0 || layer < knobs->dense_layers) {
    for (uint32_t g = 0; g < kvh; ++g) {
      int32_t* row = selected + g * selected_stride;
      uint32_t c = 0;
      for (uint32_t j = 0; j < slots; ++j)
        if (cand == nullptr || cand[j] != 0) row[c++] = static_cast<int32_t>(j);
    }
    *n_out = N;
    return LH_OK;
  }
  const uint32_t group = heads / kvh;
  double* s = scratch->scores;  // (heads, slots)
  for (uint32_t h = 0; h < heads; ++h) {
    const uint32_t g = h / group;
    const float* q = in->q_partial + static_cast<size_t>(h) * p;
    for (uint32_t j = 0; j < slots; ++j) {
      double& out = s[static_cast<size_t>(h) * slots + j];
      if (cand != nullptr && cand[j] == 0) {
        out = -INFINITY;
        continue;
      }
      const size_t k0 = g * in->head_stride + static_cast<size_t>(j) * p;
      double acc = 0;
      for (uint32_t i = 0; i < p; ++i) acc += static_cast<double>(q[i]) * key_elem(in->k_partial, in->k_type, k0 + i);
      acc *= in->scale;
      if (!std::isfinite(acc)) return LH_BAD_ARGUMENT;
      out = acc;
    }
  }
  double max_of[LH_MAX_HEADS];  // (heads) m_h
  double total = 0;
  for (uint32_t h = 0; h < heads; ++h) {
    const double* sh = s + static_cast<size_t>(h) * slots;
    double m = -INFINITY;
    for (uint32_t j = 0; j < slots; ++j) m = std::max(m, sh[j]);
    max_of[h] = m;
    int32_t c = 0;
    for (uint32_t j = 0; j < slots; ++j) c += sh[j] > m - knobs->alpha ? 1 : 0;
    if (counts != nullptr) counts[h] = c;
    total += c;
  }
  const double mean = total / heads;
  const uint32_t n = std::max<uint32_t>(1, std::min<uint32_t>(static_cast<uint32_t>(std::floor(mean)), fraction_of(knobs->cap, N)));
  *n_out = n;
  double* comb = scratch->combined;
  int32_t* order = scratch->order;
  for (uint32_t g = 0; g < kvh; ++g) {
    uint32_t c = 0;
    for (uint32_t j = 0; j < slots; ++j) {
      if (cand != nullptr && cand[j] == 0) continue;
      double best = -INFINITY;
      for (uint32_t h = g * group; h < (g + 1) * group; ++h) best = std::max(best, s[static_cast<size_t>(h) * slots + j] - max_of[h]);
      comb[j] = best;
      order[c++] = static_cast<int32_t>(j);
    }
    int32_t* row = selected + g * selected_stride;
    if (n < c) {
      // larger score first, ties -> lower slot (a strict total order, so the set is unique)
      auto before = [comb](int32_t a, int32_t b) { return comb[a] > comb[b] || (comb[a] == comb[b] && a < b); };
      std::nth_element(order, order + n, order + c, before);
      std::sort(order, order + n);
    }
    std::memcpy(row, order, std::min(n, c) * sizeof(int32_t));
  }
  return LH_OK;
}

// ---------------------------------------------------------------------------------------------
// The speculator
// ---------------------------------------------------------------------------------------------
struct lh_speculator {
  lh_kv_pool* pool;
  lh_speculator_config cfg;
  uint32_t layers, kvh, d, p, heads, group, dense, sparse;
  uint32_t rows;          // staged rows per KV head and buffer: the largest n + the current token
  size_t row_bytes;       // bytes of one K (or V) row
  // staging, one mmap: K then V, each (sparse layer, buffer 2, kv_head, rows, head_dim) of kv_type
  void* stage_base;
  size_t stage_bytes;
  char* stage_k;
  char* stage_v;
  int32_t* staged;        // (sparse layer, buffer 2, kv_head, rows) slots held, ascending
  int32_t* staged_pos;    // (sparse layer, buffer 2, kv_head, rows) token position of each staged row
                          // (an evicted slot reused by a new token is a miss, not a stale hit)
  uint32_t* staged_n;     // (sparse layer, buffer 2) rows held per KV head
  uint8_t* active;        // (sparse layer) which buffer is current
  float* qspec;           // (layer, heads, head_dim) copied at begin()
  uint32_t* job_len;      // (layer) N at begin()
  uint64_t* job_appends;  // (layer) pool appends at begin() (evicting pools)
  uint8_t* job_cand;      // (layer, capacity) candidate flags copied at begin() (evicting pools)
  uint8_t* state;         // (layer) 0 idle, 1 queued or running, 2 done
  lh_layer_stats* stats;  // (layer)
  // worker scratch
  float* qtilde;          // (heads, p)
  double* scores;         // (heads, capacity)
  double* combined;       // (capacity)
  int32_t* order;         // (capacity)
  int32_t* sel;           // (kv_head, capacity)
  uint32_t* sel_n;        // (layer) latest n
  int32_t* sel_keep;      // (sparse layer, kv_head, rows) latest selection (for selected(), recall)
  // queue
  uint32_t* queue;        // (layers) ring
  uint32_t q_head, q_count;
  bool stop;
  bool thread_started;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_job, cv_done;
};

namespace {

inline size_t sidx(const lh_speculator* sp, uint32_t layer, uint32_t buf) { return static_cast<size_t>(layer - sp->dense) * 2 + buf; }
inline char* stage_row(const lh_speculator* sp, char* base, uint32_t layer, uint32_t buf, uint32_t g, uint32_t r) {
  return base + ((sidx(sp, layer, buf) * sp->kvh + g) * sp->rows + r) * sp->row_bytes;
}
inline int32_t* staged_slots(const lh_speculator* sp, uint32_t layer, uint32_t buf, uint32_t g) {
  return sp->staged + (sidx(sp, layer, buf) * sp->kvh + g) * sp->rows;
}
inline int32_t* staged_positions(const lh_speculator* sp, uint32_t layer, uint32_t buf, uint32_t g) {
  return sp->staged_pos + (sidx(sp, layer, buf) * sp->kvh + g) * sp->rows;
}
inline int32_t pool_pos(const lh_speculator* sp, uint32_t layer, uint32_t g, uint32_t slot) {
  return sp->pool->pos[(static_cast<size_t>(layer) * sp->kvh + g) * sp->pool->capacity + slot];
}
// The slot of the current token (appended after begin()).
inline uint32_t current_slot(const lh_speculator* sp, uint32_t layer) {
  return sp->pool->evict != 0 ? static_cast<uint32_t>(lh_kv_pool_last_slot(sp->pool, layer)) : sp->job_len[layer];
}
inline const char* pool_row(const lh_speculator* sp, const void* rows, uint32_t g, uint32_t slot) {
  return static_cast<const char*>(rows) + (static_cast<size_t>(g) * sp->pool->capacity + slot) * sp->row_bytes;
}

void run_job(lh_speculator* sp, uint32_t layer) {
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
  lh_select_input in{sp->heads, sp->kvh, sp->p, N, sp->qtilde, lh_kv_pool_partial_rows(pool, layer),
                     static_cast<size_t>(pool->capacity) * p, LH_KV_F16, cand, sp->cfg.scale};
  lh_select_scratch scr{sp->scores, sp->combined, sp->order};
  uint32_t n = 0, cands = 0;
  if (lh_infinigen_select(layer, &in, &sp->cfg.knobs, &scr, sp->sel, pool->capacity, &n, &cands, nullptr) != LH_OK) {
    // a non-finite score: fall back to every candidate (dense) rather than fail the step
    // (the newest candidates, ascending; a reserved victim is never among them)
    n = 0;
    for (uint32_t j = N; j-- > 0 && n < sp->rows - 1;)
      if (cand == nullptr || cand[j] != 0) ++n;
    for (uint32_t g = 0; g < sp->kvh; ++g) {
      uint32_t r = n;
      for (uint32_t j = N; j-- > 0 && r > 0;)
        if (cand == nullptr || cand[j] != 0) sp->sel[static_cast<size_t>(g) * pool->capacity + --r] = static_cast<int32_t>(j);
    }
  }
  if (pool->evict != 0) {  // prefetch counters (§5): +1 per KV head that selects a slot, then aging
    for (uint32_t g = 0; g < sp->kvh; ++g) lh_kv_pool_note_selected(sp->pool, layer, sp->sel + static_cast<size_t>(g) * pool->capacity, n);
    lh_kv_pool_age(sp->pool, layer);
  }
  const uint64_t t1 = lh_now_ns();
  // gather with reuse: merge the previous staged list with the new selection (both ascending)
  const uint32_t prev = sp->active[layer - sp->dense], cur = 1 - prev;
  const uint32_t np = sp->staged_n[sidx(sp, layer, prev)];
  const void* K = lh_kv_pool_k_rows(pool, layer);
  const void* V = lh_kv_pool_v_rows(pool, layer);
  uint32_t hits = 0, misses = 0;
  for (uint32_t g = 0; g < sp->kvh; ++g) {
    const int32_t* sel = sp->sel + static_cast<size_t>(g) * pool->capacity;
    const int32_t* old = staged_slots(sp, layer, prev, g);
    int32_t* now = staged_slots(sp, layer, cur, g);
    const int32_t* old_pos = staged_positions(sp, layer, prev, g);
    int32_t* now_pos = staged_positions(sp, layer, cur, g);
    int32_t* keep = sp->sel_keep + (static_cast<size_t>(layer - sp->dense) * sp->kvh + g) * sp->rows;
    uint32_t i = 0;
    for (uint32_t r = 0; r < n; ++r) {
      const int32_t slot = sel[r];
      keep[r] = slot;
      now[r] = slot;
      now_pos[r] = pool_pos(sp, layer, g, static_cast<uint32_t>(slot));
      while (i < np && old[i] < slot) ++i;
      if (i < np && old[i] == slot && old_pos[i] == now_pos[r]) {
        ++hits;
        std::memcpy(stage_row(sp, sp->stage_k, layer, cur, g, r), stage_row(sp, sp->stage_k, layer, prev, g, i), sp->row_bytes);
        std::memcpy(stage_row(sp, sp->stage_v, layer, cur, g, r), stage_row(sp, sp->stage_v, layer, prev, g, i), sp->row_bytes);
      } else {
        ++misses;
        std::memcpy(stage_row(sp, sp->stage_k, layer, cur, g, r), pool_row(sp, K, g, static_cast<uint32_t>(slot)), sp->row_bytes);
        std::memcpy(stage_row(sp, sp->stage_v, layer, cur, g, r), pool_row(sp, V, g, static_cast<uint32_t>(slot)), sp->row_bytes);
      }
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
    pthread_mutex_unlock(&sp->mu);
    run_job(sp, layer);
    pthread_mutex_lock(&sp->mu);
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
bool wait_layer(lh_speculator* sp, uint32_t layer) {
  const uint64_t t0 = lh_now_ns();
  pthread_mutex_lock(&sp->mu);
  while (sp->state[layer] == 1) pthread_cond_wait(&sp->cv_done, &sp->mu);
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
    pthread_mutex_destroy(&sp->mu);
    pthread_cond_destroy(&sp->cv_job);
    pthread_cond_destroy(&sp->cv_done);
  }
  if (sp->stage_base != nullptr) munmap(sp->stage_base, sp->stage_bytes);
  std::free(sp->staged);
  std::free(sp->staged_pos);
  std::free(sp->job_appends);
  std::free(sp->job_cand);
  std::free(sp->staged_n);
  std::free(sp->active);
  std::free(sp->qspec);
  std::free(sp->job_len);
  std::free(sp->state);
  std::free(sp->stats);
  std::free(sp->qtilde);
  std::free(sp->scores);
  std::free(sp->combined);
  std::free(sp->order);
  std::free(sp->sel);
  std::free(sp->sel_n);
  std::free(sp->sel_keep);
  std::free(sp->queue);
  std::free(sp);
}

lh_status lh_speculator_create(lh_speculator** out, lh_kv_pool* pool, const lh_speculator_config* cfg) {
  if (out == nullptr) return LH_BAD_ARGUMENT;
  *out = nullptr;
  if (!lh_kv_pool_live(pool) || pool->partial_dim == 0 || cfg == nullptr || !knobs_ok(&cfg->knobs) || cfg->heads == 0 ||
      cfg->heads > LH_MAX_HEADS || cfg->heads % pool->kv_heads != 0 || !(cfg->scale > 0) || !std::isfinite(cfg->scale))
    return LH_BAD_ARGUMENT;
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
  sp->row_bytes = static_cast<size_t>(sp->d) * pool->elem_bytes;
  const size_t cap = pool->capacity;
  const size_t per_part = static_cast<size_t>(sp->sparse) * 2 * sp->kvh * sp->rows * sp->row_bytes;
  if (per_part > 0) {
    sp->stage_bytes = 2 * per_part;
    void* base = mmap(nullptr, sp->stage_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      lh_speculator_destroy(sp);
      return LH_OUT_OF_MEMORY;
    }
    sp->stage_base = base;
    sp->stage_k = static_cast<char*>(base);
    sp->stage_v = static_cast<char*>(base) + per_part;
  }
  sp->staged = zalloc<int32_t>(static_cast<size_t>(sp->sparse) * 2 * sp->kvh * sp->rows);
  sp->staged_pos = zalloc<int32_t>(static_cast<size_t>(sp->sparse) * 2 * sp->kvh * sp->rows);
  sp->job_appends = zalloc<uint64_t>(sp->layers);
  sp->job_cand = zalloc<uint8_t>(pool->evict != 0 ? static_cast<size_t>(sp->layers) * cap : 1);
  sp->staged_n = zalloc<uint32_t>(static_cast<size_t>(sp->sparse) * 2);
  sp->active = zalloc<uint8_t>(sp->sparse);
  sp->qspec = zalloc<float>(static_cast<size_t>(sp->layers) * sp->heads * sp->d);
  sp->job_len = zalloc<uint32_t>(sp->layers);
  sp->state = zalloc<uint8_t>(sp->layers);
  sp->stats = zalloc<lh_layer_stats>(sp->layers);
  sp->qtilde = zalloc<float>(static_cast<size_t>(sp->heads) * sp->p);
  sp->scores = zalloc<double>(sp->heads * cap);
  sp->combined = zalloc<double>(cap);
  sp->order = zalloc<int32_t>(cap);
  sp->sel = zalloc<int32_t>(sp->kvh * cap);
  sp->sel_n = zalloc<uint32_t>(sp->layers);
  sp->sel_keep = zalloc<int32_t>(static_cast<size_t>(sp->sparse) * sp->kvh * sp->rows);
  sp->queue = zalloc<uint32_t>(sp->layers);
  if (sp->staged == nullptr || sp->staged_pos == nullptr || sp->job_appends == nullptr || sp->job_cand == nullptr || sp->staged_n == nullptr || sp->active == nullptr || sp->qspec == nullptr || sp->job_len == nullptr ||
      sp->state == nullptr || sp->stats == nullptr || sp->qtilde == nullptr || sp->scores == nullptr || sp->combined == nullptr ||
      sp->order == nullptr || sp->sel == nullptr || sp->sel_n == nullptr || sp->sel_keep == nullptr || sp->queue == nullptr) {
    lh_speculator_destroy(sp);
    return LH_OUT_OF_MEMORY;
  }
  pthread_mutex_init(&sp->mu, nullptr);
  pthread_cond_init(&sp->cv_job, nullptr);
  pthread_cond_init(&sp->cv_done, nullptr);
  if (pthread_create(&sp->thread, nullptr, worker_main, sp) != 0) {
    pthread_mutex_destroy(&sp->mu);
    pthread_cond_destroy(&sp->cv_job);
    pthread_cond_destroy(&sp->cv_done);
    lh_speculator_destroy(sp);
    return LH_OUT_OF_MEMORY;
  }
  sp->thread_started = true;
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
    sp->job_appends[layer] = lh_kv_pool_evict_state(sp->pool, layer)->appends;
  }
  sp->job_len[layer] = lh_kv_pool_length(sp->pool, layer);
  sp->stats[layer] = lh_layer_stats{};
  sp->stats[layer].begin_ns = lh_now_ns();
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

lh_status lh_speculator_attend(lh_speculator* sp, uint32_t layer, const float* q, float* out) {
  const lh_status st = ready_for_attention(sp, layer, q, out);
  if (st != LH_OK) return st;
  const uint64_t t0 = lh_now_ns();
  const uint32_t buf = sp->active[layer - sp->dense];
  const uint32_t n = sp->sel_n[layer];
  const uint32_t cur_slot = current_slot(sp, layer);
  const void* K = lh_kv_pool_k_rows(sp->pool, layer);
  const void* V = lh_kv_pool_v_rows(sp->pool, layer);
  for (uint32_t g = 0; g < sp->kvh; ++g) {  // the current token after the staged rows; it stays staged
    std::memcpy(stage_row(sp, sp->stage_k, layer, buf, g, n), pool_row(sp, K, g, cur_slot), sp->row_bytes);
    std::memcpy(stage_row(sp, sp->stage_v, layer, buf, g, n), pool_row(sp, V, g, cur_slot), sp->row_bytes);
    staged_slots(sp, layer, buf, g)[n] = static_cast<int32_t>(cur_slot);
    staged_positions(sp, layer, buf, g)[n] = pool_pos(sp, layer, g, cur_slot);
  }
  sp->staged_n[sidx(sp, layer, buf)] = n + 1;
  lh_attention_args a{};
  a.q = q;
  a.k = stage_row(sp, sp->stage_k, layer, buf, 0, 0);
  a.v = stage_row(sp, sp->stage_v, layer, buf, 0, 0);
  a.out = out;
  a.head_stride = static_cast<size_t>(sp->rows) * sp->d;
  a.tokens = n + 1;
  a.heads = sp->heads;
  a.kv_heads = sp->kvh;
  a.head_dim = sp->d;
  a.scale = 1.0f / std::sqrt(static_cast<float>(sp->d));
  a.kv_type = sp->pool->kv_type;
  const lh_status done = lh_attention_decode(&a);
  sp->stats[layer].attn_ns = lh_now_ns() - t0;
  return done;
}

lh_status lh_speculator_attend_ref(lh_speculator* sp, uint32_t layer, const float* q, float* out) {
  const lh_status st = ready_for_attention(sp, layer, q, out);
  if (st != LH_OK) return st;
  const int32_t* lists[LH_MAX_KV_HEADS];
  for (uint32_t g = 0; g < sp->kvh; ++g) lists[g] = sp->sel_keep + (static_cast<size_t>(layer - sp->dense) * sp->kvh + g) * sp->rows;
  return lh_attention_gathered_ref(sp->pool, layer, lists, sp->sel_n[layer], current_slot(sp, layer), q, sp->heads, out);
}

lh_status lh_speculator_recall(lh_speculator* sp, uint32_t layer, const float* q, double* recall) {
  if (sp == nullptr || q == nullptr || recall == nullptr || layer >= sp->layers || layer < sp->dense || sp->state[layer] != 2)
    return LH_BAD_ARGUMENT;
  const uint32_t len = lh_kv_pool_length(sp->pool, layer);
  const uint32_t n = sp->sel_n[layer];
  const uint32_t cur = current_slot(sp, layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sp->d));
  double total = 0;
  float row[LH_MAX_HEAD_DIM];
  double* s = sp->combined;  // (len) worker scratch: the worker is idle for this layer; drain to be sure
  lh_speculator_drain(sp);
  for (uint32_t h = 0; h < sp->heads; ++h) {
    const uint32_t g = h / sp->group;
    double m = -INFINITY;
    for (uint32_t t = 0; t < len; ++t) {
      lh_kv_pool_read(sp->pool, LH_KV_KEY, layer, g, t, row, nullptr);
      double acc = 0;
      for (uint32_t i = 0; i < sp->d; ++i) acc += static_cast<double>(q[h * sp->d + i]) * row[i];
      s[t] = acc * scale;
      m = std::max(m, s[t]);
    }
    double z = 0, covered = 0;
    const int32_t* sel = sp->sel_keep + (static_cast<size_t>(layer - sp->dense) * sp->kvh + g) * sp->rows;
    uint32_t r = 0;
    for (uint32_t t = 0; t < len; ++t) {
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
  return sp->sel_keep + (static_cast<size_t>(layer - sp->dense) * sp->kvh + kv_head) * sp->rows;
}

const lh_layer_stats* lh_speculator_stats(lh_speculator* sp, uint32_t layer) {
  if (sp == nullptr || layer >= sp->layers) return nullptr;
  return &sp->stats[layer];
}
