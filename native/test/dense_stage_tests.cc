// The dense stage (dense_stage.h) against a float64 reference of the same llama stage written here
// from the formulas (not from dense_stage.cc), on a small random model: F32 weights (the kernels'
// only rounding is fp32, so outputs agree to ~1e-5) and Q8_0 weights (the activations are rounded to
// 8 bits as llama.cpp does: a relative error of ~1e-2 at most, NMSE far below). Then what the
// splitting must not change (1, 2 and 3 threads give the same bits), a chunk of T tokens against T
// single-token runs, the typed refusals, and the worker pool on its own.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/dense_stage.h"
#include "../src/fp16.h"
#include "../src/quant_dot.h"
#include "../src/worker_pool.h"
#include "check.h"
#include "test_rng.h"

namespace {

// A model small enough to reference in double: 3 layers, GQA 4/2, head_dim 16.
constexpr uint32_t kD = 64, kHeads = 4, kKv = 2, kHd = 16, kFfn = 96, kVocab = 40, kLayers = 3;
constexpr uint32_t kQw = kHeads * kHd, kKvw = kKv * kHd;

// One weight: its float values [rows, cols] and the bytes in `type`'s GGUF layout (F32, Q8_0,
// MXFP4 or Q5_0); for the quantized types `values` are the dequantized ones, so the reference multiplies by exactly
// what the file holds.
struct Weight {
  uint32_t rows = 0, cols = 0, type = LH_QDOT_F32;
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  std::vector<float> bias;
  lh_dense_matrix matrix() const { return lh_dense_matrix{bytes.data(), bytes.size(), type, rows, cols, bias.empty() ? nullptr : bias.data()}; }
};

Weight make_weight(Rng& rng, uint32_t rows, uint32_t cols, uint32_t type, bool with_bias) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.type = type;
  w.values.resize(static_cast<size_t>(rows) * cols);
  const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
  for (float& v : w.values) v = rng.normal() * scale;
  if (type == LH_QDOT_F32) {
    w.bytes.resize(w.values.size() * 4);
    std::memcpy(w.bytes.data(), w.values.data(), w.bytes.size());
  } else if (type == LH_QDOT_MXFP4) {
    // as ggml's quantize_row_mxfp4_ref: e = floor(log2 amax) − 2 + 127, d = 2^(e−128), the nearest of kv·d
    static constexpr int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    w.bytes.assign(w.values.size() / 32 * 17, 0);
    for (size_t b = 0; b < w.values.size() / 32; ++b) {
      float* x = &w.values[b * 32];
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
      const int e = amax > 0 ? static_cast<int>(std::floor(std::log2(amax))) - 2 + 127 : 0;
      const float d = std::ldexp(1.0f, e - 128);
      uint8_t* out = &w.bytes[b * 17];
      out[0] = static_cast<uint8_t>(e);
      for (int i = 0; i < 32; ++i) {
        int best = 0;
        for (int c = 1; c < 16; ++c)
          if (std::fabs(kv[c] * d - x[i]) < std::fabs(kv[best] * d - x[i])) best = c;
        out[1 + i % 16] |= static_cast<uint8_t>(i < 16 ? best : best << 4);
        x[i] = kv[best] * d;  // what the file holds
      }
    }
  } else if (type == LH_QDOT_Q5_0) {
    // as ggml's quantize_row_q5_0_ref: d = (the value of largest magnitude) / −16 as fp16, u = min(31, (int)(x/d + 16.5))
    w.bytes.assign(w.values.size() / 32 * 22, 0);
    for (size_t b = 0; b < w.values.size() / 32; ++b) {
      float* x = &w.values[b * 32];
      float amax = 0, vmax = 0;
      for (int i = 0; i < 32; ++i)
        if (std::fabs(x[i]) > amax) {
          amax = std::fabs(x[i]);
          vmax = x[i];
        }
      const float d_exact = vmax / -16.0f, id = d_exact != 0 ? 1.0f / d_exact : 0.0f;
      const uint16_t dh = lh_fp32_to_fp16(d_exact);
      const float d = lh_fp16_to_fp32(dh);
      uint8_t* out = &w.bytes[b * 22];
      std::memcpy(out, &dh, 2);
      uint32_t qh = 0;
      for (int i = 0; i < 32; ++i) {
        const int u = std::min(31, static_cast<int>(x[i] * id + 16.5f));
        out[6 + i % 16] |= static_cast<uint8_t>(i < 16 ? (u & 15) : (u & 15) << 4);
        qh |= static_cast<uint32_t>(u >> 4) << i;
        x[i] = d * static_cast<float>(u - 16);  // what the file holds
      }
      std::memcpy(out + 2, &qh, 4);
    }
  } else {  // Q8_0: per 32, d = amax / 127 as fp16, q = round(x / d)
    w.bytes.resize(w.values.size() / 32 * 34);
    for (size_t b = 0; b < w.values.size() / 32; ++b) {
      float* x = &w.values[b * 32];
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
      const uint16_t dh = lh_fp32_to_fp16(amax / 127.0f);
      const float d = lh_fp16_to_fp32(dh);
      uint8_t* out = &w.bytes[b * 34];
      std::memcpy(out, &dh, 2);
      for (int i = 0; i < 32; ++i) {
        const int q = d == 0 ? 0 : static_cast<int>(std::lround(x[i] / d));
        const int8_t c = static_cast<int8_t>(q < -127 ? -127 : q > 127 ? 127 : q);
        out[2 + i] = static_cast<uint8_t>(c);
        x[i] = d * c;  // what the file holds
      }
    }
  }
  if (with_bias) {
    w.bias.resize(rows);
    for (float& v : w.bias) v = 0.1f * rng.normal();
  }
  return w;
}

