// See sparse_attention.h.
#include "sparse_attention.h"

#include <cstring>

#include "attention.h"
#include "fp16.h"
#include "parallel_ranges.h"

namespace {

bool shape_ok(const lh_kv_pool* pool, uint32_t layer, uint32_t heads) {
  return lh_kv_pool_live(pool) && layer < pool->layers && heads >= 1 && heads <= LH_MAX_HEADS && heads % pool->kv_heads == 0;
}

}  // namespace

namespace {
// One call of lh_attention_slots: what every KV head's decode reads.
struct SlotsCall {
  const lh_kv_pool* pool;
  uint32_t layer, group;
  const float* q;
  const int32_t* slots;
  const uint32_t* offsets;
  const lh_attention_params* attn;
  int32_t query_position;  // window: the position of the layer's latest token
  float* out;
};

// KV head g alone: its rows (capacity, head_dim) in place, its list as the row list.
lh_attention_args head_args(const SlotsCall& c, uint32_t g) {
  const lh_kv_pool* pool = c.pool;
  const size_t d = pool->head_dim, eb = pool->elem_bytes, stride = lh_kv_pool_head_stride(pool, c.layer);
  const size_t cap = lh_kv_pool_layer_capacity(pool, c.layer);
  const float* k_scales = lh_kv_pool_k_scales(pool, c.layer);  // int8: (kv_head, capacity(layer)); else null
  const float* v_scales = lh_kv_pool_v_scales(pool, c.layer);
  lh_attention_args a{};
  a.q = c.q + static_cast<size_t>(g) * c.group * d;
  a.k = static_cast<const uint8_t*>(lh_kv_pool_k_rows(pool, c.layer)) + g * stride * eb;
  a.v = static_cast<const uint8_t*>(lh_kv_pool_v_rows(pool, c.layer)) + g * stride * eb;
  a.out = c.out + static_cast<size_t>(g) * c.group * d;
  a.head_stride = stride;
  a.tokens = c.offsets[g + 1] - c.offsets[g];
  a.heads = c.group;
  a.kv_heads = 1;
  a.head_dim = pool->head_dim;
  lh_attention_args_set_params(&a, c.attn);
  if (a.sinks != nullptr) a.sinks += static_cast<size_t>(g) * c.group;
  a.kv_type = pool->kv_type;
  a.rows = c.slots + c.offsets[g];
  a.rows_stride = a.tokens;
  a.k_scale = k_scales != nullptr ? k_scales + static_cast<size_t>(g) * cap : nullptr;  // (capacity(layer)), indexed like the rows
  a.v_scale = v_scales != nullptr ? v_scales + static_cast<size_t>(g) * cap : nullptr;
  if (a.window != 0) {
    a.positions = lh_kv_pool_positions(pool, c.layer) + static_cast<size_t>(g) * cap;  // (capacity(layer)), indexed like the rows
    a.query_position = c.query_position;
  }
  return a;
}

void attend_heads(void* ctx, uint32_t g0, uint32_t g1) {
  const SlotsCall* c = static_cast<const SlotsCall*>(ctx);
  for (uint32_t g = g0; g < g1; ++g) {
    const lh_attention_args a = head_args(*c, g);
    (void)lh_attention_decode(&a);  // checked before any head ran
  }
}
}  // namespace

lh_status lh_attention_slots(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, const int32_t* slots,
                             const uint32_t* offsets, const lh_attention_params* attn, float* out, uint32_t threads) {
  if (!shape_ok(pool, layer, heads) || q == nullptr || slots == nullptr || offsets == nullptr || out == nullptr) return LH_BAD_ARGUMENT;
  if (lh_attention_params_check(attn, heads) != LH_OK) return LH_BAD_ARGUMENT;
  if (threads == 0 || threads > LH_MAX_ATTENTION_THREADS) return LH_BAD_ARGUMENT;
  const uint32_t kvh = pool->kv_heads;
  if (offsets[0] != 0) return LH_BAD_ARGUMENT;
  for (uint32_t g = 0; g < kvh; ++g) {
    if (offsets[g + 1] <= offsets[g]) return LH_BAD_ARGUMENT;
    for (uint32_t i = offsets[g]; i < offsets[g + 1]; ++i)
      if (slots[i] < 0 || static_cast<uint32_t>(slots[i]) >= lh_kv_pool_layer_capacity(pool, layer) || !lh_kv_pool_slot_live(pool, layer, static_cast<uint32_t>(slots[i]))) return LH_BAD_ARGUMENT;
  }
  const int32_t last = lh_kv_pool_last_slot(pool, layer);
  const int32_t query_position = last >= 0 ? lh_kv_pool_positions(pool, layer)[last] : 0;  // KV head 0's: every head holds the same token
  const SlotsCall call{pool, layer, heads / kvh, q, slots, offsets, attn, query_position, out};
  // every head's args are checked (q/out overlap) before any output is written
  for (uint32_t g = 0; g < kvh; ++g) {
    const lh_attention_args a = head_args(call, g);
    const lh_status st = lh_attention_check(&a);
    if (st != LH_OK) return st;
  }
  // as lh_attention_decode_threads: a thread per LH_ATTENTION_MIN_WORK_PER_THREAD work units (a
  // score per (listed row, query head), LH_ATTENTION_ROW_WORK per listed row read), never a split KV head
  uint64_t used = static_cast<uint64_t>(offsets[kvh]) * (call.group + LH_ATTENTION_ROW_WORK) / LH_ATTENTION_MIN_WORK_PER_THREAD;
  if (used > threads) used = threads;
  lh_parallel_ranges(kvh, used < 1 ? 1u : static_cast<uint32_t>(used), attend_heads, const_cast<SlotsCall*>(&call));
  return LH_OK;
}

