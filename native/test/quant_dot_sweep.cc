// qdot_sweep: see quant_dot_sweep.h.
#include "quant_dot_sweep.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "../src/fp16.h"
#include "check.h"

namespace {

constexpr lh_qdot_impl kImpls[] = {LH_QDOT_SCALAR, LH_QDOT_AVX2, LH_QDOT_AVX512, LH_QDOT_AMX};

const char* impl_name(lh_qdot_impl impl) {
  switch (impl) {
    case LH_QDOT_SCALAR: return "scalar";
    case LH_QDOT_AVX2: return "avx2";
    case LH_QDOT_AVX512: return "avx512";
    case LH_QDOT_AMX: return "amx";
    default: return "auto";
  }
}

// (rows, tokens): single rows and tokens (decode kernels), every remainder of 4-row / 4- and 8-token
// tiles and of 16-row prefill tiles, prefill-sized blocks, and more tokens than a prefill pass (64).
constexpr uint32_t kShapes[][2] = {{1, 1}, {3, 1}, {4, 1}, {5, 2}, {17, 3}, {32, 4}, {37, 9}, {8, 16}, {33, 17}, {6, 7}, {5, 70}};

// n random rows of k elements: bytes [n · row_bytes], dequantized values and magnitudes [n · k].
struct Rows {
  size_t row_bytes = 0;
  std::vector<uint8_t> bytes;
  std::vector<double> value, magnitude;
};

Rows random_rows(const QdotTypeCase& c, const lh_qdot_kernels& kern, Rng& rng, uint32_t n, uint64_t k) {
  Rows w;
  w.row_bytes = kern.row_bytes(k);
  w.bytes.resize(w.row_bytes * n);
  w.value.resize(static_cast<size_t>(n) * k);
  w.magnitude.resize(static_cast<size_t>(n) * k);
  for (uint32_t r = 0; r < n; ++r) {
    c.random_row(rng, k, w.bytes.data() + r * w.row_bytes);
    c.dequantize_row(w.bytes.data() + r * w.row_bytes, k, w.value.data() + r * k, w.magnitude.data() + r * k);
  }
  return w;
}

// Activations every implementation quantizes without loss: per chunk of `chunk` elements,
// integers in [-127, 127] with one of them ±127, times a power of two.
std::vector<float> exact_activations(Rng& rng, uint32_t T, uint64_t k, uint64_t chunk) {
  std::vector<float> x(static_cast<size_t>(T) * k);
  for (uint32_t t = 0; t < T; ++t)
    for (uint64_t c0 = 0; c0 < k; c0 += chunk) {
      const uint64_t n = k - c0 < chunk ? k - c0 : chunk;
      const float scale = std::ldexp(1.0f, static_cast<int>(rng.next() % 15) - 10);
      float* xc = &x[t * k + c0];
      for (uint64_t i = 0; i < n; ++i) xc[i] = scale * static_cast<float>(static_cast<int>(rng.next() % 255) - 127);
      xc[rng.next() % n] = scale * ((rng.next() & 1) ? 127.0f : -127.0f);
    }
  return x;
}

// Gaussian activations whose blocks span six orders of magnitude.
std::vector<float> random_activations(Rng& rng, uint32_t T, uint64_t k, uint64_t chunk) {
  std::vector<float> x(static_cast<size_t>(T) * k);
  for (uint32_t t = 0; t < T; ++t)
    for (uint64_t c0 = 0; c0 < k; c0 += chunk) {
      const float scale = std::pow(10.0f, 6.0f * rng.uniform() - 3.0f);
      for (uint64_t i = c0; i < k && i < c0 + chunk; ++i) x[t * k + i] = scale * rng.normal();
    }
  return x;
}

// float64 dots and the Σ|terms| that bound their rounding: [T, n]
void reference(const Rows& w, uint32_t n, uint64_t k, const std::vector<float>& x, uint32_t T, std::vector<double>* ref, std::vector<double>* scale) {
  ref->assign(static_cast<size_t>(T) * n, 0.0);
  scale->assign(static_cast<size_t>(T) * n, 0.0);
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t r = 0; r < n; ++r) {
      double s = 0, m = 0;
      for (uint64_t i = 0; i < k; ++i) {
        s += w.value[r * k + i] * x[t * k + i];
        m += w.magnitude[r * k + i] * std::fabs(static_cast<double>(x[t * k + i]));
      }
      (*ref)[t * n + r] = s;
      (*scale)[t * n + r] = m;
    }
}

