// The mixture-of-experts MLP of the dense stage (dense_stage.h, moe_ffn.h) against a float64
// reference written here from the formulas (softmax router, top-k, renormalised weights, SwiGLU
// experts, weighted sum), for every weight type the kernels cover: the expert tensors drawn as
// random GGUF rows of the type and dequantized as ggml does (quant_dot_sweep.h's type cases), so
// the reference multiplies by exactly what the file holds. Then what must hold whatever the type:
// the router's choices equal the reference's; experts no token routed to are never read (their
// bytes poisoned with NaN change nothing); the byte count is the router plus each routed expert
// once; 1 and 3 threads give the same bits; a chunk of T tokens routes as T single-token runs;
// the typed refusals; and lh_moe_route / lh_moe_group on their own (ties, renormalisation, NaN).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "../src/dense_stage.h"
#include "../src/moe_ffn.h"
#include "check.h"
#include "quant_dot_sweep.h"
#include "test_rng.h"

namespace {

// One MoE layer between two small attention layers: stage 1 of 2 runs post(0) (attention output,
// the MoE MLP) and pre(1). 256 wide so every K-quant row is whole super-blocks.
constexpr uint32_t kD = 256, kHeads = 2, kKv = 1, kHd = 32, kE = 16, kK = 4, kF = 256, kVocab = 8;
constexpr uint32_t kQw = kHeads * kHd, kKvw = kKv * kHd;
constexpr float kEps = 1e-6f;

using Vec = std::vector<double>;

// A weight in a GGUF type: bytes, and per row the dequantized values (what the file holds).
struct Tensor {
  uint32_t type = LH_QDOT_F32, rows = 0, cols = 0;
  std::vector<uint8_t> bytes;
  Vec values;  // [rows, cols]
  lh_dense_matrix matrix() const { return lh_dense_matrix{bytes.data(), bytes.size(), type, rows, cols, nullptr}; }
};

Tensor make_tensor(Rng& rng, const QdotTypeCase& c, uint32_t rows, uint32_t cols, float f32_scale) {
  lh_qdot_kernels k{};
  lh_qdot_kernels_for(c.type, LH_QDOT_SCALAR, &k);
  Tensor t;
  t.type = c.type;
  t.rows = rows;
  t.cols = cols;
  const size_t rb = k.row_bytes(cols);
  t.bytes.resize(rb * rows);
  t.values.resize(static_cast<size_t>(rows) * cols);
  Vec magnitude(cols);
  for (uint32_t r = 0; r < rows; ++r) {
    uint8_t* row = t.bytes.data() + r * rb;
    if (c.type == LH_QDOT_F32) {  // F32 scaled to the model's width (the type case draws N(0, 1))
      for (uint32_t i = 0; i < cols; ++i) {
        const float v = rng.normal() * f32_scale;
        std::memcpy(row + 4 * i, &v, 4);
      }
    } else {
      c.random_row(rng, cols, row);
    }
    c.dequantize_row(row, cols, t.values.data() + static_cast<size_t>(r) * cols, magnitude.data());
  }
  return t;
}

std::vector<float> gaussian_f(Rng& rng, size_t n, float std) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.normal() * std;
  return v;
}

struct MoeModel {
  QdotTypeCase type{};
  Tensor o, q, k, v, router, gate, up, down;  // o, q, k, v, router: F32
  std::vector<float> ffn_norm, norm, q_norm, k_norm;
  // gpt-oss (oai): router and expert biases, top-k of the logits then a softmax over the k, SwiGLU-OAI
  bool oai = false;
  std::vector<float> router_b, gate_b, up_b, down_b;  // [kE], [kE·kF], [kE·kF], [kE·kD]
};

// gpt-oss's clamped SwiGLU in float64 (ggml_swiglu_oai: alpha 1.702, limit 7)
double swiglu_oai(double g, double u) {
  const double x = std::fmin(g, 7.0), y = std::fmax(-7.0, std::fmin(u, 7.0));
  return x / (1.0 + std::exp(-1.702 * x)) * (y + 1.0);
}

