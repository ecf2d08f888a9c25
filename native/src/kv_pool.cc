// KV pool: planning, the one mmap, append and readback. See kv_pool.h for the layout.
#include "kv_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu_level.h"
#include "fp16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr uint64_t kLine = 64;

uint64_t align_line(uint64_t n) { return (n + kLine - 1) & ~(kLine - 1); }

bool config_ok(const lh_kv_pool_config* cfg) {
  return cfg != nullptr && lh_kv_type_bytes(cfg->kv_type) != 0 && cfg->layers >= 1 && cfg->layers <= LH_MAX_LAYERS && cfg->kv_heads >= 1 &&
         cfg->kv_heads <= LH_MAX_KV_HEADS && cfg->head_dim >= 1 && cfg->head_dim <= LH_MAX_HEAD_DIM &&
         cfg->partial_dim <= cfg->head_dim && cfg->evict <= 1 && (cfg->evict == 0 || cfg->age_every >= 1);
}

// Byte offsets of the regions for given layer capacities (caps: (layers)). With the limits above every
// product fits in 64 bits: kv_heads*head_dim <= 2^20, times the sum of capacities (< 2^10 layers * 2^31),
// times 4 bytes < 2^63. With every capacity equal this is the layout of a uniform pool, byte for byte.
struct Layout {
  uint64_t length_off, k_off, v_off, pos_off, ks_off, vs_off, kp_off, proj_off, proj_set_off, counter_off, cand_off, ev_off, total;
};

Layout layout_for(const lh_kv_pool_config* cfg, const uint64_t* caps) {
  uint64_t slots = 0, slots8 = 0;  // sums over layers of capacity and of capacity rounded up to 8
  for (uint32_t l = 0; l < cfg->layers; ++l) {
    slots += caps[l];
    slots8 += (caps[l] + 7) & ~7ull;  // partial rows come in tiles of 8 slots
  }
  const uint64_t kvh = cfg->kv_heads, lh = static_cast<uint64_t>(cfg->layers) * cfg->kv_heads;
  const uint64_t rows = kvh * slots * cfg->head_dim * lh_kv_type_bytes(cfg->kv_type);
  Layout l;
  l.length_off = 0;
  l.k_off = align_line(cfg->layers * sizeof(uint32_t));
  l.v_off = l.k_off + align_line(rows);
  l.pos_off = l.v_off + align_line(rows);
  l.ks_off = l.pos_off + align_line(kvh * slots * sizeof(int32_t));
  const uint64_t scales = cfg->kv_type == LH_KV_I8 ? align_line(kvh * slots * sizeof(float)) : 0;  // int8 row scales
  l.vs_off = l.ks_off + scales;
  l.kp_off = l.vs_off + scales;
  const uint64_t p = cfg->partial_dim;
  l.proj_off = l.kp_off + align_line(kvh * slots8 * p * sizeof(uint16_t));
  l.proj_set_off = l.proj_off + align_line(lh * cfg->head_dim * p * sizeof(float));
  l.counter_off = l.proj_set_off + (p > 0 ? align_line(cfg->layers * sizeof(uint32_t)) : 0);
  const uint64_t e = cfg->evict != 0 ? 1 : 0;
  l.cand_off = l.counter_off + e * align_line(slots * sizeof(uint32_t));
  l.ev_off = l.cand_off + e * align_line(slots);
  l.total = l.ev_off + e * align_line(cfg->layers * sizeof(lh_kv_evict_layer));
  return l;
}

// Bytes one token costs across all layers and heads: K and V rows (with their int8 scales), its
// position, partial rows and eviction counter + flag. Alignment padding is not included.
uint64_t per_token_bytes(const lh_kv_pool_config* cfg) {
  const uint64_t lh = static_cast<uint64_t>(cfg->layers) * cfg->kv_heads;
  return lh * (2ull * lh_kv_row_bytes(cfg->kv_type, cfg->head_dim) + sizeof(int32_t) + 2ull * cfg->partial_dim) +
         (cfg->evict != 0 ? cfg->layers * (sizeof(uint32_t) + 1ull) : 0);
}