struct Layer {
  Weight q, k, v, o, gate, up, down;
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> q_norm, k_norm;  // [kHd]: Qwen3's per-head norms, used by the qk-norm runs
};

struct Model {
  std::vector<Layer> layers;
  std::vector<float> output_norm;
  Weight head;
};

std::vector<float> norm_vector(Rng& rng) {
  std::vector<float> w(kD);
  for (float& v : w) v = 1.0f + 0.2f * rng.normal();
  return w;
}

Model make_model(uint32_t type, uint64_t seed, bool bias) {
  Rng rng(seed);
  Rng head_rng(seed + 1000);  // the per-head norm vectors draw apart, so the other weights stay what they were
  Model m;
  for (uint32_t l = 0; l < kLayers; ++l) {
    Layer L;
    L.q = make_weight(rng, kQw, kD, type, bias);
    L.k = make_weight(rng, kKvw, kD, type, bias);
    L.v = make_weight(rng, kKvw, kD, type, bias);
    L.o = make_weight(rng, kD, kQw, type, false);
    L.gate = make_weight(rng, kFfn, kD, type, false);
    L.up = make_weight(rng, kFfn, kD, type, false);
    L.down = make_weight(rng, kD, kFfn, type, false);
    L.attn_norm = norm_vector(rng);
    L.ffn_norm = norm_vector(rng);
    for (std::vector<float>* v : {&L.q_norm, &L.k_norm}) {
      v->resize(kHd);
      for (float& x : *v) x = 1.0f + 0.3f * head_rng.normal();
    }
    m.layers.push_back(L);
  }
  m.output_norm = norm_vector(rng);
  m.head = make_weight(rng, kVocab, kD, type, false);
  return m;
}

lh_dense_stage_config config_for(const Model& m, uint32_t s, bool spec, uint32_t threads, uint32_t layout, bool qk_norm = false) {
  lh_dense_stage_config c{};
  c.stage = s;
  c.layers = kLayers;
  c.hidden = kD;
  c.heads = kHeads;
  c.kv_heads = kKv;
  c.head_dim = kHd;
  c.ffn = kFfn;
  c.vocab = kVocab;
  c.eps = 1e-5f;
  c.rope_layout = layout;
  c.threads = threads;
  c.impl = LH_QDOT_AUTO;
  c.norm = s == kLayers ? m.output_norm.data() : m.layers[s].attn_norm.data();
  if (s > 0) {
    const Layer& p = m.layers[s - 1];
    c.attn_output = p.o.matrix();
    c.ffn_gate = p.gate.matrix();
    c.ffn_up = p.up.matrix();
    c.ffn_down = p.down.matrix();
    c.ffn_norm = p.ffn_norm.data();
  }
  if (s < kLayers) {
    c.q = m.layers[s].q.matrix();
    c.k = m.layers[s].k.matrix();
    c.v = m.layers[s].v.matrix();
    if (spec && s + 1 < kLayers) c.q_spec = m.layers[s + 1].q.matrix();
    if (qk_norm) {
      c.q_norm = m.layers[s].q_norm.data();
      c.k_norm = m.layers[s].k_norm.data();
      if (spec && s + 1 < kLayers) c.q_spec_norm = m.layers[s + 1].q_norm.data();
    }
  } else {
    c.lm_head = m.head.matrix();
  }
  return c;
}

