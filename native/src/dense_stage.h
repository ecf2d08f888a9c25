// One stage of a llama-family model's dense work, in C++ over the GGUF weights read in place from
// the mapped file (quant_dot.h's kernels): what app/engine/forward/graphs.ts's llamaStage builds as
// an onnxruntime graph, computed the same way, with no copy of any weight.
//
//   stage 0            h                       → normed = rmsnorm(h)·attn_norm₀               → pre(0)
//   stage s (1..L−1)   h, attn (layer s−1's)   → post(s−1) → h_next, normed = rmsnorm(h_next)·attn_norm_s → pre(s)
//   stage L            h, attn, rows           → post(L−1) → normed = rmsnorm(h_next)·output_norm → logits on rows
//
//   post(p): o = attn·W_oᵀ (+b)            [T, d]
//            sum = h + o;  x = rmsnorm(sum)·ffn_norm_p
//            mlp = (silu(x·W_gateᵀ) ⊙ x·W_upᵀ)·W_downᵀ      [T, ffn] → [T, d]
//            h_next = sum + mlp
//   pre(s):  q = RoPE(normed·W_qᵀ + b_q)  [T, heads·head_dim]     k = RoPE(normed·W_kᵀ + b_k)  [T, kv_heads·head_dim]
//            v = normed·W_vᵀ + b_v         [T, kv_heads·head_dim]
//            q_spec = RoPE(normed·W_q^{(s+1)ᵀ} + b)  when the stage speculates (InfiniGen, graphs.ts speculateNext)
//            with q_norm / k_norm (Qwen3): each head row of q and k is RMSNormed (·q_norm, ·k_norm [head_dim])
//            before its RoPE, and q_spec by layer s+1's q_norm (q_spec_norm), as layer s+1 computes its q
//   head:    logits[r] = normed[rows[r]]·W_outᵀ          [R, vocab]
//
// Gemma-style layers (Gemma 2/3: every field below optional, null/0 keep the llama stage above):
//   post(p): o = rmsnorm(attn·W_oᵀ)·attn_post_norm_p before the residual add (sandwich norm), the
//            MLP's output likewise ·ffn_post_norm_p; the gate's activation GELU (tanh) instead of SiLU
//   pre(s):  q and k RMS-normalised per head (·q_norm, ·k_norm [head_dim]) before RoPE; q_spec with
//            layer s+1's q norm and its own cos/sin rows (spec_rope_cos/sin) when its RoPE differs
//   head:    logits ← c·tanh(logits/c) with c = final_softcap
//
// Gemma 4 (every field below optional, 0/null keep the stages above):
//   per layer head dims: attn_head_dim is layer stage−1's (post: attn [T, heads·attn_head_dim] and
//            W_o's columns), head_dim / kv_heads / rotary_dim layer stage's, spec_head_dim and
//            spec_rotary_dim layer stage+1's (q_spec [T, heads·spec_head_dim], its own cos/sin rows)
//   pre(s):  kv_shared: no k, v (the layer attends an earlier layer's rows): the stage emits q only;
//            v_from_k: v is k's projection before k's norm (no attn_v); v_norm: v RMS-normed per head
//            (·v_norm [head_dim]; Gemma 4 passes ones: the norm has no weight)
//   post(p): with per-layer embeddings (ple_dim P > 0): after the MLP's residual add,
//              sum += rmsnorm(((gelu_tanh(sum·W_inp_gateᵀ) ⊙ ple) · W_projᵀ))·ple_post_norm
//            (ple [T, P]: layer p's per-layer input); then sum ·= output_scale when > 0
//   stage 0 with P > 0: ple_out [T, L·P] = (rmsnorm_P(h·W_model_projᵀ · 1/√hidden)·ple_proj_norm
//            + ple_tok·√P) · 1/√2, the norm over each layer's P values (h: the scaled embedding)
//
// Mixture of experts (Qwen3-MoE; n_experts > 0 replaces post(p)'s MLP, ffn_gate/up/down absent):
//   post(p): x = rmsnorm(sum)·ffn_norm_p as above, then per token t
//            logits = x·W_routerᵀ [n_experts];  p = softmax(logits);  E_t = the n_experts_used
//            largest p, largest first (ties: the lower expert id);  w_i = p[E_t,i], divided by
//            max(Σ w, 2⁻¹⁴) when norm_topk (llama.cpp's build_moe_ffn norm_w; the clamp is its)
//            mlp_t = Σ_i w_i · ((act(x·W_gate[e]ᵀ) ⊙ x·W_up[e]ᵀ)·W_down[e]ᵀ),  e = E_t,i, summed in i order
//   The expert tensors are the file's 3-D ones viewed as 2-D: gate_exps / up_exps [n_experts·
//   expert_ffn, hidden] (expert e: rows e·expert_ffn ..), down_exps [n_experts·hidden, expert_ffn]
//   (expert e: rows e·hidden ..). An expert is a contiguous run of rows, handed to the kernels as a
//   pointer at its offset: only routed experts' rows are read, nothing is copied. A run groups its
//   tokens by expert, so each routed expert's weights stream once per run (prefill: once per chunk).
//   moe_ffn.h has the routing and the byte count.
//   A shared expert (Qwen3.5-MoE; shexp_ffn > 0): every token also runs one SwiGLU MLP of width
//   shexp_ffn, scaled by σ(x·shexp_gate_inp), and it is added after the routed experts' sum:
//            mlp_t += σ(x_t·w_sg) · ((silu(x_t·W_sgateᵀ) ⊙ x_t·W_supᵀ)·W_sdownᵀ)   (llama.cpp's qwen35moe)
//
// Qwen3.5 (hybrid linear attention, llama.cpp src/models/qwen35.cpp; 0 / null: absent):
//   q_gated: every attn_q of the model (this stage's q and q_spec) has heads·2·head_dim rows, per
//            head its query then its gate: pre(s) outputs q (the query halves, normed and rotated as
//            above) and gate [T, heads·head_dim] (the gate halves as they are); q_spec keeps its query halves
//   attn_gated (stage > 0): post(p) multiplies attn by σ(gate) (io.gate, layer p's) before W_o
//   attn_cols (stage > 0): attn's width when layer p is not an attention layer (a linear layer's
//            value_heads·head_dim; W_o is its ssm_out [hidden, attn_cols]); 0: heads·attn_head_dim
//   pre(s) of a linear-attention layer (lin_value_heads > 0): no q, k, v, RoPE; instead what the
//            recurrence (gated_delta_net.h) reads:
//            lin_qkv = normed·W_qkvᵀ [T, (2·Hk + Hv)·D]     lin_z = normed·W_gateᵀ [T, Hv·D]
//            lin_beta = σ(normed·W_betaᵀ) [T, Hv]          lin_decay = softplus(normed·W_alphaᵀ + dt)·a [T, Hv]
//            (softplus(x) = log(1 + eˣ), x for x > 20, as ggml's); q_spec as above when the next layer
//            is an attention layer the stage speculates for (its cos/sin: spec_rope_cos/sin)
//
// RMSNorm: x / sqrt(mean(x²) + eps), the mean of squares summed in double. RoPE: per head, pairs
// (i, i + r/2) ('neox') or (2i, 2i + 1) ('interleaved') of the first r = rotary_dim dimensions
// rotated by the row's cos/sin [T, r/2] (ops.ts ropeRows: the chunk's absolute positions), the
// other head_dim − r dimensions left as they are (partial rotary). SiLU: g / (1 + e^−g). GELU (tanh):
// 0.5·g·(1 + tanh(√(2/π)·g·(1 + 0.044715·g²))).
//
// Matmuls: the activations are quantized once per input and weight type (quant_dot.h quantize_act)
// and shared by every matrix that reads them (q, k, v, q_spec; gate, up). Rows are split over the
// process's dense workers (worker_pool.h): in decode (T = 1) into runs of rows balanced by weight
// bytes, so the weights stream once; in prefill into 32-row tiles that every token passes over.
// Scratch buffers are the process's (one run at a time, the engine's JS thread), grown to the
// largest T seen, so 23 stages do not each hold a prefill chunk's worth of [T, ffn] floats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe_ffn.h"
#include "quant_dot.h"
#include "status.h"

