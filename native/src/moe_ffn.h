// The router of a mixture-of-experts feed-forward (dense_stage.h runs the experts): which experts a
// token runs and with what weights, and the tokens of a run grouped by expert so each routed
// expert's weights stream once per run. Plain functions over caller-owned arrays: no allocation.
//
//   route:  p = softmax(logits) [n]          (max subtracted, exp in float, the sum in double)
//           ids = the k largest p, largest first; equal p: the lower expert id first
//           w_i = p[ids_i], then, with norm_topk, w_i / max(Σ_j w_j, 2⁻¹⁴)
//   This is llama.cpp's build_moe_ffn for LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX with norm_w
//   (Qwen3-MoE: ggml_soft_max, ggml_argsort_top_k, ggml_get_rows, the clamped ggml_sum_rows and
//   ggml_div). Its argsort leaves the order of exactly equal probabilities to std::sort; ours is
//   fixed, so a tie is the one place the two may pick differently (fixtures keep clear margins).
//
//   group:  offsets [n + 1], entries [T·k]: expert e's (token, slot) pairs are
//           entries[offsets[e] .. offsets[e+1]) as t·k + slot, tokens ascending
#pragma once

#include <cstddef>
#include <cstdint>

// Most experts a token may run (Qwen3-MoE 8, gpt-oss 4; DeepSeek-V3 8) and a layer may hold.
constexpr uint32_t LH_MOE_MAX_USED = 64;
constexpr uint32_t LH_MOE_MAX_EXPERTS = 4096;

// One token: logits [n] -> ids [k], weights [k]. 1 <= k <= n. A NaN logit makes every weight NaN
// (the ids are still valid experts).
void lh_moe_route(const float* logits, uint32_t n, uint32_t k, bool norm_topk, uint32_t* ids, float* weights);

// gpt-oss's routing (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT, norm_w false): the k
// largest logits (the router bias already added), largest first, lower id on equal, then a softmax
// over those k logits only (ggml_soft_max of the picked row: exp(x − max) in float, the sum in double,
// times the float 1/sum). The weights sum to 1 by construction. NaN as lh_moe_route.
void lh_moe_route_softmax_weight(const float* logits, uint32_t n, uint32_t k, uint32_t* ids, float* weights);

// ids [T, k] (each < n) -> offsets [n + 1], entries [T·k] as above.
void lh_moe_group(const uint32_t* ids, uint32_t T, uint32_t k, uint32_t n, uint32_t* offsets, uint32_t* entries);