// ---- the float64 reference, from the formulas of dense_stage.h ----
using Vec = std::vector<double>;

Vec linear_ref(const Weight& w, const Vec& x, uint32_t T) {  // x [T, cols] -> [T, rows]
  Vec y(static_cast<size_t>(T) * w.rows);
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t r = 0; r < w.rows; ++r) {
      double acc = w.bias.empty() ? 0.0 : w.bias[r];
      for (uint32_t i = 0; i < w.cols; ++i) acc += static_cast<double>(w.values[static_cast<size_t>(r) * w.cols + i]) * x[static_cast<size_t>(t) * w.cols + i];
      y[static_cast<size_t>(t) * w.rows + r] = acc;
    }
  return y;
}

Vec rms_ref(const Vec& x, const std::vector<float>& w, uint32_t T) {
  Vec y(x.size());
  for (uint32_t t = 0; t < T; ++t) {
    double ss = 0;
    for (uint32_t i = 0; i < kD; ++i) ss += x[t * kD + i] * x[t * kD + i];
    const double inv = 1.0 / std::sqrt(ss / kD + 1e-5);
    for (uint32_t i = 0; i < kD; ++i) y[t * kD + i] = x[t * kD + i] * inv * w[i];
  }
  return y;
}

// every head row of x [rows, kHd] RMSNormed on its own (Qwen3's q/k norm), in place
void head_rms_ref(Vec& x, uint32_t rows, const std::vector<float>& w) {
  for (uint32_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (uint32_t i = 0; i < kHd; ++i) ss += x[r * kHd + i] * x[r * kHd + i];
    const double inv = 1.0 / std::sqrt(ss / kHd + 1e-5);
    for (uint32_t i = 0; i < kHd; ++i) x[r * kHd + i] *= inv * w[i];
  }
}

void rope_ref(Vec& x, uint32_t T, uint32_t heads, const std::vector<float>& cos, const std::vector<float>& sin, uint32_t layout) {
  const uint32_t half = kHd / 2;
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t h = 0; h < heads; ++h)
      for (uint32_t i = 0; i < half; ++i) {
        const size_t base = (static_cast<size_t>(t) * heads + h) * kHd;
        const size_t a = base + (layout == LH_ROPE_INTERLEAVED ? 2 * i : i), b = base + (layout == LH_ROPE_INTERLEAVED ? 2 * i + 1 : i + half);
        const double c = cos[t * half + i], s = sin[t * half + i], x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
      }
}

struct Outputs {
  Vec q, k, v, q_spec, h_next, logits;
};

