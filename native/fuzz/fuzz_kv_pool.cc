// Fuzz target: the KV pool (src/kv_pool.h) driven by a sequence of operations, the way the addon
// drives it (append, appendBatch, truncate, reset, setPartialProjection, reads, snapshot
// exportLayer / importLayer; with eviction also the speculator's reserve_victim / note_selected /
// age), checked after every operation against a plain model of what the header promises.
//
// Input: a pool config (shape, fp16/fp32, partial_dim, eviction knobs, budget, and sometimes per-layer
// capacities: fixed entries and 0 = share the rest), then operations.
// Invariants:
//   - the allocation never exceeds the budget, every region lies inside it, and the capacity wastes
//     less than one token plus line padding (uniform pools); fixed layer capacities are exact, shared
//     layers all get the same, capacity is the largest; each layer is full at its own capacity;
//   - every status is the one the contract gives (LH_BAD_ARGUMENT / LH_POOL_FULL leave the pool
//     unchanged);
//   - lengths, positions, K/V rows (bit for bit after fp16 rounding), partial rows (within fp16
//     rounding of the double-precision product), counters, candidate flags and the eviction
//     bookkeeping equal the model's; sinks and the recent window are never evicted;
//   - reads outside the stored slots are refused and write nothing (guard bytes intact);
//   - a snapshot section exported from one layer and imported into an empty one makes that layer
//     equal the first `tokens` slots of the source (partial rows rebuilt); a wrong size, a non-empty
//     target, bad positions or an evicting pool are refused and change nothing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../src/fp16.h"
#include "../src/kv_pool.h"
#include "addon_rules.h"
#include "fuzz_input.h"

namespace {

struct Slot {
  int32_t pos = 0;
  std::vector<float> k, v;  // (kv_head, head_dim) as stored (fp16-rounded for fp16 pools), widened
  uint32_t counter = 0;
  uint8_t cand = 0;
};

struct Layer {
  std::vector<Slot> slots;  // [0, length)
  uint64_t evictions = 0, appends = 0;
  int32_t newest = -1, last_slot = -1, last_evicted = -1;
  int64_t pending = -1;  // reserved victim slot, or -1
  uint32_t age_tick = 0;
  bool proj_set = false;
  std::vector<float> proj;  // (kv_head, head_dim, partial_dim)
};

struct Model {
  lh_kv_pool_config cfg;
  std::vector<uint32_t> cap;  // (layer) each layer's capacity
  std::vector<Layer> layers;

  float stored(float x) const { return cfg.kv_type == LH_KV_F16 ? lh_fp16_to_fp32(lh_fp32_to_fp16(x)) : x; }

