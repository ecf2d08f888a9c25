// Decode attention over explicit per-KV-head slot lists, and the full attention logits of one
// query: what the comparison policies (streaming, h2o, quest, oracle; ARCHITECTURE.md §6) need.
// Their selection runs in JS right before a layer's attention with the real query; the rows are
// then gathered here and the ordinary decode kernel (attention.h) attends over them.
//
// Shapes (elements):
//   q       : (heads, head_dim)                       fp32, post-RoPE
//   slots   : (offsets[kv_heads])                     int32, KV head g's list is
//             slots[offsets[g] .. offsets[g+1]) — each < length(layer), in the order attended
//   offsets : (kv_heads + 1)                          uint32, offsets[0] = 0, non-decreasing,
//             every list non-empty (the caller always attends the current token)
//   scratch : >= 2 * max list length * lh_kv_pool_row_bytes(pool) bytes (int8: K and V scales, then
//             K then V rows of one head; fp16/fp32: K then V rows)
//   out     : (heads, head_dim)                       fp32
//   scores  : (heads, tokens)                         fp32, scale * q[h] · K[g][t]
// Nothing here allocates; outputs are written only on LH_OK.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv_pool.h"
#include "status.h"

// Attention of q over each KV head's own slot list. A list that holds every slot of the layer in
// ascending order gives exactly lh_attention_decode over the layer (same kernel, same row order).
// LH_BAD_ARGUMENT: bad layer/heads, a slot out of range, an empty list, scratch too small.
lh_status lh_attention_slots(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, const int32_t* slots,
                             const uint32_t* offsets, void* scratch, size_t scratch_bytes, float scale, float* out);

// Scaled logits of q against the first `tokens` slots of the layer (plain loops, fp32 math; int8
// rows: scale_k * sum q_i k_i, as attention computes them).
// LH_BAD_ARGUMENT: bad layer/heads, tokens > length(layer).
lh_status lh_attention_scores(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, uint32_t tokens, float scale,
                              float* scores);