MoeModel make_moe(const QdotTypeCase& type, uint64_t seed, bool oai = false) {
  QdotTypeCase f32{};
  qdot_q_case(LH_QDOT_F32, &f32);
  Rng rng(seed);
  MoeModel m;
  m.type = type;
  const float s = 1.0f / std::sqrt(static_cast<float>(kD));
  m.o = make_tensor(rng, f32, kD, kQw, 1.0f / std::sqrt(static_cast<float>(kQw)));
  m.q = make_tensor(rng, f32, kQw, kD, s);
  m.k = make_tensor(rng, f32, kKvw, kD, s);
  m.v = make_tensor(rng, f32, kKvw, kD, s);
  // router logits of std ~2 over unit-scale inputs: the k-th and (k+1)-th choices apart by far more
  // than float rounding, so a float and a float64 router pick the same experts
  m.router = make_tensor(rng, f32, kE, kD, 2.0f * s);
  m.gate = make_tensor(rng, type, kE * kF, kD, s);
  m.up = make_tensor(rng, type, kE * kF, kD, s);
  m.down = make_tensor(rng, type, kE * kD, kF, 1.0f / std::sqrt(static_cast<float>(kF)));
  for (std::vector<float>* w : {&m.ffn_norm, &m.norm}) {
    w->resize(kD);
    for (float& x : *w) x = 1.0f + 0.2f * rng.normal();
  }
  for (std::vector<float>* w : {&m.q_norm, &m.k_norm}) w->assign(kHd, 1.0f);
  if (oai) {
    // gpt-oss: biases everywhere, and gates wide enough (std ~4) that SwiGLU-OAI's cap at 7 and the
    // up's clamp at ±7 both bite (its F32 gate rows redrawn at 4× the scale)
    m.oai = true;
    if (type.type == LH_QDOT_F32) m.gate = make_tensor(rng, type, kE * kF, kD, 4.0f * s);
    if (type.type == LH_QDOT_F32) m.up = make_tensor(rng, type, kE * kF, kD, 4.0f * s);
    m.router_b = gaussian_f(rng, kE, 1.0f);
    m.gate_b = gaussian_f(rng, kE * kF, 0.5f);
    m.up_b = gaussian_f(rng, kE * kF, 0.5f);
    m.down_b = gaussian_f(rng, kE * kD, 0.1f);
  }
  return m;
}

lh_dense_stage_config config_for(const MoeModel& m, uint32_t threads) {
  lh_dense_stage_config c{};
  c.stage = 1;
  c.layers = 2;
  c.hidden = kD;
  c.heads = kHeads;
  c.kv_heads = kKv;
  c.head_dim = kHd;
  c.ffn = kF;
  c.vocab = kVocab;
  c.eps = kEps;
  c.threads = threads;
  c.impl = LH_QDOT_AUTO;
  c.norm = m.norm.data();
  c.ffn_norm = m.ffn_norm.data();
  c.attn_output = m.o.matrix();
  c.q = m.q.matrix();
  c.k = m.k.matrix();
  c.v = m.v.matrix();
  c.n_experts = kE;
  c.n_experts_used = kK;
  c.expert_ffn = kF;
  c.norm_topk = 1;
  c.router = m.router.matrix();
  c.gate_exps = m.gate.matrix();
  c.up_exps = m.up.matrix();
  c.down_exps = m.down.matrix();
  if (m.oai) {
    c.norm_topk = 0;
    c.gating = LH_MOE_SOFTMAX_WEIGHT;
    c.activation = LH_ACT_SWIGLU_OAI;
    c.router.bias = m.router_b.data();
    c.gate_exps.bias = m.gate_b.data();
    c.up_exps.bias = m.up_b.data();
    c.down_exps.bias = m.down_b.data();
  }
  return c;
}

struct Out {
  lh_status status = LH_INTERNAL;
  std::vector<float> h_next, q, k, v;
  std::vector<uint32_t> routed;
  std::vector<float> weights;
  uint64_t bytes = 0;
};