// A [rows, cols] weight in the file's layout: row r at data + r·row_bytes(cols). Borrowed: the
// mapping must outlive the stage. bias [rows] or null (copied at create).
struct lh_dense_matrix {
  const uint8_t* data;  // null: absent
  size_t bytes;         // must equal rows · row_bytes(cols)
  uint32_t type;        // lh_qdot_type (GGML type id)
  uint32_t rows, cols;
  const float* bias;
};

enum lh_rope_layout : uint32_t { LH_ROPE_NEOX = 0, LH_ROPE_INTERLEAVED = 1 };
// LH_ACT_SWIGLU_OAI (gpt-oss, ggml_swiglu_oai with alpha 1.702, limit 7): with g ← min(g, 7) and
// u ← clamp(u, −7, 7), out = g / (1 + e^(−1.702·g)) · (u + 1)
enum lh_ffn_activation : uint32_t { LH_ACT_SILU = 0, LH_ACT_GELU_TANH = 1, LH_ACT_SWIGLU_OAI = 2 };
// How the router's logits become the k experts and their weights (moe_ffn.h)
enum lh_moe_gating : uint32_t {
  LH_MOE_SOFTMAX = 0,         // softmax over all, top-k of the probabilities (norm_topk: renormalised): Qwen3-MoE
  LH_MOE_SOFTMAX_WEIGHT = 1,  // top-k of the logits, softmax over the k: gpt-oss
};