Outputs stage_ref(const Model& m, uint32_t s, bool spec, const Vec& h, const Vec& attn, const std::vector<float>& cos, const std::vector<float>& sin,
                  const std::vector<uint32_t>& rows, uint32_t T, uint32_t layout, bool qk_norm = false) {
  Outputs out;
  Vec normed;
  if (s == 0) {
    normed = rms_ref(h, m.layers[0].attn_norm, T);
  } else {
    const Layer& p = m.layers[s - 1];
    Vec sum = linear_ref(p.o, attn, T);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += h[i];
    const Vec x = rms_ref(sum, p.ffn_norm, T);
    Vec g = linear_ref(p.gate, x, T);
    const Vec u = linear_ref(p.up, x, T);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const Vec mlp = linear_ref(p.down, g, T);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += mlp[i];
    out.h_next = sum;
    normed = rms_ref(sum, s == kLayers ? m.output_norm : m.layers[s].attn_norm, T);
  }
  if (s == kLayers) {
    Vec picked;
    for (uint32_t r : rows) picked.insert(picked.end(), normed.begin() + r * kD, normed.begin() + (r + 1) * kD);
    out.logits = linear_ref(m.head, picked, static_cast<uint32_t>(rows.size()));
    return out;
  }
  out.q = linear_ref(m.layers[s].q, normed, T);
  out.k = linear_ref(m.layers[s].k, normed, T);
  out.v = linear_ref(m.layers[s].v, normed, T);
  if (qk_norm) {
    head_rms_ref(out.q, T * kHeads, m.layers[s].q_norm);
    head_rms_ref(out.k, T * kKv, m.layers[s].k_norm);
  }
  rope_ref(out.q, T, kHeads, cos, sin, layout);
  rope_ref(out.k, T, kKv, cos, sin, layout);
  if (spec && s + 1 < kLayers) {
    out.q_spec = linear_ref(m.layers[s + 1].q, normed, T);
    if (qk_norm) head_rms_ref(out.q_spec, T * kHeads, m.layers[s + 1].q_norm);  // layer s+1's q, as layer s+1 computes it
    rope_ref(out.q_spec, T, kHeads, cos, sin, layout);
  }
  return out;
}

// ---- running the stage ----
struct Run {
  lh_status status = LH_INTERNAL;
  std::vector<float> q, k, v, q_spec, h_next, logits;
};

Run run_stage(lh_dense_stage* st, uint32_t s, bool spec, const std::vector<float>& h, const std::vector<float>& attn, const std::vector<float>& cos,
              const std::vector<float>& sin, const std::vector<uint32_t>& rows, uint32_t T) {
  Run r;
  lh_dense_stage_io io{};
  io.tokens = T;
  io.h = h.data();
  io.attn = s > 0 ? attn.data() : nullptr;
  if (s < kLayers) {
    io.rope_cos = cos.data();
    io.rope_sin = sin.data();
    r.q.assign(static_cast<size_t>(T) * kQw, -7.0f);
    r.k.assign(static_cast<size_t>(T) * kKvw, -7.0f);
    r.v.assign(static_cast<size_t>(T) * kKvw, -7.0f);
    io.q = r.q.data();
    io.k = r.k.data();
    io.v = r.v.data();
    if (spec && s + 1 < kLayers) {
      r.q_spec.assign(static_cast<size_t>(T) * kQw, -7.0f);
      io.q_spec = r.q_spec.data();
    }
    if (s > 0) {
      r.h_next.assign(static_cast<size_t>(T) * kD, -7.0f);
      io.h_next = r.h_next.data();
    }
  } else {
    io.rows = rows.data();
    io.n_rows = static_cast<uint32_t>(rows.size());
    r.logits.assign(rows.size() * kVocab, -7.0f);
    io.logits = r.logits.data();
  }
  r.status = lh_dense_stage_run(st, &io);
  return r;
}

// max |a − b| / max(max |b|, 1e-30)
double rel_err(const std::vector<float>& a, const Vec& b) {
  if (a.size() != b.size()) return 1e30;
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::fmax(num, std::fabs(a[i] - b[i]));
    den = std::fmax(den, std::fabs(b[i]));
  }
  return num / den;
}

bool same_bits(const Run& a, const Run& b) {
  return a.q == b.q && a.k == b.k && a.v == b.v && a.q_spec == b.q_spec && a.h_next == b.h_next && a.logits == b.logits;
}

std::vector<float> random_floats(Rng& rng, size_t n, float scale) {
  std::vector<float> x(n);
  for (float& v : x) v = scale * rng.normal();
  return x;
}

void rope_rows(uint32_t p0, uint32_t T, std::vector<float>* cos, std::vector<float>* sin) {
  const uint32_t half = kHd / 2;
  cos->resize(static_cast<size_t>(T) * half);
  sin->resize(static_cast<size_t>(T) * half);
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t i = 0; i < half; ++i) {
      const double a = (p0 + t) * std::pow(10000.0, -2.0 * i / kHd);
      (*cos)[t * half + i] = static_cast<float>(std::cos(a));
      (*sin)[t * half + i] = static_cast<float>(std::sin(a));
    }
}