// Every layer's capacity for a config (caps: (layers)), or LH_BAD_ARGUMENT (see lh_kv_pool_plan).
lh_status plan_caps(const lh_kv_pool_config* cfg, uint64_t* caps) {
  const uint64_t per_layer_token = per_token_bytes(cfg) / cfg->layers;  // what one token costs in one layer
  uint32_t shared = 0;
  for (uint32_t l = 0; l < cfg->layers; ++l) {
    const uint64_t fixed = cfg->layer_capacity != nullptr ? cfg->layer_capacity[l] : 0;
    if (fixed > LH_MAX_TOKENS) return LH_BAD_ARGUMENT;
    caps[l] = fixed;
    shared += fixed == 0 ? 1 : 0;
  }
  if (shared > 0) {
    // the shared layers' capacity: what the budget leaves after the fixed layers (and the headers)
    const uint64_t base = layout_for(cfg, caps).total;
    if (base > cfg->budget_bytes) return LH_BAD_ARGUMENT;
    uint64_t cap = (cfg->budget_bytes - base) / (per_layer_token * shared);
    if (cap > LH_MAX_TOKENS) return LH_BAD_ARGUMENT;  // an absurd budget, not a real pool
    auto with = [&](uint64_t c) {
      for (uint32_t l = 0; l < cfg->layers; ++l)
        if (cfg->layer_capacity == nullptr || cfg->layer_capacity[l] == 0) caps[l] = c;
      return layout_for(cfg, caps).total;
    };
    // Alignment padding costs at most a few lines: step down until the layout fits the budget.
    while (cap > 0 && with(cap) > cfg->budget_bytes) cap -= 1;
    if (cap == 0) return LH_BAD_ARGUMENT;  // the budget does not hold a single token
  } else if (layout_for(cfg, caps).total > cfg->budget_bytes) {
    return LH_BAD_ARGUMENT;  // the fixed capacities do not fit the budget
  }
  for (uint32_t l = 0; l < cfg->layers; ++l)
    if (cfg->evict != 0 && caps[l] <= static_cast<uint64_t>(cfg->sinks) + cfg->recent) return LH_BAD_ARGUMENT;  // nothing evictable
  if (cfg->layer_ring != nullptr)
    for (uint32_t l = 0; l < cfg->layers; ++l)
      if (cfg->layer_ring[l] != 0 && (cfg->evict != 0 || cfg->layer_capacity == nullptr || cfg->layer_capacity[l] == 0)) return LH_BAD_ARGUMENT;  // a ring: fixed, no eviction
  return LH_OK;
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;  // unknown: let mmap decide
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

// Maps `total` bytes of zeroed anonymous memory. With `huge`, on Linux, a mapping of at least 2 MiB
// is placed on a 2 MiB boundary (over-mapped by 2 MiB, the ends unmapped again: THP backs only
// aligned 2 MiB ranges) and advised MADV_HUGEPAGE; *advised says whether the advice was taken. The
// result is always exactly `total` bytes long, so munmap(base, total) frees it.
void* map_pool(size_t total, bool huge, uint32_t* advised) {
  *advised = 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr size_t kHuge = size_t{2} << 20;
  if (huge && total >= kHuge && total <= SIZE_MAX - kHuge) {
    void* raw = mmap(nullptr, total + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw != MAP_FAILED) {
      const uintptr_t a = reinterpret_cast<uintptr_t>(raw);
      const uintptr_t b = (a + kHuge - 1) & ~static_cast<uintptr_t>(kHuge - 1);
      if (b > a) munmap(raw, b - a);
      const size_t tail = (a + total + kHuge) - (b + total);
      if (tail > 0) munmap(reinterpret_cast<void*>(b + total), tail);
      void* base = reinterpret_cast<void*>(b);
      if (madvise(base, total, MADV_HUGEPAGE) == 0) *advised = 1;
      return base;
    }
  }
#else
  (void)huge;
#endif
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return base == MAP_FAILED ? nullptr : base;
}

}  // namespace

lh_status lh_kv_pool_plan(const lh_kv_pool_config* cfg, uint32_t* capacity, uint64_t* byte_length, uint32_t* layer_caps) {
  if (!config_ok(cfg) || capacity == nullptr || byte_length == nullptr) return LH_BAD_ARGUMENT;
  uint64_t caps[LH_MAX_LAYERS];
  const lh_status st = plan_caps(cfg, caps);
  if (st != LH_OK) return st;
  const uint64_t total = layout_for(cfg, caps).total;
  if (total > physical_memory_bytes()) return LH_OUT_OF_MEMORY;
  uint64_t largest = 0;
  for (uint32_t l = 0; l < cfg->layers; ++l) {
    largest = std::max(largest, caps[l]);
    if (layer_caps != nullptr) layer_caps[l] = static_cast<uint32_t>(caps[l]);
  }
  *capacity = static_cast<uint32_t>(largest);
  *byte_length = total;
  return LH_OK;
}

lh_status lh_kv_pool_init(lh_kv_pool* pool, const lh_kv_pool_config* cfg) {
  if (pool == nullptr) return LH_BAD_ARGUMENT;
  std::memset(pool, 0, sizeof *pool);
  uint32_t capacity = 0;
  uint64_t total = 0;
  uint32_t caps32[LH_MAX_LAYERS];
  const lh_status st = lh_kv_pool_plan(cfg, &capacity, &total, caps32);
  if (st != LH_OK) return st;
  if (total > SIZE_MAX) return LH_OUT_OF_MEMORY;
  uint32_t advised = 0;
  void* base = map_pool(static_cast<size_t>(total), cfg->no_huge_pages == 0, &advised);
  if (base == nullptr) return LH_OUT_OF_MEMORY;
  uint64_t caps[LH_MAX_LAYERS];
  uint64_t row0 = 0, prow0 = 0;
  for (uint32_t i = 0; i < cfg->layers; ++i) {
    caps[i] = caps32[i];
    pool->layer_cap[i] = caps32[i];
    pool->layer_row0[i] = row0;
    pool->layer_prow0[i] = prow0;
    pool->ring[i] = cfg->layer_ring != nullptr && cfg->layer_ring[i] != 0 ? 1 : 0;
    row0 += caps32[i];
    prow0 += (caps32[i] + 7ull) & ~7ull;
  }
  const Layout l = layout_for(cfg, caps);
  char* b = static_cast<char*>(base);
  pool->layers = cfg->layers;
  pool->kv_heads = cfg->kv_heads;
  pool->head_dim = cfg->head_dim;
  pool->capacity = capacity;
  pool->kv_type = cfg->kv_type;
  pool->elem_bytes = lh_kv_type_bytes(cfg->kv_type);
  pool->bytes_per_token = per_token_bytes(cfg);
  pool->byte_length = total;
  pool->huge_pages = advised;
  pool->base = base;
  pool->length = reinterpret_cast<uint32_t*>(b + l.length_off);  // anonymous pages are zero
  pool->k = b + l.k_off;
  pool->v = b + l.v_off;
  pool->pos = reinterpret_cast<int32_t*>(b + l.pos_off);
  if (cfg->kv_type == LH_KV_I8) {
    pool->ks = reinterpret_cast<float*>(b + l.ks_off);
    pool->vs = reinterpret_cast<float*>(b + l.vs_off);
  }
  pool->partial_dim = cfg->partial_dim;
  if (cfg->partial_dim > 0) {
    pool->kp = reinterpret_cast<uint16_t*>(b + l.kp_off);
    pool->proj = reinterpret_cast<float*>(b + l.proj_off);
    pool->proj_set = reinterpret_cast<uint32_t*>(b + l.proj_set_off);
  }
  if (cfg->evict != 0) {
    pool->evict = 1;
    pool->sinks = cfg->sinks;
    pool->recent = cfg->recent;
    pool->age_every = cfg->age_every;
    pool->counter = reinterpret_cast<uint32_t*>(b + l.counter_off);
    pool->cand = reinterpret_cast<uint8_t*>(b + l.cand_off);
    pool->ev = reinterpret_cast<lh_kv_evict_layer*>(b + l.ev_off);
    lh_kv_pool_reset(pool);
  }
  return LH_OK;
}