Out run(lh_dense_stage* st, const std::vector<float>& h, const std::vector<float>& attn, uint32_t T) {
  Out r;
  std::vector<float> cos(static_cast<size_t>(T) * kHd / 2, 1.0f), sin(static_cast<size_t>(T) * kHd / 2, 0.0f);
  r.h_next.assign(static_cast<size_t>(T) * kD, -7.0f);
  r.q.resize(static_cast<size_t>(T) * kQw);
  r.k.resize(static_cast<size_t>(T) * kKvw);
  r.v.resize(static_cast<size_t>(T) * kKvw);
  r.routed.assign(static_cast<size_t>(T) * kK, 999);
  r.weights.assign(static_cast<size_t>(T) * kK, -1.0f);
  lh_dense_stage_io io{};
  io.tokens = T;
  io.h = h.data();
  io.attn = attn.data();
  io.rope_cos = cos.data();
  io.rope_sin = sin.data();
  io.q = r.q.data();
  io.k = r.k.data();
  io.v = r.v.data();
  io.h_next = r.h_next.data();
  io.routed = r.routed.data();
  io.routed_weights = r.weights.data();
  r.status = lh_dense_stage_run(st, &io);
  r.bytes = io.expert_bytes;
  return r;
}

// ---- the float64 reference (the formulas of dense_stage.h's mixture of experts) ----
struct Reference {
  Vec mlp;                     // [T, kD] the MoE output alone
  Vec sum;                     // [T, kD] h + attention output
  std::vector<uint32_t> ids;   // [T, kK]
  Vec weights;                 // [T, kK]
  double margin = 1e30;        // the smallest logit gap between the k-th and (k+1)-th expert
};

Vec matvec(const Vec& w, uint32_t rows, uint32_t cols, size_t row0, const double* x) {
  Vec y(rows);
  for (uint32_t r = 0; r < rows; ++r) {
    double acc = 0;
    const double* wr = w.data() + (row0 + r) * cols;
    for (uint32_t i = 0; i < cols; ++i) acc += wr[i] * x[i];
    y[r] = acc;
  }
  return y;
}

Reference reference(const MoeModel& m, const std::vector<float>& h, const std::vector<float>& attn, uint32_t T) {
  Reference ref;
  ref.mlp.assign(static_cast<size_t>(T) * kD, 0.0);
  ref.sum.resize(static_cast<size_t>(T) * kD);
  for (uint32_t t = 0; t < T; ++t) {
    Vec a(attn.begin() + static_cast<size_t>(t) * kQw, attn.begin() + static_cast<size_t>(t + 1) * kQw);
    const Vec o = matvec(m.o.values, kD, kQw, 0, a.data());
    Vec x(kD);
    double ss = 0;
    for (uint32_t i = 0; i < kD; ++i) {
      ref.sum[t * kD + i] = h[t * kD + i] + o[i];
      ss += ref.sum[t * kD + i] * ref.sum[t * kD + i];
    }
    const double inv = 1.0 / std::sqrt(ss / kD + kEps);
    for (uint32_t i = 0; i < kD; ++i) x[i] = ref.sum[t * kD + i] * inv * m.ffn_norm[i];
    Vec logits = matvec(m.router.values, kE, kD, 0, x.data());
    if (m.oai)
      for (uint32_t e = 0; e < kE; ++e) logits[e] += m.router_b[e];
    double max = -1e300, z = 0;
    for (double l : logits) max = std::fmax(max, l);
    for (double l : logits) z += std::exp(l - max);
    std::vector<bool> taken(kE, false);
    double total = 0;
    uint32_t ids[kK];
    double w[kK];
    for (uint32_t i = 0; i < kK; ++i) {
      uint32_t best = kE;
      for (uint32_t e = 0; e < kE; ++e)
        if (!taken[e] && (best == kE || logits[e] > logits[best])) best = e;
      taken[best] = true;
      ids[i] = best;
      w[i] = std::exp(logits[best] - max) / z;
      total += w[i];
    }
    double next = -1e300;  // the best expert not taken
    for (uint32_t e = 0; e < kE; ++e)
      if (!taken[e]) next = std::fmax(next, logits[e]);
    ref.margin = std::fmin(ref.margin, logits[ids[kK - 1]] - next);
    if (m.oai) {  // a softmax over the k picked logits (ids[0] holds the largest)
      total = 0;
      for (uint32_t i = 0; i < kK; ++i) total += (w[i] = std::exp(logits[ids[i]] - logits[ids[0]]));
    }
    for (uint32_t i = 0; i < kK; ++i) {
      w[i] /= total;
      ref.ids.push_back(ids[i]);
      ref.weights.push_back(w[i]);
      const Vec g = matvec(m.gate.values, kF, kD, static_cast<size_t>(ids[i]) * kF, x.data());
      const Vec u = matvec(m.up.values, kF, kD, static_cast<size_t>(ids[i]) * kF, x.data());
      Vec act(kF);
      for (uint32_t j = 0; j < kF; ++j)
        act[j] = m.oai ? swiglu_oai(g[j] + m.gate_b[ids[i] * kF + j], u[j] + m.up_b[ids[i] * kF + j]) : g[j] / (1.0 + std::exp(-g[j])) * u[j];
      const Vec y = matvec(m.down.values, kD, kF, static_cast<size_t>(ids[i]) * kD, act.data());
      for (uint32_t j = 0; j < kD; ++j) ref.mlp[t * kD + j] += w[i] * (y[j] + (m.oai ? m.down_b[ids[i] * kD + j] : 0.0));
    }
  }
  return ref;
}