struct lh_dense_stage_config {
  uint32_t stage, layers;  // stage in 0..layers
  uint32_t hidden, heads, kv_heads, head_dim, ffn, vocab;
  float eps;
  uint32_t rope_layout;  // lh_rope_layout
  // dimensions of each head that RoPE rotates (the first rotary_dim; the rest pass through: partial
  // rotary, Phi-4-mini's 0.75·head_dim); 0 = all head_dim. Even, <= head_dim.
  uint32_t rotary_dim;
  // post(stage − 1), stage > 0
  lh_dense_matrix attn_output;            // [hidden, heads·head_dim]
  lh_dense_matrix ffn_gate, ffn_up;       // [ffn, hidden]
  lh_dense_matrix ffn_down;               // [hidden, ffn]
  const float* ffn_norm;                  // [hidden]
  // the norm of what leaves the residual stream here: attn_norm of layer `stage`, or output_norm at stage L
  const float* norm;                      // [hidden]
  // pre(stage), stage < L
  lh_dense_matrix q;                      // [heads·head_dim, hidden]
  lh_dense_matrix k, v;                   // [kv_heads·head_dim, hidden]
  lh_dense_matrix q_spec;                 // [heads·head_dim, hidden] layer stage+1's W_q, or data null
  // per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3), or null: both or neither; q_spec_norm
  // (layer stage+1's q_norm) is required with them when the stage has q_spec
  const float* q_norm;                    // [head_dim]
  const float* k_norm;                    // [head_dim]
  const float* q_spec_norm;               // [head_dim]
  // stage L
  lh_dense_matrix lm_head;                // [vocab, hidden]
  uint32_t threads;                       // dense workers used by this stage's runs (1..LH_MAX_RANGE_THREADS)
  lh_qdot_impl impl;                      // AUTO: per matrix, the best its type has on this CPU
  // Gemma-style layers (see the top); null / 0: absent
  const float* attn_post_norm;            // [hidden] stage > 0
  const float* ffn_post_norm;             // [hidden] stage > 0
  uint32_t activation;                    // lh_ffn_activation
  float final_softcap;                    // stage L: > 0 caps the logits; 0 none
  // Gemma 4 (see the top); 0 / null: absent
  uint32_t attn_head_dim;                 // stage > 0: layer stage−1's head dim (0: head_dim)
  uint32_t spec_head_dim;                 // q_spec's head dim (0: head_dim)
  uint32_t spec_rotary_dim;               // q_spec's rotated dims (0: as q's)
  uint32_t kv_shared;                     // 1: no k, v (k, v, k_norm, v_norm absent)
  uint32_t v_from_k;                      // 1: v = k's projection (v absent)
  const float* v_norm;                    // [head_dim] per-head RMSNorm of v, or null
  float output_scale;                     // stage > 0: > 0 multiplies the layer's output (residual included)
  uint32_t ple_dim;                       // P of the per-layer embeddings; 0: none
  lh_dense_matrix ple_model_proj;         // stage 0: [layers·P, hidden]
  const float* ple_proj_norm;             // stage 0: [P]
  lh_dense_matrix ple_inp_gate;           // stage > 0: [P, hidden]
  lh_dense_matrix ple_proj;               // stage > 0: [hidden, P]
  const float* ple_post_norm;             // stage > 0: [hidden]
  // Mixture of experts (see the top); n_experts 0: the dense MLP above
  uint32_t n_experts;                     // experts of layer stage−1 (stage > 0), 0: none
  uint32_t n_experts_used;                // k: experts per token, 1..n_experts (<= LH_MOE_MAX_USED)
  uint32_t expert_ffn;                    // hidden width of one expert
  uint32_t norm_topk;                     // 1: the k weights renormalised to sum 1
  lh_dense_matrix router;                 // [n_experts, hidden] (ffn_gate_inp)
  lh_dense_matrix gate_exps, up_exps;     // [n_experts·expert_ffn, hidden]
  lh_dense_matrix down_exps;              // [n_experts·hidden, expert_ffn]
  // Experts as tensors of their own (a Hugging Face folder: mlp.experts.{e}.gate_proj...), or null:
  // the offsets into the 3-D tensors above. When given (all three), expert e's gate and up rows are
  // at gate_expert[e] / up_expert[e] (expert_ffn rows each), its down rows at down_expert[e] (hidden
  // rows); gate_exps / up_exps / down_exps then give only type, rows and cols (data null, bytes 0).
  // The pointer arrays are copied at create; the rows are the caller's (addon.cc checks each
  // expert tensor's byte size as it checks any matrix's).
  const uint8_t* const* gate_expert;      // [n_experts]
  const uint8_t* const* up_expert;        // [n_experts]
  const uint8_t* const* down_expert;      // [n_experts]
  // gpt-oss (0 keeps the above): the router's gating (lh_moe_gating; SOFTMAX_WEIGHT with norm_topk 0).
  // Biases: router.bias [n_experts] is added to the logits before the pick; gate_exps.bias /
  // up_exps.bias [n_experts·expert_ffn] and down_exps.bias [n_experts·hidden] are indexed like the
  // stacked rows (expert e's at e·expert_ffn / e·hidden), added to each expert's projections before
  // the activation and before the weighting (llama.cpp's ggml_add_id). Not with per-expert tensors.
  uint32_t gating;
  // the shared expert of a mixture of experts (see above); shexp_ffn 0: none
  uint32_t shexp_ffn;
  lh_dense_matrix shexp_gate, shexp_up;   // [shexp_ffn, hidden]
  lh_dense_matrix shexp_down;             // [hidden, shexp_ffn]
  const float* shexp_gate_inp;            // [hidden] (ffn_gate_inp_shexp: one logit per token)
  // Qwen3.5 (see the top); 0 / null: absent
  uint32_t q_gated;                       // 1: attn_q and q_spec hold a gate half per head
  uint32_t attn_gated;                    // stage > 0: attn ⊙ σ(gate) before W_o
  uint32_t attn_cols;                     // stage > 0: attn's width (0: heads·attn_head_dim)
  uint32_t lin_key_heads, lin_value_heads, lin_head_dim;  // stage < L: lin_value_heads > 0 makes pre(s) a linear layer's
  lh_dense_matrix lin_qkv;                // [(2·Hk + Hv)·D, hidden]
  lh_dense_matrix lin_z;                  // [Hv·D, hidden]
  lh_dense_matrix lin_beta, lin_alpha;    // [Hv, hidden]
  const float* lin_dt;                    // [Hv] ssm_dt.bias
  const float* lin_a;                     // [Hv] ssm_a
};