// quantize_act of every token: [T · act_row_bytes]
std::vector<uint8_t> quantize(const lh_qdot_kernels& kern, const std::vector<float>& x, uint32_t T, uint64_t k) {
  const size_t arb = kern.act_row_bytes(k);
  std::vector<uint8_t> xq(arb * T);
  for (uint32_t t = 0; t < T; ++t) kern.quantize_act(x.data() + t * k, k, xq.data() + t * arb);
  return xq;
}

std::vector<float> run_tile(const lh_qdot_kernels& kern, const Rows& w, uint32_t n, uint64_t k, const std::vector<uint8_t>& xq, uint32_t T) {
  std::vector<float> y(static_cast<size_t>(T) * n);
  kern.dot_tile(w.bytes.data(), w.row_bytes, n, k, xq.data(), T, y.data(), n);
  return y;
}

uint64_t chunk_of(const lh_qdot_kernels& kern) { return kern.block_elems > 1 ? kern.block_elems : 32; }

std::string label(const QdotTypeCase& c, lh_qdot_impl impl, const char* what) {
  return std::string(c.name) + " " + impl_name(impl) + ": " + what;
}

// 1. exact activations against float64
void check_exact(const QdotTypeCase& c, const lh_qdot_kernels& kern, Rng& rng) {
  double worst = 0;
  bool finite = true;
  int cases = 0;
  for (const uint64_t k : c.ks)
    for (const auto& shape : kShapes) {
      const uint32_t n = shape[0], T = shape[1];
      const Rows w = random_rows(c, kern, rng, n, k);
      const std::vector<float> x = exact_activations(rng, T, k, chunk_of(kern));
      std::vector<double> ref, scale;
      reference(w, n, k, x, T, &ref, &scale);
      const std::vector<float> y = run_tile(kern, w, n, k, quantize(kern, x, T, k), T);
      for (size_t i = 0; i < y.size(); ++i) {
        finite = finite && std::isfinite(y[i]);
        const double e = std::fabs(y[i] - ref[i]) / (scale[i] + 1e-300);
        worst = e > worst ? e : worst;
      }
      ++cases;
    }
  char name[200];
  std::snprintf(name, sizeof name, "%s (%d shapes: rows × tokens × k; y = float64 of ggml's dequantization)",
                label(c, kern.impl, "exact activations").c_str(), cases);
  check(finite && worst <= 1e-5, name, "worst |y - ref| / sum|terms| = %.3e, finite %d", worst, finite);
  std::printf("      worst |y - ref| / sum|terms| = %.3e\n", worst);
}

// 2. random activations: the same quantized bytes as scalar, the same dots up to float order,
// and the scalar dots within quantization error of float64 on the unquantized x
void check_random(const QdotTypeCase& c, const lh_qdot_kernels& kern, const lh_qdot_kernels& scalar, Rng& rng) {
  bool same_bytes = true;
  double worst = 0, err2 = 0, ref2 = 0;
  for (const uint64_t k : c.ks)
    for (const auto& shape : kShapes) {
      const uint32_t n = shape[0], T = shape[1];
      const Rows w = random_rows(c, kern, rng, n, k);
      const std::vector<float> x = random_activations(rng, T, k, chunk_of(kern));
      const std::vector<uint8_t> xq = quantize(kern, x, T, k), xq_ref = quantize(scalar, x, T, k);
      same_bytes = same_bytes && xq == xq_ref;
      std::vector<double> ref, scale;
      reference(w, n, k, x, T, &ref, &scale);
      const std::vector<float> y = run_tile(kern, w, n, k, xq, T), y_ref = run_tile(scalar, w, n, k, xq_ref, T);
      for (size_t i = 0; i < y.size(); ++i) {
        const double e = std::fabs(static_cast<double>(y[i]) - y_ref[i]) / (scale[i] + 1e-300);
        if (!std::isfinite(e)) worst = INFINITY;
        else if (e > worst) worst = e;
        err2 += (y_ref[i] - ref[i]) * (y_ref[i] - ref[i]);
        ref2 += ref[i] * ref[i];
      }
    }
  const double nmse = err2 / ref2;
  if (kern.impl != LH_QDOT_SCALAR) {
    check(same_bytes, label(c, kern.impl, "quantize_act writes the scalar reference's bytes").c_str(), "bytes differ");
    check(worst <= 1e-5, label(c, kern.impl, "the scalar reference's dots up to float order").c_str(), "worst |y - scalar| / sum|terms| = %.3e", worst);
    std::printf("      worst |y - scalar| / sum|terms| = %.3e\n", worst);
  } else {
    // 8-bit activations: ~1/(127·sqrt(12)) of each block's max per element
    check(nmse < 2e-4, label(c, kern.impl, "random activations: NMSE against float64 of the unquantized x").c_str(), "NMSE %.3e", nmse);
    std::printf("      NMSE %.3e (activation quantization)\n", nmse);
  }
}