// NMSE of the stage's MoE output (h_next − the reference's h + attention) against the reference's
double moe_nmse(const Out& out, const Reference& ref) {
  double num = 0, den = 1e-300;
  for (size_t i = 0; i < ref.mlp.size(); ++i) {
    const double got = out.h_next[i] - ref.sum[i];
    num += (got - ref.mlp[i]) * (got - ref.mlp[i]);
    den += ref.mlp[i] * ref.mlp[i];
  }
  return num / den;
}

std::vector<float> gaussian(Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.normal();
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) { return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0; }

void test_type(const QdotTypeCase& type, uint64_t seed, bool oai = false) {
  char name[160];
  const MoeModel m = make_moe(type, seed, oai);
  constexpr uint32_t T = 9;
  Rng rng(seed + 7);
  const std::vector<float> h = gaussian(rng, static_cast<size_t>(T) * kD), attn = gaussian(rng, static_cast<size_t>(T) * kQw);
  const Reference ref = reference(m, h, attn, T);
  lh_dense_stage_config c1 = config_for(m, 1), c3 = config_for(m, 3);
  lh_dense_stage *st1 = nullptr, *st3 = nullptr;
  const char* why = nullptr;
  const lh_status s1 = lh_dense_stage_create(&c1, &st1, &why);
  std::snprintf(name, sizeof name, "moe %s: a stage with %u experts, top-%u, is created", type.name, kE, kK);
  check(s1 == LH_OK && lh_dense_stage_create(&c3, &st3, nullptr) == LH_OK, name, "status %d (%s)", s1, why ? why : "");
  if (st1 == nullptr || st3 == nullptr) return;
  const Out a = run(st1, h, attn, T), b = run(st3, h, attn, T);
  std::snprintf(name, sizeof name, "moe %s: the router picks the float64 reference's experts in its order (smallest k-th gap %.3f)", type.name, ref.margin);
  check(a.status == LH_OK && a.routed == ref.ids && ref.margin > 1e-3, name, "status %d, margin %g", a.status, ref.margin);
  double werr = 0;
  for (size_t i = 0; i < ref.weights.size(); ++i) werr = std::fmax(werr, std::fabs(a.weights[i] - ref.weights[i]));
  std::snprintf(name, sizeof name, "moe %s: routing weights (softmax, renormalised over the %u) within 1e-6 of float64", type.name, kK);
  check(werr < 1e-6, name, "max |Δw| %g", werr);
  // F32 and F16 weights keep fp32 activations; the others round them to int8 blocks as llama.cpp does
  const bool exact = type.type == LH_QDOT_F32 || type.type == LH_QDOT_F16;
  const double nmse = moe_nmse(a, ref), bound = exact ? 1e-10 : 2e-3;
  std::snprintf(name, sizeof name, "moe %s: expert output against float64, NMSE %.2e < %.0e", type.name, nmse, bound);
  check(nmse < bound, name, "NMSE %g", nmse);
  std::snprintf(name, sizeof name, "moe %s: 1 and 3 threads give the same bits", type.name);
  check(b.status == LH_OK && same_bits(a.h_next, b.h_next) && same_bits(a.q, b.q), name);
  // bytes: the router and each routed expert's gate, up and down rows once
  std::set<uint32_t> used(a.routed.begin(), a.routed.end());
  const uint64_t per_expert = (m.gate.bytes.size() + m.up.bytes.size() + m.down.bytes.size()) / kE;
  std::snprintf(name, sizeof name, "moe %s: expert bytes read = router + %zu routed experts once", type.name, used.size());
  check(a.bytes == m.router.bytes.size() + used.size() * per_expert, name, "%llu, expected %llu", static_cast<unsigned long long>(a.bytes),
        static_cast<unsigned long long>(m.router.bytes.size() + used.size() * per_expert));
  // a chunk routes as single tokens do; the outputs agree to float order (decode and prefill kernels)
  bool same_route = true;
  double worst = 0, scale = 1e-30;
  uint64_t decode_bytes = 0;
  for (uint32_t t = 0; t < T; ++t) {
    const std::vector<float> ht(h.begin() + t * kD, h.begin() + (t + 1) * kD), at(attn.begin() + t * kQw, attn.begin() + (t + 1) * kQw);
    const Out one = run(st1, ht, at, 1);
    same_route &= one.status == LH_OK && std::equal(one.routed.begin(), one.routed.end(), a.routed.begin() + t * kK);
    for (uint32_t i = 0; i < kD; ++i) {
      worst = std::fmax(worst, std::fabs(one.h_next[i] - a.h_next[t * kD + i]));
      scale = std::fmax(scale, std::fabs(a.h_next[t * kD + i]));
    }
    decode_bytes = one.bytes;
  }
  std::snprintf(name, sizeof name, "moe %s: %u tokens in one run route and compute as %u single-token runs (max rel %.1e)", type.name, T, T, worst / scale);
  check(same_route && worst / scale < (exact ? 1e-5 : 2e-2), name, "routes equal %d, rel %g", same_route, worst / scale);
  std::snprintf(name, sizeof name, "moe %s: a decode step reads the router and its %u experts", type.name, kK);
  check(decode_bytes == m.router.bytes.size() + kK * per_expert, name, "%llu", static_cast<unsigned long long>(decode_bytes));
  lh_dense_stage_free(st1);
  lh_dense_stage_free(st3);
}

