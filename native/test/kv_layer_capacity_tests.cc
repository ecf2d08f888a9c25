// Per-layer capacities of the KV pool (kv_pool.h, layer_capacity): one allocation whose layers hold
// different slot counts. A uniform pool's layout is unchanged; every layer keeps the pool's rules on
// its own (full -> LH_POOL_FULL, or eviction); no two layers share a byte; and everything that reads a
// layer (attention, slot lists, logits, gather, partial rows, snapshots) gives the bits it gives for
// the same rows in a uniform pool.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/attention.h"
#include "../src/fp16.h"
#include "../src/kv_pool.h"
#include "../src/row_gather.h"
#include "../src/sparse_attention.h"
#include "check.h"
#include "test_rng.h"

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

lh_kv_pool_config config(uint64_t budget, uint32_t layers, uint32_t kvh, uint32_t d, uint32_t kv_type, uint32_t partial, const uint32_t* caps) {
  lh_kv_pool_config c{};
  c.budget_bytes = budget;
  c.layers = layers;
  c.kv_heads = kvh;
  c.head_dim = d;
  c.kv_type = kv_type;
  c.partial_dim = partial;
  c.layer_capacity = caps;
  return c;
}

// The same layout as before per-layer capacities: every entry equal to the uniform capacity (or all 0)
// gives the same capacity, byte length, bytes per token and region offsets.
void test_layer_capacity_uniform() {
  bool ok = true;
  for (const uint32_t kv_type : {0u, 1u, 2u})
    for (const uint32_t partial : {0u, 6u})
      for (const uint32_t evict : {0u, 1u}) {
        lh_kv_pool_config c = config(3u << 20, 5, 3, 24, kv_type, partial, nullptr);
        c.evict = evict;
        c.sinks = evict ? 4 : 0;
        c.recent = evict ? 16 : 0;
        c.age_every = evict ? 8 : 0;
        lh_kv_pool a{}, b{}, z{};
        ok = ok && lh_kv_pool_init(&a, &c) == LH_OK;
        std::vector<uint32_t> same(5, a.capacity), zeros(5, 0);
        lh_kv_pool_config cb = c, cz = c;
        cb.layer_capacity = same.data();
        cz.layer_capacity = zeros.data();
        ok = ok && lh_kv_pool_init(&b, &cb) == LH_OK && lh_kv_pool_init(&z, &cz) == LH_OK;
        for (const lh_kv_pool* p : {&b, &z}) {
          ok = ok && p->capacity == a.capacity && p->byte_length == a.byte_length && p->bytes_per_token == a.bytes_per_token;
          auto off = [](const lh_kv_pool* q, const void* x) { return x == nullptr ? -1 : static_cast<const char*>(x) - static_cast<const char*>(q->base); };
          ok = ok && off(p, p->k) == off(&a, a.k) && off(p, p->v) == off(&a, a.v) && off(p, p->pos) == off(&a, a.pos) && off(p, p->ks) == off(&a, a.ks) &&
               off(p, p->kp) == off(&a, a.kp) && off(p, p->proj) == off(&a, a.proj) && off(p, p->counter) == off(&a, a.counter) &&
               off(p, p->cand) == off(&a, a.cand) && off(p, p->ev) == off(&a, a.ev);
          for (uint32_t l = 0; l < 5; ++l)
            ok = ok && lh_kv_pool_layer_capacity(p, l) == a.capacity && lh_kv_pool_slot_index(p, l, 2, 7) == (static_cast<size_t>(l) * 3 + 2) * a.capacity + 7;
        }
        lh_kv_pool_free(&a);
        lh_kv_pool_free(&b);
        lh_kv_pool_free(&z);
      }
  check(ok, "kv layer capacity: every entry the uniform capacity (or every entry 0) == the uniform pool: capacity, bytes, region offsets");
}

