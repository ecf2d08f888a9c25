// One linear-attention layer's mixer (Gated DeltaNet: Qwen3.5 / Qwen3-Next, LayerSpec kind
// 'linear'), in C++: what app/engine/forward/linear-attention.ts computes token by token, as
// llama.cpp's src/models/delta-net-base.cpp and ggml's ssm_conv / gated_delta_net ops compute it.
// The projections are the dense stage's (dense_stage.h, lin_* outputs); this is the part between
// them, over the sequence's state, which the caller owns (the engine keeps it beside the KV pool,
// with its checkpoints and snapshots).
//
//   in     qkv [T, C] (C = (2·Hk + Hv)·D), z [T, Hv·D], beta [T, Hv] (σ already applied),
//          decay [T, Hv] (log of the per-token decay: softplus(alpha + dt)·a, ≤ 0)
//   conv   x_t[c] = silu(Σ_k in[t + k][c]·w[c][k]),  in = tail (K−1 rows) ++ qkv;  tail ← last K−1 rows of in
//   split  q = x[0, Hk·D), k = x[Hk·D, 2·Hk·D), v = x[2·Hk·D, C); q, k L2-normed per head: x / max(‖x‖, eps)
//   per value head h (key head h mod Hk), g_t = e^{decay_t}:
//          S ← g_t·S;  δ = β_t·(v_t − Sᵀk_t);  S ← S + k_t·δᵀ;  o_t = (Sᵀq_t)/√D
//   out    out_t = rmsnorm(o_t)·norm ⊙ silu(z_t)   per head  [T, Hv·D]
//
// State: [Hv, D, D] M[h][j][i] = S_h[i][j] (ggml's transposed layout: row j of M is column j of S),
// then [(K−1), C] the convolution's tail, oldest row first. Exactly linear-attention.ts's layout,
// so its checkpoints and snapshots hold this state as they held the TypeScript one.
//
// Chunked form (prefill): over a chunk of n tokens with Λ_t = Σ_{s≤t} decay_s (within the chunk)
// and S0 the state where it starts, the recurrence unrolls to
//   Δ_t = β_t·(v_t − e^{Λ_t}·S0ᵀk_t) − Σ_{s<t} β_t·e^{Λ_t−Λ_s}·(k_t·k_s)·Δ_s     (forward substitution)
//   o_t = e^{Λ_t}·S0ᵀq_t + Σ_{s≤t} e^{Λ_t−Λ_s}·(q_t·k_s)·Δ_s
//   S_n = e^{Λ_{n−1}}·S0 + Σ_s e^{Λ_{n−1}−Λ_s}·k_s·Δ_sᵀ
// (Δ_t is the token recurrence's δ_t exactly; every e^{…} has exponent ≤ 0, so nothing overflows.)
// It reads and writes the D×D state once per chunk instead of twice per token, and its inner loops
// are dot products over contiguous rows. Equal to the token-by-token recurrence within float
// rounding (native_tests: chunked == token by token, both against a float64 reference).
//
// Threads: the value heads are split over the process's dense workers (worker_pool.h), each head
// computed whole by one thread, the convolution split over tokens: what a head computes never
// depends on the thread count (1 and 3 threads give the same bits).
#pragma once

#include <cstdint>

#include "status.h"

struct lh_gdn_shape {
  uint32_t key_heads;    // Hk
  uint32_t value_heads;  // Hv, a multiple of Hk
  uint32_t head_dim;     // D (keys and values alike)
  uint32_t conv_kernel;  // K >= 1
  float eps;             // the L2 norm's floor and the output RMSNorm's epsilon
};

// Floats of one sequence's state: Hv·D·D + (K−1)·C.
uint64_t lh_gdn_state_floats(const lh_gdn_shape* shape);

struct lh_gdn_io {
  uint32_t tokens;     // T >= 1
  const float* qkv;    // [T, C]
  const float* z;      // [T, Hv·D]
  const float* beta;   // [T, Hv]
  const float* decay;  // [T, Hv]
  const float* conv;   // [C, K] taps per channel (GGUF ssm_conv1d)
  const float* norm;   // [D] the gated RMSNorm's weight (ssm_norm)
  float* state;        // [lh_gdn_state_floats] advanced by T tokens in place
  float* out;          // [T, Hv·D]
};

// chunk: tokens per chunk of the chunked form; 0: the default (64), 1: token by token (the exact
// recurrence). threads: 1..LH_MAX_RANGE_THREADS (the shared pool is grown to it).
// LH_BAD_ARGUMENT: a null pointer, T 0, Hv not a multiple of Hk, a zero dimension, threads out of
// range. LH_OUT_OF_MEMORY: scratch. On failure the state is unchanged.
lh_status lh_gdn_run(const lh_gdn_shape* shape, const lh_gdn_io* io, uint32_t chunk, uint32_t threads);