// experts no token was routed to are never read: their rows poisoned with NaN change no bit
void test_unrouted_not_read() {
  QdotTypeCase f32{};
  qdot_q_case(LH_QDOT_F32, &f32);
  MoeModel m = make_moe(f32, 4242);
  constexpr uint32_t T = 2;  // 8 routed pairs over 16 experts: some never routed
  Rng rng(99);
  const std::vector<float> h = gaussian(rng, static_cast<size_t>(T) * kD), attn = gaussian(rng, static_cast<size_t>(T) * kQw);
  lh_dense_stage_config c = config_for(m, 2);
  lh_dense_stage* st = nullptr;
  if (lh_dense_stage_create(&c, &st, nullptr) != LH_OK) {
    check(false, "moe: unrouted experts", "create failed");
    return;
  }
  const Out before = run(st, h, attn, T);
  std::set<uint32_t> used(before.routed.begin(), before.routed.end());
  const float nan = NAN;
  uint32_t poisoned = 0;
  for (uint32_t e = 0; e < kE; ++e) {
    if (used.count(e) != 0) continue;
    ++poisoned;
    for (Tensor* t : {&m.gate, &m.up, &m.down}) {
      const size_t per = t->bytes.size() / kE;
      for (size_t i = 0; i < per; i += 4) std::memcpy(t->bytes.data() + e * per + i, &nan, 4);
    }
  }
  const Out after = run(st, h, attn, T);
  char name[160];
  std::snprintf(name, sizeof name, "moe: %u experts no token routed to are never read (their rows NaN, the output the same bits)", poisoned);
  check(poisoned > 0 && after.status == LH_OK && same_bits(before.h_next, after.h_next), name, "poisoned %u", poisoned);
  lh_dense_stage_free(st);
}