// Mixed capacities: fixed layers get exactly theirs, shared (0) layers split what is left; each layer
// fills to its own capacity and then is full; every slot of every layer keeps its own rows, positions,
// int8 scales and partial rows (nothing overlaps); the whole stays within the budget.
void test_layer_capacity_mixed() {
  const uint32_t L = 4, H = 3, D = 20, P = 5;
  const uint32_t caps[L] = {17, 0, 5, 0};
  for (const uint32_t kv_type : {0u, 1u, 2u}) {
    Rng rng(4000 + kv_type);
    lh_kv_pool_config c = config(1u << 20, L, H, D, kv_type, P, caps);
    lh_kv_pool p{};
    const lh_status st = lh_kv_pool_init(&p, &c);
    const uint32_t shared = lh_kv_pool_layer_capacity(&p, 1);
    bool plan_ok = st == LH_OK && lh_kv_pool_layer_capacity(&p, 0) == 17 && lh_kv_pool_layer_capacity(&p, 2) == 5 &&
                   lh_kv_pool_layer_capacity(&p, 3) == shared && shared > 17 && p.capacity == shared && p.byte_length <= c.budget_bytes;
    // one more shared slot would not fit
    std::vector<uint32_t> more = {17, shared + 1, 5, shared + 1};
    lh_kv_pool_config cm = c;
    cm.layer_capacity = more.data();
    uint32_t cap_more = 0;
    uint64_t bytes_more = 0;
    plan_ok = plan_ok && lh_kv_pool_plan(&cm, &cap_more, &bytes_more) == LH_BAD_ARGUMENT;
    char name[160];
    std::snprintf(name, sizeof name, "kv layer capacity (%s): fixed layers get theirs, shared layers the rest of the budget (%u each)",
                  kv_type == 2 ? "int8" : kv_type == 1 ? "fp32" : "fp16", shared);
    check(plan_ok, name, "status %d caps %u %u %u %u bytes %llu", st, lh_kv_pool_layer_capacity(&p, 0), lh_kv_pool_layer_capacity(&p, 1),
          lh_kv_pool_layer_capacity(&p, 2), lh_kv_pool_layer_capacity(&p, 3), (unsigned long long)p.byte_length);
    if (st != LH_OK) continue;
    std::vector<float> proj(static_cast<size_t>(H) * D * P);
    for (uint32_t l = 0; l < L; ++l) {
      for (auto& x : proj) x = rng.normal();
      lh_kv_pool_set_projection(&p, l, proj.data());
    }
    // fill every layer to its capacity with rows that name (layer, slot), then one more
    std::vector<float> k(H * D), v(H * D);
    auto row = [&](uint32_t l, uint32_t s, uint32_t g, uint32_t i, int part) { return static_cast<float>((l * 1000 + s) % 97) * 0.25f + g * 0.5f + i * 0.01f + part * 0.125f; };
    bool fill_ok = true;
    for (uint32_t l = 0; l < L; ++l) {
      for (uint32_t s = 0; s < lh_kv_pool_layer_capacity(&p, l); ++s) {
        for (uint32_t g = 0; g < H; ++g)
          for (uint32_t i = 0; i < D; ++i) {
            k[g * D + i] = row(l, s, g, i, 0);
            v[g * D + i] = row(l, s, g, i, 1);
          }
        uint32_t slot = 0;
        fill_ok = fill_ok && lh_kv_pool_append(&p, l, k.data(), v.data(), static_cast<int32_t>(10 * l + 3 * s), &slot) == LH_OK && slot == s;
      }
      fill_ok = fill_ok && lh_kv_pool_append(&p, l, k.data(), v.data(), 999999, nullptr) == LH_POOL_FULL &&
                lh_kv_pool_append_batch(&p, l, k.data(), v.data(), 1, 999999, nullptr) == LH_POOL_FULL &&
                lh_kv_pool_length(&p, l) == lh_kv_pool_layer_capacity(&p, l);
    }
    // every slot reads back its own rows (within the storage's rounding) and position; partial rows == K·A
    int bad_rows = 0, bad_pos = 0, bad_partial = 0;
    float kr[D], vr[D], pr[P];
    for (uint32_t l = 0; l < L; ++l) {
      const float* a = p.proj + static_cast<size_t>(l) * H * D * P;
      for (uint32_t s = 0; s < lh_kv_pool_layer_capacity(&p, l); ++s)
        for (uint32_t g = 0; g < H; ++g) {
          int32_t pos = -1;
          lh_kv_pool_read(&p, LH_KV_KEY, l, g, s, kr, &pos);
          lh_kv_pool_read(&p, LH_KV_VALUE, l, g, s, vr, nullptr);
          bad_pos += pos == static_cast<int32_t>(10 * l + 3 * s) ? 0 : 1;
          for (uint32_t i = 0; i < D; ++i) {
            const float tol = kv_type == 2 ? 0.2f : kv_type == 0 ? 0.02f : 0.0f;
            bad_rows += std::fabs(kr[i] - row(l, s, g, i, 0)) <= tol && std::fabs(vr[i] - row(l, s, g, i, 1)) <= tol ? 0 : 1;
          }
          lh_kv_pool_read_partial(&p, l, g, s, pr);
          for (uint32_t j = 0; j < P; ++j) {
            double acc = 0;
            for (uint32_t i = 0; i < D; ++i) acc += static_cast<double>(kr[i]) * a[(g * D + i) * P + j];
            bad_partial += std::fabs(pr[j] - acc) <= 2e-3 + 2e-3 * std::fabs(acc) ? 0 : 1;
          }
        }
    }
    std::snprintf(name, sizeof name, "kv layer capacity (%s): each layer fills to its own capacity, then LH_POOL_FULL; rows, positions, partial rows intact",
                  kv_type == 2 ? "int8" : kv_type == 1 ? "fp32" : "fp16");
    check(fill_ok && bad_rows == 0 && bad_pos == 0 && bad_partial == 0, name, "fill %d rows %d pos %d partial %d", fill_ok, bad_rows, bad_pos, bad_partial);
    lh_kv_pool_free(&p);
  }
  // refusals: fixed capacities over the budget, an entry past LH_MAX_TOKENS, evict with a layer <= sinks + recent
  const uint32_t huge[4] = {1u << 30, 0, 0, 0}, over[4] = {0x80000000u, 1, 1, 1}, small[4] = {10, 0, 20, 0};
  lh_kv_pool q{};
  lh_kv_pool_config c1 = config(1u << 20, 4, 2, 16, 0, 0, huge), c2 = config(1u << 20, 4, 2, 16, 0, 0, over), c3 = config(1u << 20, 4, 2, 16, 0, 0, small);
  c3.evict = 1;
  c3.sinks = 4;
  c3.recent = 8;
  c3.age_every = 4;
  bool refused = lh_kv_pool_init(&q, &c1) == LH_BAD_ARGUMENT && q.base == nullptr && lh_kv_pool_init(&q, &c2) == LH_BAD_ARGUMENT &&
                 lh_kv_pool_init(&q, &c3) == LH_BAD_ARGUMENT;
  c3.sinks = 1;  // 10 > 1 + 8: now it evicts
  refused = refused && lh_kv_pool_init(&q, &c3) == LH_OK;
  // the small layer evicts at its own 10 tokens, the others do not until theirs
  std::vector<float> k(2 * 16, 0.5f), v(2 * 16, 0.25f);
  bool evict_ok = true;
  for (int t = 0; t < 40 && evict_ok; ++t)
    for (uint32_t l = 0; l < 4; ++l) evict_ok = evict_ok && lh_kv_pool_append(&q, l, k.data(), v.data(), t, nullptr) == LH_OK;
  evict_ok = evict_ok && lh_kv_pool_length(&q, 0) == 10 && lh_kv_pool_evict_state(&q, 0)->evictions == 30 && lh_kv_pool_length(&q, 2) == 20 &&
             lh_kv_pool_evict_state(&q, 2)->evictions == 20 && lh_kv_pool_length(&q, 1) == 40 && lh_kv_pool_evict_state(&q, 1)->evictions == 0;
  lh_kv_pool_free(&q);
  check(refused && evict_ok, "kv layer capacity: fixed capacities over the budget, past 2^31 - 1, or an evicting layer <= sinks + recent are refused; each layer evicts at its own capacity");
}

