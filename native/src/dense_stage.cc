// lh_dense_stage: see dense_stage.h.
#include "dense_stage.h"

#include <algorithm>
#include <cmath>
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <vector>

#include "cpu_level.h"
#include "fp16.h"
#include "parallel_ranges.h"
#include "worker_pool.h"

namespace {

// ---------------------------------------------------------------------------------------------
// The process's dense workers and scratch (one run at a time: the engine's JS thread)
// ---------------------------------------------------------------------------------------------
// The shared pool (worker_pool.h) while a run holds its lock, which also guards the scratch below.
lh_worker_pool* g_pool = nullptr;

// A 64-byte aligned buffer that only grows.
struct Buf {
  void* p = nullptr;
  size_t cap = 0;
  bool reserve(size_t bytes) {
    if (bytes <= cap) return true;
    void* q = nullptr;
    const size_t want = (bytes + 63) & ~static_cast<size_t>(63);
    if (posix_memalign(&q, 64, want) != 0) return false;
    std::free(p);
    p = q;
    cap = want;
    return true;
  }
  float* f() const { return static_cast<float*>(p); }
  uint8_t* u8() const { return static_cast<uint8_t*>(p); }
};

constexpr uint32_t kMaxGroup = 5;  // q, k, v, q_spec; a linear layer's qkv, z, beta, alpha, q_spec
struct Scratch {
  Buf normed, sum, x, o, gate, up, picked;  // floats, see run()
  Buf act[kMaxGroup];                       // quantized activations, one per distinct quantize_act of a group
  Buf pieces, bounds;
  // Qwen3.5: a gated attn [T, heads·head_dim]; a gated W_q's and q_spec's rows [T, heads·2·head_dim]
  Buf gated_attn, qg, qg_spec;
  // mixture of experts (run_moe): router logits [T, n_experts], ids and weights [T, k], offsets
  // [n_experts + 1], entries [T·k], one expert's token rows [T, hidden], their outputs [T, hidden],
  // every (token, slot)'s expert output [T·k, hidden]
  Buf moe_logits, moe_ids, moe_weights, moe_offsets, moe_entries, moe_x, moe_y, moe_slots;
};
Scratch g_scratch;

// Rows per piece of a matmul; prefill tiles keep 32 rows in cache while a block of tokens passes over them.
constexpr uint32_t kRowTile = 32;
// Rows per piece in decode (one or two tokens): long runs, so that each thread streams its share of
// a matrix in one pass and a kernel's per-call work on the token (the Q4_0 decode lays out its codes)
// is paid per run, not per 32 rows; pieces still balance the threads to within one run.
constexpr uint32_t kDecodeRowRun = 256;
// Tokens per piece in prefill: the block's activation rows (64 × ~6 KB at k = 5632) stay in L2 beside the tile.
constexpr uint32_t kTokenBlock = 64;
// The AMX kernels lay each 16-row tile out as tile operands once per piece and then compute so
// fast that the lay-out is most of a 64-token piece: 256 tokens pay it back (Q6_K 0.0059 -> 0.0041
// ns per element and token on a Xeon with AMX), with the activation rows (~1.8 MB at k = 5632) in L2.
constexpr uint32_t kTokenBlockAmx = 256;

// ---------------------------------------------------------------------------------------------
// One linear layer
// ---------------------------------------------------------------------------------------------
struct Linear {
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  uint32_t rows = 0, cols = 0;
  lh_qdot_kernels kern{};
  float* bias = nullptr;  // [rows], owned, or null
};

uint32_t token_block(const Linear& L) { return L.kern.impl == LH_QDOT_AMX ? kTokenBlockAmx : kTokenBlock; }

struct Piece {
  uint32_t mat, r0, n, t0, nt;
};

struct MatmulJob {
  const Linear* const* mats;
  float* const* ys;             // ys[m]: [T, mats[m]->rows]
  const uint8_t* const* xq;     // xq[m]: the activation rows mats[m]'s kernel reads, [T, act_row_bytes]
  const size_t* xq_row;         // xq_row[m]: act_row_bytes
  const Piece* pieces;
  const uint32_t* bounds;       // part r runs pieces [bounds[r], bounds[r+1])
};

void run_pieces(void* ctx, uint32_t begin, uint32_t end) {
  const MatmulJob* j = static_cast<const MatmulJob*>(ctx);
  for (uint32_t part = begin; part < end; ++part) {
    for (uint32_t i = j->bounds[part]; i < j->bounds[part + 1]; ++i) {
      const Piece& pc = j->pieces[i];
      const Linear& L = *j->mats[pc.mat];
      float* y = j->ys[pc.mat] + static_cast<size_t>(pc.t0) * L.rows + pc.r0;
      L.kern.dot_tile(L.data + static_cast<size_t>(pc.r0) * L.row_bytes, L.row_bytes, pc.n, L.cols, j->xq[pc.mat] + pc.t0 * j->xq_row[pc.mat],
                      pc.nt, y, L.rows);
      if (L.bias != nullptr)
        for (uint32_t t = 0; t < pc.nt; ++t)
          for (uint32_t r = 0; r < pc.n; ++r) y[static_cast<size_t>(t) * L.rows + r] += L.bias[pc.r0 + r];
    }
  }
}

struct QuantJob {
  const lh_qdot_kernels* kern;
  const float* x;
  uint32_t cols;
  uint8_t* out;
  size_t out_row;
};

void run_quant(void* ctx, uint32_t begin, uint32_t end) {
  const QuantJob* j = static_cast<const QuantJob*>(ctx);
  for (uint32_t t = begin; t < end; ++t) j->kern->quantize_act(j->x + static_cast<size_t>(t) * j->cols, j->cols, j->out + t * j->out_row);
}

// ys[m] = x·mats[m]ᵀ (+ bias) for m < n, x [T, cols] shared by all (same cols). The activations are
// quantized once per distinct quantize_act; the pieces are split over `parts` threads by weight bytes.
lh_status matmul_group(const Linear* const* mats, uint32_t n, const float* x, uint32_t T, float* const* ys, uint32_t parts) {
  Scratch& s = g_scratch;
  const uint8_t* xq[kMaxGroup];
  size_t xq_row[kMaxGroup];
  void (*quantizers[kMaxGroup])(const float*, uint64_t, uint8_t*) = {};
  uint32_t distinct = 0;
  for (uint32_t m = 0; m < n; ++m) {
    const lh_qdot_kernels& K = mats[m]->kern;
    uint32_t a = 0;
    while (a < distinct && quantizers[a] != K.quantize_act) ++a;
    xq_row[m] = K.act_row_bytes(mats[m]->cols);
    if (a == distinct) {
      if (!s.act[a].reserve(xq_row[m] * T)) return LH_OUT_OF_MEMORY;
      QuantJob qj{&K, x, mats[m]->cols, s.act[a].u8(), xq_row[m]};
      // one token's quantization is a few microseconds: only a prefill chunk is worth the workers
      lh_worker_pool_run(g_pool, T, T >= 16 ? parts : 1, run_quant, &qj);
      quantizers[a] = K.quantize_act;
      ++distinct;
    }
    xq[m] = s.act[a].u8();
  }
  // pieces: row tiles (decode: runs of kDecodeRowRun rows) × token blocks, row-tile-major so a
  // thread's contiguous share reuses each tile across its token blocks
  const uint32_t row_tile = T <= 2 ? kDecodeRowRun : kRowTile;
  uint32_t count = 0;
  for (uint32_t m = 0; m < n; ++m) count += ((mats[m]->rows + row_tile - 1) / row_tile) * ((T + token_block(*mats[m]) - 1) / token_block(*mats[m]));
  if (!s.pieces.reserve(sizeof(Piece) * count) || !s.bounds.reserve(sizeof(uint32_t) * (parts + 1))) return LH_OUT_OF_MEMORY;
  Piece* pieces = static_cast<Piece*>(s.pieces.p);
  uint32_t* bounds = static_cast<uint32_t*>(s.bounds.p);
  double total = 0;
  uint32_t i = 0;
  for (uint32_t m = 0; m < n; ++m) {
    const Linear& L = *mats[m];
    const uint32_t tb = token_block(L);
    for (uint32_t r0 = 0; r0 < L.rows; r0 += row_tile)
      for (uint32_t t0 = 0; t0 < T; t0 += tb) {
        const uint32_t rn = L.rows - r0 < row_tile ? L.rows - r0 : row_tile, tn = T - t0 < tb ? T - t0 : tb;
        pieces[i++] = Piece{m, r0, rn, t0, tn};
        total += static_cast<double>(rn) * L.row_bytes * tn;
      }
  }
  // part r starts at the first piece whose preceding cost reaches r/parts of the total
  bounds[0] = 0;
  double acc = 0;
  uint32_t part = 1;
  for (uint32_t p = 0; p < count && part < parts; ++p) {
    acc += static_cast<double>(pieces[p].n) * mats[pieces[p].mat]->row_bytes * pieces[p].nt;
    while (part < parts && acc >= total * part / parts) bounds[part++] = p + 1;
  }
  while (part <= parts) bounds[part++] = count;
  MatmulJob job{mats, ys, xq, xq_row, pieces, bounds};
  lh_worker_pool_run(g_pool, parts, parts, run_pieces, &job);
  return LH_OK;
}

// ---------------------------------------------------------------------------------------------
// Elementwise parts
// ---------------------------------------------------------------------------------------------
// out[t] = x[t] / sqrt(mean(x[t]²) + eps) · w     x, out [T, d]
void rms_norm(const float* x, const float* w, uint32_t T, uint32_t d, float eps, float* out) {
  for (uint32_t t = 0; t < T; ++t) {
    const float* xr = x + static_cast<size_t>(t) * d;
    float* o = out + static_cast<size_t>(t) * d;
    double ss = 0;
    for (uint32_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
    for (uint32_t i = 0; i < d; ++i) o[i] = xr[i] * scale * w[i];
  }
}

// x [T, heads·head_dim]: the first `rotary` dimensions of each head rotated in place by cos/sin
// [T, rotary/2]; the rest pass through
void rope(float* x, const float* cos, const float* sin, uint32_t T, uint32_t heads, uint32_t head_dim, uint32_t rotary, uint32_t layout) {
  const uint32_t half = rotary / 2;
  for (uint32_t t = 0; t < T; ++t) {
    const float* c = cos + static_cast<size_t>(t) * half;
    const float* s = sin + static_cast<size_t>(t) * half;
    for (uint32_t h = 0; h < heads; ++h) {
      float* v = x + (static_cast<size_t>(t) * heads + h) * head_dim;
      for (uint32_t i = 0; i < half; ++i) {
        const uint32_t a = layout == LH_ROPE_INTERLEAVED ? 2 * i : i, b = layout == LH_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

// x [T, heads·head_dim]: each head's row RMS-normalised in place, ·w [head_dim] (q/k norm)
void head_rms_norm(float* x, const float* w, uint32_t T, uint32_t heads, uint32_t head_dim, float eps) {
  for (size_t r = 0; r < static_cast<size_t>(T) * heads; ++r) rms_norm(x + r * head_dim, w, 1, head_dim, eps, x + r * head_dim);
}

struct GluJob {
  float* gate;
  const float* up;
  uint32_t width;
  uint32_t activation;  // lh_ffn_activation
};

// GELU (tanh form) of every fp16 value x, rounded to fp16: [65536] indexed by x's bits. llama.cpp's CPU
// backend reads the same kind of table (ggml_table_gelu_f16, GGML_GELU_FP16); computing tanh per
// element instead took a fifth of a Gemma-3-4B-like prefill on one thread (libm's tanhf and expm1f
// over T·ffn gates a layer). Built once, on first use (thread-safe static initialisation).
const uint16_t* gelu_fp16_table() {
  static const std::vector<uint16_t> table = [] {
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoef = 0.044715f;
    std::vector<uint16_t> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = lh_fp16_to_fp32(static_cast<uint16_t>(h));
      t[h] = lh_fp32_to_fp16(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoef * x * x))));
    }
    return t;
  }();
  return table.data();
}

#if defined(__x86_64__) || defined(_M_X64)
// gate[i] = GELU(gate[i]) · up[i] for i < n (n a multiple of 8), the fp16 rounding by F16C (to nearest,
// ties to even: what lh_fp32_to_fp16 does; native_tests holds the two equal), the table read per
// element. lh_fp32_to_fp16's branches cost more than the lookup.
__attribute__((target("avx2,fma,f16c"))) void gelu_glu_f16c(float* gate, const float* up, size_t n, const uint16_t* gelu) {
  alignas(32) uint16_t h[8];
  alignas(32) float act[8];
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
  for (size_t i = 0; i < n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    _mm_store_si128(reinterpret_cast<__m128i*>(h), _mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
    for (int e = 0; e < 8; ++e) h[e] = gelu[h[e]];
    __m256 a = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
    a = _mm256_blendv_ps(a, _mm256_setzero_ps(), _mm256_cmp_ps(g, lo, _CMP_LE_OQ));  // g ≤ −10: 0
    a = _mm256_blendv_ps(a, g, _mm256_cmp_ps(g, hi, _CMP_GE_OQ));                    // g ≥ 10: g
    _mm256_store_ps(act, a);
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_load_ps(act), _mm256_loadu_ps(up + i)));
  }
}
#endif

// gate[t] = act(gate[t]) ⊙ up[t]
void run_glu(void* ctx, uint32_t begin, uint32_t end) {
  const GluJob* j = static_cast<const GluJob*>(ctx);
  if (j->activation == LH_ACT_GELU_TANH) {
    // as llama.cpp's CPU backend computes it (ggml_vec_geglu_f32 with GGML_GELU_FP16): the gate
    // rounded to fp16, its GELU rounded to fp16 (the lookup table), 0 below −10, the identity above 10
    const uint16_t* gelu = gelu_fp16_table();
    size_t i0 = static_cast<size_t>(begin) * j->width;
#if defined(__x86_64__) || defined(_M_X64)
    static const bool f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (f16c && lh_cpu_level_allows(LH_CPU_AVX2)) {  // LONGHAND_CPU_LEVEL=portable: the scalar loop below
      const size_t n = (static_cast<size_t>(end) * j->width - i0) / 8 * 8;
      gelu_glu_f16c(j->gate + i0, j->up + i0, n, gelu);
      i0 += n;
    }
#endif
    for (size_t i = i0; i < static_cast<size_t>(end) * j->width; ++i) {
      const float g = j->gate[i];
      const float act = g <= -10.0f ? 0.0f : g >= 10.0f ? g : lh_fp16_to_fp32(gelu[lh_fp32_to_fp16(g)]);
      j->gate[i] = act * j->up[i];
    }
    return;
  }
  if (j->activation == LH_ACT_SWIGLU_OAI) {
    // as ggml_compute_forward_swiglu_oai_f32: the gate capped above at the limit, the up clamped to
    // ±limit, x·σ(alpha·x)·(y + 1) in float with expf
    constexpr float kAlpha = 1.702f, kLimit = 7.0f;
    for (size_t i = static_cast<size_t>(begin) * j->width; i < static_cast<size_t>(end) * j->width; ++i) {
      const float x = std::min(j->gate[i], kLimit);
      const float y = std::clamp(j->up[i], -kLimit, kLimit);
      j->gate[i] = x / (1.0f + std::exp(kAlpha * (-x))) * (y + 1.0f);
    }
    return;
  }
  for (size_t i = static_cast<size_t>(begin) * j->width; i < static_cast<size_t>(end) * j->width; ++i) {
    const float g = j->gate[i];
    j->gate[i] = g / (1.0f + std::exp(-g)) * j->up[i];
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The stage
// ---------------------------------------------------------------------------------------------
struct lh_dense_stage {
  lh_dense_stage_config cfg;  // pointers into it are the caller's (weights) or null (vectors: ours below)
  Linear attn_output, gate, up, down, q, k, v, q_spec, head;
  Linear ple_model_proj, ple_inp_gate, ple_proj;  // per-layer embeddings (Gemma 4), or data null
  Linear router, gate_exps, up_exps, down_exps;   // mixture of experts (all experts' rows), or data null
  Linear lin_qkv, lin_z, lin_beta, lin_alpha;     // a linear-attention layer's pre (Qwen3.5), or data null
  Linear shexp_gate, shexp_up, shexp_down;        // the shared expert, or data null
  float* shexp_gate_inp = nullptr;                // [hidden] or null
  float* lin_dt = nullptr;                        // [Hv] or null
  float* lin_a = nullptr;                         // [Hv] or null
  bool linear = false;                            // pre(stage) is a linear-attention layer's
  uint32_t attn_cols = 0;                         // resolved attn width (stage > 0)
  const uint8_t** expert_rows = nullptr;           // [3·n_experts] per-expert tensors (gate, up, down), or null: offsets
  float* ffn_norm = nullptr;  // [hidden]
  float* norm = nullptr;      // [hidden]
  float* attn_post_norm = nullptr;  // [hidden] or null
  float* ffn_post_norm = nullptr;   // [hidden] or null
  float* q_norm = nullptr;          // [head_dim] or null
  float* k_norm = nullptr;          // [head_dim] or null
  float* q_spec_norm = nullptr;     // [spec_head_dim] or null
  float* v_norm = nullptr;          // [head_dim] or null
  float* ple_proj_norm = nullptr;   // [P] stage 0, or null
  float* ple_post_norm = nullptr;   // [hidden] stage > 0, or null
  uint32_t attn_head_dim = 0, spec_head_dim = 0, spec_rotary = 0;  // resolved (never 0)
  bool has_spec = false;
  lh_qdot_impl impl_used = LH_QDOT_SCALAR;  // the least of its matrices' implementations
};

namespace {
float* copy_floats(const float* src, size_t n) {
  if (src == nullptr) return nullptr;
  float* p = static_cast<float*>(std::malloc(n * sizeof(float)));
  if (p != nullptr) std::memcpy(p, src, n * sizeof(float));
  return p;
}

void free_stage(lh_dense_stage* s) {
  for (Linear* L : {&s->attn_output, &s->gate, &s->up, &s->down, &s->q, &s->k, &s->v, &s->q_spec, &s->head, &s->ple_model_proj, &s->ple_inp_gate, &s->ple_proj, &s->router,
                    &s->gate_exps, &s->up_exps, &s->down_exps, &s->lin_qkv, &s->lin_z, &s->lin_beta, &s->lin_alpha,
                    &s->shexp_gate, &s->shexp_up, &s->shexp_down})
    std::free(L->bias);
  std::free(s->shexp_gate_inp);
  std::free(s->lin_dt);
  std::free(s->lin_a);
  std::free(s->ffn_norm);
  std::free(s->norm);
  std::free(s->expert_rows);
  for (float* v : {s->attn_post_norm, s->ffn_post_norm, s->q_norm, s->k_norm, s->q_spec_norm, s->v_norm, s->ple_proj_norm, s->ple_post_norm}) std::free(v);
  delete s;
}

// The checks of one matrix: shape [rows, cols], its type has kernels, bytes match. *why: static text.
lh_status make_linear(const lh_dense_matrix& m, uint32_t rows, uint32_t cols, lh_qdot_impl impl, const char* what, Linear* out, const char** why) {
  if (m.data == nullptr || m.rows != rows || m.cols != cols) {
    *why = what;
    return LH_BAD_ARGUMENT;
  }
  if (!lh_qdot_kernels_for(m.type, impl, &out->kern) || cols % out->kern.block_elems != 0 || m.bytes != out->kern.row_bytes(cols) * rows) {
    *why = what;
    return LH_BAD_ARGUMENT;
  }
  out->data = m.data;
  out->rows = rows;
  out->cols = cols;
  out->row_bytes = out->kern.row_bytes(cols);
  if (m.bias != nullptr && (out->bias = copy_floats(m.bias, rows)) == nullptr) return LH_OUT_OF_MEMORY;
  return LH_OK;
}
}  // namespace

lh_status lh_dense_stage_create(const lh_dense_stage_config* c, lh_dense_stage** out, const char** why) {
  const char* dummy = nullptr;
  if (why == nullptr) why = &dummy;
  *why = "config";
  if (c == nullptr || out == nullptr) return LH_BAD_ARGUMENT;
  const uint32_t L = c->layers, s = c->stage;
  if (L == 0 || s > L || c->hidden == 0 || c->heads == 0 || c->kv_heads == 0 || c->heads % c->kv_heads != 0 || c->head_dim == 0 ||
      c->head_dim % 2 != 0 || c->rotary_dim % 2 != 0 || c->rotary_dim > c->head_dim || c->ffn == 0 || c->vocab == 0 || !(c->eps >= 0) || c->rope_layout > LH_ROPE_INTERLEAVED || c->threads == 0 ||
      c->threads > LH_MAX_RANGE_THREADS || c->activation > LH_ACT_SWIGLU_OAI || !std::isfinite(c->final_softcap) || c->final_softcap < 0)
    return LH_BAD_ARGUMENT;
  // Gemma 4's per-layer widths: the resolved ones are never 0
  const uint32_t ahd = c->attn_head_dim == 0 ? c->head_dim : c->attn_head_dim, shd = c->spec_head_dim == 0 ? c->head_dim : c->spec_head_dim;
  const uint32_t srot = c->spec_rotary_dim != 0 ? c->spec_rotary_dim : c->spec_head_dim == 0 ? c->rotary_dim : shd;
  if (shd % 2 != 0 || srot % 2 != 0 || srot > shd || c->kv_shared > 1 || c->v_from_k > 1 || !std::isfinite(c->output_scale) || c->output_scale < 0 ||
      (c->kv_shared != 0 && (c->v_from_k != 0 || c->v_norm != nullptr || c->k_norm != nullptr)))
    return LH_BAD_ARGUMENT;
  // AUTO: each matrix the best implementation its type has on this CPU (quant_dot.cc)
  const lh_qdot_impl impl = c->impl;
  lh_dense_stage* st = new (std::nothrow) lh_dense_stage;
  if (st == nullptr) return LH_OUT_OF_MEMORY;
  st->cfg = *c;
  st->attn_head_dim = ahd;
  st->spec_head_dim = shd;
  st->spec_rotary = srot;
  const uint32_t d = c->hidden, qw = c->heads * c->head_dim, kvw = c->kv_heads * c->head_dim, P = c->ple_dim;
  lh_status r = LH_OK;
  // Qwen3.5: a linear layer's pre, a gated W_q, a gated or linear layer's attn
  st->linear = s < L && c->lin_value_heads > 0;
  st->attn_cols = c->attn_cols != 0 ? c->attn_cols : c->heads * ahd;
  const uint32_t q_rows = c->q_gated != 0 ? 2 * qw : qw;
  const uint32_t lin_hk = c->lin_key_heads, lin_hv = c->lin_value_heads, lin_d = c->lin_head_dim;
  if (c->q_gated > 1 || c->attn_gated > 1 || (st->linear && (lin_hk == 0 || lin_d == 0 || lin_hv % lin_hk != 0 || c->lin_dt == nullptr || c->lin_a == nullptr))) {
    *why = "q_gated / attn_gated must be 0 or 1; a linear layer needs key heads dividing its value heads, a head size, ssm_dt and ssm_a";
    r = LH_BAD_ARGUMENT;
  }
  if (r == LH_OK && s > 0) r = make_linear(c->attn_output, d, st->attn_cols, impl, "attn_output", &st->attn_output, why);
  const uint32_t E = c->n_experts, K = c->n_experts_used, F = c->expert_ffn;
  const bool moe = s > 0 && E > 0;
  if (r == LH_OK && s > 0 && E > 0 && (E > LH_MOE_MAX_EXPERTS || K == 0 || K > E || K > LH_MOE_MAX_USED || F == 0 || c->norm_topk > 1 || c->gating > LH_MOE_SOFTMAX_WEIGHT ||
                                            (c->gating == LH_MOE_SOFTMAX_WEIGHT && c->norm_topk != 0))) {
    *why = "mixture of experts: n_experts_used must be 1..n_experts (at most 64 of 4096), expert_ffn > 0, gating softmax or softmax_weight (without norm_topk)";
    r = LH_BAD_ARGUMENT;
  }
  if (r == LH_OK && s > 0 && !moe) r = make_linear(c->ffn_gate, c->ffn, d, impl, "ffn_gate", &st->gate, why);
  if (r == LH_OK && s > 0 && !moe) r = make_linear(c->ffn_up, c->ffn, d, impl, "ffn_up", &st->up, why);
  if (r == LH_OK && s > 0 && !moe) r = make_linear(c->ffn_down, d, c->ffn, impl, "ffn_down", &st->down, why);
  if (r == LH_OK && moe) r = make_linear(c->router, E, d, impl, "ffn_gate_inp (the router)", &st->router, why);
  const bool per_expert = moe && (c->gate_expert != nullptr || c->up_expert != nullptr || c->down_expert != nullptr);
  if (r == LH_OK && per_expert) {
    // the matrices give type and shape only; each expert's rows are a tensor of its own
    st->expert_rows = static_cast<const uint8_t**>(std::malloc(sizeof(uint8_t*) * 3 * E));
    if (st->expert_rows == nullptr) r = LH_OUT_OF_MEMORY;
    const lh_dense_matrix* m[3] = {&c->gate_exps, &c->up_exps, &c->down_exps};
    const uint8_t* const* p[3] = {c->gate_expert, c->up_expert, c->down_expert};
    const char* names[3] = {"ffn_gate_exps (per expert)", "ffn_up_exps (per expert)", "ffn_down_exps (per expert)"};
    for (int i = 0; i < 3 && r == LH_OK; ++i) {
      lh_dense_matrix whole = *m[i];
      Linear* out = i == 0 ? &st->gate_exps : i == 1 ? &st->up_exps : &st->down_exps;
      const uint32_t rows = i == 2 ? E * d : E * F, cols = i == 2 ? F : d;
      lh_qdot_kernels k{};
      if (p[i] == nullptr || whole.data != nullptr || whole.rows != rows || whole.cols != cols || !lh_qdot_kernels_for(whole.type, impl, &k) || cols % k.block_elems != 0) {
        *why = names[i];
        r = LH_BAD_ARGUMENT;
        break;
      }
      for (uint32_t e = 0; e < E; ++e) {
        if (p[i][e] == nullptr) {
          *why = names[i];
          r = LH_BAD_ARGUMENT;
          break;
        }
        st->expert_rows[i * E + e] = p[i][e];
      }
      out->kern = k;
      out->rows = rows;
      out->cols = cols;
      out->row_bytes = k.row_bytes(cols);
    }
  }
  if (r == LH_OK && moe && !per_expert) r = make_linear(c->gate_exps, E * F, d, impl, "ffn_gate_exps", &st->gate_exps, why);
  if (r == LH_OK && moe && !per_expert) r = make_linear(c->up_exps, E * F, d, impl, "ffn_up_exps", &st->up_exps, why);
  if (r == LH_OK && moe && !per_expert) r = make_linear(c->down_exps, E * d, F, impl, "ffn_down_exps", &st->down_exps, why);
  if (r == LH_OK && moe && c->shexp_ffn > 0) {
    r = make_linear(c->shexp_gate, c->shexp_ffn, d, impl, "ffn_gate_shexp", &st->shexp_gate, why);
    if (r == LH_OK) r = make_linear(c->shexp_up, c->shexp_ffn, d, impl, "ffn_up_shexp", &st->shexp_up, why);
    if (r == LH_OK) r = make_linear(c->shexp_down, d, c->shexp_ffn, impl, "ffn_down_shexp", &st->shexp_down, why);
    if (r == LH_OK && c->shexp_gate_inp == nullptr) {
      *why = "a shared expert needs its gate (ffn_gate_inp_shexp)";
      r = LH_BAD_ARGUMENT;
    }
    if (r == LH_OK && (st->shexp_gate_inp = copy_floats(c->shexp_gate_inp, d)) == nullptr) r = LH_OUT_OF_MEMORY;
  } else if (r == LH_OK && c->shexp_ffn > 0) {
    *why = "a shared expert without routed experts";
    r = LH_BAD_ARGUMENT;
  }
  if (r == LH_OK && per_expert && (c->gate_exps.bias || c->up_exps.bias || c->down_exps.bias)) {
    *why = "mixture of experts: expert biases with per-expert tensors are not supported";
    r = LH_BAD_ARGUMENT;
  }
  const bool attends = s < L && !st->linear;
  if (r == LH_OK && attends) r = make_linear(c->q, q_rows, d, impl, "attn_q", &st->q, why);
  if (r == LH_OK && attends && c->kv_shared == 0) r = make_linear(c->k, kvw, d, impl, "attn_k", &st->k, why);
  if (r == LH_OK && attends && c->kv_shared == 0 && c->v_from_k == 0) r = make_linear(c->v, kvw, d, impl, "attn_v", &st->v, why);
  if (r == LH_OK && st->linear) r = make_linear(c->lin_qkv, (2 * lin_hk + lin_hv) * lin_d, d, impl, "attn_qkv (linear attention)", &st->lin_qkv, why);
  if (r == LH_OK && st->linear) r = make_linear(c->lin_z, lin_hv * lin_d, d, impl, "attn_gate (linear attention)", &st->lin_z, why);
  if (r == LH_OK && st->linear) r = make_linear(c->lin_beta, lin_hv, d, impl, "ssm_beta", &st->lin_beta, why);
  if (r == LH_OK && st->linear) r = make_linear(c->lin_alpha, lin_hv, d, impl, "ssm_alpha", &st->lin_alpha, why);
  if (r == LH_OK && st->linear && ((st->lin_dt = copy_floats(c->lin_dt, lin_hv)) == nullptr || (st->lin_a = copy_floats(c->lin_a, lin_hv)) == nullptr)) r = LH_OUT_OF_MEMORY;
  if (r == LH_OK && P > 0 && s == 0) r = make_linear(c->ple_model_proj, L * P, d, impl, "per_layer_model_proj", &st->ple_model_proj, why);
  if (r == LH_OK && P > 0 && s > 0) r = make_linear(c->ple_inp_gate, P, d, impl, "inp_gate (per-layer embeddings)", &st->ple_inp_gate, why);
  if (r == LH_OK && P > 0 && s > 0) r = make_linear(c->ple_proj, d, P, impl, "proj (per-layer embeddings)", &st->ple_proj, why);
  if (r == LH_OK && P > 0 && ((s == 0 && c->ple_proj_norm == nullptr) || (s > 0 && c->ple_post_norm == nullptr))) {
    *why = "per-layer embeddings need per_layer_proj_norm (stage 0) and post_norm (stage > 0)";
    r = LH_BAD_ARGUMENT;
  }
  if (r == LH_OK && P > 0 && s == 0 && (st->ple_proj_norm = copy_floats(c->ple_proj_norm, P)) == nullptr) r = LH_OUT_OF_MEMORY;
  if (r == LH_OK && P > 0 && s > 0 && (st->ple_post_norm = copy_floats(c->ple_post_norm, d)) == nullptr) r = LH_OUT_OF_MEMORY;
  if (r == LH_OK && s < L && c->v_norm != nullptr && (st->v_norm = copy_floats(c->v_norm, c->head_dim)) == nullptr) r = LH_OUT_OF_MEMORY;
  if (r == LH_OK && s < L && c->q_spec.data != nullptr) {
    r = make_linear(c->q_spec, c->heads * shd * (c->q_gated != 0 ? 2 : 1), d, impl, "q_spec (the next layer's attn_q)", &st->q_spec, why);
    st->has_spec = r == LH_OK;
  }
  if (r == LH_OK && s == L) r = make_linear(c->lm_head, c->vocab, d, impl, "lm_head", &st->head, why);
  if (r == LH_OK && s > 0 && c->ffn_norm == nullptr) {
    *why = "ffn_norm";
    r = LH_BAD_ARGUMENT;
  }
  if (r == LH_OK && c->norm == nullptr) {
    *why = "norm";
    r = LH_BAD_ARGUMENT;
  }
  if (r == LH_OK && s > 0 && (st->ffn_norm = copy_floats(c->ffn_norm, d)) == nullptr) r = LH_OUT_OF_MEMORY;
  if (r == LH_OK && (st->norm = copy_floats(c->norm, d)) == nullptr) r = LH_OUT_OF_MEMORY;
  // the optional Gemma-style post norms: copied where given (copy_floats(null) is null)
  const struct {
    const float* src;
    size_t n;
    bool allowed;
    float** dst;
  } optional[] = {{c->attn_post_norm, d, s > 0, &st->attn_post_norm}, {c->ffn_post_norm, d, s > 0, &st->ffn_post_norm}};
  for (const auto& o : optional) {
    if (r != LH_OK || o.src == nullptr) continue;
    if (!o.allowed) {
      *why = "a post norm at stage 0 (post norms need stage > 0)";
      r = LH_BAD_ARGUMENT;
    } else if ((*o.dst = copy_floats(o.src, o.n)) == nullptr) {
      r = LH_OUT_OF_MEMORY;
    }
  }
  // per-head q/k norm (Qwen3, Gemma 3): both or neither; a speculating stage norms q_spec as its layer norms q
  if (r == LH_OK && st->linear) {
    // no q or k of its own: only q_spec's norm, required with q_spec when the model norms q (Qwen3.5 does)
    if (c->q_norm != nullptr || c->k_norm != nullptr || c->v_norm != nullptr) {
      *why = "a linear-attention layer's stage has no q or k to norm";
      r = LH_BAD_ARGUMENT;
    } else if (st->has_spec && c->q_spec_norm != nullptr && (st->q_spec_norm = copy_floats(c->q_spec_norm, shd)) == nullptr) {
      r = LH_OUT_OF_MEMORY;
    }
  } else if (r == LH_OK && s < L && c->q_norm != nullptr) {
    if ((c->k_norm == nullptr && c->kv_shared == 0) || (st->has_spec && c->q_spec_norm == nullptr)) {
      *why = "q_norm needs k_norm (and q_spec_norm when the stage has q_spec)";
      r = LH_BAD_ARGUMENT;
    } else if ((st->q_norm = copy_floats(c->q_norm, c->head_dim)) == nullptr || (c->k_norm != nullptr && (st->k_norm = copy_floats(c->k_norm, c->head_dim)) == nullptr) ||
               (st->has_spec && (st->q_spec_norm = copy_floats(c->q_spec_norm, shd)) == nullptr)) {
      r = LH_OUT_OF_MEMORY;
    }
  } else if (r == LH_OK && s < L && (c->k_norm != nullptr || c->q_spec_norm != nullptr)) {
    *why = "k_norm or q_spec_norm without q_norm";
    r = LH_BAD_ARGUMENT;
  }
  if (r == LH_OK) {
    r = lh_shared_pool_reserve(c->threads);
  }
  if (r != LH_OK) {
    if (r == LH_OUT_OF_MEMORY) *why = "out of memory";
    free_stage(st);
    return r;
  }
  st->cfg.ffn_norm = st->ffn_norm;
  st->cfg.norm = st->norm;
  st->cfg.q_norm = st->q_norm;
  st->cfg.k_norm = st->k_norm;
  st->cfg.q_spec_norm = st->q_spec_norm;
  st->cfg.v_norm = st->v_norm;
  st->cfg.ple_proj_norm = st->ple_proj_norm;
  st->cfg.ple_post_norm = st->ple_post_norm;
  st->impl_used = LH_QDOT_AMX;
  for (const Linear* m : {&st->attn_output, &st->gate, &st->up, &st->down, &st->q, &st->k, &st->v, &st->q_spec, &st->head, &st->ple_model_proj, &st->ple_inp_gate, &st->ple_proj,
                          &st->router, &st->gate_exps, &st->up_exps, &st->down_exps, &st->lin_qkv, &st->lin_z, &st->lin_beta, &st->lin_alpha,
                          &st->shexp_gate, &st->shexp_up, &st->shexp_down})
    if (m->rows != 0 && m->kern.impl < st->impl_used) st->impl_used = m->kern.impl;  // rows: a per-expert matrix has no data
  *why = nullptr;
  *out = st;
  return LH_OK;
}

void lh_dense_stage_free(lh_dense_stage* st) {
  if (st != nullptr) free_stage(st);
}

lh_qdot_impl lh_dense_stage_impl(const lh_dense_stage* st) { return st == nullptr ? LH_QDOT_AUTO : st->impl_used; }

namespace {
// Stage 0's per-layer inputs (Gemma 4, see dense_stage.h): ple_out [T, L·P] from the scaled
// embedding h and the per-layer token rows ple_tok, in place in ple_out
lh_status per_layer_inputs(lh_dense_stage* st, const lh_dense_stage_io* io) {
  const lh_dense_stage_config& c = st->cfg;
  const uint32_t T = io->tokens, P = c.ple_dim, L = c.layers;
  const Linear* mp[] = {&st->ple_model_proj};
  float* out = io->ple_out;
  const lh_status r = matmul_group(mp, 1, io->h, T, &out, c.threads);
  if (r != LH_OK) return r;
  const size_t n = static_cast<size_t>(T) * L * P;
  // the graph's fp32 constants (gemma4-graph.ts perLayerInputs): 1/√hidden, √P, 1/√2
  const float proj_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.hidden)));
  const float tok_scale = static_cast<float>(std::sqrt(static_cast<double>(P)));
  const float input_scale = static_cast<float>(1.0 / std::sqrt(2.0));
  for (size_t i = 0; i < n; ++i) out[i] *= proj_scale;
  rms_norm(out, st->ple_proj_norm, T * L, P, c.eps, out);  // each layer's P values
  for (size_t i = 0; i < n; ++i) out[i] = (out[i] + io->ple_tok[i] * tok_scale) * input_scale;
  return LH_OK;
}

// The mixture-of-experts MLP of layer stage − 1 (dense_stage.h): x [T, hidden] -> out [T, hidden].
// Routes every token, groups the (token, slot) pairs by expert, and per routed expert gathers its
// tokens' rows, runs gate/up, the GLU and down on that expert's rows of the 3-D tensors (a Linear
// pointing into them: the kernels read the mapped file in place), and keeps each pair's output;
// then sums each token's k outputs, weighted, in slot order (as llama.cpp adds its expert views).
lh_status run_moe(lh_dense_stage* st, const float* x, uint32_t T, float* out, lh_dense_stage_io* io) {
  const lh_dense_stage_config& c = st->cfg;
  Scratch& sc = g_scratch;
  const uint32_t E = c.n_experts, K = c.n_experts_used, F = c.expert_ffn, d = c.hidden, parts = c.threads;
  const size_t TK = static_cast<size_t>(T) * K;
  if (!sc.moe_logits.reserve(static_cast<size_t>(T) * E * 4) || !sc.moe_ids.reserve(TK * 4) || !sc.moe_weights.reserve(TK * 4) ||
      !sc.moe_offsets.reserve((E + 1) * 4) || !sc.moe_entries.reserve(TK * 4) || !sc.moe_x.reserve(static_cast<size_t>(T) * d * 4) ||
      !sc.moe_y.reserve(static_cast<size_t>(T) * d * 4) || !sc.moe_slots.reserve(TK * d * 4) || !sc.gate.reserve(static_cast<size_t>(T) * F * 4) ||
      !sc.up.reserve(static_cast<size_t>(T) * F * 4))
    return LH_OUT_OF_MEMORY;
  float* logits = sc.moe_logits.f();
  const Linear* rt[] = {&st->router};
  lh_status r = matmul_group(rt, 1, x, T, &logits, parts);
  if (r != LH_OK) return r;
  uint32_t* ids = static_cast<uint32_t*>(sc.moe_ids.p);
  float* weights = sc.moe_weights.f();
  for (uint32_t t = 0; t < T; ++t) {
    const float* lt = logits + static_cast<size_t>(t) * E;  // the router bias is in (matmul_group adds it)
    if (c.gating == LH_MOE_SOFTMAX_WEIGHT) lh_moe_route_softmax_weight(lt, E, K, ids + static_cast<size_t>(t) * K, weights + static_cast<size_t>(t) * K);
    else lh_moe_route(lt, E, K, c.norm_topk != 0, ids + static_cast<size_t>(t) * K, weights + static_cast<size_t>(t) * K);
  }
  uint32_t* offsets = static_cast<uint32_t*>(sc.moe_offsets.p);
  uint32_t* entries = static_cast<uint32_t*>(sc.moe_entries.p);
  lh_moe_group(ids, T, K, E, offsets, entries);
  uint64_t bytes = static_cast<uint64_t>(st->router.rows) * st->router.row_bytes;
  float* slots = sc.moe_slots.f();  // [T·K, d]: pair t·K + i's expert output
  for (uint32_t e = 0; e < E; ++e) {
    const uint32_t n = offsets[e + 1] - offsets[e];
    if (n == 0) continue;
    const uint32_t* pairs = entries + offsets[e];
    // expert e's rows: a view of the whole tensors at its offset, nothing copied
    Linear gate = st->gate_exps, up = st->up_exps, down = st->down_exps;
    if (st->expert_rows != nullptr) {  // tensors of their own
      gate.data = st->expert_rows[e];
      up.data = st->expert_rows[E + e];
      down.data = st->expert_rows[2 * E + e];
    } else {
      gate.data += static_cast<size_t>(e) * F * gate.row_bytes;
      up.data += static_cast<size_t>(e) * F * up.row_bytes;
      down.data += static_cast<size_t>(e) * d * down.row_bytes;
      // expert biases (gpt-oss) are indexed like the stacked rows: expert e's at its first row
      if (gate.bias != nullptr) gate.bias += static_cast<size_t>(e) * F;
      if (up.bias != nullptr) up.bias += static_cast<size_t>(e) * F;
      if (down.bias != nullptr) down.bias += static_cast<size_t>(e) * d;
    }
    gate.rows = up.rows = F;
    down.rows = d;
    bytes += static_cast<uint64_t>(F) * (gate.row_bytes + up.row_bytes) + static_cast<uint64_t>(d) * down.row_bytes;
    // its tokens' rows, contiguous (decode: the one token's row as it is)
    const float* xe = x;
    if (T > 1) {
      float* xg = sc.moe_x.f();
      for (uint32_t j = 0; j < n; ++j) std::memcpy(xg + static_cast<size_t>(j) * d, x + static_cast<size_t>(pairs[j] / K) * d, static_cast<size_t>(d) * 4);
      xe = xg;
    }
    const Linear* gu[] = {&gate, &up};
    float* gu_out[] = {sc.gate.f(), sc.up.f()};
    if ((r = matmul_group(gu, 2, xe, n, gu_out, parts)) != LH_OK) return r;
    GluJob glu{sc.gate.f(), sc.up.f(), F, c.activation};
    lh_worker_pool_run(g_pool, n, n >= 4 ? parts : 1, run_glu, &glu);
    const Linear* dn[] = {&down};
    float* y = sc.moe_y.f();
    if ((r = matmul_group(dn, 1, sc.gate.f(), n, &y, parts)) != LH_OK) return r;
    for (uint32_t j = 0; j < n; ++j) std::memcpy(slots + static_cast<size_t>(pairs[j]) * d, y + static_cast<size_t>(j) * d, static_cast<size_t>(d) * 4);
  }
  // out[t] = w_0·y_0 + w_1·y_1 + ... in slot order
  for (uint32_t t = 0; t < T; ++t) {
    float* o = out + static_cast<size_t>(t) * d;
    const float* w = weights + static_cast<size_t>(t) * K;
    const float* y0 = slots + static_cast<size_t>(t) * K * d;
    for (uint32_t i = 0; i < d; ++i) o[i] = y0[i] * w[0];
    for (uint32_t k = 1; k < K; ++k) {
      const float* yk = y0 + static_cast<size_t>(k) * d;
      for (uint32_t i = 0; i < d; ++i) o[i] += yk[i] * w[k];
    }
  }
  if (io->routed != nullptr) std::memcpy(io->routed, ids, TK * 4);
  if (io->routed_weights != nullptr) std::memcpy(io->routed_weights, weights, TK * 4);
  io->expert_bytes = bytes;
  return LH_OK;
}

// q_spec's norm and RoPE (it is layer stage+1's query: its own cos/sin rows when its RoPE differs,
// its own head dim and rotary width)
void finish_spec(lh_dense_stage* st, lh_dense_stage_io* io) {
  if (!st->has_spec) return;
  const lh_dense_stage_config& c = st->cfg;
  const uint32_t T = io->tokens, shd = st->spec_head_dim, srot = st->spec_rotary == 0 ? shd : st->spec_rotary;
  if (st->q_spec_norm != nullptr) head_rms_norm(io->q_spec, st->q_spec_norm, T, c.heads, shd, c.eps);
  const bool own = io->spec_rope_cos != nullptr;
  rope(io->q_spec, own ? io->spec_rope_cos : io->rope_cos, own ? io->spec_rope_sin : io->rope_sin, T, c.heads, shd, srot, c.rope_layout);
}

// A gated W_q's rows [T, heads·2·hd] (per head its query, then its gate) split into q and gate
// [T, heads·hd] each (gate null: dropped)
void split_gated(const float* rows, uint32_t T, uint32_t heads, uint32_t hd, float* q, float* gate) {
  for (size_t th = 0; th < static_cast<size_t>(T) * heads; ++th) {
    std::memcpy(q + th * hd, rows + th * 2 * hd, static_cast<size_t>(hd) * 4);
    if (gate != nullptr) std::memcpy(gate + th * hd, rows + th * 2 * hd + hd, static_cast<size_t>(hd) * 4);
  }
}

// The scratch a gated q_spec's rows go to (null: out of memory, or the model's W_q is not gated)
float* gated_spec_rows(lh_dense_stage* st, uint32_t T) {
  if (st->cfg.q_gated == 0) return nullptr;
  return g_scratch.qg_spec.reserve(static_cast<size_t>(T) * 2 * st->cfg.heads * st->spec_head_dim * 4) ? g_scratch.qg_spec.f() : nullptr;
}

// pre(stage) of a linear-attention layer (dense_stage.h, Qwen3.5): lin_qkv, lin_z, lin_beta,
// lin_decay from the normed input, and q_spec for the attention layer after it
lh_status pre_linear(lh_dense_stage* st, lh_dense_stage_io* io) {
  const lh_dense_stage_config& c = st->cfg;
  const uint32_t T = io->tokens, Hv = c.lin_value_heads;
  const Linear* mats[kMaxGroup] = {&st->lin_qkv, &st->lin_z, &st->lin_beta, &st->lin_alpha};
  float* outs[kMaxGroup] = {io->lin_qkv, io->lin_z, io->lin_beta, io->lin_decay};
  uint32_t n = 4;
  float* spec_rows = nullptr;
  if (st->has_spec) {
    if ((spec_rows = gated_spec_rows(st, T)) == nullptr && c.q_gated != 0) return LH_OUT_OF_MEMORY;
    mats[n] = &st->q_spec;
    outs[n++] = c.q_gated != 0 ? spec_rows : io->q_spec;
  }
  const lh_status r = matmul_group(mats, n, g_scratch.normed.f(), T, outs, c.threads);
  if (r != LH_OK) return r;
  for (size_t i = 0; i < static_cast<size_t>(T) * Hv; ++i) {
    const uint32_t h = static_cast<uint32_t>(i % Hv);
    io->lin_beta[i] = 1.0f / (1.0f + std::exp(-io->lin_beta[i]));
    const float x = io->lin_decay[i] + st->lin_dt[h];
    io->lin_decay[i] = (x > 20.0f ? x : std::log1p(std::exp(x))) * st->lin_a[h];  // softplus as ggml's
  }
  if (c.q_gated != 0 && st->has_spec) split_gated(spec_rows, T, c.heads, st->spec_head_dim, io->q_spec, nullptr);
  finish_spec(st, io);
  return LH_OK;
}

// The shared expert (dense_stage.h): out[t] += σ(x_t·w_sg)·SwiGLU_shared(x_t), x [T, hidden]
lh_status run_shared_expert(lh_dense_stage* st, const float* x, uint32_t T, float* out) {
  const lh_dense_stage_config& c = st->cfg;
  Scratch& sc = g_scratch;
  const uint32_t F = c.shexp_ffn, d = c.hidden;
  if (!sc.gate.reserve(static_cast<size_t>(T) * F * 4) || !sc.up.reserve(static_cast<size_t>(T) * F * 4) || !sc.moe_y.reserve(static_cast<size_t>(T) * d * 4))
    return LH_OUT_OF_MEMORY;
  const Linear* gu[] = {&st->shexp_gate, &st->shexp_up};
  float* gu_out[] = {sc.gate.f(), sc.up.f()};
  lh_status r = matmul_group(gu, 2, x, T, gu_out, c.threads);
  if (r != LH_OK) return r;
  GluJob glu{sc.gate.f(), sc.up.f(), F, LH_ACT_SILU};
  lh_worker_pool_run(g_pool, T, T >= 4 ? c.threads : 1, run_glu, &glu);
  const Linear* dn[] = {&st->shexp_down};
  float* y = sc.moe_y.f();
  if ((r = matmul_group(dn, 1, sc.gate.f(), T, &y, c.threads)) != LH_OK) return r;
  for (uint32_t t = 0; t < T; ++t) {
    const float* xt = x + static_cast<size_t>(t) * d;
    double logit = 0;
    for (uint32_t i = 0; i < d; ++i) logit += static_cast<double>(xt[i]) * st->shexp_gate_inp[i];
    const float g = static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
    float* o = out + static_cast<size_t>(t) * d;
    const float* yt = y + static_cast<size_t>(t) * d;
    for (uint32_t i = 0; i < d; ++i) o[i] += g * yt[i];
  }
  return LH_OK;
}

lh_status run_locked(lh_dense_stage* st, lh_dense_stage_io* io) {
  const lh_dense_stage_config& c = st->cfg;
  const uint32_t T = io->tokens, d = c.hidden, L = c.layers, s = c.stage, parts = c.threads;
  Scratch& sc = g_scratch;
  const size_t td = static_cast<size_t>(T) * d;
  if (!sc.normed.reserve(td * 4) || !sc.o.reserve(td * 4) || !sc.x.reserve(td * 4)) return LH_OUT_OF_MEMORY;
  if (s == 0) {
    rms_norm(io->h, st->norm, T, d, c.eps, sc.normed.f());
    if (c.ple_dim > 0) {
      lh_status r = per_layer_inputs(st, io);
      if (r != LH_OK) return r;
    }
  } else {
    // post(s − 1); the residual sum goes straight into h_next where the stage outputs it
    float* sum = io->h_next;
    if (sum == nullptr) {
      if (!sc.sum.reserve(td * 4)) return LH_OUT_OF_MEMORY;
      sum = sc.sum.f();
    }
    const size_t tf = static_cast<size_t>(T) * c.ffn;
    if (!sc.gate.reserve(tf * 4) || !sc.up.reserve(tf * 4)) return LH_OUT_OF_MEMORY;
    const Linear* wo[] = {&st->attn_output};
    float* o = sc.o.f();
    const float* attn = io->attn;
    if (c.attn_gated != 0) {
      // Qwen3.5's gated attention: attn ⊙ σ(gate), the gate from layer stage−1's W_q
      const size_t n = static_cast<size_t>(T) * st->attn_cols;
      if (!sc.gated_attn.reserve(n * 4)) return LH_OUT_OF_MEMORY;
      float* ga = sc.gated_attn.f();
      for (size_t i = 0; i < n; ++i) ga[i] = io->attn[i] / (1.0f + std::exp(-io->gate_in[i]));
      attn = ga;
    }
    lh_status r = matmul_group(wo, 1, attn, T, &o, parts);
    if (r != LH_OK) return r;
    if (st->attn_post_norm != nullptr) rms_norm(o, st->attn_post_norm, T, d, c.eps, o);  // sandwich: in place, row by row
    for (size_t i = 0; i < td; ++i) sum[i] = io->h[i] + o[i];
    rms_norm(sum, st->ffn_norm, T, d, c.eps, sc.x.f());
    if (c.n_experts > 0) {
      if ((r = run_moe(st, sc.x.f(), T, o, io)) != LH_OK) return r;
      if (c.shexp_ffn > 0 && (r = run_shared_expert(st, sc.x.f(), T, o)) != LH_OK) return r;
    } else {
      const Linear* gu[] = {&st->gate, &st->up};
      float* gu_out[] = {sc.gate.f(), sc.up.f()};
      if ((r = matmul_group(gu, 2, sc.x.f(), T, gu_out, parts)) != LH_OK) return r;
      GluJob glu{sc.gate.f(), sc.up.f(), c.ffn, c.activation};
      lh_worker_pool_run(g_pool, T, T >= 4 ? parts : 1, run_glu, &glu);
      const Linear* dn[] = {&st->down};
      if ((r = matmul_group(dn, 1, sc.gate.f(), T, &o, parts)) != LH_OK) return r;
    }
    if (st->ffn_post_norm != nullptr) rms_norm(o, st->ffn_post_norm, T, d, c.eps, o);
    for (size_t i = 0; i < td; ++i) sum[i] += o[i];
    if (c.ple_dim > 0) {
      // sum += rmsnorm((gelu_tanh(sum·W_inp_gateᵀ) ⊙ ple)·W_projᵀ)·post_norm   (gate [T, P] in sc.gate)
      const uint32_t P = c.ple_dim;
      if (!sc.gate.reserve(static_cast<size_t>(T) * P * 4)) return LH_OUT_OF_MEMORY;
      const Linear* ig[] = {&st->ple_inp_gate};
      float* g = sc.gate.f();
      if ((r = matmul_group(ig, 1, sum, T, &g, parts)) != LH_OK) return r;
      GluJob pg{g, io->ple, P, LH_ACT_GELU_TANH};
      run_glu(&pg, 0, T);
      const Linear* pj[] = {&st->ple_proj};
      if ((r = matmul_group(pj, 1, g, T, &o, parts)) != LH_OK) return r;
      rms_norm(o, st->ple_post_norm, T, d, c.eps, o);
      for (size_t i = 0; i < td; ++i) sum[i] += o[i];
    }
    if (c.output_scale > 0.0f)
      for (size_t i = 0; i < td; ++i) sum[i] *= c.output_scale;
    rms_norm(sum, st->norm, T, d, c.eps, sc.normed.f());
  }
  if (s == L) {
    if (!sc.picked.reserve(static_cast<size_t>(io->n_rows) * d * 4)) return LH_OUT_OF_MEMORY;
    for (uint32_t r = 0; r < io->n_rows; ++r) std::memcpy(sc.picked.f() + static_cast<size_t>(r) * d, sc.normed.f() + static_cast<size_t>(io->rows[r]) * d, d * 4);
    const Linear* head[] = {&st->head};
    const lh_status r = matmul_group(head, 1, sc.picked.f(), io->n_rows, &io->logits, parts);
    if (r != LH_OK || c.final_softcap == 0.0f) return r;
    // llama.cpp: scale by 1/c, tanh, scale by c (fp32 throughout)
    const float cap = c.final_softcap, inv = 1.0f / cap;
    for (size_t i = 0; i < static_cast<size_t>(io->n_rows) * c.vocab; ++i) io->logits[i] = std::tanh(io->logits[i] * inv) * cap;
    return LH_OK;
  }
  if (st->linear) return pre_linear(st, io);
  // q, then k and v where the layer keeps rows (v: its own projection or k's), then q_spec
  const Linear* qkv[kMaxGroup];
  float* outs[kMaxGroup];
  uint32_t n = 0;
  const size_t qw = static_cast<size_t>(c.heads) * c.head_dim;
  if (c.q_gated != 0 && !sc.qg.reserve(static_cast<size_t>(T) * 2 * qw * 4)) return LH_OUT_OF_MEMORY;
  qkv[n] = &st->q;
  outs[n++] = c.q_gated != 0 ? sc.qg.f() : io->q;
  if (c.kv_shared == 0) {
    qkv[n] = &st->k;
    outs[n++] = io->k;
    if (c.v_from_k == 0) {
      qkv[n] = &st->v;
      outs[n++] = io->v;
    }
  }
  float* spec_rows = nullptr;
  if (st->has_spec) {
    if ((spec_rows = gated_spec_rows(st, T)) == nullptr && c.q_gated != 0) return LH_OUT_OF_MEMORY;
    qkv[n] = &st->q_spec;
    outs[n++] = c.q_gated != 0 ? spec_rows : io->q_spec;
  }
  const lh_status r = matmul_group(qkv, n, sc.normed.f(), T, outs, parts);
  if (r != LH_OK) return r;
  if (c.q_gated != 0) split_gated(sc.qg.f(), T, c.heads, c.head_dim, io->q, io->gate);
  if (c.q_gated != 0 && st->has_spec) split_gated(spec_rows, T, c.heads, st->spec_head_dim, io->q_spec, nullptr);
  const size_t kvw = static_cast<size_t>(c.kv_heads) * c.head_dim;
  if (c.kv_shared == 0 && c.v_from_k != 0) std::memcpy(io->v, io->k, static_cast<size_t>(T) * kvw * 4);  // before k's norm
  if (st->q_norm != nullptr) head_rms_norm(io->q, st->q_norm, T, c.heads, c.head_dim, c.eps);
  if (st->k_norm != nullptr) head_rms_norm(io->k, st->k_norm, T, c.kv_heads, c.head_dim, c.eps);
  if (st->v_norm != nullptr) head_rms_norm(io->v, st->v_norm, T, c.kv_heads, c.head_dim, c.eps);
  const uint32_t rotary = c.rotary_dim == 0 ? c.head_dim : c.rotary_dim;
  rope(io->q, io->rope_cos, io->rope_sin, T, c.heads, c.head_dim, rotary, c.rope_layout);
  if (c.kv_shared == 0) rope(io->k, io->rope_cos, io->rope_sin, T, c.kv_heads, c.head_dim, rotary, c.rope_layout);
  finish_spec(st, io);
  return LH_OK;
}
}  // namespace

