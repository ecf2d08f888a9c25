// See row_gather.h.
#include "row_gather.h"

#include <cstring>

lh_status lh_kv_pool_gather_rows(const lh_kv_pool* pool, uint32_t layer, uint32_t count, const int32_t* heads, const int32_t* slots,
                                 const int32_t* dest, void* k_out, void* v_out, size_t out_rows, uint64_t* bytes_out) {
  if (!lh_kv_pool_live(pool) || layer >= pool->layers || k_out == nullptr || v_out == nullptr || k_out == v_out) return LH_BAD_ARGUMENT;
  if (count > 0 && (heads == nullptr || slots == nullptr || dest == nullptr)) return LH_BAD_ARGUMENT;
  const uint32_t len = lh_kv_pool_length(pool, layer);
  for (uint32_t i = 0; i < count; ++i) {
    if (heads[i] < 0 || static_cast<uint32_t>(heads[i]) >= pool->kv_heads || slots[i] < 0 || static_cast<uint32_t>(slots[i]) >= len || dest[i] < 0 ||
        static_cast<size_t>(dest[i]) >= out_rows)
      return LH_BAD_ARGUMENT;
  }
  const size_t d = pool->head_dim;
  const size_t stride = lh_kv_pool_head_stride(pool, layer);
  const uint32_t out_type = lh_row_buffer_type(pool->kv_type);
  const size_t elem = lh_kv_type_bytes(out_type);
  const char* k_rows = static_cast<const char*>(lh_kv_pool_k_rows(pool, layer));
  const char* v_rows = static_cast<const char*>(lh_kv_pool_v_rows(pool, layer));
  for (uint32_t i = 0; i < count; ++i) {
    const size_t from = static_cast<size_t>(heads[i]) * stride + static_cast<size_t>(slots[i]) * d;  // element index in the layer
    const size_t to = static_cast<size_t>(dest[i]) * d;
    if (pool->kv_type == LH_KV_I8) {
      // dequantise through the pool's own reader (scale * q_i, as attention reads it)
      lh_kv_pool_read(pool, LH_KV_KEY, layer, static_cast<uint32_t>(heads[i]), static_cast<uint32_t>(slots[i]), static_cast<float*>(k_out) + to, nullptr);
      lh_kv_pool_read(pool, LH_KV_VALUE, layer, static_cast<uint32_t>(heads[i]), static_cast<uint32_t>(slots[i]), static_cast<float*>(v_out) + to, nullptr);
    } else {
      std::memcpy(static_cast<char*>(k_out) + to * elem, k_rows + from * elem, d * elem);
      std::memcpy(static_cast<char*>(v_out) + to * elem, v_rows + from * elem, d * elem);
    }
  }
  if (bytes_out != nullptr) *bytes_out = static_cast<uint64_t>(count) * 2u * d * elem;
  return LH_OK;
}
