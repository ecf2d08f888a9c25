// Fuzz target: InfiniGen's selection rule (lh_infinigen_select, src/infinigen.h) as the addon's
// selectInfinigen calls it (fp32 partial keys, packed), and as the speculator does (fp16 keys with
// a wider stride), against a plain full-sort statement of the rule in this file.
//
// Input: shapes (layer, heads, KV heads, p, slots, stride, key type), knobs (alpha, cap, dense
// layers, scale; also values the addon refuses or passes through), candidate flags, data.
// Invariants:
//   - the same status as the rule gives (LH_BAD_ARGUMENT for bad knobs/shapes or a non-finite
//     candidate score; dense layers and no candidates never look at scores);
//   - the same n, N, per-head counts and, per KV head, exactly the rule's slots: ascending,
//     distinct, candidates only, ties to the lower slot;
//   - nothing written past `selected`'s rows or the scratch (guard elements).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../src/fp16.h"
#include "../src/infinigen.h"
#include "addon_rules.h"
#include "fuzz_input.h"

namespace {

// select-reference.ts, plainly: float64 scores of every candidate per head, c_h = #(s > max - alpha),
// n = max(1, min(floor(mean c), floor(cap N + 1e-9))), per KV head the top n of max over its group
// of (s - max_h), stable on slot order, returned ascending. Returns false for a non-finite score.
bool plain_rule(uint32_t layer, uint32_t heads, uint32_t kvh, uint32_t p, uint32_t slots, const std::vector<double>& kd, size_t stride,
                const std::vector<float>& q, const std::vector<uint8_t>& cand, bool all_cand, double scale, const lh_infinigen_knobs& kn,
                uint32_t* n_out, uint32_t* N_out, std::vector<int32_t>* counts, std::vector<std::vector<int32_t>>* out) {
  std::vector<int32_t> cands;
  for (uint32_t j = 0; j < slots; ++j)
    if (all_cand || cand[j]) cands.push_back(static_cast<int32_t>(j));
  const uint32_t N = static_cast<uint32_t>(cands.size());
  *N_out = N;
  out->assign(kvh, {});
  if (N == 0 || layer < kn.dense_layers) {
    *n_out = N;
    out->assign(kvh, cands);
    return true;
  }
  const uint32_t group = heads / kvh;
  std::vector<double> sc(static_cast<size_t>(heads) * slots, -INFINITY), m(heads);
  double total = 0;
  counts->assign(heads, 0);
  for (uint32_t h = 0; h < heads; ++h) {
    for (int32_t j : cands) {
      double acc = 0;
      for (uint32_t i = 0; i < p; ++i) acc += static_cast<double>(q[h * p + i]) * kd[(h / group) * stride + j * p + i];
      acc *= scale;
      if (!std::isfinite(acc)) return false;
      sc[h * slots + j] = acc;
    }
    m[h] = -INFINITY;
    for (int32_t j : cands) m[h] = std::max(m[h], sc[h * slots + j]);
    int32_t c = 0;
    for (int32_t j : cands) c += sc[h * slots + j] > m[h] - kn.alpha ? 1 : 0;
    (*counts)[h] = c;
    total += c;
  }
  const uint32_t capn = static_cast<uint32_t>(std::floor(kn.cap * N + 1e-9));
  const uint32_t n = std::max<uint32_t>(1, std::min<uint32_t>(static_cast<uint32_t>(std::floor(total / heads)), capn));
  *n_out = n;
  for (uint32_t g = 0; g < kvh; ++g) {
    std::vector<std::pair<double, int32_t>> v;
    for (int32_t j : cands) {
      double best = -INFINITY;
      for (uint32_t h = g * group; h < (g + 1) * group; ++h) best = std::max(best, sc[h * slots + j] - m[h]);
      v.push_back({best, j});
    }
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (uint32_t r = 0; r < n && r < v.size(); ++r) (*out)[g].push_back(v[r].second);
    std::sort((*out)[g].begin(), (*out)[g].end());
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  static const uint32_t kGroups[] = {1, 2, 3, 4, 8};
  const uint32_t layer = in.range(0, 5);
  const uint32_t kvh = in.range(1, 4), heads = kvh * kGroups[in.range(0, 4)];
  const uint32_t p = in.range(1, 12);
  const uint32_t slots = in.chance(8) ? 0 : in.chance(2) ? in.range(1, 24) : in.range(1, 400);
  const uint32_t k_type = in.range(0, 1);  // the addon passes fp32, the speculator fp16
  const size_t stride = static_cast<size_t>(slots) * p + (in.chance(3) ? in.range(0, 17) : 0);
  const bool all_cand = in.chance(4);  // candidates == null: every slot
  // knobs: mostly valid, sometimes what the addon refuses (then the core must refuse too)
  static const double kAlphas[] = {0.5, 1, 2, 3, 4, 5, 8, 1e-9, 1e30, 0, -1, NAN, INFINITY};
  static const double kCaps[] = {1, 0.5, 0.3, 0.2, 0.1, 0.05, 1e-9, 0, 1.5, NAN};
  lh_infinigen_knobs kn{kAlphas[in.range(0, 12)], kCaps[in.range(0, 9)], in.range(0, 3)};
  static const double kScales[] = {0.35, 1, 0.125, 1e-3, 3, 0, -1, NAN, INFINITY};
  const double scale = kScales[in.range(0, 8)];
  const bool nonfinite = in.chance(4);
  const bool quantised = in.chance(2);  // integer-valued keys: many exact ties

  std::vector<float> q(static_cast<size_t>(heads) * p);
  for (auto& x : q) x = in.value(nonfinite);
  std::vector<float> kf(kvh * stride + 1);
  std::vector<uint16_t> kh(kvh * stride + 1);
  std::vector<double> kd(kvh * stride + 1);  // the keys as the rule reads them
  for (size_t i = 0; i < kvh * stride; ++i) {
    const float x = quantised ? std::round(in.value(nonfinite) * 2) : in.value(nonfinite);
    kf[i] = x;
    kh[i] = lh_fp32_to_fp16(x);
    kd[i] = k_type == LH_KV_F32 ? static_cast<double>(x) : static_cast<double>(lh_fp16_to_fp32(kh[i]));
  }
  std::vector<uint8_t> cand(slots + 1, 1);
  const uint32_t drop = in.range(0, 4);  // share of slots that are not candidates (evicted / reserved)
  for (uint32_t j = 0; j < slots; ++j) cand[j] = drop == 0 ? 1 : (in.range(0, 7) < drop ? 0 : 1);

  lh_select_input x{heads, kvh, p, slots, q.data(), k_type == LH_KV_F32 ? static_cast<const void*>(kf.data()) : kh.data(), stride,
                    k_type, all_cand ? nullptr : cand.data(), scale};
  Guarded<double> scores(static_cast<size_t>(heads) * slots + 1), comb(slots + 1), values(slots + 1);
  lh_select_scratch scr{scores.data(), comb.data(), values.data()};
  Guarded<int32_t> sel(static_cast<size_t>(kvh) * slots + 1);
  Guarded<int32_t> counts(heads);
  uint32_t n = 0xdead, N = 0xdead;
  const lh_status st = lh_infinigen_select(layer, &x, &kn, &scr, sel.data(), slots, &n, &N, counts.data());
  FUZZ_CHECK(scores.guards_intact() && comb.guards_intact() && values.guards_intact() && sel.guards_intact() && counts.guards_intact(),
             "select wrote outside its scratch or outputs (heads %u kvh %u p %u slots %u)", heads, kvh, p, slots);

  const bool args_ok = addon_rules::knobs_ok(kn) && scale > 0 && std::isfinite(scale);
  if (!args_ok) {
    FUZZ_CHECK(st == LH_BAD_ARGUMENT, "knobs alpha %g cap %g scale %g accepted (status %d)", kn.alpha, kn.cap, scale, st);
    return 0;
  }
  uint32_t n_ref = 0, N_ref = 0;
  std::vector<int32_t> c_ref;
  std::vector<std::vector<int32_t>> ref;
  const bool finite = plain_rule(layer, heads, kvh, p, slots, kd, stride, q, cand, all_cand, scale, kn, &n_ref, &N_ref, &c_ref, &ref);
  if (!finite) {
    FUZZ_CHECK(st == LH_BAD_ARGUMENT, "a non-finite candidate score was accepted (status %d)", st);
    return 0;
  }
  FUZZ_CHECK(st == LH_OK, "valid selection refused: status %d (heads %u kvh %u p %u slots %u)", st, heads, kvh, p, slots);
  FUZZ_CHECK(N == N_ref && n == n_ref, "n %u / N %u, rule %u / %u", n, N, n_ref, N_ref);
  const bool dense = N_ref == 0 || layer < kn.dense_layers;
  if (!dense)
    for (uint32_t h = 0; h < heads; ++h) FUZZ_CHECK(counts.data()[h] == c_ref[h], "head %u count %d, rule %d", h, counts.data()[h], c_ref[h]);
  else
    FUZZ_CHECK(counts.untouched(), "counts written for a dense layer or no candidates");
  for (uint32_t g = 0; g < kvh; ++g) {
    const int32_t* row = sel.data() + static_cast<size_t>(g) * slots;
    FUZZ_CHECK(ref[g].size() == std::min(n, N), "rule size");
    for (uint32_t r = 0; r < ref[g].size(); ++r) {
      FUZZ_CHECK(row[r] == ref[g][r], "KV head %u entry %u is slot %d, rule %d (n %u N %u)", g, r, row[r], ref[g][r], n, N);
      FUZZ_CHECK(r == 0 || row[r] > row[r - 1], "not ascending");
      FUZZ_CHECK(all_cand || cand[row[r]], "selected a non-candidate %d", row[r]);
    }
  }
  return 0;
}