lh_status lh_dense_stage_run(lh_dense_stage* st, lh_dense_stage_io* io) {
  if (st == nullptr || io == nullptr || io->tokens == 0 || io->h == nullptr) return LH_BAD_ARGUMENT;
  io->expert_bytes = 0;
  const uint32_t L = st->cfg.layers, s = st->cfg.stage;
  if (s > 0 && io->attn == nullptr) return LH_BAD_ARGUMENT;
  if (s > 0 && s < L && io->h_next == nullptr) return LH_BAD_ARGUMENT;
  const bool linear = st->linear;
  if (s > 0 && st->cfg.attn_gated != 0 && io->gate_in == nullptr) return LH_BAD_ARGUMENT;
  if (s < L && !linear && (io->rope_cos == nullptr || io->rope_sin == nullptr || io->q == nullptr)) return LH_BAD_ARGUMENT;
  if (s < L && !linear && st->cfg.q_gated != 0 && io->gate == nullptr) return LH_BAD_ARGUMENT;
  if (s < L && !linear && st->cfg.kv_shared == 0 && (io->k == nullptr || io->v == nullptr)) return LH_BAD_ARGUMENT;
  if (linear && (io->lin_qkv == nullptr || io->lin_z == nullptr || io->lin_beta == nullptr || io->lin_decay == nullptr)) return LH_BAD_ARGUMENT;
  if (linear && st->has_spec && io->spec_rope_cos == nullptr && io->rope_cos == nullptr) return LH_BAD_ARGUMENT;
  if (st->cfg.ple_dim > 0 && s == 0 && (io->ple_tok == nullptr || io->ple_out == nullptr)) return LH_BAD_ARGUMENT;
  if (st->cfg.ple_dim > 0 && s > 0 && io->ple == nullptr) return LH_BAD_ARGUMENT;
  if (s < L && st->has_spec && io->q_spec == nullptr) return LH_BAD_ARGUMENT;
  if ((io->spec_rope_cos == nullptr) != (io->spec_rope_sin == nullptr)) return LH_BAD_ARGUMENT;
  if (s == L) {
    if (io->logits == nullptr || (io->n_rows > 0 && io->rows == nullptr)) return LH_BAD_ARGUMENT;
    for (uint32_t r = 0; r < io->n_rows; ++r)
      if (io->rows[r] >= io->tokens) return LH_BAD_ARGUMENT;
    if (io->n_rows == 0) return LH_OK;
  }
  g_pool = lh_shared_pool_lock();
  const lh_status r = run_locked(st, io);
  g_pool = nullptr;
  lh_shared_pool_unlock();
  return r;
}
