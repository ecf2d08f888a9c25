// Tests of the F32, F16, Q4_0, Q8_0 dot kernels (quant_dot.h): each type's random GGUF rows and
// ggml's dequantization of them (ggml-quants.c dequantize_row_q4_0 / _q8_0, written here from those
// formulas, not from quant_dot_q.cc), run through qdot_sweep's checks on every implementation.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../src/fp16.h"
#include "check.h"
#include "quant_dot_sweep.h"

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return lh_fp16_to_fp32(h);
}

void put_half(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// ---- F32 ----
void f32_random(Rng& rng, uint64_t k, uint8_t* out) {
  for (uint64_t i = 0; i < k; ++i) {
    const float v = rng.normal();
    std::memcpy(out + 4 * i, &v, 4);
  }
}
void f32_dequantize(const uint8_t* row, uint64_t k, double* value, double* magnitude) {
  for (uint64_t i = 0; i < k; ++i) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    value[i] = v;
    magnitude[i] = std::fabs(v);
  }
}

// ---- F16 ----
void f16_random(Rng& rng, uint64_t k, uint8_t* out) {
  for (uint64_t i = 0; i < k; ++i) put_half(out + 2 * i, lh_fp32_to_fp16(rng.normal()));
}
void f16_dequantize(const uint8_t* row, uint64_t k, double* value, double* magnitude) {
  for (uint64_t i = 0; i < k; ++i) {
    value[i] = half_at(row + 2 * i);
    magnitude[i] = std::fabs(value[i]);
  }
}

// ---- Q4_0: blocks of 32, 18 bytes: fp16 d, qs[16]; x[j] = ((qs[j] & 15) - 8)·d, x[j + 16] = ((qs[j] >> 4) - 8)·d ----
void q4_0_random(Rng& rng, uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b, out += 18) {
    put_half(out, qdot_random_half(rng, 1e-3f, 0.05f, true));
    for (int j = 0; j < 16; ++j) out[2 + j] = static_cast<uint8_t>(rng.next());
  }
}
void q4_0_dequantize(const uint8_t* row, uint64_t k, double* value, double* magnitude) {
  for (uint64_t b = 0; b < k / 32; ++b, row += 18, value += 32, magnitude += 32) {
    const double d = half_at(row);
    for (int j = 0; j < 16; ++j) {
      value[j] = ((row[2 + j] & 0x0F) - 8) * d;
      value[j + 16] = ((row[2 + j] >> 4) - 8) * d;
    }
    for (int j = 0; j < 32; ++j) magnitude[j] = std::fabs(value[j]);
  }
}

// ---- Q8_0: blocks of 32, 34 bytes: fp16 d, int8 qs[32]; x[j] = qs[j]·d (-128 included) ----
void q8_0_random(Rng& rng, uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b, out += 34) {
    put_half(out, qdot_random_half(rng, 1e-3f, 0.05f, true));
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(rng.next());
  }
}
void q8_0_dequantize(const uint8_t* row, uint64_t k, double* value, double* magnitude) {
  for (uint64_t b = 0; b < k / 32; ++b, row += 34, value += 32, magnitude += 32) {
    const double d = half_at(row);
    for (int j = 0; j < 32; ++j) {
      value[j] = static_cast<int8_t>(row[2 + j]) * d;
      magnitude[j] = std::fabs(value[j]);
    }
  }
}

// Row 0 at the extremes: Q8_0 codes -128, Q4_0 nibbles 0 (u - 8 = -8), the most negative products
// against codes of 127 (token 1); scales as drawn.
template <bool kQ8>
void extreme_row(uint64_t k, uint8_t* out) {
  const size_t block = kQ8 ? 34 : 18;
  for (uint64_t b = 0; b < k / 32; ++b) std::memset(out + b * block + 2, kQ8 ? 0x80 : 0x00, block - 2);
}

// The AMX prefill does q_prefill16's integers and float operations in its order: AVX512's bits,
// for every shape a prefill meets (rows < 16, a last group of < 16 tokens, more tokens than a
// 256-token pass, more blocks than a 32-block chunk) and at the extremes.
const std::vector<std::array<uint32_t, 3>> kAmxShapes = {{16, 16, 32}, {5, 17, 96}, {33, 40, 1088}, {16, 300, 352}, {3, 64, 32}, {20, 31, 2080}};
constexpr const char* kAmxWhat = "prefill gives avx512's bits (6 shapes, extremes)";