struct lh_dense_stage;

// Checks every shape, size and type (a type without kernels: LH_BAD_ARGUMENT, *why says which
// tensor), copies the norm vectors and biases. *why (may be null) gets a static message on failure.
lh_status lh_dense_stage_create(const lh_dense_stage_config* config, lh_dense_stage** out, const char** why);
void lh_dense_stage_free(lh_dense_stage* stage);

// The least of the implementations the stage's matrices run (SCALAR < AVX2 < AVX512 < AMX), for logs and tests.
lh_qdot_impl lh_dense_stage_impl(const lh_dense_stage* stage);

struct lh_dense_stage_io {
  uint32_t tokens;          // T >= 1
  const float* h;           // [T, hidden]
  const float* attn;        // [T, heads·attn_head_dim]  stage > 0
  const float* rope_cos;    // [T, rotary_dim/2]    stage < L
  const float* rope_sin;    // [T, rotary_dim/2]    stage < L
  const uint32_t* rows;     // [n_rows] indices < T  stage L
  uint32_t n_rows;
  const float* spec_rope_cos;  // [T, rotary_dim/2] layer stage+1's rows for q_spec, or null: rope_cos/rope_sin
  const float* spec_rope_sin;
  const float* ple_tok;     // [T, layers·P]  stage 0 with ple_dim
  const float* ple;         // [T, P]         stage > 0 with ple_dim
  const float* gate_in;     // [T, heads·head_dim] stage > 0 with attn_gated: layer stage−1's gate
  // outputs (the caller's; written in full on LH_OK)
  float* q;                 // [T, heads·head_dim]     stage < L
  float* k;                 // [T, kv_heads·head_dim]  stage < L, not kv_shared
  float* v;                 // [T, kv_heads·head_dim]  stage < L, not kv_shared
  float* q_spec;            // [T, heads·spec_head_dim] stage < L with q_spec
  float* h_next;            // [T, hidden]             0 < stage < L
  float* logits;            // [n_rows, vocab]         stage L
  float* ple_out;           // [T, layers·P]           stage 0 with ple_dim
  float* gate;              // [T, heads·head_dim]     stage < L with q_gated, an attention layer
  float* lin_qkv;           // [T, (2·Hk + Hv)·D]      stage < L, a linear layer
  float* lin_z;             // [T, Hv·D]
  float* lin_beta;          // [T, Hv]
  float* lin_decay;         // [T, Hv]
  // mixture of experts (stage > 0 with n_experts), optional outputs
  uint32_t* routed;         // [T, n_experts_used] the experts each token ran, largest weight first, or null
  float* routed_weights;    // [T, n_experts_used] their weights (after norm_topk), or null
  uint64_t expert_bytes;    // out: bytes of expert weights the run read (router + each routed expert's gate, up, down rows once)
};

// LH_BAD_ARGUMENT: a missing input or output, T 0, a row index >= T. LH_OUT_OF_MEMORY: scratch.
// io is not const: the run writes io->expert_bytes (0 for a stage without experts).
lh_status lh_dense_stage_run(lh_dense_stage* stage, lh_dense_stage_io* io);