void check_against_reference(uint32_t type, const char* tname, double bound, bool qk_norm = false) {
  lh_qdot_kernels probe{};
  if (!lh_qdot_kernels_for(type, LH_QDOT_AUTO, &probe)) {
    check(false, "dense stage: kernels for the test's weight type", "type %s has none", tname);
    return;
  }
  const Model m = make_model(type, type == LH_QDOT_F32 ? 11 : 12, true);
  Rng rng(99);
  const uint32_t T = 7;
  const std::vector<uint32_t> rows = {6, 0, 3};
  std::vector<float> cos, sin;
  rope_rows(5, T, &cos, &sin);
  for (const uint32_t layout : {static_cast<uint32_t>(LH_ROPE_NEOX), static_cast<uint32_t>(LH_ROPE_INTERLEAVED)})
    for (uint32_t s = 0; s <= kLayers; ++s) {
      const bool spec = s % 2 == 0;
      const std::vector<float> h = random_floats(rng, static_cast<size_t>(T) * kD, 1.0f), attn = random_floats(rng, static_cast<size_t>(T) * kQw, 0.5f);
      const Vec hd(h.begin(), h.end()), ad(attn.begin(), attn.end());
      const Outputs want = stage_ref(m, s, spec, hd, ad, cos, sin, rows, T, layout, qk_norm);
      lh_dense_stage_config c = config_for(m, s, spec, 2, layout, qk_norm);
      lh_dense_stage* st = nullptr;
      const char* why = nullptr;
      const lh_status cs = lh_dense_stage_create(&c, &st, &why);
      char name[160];
      std::snprintf(name, sizeof name, "dense stage %s %s%s: stage %u of %u%s vs float64 (bound %.0e)", tname, layout ? "interleaved" : "neox",
                    qk_norm ? " q/k norm" : "", s, kLayers, spec && s + 1 < kLayers ? " + q_spec" : "", bound);
      if (cs != LH_OK) {
        check(false, name, "create: %s (%s)", lh_status_name(cs), why ? why : "?");
        continue;
      }
      const Run got = run_stage(st, s, spec, h, attn, cos, sin, rows, T);
      double worst = 0;
      if (s < kLayers) {
        worst = std::fmax(worst, rel_err(got.q, want.q));
        worst = std::fmax(worst, rel_err(got.k, want.k));
        worst = std::fmax(worst, rel_err(got.v, want.v));
        if (spec && s + 1 < kLayers) worst = std::fmax(worst, rel_err(got.q_spec, want.q_spec));
      }
      if (s > 0 && s < kLayers) worst = std::fmax(worst, rel_err(got.h_next, want.h_next));
      if (s == kLayers) worst = std::fmax(worst, rel_err(got.logits, want.logits));
      check(got.status == LH_OK && worst < bound, name, "status %s, worst relative error %.3e", lh_status_name(got.status), worst);
      lh_dense_stage_free(st);
    }
}

