// Scalar reference for decode attention: the plainest correct loops, no tiling, no SIMD.
// Every optimised kernel in attention.cc is checked against this (native_tests, index.test.ts).
#include <cmath>

#include "../attention.h"
#include "../fp16.h"

lh_status lh_attention_decode_ref(const lh_attention_args* a) {
  const lh_status st = lh_attention_check(a);
  if (st != LH_OK) return st;
  const uint32_t group = a->heads / a->kv_heads;
  const size_t d = a->head_dim;
  for (uint32_t h = 0; h < a->heads; ++h) {
    const uint32_t g = h / group;
    const float* q = a->q + h * d;                       // (head_dim)
    const uint16_t* k = a->k + g * a->head_stride;       // (tokens, head_dim)
    const uint16_t* v = a->v + g * a->head_stride;       // (tokens, head_dim)
    float* out = a->out + h * d;                         // (head_dim)

    // pass 1: the maximum score
    float m = -INFINITY;
    for (uint32_t t = 0; t < a->tokens; ++t) {
      float s = 0.0f;
      for (size_t i = 0; i < d; ++i) s += q[i] * lh_fp16_to_fp32(k[t * d + i]);
      s *= a->scale;
      if (s > m) m = s;
    }
    // pass 2: weights and the weighted sum of values
    for (size_t i = 0; i < d; ++i) out[i] = 0.0f;
    float sum = 0.0f;
    for (uint32_t t = 0; t < a->tokens; ++t) {
      float s = 0.0f;
      for (size_t i = 0; i < d; ++i) s += q[i] * lh_fp16_to_fp32(k[t * d + i]);
      s *= a->scale;
      const float p = std::exp(s - m);
      sum += p;
      for (size_t i = 0; i < d; ++i) out[i] += p * lh_fp16_to_fp32(v[t * d + i]);
    }
    const float inv = 1.0f / sum;
    for (size_t i = 0; i < d; ++i) out[i] *= inv;
  }
  return LH_OK;
}
