// Fuzz target: attention over per-KV-head slot lists and the full attention logits
// (src/sparse_attention.h), as the addon's attendSlots / attentionScores call them for the
// comparison policies (streaming, h2o, quest, oracle), over a pool filled with fuzzed rows.
//
// Input: pool shape, tokens, heads, slot lists (any order, repeats, or bad: negative, past the
// length, empty), q data.
// Invariants:
//   - lh_attention_slots (rows read in place) gives the bits of lh_attention_slots_gathered (rows
//     copied into scratch) for every valid list, and refuses the same bad lists (it needs no scratch);
//   - valid lists: the output equals the scalar reference over the same rows gathered by hand
//     (lh_attention_decode_ref on a packed block), within attention_check.h's bound; a list of
//     every slot in order equals lh_attention_decode over the layer bit for bit;
//   - bad lists and offsets (what the addon lets through to the core) return LH_BAD_ARGUMENT and
//     leave `out` untouched; the scratch (sized as the addon sizes it) is never overrun;
//   - scores equal q·K·scale computed in double within fp32 rounding, NaN/inf where it is.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../src/attention.h"
#include "../src/kv_pool.h"
#include "../src/sparse_attention.h"
#include "addon_rules.h"
#include "attention_check.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  static const uint32_t kDims[] = {1, 3, 4, 8, 9, 16, 31, 32, 64};
  lh_kv_pool_config cfg{};
  cfg.layers = in.range(1, 2);
  cfg.kv_heads = in.range(1, 4);
  cfg.head_dim = kDims[in.range(0, 8)];
  cfg.kv_type = in.range(0, 1);
  const uint32_t tokens = in.range(1, 120);
  cfg.budget_bytes = (tokens + in.range(0, 8)) * static_cast<uint64_t>(cfg.layers) * cfg.kv_heads * (2ull * cfg.head_dim * 4 + 4) + 4096;
  lh_kv_pool pool;
  FUZZ_CHECK(lh_kv_pool_init(&pool, &cfg) == LH_OK, "pool init");
  const uint32_t kvh = cfg.kv_heads, d = cfg.head_dim, layer = in.range(0, cfg.layers - 1);
  const bool nonfinite = in.chance(4);
  const size_t w = static_cast<size_t>(kvh) * d;
  for (uint32_t t = 0; t < tokens; ++t) {
    std::vector<float> k = floats(in, w, nonfinite), v = floats(in, w, nonfinite);
    FUZZ_CHECK(lh_kv_pool_append(&pool, layer, k.data(), v.data(), static_cast<int32_t>(t), nullptr) == LH_OK, "append");
  }
  const uint32_t group = in.range(1, 4), heads = kvh * group;
  const size_t qw = static_cast<size_t>(heads) * d;
  const std::vector<float> q = floats(in, qw, nonfinite);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));  // what the addon passes

  // slot lists, as an Int32Array + offsets the way JS builds them
  const bool every = in.chance(4);
  std::vector<int32_t> slots;
  std::vector<uint32_t> off(kvh + 1, 0);
  for (uint32_t g = 0; g < kvh; ++g) {
    const uint32_t n = every ? tokens : in.range(1, tokens + 4);
    for (uint32_t i = 0; i < n; ++i) slots.push_back(every ? static_cast<int32_t>(i) : static_cast<int32_t>(in.range(0, tokens - 1)));
    off[g + 1] = static_cast<uint32_t>(slots.size());
  }
  const uint32_t bad = in.range(0, 7);  // 0..3: a bad list or offsets the addon passes through
  if (bad == 0) slots[in.range(0, static_cast<uint32_t>(slots.size()) - 1)] = in.chance(2) ? -1 - static_cast<int32_t>(in.range(0, 9)) : static_cast<int32_t>(tokens + in.range(0, 9));
  if (bad == 1 && kvh > 1) off[1] = off[0];  // an empty list (the addon refuses it too; the core must as well)
  if (bad == 2) off[0] = 1;
  uint32_t longest = 0;
  for (uint32_t g = 0; g < kvh; ++g) longest = std::max<uint32_t>(longest, off[g + 1] > off[g] ? off[g + 1] - off[g] : 0);
  size_t scratch_bytes = 2 * static_cast<size_t>(longest) * d * pool.elem_bytes;
  if (bad == 3 && scratch_bytes > 0) scratch_bytes -= 1;  // a caller with too little scratch
  Guarded<uint8_t> scratch(scratch_bytes + 1);
  Guarded<float> out(qw);
  const lh_status st = lh_attention_slots_gathered(&pool, layer, q.data(), heads, slots.data(), off.data(), scratch.data(), scratch_bytes,
                                                   scale, out.data());
  FUZZ_CHECK(scratch.guards_intact(), "attention_slots_gathered wrote outside its scratch");
  FUZZ_CHECK(out.guards_intact(), "attention_slots_gathered wrote outside out");
  // in place (what attendSlots calls): needs no scratch, so case 3 is valid for it
  Guarded<float> in_place(qw);
  const lh_status sp = lh_attention_slots(&pool, layer, q.data(), heads, slots.data(), off.data(), scale, in_place.data());
  FUZZ_CHECK(in_place.guards_intact(), "attention_slots wrote outside out");
  bool valid = off[0] == 0 && bad != 3;
  for (uint32_t g = 0; g < kvh && valid; ++g) {
    valid = off[g + 1] > off[g];
    for (uint32_t i = off[g]; valid && i < off[g + 1]; ++i) valid = slots[i] >= 0 && static_cast<uint32_t>(slots[i]) < tokens;
  }
  if (!valid && bad != 3) {
    FUZZ_CHECK(sp == LH_BAD_ARGUMENT && in_place.untouched(), "bad slot lists (case %u) accepted in place or wrote out: status %d", bad, sp);
  } else {
    FUZZ_CHECK(sp == LH_OK, "valid slot lists refused in place: %d", sp);
  }
  if (!valid) {
    FUZZ_CHECK(st == LH_BAD_ARGUMENT && out.untouched(), "bad slot lists (case %u) accepted or wrote out: status %d", bad, st);
  } else {
    FUZZ_CHECK(st == LH_OK, "valid slot lists refused: %d", st);
    for (size_t e = 0; e < qw; ++e)
      FUZZ_CHECK(lh_f32_bits(in_place.data()[e]) == lh_f32_bits(out.data()[e]) || (std::isnan(in_place.data()[e]) && std::isnan(out.data()[e])),
                 "in place differs from gathered at %zu: %a vs %a", e, static_cast<double>(in_place.data()[e]), static_cast<double>(out.data()[e]));
    // reference: gather each head's listed rows by hand, then the scalar reference over the block
    std::vector<float> krow(d), vrow(d);
    for (uint32_t g = 0; g < kvh; ++g) {
      const uint32_t n = off[g + 1] - off[g];
      std::vector<float> kb(static_cast<size_t>(n) * d), vb(static_cast<size_t>(n) * d);
      for (uint32_t i = 0; i < n; ++i) {
        lh_kv_pool_read(&pool, LH_KV_KEY, layer, g, static_cast<uint32_t>(slots[off[g] + i]), kb.data() + i * d, nullptr);
        lh_kv_pool_read(&pool, LH_KV_VALUE, layer, g, static_cast<uint32_t>(slots[off[g] + i]), vb.data() + i * d, nullptr);
      }
      Guarded<float> ref(static_cast<size_t>(group) * d);
      lh_attention_args a{};
      a.q = q.data() + static_cast<size_t>(g) * group * d;
      a.k = kb.data();
      a.v = vb.data();
      a.out = ref.data();
      a.head_stride = static_cast<size_t>(n) * d;
      a.tokens = n;
      a.heads = group;
      a.kv_heads = 1;
      a.head_dim = d;
      a.scale = scale;
      a.kv_type = LH_KV_F32;  // the rows read back, widened: exactly the stored values
      FUZZ_CHECK(lh_attention_decode_ref(&a) == LH_OK, "reference");
      for (uint32_t j = 0; j < group; ++j) {
        const float* qh = a.q + static_cast<size_t>(j) * d;
        const HeadBound b = attention_bound(qh, d, n, scale, [&](uint32_t t, uint32_t i) { return kb[static_cast<size_t>(t) * d + i]; },
                                            [&](uint32_t t, uint32_t i) { return vb[static_cast<size_t>(t) * d + i]; });
        expect_close(out.data() + (static_cast<size_t>(g) * group + j) * d, ref.data() + static_cast<size_t>(j) * d, d, b, "attention_slots",
                     g * group + j);
      }
    }
    if (every) {
      Guarded<float> full(qw);
      lh_attention_args a{};
      a.q = q.data();
      a.k = lh_kv_pool_k_rows(&pool, layer);
      a.v = lh_kv_pool_v_rows(&pool, layer);
      a.out = full.data();
      a.head_stride = lh_kv_pool_head_stride(&pool, layer);
      a.tokens = tokens;
      a.heads = heads;
      a.kv_heads = kvh;
      a.head_dim = d;
      a.scale = scale;
      a.kv_type = pool.kv_type;
      FUZZ_CHECK(lh_attention_decode(&a) == LH_OK, "decode");
      for (size_t e = 0; e < qw; ++e)
        FUZZ_CHECK(lh_f32_bits(full.data()[e]) == lh_f32_bits(out.data()[e]) || (std::isnan(full.data()[e]) && std::isnan(out.data()[e])),
                   "every slot in order differs from decode over the layer at %zu: %a vs %a", e, static_cast<double>(out.data()[e]),
                   static_cast<double>(full.data()[e]));
    }
  }

  // attentionScores(pool, layer, q, heads, out, tokens): tokens <= length
  const uint32_t st_tokens = in.chance(8) ? tokens + 1 : in.range(0, tokens);
  Guarded<float> scores(static_cast<size_t>(heads) * st_tokens + 1);
  const lh_status ss = lh_attention_scores(&pool, layer, q.data(), heads, st_tokens, scale, scores.data());
  FUZZ_CHECK(scores.guards_intact(), "attention_scores wrote outside out");
  if (!addon_rules::scores_ok(pool, layer, heads, st_tokens)) {
    FUZZ_CHECK(ss == LH_BAD_ARGUMENT && scores.untouched(), "scores over %u of %u tokens accepted", st_tokens, tokens);
  } else {
    FUZZ_CHECK(ss == LH_OK, "scores refused: %d", ss);
    std::vector<float> krow(d);
    for (uint32_t h = 0; h < heads; ++h)
      for (uint32_t t = 0; t < st_tokens; ++t) {
        lh_kv_pool_read(&pool, LH_KV_KEY, layer, h / group, t, krow.data(), nullptr);
        double exact = 0, mag = 0;
        for (uint32_t i = 0; i < d; ++i) {
          exact += static_cast<double>(q[h * d + i]) * krow[i];
          mag += std::fabs(static_cast<double>(q[h * d + i]) * krow[i]);
        }
        exact *= scale;
        mag *= scale;
        const float got = scores.data()[static_cast<size_t>(h) * st_tokens + t];
        if (!std::isfinite(exact) || !std::isfinite(mag)) {
          FUZZ_CHECK(!std::isfinite(got), "score (%u, %u) finite %g where q·k is not", h, t, static_cast<double>(got));
          continue;
        }
        FUZZ_CHECK(std::fabs(got - exact) <= (d + 2) * 0x1p-23 * mag + 1e-30, "score (%u, %u) = %.9g, exact %.9g", h, t,
                   static_cast<double>(got), exact);
      }
  }
  lh_kv_pool_free(&pool);
  return 0;
}