void lh_kv_pool_free(lh_kv_pool* pool) {
  if (pool == nullptr) return;
  if (pool->base != nullptr) munmap(pool->base, static_cast<size_t>(pool->byte_length));
  std::memset(pool, 0, sizeof *pool);
}

lh_status lh_kv_pool_reset(lh_kv_pool* pool) {
  if (!lh_kv_pool_live(pool)) return LH_BAD_ARGUMENT;
  std::memset(pool->length, 0, pool->layers * sizeof(uint32_t));
  std::memset(pool->ring_start, 0, sizeof pool->ring_start);
  if (pool->evict != 0) {
    for (uint32_t l = 0; l < pool->layers; ++l) pool->ev[l] = lh_kv_evict_layer{0, 0, -1, -1, -1, 0, 0, 0};
  }
  return LH_OK;
}

float lh_kv_quantize_i8(const float* x, size_t n, int8_t* out) {
  float amax = 0.0f;
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);  // a NaN would be skipped by a plain max
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite || amax < 0x1p-100f) {
    std::memset(out, 0, n);
    return finite ? 0.0f : NAN;
  }
  const double to_q = 127.0 / amax;  // finite: amax >= 2^-100
  for (size_t i = 0; i < n; ++i) {
    // |x_i| <= amax, so the product lies in [-127, 127]; nearbyint rounds ties to even
    out[i] = static_cast<int8_t>(std::nearbyint(static_cast<double>(x[i]) * to_q));
  }
  return amax / 127.0f;
}

namespace {

// Element j of the stored row starting at element index `row` of a K/V region, as fp32; `scale` is
// the row's int8 scale (unused for fp16/fp32).
inline float stored_elem(const lh_kv_pool* pool, const void* rows, size_t row, size_t j, float scale) {
  switch (pool->kv_type) {
    case LH_KV_F32: return static_cast<const float*>(rows)[row + j];
    case LH_KV_I8: return scale * static_cast<float>(static_cast<const int8_t*>(rows)[row + j]);
    default: return lh_fp16_to_fp32(static_cast<const uint16_t*>(rows)[row + j]);
  }
}

// Partial row of (layer, KV head g, slot s) from the stored key row:
// kp[i] = fp16( sum_j K[j] * proj[j, i] ), fp32 accumulation in j order.
void store_partial(lh_kv_pool* pool, uint32_t layer, uint32_t g, uint32_t s) {
  const size_t d = pool->head_dim, p = pool->partial_dim;
  const size_t head = static_cast<size_t>(layer) * pool->kv_heads + g;
  const size_t at = lh_kv_pool_slot_index(pool, layer, g, s);
  const size_t row = at * d;
  const float* proj = pool->proj + head * d * p;  // (head_dim, partial_dim)
  float acc[LH_MAX_HEAD_DIM];                      // (partial_dim)
  const float ks = pool->ks != nullptr ? pool->ks[at] : 1.0f;  // int8 key scale
  for (size_t i = 0; i < p; ++i) acc[i] = 0.0f;
  for (size_t j = 0; j < d; ++j) {
    const float kj = stored_elem(pool, pool->k, row, j, ks);  // what attention reads
    const float* pr = proj + j * p;
    for (size_t i = 0; i < p; ++i) acc[i] += kj * pr[i];
  }
  for (size_t i = 0; i < p; ++i) pool->kp[lh_kv_pool_partial_at(pool, layer, g, s, i)] = lh_fp32_to_fp16(acc[i]);
}

// Partial rows of every stored slot of `layer` (every KV head), from the stored key rows: after
// the projection is set, and after a snapshot import wrote the key rows directly.
void rebuild_partials(lh_kv_pool* pool, uint32_t layer) {
  for (uint32_t g = 0; g < pool->kv_heads; ++g)
    for (uint32_t r = 0; r < pool->length[layer]; ++r) store_partial(pool, layer, g, lh_kv_pool_row_slot(pool, layer, r));
}

// fp32 -> fp16 of one row. F16C converts 8 values per instruction with the bits of
// lh_fp32_to_fp16 (round to nearest even, the same overflow and NaN results; native/fuzz/fuzz_fp16.cc
// holds the scalar function to the instruction): the scalar loop cost 0.7 ms of each decode token
// and 45 ms of each 128-token prefill chunk on the 953M fixture (16 layers x 32 KV heads x 64 dims).
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void to_fp16_f16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = lh_fp32_to_fp16(in[i]);
}

