// Tests of the Q5_0 dot kernels (quant_dot_q5.cc): random blocks (every nibble and fifth bit, fp16
// scales of either sign) and ggml's dequantization of them (ggml-quants.c dequantize_row_q5_0:
// x[j] = ((qs[j] & 15 | bit j of qh << 4) − 16)·d, x[j+16] = ((qs[j] >> 4 | bit j+16 << 4) − 16)·d,
// written here in float64 from that formula, not from quant_dot_q5.cc), through qdot_sweep's checks
// on every implementation; every implementation against the scalar reference at the extreme codes
// (u = 0: −16 and u = 31: +15) over tile remainders; the two prefills' bits against each other.
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

constexpr size_t kBlock = 22;

// ---- Q5_0: blocks of 32, 22 bytes: fp16 d, qh[4], qs[16] ----
void q5_0_random(Rng& rng, uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b, out += kBlock) {
    const uint16_t d = qdot_random_half(rng, 1e-3f, 0.05f, true);
    std::memcpy(out, &d, 2);
    for (int j = 2; j < 22; ++j) out[j] = static_cast<uint8_t>(rng.next());
  }
}
void q5_0_dequantize(const uint8_t* row, uint64_t k, double* value, double* magnitude) {
  for (uint64_t b = 0; b < k / 32; ++b, row += kBlock, value += 32, magnitude += 32) {
    uint16_t h;
    std::memcpy(&h, row, 2);
    const double d = lh_fp16_to_fp32(h);
    const uint32_t qh = static_cast<uint32_t>(row[2]) | static_cast<uint32_t>(row[3]) << 8 | static_cast<uint32_t>(row[4]) << 16 |
                        static_cast<uint32_t>(row[5]) << 24;
    for (int j = 0; j < 16; ++j) {
      value[j] = (static_cast<int>((row[6 + j] & 0x0F) | ((qh >> j) & 1u) << 4) - 16) * d;
      value[j + 16] = (static_cast<int>((row[6 + j] >> 4) | ((qh >> (j + 16)) & 1u) << 4) - 16) * d;
    }
    for (int j = 0; j < 32; ++j) magnitude[j] = std::fabs(value[j]);
  }
}

// Row 0 at the extremes: every code 0 (−16) or 31 (+15), against codes of ±127 (token 1); scales as drawn.
void most_negative_row(uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b) std::memset(out + b * kBlock + 2, 0x00, kBlock - 2);
}
void most_positive_row(uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / 32; ++b) std::memset(out + b * kBlock + 2, 0xFF, kBlock - 2);
}

const QdotTypeCase kCase{LH_QDOT_Q5_0, "Q5_0", q5_0_random, q5_0_dequantize, {}};

// One block, a single element set: code u at element e (its fifth bit in qh, its nibble in qs) and
// every other element 16 (value 0), against x = 127 at element e and 0 elsewhere: the dot is
// (u − 16)·127 exactly, with d = 1 (fp16 0x3C00) and d_x = 1. Covers each element's bit and nibble
// position in every implementation's unpacking.
void check_each_element() {
  for (const lh_qdot_impl impl : {LH_QDOT_SCALAR, LH_QDOT_AVX2, LH_QDOT_AVX512}) {
    lh_qdot_kernels kern{};
    if (!lh_qdot_kernels_for(LH_QDOT_Q5_0, impl, &kern)) continue;
    bool ok = true;
    int bad_e = -1;
    float bad_y = 0;
    for (int e = 0; e < 32 && ok; ++e)
      for (const int u : {0, 1, 15, 17, 30, 31}) {
        // two blocks (the AVX-512 pair), the set element in the second one too
        float x[64] = {};
        x[e] = 127.0f;
        x[32 + e] = 127.0f;
        std::vector<uint8_t> xq(kern.act_row_bytes(64));
        kern.quantize_act(x, 64, xq.data());
        uint8_t blk[2 * kBlock] = {};
        for (int b = 0; b < 2; ++b) {
          uint8_t* p = blk + b * kBlock;
          p[0] = 0x00;
          p[1] = 0x3C;  // d = 1
          uint32_t qh = 0x00000000;
          for (int j = 0; j < 32; ++j) qh |= (j == e ? static_cast<uint32_t>(u >> 4) : 1u) << j;
          std::memcpy(p + 2, &qh, 4);
          for (int j = 0; j < 16; ++j) {
            const int lo = j == e ? u & 15 : 0, hi = j + 16 == e ? u & 15 : 0;
            p[6 + j] = static_cast<uint8_t>(lo | hi << 4);
          }
        }
        float y = 0;
        kern.dot_tile(blk, 2 * kBlock, 1, 64, xq.data(), 1, &y, 1);
        if (y != 2.0f * static_cast<float>((u - 16) * 127)) {
          ok = false;
          bad_e = e;
          bad_y = y;
          break;
        }
      }
    check(ok, (std::string("Q5_0 impl ") + std::to_string(impl) + ": each element's nibble and fifth bit decode to (u - 16)·q exactly").c_str(),
          "element %d: %g", bad_e, bad_y);
  }
}

const std::vector<std::array<uint32_t, 3>> kShapes = {{1, 1, 32}, {5, 2, 96}, {13, 3, 352}, {7, 5, 1088}, {16, 9, 224}, {33, 17, 2080}, {3, 1, 16384}, {2, 2, 2880}, {20, 70, 2080}, {16, 8, 96}, {5, 7, 96}};

}  // namespace

bool qdot_q5_case(uint32_t type, QdotTypeCase* out) {
  if (type != LH_QDOT_Q5_0) return false;
  *out = kCase;
  return true;
}

void test_quant_dot_q5() {
  // odd block counts (a lone last block in the AVX-512 pair loop), gpt-oss's 2880, more than one tile of rows
  QdotTypeCase c = kCase;
  c.ks = {32, 96, 352, 1088, 2880};
  qdot_sweep(c);
  check_each_element();
  for (const lh_qdot_impl impl : {LH_QDOT_AVX2, LH_QDOT_AVX512}) {
    qdot_check_close(c, impl, LH_QDOT_SCALAR, kShapes, most_negative_row, 1.0f, 1e-5, "within 1e-5 of sum|terms| of scalar (11 shapes, codes -16, q +127)");
    qdot_check_close(c, impl, LH_QDOT_SCALAR, kShapes, most_positive_row, -1.0f, 1e-5, "within 1e-5 of sum|terms| of scalar (11 shapes, codes +15, q -127)");
  }
  // the two prefills (8 tokens and more) do the same integers and float operations per row, token
  // and block in the same order: AVX2's gives AVX-512's bits, where this CPU (and the level cap) runs both
  if (!lh_qdot_available(LH_QDOT_AVX512)) {
    std::printf("info  Q5_0 avx2: avx512 not available here (CPU or LONGHAND_CPU_LEVEL), prefill bits not held against it\n");
    return;
  }
  const std::vector<std::array<uint32_t, 3>> prefill = {{16, 8, 96}, {20, 70, 2080}, {5, 9, 32}, {33, 40, 1088}, {9, 64, 352}};
  qdot_check_same_bits(c, LH_QDOT_AVX2, LH_QDOT_AVX512, prefill, most_negative_row, 1.0f, "prefill gives avx512's bits (5 shapes, codes -16, q +127)");
  qdot_check_same_bits(c, LH_QDOT_AVX2, LH_QDOT_AVX512, prefill, most_positive_row, -1.0f, "prefill gives avx512's bits (5 shapes, codes +15, q -127)");
}