void check_threads_and_chunks() {
  const Model m = make_model(LH_QDOT_F32, 21, false);
  Rng rng(5);
  const uint32_t T = 5, s = 1;
  std::vector<float> cos, sin;
  rope_rows(0, T, &cos, &sin);
  const std::vector<float> h = random_floats(rng, static_cast<size_t>(T) * kD, 1.0f), attn = random_floats(rng, static_cast<size_t>(T) * kQw, 0.5f);
  Run runs[3];
  for (uint32_t threads = 1; threads <= 3; ++threads) {
    lh_dense_stage_config c = config_for(m, s, true, threads, LH_ROPE_NEOX);
    lh_dense_stage* st = nullptr;
    if (lh_dense_stage_create(&c, &st, nullptr) != LH_OK) {
      check(false, "dense stage: threads 1, 2, 3", "create failed");
      return;
    }
    runs[threads - 1] = run_stage(st, s, true, h, attn, cos, sin, {}, T);
    lh_dense_stage_free(st);
  }
  check(runs[0].status == LH_OK && same_bits(runs[0], runs[1]) && same_bits(runs[0], runs[2]), "dense stage: 1, 2 and 3 threads give the same bits");
  // T tokens at once against T runs of one token (their own RoPE rows): the same up to float order
  lh_dense_stage_config c = config_for(m, s, true, 2, LH_ROPE_NEOX);
  lh_dense_stage* st = nullptr;
  lh_dense_stage_create(&c, &st, nullptr);
  double worst = 0;
  const uint32_t half = kHd / 2;
  for (uint32_t t = 0; t < T; ++t) {
    const std::vector<float> h1(h.begin() + t * kD, h.begin() + (t + 1) * kD), a1(attn.begin() + t * kQw, attn.begin() + (t + 1) * kQw);
    const std::vector<float> c1(cos.begin() + t * half, cos.begin() + (t + 1) * half), s1(sin.begin() + t * half, sin.begin() + (t + 1) * half);
    const Run one = run_stage(st, s, true, h1, a1, c1, s1, {}, 1);
    for (uint32_t i = 0; i < kQw; ++i) worst = std::fmax(worst, std::fabs(one.q[i] - runs[1].q[t * kQw + i]));
    for (uint32_t i = 0; i < kD; ++i) worst = std::fmax(worst, std::fabs(one.h_next[i] - runs[1].h_next[t * kD + i]));
  }
  check(worst < 1e-4, "dense stage: a chunk of 5 tokens = 5 single-token runs", "max |diff| %.3e", worst);
  // a non-finite input poisons exactly its own token
  std::vector<float> bad = h;
  bad[2 * kD + 3] = NAN;
  const Run poisoned = run_stage(st, s, true, bad, attn, cos, sin, {}, T);
  bool own_nan = std::isnan(poisoned.h_next[2 * kD]) && std::isnan(poisoned.q[2 * kQw]);
  bool others_finite = true;
  for (uint32_t t = 0; t < T; ++t)
    if (t != 2)
      for (uint32_t i = 0; i < kD; ++i) others_finite = others_finite && std::isfinite(poisoned.h_next[t * kD + i]);
  check(poisoned.status == LH_OK && own_nan && others_finite, "dense stage: a NaN in token 2's input gives NaN in token 2 only");
  lh_dense_stage_free(st);
}

void check_refusals() {
  const Model m = make_model(LH_QDOT_F32, 31, false);
  const char* why = nullptr;
  lh_dense_stage* st = nullptr;
  lh_dense_stage_config c = config_for(m, 1, false, 1, LH_ROPE_NEOX);
  c.q.rows = kQw + 1;
  lh_status s = lh_dense_stage_create(&c, &st, &why);
  check(s == LH_BAD_ARGUMENT && why != nullptr && std::strcmp(why, "attn_q") == 0 && st == nullptr, "dense stage: a wrong shape is refused, naming the tensor",
        "%s / %s", lh_status_name(s), why ? why : "null");
  c = config_for(m, 1, false, 1, LH_ROPE_NEOX);
  c.ffn_down.type = 3;  // Q4_1: no kernels
  s = lh_dense_stage_create(&c, &st, &why);
  check(s == LH_BAD_ARGUMENT && why != nullptr && std::strcmp(why, "ffn_down") == 0, "dense stage: a type without kernels is refused, naming the tensor");
  c = config_for(m, 1, false, 1, LH_ROPE_NEOX);
  c.ffn_up.bytes -= 4;
  s = lh_dense_stage_create(&c, &st, &why);
  check(s == LH_BAD_ARGUMENT && why != nullptr && std::strcmp(why, "ffn_up") == 0, "dense stage: a byte size that does not match the shape is refused");
  c = config_for(m, 1, true, 1, LH_ROPE_NEOX, true);
  c.k_norm = nullptr;
  s = lh_dense_stage_create(&c, &st, &why);
  check(s == LH_BAD_ARGUMENT && st == nullptr, "dense stage: a q norm without a k norm is refused", "%s / %s", lh_status_name(s), why ? why : "null");
  c = config_for(m, 1, true, 1, LH_ROPE_NEOX, true);
  c.q_spec_norm = nullptr;
  s = lh_dense_stage_create(&c, &st, &why);
  check(s == LH_BAD_ARGUMENT && st == nullptr, "dense stage: q/k norms with a q_spec but no q_spec norm are refused (the speculation would skip a norm its layer applies)");
  c = config_for(m, 1, false, 1, LH_ROPE_NEOX);
  c.k_norm = m.layers[1].k_norm.data();
  s = lh_dense_stage_create(&c, &st, &why);
  check(s == LH_BAD_ARGUMENT && st == nullptr, "dense stage: a k norm without a q norm is refused");
  c = config_for(m, kLayers, false, 1, LH_ROPE_NEOX);
  if (lh_dense_stage_create(&c, &st, nullptr) == LH_OK) {
    std::vector<float> h(2 * kD, 0.5f), attn(2 * kQw, 0.1f), logits(kVocab);
    const uint32_t rows[] = {2};
    lh_dense_stage_io io{};
    io.tokens = 2;
    io.h = h.data();
    io.attn = attn.data();
    io.rows = rows;
    io.n_rows = 1;
    io.logits = logits.data();
    check(lh_dense_stage_run(st, &io) == LH_BAD_ARGUMENT, "dense stage: a row index >= T is refused");
    io.attn = nullptr;
    check(lh_dense_stage_run(st, &io) == LH_BAD_ARGUMENT, "dense stage: a missing input is refused");
    lh_dense_stage_free(st);
  } else {
    check(false, "dense stage: head stage for the refusal checks", "create failed");
  }
}