bool has_f16c() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has && lh_cpu_level_allows(LH_CPU_AVX2);  // F16C is part of cpu_level.h's AVX2 level
}
#endif

void to_fp16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return to_fp16_f16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = lh_fp32_to_fp16(in[i]);
}

// Writes one token's rows (all KV heads) of `layer` into slot s. No checks: callers validate.
void store_token(lh_kv_pool* pool, uint32_t layer, uint32_t s, const float* k, const float* v, int32_t position) {
  const size_t d = pool->head_dim;
  for (uint32_t g = 0; g < pool->kv_heads; ++g) {
    const size_t at = lh_kv_pool_slot_index(pool, layer, g, s);
    const size_t row = at * d;  // element index of (layer, g, s, 0)
    const float* kin = k + g * d;
    const float* vin = v + g * d;
    if (pool->kv_type == LH_KV_F32) {
      std::memcpy(static_cast<float*>(pool->k) + row, kin, d * sizeof(float));
      std::memcpy(static_cast<float*>(pool->v) + row, vin, d * sizeof(float));
    } else if (pool->kv_type == LH_KV_I8) {
      pool->ks[at] = lh_kv_quantize_i8(kin, d, static_cast<int8_t*>(pool->k) + row);
      pool->vs[at] = lh_kv_quantize_i8(vin, d, static_cast<int8_t*>(pool->v) + row);
    } else {
      to_fp16(kin, static_cast<uint16_t*>(pool->k) + row, d);  // (head_dim)
      to_fp16(vin, static_cast<uint16_t*>(pool->v) + row, d);  // (head_dim)
    }
    pool->pos[at] = position;
    if (pool->partial_dim > 0 && pool->proj_set[layer] != 0) store_partial(pool, layer, g, s);
  }
}

}  // namespace

namespace {

inline int32_t slot_pos(const lh_kv_pool* pool, uint32_t layer, uint32_t s) {
  return pool->pos[lh_kv_pool_slot_index(pool, layer, 0, s)];  // KV head 0
}

// The slot a ring's next token goes to: a new row while the ring has room, else its oldest row's
// slot, which becomes the newest row (the ring start moves on). Updates length / ring_start.
uint32_t ring_take(lh_kv_pool* pool, uint32_t layer) {
  const uint32_t cap = pool->layer_cap[layer];
  uint32_t& len = pool->length[layer];
  if (len < cap) {
    const uint32_t s = lh_kv_pool_row_slot(pool, layer, len);
    len += 1;
    return s;
  }
  const uint32_t s = pool->ring_start[layer];
  pool->ring_start[layer] = s + 1 == cap ? 0 : s + 1;
  return s;
}

bool slot_live(const lh_kv_pool* pool, uint32_t layer, uint32_t s) {
  const uint32_t cap = pool->layer_cap[layer];
  if (pool->ring[layer] == 0) return s < pool->length[layer];
  if (s >= cap) return false;
  const uint32_t r = s >= pool->ring_start[layer] ? s - pool->ring_start[layer] : s + cap - pool->ring_start[layer];
  return r < pool->length[layer];
}

// The victim of a full layer by the rule of kv_pool.h, or -1 if every slot is protected. O(capacity).
int64_t choose_victim(const lh_kv_pool* pool, uint32_t layer) {
  const int64_t newest = pool->ev[layer].newest;
  const int64_t recent_from = newest - static_cast<int64_t>(pool->recent) + 1;  // positions >= this are recent
  const uint32_t* c = pool->counter + lh_kv_pool_layer_slot(pool, layer, 0);
  int64_t best = -1;
  uint32_t best_c = 0;
  int32_t best_p = 0;
  for (uint32_t s = 0; s < pool->length[layer]; ++s) {
    const int32_t p = slot_pos(pool, layer, s);
    if (p < static_cast<int64_t>(pool->sinks) || p >= recent_from) continue;
    if (best < 0 || c[s] < best_c || (c[s] == best_c && p < best_p)) {
      best = s;
      best_c = c[s];
      best_p = p;
    }
  }
  return best;
}

// Bookkeeping after a token went into slot s (evicted: the position it replaced, or -1).
void note_append(lh_kv_pool* pool, uint32_t layer, uint32_t s, int32_t position, int32_t evicted) {
  lh_kv_evict_layer& e = pool->ev[layer];
  pool->counter[lh_kv_pool_layer_slot(pool, layer, s)] = 0;
  pool->cand[lh_kv_pool_layer_slot(pool, layer, s)] = 1;
  e.appends += 1;
  e.last_slot = static_cast<int32_t>(s);
  e.last_evicted = evicted;
  if (evicted >= 0) e.evictions += 1;
  if (position > e.newest) e.newest = position;
}

}  // namespace

