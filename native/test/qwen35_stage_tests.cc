// The dense stage's Qwen3.5 fields (dense_stage.h) against a float64 reference written here from
// the formulas (llama.cpp's src/models/qwen35.cpp and qwen35moe.cpp), F32 weights (the kernels'
// only rounding is fp32):
//   stage 1 of 3: post(0) a gated attention layer (attn ⊙ σ(gate) before W_o) with a dense SwiGLU;
//                 pre(1) a linear-attention layer (lin_qkv, lin_z, σ(beta), softplus(alpha + dt)·a)
//                 and q_spec for layer 2 from its gated W_q (the query halves, q norm, partial RoPE
//                 with its own cos/sin rows);
//   stage 2 of 3: post(1) a linear layer (attn of Hv·D columns through ssm_out) with a mixture of
//                 experts and a shared expert (σ(x·w)·SwiGLU); pre(2) a gated attention layer (q
//                 and gate split per head, q/k norms, partial RoPE, k, v).
// Then: 1 and 3 threads give the same bits; the typed refusals.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/dense_stage.h"
#include "check.h"
#include "test_rng.h"

namespace {

constexpr uint32_t kD = 64, kHeads = 2, kKv = 1, kHd = 16, kRot = 8, kFfn = 48, kLayers = 3, kT = 5;
constexpr uint32_t kHk = 1, kHv = 2, kLd = 16, kE = 4, kK = 2, kF = 32, kFs = 24;
constexpr uint32_t kQw = kHeads * kHd, kKvw = kKv * kHd, kC = (2 * kHk + kHv) * kLd, kV = kHv * kLd;
constexpr float kEps = 1e-6f;

using Vec = std::vector<double>;

struct W {
  uint32_t rows, cols;
  std::vector<float> v;
  lh_dense_matrix m() const { return lh_dense_matrix{reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4, LH_QDOT_F32, rows, cols, nullptr}; }
};

W weight(Rng& rng, uint32_t rows, uint32_t cols, float gain = 1.0f) {
  W w{rows, cols, std::vector<float>(static_cast<size_t>(rows) * cols)};
  for (float& x : w.v) x = gain * rng.normal() / std::sqrt(static_cast<float>(cols));
  return w;
}

std::vector<float> vec(Rng& rng, uint32_t n, float mean, float std) {
  std::vector<float> v(n);
  for (float& x : v) x = mean + std * rng.normal();
  return v;
}

// y [T, rows] = x [T, cols]·wᵀ
Vec mm(const Vec& x, const W& w) {
  const size_t T = x.size() / w.cols;
  Vec y(T * w.rows, 0.0);
  for (size_t t = 0; t < T; ++t)
    for (uint32_t r = 0; r < w.rows; ++r) {
      double s = 0;
      for (uint32_t c = 0; c < w.cols; ++c) s += x[t * w.cols + c] * w.v[static_cast<size_t>(r) * w.cols + c];
      y[t * w.rows + r] = s;
    }
  return y;
}

// rows of n: x / sqrt(mean(x²) + eps) · w
Vec rms(const Vec& x, const std::vector<float>& w, uint32_t n) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double ss = 0;
    for (uint32_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const double s = 1 / std::sqrt(ss / n + kEps);
    for (uint32_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * s * w[i];
  }
  return y;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }

Vec swiglu(const Vec& x, const W& g, const W& u, const W& d) {
  Vec a = mm(x, g);
  const Vec b = mm(x, u);
  for (size_t i = 0; i < a.size(); ++i) a[i] = silu(a[i]) * b[i];
  return mm(a, d);
}

// NeoX RoPE over the first kRot dims of each head of x [T, heads·kHd] (cos/sin [T, kRot/2])
void rope(Vec& x, uint32_t heads, const std::vector<float>& cos, const std::vector<float>& sin) {
  const uint32_t half = kRot / 2;
  for (uint32_t t = 0; t < kT; ++t)
    for (uint32_t h = 0; h < heads; ++h) {
      double* v = &x[(static_cast<size_t>(t) * heads + h) * kHd];
      for (uint32_t i = 0; i < half; ++i) {
        const double c = cos[t * half + i], s = sin[t * half + i], a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = a * s + b * c;
      }
    }
}

// A gated W_q's rows [T, heads·2hd] split: half 0 the queries, 1 the gates
Vec half_of(const Vec& rows, uint32_t half) {
  Vec out(static_cast<size_t>(kT) * kQw);
  for (size_t th = 0; th < static_cast<size_t>(kT) * kHeads; ++th)
    for (uint32_t i = 0; i < kHd; ++i) out[th * kHd + i] = rows[th * 2 * kHd + half * kHd + i];
  return out;
}

double rel_err(const float* got, const Vec& want) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::fmax(worst, std::fabs(got[i] - want[i]));
    scale = std::fmax(scale, std::fabs(want[i]));
  }
  return worst / scale;
}