// experts as tensors of their own (a Hugging Face folder) compute what the 3-D tensor's offsets do, bit for bit
void test_per_expert(uint32_t type_id) {
  QdotTypeCase type{};
  if (!qdot_q_case(type_id, &type) && !qdot_k_case(type_id, &type)) return;
  const MoeModel m = make_moe(type, 515);
  constexpr uint32_t T = 5;
  Rng rng(3);
  const std::vector<float> h = gaussian(rng, static_cast<size_t>(T) * kD), attn = gaussian(rng, static_cast<size_t>(T) * kQw);
  // each expert's rows copied into a buffer of its own (somewhere else in memory than the 3-D tensor)
  std::vector<std::vector<uint8_t>> copies;
  std::vector<const uint8_t*> ptrs[3];
  const Tensor* whole[3] = {&m.gate, &m.up, &m.down};
  for (int i = 0; i < 3; ++i) {
    const size_t per = whole[i]->bytes.size() / kE;
    for (uint32_t e = 0; e < kE; ++e) copies.emplace_back(whole[i]->bytes.begin() + e * per, whole[i]->bytes.begin() + (e + 1) * per);
  }
  for (int i = 0; i < 3; ++i)
    for (uint32_t e = 0; e < kE; ++e) ptrs[i].push_back(copies[i * kE + e].data());
  lh_dense_stage_config a = config_for(m, 2), b = config_for(m, 2);
  for (lh_dense_matrix* mm : {&b.gate_exps, &b.up_exps, &b.down_exps}) {
    mm->data = nullptr;
    mm->bytes = 0;
  }
  b.gate_expert = ptrs[0].data();
  b.up_expert = ptrs[1].data();
  b.down_expert = ptrs[2].data();
  lh_dense_stage *sa = nullptr, *sb = nullptr;
  const char* why = nullptr;
  const bool made = lh_dense_stage_create(&a, &sa, nullptr) == LH_OK && lh_dense_stage_create(&b, &sb, &why) == LH_OK;
  char name[160];
  std::snprintf(name, sizeof name, "moe %s: experts as tensors of their own give the 3-D tensor's bits (prefill and decode)", type.name);
  if (!made) {
    check(false, name, "create: %s", why ? why : "?");
    lh_dense_stage_free(sa);
    return;
  }
  const Out x = run(sa, h, attn, T), y = run(sb, h, attn, T);
  const std::vector<float> h1(h.begin(), h.begin() + kD), a1(attn.begin(), attn.begin() + kQw);
  const Out x1 = run(sa, h1, a1, 1), y1 = run(sb, h1, a1, 1);
  check(x.status == LH_OK && y.status == LH_OK && same_bits(x.h_next, y.h_next) && x.routed == y.routed && x.bytes == y.bytes && same_bits(x1.h_next, y1.h_next), name);
  b.up_expert = nullptr;
  lh_dense_stage* bad = nullptr;
  check(lh_dense_stage_create(&b, &bad, &why) == LH_BAD_ARGUMENT, "moe: per-expert gate rows without per-expert up rows are refused");
  lh_dense_stage_free(sa);
  lh_dense_stage_free(sb);
}

void test_refusals() {
  QdotTypeCase f32{};
  qdot_q_case(LH_QDOT_F32, &f32);
  const MoeModel m = make_moe(f32, 7);
  lh_dense_stage* st = nullptr;
  const char* why = nullptr;
  lh_dense_stage_config c = config_for(m, 1);
  c.n_experts_used = kE + 1;
  check(lh_dense_stage_create(&c, &st, &why) == LH_BAD_ARGUMENT && why != nullptr, "moe: more experts used than the layer has is refused");
  c = config_for(m, 1);
  c.n_experts_used = 0;
  check(lh_dense_stage_create(&c, &st, &why) == LH_BAD_ARGUMENT, "moe: zero experts used is refused");
  c = config_for(m, 1);
  c.router.data = nullptr;
  check(lh_dense_stage_create(&c, &st, &why) == LH_BAD_ARGUMENT && why != nullptr && std::strstr(why, "router") != nullptr, "moe: a missing router is refused, naming it",
        "%s", why ? why : "");
  c = config_for(m, 1);
  c.down_exps.rows = kE * kD - 1;
  check(lh_dense_stage_create(&c, &st, &why) == LH_BAD_ARGUMENT && why != nullptr && std::strstr(why, "ffn_down_exps") != nullptr,
        "moe: an expert tensor of the wrong shape is refused, naming it", "%s", why ? why : "");
}