// 3 + 4. splits, stride, guards
void check_layout(const QdotTypeCase& c, const lh_qdot_kernels& kern, Rng& rng) {
  const uint64_t k = c.ks.back();
  const uint32_t n = 29, T = 11;
  const Rows w = random_rows(c, kern, rng, n, k);
  const std::vector<float> x = random_activations(rng, T, k, chunk_of(kern));
  const size_t arb = kern.act_row_bytes(k);
  // the activation row: exactly act_row_bytes written, guard bytes after it untouched
  std::vector<uint8_t> guarded(arb + 64, 0xA5);
  kern.quantize_act(x.data(), k, guarded.data());
  bool guard_ok = true;
  for (size_t i = arb; i < guarded.size(); ++i) guard_ok = guard_ok && guarded[i] == 0xA5;
  check(guard_ok, label(c, kern.impl, "quantize_act writes act_row_bytes(k) and no further").c_str(), "guard bytes changed");

  const std::vector<uint8_t> xq = quantize(kern, x, T, k);
  const std::vector<float> whole = run_tile(kern, w, n, k, xq, T);
  // rows split at a: the same bits (how dense_stage.cc splits rows over threads must not matter);
  // tokens split at b as well: the same dots up to float order (a decode kernel for one or two
  // tokens and a prefill tile may sum the blocks in different orders)
  std::vector<double> ref, scale;
  reference(w, n, k, x, T, &ref, &scale);
  bool same_rows = true;
  double worst = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const uint32_t a = 1 + static_cast<uint32_t>(rng.next() % (n - 1)), b = 1 + static_cast<uint32_t>(rng.next() % (T - 1));
    std::vector<float> y_rows(static_cast<size_t>(T) * n, NAN), y(static_cast<size_t>(T) * n, NAN);
    for (const uint32_t r0 : {0u, a}) {
      const uint32_t rn = r0 == 0 ? a : n - a;
      kern.dot_tile(w.bytes.data() + r0 * w.row_bytes, w.row_bytes, rn, k, xq.data(), T, y_rows.data() + r0, n);
      for (const uint32_t t0 : {0u, b}) {
        const uint32_t tn = t0 == 0 ? b : T - b;
        kern.dot_tile(w.bytes.data() + r0 * w.row_bytes, w.row_bytes, rn, k, xq.data() + t0 * arb, tn, y.data() + t0 * n + r0, n);
      }
    }
    same_rows = same_rows && std::memcmp(y_rows.data(), whole.data(), y_rows.size() * 4) == 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double e = std::fabs(static_cast<double>(y[i]) - whole[i]) / (scale[i] + 1e-300);
      if (!std::isfinite(e)) worst = INFINITY;
      else if (e > worst) worst = e;
    }
  }
  check(same_rows, label(c, kern.impl, "any split of the rows gives the same bits").c_str(), "bits differ");
  check(worst <= 1e-5, label(c, kern.impl, "any split of the tokens gives the same dots up to float order").c_str(), "worst %.3e of sum|terms|", worst);

  // y_stride > n_rows: the gaps keep their sentinel
  const size_t stride = n + 5;
  const uint32_t sentinel = 0x7fc0deadu;
  std::vector<uint32_t> y(stride * T + 7, sentinel);
  kern.dot_tile(w.bytes.data(), w.row_bytes, n, k, xq.data(), T, reinterpret_cast<float*>(y.data()), stride);
  bool gaps = true, values = true;
  for (size_t i = 0; i < y.size(); ++i) {
    const size_t t = i / stride, r = i % stride;
    if (t < T && r < n) values = values && std::memcmp(&y[i], &whole[t * n + r], 4) == 0;
    else gaps = gaps && y[i] == sentinel;
  }
  check(gaps && values, label(c, kern.impl, "y_stride: outputs at t·stride + r, nothing written between or after").c_str(),
        "gaps untouched %d, values equal %d", gaps, values);
}