// Row 0 at the other extreme: Q4_0 nibbles 15 (u - 8 = 7), Q8_0 codes 127. The AVX2 prefill
// multiplies Q4_0's nibbles unsigned and sums 16 such products in int16 before widening: 16·15·127
// against codes of ±127 (token 1) is its largest sum, and must not wrap. (Q8_0's largest pair,
// |-128|·127·2, is extreme_row's against codes of +127.)
template <bool kQ8>
void high_nibble_row(uint64_t k, uint8_t* out) {
  const size_t block = kQ8 ? 34 : 18;
  for (uint64_t b = 0; b < k / 32; ++b) std::memset(out + b * block + 2, kQ8 ? 0x7F : 0xFF, block - 2);
}

// The AVX2 prefill of Q4_0 / Q8_0 (from 3 / 6 tokens on): every shape it meets (one group of 8
// rows or two, the second partial, rows past a 16-row tile, more tokens than a 64-token pass, more
// blocks than a chunk (32 blocks for Q4_0, 16 for Q8_0) and a short last chunk), at both extremes
// against codes of +127 and -127; and the first token count of each type's prefill (3, 6) and the
// one below Q8_0's (5: q_tile_avx2).
const std::vector<std::array<uint32_t, 3>> kAvx2PrefillShapes = {{16, 16, 32}, {5, 17, 96},   {13, 12, 352}, {33, 40, 1088}, {16, 70, 352},
                                                                 {3, 3, 32},   {20, 31, 2080}, {9, 5, 544},   {7, 6, 96}};

template <bool kQ8>
void check_avx2_prefill(const QdotTypeCase& c) {
  // against the scalar reference wherever AVX2 runs (LONGHAND_CPU_LEVEL=avx2 included)
  qdot_check_close(c, LH_QDOT_AVX2, LH_QDOT_SCALAR, kAvx2PrefillShapes, high_nibble_row<kQ8>, -1.0f, 1e-5,
                   "prefill within 1e-5 of sum|terms| of scalar (9 shapes, high nibbles 15 / codes 127, codes -127)");
  qdot_check_close(c, LH_QDOT_AVX2, LH_QDOT_SCALAR, kAvx2PrefillShapes, extreme_row<kQ8>, 1.0f, 1e-5,
                   "prefill within 1e-5 of sum|terms| of scalar (9 shapes, most negative weights, codes +127)");
  // where both prefills run (AVX512's from 8 tokens on), AVX512's q_prefill16 does the same integers
  // and float operations in the same order: its bits, where this CPU (and the level cap) runs it
  if (!lh_qdot_available(LH_QDOT_AVX512)) {
    std::printf("info  %s avx2: avx512 not available here (CPU or LONGHAND_CPU_LEVEL), prefill bits not held against it\n", c.name);
    return;
  }
  const std::vector<std::array<uint32_t, 3>> both = {{16, 16, 32}, {5, 17, 96}, {13, 12, 352}, {33, 40, 1088}, {16, 70, 352}, {20, 31, 2080}};
  qdot_check_same_bits(c, LH_QDOT_AVX2, LH_QDOT_AVX512, both, high_nibble_row<kQ8>, -1.0f, "prefill gives avx512's bits (6 shapes, high nibbles)");
  qdot_check_same_bits(c, LH_QDOT_AVX2, LH_QDOT_AVX512, both, extreme_row<kQ8>, 1.0f, "prefill gives avx512's bits (6 shapes, most negative)");
}

