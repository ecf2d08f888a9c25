// Fuzz target: fp16 <-> fp32 conversion (src/fp16.h), which every fp16 K/V row goes through on
// append and every kernel on read.
//
// Input: a sequence of 4-byte float bit patterns (and, read as pairs of 2 bytes, fp16 patterns).
// Invariants, per value:
//   fp32 -> fp16 is the nearest fp16 value, ties to even, |x| >= 65520 -> inf, sign kept, NaN ->
//     quiet NaN (never inf), checked in double arithmetic against the neighbouring fp16 values;
//   fp16 -> fp32 -> fp16 is the identity on non-NaN values;
//   both directions agree with the F16C instructions (what the AVX2 kernel uses), when present.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "../src/fp16.h"
#include "fuzz_input.h"

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) static uint16_t hw_to_fp16(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0));
}
__attribute__((target("f16c"))) static float hw_to_fp32(uint16_t h) { return _cvtsh_ss(h); }
static const bool kHasF16c = __builtin_cpu_supports("f16c");
#else
static const bool kHasF16c = false;
static uint16_t hw_to_fp16(float) { return 0; }
static float hw_to_fp32(uint16_t) { return 0; }
#endif

namespace {

bool is_nan16(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

void check_to_fp16(float f) {
  const uint32_t bits = lh_f32_bits(f);
  const uint16_t h = lh_fp32_to_fp16(f);
  const bool neg = (bits >> 31) != 0;
  FUZZ_CHECK(((h & 0x8000u) != 0) == neg, "sign lost: 0x%08x -> 0x%04x", bits, h);
  if (std::isnan(f)) {
    FUZZ_CHECK(is_nan16(h) && (h & 0x200u) != 0, "NaN 0x%08x -> 0x%04x is not a quiet NaN", bits, h);
    FUZZ_CHECK((h & 0x1ffu) == ((bits >> 13) & 0x1ffu), "NaN 0x%08x -> 0x%04x lost its top payload bits", bits, h);
  } else {
    const double x = std::fabs(static_cast<double>(f));
    const uint16_t mag = h & 0x7fffu;
    if (x >= 65520.0) {
      FUZZ_CHECK(mag == 0x7c00u, "0x%08x (|x| >= 65520) -> 0x%04x, expected inf", bits, h);
    } else {
      FUZZ_CHECK(mag < 0x7c00u, "finite 0x%08x below 65520 -> 0x%04x (inf/NaN)", bits, h);
      // nearest: no neighbour of `mag` is closer; at a tie the even mantissa wins
      const double here = lh_fp16_to_fp32(mag);
      const double d = std::fabs(x - here);
      for (int step : {-1, 1}) {
        const int other = static_cast<int>(mag) + step;
        if (other < 0 || other > 0x7bff) continue;
        const double od = std::fabs(x - static_cast<double>(lh_fp16_to_fp32(static_cast<uint16_t>(other))));
        FUZZ_CHECK(d < od || (d == od && (mag & 1u) == 0), "0x%08x -> 0x%04x, but 0x%04x is nearer or the even tie", bits, h,
                   static_cast<unsigned>(other));
      }
      if (mag == 0x7bff) FUZZ_CHECK(x - here < 16.0, "0x%08x -> max finite, should overflow", bits);
    }
  }
  if (kHasF16c) FUZZ_CHECK(hw_to_fp16(f) == h, "0x%08x: software 0x%04x, F16C 0x%04x", bits, h, hw_to_fp16(f));
}

void check_from_fp16(uint16_t h) {
  const float f = lh_fp16_to_fp32(h);
  if (is_nan16(h)) {
    FUZZ_CHECK(std::isnan(f), "0x%04x is NaN, widened to non-NaN", h);
    FUZZ_CHECK(lh_fp32_to_fp16(f) == (h | 0x200u), "NaN 0x%04x round trip gave 0x%04x", h, lh_fp32_to_fp16(f));
  } else {
    FUZZ_CHECK(lh_fp32_to_fp16(f) == h, "0x%04x -> %a -> 0x%04x", h, static_cast<double>(f), lh_fp32_to_fp16(f));
  }
  if (kHasF16c) {
    const float hw = hw_to_fp32(h);
    FUZZ_CHECK(lh_f32_bits(hw) == lh_f32_bits(f) || (std::isnan(hw) && std::isnan(f)), "0x%04x: software %a, F16C %a", h,
               static_cast<double>(f), static_cast<double>(hw));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (size_t i = 0; i + 4 <= size; i += 4) {
    uint32_t bits;
    std::memcpy(&bits, data + i, 4);
    check_to_fp16(lh_bits_f32(bits));
    check_from_fp16(static_cast<uint16_t>(bits));
    check_from_fp16(static_cast<uint16_t>(bits >> 16));
    // the values next to each fp16 rounding boundary are where bugs live: probe the midpoint
    // between this pattern's fp16 value and its successor, and one float either side
    const uint16_t h = static_cast<uint16_t>(bits) & 0x7fffu;
    if (h < 0x7bff) {
      const float mid = (lh_fp16_to_fp32(h) + lh_fp16_to_fp32(static_cast<uint16_t>(h + 1))) * 0.5f;
      const float sign = (bits & 0x8000u) ? -1.0f : 1.0f;
      check_to_fp16(sign * mid);
      check_to_fp16(sign * std::nextafter(mid, 0.0f));
      check_to_fp16(sign * std::nextafter(mid, INFINITY));
    }
  }
  return 0;
}
