// The Gated DeltaNet mixer (gated_delta_net.h) against a float64 reference written here from the
// formulas, token by token: the convolution with its carried tail, silu, the L2 norms, the decayed
// delta rule, the gated RMSNorm. Shapes: one head, Hk < Hv (key heads tiled over value heads), D
// not a multiple of 8, kernels of 1, 3 and 4 taps, T of 1, across chunk boundaries and not a
// multiple of the chunk; the state carried across calls (a prefill in pieces, then decode steps).
// Then: the chunked form equals the token-by-token recurrence (outputs and the state), 1 and 3
// threads give the same bits, a bad shape is refused and leaves the state as it was.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/gated_delta_net.h"
#include "check.h"
#include "test_rng.h"

namespace {

struct Case {
  uint32_t hk, hv, d, k, t;
  float decay_lo;  // decay drawn in [decay_lo, −0.001]: ~0 keeps memory long, −3 forgets fast
};

struct Inputs {
  std::vector<float> qkv, z, beta, decay, conv, norm;
};

Inputs draw(const Case& c, uint64_t seed) {
  Rng rng(seed);
  const uint32_t C = (2 * c.hk + c.hv) * c.d, V = c.hv * c.d;
  Inputs in;
  in.qkv.resize(static_cast<size_t>(c.t) * C);
  in.z.resize(static_cast<size_t>(c.t) * V);
  in.beta.resize(static_cast<size_t>(c.t) * c.hv);
  in.decay.resize(static_cast<size_t>(c.t) * c.hv);
  in.conv.resize(static_cast<size_t>(C) * c.k);
  in.norm.resize(c.d);
  for (float& v : in.qkv) v = rng.normal();
  for (float& v : in.z) v = rng.normal();
  for (float& v : in.beta) v = 1.0f / (1.0f + std::exp(-2.0f * rng.normal()));
  for (float& v : in.decay) v = c.decay_lo + (-0.001f - c.decay_lo) * rng.uniform();
  for (float& v : in.conv) v = 0.6f * rng.normal();
  for (float& v : in.norm) v = 0.5f + rng.uniform();
  return in;
}

// The float64 reference: tokens [t0, t1) over `state` (the layout gated_delta_net.h gives, in double).
void reference(const Case& c, const Inputs& in, uint32_t t0, uint32_t t1, std::vector<double>& state, std::vector<double>& out, float eps) {
  const uint32_t D = c.d, C = (2 * c.hk + c.hv) * D, V = c.hv * D, K = c.k;
  double* tail = state.data() + static_cast<size_t>(c.hv) * D * D;
  std::vector<double> x(C), delta(D), o(D);
  for (uint32_t t = t0; t < t1; ++t) {
    const float* row = in.qkv.data() + static_cast<size_t>(t) * C;
    for (uint32_t ch = 0; ch < C; ++ch) {
      double acc = 0;
      for (uint32_t k = 0; k + 1 < K; ++k) acc += tail[static_cast<size_t>(k) * C + ch] * in.conv[static_cast<size_t>(ch) * K + k];
      acc += row[ch] * static_cast<double>(in.conv[static_cast<size_t>(ch) * K + K - 1]);
      x[ch] = acc / (1 + std::exp(-acc));
    }
    for (uint32_t k = 0; k + 2 < K; ++k)
      for (uint32_t ch = 0; ch < C; ++ch) tail[static_cast<size_t>(k) * C + ch] = tail[static_cast<size_t>(k + 1) * C + ch];
    if (K > 1)
      for (uint32_t ch = 0; ch < C; ++ch) tail[static_cast<size_t>(K - 2) * C + ch] = row[ch];
    for (uint32_t h = 0; h < 2 * c.hk; ++h) {
      double ss = 0;
      for (uint32_t i = 0; i < D; ++i) ss += x[h * D + i] * x[h * D + i];
      const double inv = 1 / std::max(std::sqrt(ss), static_cast<double>(eps));
      for (uint32_t i = 0; i < D; ++i) x[h * D + i] *= inv;
    }
    for (uint32_t h = 0; h < c.hv; ++h) {
      const uint32_t kh = h % c.hk;
      const double *q = x.data() + kh * D, *kv = x.data() + (c.hk + kh) * D, *v = x.data() + 2 * c.hk * D + h * D;
      double* m = state.data() + static_cast<size_t>(h) * D * D;
      const double g = std::exp(static_cast<double>(in.decay[static_cast<size_t>(t) * c.hv + h])), b = in.beta[static_cast<size_t>(t) * c.hv + h];
      for (uint32_t j = 0; j < D; ++j) {
        double sk = 0;
        for (uint32_t i = 0; i < D; ++i) sk += (m[j * D + i] *= g) * kv[i];
        delta[j] = (v[j] - sk) * b;
      }
      double ss = 0;
      for (uint32_t j = 0; j < D; ++j) {
        double acc = 0;
        for (uint32_t i = 0; i < D; ++i) acc += (m[j * D + i] += kv[i] * delta[j]) * q[i];
        o[j] = acc / std::sqrt(static_cast<double>(D));
        ss += o[j] * o[j];
      }
      const double inv = 1 / std::sqrt(ss / D + eps);
      for (uint32_t j = 0; j < D; ++j) {
        const double z = in.z[static_cast<size_t>(t) * V + h * D + j];
        out[static_cast<size_t>(t) * V + h * D + j] = o[j] * inv * in.norm[j] * (z / (1 + std::exp(-z)));
      }
    }
  }
}

double nmse(const float* got, const double* want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = got[i] - want[i];
    num += e * e;
    den += want[i] * want[i];
  }
  return den == 0 ? num : num / den;
}