lh_status lh_kv_pool_reserve_victim(lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || pool->evict == 0 || layer >= pool->layers) return LH_BAD_ARGUMENT;
  lh_kv_evict_layer& e = pool->ev[layer];
  if (pool->length[layer] < pool->layer_cap[layer] || e.pending != 0) return LH_OK;
  const int64_t victim = choose_victim(pool, layer);
  if (victim < 0) return LH_POOL_FULL;
  e.pending = static_cast<uint32_t>(victim) + 1;
  pool->counter[lh_kv_pool_layer_slot(pool, layer, static_cast<uint32_t>(victim))] = 0;
  pool->cand[lh_kv_pool_layer_slot(pool, layer, static_cast<uint32_t>(victim))] = 0;
  return LH_OK;
}

lh_status lh_kv_pool_append(lh_kv_pool* pool, uint32_t layer, const float* k, const float* v,
                            int32_t position, uint32_t* slot) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers || k == nullptr || v == nullptr || position < 0)
    return LH_BAD_ARGUMENT;
  uint32_t s = pool->length[layer];
  int32_t evicted = -1;
  if (lh_kv_pool_is_ring(pool, layer)) {
    s = ring_take(pool, layer);
  } else if (s >= pool->layer_cap[layer]) {
    if (pool->evict == 0) return LH_POOL_FULL;
    const lh_status st = lh_kv_pool_reserve_victim(pool, layer);
    if (st != LH_OK) return st;
    s = pool->ev[layer].pending - 1;
    pool->ev[layer].pending = 0;
    evicted = slot_pos(pool, layer, s);
  } else {
    pool->length[layer] = s + 1;
  }
  store_token(pool, layer, s, k, v, position);
  if (pool->evict != 0) note_append(pool, layer, s, position, evicted);
  if (slot != nullptr) *slot = s;
  return LH_OK;
}

lh_status lh_kv_pool_append_batch(lh_kv_pool* pool, uint32_t layer, const float* k, const float* v,
                                  uint32_t tokens, int32_t first_position, uint32_t* first_slot) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers || k == nullptr || v == nullptr || tokens == 0 ||
      first_position < 0 || static_cast<uint64_t>(first_position) + tokens - 1 > 0x7fffffffull)
    return LH_BAD_ARGUMENT;
  if (lh_kv_pool_is_ring(pool, layer)) {
    // every token takes the next row; past the capacity it overwrites the oldest (no eviction on a ring)
    const size_t width = static_cast<size_t>(pool->kv_heads) * pool->head_dim;  // floats per token
    for (uint32_t t = 0; t < tokens; ++t) {
      const uint32_t s = ring_take(pool, layer);
      store_token(pool, layer, s, k + t * width, v + t * width, first_position + static_cast<int32_t>(t));
      if (t == 0 && first_slot != nullptr) *first_slot = s;
    }
    return LH_OK;
  }
  const uint32_t s0 = pool->length[layer];
  if (pool->evict != 0 && tokens == 1 && s0 >= pool->layer_cap[layer]) return lh_kv_pool_append(pool, layer, k, v, first_position, first_slot);
  if (tokens > pool->layer_cap[layer] - s0) return LH_POOL_FULL;
  const size_t width = static_cast<size_t>(pool->kv_heads) * pool->head_dim;  // floats per token
  for (uint32_t t = 0; t < tokens; ++t)
    store_token(pool, layer, s0 + t, k + t * width, v + t * width, first_position + static_cast<int32_t>(t));
  pool->length[layer] = s0 + tokens;
  if (pool->evict != 0)
    for (uint32_t t = 0; t < tokens; ++t) note_append(pool, layer, s0 + t, first_position + static_cast<int32_t>(t), -1);
  if (first_slot != nullptr) *first_slot = s0;
  return LH_OK;
}

namespace {

// Moves slot `from` of `layer` (all KV heads: rows, partial row, position, counter, flag) to `to`.
void move_slot(lh_kv_pool* pool, uint32_t layer, uint32_t from, uint32_t to) {
  const size_t d = pool->head_dim, eb = pool->elem_bytes, p = pool->partial_dim;
  for (uint32_t g = 0; g < pool->kv_heads; ++g) {
    const size_t head0 = lh_kv_pool_slot_index(pool, layer, g, 0);  // slot 0 of (layer, g)
    char* k = static_cast<char*>(pool->k) + head0 * d * eb;
    char* v = static_cast<char*>(pool->v) + head0 * d * eb;
    std::memcpy(k + to * d * eb, k + from * d * eb, d * eb);
    std::memcpy(v + to * d * eb, v + from * d * eb, d * eb);
    pool->pos[head0 + to] = pool->pos[head0 + from];
    if (pool->ks != nullptr) {
      pool->ks[head0 + to] = pool->ks[head0 + from];
      pool->vs[head0 + to] = pool->vs[head0 + from];
    }
    for (size_t i = 0; i < p; ++i) pool->kp[lh_kv_pool_partial_at(pool, layer, g, to, i)] = pool->kp[lh_kv_pool_partial_at(pool, layer, g, from, i)];
  }
  pool->counter[lh_kv_pool_layer_slot(pool, layer, to)] = pool->counter[lh_kv_pool_layer_slot(pool, layer, from)];
  pool->cand[lh_kv_pool_layer_slot(pool, layer, to)] = pool->cand[lh_kv_pool_layer_slot(pool, layer, from)];
}

}  // namespace

bool lh_kv_pool_slot_live(const lh_kv_pool* pool, uint32_t layer, uint32_t s) { return slot_live(pool, layer, s); }

lh_status lh_kv_pool_clear_layer(lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || pool->evict != 0 || layer >= pool->layers) return LH_BAD_ARGUMENT;
  pool->length[layer] = 0;
  pool->ring_start[layer] = 0;
  return LH_OK;
}

