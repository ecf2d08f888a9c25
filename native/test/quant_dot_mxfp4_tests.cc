// Tests of the MXFP4 dot kernels (quant_dot_mxfp4.cc): random blocks (every nibble, E8M0 exponents
// over a realistic range) and ggml's dequantization of them (ggml-quants.c dequantize_row_mxfp4:
// x = kvalues_mxfp4[nibble] · GGML_E8M0_TO_FP32_HALF(e), written here in float64 from that formula,
// not from quant_dot_mxfp4.cc), through qdot_sweep's checks on every implementation; the E8M0
// conversion at its edges (subnormal e = 0, 1, and e = 254); every implementation against the scalar
// reference at the extreme codes.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "quant_dot_sweep.h"

namespace {

constexpr size_t kBlock = 17;
// E2M1 doubled (ggml's kvalues_mxfp4), as the OCP MX spec's FP4 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 × 2
constexpr double kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, -0.0, -1, -2, -3, -4, -6, -8, -12};

// ---- MXFP4: blocks of 32, 17 bytes: uint8 e, qs[16]; x[j] = kv[qs[j] & 15]·2^(e−128), x[j+16] = kv[qs[j] >> 4]·2^(e−128) ----
void mxfp4_random(Rng& rng, uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b, out += kBlock) {
    out[0] = static_cast<uint8_t>(118 + rng.next() % 8);  // 2^-10 .. 2^-3: gpt-oss's expert weights' range
    for (int j = 0; j < 16; ++j) out[1 + j] = static_cast<uint8_t>(rng.next());
  }
}
void mxfp4_dequantize(const uint8_t* row, uint64_t k, double* value, double* magnitude) {
  for (uint64_t b = 0; b < k / 32; ++b, row += kBlock, value += 32, magnitude += 32) {
    const double d = std::ldexp(1.0, static_cast<int>(row[0]) - 128);
    for (int j = 0; j < 16; ++j) {
      value[j] = kValues[row[1 + j] & 0x0F] * d;
      value[j + 16] = kValues[row[1 + j] >> 4] * d;
    }
    for (int j = 0; j < 32; ++j) magnitude[j] = std::fabs(value[j]);
  }
}

// Row 0 at the extremes: every nibble 15 (−12) or 7 (+12), against codes of ±127 (token 1).
void most_negative_row(uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b) std::memset(out + b * kBlock + 1, 0xFF, kBlock - 1);
}
void most_positive_row(uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b) std::memset(out + b * kBlock + 1, 0x77, kBlock - 1);
}

const QdotTypeCase kCase{LH_QDOT_MXFP4, "MXFP4", mxfp4_random, mxfp4_dequantize, {}};

// One block, element 0 nibble 1 (kv 1), the rest 0, against x = 127 at element 0: the integer dot is
// 127 and d_x 1, so y = 127·2^(e−128) exactly (subnormal for e ≤ 1, near FLT_MAX / 2^1 for e = 254).
void check_e8m0_edges() {
  const uint8_t exps[] = {0, 1, 2, 100, 127, 128, 129, 254};
  float x[32] = {127.0f};
  for (const lh_qdot_impl impl : {LH_QDOT_SCALAR, LH_QDOT_AVX2, LH_QDOT_AVX512}) {
    lh_qdot_kernels kern{};
    if (!lh_qdot_kernels_for(LH_QDOT_MXFP4, impl, &kern)) continue;
    std::vector<uint8_t> xq(kern.act_row_bytes(32));
    kern.quantize_act(x, 32, xq.data());
    bool ok = true;
    std::string bad;
    for (const uint8_t e : exps) {
      uint8_t blk[kBlock] = {e, 0x01};
      float y = 0;
      kern.dot_tile(blk, kBlock, 1, 32, xq.data(), 1, &y, 1);
      const float want = static_cast<float>(std::ldexp(127.0, static_cast<int>(e) - 128));
      if (y != want) {
        ok = false;
        bad += " e=" + std::to_string(e) + ": " + std::to_string(y);
      }
    }
    check(ok, ("MXFP4 impl " + std::to_string(impl) + ": E8M0 scale 2^(e-128) exact at e = 0, 1 (subnormal), 2, 100, 127, 128, 129, 254").c_str(), "%s",
          bad.c_str());
  }
}

// every SIMD implementation within float-order rounding of scalar over tile remainders (rows not a
// multiple of 4, tokens 1..9, odd block counts), at both extremes; the AVX-512 decode's stack limit
// (256 block pairs: k = 16384 decodes there, k = 16416 falls back to the tiles); the AVX-512 prefill
// (8 tokens and more) over more than a 64-token pass, a 32-block chunk and a 16-row group, and 7
// tokens (the tiles)
const std::vector<std::array<uint32_t, 3>> kShapes = {{1, 1, 32}, {5, 2, 96}, {13, 3, 352}, {7, 5, 1088}, {16, 9, 224}, {33, 17, 2080}, {3, 1, 16384}, {2, 2, 16416}, {20, 70, 2080}, {16, 8, 96}, {5, 7, 96}};

}  // namespace

bool qdot_mxfp4_case(uint32_t type, QdotTypeCase* out) {
  if (type != LH_QDOT_MXFP4) return false;
  *out = kCase;
  return true;
}

void test_quant_dot_mxfp4() {
  // odd block counts (a lone last block in the AVX-512 pair loop), and more than one tile of rows
  QdotTypeCase c = kCase;
  c.ks = {32, 96, 352, 1088};
  qdot_sweep(c);
  check_e8m0_edges();
  for (const lh_qdot_impl impl : {LH_QDOT_AVX2, LH_QDOT_AVX512}) {
    qdot_check_close(c, impl, LH_QDOT_SCALAR, kShapes, most_negative_row, 1.0f, 1e-5, "within 1e-5 of sum|terms| of scalar (11 shapes, nibbles -12, codes +127)");
    qdot_check_close(c, impl, LH_QDOT_SCALAR, kShapes, most_positive_row, -1.0f, 1e-5, "within 1e-5 of sum|terms| of scalar (11 shapes, nibbles +12, codes -127)");
  }
  // the two prefills (8 tokens and more) do the same integers and float operations per row, token
  // and block in the same order: AVX2's gives AVX-512's bits, where this CPU (and the level cap) runs both
  if (!lh_qdot_available(LH_QDOT_AVX512)) {
    std::printf("info  MXFP4 avx2: avx512 not available here (CPU or LONGHAND_CPU_LEVEL), prefill bits not held against it\n");
    return;
  }
  const std::vector<std::array<uint32_t, 3>> prefill = {{16, 8, 96}, {20, 70, 2080}, {5, 9, 32}, {33, 40, 1088}, {9, 64, 352}};
  qdot_check_same_bits(c, LH_QDOT_AVX2, LH_QDOT_AVX512, prefill, most_negative_row, 1.0f, "prefill gives avx512's bits (5 shapes, nibbles -12, codes +127)");
  qdot_check_same_bits(c, LH_QDOT_AVX2, LH_QDOT_AVX512, prefill, most_positive_row, -1.0f, "prefill gives avx512's bits (5 shapes, nibbles +12, codes -127)");
}