// Gemma 4's additions (dense_stage.h), each against the stage it varies: a KV-shared stage gives the
// same q and h_next with no k, v; v = k's projection equals a stage whose attn_v is attn_k; an output
// scale of 0.5 halves h_next exactly; and the refusals. (Every stage of the real layouts, per-layer
// embeddings included, is held to the onnxruntime stage in app/engine/forward/layers/gemma4-native.test.ts.)
void check_gemma4_layers() {
  const Model m = make_model(LH_QDOT_F32, 41, false);
  Rng rng(17);
  const uint32_t T = 4, s = 1;
  std::vector<float> cos, sin;
  rope_rows(3, T, &cos, &sin);
  const std::vector<float> h = random_floats(rng, static_cast<size_t>(T) * kD, 1.0f), attn = random_floats(rng, static_cast<size_t>(T) * kQw, 0.5f);
  const std::vector<float> ones(kHd, 1.0f);
  auto run = [&](lh_dense_stage_config c, bool kv) -> Run {
    lh_dense_stage* st = nullptr;
    Run r;
    if (lh_dense_stage_create(&c, &st, nullptr) != LH_OK) return r;
    r = run_stage(st, s, false, h, attn, cos, sin, {}, T);
    if (!kv) {  // a KV-shared stage must not need (or touch) k and v
      lh_dense_stage_io io{};
      io.tokens = T;
      io.h = h.data();
      io.attn = attn.data();
      io.rope_cos = cos.data();
      io.rope_sin = sin.data();
      io.q = r.q.data();
      io.h_next = r.h_next.data();
      r.status = lh_dense_stage_run(st, &io);
    }
    lh_dense_stage_free(st);
    return r;
  };
  const lh_dense_stage_config base = config_for(m, s, false, 2, LH_ROPE_NEOX, true);
  const Run plain = run(base, true);
  lh_dense_stage_config c = base;
  c.kv_shared = 1;
  c.k = lh_dense_matrix{};
  c.v = lh_dense_matrix{};
  c.k_norm = nullptr;
  const Run shared = run(c, false);
  check(plain.status == LH_OK && shared.status == LH_OK && shared.q == plain.q && shared.h_next == plain.h_next,
        "dense stage (Gemma 4): a KV-shared stage computes the same q and h_next, and no k or v");
  // v = k: against a stage whose attn_v is attn_k, both with the weightless v norm
  c = base;
  c.v = m.layers[s].k.matrix();
  c.v_norm = ones.data();
  const Run v_is_k_weights = run(c, true);
  c = base;
  c.v_from_k = 1;
  c.v = lh_dense_matrix{};
  c.v_norm = ones.data();
  const Run v_from_k = run(c, true);
  bool normed = v_from_k.status == LH_OK;  // each head row of v has mean square ~1 (an RMS norm without a weight)
  for (uint32_t r = 0; normed && r < T * kKv; ++r) {
    double ss = 0;
    for (uint32_t i = 0; i < kHd; ++i) ss += static_cast<double>(v_from_k.v[r * kHd + i]) * v_from_k.v[r * kHd + i];
    normed = std::fabs(ss / kHd - 1.0) < 1e-3;
  }
  check(v_is_k_weights.status == LH_OK && v_from_k.v == v_is_k_weights.v && v_from_k.k == plain.k && normed,
        "dense stage (Gemma 4): v_from_k gives k's projection as v (RMS-normed per head by v_norm), k unchanged");
  c = base;
  c.output_scale = 0.5f;
  const Run scaled = run(c, true);
  bool halved = scaled.status == LH_OK && scaled.h_next.size() == plain.h_next.size();
  for (size_t i = 0; halved && i < plain.h_next.size(); ++i) halved = scaled.h_next[i] == 0.5f * plain.h_next[i];
  check(halved, "dense stage (Gemma 4): output_scale 0.5 halves h_next exactly");
  // refusals: shared with a k norm; per-layer embeddings without their matrices; an attn width that is not W_o's
  lh_dense_stage* st = nullptr;
  const char* why = nullptr;
  c = base;
  c.kv_shared = 1;
  c.k = lh_dense_matrix{};
  c.v = lh_dense_matrix{};
  check(lh_dense_stage_create(&c, &st, &why) == LH_BAD_ARGUMENT && st == nullptr, "dense stage (Gemma 4): a KV-shared stage with a k norm is refused");
  c = base;
  c.ple_dim = 8;
  check(lh_dense_stage_create(&c, &st, &why) == LH_BAD_ARGUMENT && st == nullptr && why != nullptr && std::strstr(why, "per-layer") != nullptr,
        "dense stage (Gemma 4): per-layer embeddings without inp_gate / proj are refused, naming them", "why %s", why ? why : "null");
  c = base;
  c.attn_head_dim = kHd / 2;
  check(lh_dense_stage_create(&c, &st, &why) == LH_BAD_ARGUMENT && why != nullptr && std::strcmp(why, "attn_output") == 0,
        "dense stage (Gemma 4): an attn head dim that does not match attn_output's columns is refused, naming it");
}