// 5. non-finite and tiny inputs
void check_nonfinite(const QdotTypeCase& c, const lh_qdot_kernels& kern, Rng& rng) {
  const uint64_t k = c.ks.back(), chunk = chunk_of(kern);
  const uint32_t n = 9, T = 5;
  const Rows w = random_rows(c, kern, rng, n, k);
  std::vector<float> x = exact_activations(rng, T, k, chunk);
  // token 1: a NaN; token 2: +Inf; token 3: -Inf; token 4: one block of zeros and one of 1e-35 values
  x[1 * k + rng.next() % k] = NAN;
  x[2 * k + rng.next() % k] = INFINITY;
  x[3 * k + rng.next() % k] = -INFINITY;
  const uint64_t blocks = (k + chunk - 1) / chunk;
  const uint64_t zb = rng.next() % blocks, tb = (zb + 1) % blocks;
  for (uint64_t i = zb * chunk; i < k && i < (zb + 1) * chunk; ++i) x[4 * k + i] = 0.0f;
  if (tb != zb)
    for (uint64_t i = tb * chunk; i < k && i < (tb + 1) * chunk; ++i) x[4 * k + i] = 1e-35f * (rng.uniform() - 0.5f);
  const std::vector<float> y = run_tile(kern, w, n, k, quantize(kern, x, T, k), T);
  // token 0 alone
  std::vector<float> x0(x.begin(), x.begin() + static_cast<ptrdiff_t>(k));
  const std::vector<float> y0 = run_tile(kern, w, n, k, quantize(kern, x0, 1, k), 1);
  bool nan_rows = true;
  for (uint32_t t = 1; t <= 3; ++t)
    for (uint32_t r = 0; r < n; ++r) nan_rows = nan_rows && std::isnan(y[t * n + r]);
  // token 0 as if alone (a one-token call may run the decode kernel: float order only)
  bool token0 = true;
  {
    std::vector<double> r0, s0;
    reference(w, n, k, x0, 1, &r0, &s0);
    for (uint32_t r = 0; r < n; ++r) token0 = token0 && std::fabs(static_cast<double>(y[r]) - y0[r]) <= 1e-5 * s0[r];
  }
  // token 4 against float64 with the tiny block counted as zero
  std::vector<float> x4(x.begin() + static_cast<ptrdiff_t>(4 * k), x.begin() + static_cast<ptrdiff_t>(5 * k));
  if (tb != zb)
    for (uint64_t i = tb * chunk; i < k && i < (tb + 1) * chunk; ++i) x4[i] = 0.0f;
  std::vector<double> ref, scale;
  reference(w, n, k, x4, 1, &ref, &scale);
  double worst = 0;
  bool finite = true;
  for (uint32_t r = 0; r < n; ++r) {
    finite = finite && std::isfinite(y[4 * n + r]);
    const double e = std::fabs(y[4 * n + r] - ref[r]) / (scale[r] + 1e-300);
    worst = e > worst ? e : worst;
  }
  check(nan_rows && token0 && finite && worst <= 1e-5,
        label(c, kern.impl, "NaN / +Inf / -Inf make every dot of their token NaN; zero and tiny blocks add nothing").c_str(),
        "NaN rows %d, token 0 as alone %d, zero/tiny token finite %d (err %.3e)", nan_rows, token0, finite, worst);
}

}  // namespace

uint16_t qdot_random_half(Rng& rng, float lo, float hi, bool signed_scale) {
  float v = lo + (hi - lo) * rng.uniform();
  if (signed_scale && (rng.next() & 1)) v = -v;
  return lh_fp32_to_fp16(v);
}

void qdot_sweep(const QdotTypeCase& c) {
  Rng rng(0x9d07 + c.type);
  lh_qdot_kernels scalar{}, best{};
  check(lh_qdot_kernels_for(c.type, LH_QDOT_SCALAR, &scalar) && lh_qdot_kernels_for(c.type, LH_QDOT_AUTO, &best),
        (std::string(c.name) + ": kernels exist (scalar and AUTO)").c_str(), "missing");
  // AUTO: the best implementation the CPU runs that the type has
  lh_qdot_impl expected = LH_QDOT_SCALAR;
  for (const lh_qdot_impl impl : kImpls) {
    lh_qdot_kernels k{};
    if (lh_qdot_kernels_for(c.type, impl, &k)) {
      check(k.impl == impl && k.type == c.type, label(c, impl, "kernels say their type and implementation").c_str(), "type %u impl %u",
            k.type, k.impl);
      expected = impl;
    }
  }
  check(best.impl == expected, (std::string(c.name) + ": AUTO runs the best implementation available").c_str(), "AUTO gave %s, best is %s",
        impl_name(best.impl), impl_name(expected));
  for (const lh_qdot_impl impl : kImpls) {
    lh_qdot_kernels kern{};
    if (!lh_qdot_kernels_for(c.type, impl, &kern)) {
      std::printf("info  %s %s: no kernels (not in this family or not on this CPU)\n", c.name, impl_name(impl));
      continue;
    }
    check_exact(c, kern, rng);
    check_random(c, kern, scalar, rng);
    check_layout(c, kern, rng);
    check_nonfinite(c, kern, rng);
  }
}

