// The argument checks native/src/addon.cc makes before it calls the core, restated for the fuzz
// targets so that they feed the core exactly what JS can make the addon feed it.
//
// Why a copy: these checks live inline in addon.cc's entry points (next to the JS error messages),
// and addon.cc is not edited from this folder. Each rule names the entry point it mirrors; keep them
// in step when those change. What a JS caller cannot produce is not generated: typed arrays always
// have the exact length the addon checked, so the targets allocate exactly that many elements.
#pragma once

#include <cmath>
#include <cstdint>

#include "../src/attention.h"
#include "../src/infinigen.h"
#include "../src/kv_pool.h"

namespace addon_rules {

constexpr uint32_t kMaxI32 = 0x7fffffffu;

// KvPool constructor: budgetBytes in [1, 2^53-1]; layers, kvHeads, headDim in [1, LH_MAX_*];
// partialDim in [0, headDim]; eviction.{sinks,recent} in [0, 2^31-1], ageEvery in [1, 2^31-1].
inline bool pool_options_ok(const lh_kv_pool_config& c) {
  return c.budget_bytes >= 1 && c.budget_bytes <= 9007199254740991ull && c.layers >= 1 && c.layers <= LH_MAX_LAYERS &&
         c.kv_heads >= 1 && c.kv_heads <= LH_MAX_KV_HEADS && c.head_dim >= 1 && c.head_dim <= LH_MAX_HEAD_DIM &&
         (c.kv_type == LH_KV_F16 || c.kv_type == LH_KV_F32) && c.partial_dim <= c.head_dim &&
         (c.evict == 0 ? (c.sinks == 0 && c.recent == 0 && c.age_every == 0)
                       : (c.evict == 1 && c.sinks <= kMaxI32 && c.recent <= kMaxI32 && c.age_every >= 1 && c.age_every <= kMaxI32));
}

// KvPool.append(layer, k, v, position): layer < layers, position in [0, 2^31-1].
inline bool append_ok(const lh_kv_pool& p, uint32_t layer, int64_t position) {
  return layer < p.layers && position >= 0 && position <= kMaxI32;
}

// KvPool.appendBatch(layer, k, v, firstPosition): 1 <= tokens <= 2^31-1 and
// firstPosition in [0, 2^31-1 - (tokens-1)].
inline bool append_batch_ok(const lh_kv_pool& p, uint32_t layer, uint32_t tokens, int64_t first) {
  return layer < p.layers && tokens >= 1 && tokens <= kMaxI32 && first >= 0 && first <= static_cast<int64_t>(kMaxI32) - (tokens - 1);
}

// KvPool.truncate(tokens): tokens in [0, 2^31-1].
inline bool truncate_ok(int64_t tokens) { return tokens >= 0 && tokens <= kMaxI32; }

// KvPool.readK/readV/position/readPartialK(layer, kvHead, slot): the layer holds a token,
// slot < length(layer); readPartialK also needs partialDim > 0.
inline bool read_ok(const lh_kv_pool& p, uint32_t layer, uint32_t kv_head, uint32_t slot) {
  return layer < p.layers && kv_head < p.kv_heads && lh_kv_pool_length(&p, layer) > 0 && slot < lh_kv_pool_length(&p, layer);
}

// KvPool.exportLayer(layer, tokens, out): not evicting, layer < layers, tokens <= length(layer),
// out.byteLength == snapshotLayerBytes(tokens). (A freed pool is refused before any of these.)
inline bool export_ok(const lh_kv_pool& p, uint32_t layer, uint32_t tokens, uint64_t bytes) {
  lh_kv_snapshot_layout sl{};
  return p.evict == 0 && layer < p.layers && tokens <= lh_kv_pool_length(&p, layer) && lh_kv_pool_snapshot_layout(&p, tokens, &sl) == LH_OK &&
         bytes == sl.total;
}

// KvPool.importLayer(layer, tokens, data): not evicting, layer < layers, length(layer) == 0,
// tokens <= the layer's capacity, data.byteLength == snapshotLayerBytes(tokens). The addon also refuses bad
// positions, by the core's own rule (lh_kv_snapshot_bad_position), so that one is not restated.
inline bool import_ok(const lh_kv_pool& p, uint32_t layer, uint32_t tokens, uint64_t bytes) {
  lh_kv_snapshot_layout sl{};
  return p.evict == 0 && layer < p.layers && lh_kv_pool_length(&p, layer) == 0 && tokens <= lh_kv_pool_layer_capacity(&p, layer) &&
         lh_kv_pool_snapshot_layout(&p, tokens, &sl) == LH_OK && bytes == sl.total;
}

// attend/attendReference/attendCausal*(pool, layer, q, heads, out): heads in [1, LH_MAX_HEADS] and a
// multiple of kvHeads; the layer holds >= 1 token; causal: 1 <= queries <= length(layer).
inline bool attend_ok(const lh_kv_pool& p, uint32_t layer, uint32_t heads, uint32_t queries) {
  const uint32_t len = lh_kv_pool_length(&p, layer);
  return layer < p.layers && heads >= 1 && heads <= LH_MAX_HEADS && heads % p.kv_heads == 0 && len >= 1 && queries >= 1 &&
         queries <= len;
}

// attentionScores(pool, layer, q, heads, out, tokens?): heads as above, tokens <= length(layer).
inline bool scores_ok(const lh_kv_pool& p, uint32_t layer, uint32_t heads, uint32_t tokens) {
  return layer < p.layers && heads >= 1 && heads <= LH_MAX_HEADS && heads % p.kv_heads == 0 && tokens <= lh_kv_pool_length(&p, layer);
}

// knobs (selectInfinigen, Speculator): alpha finite and > 0, cap in (0, 1], denseLayers in [0, 2^30].
inline bool knobs_ok(const lh_infinigen_knobs& k) {
  return k.alpha > 0 && std::isfinite(k.alpha) && k.cap > 0 && k.cap <= 1 && k.dense_layers <= (1u << 30);
}

// selectInfinigen: layer <= 2^30, heads and kvHeads in [1, LH_MAX_HEADS], heads % kvHeads == 0,
// p in [1, LH_MAX_HEAD_DIM], slots <= 2^24, scale any number (the core judges it).
inline bool select_ok(uint32_t layer, uint32_t heads, uint32_t kvh, uint32_t p, uint32_t slots) {
  return layer <= (1u << 30) && heads >= 1 && heads <= LH_MAX_HEADS && kvh >= 1 && kvh <= LH_MAX_HEADS && heads % kvh == 0 && p >= 1 &&
         p <= LH_MAX_HEAD_DIM && slots <= (1u << 24);
}

// Speculator constructor: the pool has partial rows, heads in [1, LH_MAX_HEADS] and a multiple of
// kvHeads, knobs as above, scale any number (default 1/sqrt(headDim); the core judges it).
inline bool speculator_ok(const lh_kv_pool& p, uint32_t heads, const lh_infinigen_knobs& k) {
  return p.partial_dim > 0 && heads >= 1 && heads <= LH_MAX_HEADS && heads % p.kv_heads == 0 && knobs_ok(k);
}

}  // namespace addon_rules
