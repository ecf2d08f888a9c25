// The level cap (cpu_level.h): names, refusals, and at every level this CPU has, every dispatch
// choosing at most that level while giving the bits of the kernels of that level (whose agreement
// with the scalar references the kernel sweeps check). Restores the level the run started at
// (LONGHAND_CPU_LEVEL's, when native_tests was started with it).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../src/attention.h"
#include "../src/cpu_level.h"
#include "../src/fp16.h"
#include "../src/quant_dot.h"
#include "check.h"
#include "test_rng.h"

namespace {

// The quant_dot implementation a level tops out at, and the attention kernel AUTO runs there.
lh_qdot_impl qdot_top(lh_cpu_level l) { return l >= LH_CPU_AMX ? LH_QDOT_AMX : l == LH_CPU_AVX512 ? LH_QDOT_AVX512 : l == LH_CPU_AVX2 ? LH_QDOT_AVX2 : LH_QDOT_SCALAR; }
lh_attention_impl attention_top(lh_cpu_level l) { return l >= LH_CPU_AVX512 ? LH_ATTN_AVX512 : l == LH_CPU_AVX2 ? LH_ATTN_AVX2 : LH_ATTN_PORTABLE; }

constexpr struct {
  uint32_t type;
  const char* name;
} kTypes[] = {{LH_QDOT_F32, "F32"},   {LH_QDOT_F16, "F16"},   {LH_QDOT_Q4_0, "Q4_0"}, {LH_QDOT_Q8_0, "Q8_0"},
              {LH_QDOT_Q4_K, "Q4_K"}, {LH_QDOT_Q5_K, "Q5_K"}, {LH_QDOT_Q6_K, "Q6_K"}, {LH_QDOT_MXFP4, "MXFP4"}, {LH_QDOT_Q5_0, "Q5_0"}, {LH_QDOT_Q4_1, "Q4_1"}, {LH_QDOT_Q5_1, "Q5_1"}};

// Random weight rows whose fp16 fields stay finite (bytes < 0x40), and finite activations.
void fill_weights(Rng& rng, std::vector<uint8_t>& w) {
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng.next() & 0x3f);
}

