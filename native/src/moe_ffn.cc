// The router of a mixture-of-experts feed-forward: see moe_ffn.h.
#include "moe_ffn.h"

#include <cmath>

void lh_moe_route(const float* logits, uint32_t n, uint32_t k, bool norm_topk, uint32_t* ids, float* weights) {
  float max = -INFINITY;
  bool nan = false;
  for (uint32_t e = 0; e < n; ++e) {
    nan |= std::isnan(logits[e]);
    if (logits[e] > max) max = logits[e];
  }
  // softmax as ggml_soft_max: exp(x − max) in float, summed in double, scaled by the float 1/sum.
  // The probabilities are only needed at the k picks, but the picks compare them, and exp is
  // monotone: picking on the logits picks the same experts, equal logits give equal p.
  double sum = 0;
  for (uint32_t e = 0; e < n; ++e) sum += std::exp(logits[e] - max);
  const float inv = static_cast<float>(1.0 / sum);
  // k largest logits, largest first, lower id on equal: a selection pass per slot (k·n, tiny for 8 of 128)
  uint64_t taken[LH_MOE_MAX_EXPERTS / 64] = {};
  for (uint32_t i = 0; i < k; ++i) {
    uint32_t best = n;
    for (uint32_t e = 0; e < n; ++e) {
      if ((taken[e / 64] >> (e % 64)) & 1) continue;
      if (best == n || logits[e] > logits[best]) best = e;
    }
    taken[best / 64] |= uint64_t{1} << (best % 64);
    ids[i] = best;
    weights[i] = nan ? NAN : std::exp(logits[best] - max) * inv;
  }
  if (!norm_topk) return;
  float total = 0;  // ggml_sum_rows: a float sum in slot order
  for (uint32_t i = 0; i < k; ++i) total += weights[i];
  if (!(total >= 6.103515625e-5f)) total = std::isnan(total) ? total : 6.103515625e-5f;
  for (uint32_t i = 0; i < k; ++i) weights[i] /= total;
}

void lh_moe_route_softmax_weight(const float* logits, uint32_t n, uint32_t k, uint32_t* ids, float* weights) {
  bool nan = false;
  for (uint32_t e = 0; e < n; ++e) nan |= std::isnan(logits[e]);
  uint64_t taken[LH_MOE_MAX_EXPERTS / 64] = {};
  for (uint32_t i = 0; i < k; ++i) {
    uint32_t best = n;
    for (uint32_t e = 0; e < n; ++e) {
      if ((taken[e / 64] >> (e % 64)) & 1) continue;
      if (best == n || logits[e] > logits[best]) best = e;
    }
    taken[best / 64] |= uint64_t{1} << (best % 64);
    ids[i] = best;
  }
  // the picks are in descending order: the first is the max of the k
  const float max = logits[ids[0]];
  double sum = 0;
  for (uint32_t i = 0; i < k; ++i) sum += std::exp(logits[ids[i]] - max);
  const float inv = static_cast<float>(1.0 / sum);
  for (uint32_t i = 0; i < k; ++i) weights[i] = nan ? NAN : std::exp(logits[ids[i]] - max) * inv;
}

void lh_moe_group(const uint32_t* ids, uint32_t T, uint32_t k, uint32_t n, uint32_t* offsets, uint32_t* entries) {
  for (uint32_t e = 0; e <= n; ++e) offsets[e] = 0;
  for (size_t j = 0; j < static_cast<size_t>(T) * k; ++j) ++offsets[ids[j] + 1];
  for (uint32_t e = 0; e < n; ++e) offsets[e + 1] += offsets[e];
  // fill in token order: offsets[e] walks forward, then is put back
  for (size_t j = 0; j < static_cast<size_t>(T) * k; ++j) entries[offsets[ids[j]]++] = static_cast<uint32_t>(j);
  for (uint32_t e = n; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
}
