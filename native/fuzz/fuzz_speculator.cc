// Fuzz target: the InfiniGen speculator (src/infinigen.h) over a KV pool with partial rows, with
// and without eviction, driven step by step the way the runner drives it through the addon:
// begin(layer, q_spec) -> append the token -> attend(layer, q), plus misuse in between.
//
// Input: pool shape and budget (eviction knobs), speculator heads/knobs/scale, then steps.
// Invariants:
//   - attend() equals the scalar reference over the same rows (attend_ref): same non-finite
//     outputs, finite ones within attention_check.h's bound; guard elements intact;
//   - every selected slot is live: < length, a candidate when begin() ran (never the victim the
//     append overwrote), never the current token; ascending and distinct; n <= cap share + 1 row;
//   - stats: hits + misses = kv_heads * n, bytes = misses * 2 * row bytes; recall in [0, 1];
//   - misuse is refused with LH_BAD_ARGUMENT: a dense layer, no projection, attend() without
//     begin() or after 0 / 2 appends since it, a freed pool never reached (drain before truncate).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../src/infinigen.h"
#include "../src/kv_pool.h"
#include "addon_rules.h"
#include "attention_check.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  static const uint32_t kDims[] = {1, 2, 4, 7, 8, 9, 16, 17, 32};
  lh_kv_pool_config cfg{};
  cfg.layers = in.range(1, 4);
  cfg.kv_heads = in.range(1, 3);
  cfg.head_dim = kDims[in.range(0, 8)];
  cfg.kv_type = in.range(0, 1);
  cfg.partial_dim = in.range(1, cfg.head_dim);
  cfg.evict = in.range(0, 1);
  if (cfg.evict) {
    cfg.sinks = in.range(0, 4);
    cfg.recent = in.range(0, 8);
    cfg.age_every = in.range(1, 4);
  }
  const uint64_t per_token = static_cast<uint64_t>(cfg.layers) * cfg.kv_heads *
                                 (2ull * cfg.head_dim * lh_kv_type_bytes(cfg.kv_type) + 4 + 2ull * cfg.partial_dim) +
                             (cfg.evict ? cfg.layers * 5ull : 0);
  cfg.budget_bytes = per_token * in.range(2, 80) + static_cast<uint64_t>(cfg.layers) * cfg.kv_heads * cfg.head_dim * cfg.partial_dim * 4 +
                     4096;
  if (!addon_rules::pool_options_ok(cfg)) return 0;
  lh_kv_pool pool;
  if (lh_kv_pool_init(&pool, &cfg) != LH_OK) return 0;  // budget too small for sinks + recent: the pool target covers that

  const uint32_t group = in.range(1, 4), heads = cfg.kv_heads * group;
  static const double kAlphas[] = {0.5, 2, 4, 5, 1e30};
  static const double kCaps[] = {1, 0.5, 0.3, 0.2, 0.05};
  lh_speculator_config sc{heads, {kAlphas[in.range(0, 4)], kCaps[in.range(0, 4)], in.range(0, cfg.layers)}, 0};
  static const double kScales[] = {0, 1, 0.125, -1, NAN};  // 0: the addon's default 1/sqrt(headDim)
  sc.scale = kScales[in.range(0, 4)];
  if (sc.scale == 0) sc.scale = 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
  lh_speculator* sp = nullptr;
  const lh_status cs = lh_speculator_create(&sp, &pool, &sc);
  if (!(sc.scale > 0) || !std::isfinite(sc.scale)) {
    FUZZ_CHECK(cs == LH_BAD_ARGUMENT && sp == nullptr, "speculator with scale %g created", sc.scale);
    lh_kv_pool_free(&pool);
    return 0;
  }
  FUZZ_CHECK(cs == LH_OK && sp != nullptr, "speculator create failed: %d", cs);

  const uint32_t L = cfg.layers, kvh = cfg.kv_heads, d = cfg.head_dim, p = cfg.partial_dim, dense = std::min(sc.knobs.dense_layers, L);
  const size_t w = static_cast<size_t>(kvh) * d, qw = static_cast<size_t>(heads) * d;
  const bool nonfinite = in.chance(4);
  std::vector<bool> proj_set(L, false);
  std::vector<int> begun(L, 0);           // 1 after a successful begin() until attend()
  std::vector<int> ever_begun(L, 0);      // a job was begun since creation / clear_staging
  std::vector<uint64_t> appends(L, 0);    // tokens appended to the layer since its begin()
  std::vector<std::vector<uint8_t>> cand_at_begin(L);
  std::vector<uint32_t> len_at_begin(L, 0);
  int64_t pos = 0;
  auto append = [&](uint32_t l) {
    std::vector<float> k = floats(in, w, nonfinite), v = floats(in, w, nonfinite);
    uint32_t slot = 0;
    const lh_status s = lh_kv_pool_append(&pool, l, k.data(), v.data(), static_cast<int32_t>(pos), &slot);
    FUZZ_CHECK(s == LH_OK || (s == LH_POOL_FULL && (cfg.evict == 0 || cfg.sinks > 0)), "append: %d", s);
    if (s == LH_OK) appends[l] += 1;
    return s == LH_OK;
  };

  for (uint32_t step = 0; step < 64 && !in.exhausted(); ++step) {
    const uint32_t kind = in.range(0, 9);
    const uint32_t layer = in.range(0, L - 1);
    if (kind == 0) {  // setPartialProjection
      std::vector<float> proj = floats(in, w * p, false);
      FUZZ_CHECK(lh_kv_pool_set_projection(&pool, layer, proj.data()) == LH_OK, "set_projection");
      proj_set[layer] = true;
    } else if (kind <= 2) {  // prompt tokens into every layer (prefill), position after position
      for (uint32_t l = 0; l < L; ++l)
        if (begun[l] == 0) append(l);
      pos += 1;
    } else if (kind <= 7) {  // one decode step of `layer`: begin, append, attend (+ reference, selected, stats, recall)
      std::vector<float> qs = floats(in, qw, nonfinite), q = floats(in, qw, nonfinite);
      const lh_status bs = lh_speculator_begin(sp, layer, qs.data());
      if (layer < dense || !proj_set[layer]) {
        FUZZ_CHECK(bs == LH_BAD_ARGUMENT, "begin of a dense layer / no projection accepted: %d", bs);
        continue;
      }
      if (bs == LH_POOL_FULL) continue;  // a full evicting layer whose every slot is protected
      FUZZ_CHECK(bs == LH_OK, "begin(%u): %d", layer, bs);
      begun[layer] = 1;
      ever_begun[layer] = 1;
      appends[layer] = 0;
      len_at_begin[layer] = lh_kv_pool_length(&pool, layer);
      const uint8_t* c = lh_kv_pool_candidates(&pool, layer);
      cand_at_begin[layer].assign(len_at_begin[layer], 1);
      if (c != nullptr) cand_at_begin[layer].assign(c, c + len_at_begin[layer]);
      const uint32_t extra = in.chance(8) ? in.range(0, 2) : 1;  // 1 append is the contract; 0 or 2 must be refused
      for (uint32_t a = 0; a < extra; ++a) append(layer);
      pos += 1;
      Guarded<float> o1(qw), o2(qw);
      const lh_status as = lh_speculator_attend(sp, layer, q.data(), o1.data());
      if (appends[layer] != 1) {
        FUZZ_CHECK(as == LH_BAD_ARGUMENT && o1.untouched(), "attend after %llu appends since begin: %d",
                   static_cast<unsigned long long>(appends[layer]), as);
        begun[layer] = 0;
        continue;
      }
      FUZZ_CHECK(as == LH_OK, "attend(%u): %d", layer, as);
      FUZZ_CHECK(lh_speculator_attend_ref(sp, layer, q.data(), o2.data()) == LH_OK, "attend_ref");
      FUZZ_CHECK(o1.guards_intact() && o2.guards_intact(), "attend wrote outside out");
      begun[layer] = 0;
      const uint32_t cur = static_cast<uint32_t>(lh_kv_pool_last_slot(&pool, layer));
      const lh_layer_stats* st = lh_speculator_stats(sp, layer);
      FUZZ_CHECK(st != nullptr && st->valid, "stats");
      uint32_t n_all = 0;
      std::vector<std::vector<int32_t>> lists(kvh);
      for (uint32_t g = 0; g < kvh; ++g) {
        uint32_t n = 0;
        const int32_t* sel = lh_speculator_selected(sp, layer, g, &n);
        FUZZ_CHECK(sel != nullptr && n == st->n, "selected(%u, %u): n %u, stats %u", layer, g, n, st->n);
        n_all = n;
        for (uint32_t r = 0; r < n; ++r) {
          const int32_t s = sel[r];
          FUZZ_CHECK(s >= 0 && static_cast<uint32_t>(s) < len_at_begin[layer], "selected slot %d outside the %u slots at begin", s,
                     len_at_begin[layer]);
          FUZZ_CHECK(r == 0 || s > sel[r - 1], "selection not ascending");
          FUZZ_CHECK(static_cast<uint32_t>(s) != cur, "selected the current token's slot %d (the evicted victim)", s);
          FUZZ_CHECK(cand_at_begin[layer][s] != 0, "selected slot %d that was not a candidate at begin", s);
          lists[g].push_back(s);
        }
      }
      FUZZ_CHECK(n_all <= std::max<uint32_t>(1, static_cast<uint32_t>(std::floor(sc.knobs.cap * pool.capacity + 1e-9))),
                 "n %u over cap %g of capacity %u", n_all, sc.knobs.cap, pool.capacity);
      FUZZ_CHECK(st->hits + st->misses == kvh * n_all && st->bytes == static_cast<uint64_t>(st->misses) * 2 * d * pool.elem_bytes,
                 "stats: hits %u misses %u bytes %llu for n %u", st->hits, st->misses, static_cast<unsigned long long>(st->bytes), n_all);
      // the bound, over [selected rows, current token] per KV head
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      std::vector<float> kr(d), vr(d);
      for (uint32_t h = 0; h < heads; ++h) {
        const uint32_t g = h / group;
        auto slot_of = [&](uint32_t t) { return t < lists[g].size() ? static_cast<uint32_t>(lists[g][t]) : cur; };
        auto k_at = [&](uint32_t t, uint32_t i) {
          lh_kv_pool_read(&pool, LH_KV_KEY, layer, g, slot_of(t), kr.data(), nullptr);
          return kr[i];
        };
        auto v_at = [&](uint32_t t, uint32_t i) {
          lh_kv_pool_read(&pool, LH_KV_VALUE, layer, g, slot_of(t), vr.data(), nullptr);
          return vr[i];
        };
        const HeadBound b = attention_bound(q.data() + h * d, d, static_cast<uint32_t>(lists[g].size()) + 1, scale, k_at, v_at);
        expect_close(o1.data() + h * d, o2.data() + h * d, d, b, "speculator attend vs reference", h);
      }
      double recall = -1;
      FUZZ_CHECK(lh_speculator_recall(sp, layer, q.data(), &recall) == LH_OK, "recall");
      if (!nonfinite) FUZZ_CHECK(recall >= 0 && recall <= 1.0 + 1e-9, "recall %g outside [0, 1]", recall);
    } else if (kind == 8) {  // attend with no job begun
      Guarded<float> o(qw);
      std::vector<float> q = floats(in, qw, false);
      if (ever_begun[layer]) continue;  // a finished job may be attended again while no token follows it
      FUZZ_CHECK(lh_speculator_attend(sp, layer, q.data(), o.data()) == LH_BAD_ARGUMENT && o.untouched(),
                 "attend(%u) with no job ever begun accepted", layer);
    } else {  // rollback: the contract says drain, truncate, clear staging
      lh_speculator_drain(sp);
      const int64_t keep = std::max<int64_t>(0, pos - in.range(0, 8));
      FUZZ_CHECK(lh_kv_pool_truncate(&pool, static_cast<uint32_t>(keep)) == LH_OK, "truncate");
      lh_speculator_clear_staging(sp);
      pos = keep;
      std::fill(begun.begin(), begun.end(), 0);
      std::fill(ever_begun.begin(), ever_begun.end(), 0);
    }
  }
  lh_speculator_destroy(sp);
  lh_kv_pool_free(&pool);
  return 0;
}
