// Scalar reference for decode attention: the plainest correct loops, no tiling, no SIMD.
// Every optimised kernel in attention.cc is checked against this (native_tests, index.test.ts).
#include <cmath>

#include "../attention.h"
#include "../fp16.h"

namespace {

// Element i of a row block of the given type, as the fp32 value it stands for. int8: scales is
// the block's (kv_heads, head_stride / head_dim) row scales, and element i belongs to the row
// i / head_dim of that indexing (the head's stride is a multiple of head_dim, checked).
inline float elem(const void* rows, const float* scales, uint32_t kv_type, size_t head_dim, size_t i) {
  switch (kv_type) {
    case LH_KV_F32: return static_cast<const float*>(rows)[i];
    case LH_KV_I8: return scales[i / head_dim] * static_cast<float>(static_cast<const int8_t*>(rows)[i]);
    default: return lh_fp16_to_fp32(static_cast<const uint16_t*>(rows)[i]);
  }
}

// The reference for one query block; args already checked. Rows outside the window are skipped
// (never read); capped logits are cap · tanh(s / cap); a sink joins the denominator.
void decode_one(const lh_attention_args* a) {
  const uint32_t group = a->heads / a->kv_heads;
  const size_t d = a->head_dim;
  const int64_t newest = a->query_position, oldest = newest - static_cast<int64_t>(a->window);
  for (uint32_t h = 0; h < a->heads; ++h) {
    const uint32_t g = h / group;
    const float* q = a->q + h * d;                       // (head_dim)
    const size_t kv0 = g * a->head_stride;                // first element of (tokens, head_dim)
    float* out = a->out + h * d;                         // (head_dim)
    // row of token t: listed rows when given, else t
    auto row = [a, g](uint32_t t) -> size_t { return a->rows != nullptr ? static_cast<size_t>(a->rows[g * a->rows_stride + t]) : lh_attention_token_row(a, t); };
    // whether token t lies inside the window (always, without one)
    auto visible = [&](uint32_t t) {
      if (a->window == 0) return true;
      const int64_t p = a->positions[g * (a->head_stride / d) + row(t)];
      return p > oldest && p <= newest;
    };
    auto score = [&](uint32_t t) {
      float s = 0.0f;
      for (size_t i = 0; i < d; ++i) s += q[i] * elem(a->k, a->k_scale, a->kv_type, d, kv0 + row(t) * d + i);
      s *= a->scale;
      if (a->softcap > 0.0f) s = lh_attention_softcap(s, a->softcap);
      return s;
    };

    // pass 1: the maximum score
    float m = -INFINITY;
    for (uint32_t t = 0; t < a->tokens; ++t) {
      if (!visible(t)) continue;
      const float s = score(t);
      if (s > m) m = s;
    }
    // pass 2: weights and the weighted sum of values
    for (size_t i = 0; i < d; ++i) out[i] = 0.0f;
    float sum = 0.0f;
    for (uint32_t t = 0; t < a->tokens; ++t) {
      if (!visible(t)) continue;
      const float p = std::exp(score(t) - m);
      sum += p;
      for (size_t i = 0; i < d; ++i) out[i] += p * elem(a->v, a->v_scale, a->kv_type, d, kv0 + row(t) * d + i);
    }
    if (a->sinks != nullptr) sum = m == -INFINITY ? NAN : sum + std::exp(a->sinks[h] - m);
    const float inv = 1.0f / sum;
    for (size_t i = 0; i < d; ++i) out[i] *= inv;
  }
}

}  // namespace

lh_status lh_attention_decode_ref(const lh_attention_args* a) {
  const lh_status st = lh_attention_check(a);
  if (st != LH_OK) return st;
  decode_one(a);
  return LH_OK;
}

// Causal prefill, plainly: query i over rows 0 .. tokens - queries + i.
lh_status lh_attention_prefill_ref(const lh_attention_args* a, uint32_t queries) {
  const lh_status st = lh_attention_prefill_check(a, queries);
  if (st != LH_OK) return st;
  const size_t width = static_cast<size_t>(a->heads) * a->head_dim;
  for (uint32_t i = 0; i < queries; ++i) {
    lh_attention_args one = *a;
    one.q = a->q + i * width;
    one.out = a->out + i * width;
    one.tokens = a->tokens - queries + i + 1;
    if (a->window != 0) one.query_position = a->positions[lh_attention_token_row(a, one.tokens - 1)];  // the query's own row (KV head 0's)
    decode_one(&one);
  }
  return LH_OK;
}