// ggml's q8_0 activations (ggml-cpu/arch/x86/quants.c quantize_row_q8_0, the code llama.cpp runs
// here): per block q = round-to-nearest-even(x·(127/amax)), and block_q8_0.d = FP32_TO_FP16(amax/127),
// the fp16-rounded scale every dot multiplies by (vec_dot_q8_0_q8_0, _q4_0_q8_0, _mxfp4_q8_0). One
// block (so no float sum order), weight scale 1 (Q8_0 / Q4_0 d = 1.0, MXFP4 e = 128), and tokens
// whose amax/127 is not an fp16 value: y = fp16(amax/127)·Σ w·q exactly, written here from ggml's
// formulas, in every implementation and every path (decode, tiles, prefill: 1..20 tokens). Each row
// has one nonzero weight (row r at element 7r mod 32), so y is one product d·(w·q) however an
// implementation splits the block's integer sum over lanes (ggml's AVX2 dot, too, scales 8 partial
// sums). Keeping the scale in fp32 misses by the scale's fp16 rounding (up to 2^-11 relative).
void check_ggml_activation_scale() {
  constexpr uint64_t k = 32;
  constexpr uint32_t kRows = 16, kMaxTok = 20;
  Rng rng(0x51A1E);
  // x [kMaxTok][32] and the quantization ggml gives it
  std::vector<float> x(kMaxTok * k), d16(kMaxTok), d32(kMaxTok);
  std::vector<int32_t> q(kMaxTok * k);
  for (uint32_t t = 0; t < kMaxTok; ++t) {
    float amax = 0;
    for (uint64_t j = 0; j < k; ++j) {
      x[t * k + j] = (1.0f + 0.37f * static_cast<float>(t)) * rng.normal();
      amax = std::fmax(amax, std::fabs(x[t * k + j]));
    }
    const float id = 127.0f / amax;
    for (uint64_t j = 0; j < k; ++j) q[t * k + j] = static_cast<int32_t>(std::nearbyint(x[t * k + j] * id));
    d32[t] = amax / 127.0f;
    d16[t] = lh_fp16_to_fp32(lh_fp32_to_fp16(d32[t]));
  }
  // weight rows of each type with scale 1, one nonzero weight each, and their integer values w [kRows][32]
  struct TypeRows {
    uint32_t type;
    const char* name;
    size_t block;
    std::vector<uint8_t> bytes;
    std::vector<int32_t> w;
  };
  std::vector<TypeRows> types = {{LH_QDOT_Q8_0, "Q8_0", 34, {}, {}}, {LH_QDOT_Q4_0, "Q4_0", 18, {}, {}}, {LH_QDOT_MXFP4, "MXFP4", 17, {}, {}}};
  constexpr int32_t kMx[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};  // ggml's kvalues_mxfp4
  for (TypeRows& tr : types) {
    tr.bytes.assign(kRows * tr.block, 0);
    tr.w.assign(kRows * k, 0);
    for (uint32_t r = 0; r < kRows; ++r) {
      uint8_t* b = tr.bytes.data() + r * tr.block;
      int32_t* w = tr.w.data() + r * k;
      const uint64_t at = (7 * r) % k;
      const uint32_t code = 1 + static_cast<uint32_t>(rng.next() % 7);  // a nonzero weight of every type
      if (tr.type == LH_QDOT_Q8_0) {
        put_half(b, 0x3C00);  // 1.0
        b[2 + at] = static_cast<uint8_t>(r & 1 ? -static_cast<int>(code) * 17 : static_cast<int>(code) * 17);
        for (uint64_t j = 0; j < k; ++j) w[j] = static_cast<int8_t>(b[2 + j]);
      } else {
        const bool q4 = tr.type == LH_QDOT_Q4_0;
        const size_t off = q4 ? 2 : 1;
        if (q4) put_half(b, 0x3C00);
        else b[0] = 128;  // 2^(128-128) = 1
        const uint8_t zero = q4 ? 8 : 0;
        std::memset(b + off, zero * 0x11, 16);
        const uint8_t nib = static_cast<uint8_t>(q4 ? (r & 1 ? 8 - code : 8 + code) : (r & 1 ? 8 + code : code));
        if (at < 16) b[off + at] = static_cast<uint8_t>((b[off + at] & 0xF0) | nib);
        else b[off + at - 16] = static_cast<uint8_t>((b[off + at - 16] & 0x0F) | (nib << 4));
        for (uint64_t j = 0; j < 16; ++j) {
          const int lo = b[off + j] & 15, hi = b[off + j] >> 4;
          w[j] = q4 ? lo - 8 : kMx[lo];
          w[j + 16] = q4 ? hi - 8 : kMx[hi];
        }
      }
    }
  }
  for (const TypeRows& tr : types)
    for (const lh_qdot_impl impl : {LH_QDOT_SCALAR, LH_QDOT_AVX2, LH_QDOT_AVX512, LH_QDOT_AMX}) {
      lh_qdot_kernels kern{};
      if (!lh_qdot_available(impl) || !lh_qdot_kernels_for(tr.type, impl, &kern)) continue;
      const size_t arb = kern.act_row_bytes(k);
      std::vector<uint8_t> xq(kMaxTok * arb);
      for (uint32_t t = 0; t < kMaxTok; ++t) kern.quantize_act(x.data() + t * k, k, xq.data() + t * arb);
      uint32_t wrong = 0, fp32_scale_differs = 0;
      float worst_got = 0, worst_want = 0;
      for (const uint32_t n_tok : {1u, 2u, 3u, 5u, 7u, 8u, 20u}) {
        std::vector<float> y(static_cast<size_t>(n_tok) * kRows);
        kern.dot_tile(tr.bytes.data(), tr.block, kRows, k, xq.data(), n_tok, y.data(), kRows);
        for (uint32_t t = 0; t < n_tok; ++t)
          for (uint32_t r = 0; r < kRows; ++r) {
            int32_t isum = 0;
            for (uint64_t j = 0; j < k; ++j) isum += tr.w[r * k + j] * q[t * k + j];
            const float want = d16[t] * static_cast<float>(isum);
            fp32_scale_differs += (d32[t] * static_cast<float>(isum) != want);
            if (y[t * kRows + r] != want && wrong++ == 0) worst_got = y[t * kRows + r], worst_want = want;
          }
      }
      check(wrong == 0,
            (std::string(tr.name) + " impl " + std::to_string(impl) + ": one block = fp16(amax/127)·Σw·q exactly, q from 127/amax (ggml's q8_0 activations; 1..20 tokens)").c_str(),
            "%u dots differ, first %.9g want %.9g", wrong, worst_got, worst_want);
      check(fp32_scale_differs > 0, (std::string(tr.name) + ": the fp32 scale would miss some of these dots (the check above can fail)").c_str(), "none");
    }
}

}  // namespace

