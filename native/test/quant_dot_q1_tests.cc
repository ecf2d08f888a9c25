// Tests of the Q4_1 / Q5_1 dot kernels (quant_dot_q1.cc): random blocks (every nibble and fifth bit,
// fp16 scales and minimums of either sign) and ggml's dequantization of them (ggml-quants.c
// dequantize_row_q4_1 / _q5_1: x = u·d + m, written here in float64 from that formula, not from
// quant_dot_q1.cc), through qdot_sweep's checks on every implementation; every implementation
// against the scalar reference at the extreme codes (u = 0 and u = 15 / 31) over tile remainders;
// the two prefills' bits against each other.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/fp16.h"
#include "check.h"
#include "quant_dot_sweep.h"

namespace {

template <bool kFive>
constexpr size_t kBlock = kFive ? 24 : 20;
template <bool kFive>
constexpr size_t kQs = kFive ? 8 : 4;

double half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return lh_fp16_to_fp32(h);
}

template <bool kFive>
void q1_random(Rng& rng, uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b, out += kBlock<kFive>) {
    const uint16_t d = qdot_random_half(rng, 1e-3f, 0.05f, true), m = qdot_random_half(rng, 1e-3f, 0.3f, true);
    std::memcpy(out, &d, 2);
    std::memcpy(out + 2, &m, 2);
    for (size_t j = 4; j < kBlock<kFive>; ++j) out[j] = static_cast<uint8_t>(rng.next());
  }
}
template <bool kFive>
void q1_dequantize(const uint8_t* row, uint64_t k, double* value, double* magnitude) {
  for (uint64_t b = 0; b < k / 32; ++b, row += kBlock<kFive>, value += 32, magnitude += 32) {
    const double d = half_at(row), m = half_at(row + 2);
    uint32_t qh = 0;
    if (kFive) qh = static_cast<uint32_t>(row[4]) | static_cast<uint32_t>(row[5]) << 8 | static_cast<uint32_t>(row[6]) << 16 | static_cast<uint32_t>(row[7]) << 24;
    for (int j = 0; j < 16; ++j) {
      const int lo = (row[kQs<kFive> + j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (row[kQs<kFive> + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      value[j] = lo * d + m;
      value[j + 16] = hi * d + m;
      magnitude[j] = std::fabs(lo * d) + std::fabs(m);
      magnitude[j + 16] = std::fabs(hi * d) + std::fabs(m);
    }
  }
}

template <bool kFive>
void low_row(uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b) std::memset(out + b * kBlock<kFive> + 4, 0x00, kBlock<kFive> - 4);
}
template <bool kFive>
void high_row(uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b) std::memset(out + b * kBlock<kFive> + 4, 0xFF, kBlock<kFive> - 4);
}

const std::vector<std::array<uint32_t, 3>> kShapes = {{1, 1, 32}, {5, 2, 96}, {13, 3, 352}, {7, 5, 1088}, {16, 9, 224}, {33, 17, 2080}, {3, 1, 16384}, {2, 2, 2880}, {20, 70, 2080}, {16, 8, 96}, {5, 7, 96}};
const std::vector<std::array<uint32_t, 3>> kPrefill = {{16, 8, 96}, {20, 70, 2080}, {5, 9, 32}, {33, 40, 1088}, {9, 64, 352}};

template <bool kFive>
void test_type(const char* name) {
  QdotTypeCase c{kFive ? LH_QDOT_Q5_1 : LH_QDOT_Q4_1, name, q1_random<kFive>, q1_dequantize<kFive>, {32, 96, 352, 1088, 2880}};
  qdot_sweep(c);
  for (const lh_qdot_impl impl : {LH_QDOT_AVX2, LH_QDOT_AVX512}) {
    qdot_check_close(c, impl, LH_QDOT_SCALAR, kShapes, low_row<kFive>, 1.0f, 1e-5, "within 1e-5 of sum|terms| of scalar (11 shapes, codes 0, q +127)");
    qdot_check_close(c, impl, LH_QDOT_SCALAR, kShapes, high_row<kFive>, -1.0f, 1e-5, "within 1e-5 of sum|terms| of scalar (11 shapes, codes max, q -127)");
  }
  if (!lh_qdot_available(LH_QDOT_AVX512)) {
    std::printf("info  %s avx2: avx512 not available here (CPU or LONGHAND_CPU_LEVEL), prefill bits not held against it\n", name);
    return;
  }
  qdot_check_same_bits(c, LH_QDOT_AVX2, LH_QDOT_AVX512, kPrefill, high_row<kFive>, 1.0f, "prefill gives avx512's bits (5 shapes, codes max, q +127)");
  qdot_check_same_bits(c, LH_QDOT_AVX2, LH_QDOT_AVX512, kPrefill, high_row<kFive>, -1.0f, "prefill gives avx512's bits (5 shapes, codes max, q -127)");
}

}  // namespace

bool qdot_q1_case(uint32_t type, QdotTypeCase* out) {
  if (type == LH_QDOT_Q4_1) *out = {LH_QDOT_Q4_1, "Q4_1", q1_random<false>, q1_dequantize<false>, {}};
  else if (type == LH_QDOT_Q5_1) *out = {LH_QDOT_Q5_1, "Q5_1", q1_random<true>, q1_dequantize<true>, {}};
  else return false;
  return true;
}

void test_quant_dot_q1() {
  test_type<false>("Q4_1");
  test_type<true>("Q5_1");
}
