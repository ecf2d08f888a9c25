// What a layer's attention computes beyond q·kᵀ: the one argument block every attention entry point
// takes (decode, causal prefill, slot lists, logits, the speculator, H2O's masses, SnapKV's votes, and
// the scalar references). The model family fills it per layer (ARCHITECTURE.md §3, LayerSpec).
//
// For a query head h at token position t and a stored key row j at position p_j:
//   s_j  = scale · (q_h · k_j)                              the scaled logit
//   s_j  = softcap · tanh(s_j / softcap)                    when softcap > 0 (Gemma 2), before the softmax
//   row j takes part iff t − window < p_j ≤ t               when window > 0 (sliding window, by POSITION
//                                                           as the pool records it per slot, the current
//                                                           token included); rows outside are not read
//   out_h = Σ_j e^{s_j − m} v_j / (Σ_j e^{s_j − m} + e^{sinks[h] − m})   when sinks is set (gpt-oss: a
//                                                           learned logit per query head that joins the
//                                                           normaliser and has no value row), m = max_j s_j
// The defaults (lh_attention_params_default) are today's attention, bit for bit: scale 1/√head_dim
// computed in fp32, no window, no sinks, no soft-cap; the kernels keep those paths free of the new
// features' branches.
//
// Non-finite rules (attention.h) apply to the capped logits: with softcap > 0 an infinite logit is
// capped to ±softcap and no longer makes a head NaN. A head that attends no finite-or-+inf logit (every
// row −inf, or none inside the window) is NaN with or without a sink.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "status.h"

struct lh_attention_params {
  float scale;         // multiplies q·k; finite and > 0. Default 1/√head_dim (lh_attention_default_scale)
  uint32_t window;     // 0: every stored row; else the `window` newest positions up to the query's own
  const float* sinks;  // null: none; else (heads) one logit per query head, finite, read during the call only
  float softcap;       // 0: off; else > 0 and finite: s ← softcap · tanh(s / softcap)
};

// 1/√head_dim as every entry point computed it before this block existed (fp32 sqrt, fp32 divide).
inline float lh_attention_default_scale(uint32_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

inline lh_attention_params lh_attention_params_default(uint32_t head_dim) {
  return lh_attention_params{lh_attention_default_scale(head_dim), 0u, nullptr, 0.0f};
}

// True when the block asks for nothing but a scale (the kernels' fast paths).
inline bool lh_attention_params_plain(const lh_attention_params* p) { return p->window == 0 && p->sinks == nullptr && p->softcap == 0.0f; }

// LH_BAD_ARGUMENT for a null block, a scale that is not finite and > 0, a softcap that is negative or
// not finite, or (sinks set) a sink that is not finite among `heads`. LH_OK otherwise.
inline lh_status lh_attention_params_check(const lh_attention_params* p, uint32_t heads) {
  if (p == nullptr || !std::isfinite(p->scale) || !(p->scale > 0.0f) || !std::isfinite(p->softcap) || p->softcap < 0.0f)
    return LH_BAD_ARGUMENT;
  if (p->sinks != nullptr)
    for (uint32_t h = 0; h < heads; ++h)
      if (!std::isfinite(p->sinks[h])) return LH_BAD_ARGUMENT;
  return LH_OK;
}

// The capped logit (the kernels and the references share it so their capped values agree).
inline float lh_attention_softcap(float s, float cap) { return cap * std::tanh(s / cap); }