// Everything that reads a layer gives the same bits for the same rows in a small layer of a mixed pool
// as in a uniform pool: attention (decode, prefill, slot lists), logits, gathered rows; snapshots move
// between them (import past a layer's capacity is refused).
void test_layer_capacity_readers() {
  const uint32_t L = 3, H = 2, D = 32, heads = 8, T = 9;
  const uint32_t caps[L] = {0, T, 0};
  bool same = true, snap_ok = true;
  for (const uint32_t kv_type : {0u, 2u}) {
    Rng rng(4100 + kv_type);
    lh_kv_pool_config cu = config(1u << 20, L, H, D, kv_type, 0, nullptr), cm = config(1u << 20, L, H, D, kv_type, 0, caps);
    lh_kv_pool u{}, m{};
    if (lh_kv_pool_init(&u, &cu) != LH_OK || lh_kv_pool_init(&m, &cm) != LH_OK) {
      same = false;
      continue;
    }
    std::vector<float> k(H * D), v(H * D);
    for (uint32_t t = 0; t < T; ++t) {
      for (auto& x : k) x = rng.normal();
      for (auto& x : v) x = rng.normal();
      for (uint32_t l = 0; l < L; ++l) {
        lh_kv_pool_append(&u, l, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
        lh_kv_pool_append(&m, l, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
      }
    }
    std::vector<float> q(4 * heads * D), ou(q.size()), om(q.size());
    for (auto& x : q) x = rng.normal();
    auto args = [&](const lh_kv_pool* p, float* out, uint32_t layer) {
      lh_attention_args a{};
      a.q = q.data();
      a.k = lh_kv_pool_k_rows(p, layer);
      a.v = lh_kv_pool_v_rows(p, layer);
      a.out = out;
      a.head_stride = lh_kv_pool_head_stride(p, layer);
      a.tokens = T;
      a.heads = heads;
      a.kv_heads = H;
      a.head_dim = D;
      a.scale = lh_attention_default_scale(D);
      a.kv_type = kv_type;
      a.k_scale = lh_kv_pool_k_scales(p, layer);
      a.v_scale = lh_kv_pool_v_scales(p, layer);
      a.window = 4;
      a.positions = lh_kv_pool_positions(p, layer);
      a.query_position = static_cast<int32_t>(T - 1);
      return a;
    };
    auto cmp = [&](size_t n) {
      for (size_t i = 0; i < n; ++i) same = same && same_bits(ou[i], om[i]);
    };
    for (uint32_t layer = 0; layer < L; ++layer) {
      lh_attention_args a = args(&u, ou.data(), layer), b = args(&m, om.data(), layer);
      lh_attention_decode(&a);
      lh_attention_decode(&b);
      cmp(heads * D);
      a.window = b.window = 0;
      lh_attention_prefill(&a, 4);
      lh_attention_prefill(&b, 4);
      cmp(4 * heads * D);
      std::vector<int32_t> sl = {0, 3, 8, 1, 8};
      std::vector<uint32_t> off = {0, 3, 5};
      lh_attention_slots(&u, layer, q.data(), heads, sl.data(), off.data(), lh_attention_default_scale(D), ou.data());
      lh_attention_slots(&m, layer, q.data(), heads, sl.data(), off.data(), lh_attention_default_scale(D), om.data());
      cmp(heads * D);
      lh_attention_scores(&u, layer, q.data(), heads, T, 0.3f, ou.data());
      lh_attention_scores(&m, layer, q.data(), heads, T, 0.3f, om.data());
      cmp(heads * T);
      const int32_t gh[3] = {0, 1, 1}, gs[3] = {8, 0, 4}, gd[3] = {2, 0, 1};
      std::vector<float> ku(3 * D), vu(3 * D), km(3 * D), vm(3 * D);
      if (kv_type == 2) {
        lh_kv_pool_gather_rows(&u, layer, 3, gh, gs, gd, ku.data(), vu.data(), 3, nullptr);
        lh_kv_pool_gather_rows(&m, layer, 3, gh, gs, gd, km.data(), vm.data(), 3, nullptr);
        for (size_t i = 0; i < ku.size(); ++i) same = same && same_bits(ku[i], km[i]) && same_bits(vu[i], vm[i]);
      }
      // snapshots: the small layer's section imports into the uniform pool's layer and back
      lh_kv_snapshot_layout sl_u;
      lh_kv_pool_snapshot_layout(&m, T, &sl_u);
      std::vector<uint8_t> sec(sl_u.total), back(sl_u.total);
      snap_ok = snap_ok && lh_kv_pool_export_layer(&m, layer, T, sec.data(), sec.size()) == LH_OK &&
                lh_kv_pool_export_layer(&u, layer, T, back.data(), back.size()) == LH_OK && sec == back;
    }
    // import: into an empty small layer up to its capacity, not past it
    lh_kv_snapshot_layout s1, s2;
    lh_kv_pool_snapshot_layout(&m, T, &s1);
    lh_kv_pool_snapshot_layout(&m, T + 1, &s2);
    std::vector<uint8_t> sec(s1.total), big(s2.total);
    lh_kv_pool_export_layer(&u, 0, T, sec.data(), sec.size());
    std::vector<int32_t> pos(T + 1);
    for (uint32_t t = 0; t <= T; ++t) pos[t] = static_cast<int32_t>(t);
    std::memcpy(big.data() + s2.pos, pos.data(), pos.size() * 4);
    lh_kv_pool_truncate(&m, 0);
    snap_ok = snap_ok && lh_kv_pool_import_layer(&m, 1, T + 1, big.data(), big.size()) == LH_BAD_ARGUMENT &&
              lh_kv_pool_import_layer(&m, 0, T + 1, big.data(), big.size()) == LH_OK &&
              lh_kv_pool_import_layer(&m, 1, T, sec.data(), sec.size()) == LH_OK && lh_kv_pool_length(&m, 1) == T;
    lh_kv_pool_free(&u);
    lh_kv_pool_free(&m);
  }
  check(same, "kv layer capacity: attention (decode with a window, prefill, slot lists), logits and gathered rows of any layer == a uniform pool's, bit for bit");
  check(snap_ok, "kv layer capacity: snapshot sections are the uniform pool's; import past a layer's own capacity is refused");
}

}  // namespace

void test_kv_layer_capacity() {
  test_layer_capacity_uniform();
  test_layer_capacity_mixed();
  test_layer_capacity_readers();
}