Vec to_vec(const std::vector<float>& x) { return Vec(x.begin(), x.end()); }

struct Io {
  std::vector<float> q, k, v, gate, q_spec, h_next, lin_qkv, lin_z, lin_beta, lin_decay;
};

lh_status run(const lh_dense_stage_config& c, const std::vector<float>& h, const std::vector<float>& attn, const std::vector<float>* gate_in, const std::vector<float>& cos,
              const std::vector<float>& sin, bool linear, Io& out) {
  lh_dense_stage* st = nullptr;
  const char* why = nullptr;
  lh_status r = lh_dense_stage_create(&c, &st, &why);
  if (r != LH_OK) {
    std::printf("info  qwen35 stage: create failed: %s\n", why ? why : "?");
    return r;
  }
  lh_dense_stage_io io{};
  io.tokens = kT;
  io.h = h.data();
  io.attn = attn.data();
  io.gate_in = gate_in ? gate_in->data() : nullptr;
  out.h_next.assign(static_cast<size_t>(kT) * kD, 0.0f);
  io.h_next = out.h_next.data();
  if (linear) {
    io.spec_rope_cos = cos.data();
    io.spec_rope_sin = sin.data();
    out.lin_qkv.assign(static_cast<size_t>(kT) * kC, 0.0f);
    out.lin_z.assign(static_cast<size_t>(kT) * kV, 0.0f);
    out.lin_beta.assign(static_cast<size_t>(kT) * kHv, 0.0f);
    out.lin_decay.assign(static_cast<size_t>(kT) * kHv, 0.0f);
    out.q_spec.assign(static_cast<size_t>(kT) * kQw, 0.0f);
    io.lin_qkv = out.lin_qkv.data();
    io.lin_z = out.lin_z.data();
    io.lin_beta = out.lin_beta.data();
    io.lin_decay = out.lin_decay.data();
    io.q_spec = out.q_spec.data();
  } else {
    io.rope_cos = cos.data();
    io.rope_sin = sin.data();
    out.q.assign(static_cast<size_t>(kT) * kQw, 0.0f);
    out.gate.assign(static_cast<size_t>(kT) * kQw, 0.0f);
    out.k.assign(static_cast<size_t>(kT) * kKvw, 0.0f);
    out.v.assign(static_cast<size_t>(kT) * kKvw, 0.0f);
    io.q = out.q.data();
    io.gate = out.gate.data();
    io.k = out.k.data();
    io.v = out.v.data();
  }
  r = lh_dense_stage_run(st, &io);
  lh_dense_stage_free(st);
  return r;
}

}  // namespace