  int64_t choose_victim(const Layer& l) const {
    const int64_t recent_from = static_cast<int64_t>(l.newest) - cfg.recent + 1;
    int64_t best = -1;
    for (size_t s = 0; s < l.slots.size(); ++s) {
      const Slot& x = l.slots[s];
      if (x.pos < static_cast<int64_t>(cfg.sinks) || x.pos >= recent_from) continue;
      if (best < 0 || x.counter < l.slots[best].counter ||
          (x.counter == l.slots[best].counter && x.pos < l.slots[best].pos))
        best = static_cast<int64_t>(s);
    }
    return best;
  }
};

bool same_float(float a, float b) { return lh_f32_bits(a) == lh_f32_bits(b) || (std::isnan(a) && std::isnan(b)); }

// The pool equals the model: lengths, positions, rows, eviction state of every layer; the rows
// (and, with `partial`, the partial rows: O(d) per element) only of `only` unless it is -1 (all).
void check_pool(const lh_kv_pool& pool, const Model& m, int64_t only, bool partial) {
  const uint64_t budget = m.cfg.budget_bytes;
  FUZZ_CHECK(pool.byte_length <= budget, "allocation %llu over budget %llu", (unsigned long long)pool.byte_length,
             (unsigned long long)budget);
  const char* base = static_cast<const char*>(pool.base);
  const char* end = base + pool.byte_length;
  const size_t lh = static_cast<size_t>(pool.layers) * pool.kv_heads;
  size_t slots = 0;  // the sum of the layers' capacities
  for (uint32_t l = 0; l < pool.layers; ++l) {
    FUZZ_CHECK(lh_kv_pool_layer_capacity(&pool, l) == m.cap[l] && m.cap[l] <= pool.capacity, "layer %u capacity %u, model %u", l,
               lh_kv_pool_layer_capacity(&pool, l), m.cap[l]);
    FUZZ_CHECK(pool.layer_row0[l] == slots, "layer %u starts at slot %llu, after %zu", l, (unsigned long long)pool.layer_row0[l], slots);
    slots += m.cap[l];
  }
  const size_t kvh = pool.kv_heads;
  auto inside = [&](const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    return c >= base && c + bytes <= end;
  };
  FUZZ_CHECK(inside(pool.length, pool.layers * 4) && inside(pool.k, kvh * slots * pool.head_dim * pool.elem_bytes) &&
                 inside(pool.v, kvh * slots * pool.head_dim * pool.elem_bytes) && inside(pool.pos, kvh * slots * 4),
             "a row region lies outside the allocation");
  if (pool.partial_dim > 0)
    FUZZ_CHECK(inside(pool.kp, kvh * slots * pool.partial_dim * 2) /* at least; tiles may pad it */ && inside(pool.proj, lh * pool.head_dim * pool.partial_dim * 4) &&
                   inside(pool.proj_set, pool.layers * 4),
               "a partial-row region lies outside the allocation");
  if (pool.evict != 0)
    FUZZ_CHECK(inside(pool.counter, slots * 4) && inside(pool.cand, slots) && inside(pool.ev, pool.layers * sizeof(lh_kv_evict_layer)),
               "an eviction region lies outside the allocation");
  const uint32_t d = pool.head_dim, p = pool.partial_dim;
  Guarded<float> row(d), prow(p == 0 ? 1 : p);
  for (uint32_t l = 0; l < pool.layers; ++l) {
    const Layer& ml = m.layers[l];
    FUZZ_CHECK(lh_kv_pool_length(&pool, l) == ml.slots.size(), "layer %u length %u, model %zu", l, lh_kv_pool_length(&pool, l),
               ml.slots.size());
    FUZZ_CHECK(ml.slots.size() <= m.cap[l], "model over capacity");
    for (uint32_t s = 0; s < ml.slots.size() && (only < 0 || only == l); ++s) {
      const Slot& ms = ml.slots[s];
      for (uint32_t g = 0; g < pool.kv_heads; ++g) {
        int32_t pos = -7;
        row.fill_canary();
        FUZZ_CHECK(lh_kv_pool_read(&pool, LH_KV_KEY, l, g, s, row.data(), &pos) == LH_OK, "read K failed");
        FUZZ_CHECK(pos == ms.pos, "layer %u head %u slot %u position %d, model %d", l, g, s, pos, ms.pos);
        for (uint32_t i = 0; i < d; ++i)
          FUZZ_CHECK(same_float(row.data()[i], ms.k[g * d + i]), "layer %u head %u slot %u K[%u] = %a, model %a", l, g, s, i,
                     (double)row.data()[i], (double)ms.k[g * d + i]);
        FUZZ_CHECK(lh_kv_pool_read(&pool, LH_KV_VALUE, l, g, s, row.data(), nullptr) == LH_OK, "read V failed");
        for (uint32_t i = 0; i < d; ++i)
          FUZZ_CHECK(same_float(row.data()[i], ms.v[g * d + i]), "layer %u head %u slot %u V[%u] = %a, model %a", l, g, s, i,
                     (double)row.data()[i], (double)ms.v[g * d + i]);
        FUZZ_CHECK(row.guards_intact(), "read wrote outside its (head_dim) output");
        if (partial && p > 0 && ml.proj_set) {
          FUZZ_CHECK(lh_kv_pool_read_partial(&pool, l, g, s, prow.data()) == LH_OK, "read partial failed");
          FUZZ_CHECK(prow.guards_intact(), "read_partial wrote outside its (partial_dim) output");
          for (uint32_t i = 0; i < p; ++i) {
            double exact = 0, mag = 0;
            for (uint32_t j = 0; j < d; ++j) {
              const double t = static_cast<double>(ms.k[g * d + j]) * ml.proj[(g * d + j) * p + i];
              exact += t;
              mag += std::fabs(t);
            }
            if (!std::isfinite(mag) || mag > 60000.0) continue;  // fp16 overflow territory: order decides
            const double got = prow.data()[i];
            const double tol = std::fabs(exact) * 0x1p-11 + 0x1p-24 + mag * (d + 2) * 0x1p-23 * 1.0001;
            FUZZ_CHECK(std::fabs(got - exact) <= tol, "layer %u head %u slot %u partial[%u] = %.9g, exact %.9g (tol %.3g)", l, g, s,
                       i, got, exact, tol);
          }
        }
      }
    }
    if (pool.evict != 0) {
      const lh_kv_evict_layer* e = lh_kv_pool_evict_state(&pool, l);
      FUZZ_CHECK(e != nullptr && e->evictions == ml.evictions && e->appends == ml.appends && e->newest == ml.newest &&
                     e->last_slot == ml.last_slot && e->last_evicted == ml.last_evicted &&
                     e->pending == static_cast<uint32_t>(ml.pending + 1) && e->age_tick == ml.age_tick,
                 "layer %u eviction state: evictions %llu/%llu appends %llu/%llu newest %d/%d last_slot %d/%d last_evicted %d/%d "
                 "pending %u/%lld age %u/%u",
                 l, (unsigned long long)e->evictions, (unsigned long long)ml.evictions, (unsigned long long)e->appends,
                 (unsigned long long)ml.appends, e->newest, ml.newest, e->last_slot, ml.last_slot, e->last_evicted, ml.last_evicted,
                 e->pending, (long long)ml.pending + 1, e->age_tick, ml.age_tick);
      const uint8_t* cand = lh_kv_pool_candidates(&pool, l);
      for (uint32_t s = 0; s < ml.slots.size(); ++s)
        FUZZ_CHECK(pool.counter[lh_kv_pool_layer_slot(&pool, l, s)] == ml.slots[s].counter && cand[s] == ml.slots[s].cand,
                   "layer %u slot %u counter %u/%u cand %u/%u", l, s, pool.counter[lh_kv_pool_layer_slot(&pool, l, s)],
                   ml.slots[s].counter, cand[s], ml.slots[s].cand);
      FUZZ_CHECK(lh_kv_pool_last_slot(&pool, l) == ml.last_slot, "last_slot");
    } else {
      FUZZ_CHECK(lh_kv_pool_last_slot(&pool, l) == static_cast<int32_t>(ml.slots.size()) - 1, "last_slot without eviction");
    }
  }
}

// Model of one token landing in a layer (append or a batch element). `evicted` as in kv_pool.cc.
void model_store(Model& m, Layer& l, uint32_t s, const float* k, const float* v, int32_t pos, int32_t evicted) {
  const size_t w = static_cast<size_t>(m.cfg.kv_heads) * m.cfg.head_dim;
  Slot& x = l.slots[s];
  x.pos = pos;
  x.k.resize(w);
  x.v.resize(w);
  for (size_t i = 0; i < w; ++i) {
    x.k[i] = m.stored(k[i]);
    x.v[i] = m.stored(v[i]);
  }
  if (m.cfg.evict != 0) {
    x.counter = 0;
    x.cand = 1;
    l.appends += 1;
    l.last_slot = static_cast<int32_t>(s);
    l.last_evicted = evicted;
    if (evicted >= 0) l.evictions += 1;
    l.newest = std::max(l.newest, pos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  static const uint32_t kDims[] = {1, 2, 3, 4, 7, 8, 9, 16, 17, 31, 32, 33, 64};
  lh_kv_pool_config cfg{};
  cfg.layers = in.range(1, 4);
  cfg.kv_heads = in.range(1, 4);
  cfg.head_dim = kDims[in.range(0, 12)];
  cfg.kv_type = in.range(0, 1);
  cfg.partial_dim = in.chance(3) ? 0 : in.range(1, cfg.head_dim);
  cfg.evict = in.range(0, 1);
  if (cfg.evict) {
    cfg.sinks = in.range(0, 6);
    cfg.recent = in.range(0, 12);
    cfg.age_every = in.range(1, 6);
  }
  const uint64_t per_token = static_cast<uint64_t>(cfg.layers) * cfg.kv_heads *
                                 (2ull * cfg.head_dim * lh_kv_type_bytes(cfg.kv_type) + 4 + 2ull * cfg.partial_dim) +
                             (cfg.evict ? cfg.layers * 5ull : 0);
  const uint32_t want = in.range(0, 40);
  cfg.budget_bytes = per_token * want + in.range(0, 4096);
  if (in.chance(64)) cfg.budget_bytes = 1ull << in.range(40, 62);  // absurd budgets
  if (!addon_rules::pool_options_ok(cfg)) return 0;  // the addon throws before the core sees it
  // sometimes per-layer capacities (createKvPool's layerCapacity): fixed entries, or 0 = share the rest
  std::vector<uint32_t> layer_capacity(cfg.layers, 0);
  const bool per_layer = in.chance(3);
  if (per_layer) {
    for (uint32_t& c : layer_capacity) c = in.chance(3) ? 0 : in.range(1, 48);
    if (in.chance(32)) layer_capacity[0] = 0x80000000u;  // past LH_MAX_TOKENS: refused
    cfg.layer_capacity = layer_capacity.data();
  }

  // Bytes that do not scale with tokens: headers, the projection, partial rows padded to a tile
  // of 8 slots, and up to 63 bytes of line padding after each of the ten regions. The plan may
  // leave at most one token plus these unused (it takes the largest capacity that fits).
  const uint64_t fixed = cfg.layers * 4ull + static_cast<uint64_t>(cfg.layers) * cfg.kv_heads * cfg.head_dim * cfg.partial_dim * 4 +
                         static_cast<uint64_t>(cfg.layers) * cfg.kv_heads * 7 * cfg.partial_dim * 2 +
                         cfg.layers * (4ull + sizeof(lh_kv_evict_layer)) + 10 * 64;
  lh_kv_pool pool;
  const lh_status st = lh_kv_pool_init(&pool, &cfg);
  if (st != LH_OK) {
    FUZZ_CHECK(pool.base == nullptr && pool.capacity == 0, "failed init left state behind");
    uint32_t cap = 0;
    uint64_t bytes = 0;
    FUZZ_CHECK(lh_kv_pool_plan(&cfg, &cap, &bytes) == st, "plan and init disagree");
    // the only legitimate refusals: too small for one token (or for sinks + recent + 1), absurd, larger than RAM
    FUZZ_CHECK(st == LH_BAD_ARGUMENT || st == LH_OUT_OF_MEMORY, "init status %d", st);
    const uint64_t least = cfg.evict ? cfg.sinks + cfg.recent + 1ull : 1ull;  // the capacity init needs
    if (st == LH_BAD_ARGUMENT && !per_layer && cfg.budget_bytes < (1ull << 40) && cfg.budget_bytes > fixed)
      FUZZ_CHECK((cfg.budget_bytes - fixed) / per_token < least, "budget %llu (room for %llu tokens, %llu needed) refused",
                 (unsigned long long)cfg.budget_bytes, (unsigned long long)((cfg.budget_bytes - fixed) / per_token),
                 (unsigned long long)least);
    return 0;
  }
  FUZZ_CHECK(pool.capacity >= 1 && pool.bytes_per_token == per_token && pool.byte_length <= cfg.budget_bytes &&
                 (per_layer || cfg.budget_bytes - pool.byte_length < per_token + fixed),
             "plan: capacity %u, %llu of %llu bytes, %llu per token", pool.capacity, (unsigned long long)pool.byte_length,
             (unsigned long long)cfg.budget_bytes, (unsigned long long)pool.bytes_per_token);

  Model m;
  m.cfg = cfg;
  m.cfg.layer_capacity = nullptr;  // read at init only
  m.layers.resize(cfg.layers);
  uint32_t shared_cap = 0, largest = 0;
  for (uint32_t l = 0; l < cfg.layers; ++l) {
    const uint32_t c = lh_kv_pool_layer_capacity(&pool, l);
    m.cap.push_back(c);
    largest = std::max(largest, c);
    if (per_layer && layer_capacity[l] != 0) FUZZ_CHECK(c == layer_capacity[l], "layer %u capacity %u, fixed %u", l, c, layer_capacity[l]);
    if (!per_layer || layer_capacity[l] == 0) {
      FUZZ_CHECK(shared_cap == 0 || c == shared_cap, "shared layers with capacities %u and %u", shared_cap, c);
      shared_cap = c;
    }
    if (cfg.evict) FUZZ_CHECK(c > static_cast<uint64_t>(cfg.sinks) + cfg.recent, "layer %u capacity %u: nothing evictable", l, c);
  }
  FUZZ_CHECK(pool.capacity == largest, "capacity %u, largest layer %u", pool.capacity, largest);
  const uint32_t d = cfg.head_dim, kvh = cfg.kv_heads, p = cfg.partial_dim;
  const size_t w = static_cast<size_t>(kvh) * d;
  int64_t next_pos = 0;
  const bool nonfinite = in.chance(4);

  auto position = [&]() -> int64_t {
    switch (in.range(0, 15)) {
      case 0: return -1 - static_cast<int64_t>(in.range(0, 3));                      // refused
      case 1: return in.range(0, 8);                                                  // old / sink / duplicate
      case 2: return static_cast<int64_t>(addon_rules::kMaxI32) - in.range(0, 3);     // near INT32_MAX
      case 3: return static_cast<int64_t>(addon_rules::kMaxI32) + 1;                  // refused by the addon
      default: return next_pos++;
    }
  };

  for (uint32_t op = 0; op < 128 && !in.exhausted(); ++op) {
    const uint32_t kind = in.range(0, 16);
    const uint32_t layer = in.chance(16) ? cfg.layers + in.range(0, 2) : in.range(0, cfg.layers - 1);
    Layer* ml = layer < cfg.layers ? &m.layers[layer] : nullptr;
    if (kind <= 5) {  // append
      const int64_t pos = position();
      std::vector<float> k = floats(in, w, nonfinite), v = floats(in, w, nonfinite);
      if (!addon_rules::append_ok(pool, layer, pos)) {
        if (pos > addon_rules::kMaxI32) continue;  // a JS number the addon refuses; not representable as int32
        uint32_t slot = 12345;
        FUZZ_CHECK(lh_kv_pool_append(&pool, layer, k.data(), v.data(), static_cast<int32_t>(pos), &slot) == LH_BAD_ARGUMENT &&
                       slot == 12345,
                   "append(layer %u, position %lld) not refused", layer, (long long)pos);
        continue;
      }
      uint32_t slot = 12345;
      const lh_status s = lh_kv_pool_append(&pool, layer, k.data(), v.data(), static_cast<int32_t>(pos), &slot);
      if (ml->slots.size() < m.cap[layer]) {
        FUZZ_CHECK(s == LH_OK && slot == ml->slots.size(), "append status %d slot %u, model slot %zu", s, slot, ml->slots.size());
        ml->slots.emplace_back();
        model_store(m, *ml, slot, k.data(), v.data(), static_cast<int32_t>(pos), -1);
      } else if (cfg.evict == 0) {
        FUZZ_CHECK(s == LH_POOL_FULL && slot == 12345, "append to a full layer: status %d", s);
      } else {
        const int64_t victim = ml->pending >= 0 ? ml->pending : m.choose_victim(*ml);
        if (victim < 0) {
          // every slot protected: only possible when positions were not increasing
          FUZZ_CHECK(s == LH_POOL_FULL && slot == 12345, "append with every slot protected: status %d", s);
        } else {
          FUZZ_CHECK(s == LH_OK && slot == victim, "evicting append: status %d slot %u, model victim %lld", s, slot, (long long)victim);
          const int32_t old = ml->slots[victim].pos;
          const int64_t recent_from = static_cast<int64_t>(ml->newest) - cfg.recent + 1;
          if (ml->pending < 0)  // a reserved victim was checked when it was reserved
            FUZZ_CHECK(old >= static_cast<int64_t>(cfg.sinks) && old < recent_from, "evicted protected position %d", old);
          ml->pending = -1;
          model_store(m, *ml, slot, k.data(), v.data(), static_cast<int32_t>(pos), old);
        }
      }
    } else if (kind <= 7) {  // appendBatch
      const uint32_t tokens = in.range(1, pool.capacity + 2);
      int64_t first = in.chance(8) ? static_cast<int64_t>(addon_rules::kMaxI32) - in.range(0, tokens) : next_pos;
      if (in.chance(16)) first = -1;
      std::vector<float> k = floats(in, w * tokens, nonfinite), v = floats(in, w * tokens, nonfinite);
      uint32_t slot = 12345;
      if (!addon_rules::append_batch_ok(pool, layer, tokens, first)) {
        FUZZ_CHECK(lh_kv_pool_append_batch(&pool, layer, k.data(), v.data(), tokens, static_cast<int32_t>(first), &slot) ==
                           LH_BAD_ARGUMENT &&
                       slot == 12345,
                   "appendBatch(layer %u, %u tokens from %lld) not refused", layer, tokens, (long long)first);
        continue;
      }
      const lh_status s = lh_kv_pool_append_batch(&pool, layer, k.data(), v.data(), tokens, static_cast<int32_t>(first), &slot);
      const size_t len = ml->slots.size();
      if (cfg.evict != 0 && tokens == 1 && len >= m.cap[layer]) {
        const int64_t victim = ml->pending >= 0 ? ml->pending : m.choose_victim(*ml);
        if (victim < 0) {
          FUZZ_CHECK(s == LH_POOL_FULL, "batch of one, every slot protected: status %d", s);
        } else {
          FUZZ_CHECK(s == LH_OK && slot == victim, "batch of one on a full evicting layer: status %d slot %u victim %lld", s, slot,
                     (long long)victim);
          const int32_t old = ml->slots[victim].pos;
          ml->pending = -1;
          model_store(m, *ml, slot, k.data(), v.data(), static_cast<int32_t>(first), old);
        }
      } else if (tokens > m.cap[layer] - len) {
        FUZZ_CHECK(s == LH_POOL_FULL && slot == 12345, "batch of %u into %zu/%u: status %d", tokens, len, m.cap[layer], s);
      } else {
        FUZZ_CHECK(s == LH_OK && slot == len, "batch of %u into %zu/%u: status %d slot %u", tokens, len, m.cap[layer], s, slot);
        for (uint32_t t = 0; t < tokens; ++t) {
          ml->slots.emplace_back();
          model_store(m, *ml, static_cast<uint32_t>(len + t), k.data() + t * w, v.data() + t * w, static_cast<int32_t>(first + t), -1);
        }
        if (first == next_pos) next_pos += tokens;
      }
    } else if (kind == 8) {  // truncate
      const int64_t tokens = in.chance(4) ? in.range(0, 8) : std::max<int64_t>(0, next_pos - in.range(0, 6));
      if (!addon_rules::truncate_ok(tokens)) continue;
      FUZZ_CHECK(lh_kv_pool_truncate(&pool, static_cast<uint32_t>(tokens)) == LH_OK, "truncate failed");
      for (Layer& l : m.layers) {
        if (cfg.evict == 0) {
          if (l.slots.size() > tokens) l.slots.resize(tokens);
          continue;
        }
        if (l.pending >= 0) l.slots[l.pending].cand = 1;
        l.pending = -1;
        auto gone = [&](size_t s) { return l.slots[s].pos >= tokens; };
        size_t len = l.slots.size();
        while (len > 0 && gone(len - 1)) --len;
        for (size_t s = 0; s < len; ++s) {  // the last kept slot moves into each hole
          if (!gone(s)) continue;
          l.slots[s] = l.slots[len - 1];
          --len;
          while (len > 0 && gone(len - 1)) --len;
        }
        l.slots.resize(len);
        l.newest = -1;
        for (const Slot& x : l.slots) l.newest = std::max(l.newest, x.pos);
        l.last_slot = -1;
        l.last_evicted = -1;
        for (const Slot& x : l.slots) FUZZ_CHECK(x.pos < tokens, "model kept a truncated slot");
      }
      next_pos = std::min<int64_t>(next_pos, tokens);
    } else if (kind == 9) {  // reset
      if (!in.chance(4)) continue;
      FUZZ_CHECK(lh_kv_pool_reset(&pool) == LH_OK, "reset failed");
      for (Layer& l : m.layers) {
        const bool ps = l.proj_set;
        std::vector<float> pj = l.proj;
        l = Layer{};
        l.proj_set = ps;
        l.proj = pj;
      }
      next_pos = 0;
    } else if (kind == 10) {  // setPartialProjection
      std::vector<float> proj = floats(in, w * (p == 0 ? 1 : p), false);
      if (p == 0 || layer >= cfg.layers) {
        FUZZ_CHECK(lh_kv_pool_set_projection(&pool, layer, proj.data()) == LH_BAD_ARGUMENT, "projection not refused");
        continue;
      }
      FUZZ_CHECK(lh_kv_pool_set_projection(&pool, layer, proj.data()) == LH_OK, "set_projection failed");
      ml->proj_set = true;
      ml->proj = proj;
    } else if (kind == 11) {  // reserve_victim (the speculator's begin on an evicting pool)
      const lh_status s = lh_kv_pool_reserve_victim(&pool, layer);
      if (cfg.evict == 0 || ml == nullptr) {
        FUZZ_CHECK(s == LH_BAD_ARGUMENT, "reserve_victim without eviction: %d", s);
        continue;
      }
      if (ml->slots.size() < m.cap[layer] || ml->pending >= 0) {
        FUZZ_CHECK(s == LH_OK, "reserve_victim no-op: %d", s);
        continue;
      }
      const int64_t victim = m.choose_victim(*ml);
      if (victim < 0) {
        FUZZ_CHECK(s == LH_POOL_FULL, "reserve_victim with every slot protected: %d", s);
        continue;
      }
      FUZZ_CHECK(s == LH_OK, "reserve_victim: %d", s);
      const int32_t vp = ml->slots[victim].pos;
      FUZZ_CHECK(vp >= static_cast<int64_t>(cfg.sinks) && vp < static_cast<int64_t>(ml->newest) - cfg.recent + 1,
                 "reserved a protected position %d", vp);
      ml->pending = victim;
      ml->slots[victim].counter = 0;
      ml->slots[victim].cand = 0;
    } else if (kind == 12 || kind == 13) {  // note_selected (+ age): what a speculator job does
      const uint32_t n = in.range(0, 24);
      std::vector<int32_t> sel(n + 1);
      for (uint32_t i = 0; i < n; ++i)
        sel[i] = in.chance(8) ? static_cast<int32_t>(in.u32()) : static_cast<int32_t>(in.range(0, pool.capacity + 1));
      const lh_status s = lh_kv_pool_note_selected(&pool, layer, sel.data(), n);
      if (cfg.evict == 0 || ml == nullptr) {
        FUZZ_CHECK(s == LH_BAD_ARGUMENT, "note_selected without eviction: %d", s);
        continue;
      }
      FUZZ_CHECK(s == LH_OK, "note_selected: %d", s);
      for (uint32_t i = 0; i < n; ++i)
        if (sel[i] >= 0 && static_cast<size_t>(sel[i]) < ml->slots.size() && ml->slots[sel[i]].counter < UINT32_MAX)
          ml->slots[sel[i]].counter += 1;
      if (kind == 13) {
        FUZZ_CHECK(lh_kv_pool_age(&pool, layer) == LH_OK, "age failed");
        if (++ml->age_tick >= cfg.age_every) {
          ml->age_tick = 0;
          for (Slot& x : ml->slots) x.counter >>= 1;
        }
      }
    } else if (kind == 16) {  // exportLayer from `layer`, then importLayer into `to` (what a snapshot save + restore does)
      const uint32_t len = ml != nullptr ? static_cast<uint32_t>(ml->slots.size()) : 0;
      const uint32_t tokens = in.chance(8) ? in.range(0, pool.capacity + 1) : in.range(0, len);
      lh_kv_snapshot_layout sl{};
      const bool fits = lh_kv_pool_snapshot_layout(&pool, tokens, &sl) == LH_OK;
      FUZZ_CHECK(fits == (tokens <= pool.capacity), "snapshot layout of %u tokens (capacity %u): %d", tokens, pool.capacity, fits);
      if (!fits) continue;  // snapshotLayerBytes refuses it, so JS cannot size a buffer for it
      const int64_t skew = in.chance(16) ? static_cast<int64_t>(in.range(0, 2)) - 1 : 0;  // a buffer one byte off
      const uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(sl.total) + skew));
      Guarded<uint8_t> sec(bytes == 0 ? 1 : bytes);
      const lh_status es = lh_kv_pool_export_layer(&pool, layer, tokens, bytes == 0 ? nullptr : sec.data(), bytes);
      if (!addon_rules::export_ok(pool, layer, tokens, bytes)) {
        FUZZ_CHECK(es == LH_BAD_ARGUMENT && sec.untouched() && sec.guards_intact(), "exportLayer(layer %u, %u tokens, %llu bytes) not refused: %d",
                   layer, tokens, (unsigned long long)bytes, es);
        continue;
      }
      FUZZ_CHECK(es == LH_OK && sec.guards_intact(), "exportLayer: status %d, guards %d", es, sec.guards_intact());
      // the target: an empty layer when there is one (that is where a restore goes), else any
      uint32_t to = in.range(0, cfg.layers - 1);
      if (in.chance(2))
        for (uint32_t l = 0; l < cfg.layers; ++l)
          if (m.layers[l].slots.empty()) to = l;
      if (tokens > 0 && in.chance(8)) {  // a corrupt position: negative, or a repeat of the one before
        int32_t bad = in.chance(2) ? -1 - static_cast<int32_t>(in.range(0, 3)) : 0;
        const uint32_t at = in.range(0, tokens - 1);
        if (bad == 0 && at > 0) std::memcpy(&bad, sec.data() + sl.pos + 4 * (at - 1), 4);
        std::memcpy(sec.data() + sl.pos + 4 * at, &bad, 4);
      }
      Layer& dst = m.layers[to];
      std::vector<int32_t> spos(tokens + 1);  // the section's positions, read independently of the core's check
      if (tokens > 0) std::memcpy(spos.data(), sec.data() + sl.pos, 4ull * tokens);
      bool positions_ok = true;
      for (uint32_t t = 0; t < tokens; ++t) positions_ok = positions_ok && spos[t] >= 0 && (t == 0 || spos[t] > spos[t - 1]);
      FUZZ_CHECK(positions_ok == (lh_kv_snapshot_bad_position(sec.data() + sl.pos, tokens) < 0), "lh_kv_snapshot_bad_position disagrees");
      const bool allowed = addon_rules::import_ok(pool, to, tokens, bytes) && positions_ok;  // judged before the call changes the length
      const lh_status is = lh_kv_pool_import_layer(&pool, to, tokens, bytes == 0 ? nullptr : sec.data(), bytes);
      if (!allowed) {
        FUZZ_CHECK(is == LH_BAD_ARGUMENT, "importLayer(layer %u, %u tokens) into %zu slots, positions ok %d: not refused (%d)", to, tokens,
                   dst.slots.size(), positions_ok, is);
      } else {
        FUZZ_CHECK(is == LH_OK, "importLayer(layer %u, %u tokens): status %d", to, tokens, is);
        for (uint32_t t = 0; t < tokens; ++t) {
          dst.slots.push_back(ml->slots[t]);  // rows as stored in the source
          dst.slots.back().pos = spos[t];     // the position as in the section (a corrupt one may still be valid)
        }
      }
      check_pool(pool, m, to, true);  // the target's rows and partial rows (the source is unchanged: checked below)
    } else {  // reads the addon would refuse (slot past the length, head past kv_heads): nothing written
      const uint32_t g = in.range(0, kvh);
      const uint32_t slot = in.range(0, pool.capacity + 1);
      if (addon_rules::read_ok(pool, layer, g, slot)) continue;  // valid reads are checked in check_pool
      Guarded<float> out(d), pout(p == 0 ? 1 : p);
      int32_t pos = -7;
      FUZZ_CHECK(lh_kv_pool_read(&pool, LH_KV_KEY, layer, g, slot, out.data(), &pos) == LH_BAD_ARGUMENT && out.untouched() &&
                     out.guards_intact() && pos == -7,
                 "read(layer %u, head %u, slot %u) outside the stored slots not refused", layer, g, slot);
      FUZZ_CHECK(lh_kv_pool_read_partial(&pool, layer, g, slot, pout.data()) == LH_BAD_ARGUMENT && pout.untouched(),
                 "read_partial outside the stored slots not refused");
    }
    // rows of the layer the operation touched (all after truncate/reset); partial rows when a
    // projection was set and at the end (recomputing them is O(head_dim) per element)
    const bool every = kind == 8 || kind == 9;
    check_pool(pool, m, every ? -1 : static_cast<int64_t>(layer), kind == 10);
  }
  check_pool(pool, m, -1, true);
  lh_kv_pool_free(&pool);
  FUZZ_CHECK(!lh_kv_pool_live(&pool) && lh_kv_pool_reset(&pool) == LH_BAD_ARGUMENT, "free");
  return 0;
}