void test_route() {
  // ties: equal logits pick the lower id first; weights renormalised to sum 1
  const float logits[6] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 2.0f};
  uint32_t ids[3];
  float w[3];
  lh_moe_route(logits, 6, 3, true, ids, w);
  check(ids[0] == 1 && ids[1] == 3 && ids[2] == 2, "moe route: the k largest, largest first, equal logits by lower id", "%u %u %u", ids[0], ids[1], ids[2]);
  {
    // gpt-oss: the k largest logits (same picks), a softmax over those k only: e^0, e^0, e^-1 over 2 + e^-1
    uint32_t ids_w[3];
    float ww[3];
    lh_moe_route_softmax_weight(logits, 6, 3, ids_w, ww);
    const double e1 = std::exp(-1.0);
    check(ids_w[0] == 1 && ids_w[1] == 3 && ids_w[2] == 2 && std::fabs(ww[0] - 1.0 / (2 + e1)) < 1e-6 && std::fabs(ww[2] - e1 / (2 + e1)) < 1e-6,
          "moe route (softmax_weight): the k largest logits, a softmax over them", "%u %u %u: %g %g %g", ids_w[0], ids_w[1], ids_w[2], ww[0], ww[1], ww[2]);
    const float one_big[4] = {-50.0f, 10.0f, -60.0f, 9.0f};  // the unpicked experts do not enter the softmax
    lh_moe_route_softmax_weight(one_big, 4, 2, ids_w, ww);
    check(ids_w[0] == 1 && ids_w[1] == 3 && std::fabs(ww[0] - 1.0 / (1 + e1)) < 1e-6, "moe route (softmax_weight): only the picked logits normalise", "%g", ww[0]);
  }
  const double e = std::exp(-1.0);
  check(std::fabs(w[0] - 1.0 / (2 + e)) < 1e-6 && std::fabs(w[2] - e / (2 + e)) < 1e-6 && std::fabs(w[0] + w[1] + w[2] - 1.0) < 1e-6,
        "moe route: renormalised weights p_i / Σ p over the k", "%g %g %g", w[0], w[1], w[2]);
  lh_moe_route(logits, 6, 3, false, ids, w);
  double z = 0;
  for (float l : logits) z += std::exp(l - 3.0);
  check(std::fabs(w[0] - 1.0 / z) < 1e-6, "moe route: without norm_topk the weights are the softmax probabilities", "%g", w[0]);
  const float bad[4] = {0.0f, NAN, 1.0f, 2.0f};
  lh_moe_route(bad, 4, 2, true, ids, w);
  check(ids[0] < 4 && ids[1] < 4 && ids[0] != ids[1] && std::isnan(w[0]) && std::isnan(w[1]), "moe route: a NaN logit gives NaN weights and valid distinct ids");
  // grouping: each expert's pairs in token order
  const uint32_t routed[6] = {2, 0, 0, 1, 2, 1};  // T 3, k 2
  uint32_t offsets[4], entries[6];
  lh_moe_group(routed, 3, 2, 3, offsets, entries);
  const uint32_t want_off[4] = {0, 2, 4, 6}, want[6] = {1, 2, 3, 5, 0, 4};
  check(std::memcmp(offsets, want_off, sizeof want_off) == 0 && std::memcmp(entries, want, sizeof want) == 0, "moe group: (token, slot) pairs by expert, tokens ascending");
}

}  // namespace

void test_moe_ffn() {
  test_route();
  const uint32_t types[] = {LH_QDOT_F32, LH_QDOT_F16, LH_QDOT_Q4_0, LH_QDOT_Q8_0, LH_QDOT_Q4_K, LH_QDOT_Q5_K, LH_QDOT_Q6_K, LH_QDOT_MXFP4, LH_QDOT_Q5_0, LH_QDOT_Q4_1, LH_QDOT_Q5_1};
  uint64_t seed = 31;
  for (const uint32_t t : types) {
    QdotTypeCase c{};
    if (qdot_q_case(t, &c) || qdot_k_case(t, &c) || qdot_mxfp4_case(t, &c) || qdot_q5_case(t, &c) || qdot_q1_case(t, &c)) test_type(c, seed++);
  }
  // gpt-oss's variant: router and expert biases, softmax over the top-k logits, SwiGLU-OAI
  for (const uint32_t t : {LH_QDOT_F32, LH_QDOT_Q8_0}) {
    QdotTypeCase c{};
    if (!qdot_q_case(t, &c) && !qdot_k_case(t, &c)) continue;
    std::string tagged = std::string(c.name) + " gpt-oss";
    c.name = tagged.c_str();
    test_type(c, seed++, true);
  }
  test_unrouted_not_read();
  test_per_expert(LH_QDOT_F32);
  test_per_expert(LH_QDOT_Q4_K);
  test_refusals();
}