struct SumJob {
  std::vector<uint32_t>* hits;
};

void count_items(void* ctx, uint32_t begin, uint32_t end) {
  SumJob* j = static_cast<SumJob*>(ctx);
  for (uint32_t i = begin; i < end; ++i) (*j->hits)[i] += 1;
}

void check_worker_pool() {
  for (const uint32_t threads : {1u, 2u, 3u}) {
    lh_worker_pool* p = lh_worker_pool_create(threads);
    std::vector<uint32_t> hits(1000, 0);
    SumJob job{&hits};
    bool ok = p != nullptr && lh_worker_pool_threads(p) == threads;
    // many small jobs back to back (the workers spin between them), then a pause (they sleep), then more
    for (int round = 0; round < 2000; ++round) lh_worker_pool_run(p, 1 + round % 1000, 0, count_items, &job);
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, nullptr);
    for (int round = 0; round < 50; ++round) lh_worker_pool_run(p, 1000, round % 2 == 0 ? 1 : 0, count_items, &job);
    for (uint32_t i = 0; i < 1000; ++i) {
      uint32_t want = 50;
      for (int round = 0; round < 2000; ++round) want += i < static_cast<uint32_t>(1 + round % 1000) ? 1 : 0;
      ok = ok && hits[i] == want;
    }
    lh_worker_pool_free(p);
    char name[96];
    std::snprintf(name, sizeof name, "worker pool, %u thread(s): every item of 2,050 jobs run exactly once", threads);
    check(ok, name);
  }
  std::vector<uint32_t> hits(10, 0);
  SumJob job{&hits};
  lh_worker_pool_run(nullptr, 10, 0, count_items, &job);
  check(hits == std::vector<uint32_t>(10, 1), "worker pool: a null pool runs inline");
}

}  // namespace

void test_dense_stage() {
  check_worker_pool();
  check_against_reference(LH_QDOT_F32, "F32", 1e-5);
  check_against_reference(LH_QDOT_Q8_0, "Q8_0", 3e-2);
  check_against_reference(LH_QDOT_F32, "F32", 1e-5, true);
  check_against_reference(LH_QDOT_Q8_0, "Q8_0", 3e-2, true);
  check_against_reference(LH_QDOT_MXFP4, "MXFP4", 3e-2);
  check_against_reference(LH_QDOT_Q5_0, "Q5_0", 3e-2);
  check_threads_and_chunks();
  check_refusals();
  check_gemma4_layers();
}