lh_status lh_kv_pool_truncate(lh_kv_pool* pool, uint32_t tokens) {
  if (!lh_kv_pool_live(pool)) return LH_BAD_ARGUMENT;
  if (pool->evict != 0) {
    for (uint32_t l = 0; l < pool->layers; ++l) {
      uint32_t& len = pool->length[l];
      if (pool->ev[l].pending != 0) pool->cand[lh_kv_pool_layer_slot(pool, l, pool->ev[l].pending - 1)] = 1;
      pool->ev[l].pending = 0;
      auto gone = [&](uint32_t s) { return slot_pos(pool, l, s) >= static_cast<int64_t>(tokens); };
      while (len > 0 && gone(len - 1)) --len;
      for (uint32_t s = 0; s < len; ++s) {
        if (!gone(s)) continue;
        move_slot(pool, l, len - 1, s);
        --len;
        while (len > 0 && gone(len - 1)) --len;
      }
      int32_t newest = -1;
      for (uint32_t s = 0; s < len; ++s) newest = std::max(newest, slot_pos(pool, l, s));
      pool->ev[l].newest = newest;
      pool->ev[l].last_slot = -1;
      pool->ev[l].last_evicted = -1;
    }
    return LH_OK;
  }
  for (uint32_t l = 0; l < pool->layers; ++l) {
    uint32_t& len = pool->length[l];
    if (lh_kv_pool_is_ring(pool, l)) {
      // a ring's rows are in position order: forget the newest while they are >= tokens
      while (len > 0 && slot_pos(pool, l, lh_kv_pool_row_slot(pool, l, len - 1)) >= static_cast<int64_t>(tokens)) --len;
      if (len == 0) pool->ring_start[l] = 0;
    } else if (len > tokens) {
      len = tokens;
    }
  }
  return LH_OK;
}

uint32_t lh_kv_pool_length(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers) return 0;
  return pool->length[layer];
}

const void* lh_kv_pool_k_rows(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers) return nullptr;
  return static_cast<const char*>(pool->k) + lh_kv_pool_slot_index(pool, layer, 0, 0) * pool->head_dim * pool->elem_bytes;
}

const void* lh_kv_pool_v_rows(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers) return nullptr;
  return static_cast<const char*>(pool->v) + lh_kv_pool_slot_index(pool, layer, 0, 0) * pool->head_dim * pool->elem_bytes;
}

const float* lh_kv_pool_k_scales(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || pool->ks == nullptr || layer >= pool->layers) return nullptr;
  return pool->ks + lh_kv_pool_slot_index(pool, layer, 0, 0);
}

const float* lh_kv_pool_v_scales(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || pool->vs == nullptr || layer >= pool->layers) return nullptr;
  return pool->vs + lh_kv_pool_slot_index(pool, layer, 0, 0);
}

const int32_t* lh_kv_pool_positions(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers) return nullptr;
  return pool->pos + lh_kv_pool_slot_index(pool, layer, 0, 0);
}

lh_status lh_kv_pool_read(const lh_kv_pool* pool, lh_kv_part part, uint32_t layer, uint32_t kv_head,
                          uint32_t slot, float* out, int32_t* position) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers || kv_head >= pool->kv_heads || out == nullptr ||
      !slot_live(pool, layer, slot) || (part != LH_KV_KEY && part != LH_KV_VALUE))
    return LH_BAD_ARGUMENT;
  const size_t si = lh_kv_pool_slot_index(pool, layer, kv_head, slot);
  const void* rows = part == LH_KV_KEY ? pool->k : pool->v;
  const size_t at = si * pool->head_dim;
  const float* scales = part == LH_KV_KEY ? pool->ks : pool->vs;
  const float scale = scales != nullptr ? scales[si] : 1.0f;
  for (uint32_t i = 0; i < pool->head_dim; ++i) out[i] = stored_elem(pool, rows, at, i, scale);
  if (position != nullptr) *position = pool->pos[si];
  return LH_OK;
}

lh_status lh_kv_pool_set_projection(lh_kv_pool* pool, uint32_t layer, const float* proj) {
  if (!lh_kv_pool_live(pool) || pool->partial_dim == 0 || layer >= pool->layers || proj == nullptr) return LH_BAD_ARGUMENT;
  const size_t per_layer = static_cast<size_t>(pool->kv_heads) * pool->head_dim * pool->partial_dim;
  std::memcpy(pool->proj + layer * per_layer, proj, per_layer * sizeof(float));
  pool->proj_set[layer] = 1;
  rebuild_partials(pool, layer);
  return LH_OK;
}

const uint16_t* lh_kv_pool_partial_rows(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || pool->partial_dim == 0 || layer >= pool->layers) return nullptr;
  return pool->kp + lh_kv_pool_partial_at(pool, layer, 0, 0, 0);
}

lh_status lh_kv_pool_read_partial(const lh_kv_pool* pool, uint32_t layer, uint32_t kv_head, uint32_t slot, float* out) {
  if (!lh_kv_pool_live(pool) || pool->partial_dim == 0 || layer >= pool->layers || kv_head >= pool->kv_heads ||
      out == nullptr || !slot_live(pool, layer, slot))
    return LH_BAD_ARGUMENT;
  for (uint32_t i = 0; i < pool->partial_dim; ++i) out[i] = lh_fp16_to_fp32(pool->kp[lh_kv_pool_partial_at(pool, layer, kv_head, slot, i)]);
  return LH_OK;
}

