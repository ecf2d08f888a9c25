// Row gather for the offload path (issue 14): copies listed K/V rows of one layer out of the pool
// into a caller's row buffer (what crosses to the device), nothing else.
//
//   dest layout: rows of head_dim elements; row r starts at element r * head_dim of k_out / v_out.
//   fp16 pools: raw fp16 bits are copied (out_type LH_KV_F16, uint16 rows, exact);
//   fp32 pools: fp32 values are copied (out_type LH_KV_F32);
//   int8 pools: rows are dequantised to fp32 (scale * q_i, what attention reads; out_type LH_KV_F32).
// Entry i copies (kv_head heads[i], slot slots[i]) to row dest[i] of both outputs. Validated first:
// heads[i] < kv_heads, slots[i] < length(layer), dest[i] < out_rows; on LH_BAD_ARGUMENT nothing was
// written. *bytes_out (if not null) receives the bytes written to k_out and v_out together.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv_pool.h"
#include "status.h"

// Element type a pool's rows take in a row buffer: LH_KV_F16 for fp16 pools, LH_KV_F32 otherwise.
inline uint32_t lh_row_buffer_type(uint32_t kv_type) { return kv_type == LH_KV_F16 ? LH_KV_F16 : LH_KV_F32; }

lh_status lh_kv_pool_gather_rows(const lh_kv_pool* pool, uint32_t layer, uint32_t count, const int32_t* heads, const int32_t* slots,
                                 const int32_t* dest, void* k_out, void* v_out, size_t out_rows, uint64_t* bytes_out);