namespace {

// qdot_check_same_bits (tol = 0: the bits) and qdot_check_close (|y - y_ref| <= tol · Σ|terms|).
void check_against(const QdotTypeCase& c, lh_qdot_impl impl, lh_qdot_impl reference, const std::vector<std::array<uint32_t, 3>>& shapes,
                   void (*extreme_row)(uint64_t k, uint8_t* out), float token1, double tol, const char* what) {
  lh_qdot_kernels kern{}, ref{};
  if (!lh_qdot_kernels_for(c.type, impl, &kern)) {
    std::printf("info  %s %s: not on this CPU, its bits are not checked\n", c.name, impl_name(impl));
    return;
  }
  check(lh_qdot_kernels_for(c.type, reference, &ref), label(c, reference, "kernels exist where the checked ones do").c_str(), "missing");
  Rng rng(0xa3c + c.type + 16 * impl);
  size_t outputs = 0, differ = 0;
  double worst = 0;
  for (const auto& sh : shapes) {
    const uint32_t n = sh[0], T = sh[1];
    const uint64_t k = sh[2];
    const size_t rb = kern.row_bytes(k), arb = kern.act_row_bytes(k);
    std::vector<uint8_t> w(rb * n), xq(arb * T);
    for (uint32_t r = 0; r < n; ++r) c.random_row(rng, k, w.data() + r * rb);
    extreme_row(k, w.data());
    std::vector<float> x(static_cast<size_t>(T) * k);
    for (uint32_t t = 0; t < T; ++t) {
      const float scale = std::pow(10.0f, 4.0f * static_cast<float>(rng.uniform()) - 2.0f);
      for (uint64_t i = 0; i < k; ++i) x[t * k + i] = t == 1 ? token1 : scale * static_cast<float>(rng.normal());
    }
    for (uint32_t t = 0; t < T; ++t) ref.quantize_act(x.data() + t * k, k, xq.data() + t * arb);
    std::vector<float> y(static_cast<size_t>(T) * n), y_ref(static_cast<size_t>(T) * n);
    kern.dot_tile(w.data(), rb, n, k, xq.data(), T, y.data(), n);
    ref.dot_tile(w.data(), rb, n, k, xq.data(), T, y_ref.data(), n);
    if (tol == 0) {
      for (size_t i = 0; i < y.size(); ++i) differ += std::memcmp(&y[i], &y_ref[i], 4) != 0;
    } else {
      std::vector<double> value(k), magnitude(k);
      for (uint32_t r = 0; r < n; ++r) {
        c.dequantize_row(w.data() + r * rb, k, value.data(), magnitude.data());
        for (uint32_t t = 0; t < T; ++t) {
          double sum_terms = 0;
          for (uint64_t i = 0; i < k; ++i) sum_terms += magnitude[i] * std::fabs(static_cast<double>(x[t * k + i]));
          const double e = std::fabs(static_cast<double>(y[t * n + r]) - y_ref[t * n + r]) / (sum_terms + 1e-300);
          if (!(e <= tol)) ++differ;
          if (!std::isfinite(e)) worst = INFINITY;
          else if (e > worst) worst = e;
        }
      }
    }
    outputs += y.size();
  }
  if (tol == 0) check(differ == 0, label(c, impl, what).c_str(), "%zu of %zu outputs differ", differ, outputs);
  else check(differ == 0, label(c, impl, what).c_str(), "%zu of %zu outputs off by more than %.0e of sum|terms| (worst %.3e)", differ, outputs, tol, worst);
  if (tol != 0) std::printf("      worst |y - %s| / sum|terms| = %.3e\n", impl_name(reference), worst);
}

}  // namespace

void qdot_check_same_bits(const QdotTypeCase& c, lh_qdot_impl impl, lh_qdot_impl reference, const std::vector<std::array<uint32_t, 3>>& shapes,
                          void (*extreme_row)(uint64_t k, uint8_t* out), float token1, const char* what) {
  check_against(c, impl, reference, shapes, extreme_row, token1, 0.0, what);
}

void qdot_check_close(const QdotTypeCase& c, lh_qdot_impl impl, lh_qdot_impl reference, const std::vector<std::array<uint32_t, 3>>& shapes,
                      void (*extreme_row)(uint64_t k, uint8_t* out), float token1, double tol, const char* what) {
  check_against(c, impl, reference, shapes, extreme_row, token1, tol, what);
}