lh_status lh_attention_slots_gathered(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, const int32_t* slots,
                             const uint32_t* offsets, void* scratch, size_t scratch_bytes, float scale, float* out) {
  if (!shape_ok(pool, layer, heads) || q == nullptr || slots == nullptr || offsets == nullptr || out == nullptr) return LH_BAD_ARGUMENT;
  const uint32_t kvh = pool->kv_heads, d = pool->head_dim, group = heads / kvh;
  const uint32_t len = lh_kv_pool_length(pool, layer);
  const size_t eb = pool->elem_bytes, row = static_cast<size_t>(d) * eb, stride = lh_kv_pool_head_stride(pool, layer) * eb;
  const size_t cap = lh_kv_pool_layer_capacity(pool, layer);
  const bool i8 = pool->kv_type == LH_KV_I8;
  const size_t row_cost = lh_kv_pool_row_bytes(pool);  // row + its int8 scale
  if (offsets[0] != 0) return LH_BAD_ARGUMENT;
  for (uint32_t g = 0; g < kvh; ++g) {
    if (offsets[g + 1] <= offsets[g]) return LH_BAD_ARGUMENT;
    const size_t n = offsets[g + 1] - offsets[g];
    if (2 * n * row_cost > scratch_bytes || scratch == nullptr) return LH_BAD_ARGUMENT;
    for (size_t i = 0; i < n; ++i) {
      const int32_t s = slots[offsets[g] + i];
      if (s < 0 || static_cast<uint32_t>(s) >= len) return LH_BAD_ARGUMENT;
    }
  }
  const auto* k_rows = static_cast<const uint8_t*>(lh_kv_pool_k_rows(pool, layer));
  const auto* v_rows = static_cast<const uint8_t*>(lh_kv_pool_v_rows(pool, layer));
  const float* k_scales = lh_kv_pool_k_scales(pool, layer);  // int8: (kv_head, capacity); else null
  const float* v_scales = lh_kv_pool_v_scales(pool, layer);
  for (uint32_t g = 0; g < kvh; ++g) {
    const uint32_t n = offsets[g + 1] - offsets[g];
    // scratch: [int8: K scales (n) fp32, V scales (n) fp32] K rows (n, head_dim), V rows (n, head_dim);
    // the scales go first so that they stay 4-byte aligned whatever d is
    auto* ksb = static_cast<float*>(scratch);
    float* vsb = ksb + n;
    uint8_t* kb = static_cast<uint8_t*>(scratch) + (i8 ? 2 * n * sizeof(float) : 0);
    uint8_t* vb = kb + n * row;
    for (uint32_t i = 0; i < n; ++i) {
      const size_t s = static_cast<size_t>(slots[offsets[g] + i]);
      const size_t at = g * stride + s * row;
      std::memcpy(kb + i * row, k_rows + at, row);
      std::memcpy(vb + i * row, v_rows + at, row);
      if (i8) {
        ksb[i] = k_scales[g * cap + s];
        vsb[i] = v_scales[g * cap + s];
      }
    }
    lh_attention_args a{};
    a.q = q + static_cast<size_t>(g) * group * d;
    a.k = kb;
    a.v = vb;
    a.out = out + static_cast<size_t>(g) * group * d;
    a.head_stride = static_cast<size_t>(n) * d;
    a.tokens = n;
    a.heads = group;
    a.kv_heads = 1;
    a.head_dim = d;
    a.scale = scale;
    a.kv_type = pool->kv_type;
    a.k_scale = i8 ? ksb : nullptr;  // (n) packed like the rows
    a.v_scale = i8 ? vsb : nullptr;
    const lh_status st = lh_attention_decode(&a);
    if (st != LH_OK) return st;
  }
  return LH_OK;
}

lh_status lh_attention_scores(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, uint32_t tokens,
                              const lh_attention_params* attn, float* scores) {
  if (!shape_ok(pool, layer, heads) || q == nullptr || scores == nullptr || lh_attention_params_check(attn, heads) != LH_OK) return LH_BAD_ARGUMENT;
  const float scale = attn->scale, cap = attn->softcap;
  if (tokens > lh_kv_pool_length(pool, layer)) return LH_BAD_ARGUMENT;
  const uint32_t d = pool->head_dim, group = heads / pool->kv_heads;
  for (uint32_t h = 0; h < heads; ++h) {
    const float* qh = q + static_cast<size_t>(h) * d;
    float* row = scores + static_cast<size_t>(h) * tokens;
    // row t's slot: t itself on a plain layer; on a ring (ring_start + t) % capacity, so a ring cut back
    // after it wrapped (its live slots no longer [0, length)) is scored over its rows, not dead slots
    for (uint32_t t = 0; t < tokens; ++t) row[t] = lh_attention_score(pool, layer, qh, h / group, lh_kv_pool_row_slot(pool, layer, t), scale);
    if (cap > 0.0f)
      for (uint32_t t = 0; t < tokens; ++t) row[t] = lh_attention_softcap(row[t], cap);
  }
  return LH_OK;
}
