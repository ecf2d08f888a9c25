// Tests of the Q4_K, Q5_K, Q6_K dot kernels (quant_dot.h): random super-blocks (every 6-bit scale
// and min, every 5th/6th bit, Q6_K's int8 scales down to -128) and ggml's dequantization of them
// (ggml-quants.c dequantize_row_q4_K / _q5_K / _q6_K, written here from those loops, not from
// quant_dot_k.cc), run through qdot_sweep's checks on every implementation.
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "../src/fp16.h"
#include "check.h"
#include "quant_dot_sweep.h"

namespace {

constexpr uint64_t QK_K = 256;

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return lh_fp16_to_fp32(h);
}

void put_half(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// ggml's get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 packed bytes
void get_scale_min_k4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// Q4_K 144 B and Q5_K 176 B: fp16 d, fp16 dmin, scales[12], (Q5_K: qh[32]), qs[128]
template <bool FIVE>
void k45_random(Rng& rng, uint64_t k, uint8_t* out) {
  const size_t bytes = FIVE ? 176 : 144;
  for (uint64_t b = 0; b < k / QK_K; ++b, out += bytes) {
    put_half(out, qdot_random_half(rng, 1e-4f, 2e-3f, false));
    put_half(out + 2, qdot_random_half(rng, 1e-4f, 4e-3f, false));
    for (size_t i = 4; i < bytes; ++i) out[i] = static_cast<uint8_t>(rng.next());
  }
}

template <bool FIVE>
void k45_dequantize(const uint8_t* row, uint64_t k, double* y, double* magnitude) {
  const size_t bytes = FIVE ? 176 : 144;
  for (uint64_t b = 0; b < k / QK_K; ++b, row += bytes) {
    const double d = half_at(row), min = half_at(row + 2);
    const uint8_t* scales = row + 4;
    const uint8_t* qh = row + 16;
    const uint8_t* q = row + (FIVE ? 48 : 16);
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (uint64_t j = 0; j < QK_K; j += 64) {
      int sc, m;
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const double d1 = d * sc, m1 = min * m;
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const double d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) {
        const int c = (q[l] & 0xF) + (FIVE && (qh[l] & u1) ? 16 : 0);
        *y++ = d1 * c - m1;
        *magnitude++ = std::fabs(d1 * c) + std::fabs(m1);
      }
      for (int l = 0; l < 32; ++l) {
        const int c = (q[l] >> 4) + (FIVE && (qh[l] & u2) ? 16 : 0);
        *y++ = d2 * c - m2;
        *magnitude++ = std::fabs(d2 * c) + std::fabs(m2);
      }
      q += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

// Q6_K 210 B: ql[128], qh[64], int8 scales[16], fp16 d
void q6k_random(Rng& rng, uint64_t k, uint8_t* out) {
  for (uint64_t b = 0; b < k / QK_K; ++b, out += 210) {
    for (int i = 0; i < 208; ++i) out[i] = static_cast<uint8_t>(rng.next());
    put_half(out + 208, qdot_random_half(rng, 1e-5f, 2e-4f, true));
  }
}

void q6k_dequantize(const uint8_t* row, uint64_t k, double* y, double* magnitude) {
  for (uint64_t b = 0; b < k / QK_K; ++b, row += 210) {
    const double d = half_at(row + 208);
    const uint8_t* ql = row;
    const uint8_t* qh = row + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(row + 192);
    for (uint64_t n = 0; n < QK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      for (int l = 0; l < 128; ++l) magnitude[l] = std::fabs(y[l]);
      y += 128;
      magnitude += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// A super-block at the integer extremes: the largest codes and scales (Q4_K/Q5_K: 15 or 31 × 63,
// min 63), Q6_K's most negative product (q6 - 32 = -32 × scale -128).
void extreme_row(uint32_t type, uint64_t k, uint8_t* out) {
  const size_t bytes = type == LH_QDOT_Q4_K ? 144 : type == LH_QDOT_Q5_K ? 176 : 210;
  for (uint64_t b = 0; b < k / QK_K; ++b, out += bytes) {
    if (type == LH_QDOT_Q6_K) {
      std::memset(out, 0, 192);
      std::memset(out + 192, 0x80, 16);
      put_half(out + 208, lh_fp32_to_fp16(1e-4f));
    } else {
      std::memset(out + 4, 0xff, bytes - 4);
      put_half(out, lh_fp32_to_fp16(1e-3f));
      put_half(out + 2, lh_fp32_to_fp16(2e-3f));
    }
  }
}

template <uint32_t TYPE>
void extreme_row_of(uint64_t k, uint8_t* out) { extreme_row(TYPE, k, out); }

// The AMX prefill computes the scalar reference's integers and float products in its order: the
// same bits, for every shape a prefill meets (rows < 16, a last group of < 16 tokens, more tokens
// than a 256-token pass, odd super-block counts per 2-block chunk) and at the integer extremes.
const std::vector<std::array<uint32_t, 3>> kAmxShapes = {{16, 16, 256}, {5, 17, 768}, {33, 40, 1280}, {16, 300, 512}, {3, 64, 256}, {20, 31, 256}};
constexpr const char* kAmxWhat = "prefill gives the scalar reference's bits (6 shapes, extremes)";

}  // namespace

bool qdot_k_case(uint32_t type, QdotTypeCase* out) {
  switch (type) {
    case LH_QDOT_Q4_K: *out = {LH_QDOT_Q4_K, "Q4_K", k45_random<false>, k45_dequantize<false>, {}}; return true;
    case LH_QDOT_Q5_K: *out = {LH_QDOT_Q5_K, "Q5_K", k45_random<true>, k45_dequantize<true>, {}}; return true;
    case LH_QDOT_Q6_K: *out = {LH_QDOT_Q6_K, "Q6_K", q6k_random, q6k_dequantize, {}}; return true;
    default: return false;
  }
}

void test_quant_dot_k() {
  const std::vector<uint64_t> ks = {256, 512, 768};
  qdot_sweep({LH_QDOT_Q4_K, "Q4_K", k45_random<false>, k45_dequantize<false>, ks});
  qdot_sweep({LH_QDOT_Q5_K, "Q5_K", k45_random<true>, k45_dequantize<true>, ks});
  qdot_sweep({LH_QDOT_Q6_K, "Q6_K", q6k_random, q6k_dequantize, ks});
  // token 1 all -1: every code -127
  qdot_check_same_bits({LH_QDOT_Q4_K, "Q4_K", k45_random<false>, k45_dequantize<false>, ks}, LH_QDOT_AMX, LH_QDOT_SCALAR, kAmxShapes,
                       extreme_row_of<LH_QDOT_Q4_K>, -1.0f, kAmxWhat);
  qdot_check_same_bits({LH_QDOT_Q5_K, "Q5_K", k45_random<true>, k45_dequantize<true>, ks}, LH_QDOT_AMX, LH_QDOT_SCALAR, kAmxShapes,
                       extreme_row_of<LH_QDOT_Q5_K>, -1.0f, kAmxWhat);
  qdot_check_same_bits({LH_QDOT_Q6_K, "Q6_K", q6k_random, q6k_dequantize, ks}, LH_QDOT_AMX, LH_QDOT_SCALAR, kAmxShapes, extreme_row_of<LH_QDOT_Q6_K>,
                       -1.0f, kAmxWhat);
}
