// Scalar reference for attention over gathered rows: per query head, a plain two-pass softmax over
// the rows of its KV head's selected slots (read one by one from the pool) and the current token.
// lh_speculator_attend (staging + the optimised kernel) is checked against this.
#include <cmath>

#include "../attention.h"
#include "../fp16.h"
#include "../infinigen.h"
#include "../kv_pool.h"

// slots[g]: n ascending slots of KV head g; current: the current token's slot (attended last).
lh_status lh_attention_gathered_ref(const lh_kv_pool* pool, uint32_t layer, const int32_t* const* slots, uint32_t n,
                                    uint32_t current, const float* q, uint32_t heads, float* out, const lh_attention_params* attn) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers || slots == nullptr || q == nullptr || out == nullptr || heads == 0 ||
      heads % pool->kv_heads != 0 || current >= lh_kv_pool_length(pool, layer))
    return LH_BAD_ARGUMENT;
  const uint32_t d = pool->head_dim, group = heads / pool->kv_heads;
  const lh_attention_params plain = lh_attention_params_default(d);
  if (attn == nullptr) attn = &plain;
  if (lh_attention_params_check(attn, heads) != LH_OK) return LH_BAD_ARGUMENT;
  const float scale = attn->scale;
  const int32_t* pos = lh_kv_pool_positions(pool, layer);  // (kv_head, capacity)
  const int64_t newest = pos[current], oldest = newest - static_cast<int64_t>(attn->window);
  float k[LH_MAX_HEAD_DIM], v[LH_MAX_HEAD_DIM];
  for (uint32_t h = 0; h < heads; ++h) {
    const uint32_t g = h / group;
    const float* qh = q + static_cast<size_t>(h) * d;
    float* o = out + static_cast<size_t>(h) * d;
    auto slot_at = [&](uint32_t t) { return t < n ? static_cast<uint32_t>(slots[g][t]) : current; };
    auto score = [&](uint32_t t) {
      lh_kv_pool_read(pool, LH_KV_KEY, layer, g, slot_at(t), k, nullptr);
      float s = 0.0f;
      for (uint32_t i = 0; i < d; ++i) s += qh[i] * k[i];
      s *= scale;
      return attn->softcap > 0.0f ? lh_attention_softcap(s, attn->softcap) : s;
    };
    auto visible = [&](uint32_t t) {
      if (attn->window == 0) return true;
      const int64_t p = pos[static_cast<size_t>(g) * pool->capacity + slot_at(t)];
      return p > oldest && p <= newest;
    };
    float m = -INFINITY;
    for (uint32_t t = 0; t <= n; ++t) {
      if (!visible(t)) continue;
      const float s = score(t);
      if (s > m) m = s;
    }
    for (uint32_t i = 0; i < d; ++i) o[i] = 0.0f;
    float sum = 0.0f;
    for (uint32_t t = 0; t <= n; ++t) {
      if (!visible(t)) continue;
      const float p = std::exp(score(t) - m);
      sum += p;
      lh_kv_pool_read(pool, LH_KV_VALUE, layer, g, slot_at(t), v, nullptr);
      for (uint32_t i = 0; i < d; ++i) o[i] += p * v[i];
    }
    if (attn->sinks != nullptr) sum = m == -INFINITY ? NAN : sum + std::exp(attn->sinks[h] - m);
    for (uint32_t i = 0; i < d; ++i) o[i] /= sum;
  }
  return LH_OK;
}