double nmse_f(const float* got, const float* want, size_t n) {
  std::vector<double> w(want, want + n);
  return nmse(got, w.data(), n);
}

// Runs tokens [t0, t1) of `in` through lh_gdn_run (chunk, threads) on `state`; out rows [t0, t1).
lh_status run(const Case& c, const Inputs& in, uint32_t t0, uint32_t t1, std::vector<float>& state, std::vector<float>& out, uint32_t chunk, uint32_t threads, float eps) {
  const lh_gdn_shape sh{c.hk, c.hv, c.d, c.k, eps};
  const uint32_t C = (2 * c.hk + c.hv) * c.d, V = c.hv * c.d;
  const lh_gdn_io io{t1 - t0,
                     in.qkv.data() + static_cast<size_t>(t0) * C,
                     in.z.data() + static_cast<size_t>(t0) * V,
                     in.beta.data() + static_cast<size_t>(t0) * c.hv,
                     in.decay.data() + static_cast<size_t>(t0) * c.hv,
                     in.conv.data(),
                     in.norm.data(),
                     state.data(),
                     out.data() + static_cast<size_t>(t0) * V};
  return lh_gdn_run(&sh, &io, chunk, threads);
}

}  // namespace

void test_gated_delta_net() {
  const float eps = 1e-6f;
  const Case cases[] = {
      {1, 1, 8, 4, 1, -1.0f},   {1, 1, 8, 1, 9, -1.0f},    {2, 4, 16, 4, 37, -0.5f}, {1, 2, 24, 3, 70, -2.0f},
      {2, 4, 32, 4, 130, -0.05f}, {2, 2, 16, 4, 200, -3.0f}, {1, 3, 12, 2, 65, -0.2f},
  };
  uint64_t seed = 1;
  double worst_ref = 0, worst_chunk = 0;
  for (const Case& c : cases) {
    const Inputs in = draw(c, seed++);
    const lh_gdn_shape sh{c.hk, c.hv, c.d, c.k, eps};
    const size_t S = lh_gdn_state_floats(&sh), V = static_cast<size_t>(c.hv) * c.d, n = static_cast<size_t>(c.t) * V;
    // the reference over every token, and its state after the first `split` of them
    const uint32_t split = c.t / 3;
    std::vector<double> ref_state(S, 0.0), ref_out(n, 0.0);
    reference(c, in, 0, c.t, ref_state, ref_out, eps);
    char name[160];
    // token by token and chunked (chunks of 16 and the default 64), each as a prefill of `split`
    // tokens, then a prefill of the rest but 2, then two decode steps: the state carried across calls
    std::vector<float> outs[3], states[3];
    const uint32_t chunks[3] = {1, 16, 0};
    for (int m = 0; m < 3; ++m) {
      std::vector<float> state(S, 0.0f), out(n, 0.0f);
      const uint32_t rest = c.t > split + 2 ? c.t - 2 : split;
      lh_status r = LH_OK;
      if (split > 0) r = run(c, in, 0, split, state, out, chunks[m], 2, eps);
      if (r == LH_OK && rest > split) r = run(c, in, split, rest, state, out, chunks[m], 2, eps);
      for (uint32_t t = rest; r == LH_OK && t < c.t; ++t) r = run(c, in, t, t + 1, state, out, chunks[m], 2, eps);
      const double e_out = nmse(out.data(), ref_out.data(), n), e_state = nmse(state.data(), ref_state.data(), S);
      worst_ref = std::max(worst_ref, std::max(e_out, e_state));
      std::snprintf(name, sizeof name, "gdn: Hk %u Hv %u D %u K %u T %u chunk %u vs float64 reference (outputs and state)", c.hk, c.hv, c.d, c.k, c.t, chunks[m]);
      check(r == LH_OK && e_out < 1e-9 && e_state < 1e-9, name, "status %d, NMSE out %.3g state %.3g", r, e_out, e_state);
      outs[m] = out;
      states[m] = state;
    }
    const double e_chunk = std::max(std::max(nmse_f(outs[1].data(), outs[0].data(), n), nmse_f(outs[2].data(), outs[0].data(), n)),
                                    std::max(nmse_f(states[1].data(), states[0].data(), S), nmse_f(states[2].data(), states[0].data(), S)));
    worst_chunk = std::max(worst_chunk, e_chunk);
    std::snprintf(name, sizeof name, "gdn: Hk %u Hv %u D %u T %u chunked (16, 64) == token by token", c.hk, c.hv, c.d, c.t);
    check(e_chunk < 1e-10, name, "NMSE %.3g", e_chunk);
    // 1 vs 3 threads: the same bits, token by token and chunked, in one call over every token
    for (const uint32_t chunk : {1u, 0u}) {
      std::vector<float> s1(S, 0.0f), o1(n, 0.0f), s3(S, 0.0f), o3(n, 0.0f);
      const lh_status r1 = run(c, in, 0, c.t, s1, o1, chunk, 1, eps), r3 = run(c, in, 0, c.t, s3, o3, chunk, 3, eps);
      std::snprintf(name, sizeof name, "gdn: Hk %u Hv %u D %u T %u chunk %u: 1 and 3 threads give the same bits", c.hk, c.hv, c.d, c.t, chunk);
      check(r1 == LH_OK && r3 == LH_OK && std::memcmp(o1.data(), o3.data(), n * 4) == 0 && std::memcmp(s1.data(), s3.data(), S * 4) == 0, name, "status %d %d", r1, r3);
    }
  }
  std::printf("info  gdn: worst NMSE vs float64 %.3g, chunked vs token by token %.3g\n", worst_ref, worst_chunk);
  // refusals: the state is left as it was
  {
    const Case c{2, 3, 8, 4, 4, -1.0f};  // 3 value heads cannot share 2 key heads
    const Inputs in = draw(c, 99);
    const lh_gdn_shape ok{1, 3, 8, 4, eps};
    std::vector<float> state(lh_gdn_state_floats(&ok) + 64, 1.5f), out(static_cast<size_t>(c.t) * c.hv * c.d, 0.0f);
    const lh_status r = run(c, in, 0, c.t, state, out, 0, 1, eps);
    bool kept = true;
    for (float v : state) kept = kept && v == 1.5f;
    check(r == LH_BAD_ARGUMENT && kept, "gdn: value heads not a multiple of the key heads are refused, the state unchanged", "status %d", r);
    const Case one{1, 1, 8, 4, 2, -1.0f};
    const Inputs in1 = draw(one, 7);
    std::vector<float> s1(lh_gdn_state_floats(&ok), 0.0f), o1(16, 0.0f);
    check(run(one, in1, 0, 2, s1, o1, 0, 0, eps) == LH_BAD_ARGUMENT, "gdn: 0 threads refused");
    const lh_gdn_shape sh{1, 1, 8, 4, eps};
    lh_gdn_io io{2, nullptr, in1.z.data(), in1.beta.data(), in1.decay.data(), in1.conv.data(), in1.norm.data(), s1.data(), o1.data()};
    check(lh_gdn_run(&sh, &io, 0, 1) == LH_BAD_ARGUMENT, "gdn: a null input refused");
  }
}
