// Decode attention over explicit per-KV-head slot lists, and the full attention logits of one
// query: what the comparison policies (streaming, h2o, quest, snapkv, oracle; ARCHITECTURE.md §6)
// need. Their selection runs right before a layer's attention with the real query (policy_select.h);
// the ordinary decode kernel (attention.h) then reads the listed pool rows in place through its row
// list (lh_attention_args.rows), as InfiniGen's attention does: nothing is copied.
//
// Shapes (elements):
//   q       : (heads, head_dim)                       fp32, post-RoPE
//   slots   : (offsets[kv_heads])                     int32, KV head g's list is
//             slots[offsets[g] .. offsets[g+1]) — each < length(layer), in the order attended
//   offsets : (kv_heads + 1)                          uint32, offsets[0] = 0, non-decreasing,
//             every list non-empty (the caller always attends the current token)
//   scratch : (lh_attention_slots_gathered only) >= 2 * max list length * lh_kv_pool_row_bytes(pool)
//             bytes (int8: K and V scales, then K then V rows of one head; fp16/fp32: K then V rows)
//   out     : (heads, head_dim)                       fp32
//   scores  : (heads, tokens)                         fp32, scale * q[h] · K[g][t]
// Nothing here allocates; outputs are written only on LH_OK.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention_params.h"
#include "fp16.h"
#include "kv_pool.h"
#include "status.h"

// Attention of q over each KV head's own slot list, reading the listed rows in place (one decode
// call per KV head with its list as the row list). A list that holds every slot of the layer in
// ascending order gives exactly lh_attention_decode over the layer (same kernel, same row order),
// and any list gives exactly the bits of lh_attention_slots_gathered (same arithmetic in the same
// order; only where the rows are read from differs).
// The KV heads are split into contiguous ranges over up to `threads` threads (1..64; a thread only
// per LH_ATTENTION_MIN_WORK_PER_THREAD work units: a score per (listed row, query head), LH_ATTENTION_ROW_WORK per listed row), each head computed as alone, so the bits do not depend on threads.
// attn (attention_params.h): scale, soft-cap and sinks as decode applies them; a window keeps the
// listed rows whose pool position lies within `window` of the query's, the query being the layer's
// latest appended token (lh_kv_pool_last_slot; the current token, which the caller lists).
// LH_BAD_ARGUMENT: bad layer/heads/threads, a slot out of range, an empty list, a bad attn block
// (lh_attention_params_check; nothing written).
lh_status lh_attention_slots(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, const int32_t* slots,
                             const uint32_t* offsets, const lh_attention_params* attn, float* out, uint32_t threads = 1);
// The same with nothing but a scale (today's call).
inline lh_status lh_attention_slots(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, const int32_t* slots,
                                    const uint32_t* offsets, float scale, float* out, uint32_t threads = 1) {
  const lh_attention_params attn{scale, 0u, nullptr, 0.0f};
  return lh_attention_slots(pool, layer, q, heads, slots, offsets, &attn, out, threads);
}

// The previous way, kept as the tests' oracle: copy each head's listed rows (and int8 scales) into
// scratch, then the decode kernel over the packed block. Same contract; LH_BAD_ARGUMENT also when
// scratch is too small.
lh_status lh_attention_slots_gathered(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, const int32_t* slots,
                                      const uint32_t* offsets, void* scratch, size_t scratch_bytes, float scale, float* out);

// One scaled logit: scale * (qh · K[g][slot]) with fp32 products summed in element order (int8 rows:
// the sum times the row's scale, then scale). lh_attention_scores and the policies' selection
// (policy_select.h) both use it, so their logits are the same bits. No checks: the caller's.
inline float lh_attention_score(const lh_kv_pool* pool, uint32_t layer, const float* qh, uint32_t g, uint32_t slot, float scale) {
  const uint32_t d = pool->head_dim;
  const size_t si = lh_kv_pool_slot_index(pool, layer, g, slot);
  const size_t at = si * d;
  float s = 0.0f;
  if (pool->kv_type == LH_KV_I8) {
    const auto* k8 = static_cast<const int8_t*>(pool->k) + at;
    for (uint32_t i = 0; i < d; ++i) s += qh[i] * static_cast<float>(k8[i]);
    s *= pool->ks[si];  // the row means scale * int8 values
  } else if (pool->kv_type == LH_KV_F16) {
    const auto* k16 = static_cast<const uint16_t*>(pool->k) + at;
    for (uint32_t i = 0; i < d; ++i) s += qh[i] * lh_fp16_to_fp32(k16[i]);
  } else {
    const auto* k32 = static_cast<const float*>(pool->k) + at;
    for (uint32_t i = 0; i < d; ++i) s += qh[i] * k32[i];
  }
  return scale * s;
}

// Scaled logits of q against the first `tokens` ROWS of the layer (kv_pool.h "Rings": a plain layer's
// row r is slot r; a ring's row 0 is its oldest token, row r in lh_kv_pool_row_slot) (plain loops, fp32
// math; int8 rows: scale_k * sum q_i k_i, as attention computes them).
// LH_BAD_ARGUMENT: bad layer/heads, tokens > length(layer).
// attn: its scale, and its soft-cap on every logit; window and sinks do not change logits and are
// not applied (a sink is no slot; which slots a window layer attends is its row policy's choice).
lh_status lh_attention_scores(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, uint32_t tokens,
                              const lh_attention_params* attn, float* scores);
inline lh_status lh_attention_scores(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, uint32_t tokens, float scale,
                                     float* scores) {
  const lh_attention_params attn{scale, 0u, nullptr, 0.0f};
  return lh_attention_scores(pool, layer, q, heads, tokens, &attn, scores);
}