bool qdot_q_case(uint32_t type, QdotTypeCase* out) {
  switch (type) {
    case LH_QDOT_F32: *out = {LH_QDOT_F32, "F32", f32_random, f32_dequantize, {}}; return true;
    case LH_QDOT_F16: *out = {LH_QDOT_F16, "F16", f16_random, f16_dequantize, {}}; return true;
    case LH_QDOT_Q4_0: *out = {LH_QDOT_Q4_0, "Q4_0", q4_0_random, q4_0_dequantize, {}}; return true;
    case LH_QDOT_Q8_0: *out = {LH_QDOT_Q8_0, "Q8_0", q8_0_random, q8_0_dequantize, {}}; return true;
    default: return false;
  }
}

void test_quant_dot_q() {
  // F32/F16: k not a multiple of 16 (the AVX-512 tail is masked); Q: odd block counts (a lone last
  // block in the AVX-512 pair loop, a short last quad in the Q4_0 decode), and 34 blocks (the
  // prefill kernel's chunks of 32 blocks and a short one)
  qdot_sweep({LH_QDOT_F32, "F32", f32_random, f32_dequantize, {1, 7, 33, 160}});
  qdot_sweep({LH_QDOT_F16, "F16", f16_random, f16_dequantize, {1, 15, 17, 96}});
  qdot_sweep({LH_QDOT_Q4_0, "Q4_0", q4_0_random, q4_0_dequantize, {32, 96, 352, 1088}});
  qdot_sweep({LH_QDOT_Q8_0, "Q8_0", q8_0_random, q8_0_dequantize, {32, 96, 352, 1088}});
  qdot_check_same_bits({LH_QDOT_Q4_0, "Q4_0", q4_0_random, q4_0_dequantize, {32}}, LH_QDOT_AMX, LH_QDOT_AVX512, kAmxShapes, extreme_row<false>, 1.0f,
                       kAmxWhat);
  qdot_check_same_bits({LH_QDOT_Q8_0, "Q8_0", q8_0_random, q8_0_dequantize, {32}}, LH_QDOT_AMX, LH_QDOT_AVX512, kAmxShapes, extreme_row<true>, 1.0f,
                       kAmxWhat);
  check_avx2_prefill<false>({LH_QDOT_Q4_0, "Q4_0", q4_0_random, q4_0_dequantize, {32}});
  check_avx2_prefill<true>({LH_QDOT_Q8_0, "Q8_0", q8_0_random, q8_0_dequantize, {32}});
  check_ggml_activation_scale();
}