lh_status lh_kv_pool_note_selected(lh_kv_pool* pool, uint32_t layer, const int32_t* slots, uint32_t n) {
  if (!lh_kv_pool_live(pool) || pool->evict == 0 || layer >= pool->layers || (n > 0 && slots == nullptr)) return LH_BAD_ARGUMENT;
  uint32_t* c = pool->counter + lh_kv_pool_layer_slot(pool, layer, 0);
  const uint32_t len = pool->length[layer];
  for (uint32_t i = 0; i < n; ++i)
    if (slots[i] >= 0 && static_cast<uint32_t>(slots[i]) < len && c[slots[i]] < UINT32_MAX) c[slots[i]] += 1;
  return LH_OK;
}

lh_status lh_kv_pool_age(lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || pool->evict == 0 || layer >= pool->layers) return LH_BAD_ARGUMENT;
  lh_kv_evict_layer& e = pool->ev[layer];
  if (++e.age_tick < pool->age_every) return LH_OK;
  e.age_tick = 0;
  uint32_t* c = pool->counter + lh_kv_pool_layer_slot(pool, layer, 0);
  for (uint32_t s = 0; s < pool->length[layer]; ++s) c[s] >>= 1;
  return LH_OK;
}

lh_status lh_kv_pool_note_job(lh_kv_pool* pool, uint32_t layer, uint32_t len, int32_t reserved, const int32_t* slots,
                              size_t stride, uint32_t lists, uint32_t n) {
  if (!lh_kv_pool_live(pool) || pool->evict == 0 || layer >= pool->layers || len > pool->layer_cap[layer] ||
      (n > 0 && lists > 0 && slots == nullptr))
    return LH_BAD_ARGUMENT;
  uint32_t* c = pool->counter + lh_kv_pool_layer_slot(pool, layer, 0);
  for (uint32_t g = 0; g < lists; ++g) {
    const int32_t* list = slots + g * stride;
    for (uint32_t i = 0; i < n; ++i) {
      const int32_t s = list[i];
      if (s >= 0 && static_cast<uint32_t>(s) < len && s != reserved && c[s] < UINT32_MAX) c[s] += 1;
    }
  }
  lh_kv_evict_layer& e = pool->ev[layer];  // age_tick: written by nobody else while jobs run
  if (++e.age_tick < pool->age_every) return LH_OK;
  e.age_tick = 0;
  for (uint32_t s = 0; s < len; ++s)
    if (static_cast<int32_t>(s) != reserved) c[s] >>= 1;
  return LH_OK;
}

const uint8_t* lh_kv_pool_candidates(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || pool->evict == 0 || layer >= pool->layers) return nullptr;
  return pool->cand + lh_kv_pool_layer_slot(pool, layer, 0);
}

const lh_kv_evict_layer* lh_kv_pool_evict_state(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || pool->evict == 0 || layer >= pool->layers) return nullptr;
  return &pool->ev[layer];
}

int32_t lh_kv_pool_last_slot(const lh_kv_pool* pool, uint32_t layer) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers) return -1;
  if (pool->evict != 0) return pool->ev[layer].last_slot;
  if (pool->length[layer] == 0) return -1;
  return static_cast<int32_t>(lh_kv_pool_row_slot(pool, layer, pool->length[layer] - 1));
}

// ---- snapshots ----

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "snapshot sections are little-endian; this build copies raw host words");

lh_status lh_kv_pool_snapshot_layout(const lh_kv_pool* pool, uint32_t tokens, lh_kv_snapshot_layout* out) {
  if (!lh_kv_pool_live(pool) || tokens > pool->capacity || out == nullptr) return LH_BAD_ARGUMENT;
  // tokens <= capacity, so every product below is at most the pool's own byte_length
  const uint64_t rows = static_cast<uint64_t>(pool->kv_heads) * tokens * pool->head_dim * pool->elem_bytes;
  const uint64_t scales = pool->kv_type == LH_KV_I8 ? static_cast<uint64_t>(pool->kv_heads) * tokens * sizeof(float) : 0;
  out->k = 0;
  out->v = rows;
  out->ks = 2 * rows;
  out->vs = out->ks + scales;
  out->pos = out->vs + scales;
  out->total = out->pos + static_cast<uint64_t>(tokens) * sizeof(int32_t);
  return LH_OK;
}

int64_t lh_kv_snapshot_bad_position(const void* pos, uint32_t tokens) {
  const char* p = static_cast<const char*>(pos);
  int64_t prev = -1;
  for (uint32_t i = 0; i < tokens; ++i) {
    int32_t x;
    std::memcpy(&x, p + static_cast<size_t>(i) * sizeof x, sizeof x);  // unaligned-safe
    if (x < 0 || x <= prev) return i;
    prev = x;
  }
  return -1;
}

lh_status lh_kv_pool_export_layer(const lh_kv_pool* pool, uint32_t layer, uint32_t tokens, void* out, size_t out_bytes) {
  return lh_kv_pool_export_rows(pool, layer, 0, tokens, out, out_bytes);
}