// AUTO's dot under the current cap gives exactly the bits of `expected`'s kernels, for a decode (1
// token) and a prefill (40 tokens: the AMX path's 16-token blocks and a remainder).
bool auto_equals(uint32_t type, lh_qdot_impl expected, Rng& rng) {
  lh_qdot_kernels a{}, e{};
  if (!lh_qdot_kernels_for(type, LH_QDOT_AUTO, &a) || !lh_qdot_kernels_for(type, expected, &e) || a.impl != e.impl) return false;
  constexpr uint32_t kRows = 24, kCols = 512, kTok = 40;
  std::vector<uint8_t> w(a.row_bytes(kCols) * kRows);
  fill_weights(rng, w);
  std::vector<float> x(static_cast<size_t>(kTok) * kCols);
  for (float& v : x) v = rng.normal();
  const size_t arb = a.act_row_bytes(kCols);
  std::vector<uint8_t> xa(arb * kTok + 64), xe(arb * kTok + 64);
  for (uint32_t t = 0; t < kTok; ++t) {
    a.quantize_act(x.data() + static_cast<size_t>(t) * kCols, kCols, xa.data() + t * arb);
    e.quantize_act(x.data() + static_cast<size_t>(t) * kCols, kCols, xe.data() + t * arb);
  }
  for (const uint32_t tok : {1u, kTok}) {
    std::vector<float> ya(static_cast<size_t>(tok) * kRows), ye(ya.size());
    a.dot_tile(w.data(), a.row_bytes(kCols), kRows, kCols, xa.data(), tok, ya.data(), kRows);
    e.dot_tile(w.data(), e.row_bytes(kCols), kRows, kCols, xe.data(), tok, ye.data(), kRows);
    if (std::memcmp(ya.data(), ye.data(), ya.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

// Decode attention (GQA 8/2, fp16 rows) with AUTO under the cap: the bits of `expected`, and within
// 1e-4 of the scalar reference.
bool attention_auto_equals(lh_attention_impl expected, Rng& rng, double* max_err) {
  constexpr uint32_t kHeads = 8, kKv = 2, kDim = 64, kTokens = 37;
  std::vector<float> q(kHeads * kDim);
  for (float& v : q) v = rng.normal();
  std::vector<uint16_t> k(static_cast<size_t>(kKv) * kTokens * kDim), v(k.size());
  for (uint16_t& h : k) h = lh_fp32_to_fp16(rng.normal());
  for (uint16_t& h : v) h = lh_fp32_to_fp16(rng.normal());
  std::vector<float> out_auto(q.size()), out_expected(q.size()), out_ref(q.size());
  lh_attention_args a{};
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.head_stride = static_cast<size_t>(kTokens) * kDim;
  a.tokens = kTokens;
  a.heads = kHeads;
  a.kv_heads = kKv;
  a.head_dim = kDim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  a.out = out_auto.data();
  if (lh_attention_decode(&a, LH_ATTN_AUTO) != LH_OK) return false;
  a.out = out_expected.data();
  if (lh_attention_decode(&a, expected) != LH_OK) return false;
  a.out = out_ref.data();
  if (lh_attention_decode_ref(&a) != LH_OK) return false;
  *max_err = 0;
  for (size_t i = 0; i < q.size(); ++i) *max_err = std::fmax(*max_err, std::fabs(static_cast<double>(out_auto[i]) - out_ref[i]));
  return std::memcmp(out_auto.data(), out_expected.data(), q.size() * sizeof(float)) == 0;
}

}  // namespace

void test_cpu_level() {
  const lh_cpu_level cpu = lh_cpu_level_detected(), start = lh_cpu_level_effective();
  std::printf("info  cpu level: this CPU runs %s, the run started at %s%s\n", lh_cpu_level_name(cpu), lh_cpu_level_name(start),
              lh_cpu_level_forced() ? " (LONGHAND_CPU_LEVEL)" : "");

  // names: each level's name parses back to it; nothing else parses
  bool names = true;
  for (const lh_cpu_level l : {LH_CPU_PORTABLE, LH_CPU_AVX2, LH_CPU_AVX512, LH_CPU_AMX}) {
    lh_cpu_level back = LH_CPU_AMX;
    names = names && lh_cpu_level_parse(lh_cpu_level_name(l), &back) && back == l;
  }
  lh_cpu_level untouched = LH_CPU_AVX2;
  for (const char* bad : {"", "AVX2", "avx-2", "avx512f", "amx-int8", "auto", " avx2"})
    names = names && !lh_cpu_level_parse(bad, &untouched) && untouched == LH_CPU_AVX2;
  names = names && !lh_cpu_level_parse(nullptr, &untouched);
  check(names, "cpu level: names round-trip, anything else (case, spacing, feature names) is refused");

  // a level above the CPU's, or out of the enum, is refused and the cap stays
  if (cpu < LH_CPU_AMX) {
    check(lh_cpu_level_force(static_cast<lh_cpu_level>(cpu + 1)) == LH_BAD_ARGUMENT && lh_cpu_level_effective() == start,
          "cpu level: forcing a level this CPU lacks is LH_BAD_ARGUMENT, the cap unchanged", "cpu %s", lh_cpu_level_name(cpu));
  }
  check(lh_cpu_level_force(static_cast<lh_cpu_level>(7)) == LH_BAD_ARGUMENT && lh_cpu_level_effective() == start,
        "cpu level: a value outside the levels is LH_BAD_ARGUMENT");

  Rng rng(0xc9u);
  for (uint32_t li = LH_CPU_PORTABLE; li <= cpu; ++li) {
    const lh_cpu_level l = static_cast<lh_cpu_level>(li);
    const std::string at = std::string("cpu level ") + lh_cpu_level_name(l) + ": ";
    check(lh_cpu_level_force(l) == LH_OK && lh_cpu_level_effective() == l && lh_cpu_level_forced() == (l < cpu), (at + "forced").c_str());
    // nothing above the level is available, explicit or AUTO
    bool capped = lh_cpu_level_allows(l) && (l == LH_CPU_AMX || !lh_cpu_level_allows(static_cast<lh_cpu_level>(l + 1)));
    capped = capped && (l >= LH_CPU_AVX2 || (!lh_qdot_available(LH_QDOT_AVX2) && !lh_attention_available(LH_ATTN_AVX2) &&
                                             !lh_attention_available(LH_ATTN_AVX2_PER_HEAD)));
    capped = capped && (l >= LH_CPU_AVX512 || (!lh_qdot_available(LH_QDOT_AVX512) && !lh_attention_available(LH_ATTN_AVX512)));
    capped = capped && (l >= LH_CPU_AMX || !lh_qdot_available(LH_QDOT_AMX));
    check(capped, (at + "no kernel above the level is available (quant_dot, attention)").c_str());
    // AUTO: every type's dot kernels at most the level, and exactly its bits
    const lh_qdot_impl top = qdot_top(l);
    for (const auto& t : kTypes) {
      lh_qdot_kernels k{};
      const bool found = lh_qdot_kernels_for(t.type, LH_QDOT_AUTO, &k);
      check(found && k.impl <= top, (at + "AUTO's " + t.name + " dot kernels at most the level").c_str(), "impl %u, top %u", found ? k.impl : 99u, top);
      check(found && auto_equals(t.type, k.impl, rng), (at + "AUTO's " + t.name + " dot gives its kernels' bits (decode and a 40-token prefill)").c_str());
    }
    // and not below it: Q4_0 has kernels at every level, so AUTO runs the best one the level lets the
    // CPU run (AVX512's need VNNI besides the level's AVX-512 F/BW/VL/DQ)
    lh_qdot_impl best = top;
    while (best > LH_QDOT_SCALAR && !lh_qdot_available(best)) best = static_cast<lh_qdot_impl>(best - 1);
    lh_qdot_kernels q4{};
    check(lh_qdot_kernels_for(LH_QDOT_Q4_0, LH_QDOT_AUTO, &q4) && q4.impl == best, (at + "AUTO runs the level's own Q4_0 kernels").c_str(),
          "impl %u, expected %u", q4.impl, best);
    const lh_attention_impl attn = attention_top(l);
    check(std::strcmp(lh_attention_impl_name(LH_ATTN_AUTO), lh_attention_impl_name(attn)) == 0,
          (at + "attention AUTO is the level's kernel").c_str(), "AUTO is %s", lh_attention_impl_name(LH_ATTN_AUTO));
    double err = 0;
    check(attention_auto_equals(attn, rng, &err) && err < 1e-4, (at + "attention AUTO gives that kernel's bits, near the reference").c_str(),
          "max |auto - ref| %.3g", err);
  }
  check(lh_cpu_level_force(start) == LH_OK && lh_cpu_level_effective() == start, "cpu level: the starting level restored");
}