void test_qwen35_stage() {
  Rng rng(3535);
  lh_dense_stage_config base{};
  base.layers = kLayers;
  base.hidden = kD;
  base.heads = kHeads;
  base.kv_heads = kKv;
  base.head_dim = kHd;
  base.rotary_dim = kRot;
  base.ffn = kFfn;
  base.vocab = 8;
  base.eps = kEps;
  base.rope_layout = LH_ROPE_NEOX;
  base.impl = LH_QDOT_AUTO;
  base.q_gated = 1;
  const std::vector<float> h = vec(rng, kT * kD, 0, 1), attn_full = vec(rng, kT * kQw, 0, 1), gate_in = vec(rng, kT * kQw, 0, 2), attn_lin = vec(rng, kT * kV, 0, 1);
  std::vector<float> cos(kT * kRot / 2), sin(kT * kRot / 2);
  for (uint32_t t = 0; t < kT; ++t)
    for (uint32_t i = 0; i < kRot / 2; ++i) {
      const double a = (37 + t) * std::pow(10000.0, -2.0 * i / kRot);
      cos[t * kRot / 2 + i] = static_cast<float>(std::cos(a));
      sin[t * kRot / 2 + i] = static_cast<float>(std::sin(a));
    }
  const std::vector<float> norm = vec(rng, kD, 1, 0.1f), ffn_norm = vec(rng, kD, 1, 0.1f), q_norm = vec(rng, kHd, 1, 0.1f), k_norm = vec(rng, kHd, 1, 0.1f);
  const std::vector<float> dt = vec(rng, kHv, -1, 0.5f);
  std::vector<float> a(kHv);
  for (float& x : a) x = -0.05f - 0.45f * rng.uniform();
  // stage 1: post(0) gated attention + dense MLP; pre(1) linear with q_spec for layer 2
  const W wo = weight(rng, kD, kQw), fg = weight(rng, kFfn, kD), fu = weight(rng, kFfn, kD), fd = weight(rng, kD, kFfn);
  const W lqkv = weight(rng, kC, kD), lz = weight(rng, kV, kD), lb = weight(rng, kHv, kD, 3), la = weight(rng, kHv, kD, 3), q2 = weight(rng, 2 * kQw, kD);
  lh_dense_stage_config c1 = base;
  c1.stage = 1;
  c1.attn_gated = 1;
  c1.attn_output = wo.m();
  c1.ffn_gate = fg.m();
  c1.ffn_up = fu.m();
  c1.ffn_down = fd.m();
  c1.ffn_norm = ffn_norm.data();
  c1.norm = norm.data();
  c1.lin_key_heads = kHk;
  c1.lin_value_heads = kHv;
  c1.lin_head_dim = kLd;
  c1.lin_qkv = lqkv.m();
  c1.lin_z = lz.m();
  c1.lin_beta = lb.m();
  c1.lin_alpha = la.m();
  c1.lin_dt = dt.data();
  c1.lin_a = a.data();
  c1.q_spec = q2.m();
  c1.q_spec_norm = q_norm.data();
  {
    Vec gated = to_vec(attn_full);
    for (size_t i = 0; i < gated.size(); ++i) gated[i] *= sigmoid(gate_in[i]);
    const Vec o = mm(gated, wo);
    Vec sum(kT * kD);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = h[i] + o[i];
    const Vec mlp = swiglu(rms(sum, ffn_norm, kD), fg, fu, fd);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += mlp[i];
    const Vec x = rms(sum, norm, kD);
    const Vec qkv = mm(x, lqkv), z = mm(x, lz);
    Vec beta = mm(x, lb), decay = mm(x, la);
    for (size_t i = 0; i < beta.size(); ++i) {
      beta[i] = sigmoid(beta[i]);
      const double v = decay[i] + dt[i % kHv];
      decay[i] = (v > 20 ? v : std::log1p(std::exp(v))) * a[i % kHv];
    }
    Vec qs = rms(half_of(mm(x, q2), 0), q_norm, kHd);
    rope(qs, kHeads, cos, sin);
    Io first;
    for (const uint32_t threads : {1u, 3u}) {
      c1.threads = threads;
      Io out;
      const lh_status r = run(c1, h, attn_full, &gate_in, cos, sin, true, out);
      const double e = r != LH_OK ? 1 : std::fmax(std::fmax(std::fmax(rel_err(out.h_next.data(), sum), rel_err(out.lin_qkv.data(), qkv)), std::fmax(rel_err(out.lin_z.data(), z), rel_err(out.lin_beta.data(), beta))),
                                                  std::fmax(rel_err(out.lin_decay.data(), decay), rel_err(out.q_spec.data(), qs)));
      char name[160];
      std::snprintf(name, sizeof name, "qwen35 stage: gated attention's post, linear layer's pre and gated q_spec vs float64 (%u threads)", threads);
      check(r == LH_OK && e < 1e-5, name, "status %d, max relative error %.3g", r, e);
      if (threads == 1) std::printf("info  qwen35 stage 1 (F32) vs float64: max relative error %.3g\n", e);
      if (threads == 1) first = out;
      else
        check(out.h_next == first.h_next && out.lin_qkv == first.lin_qkv && out.lin_decay == first.lin_decay && out.q_spec == first.q_spec,
              "qwen35 stage 1: 1 and 3 threads give the same bits");
    }
  }
  // stage 2: post(1) linear (ssm_out) + experts + shared expert; pre(2) gated attention
  const W so = weight(rng, kD, kV), router = weight(rng, kE, kD, 4), ge = weight(rng, kE * kF, kD), ue = weight(rng, kE * kF, kD), de = weight(rng, kE * kD, kF);
  const W sg = weight(rng, kFs, kD), su = weight(rng, kFs, kD), sd = weight(rng, kD, kFs), wq = weight(rng, 2 * kQw, kD), wk = weight(rng, kKvw, kD), wv = weight(rng, kKvw, kD);
  const std::vector<float> shexp_gate = vec(rng, kD, 0, 0.125f);
  lh_dense_stage_config c2 = base;
  c2.stage = 2;
  c2.attn_cols = kV;
  c2.attn_output = so.m();
  c2.ffn_norm = ffn_norm.data();
  c2.norm = norm.data();
  c2.n_experts = kE;
  c2.n_experts_used = kK;
  c2.expert_ffn = kF;
  c2.norm_topk = 1;
  c2.router = router.m();
  c2.gate_exps = ge.m();
  c2.up_exps = ue.m();
  c2.down_exps = de.m();
  c2.shexp_ffn = kFs;
  c2.shexp_gate = sg.m();
  c2.shexp_up = su.m();
  c2.shexp_down = sd.m();
  c2.shexp_gate_inp = shexp_gate.data();
  c2.q = wq.m();
  c2.k = wk.m();
  c2.v = wv.m();
  c2.q_norm = q_norm.data();
  c2.k_norm = k_norm.data();
  {
    const Vec o = mm(to_vec(attn_lin), so);
    Vec sum(kT * kD);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = h[i] + o[i];
    const Vec x = rms(sum, ffn_norm, kD);
    const Vec logits = mm(x, router);
    for (uint32_t t = 0; t < kT; ++t) {
      const Vec xt(x.begin() + t * kD, x.begin() + (t + 1) * kD);
      double mx = -1e300, z = 0;
      for (uint32_t e = 0; e < kE; ++e) mx = std::fmax(mx, logits[t * kE + e]);
      Vec p(kE);
      for (uint32_t e = 0; e < kE; ++e) z += (p[e] = std::exp(logits[t * kE + e] - mx));
      bool taken[kE] = {};
      uint32_t picks[kK];
      double wsum = 0;
      for (uint32_t i = 0; i < kK; ++i) {
        uint32_t best = kE;
        for (uint32_t e = 0; e < kE; ++e)
          if (!taken[e] && (best == kE || p[e] > p[best])) best = e;
        taken[best] = true;
        picks[i] = best;
        wsum += p[best] / z;
      }
      for (uint32_t i = 0; i < kK; ++i) {
        const uint32_t e = picks[i];
        const W g{kF, kD, std::vector<float>(ge.v.begin() + e * kF * kD, ge.v.begin() + (e + 1) * kF * kD)};
        const W u{kF, kD, std::vector<float>(ue.v.begin() + e * kF * kD, ue.v.begin() + (e + 1) * kF * kD)};
        const W d{kD, kF, std::vector<float>(de.v.begin() + e * kD * kF, de.v.begin() + (e + 1) * kD * kF)};
        const Vec y = swiglu(xt, g, u, d);
        for (uint32_t j = 0; j < kD; ++j) sum[t * kD + j] += p[e] / z / wsum * y[j];
      }
      double logit = 0;
      for (uint32_t j = 0; j < kD; ++j) logit += xt[j] * shexp_gate[j];
      const Vec ys = swiglu(xt, sg, su, sd);
      for (uint32_t j = 0; j < kD; ++j) sum[t * kD + j] += sigmoid(logit) * ys[j];
    }
    const Vec xn = rms(sum, norm, kD);
    const Vec rows = mm(xn, wq);
    Vec q = rms(half_of(rows, 0), q_norm, kHd), k = rms(mm(xn, wk), k_norm, kHd);
    const Vec gate = half_of(rows, 1), v = mm(xn, wv);
    rope(q, kHeads, cos, sin);
    rope(k, kKv, cos, sin);
    Io first;
    for (const uint32_t threads : {1u, 3u}) {
      c2.threads = threads;
      Io out;
      const lh_status r = run(c2, h, attn_lin, nullptr, cos, sin, false, out);
      const double e = r != LH_OK ? 1 : std::fmax(std::fmax(rel_err(out.h_next.data(), sum), rel_err(out.q.data(), q)), std::fmax(std::fmax(rel_err(out.gate.data(), gate), rel_err(out.k.data(), k)), rel_err(out.v.data(), v)));
      char name[180];
      std::snprintf(name, sizeof name, "qwen35 stage: linear layer's post (ssm_out), experts + shared expert, gated attention's pre vs float64 (%u threads)", threads);
      check(r == LH_OK && e < 1e-5, name, "status %d, max relative error %.3g", r, e);
      if (threads == 1) std::printf("info  qwen35 stage 2 (F32) vs float64: max relative error %.3g\n", e);
      if (threads == 1) first = out;
      else check(out.h_next == first.h_next && out.q == first.q && out.gate == first.gate && out.k == first.k, "qwen35 stage 2: 1 and 3 threads give the same bits");
    }
  }
  // refusals
  {
    lh_dense_stage_config bad = c1;
    bad.threads = 1;
    bad.lin_value_heads = 3;  // not a multiple of 2 key heads
    bad.lin_key_heads = 2;
    lh_dense_stage* st = nullptr;
    const char* why = nullptr;
    check(lh_dense_stage_create(&bad, &st, &why) == LH_BAD_ARGUMENT && st == nullptr, "qwen35 stage: value heads not a multiple of the key heads refused");
    bad = c1;
    bad.threads = 1;
    bad.lin_dt = nullptr;
    check(lh_dense_stage_create(&bad, &st, &why) == LH_BAD_ARGUMENT, "qwen35 stage: a linear layer without ssm_dt refused");
    bad = c1;
    bad.threads = 1;
    bad.shexp_ffn = kFs;  // a shared expert on a dense MLP
    check(lh_dense_stage_create(&bad, &st, &why) == LH_BAD_ARGUMENT, "qwen35 stage: a shared expert without routed experts refused");
    bad = c2;
    bad.threads = 1;
    bad.shexp_gate_inp = nullptr;
    check(lh_dense_stage_create(&bad, &st, &why) == LH_BAD_ARGUMENT, "qwen35 stage: a shared expert without its gate refused");
    // a gated stage run without its gate input
    lh_dense_stage_config ok = c1;
    ok.threads = 1;
    Io out;
    check(run(ok, h, attn_full, nullptr, cos, sin, true, out) == LH_BAD_ARGUMENT, "qwen35 stage: attn_gated without the gate input refused");
  }
}