lh_status lh_kv_pool_export_rows(const lh_kv_pool* pool, uint32_t layer, uint32_t first, uint32_t tokens, void* out, size_t out_bytes) {
  lh_kv_snapshot_layout sl;
  if (!lh_kv_pool_live(pool) || pool->evict != 0 || layer >= pool->layers || first > pool->length[layer] || tokens > pool->length[layer] - first ||
      lh_kv_pool_snapshot_layout(pool, tokens, &sl) != LH_OK || out_bytes != sl.total || (out == nullptr && out_bytes > 0))
    return LH_BAD_ARGUMENT;
  if (tokens == 0) return LH_OK;
  char* o = static_cast<char*>(out);
  const size_t elem_row = static_cast<size_t>(pool->head_dim) * pool->elem_bytes;  // bytes of one slot's row
  // the rows are at most two runs of slots: [s0, s0 + n0) and (a ring that wraps) [0, tokens − n0)
  const uint32_t s0 = lh_kv_pool_row_slot(pool, layer, first);
  const uint32_t n0 = std::min(tokens, pool->layer_cap[layer] - s0);
  const uint32_t runs[2][3] = {{s0, 0, n0}, {0, n0, tokens - n0}};  // (first slot, first packed row, rows)
  for (const auto& run : runs) {
    if (run[2] == 0) continue;
    for (uint32_t g = 0; g < pool->kv_heads; ++g) {
      const size_t at = lh_kv_pool_slot_index(pool, layer, g, run[0]);
      const size_t to = (static_cast<size_t>(g) * tokens + run[1]) * elem_row;  // packed (kv_head, tokens, head_dim)
      std::memcpy(o + sl.k + to, static_cast<const char*>(pool->k) + at * elem_row, run[2] * elem_row);
      std::memcpy(o + sl.v + to, static_cast<const char*>(pool->v) + at * elem_row, run[2] * elem_row);
      if (pool->kv_type == LH_KV_I8) {
        const size_t sto = (static_cast<size_t>(g) * tokens + run[1]) * sizeof(float);
        std::memcpy(o + sl.ks + sto, pool->ks + at, run[2] * sizeof(float));
        std::memcpy(o + sl.vs + sto, pool->vs + at, run[2] * sizeof(float));
      }
    }
    // KV head 0's positions: all heads agree
    std::memcpy(o + sl.pos + run[1] * sizeof(int32_t), pool->pos + lh_kv_pool_slot_index(pool, layer, 0, run[0]), run[2] * sizeof(int32_t));
  }
  return LH_OK;
}

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and the copy faults pages in itself
#endif

// Faults in the pages of [p, p + n) for writing in one call before a large memcpy fills them: an
// import into a never-touched layer otherwise takes one page fault per 4 KiB inside memcpy, which
// halves its speed (measured: ~0.9 -> ~1.6 GB/s on fresh pages). Contents are unchanged; failure
// (an old kernel, another OS) only costs that speed.
void prefault_for_write(void* p, size_t n) {
#if defined(__linux__)
  if (n < (64u << 10)) return;  // small runs: the syscall costs more than the faults
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) + n;
  (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)n;
#endif
}

}  // namespace

lh_status lh_kv_pool_import_layer(lh_kv_pool* pool, uint32_t layer, uint32_t tokens, const void* data, size_t bytes) {
  lh_kv_snapshot_layout sl;
  if (!lh_kv_pool_live(pool) || pool->evict != 0 || layer >= pool->layers || pool->length[layer] != 0 || tokens > pool->layer_cap[layer] ||
      lh_kv_pool_snapshot_layout(pool, tokens, &sl) != LH_OK || bytes != sl.total || (data == nullptr && bytes > 0))
    return LH_BAD_ARGUMENT;
  if (tokens == 0) return LH_OK;
  const char* in = static_cast<const char*>(data);
  if (lh_kv_snapshot_bad_position(in + sl.pos, tokens) >= 0) return LH_BAD_ARGUMENT;  // checked before anything is written
  const size_t row_run = static_cast<size_t>(tokens) * pool->head_dim * pool->elem_bytes;
  const size_t elem_row = static_cast<size_t>(pool->head_dim) * pool->elem_bytes;
  for (uint32_t g = 0; g < pool->kv_heads; ++g) {
    const size_t at = lh_kv_pool_slot_index(pool, layer, g, 0);       // slot 0 of (layer, g)
    char* kdst = static_cast<char*>(pool->k) + at * elem_row;  // (tokens, head_dim) of head g
    char* vdst = static_cast<char*>(pool->v) + at * elem_row;
    prefault_for_write(kdst, row_run);
    prefault_for_write(vdst, row_run);
    std::memcpy(kdst, in + sl.k + g * row_run, row_run);
    std::memcpy(vdst, in + sl.v + g * row_run, row_run);
    std::memcpy(pool->pos + at, in + sl.pos, static_cast<size_t>(tokens) * sizeof(int32_t));  // every head's copy
  }
  if (pool->kv_type == LH_KV_I8) {
    const size_t run = static_cast<size_t>(tokens) * sizeof(float);
    for (uint32_t g = 0; g < pool->kv_heads; ++g) {
      std::memcpy(pool->ks + lh_kv_pool_slot_index(pool, layer, g, 0), in + sl.ks + g * run, run);
      std::memcpy(pool->vs + lh_kv_pool_slot_index(pool, layer, g, 0), in + sl.vs + g * run, run);
    }
  }
  pool->length[layer] = tokens;
  pool->ring_start[layer] = 0;
  if (pool->partial_dim > 0 && pool->proj_set[layer] != 0) rebuild_partials(pool, layer);  // as lh_kv_pool_set_projection does
  return LH_OK;
}
