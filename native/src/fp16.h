// IEEE 754 binary16 <-> binary32 conversion, portable and exact.
//
//   lh_fp16_to_fp32: exact (every fp16 value is a float); subnormals normalised; inf stays inf;
//                    NaN stays NaN with its payload shifted into the top mantissa bits.
//   lh_fp32_to_fp16: round to nearest, ties to even (what F16C's _mm_cvtps_ph(x, 0) does);
//                    |x| >= 65520 -> inf; tiny values -> fp16 subnormals or signed zero;
//                    NaN -> quiet NaN keeping the top 9 payload bits (never turns into inf).
//
// The scalar functions are the reference; the AVX2/F16C attention path converts with the
// hardware instruction and native_tests checks that both agree on every fp16 value.
#pragma once

#include <cstdint>
#include <cstring>

static inline uint32_t lh_f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

static inline float lh_bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

static inline float lh_fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return lh_bits_f32(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return lh_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));  // normal
  if (mant == 0) return lh_bits_f32(sign);  // signed zero
  // subnormal: mant * 2^-24, exact in float
  const float mag = static_cast<float>(mant) * 0x1p-24f;
  return lh_bits_f32(sign | lh_f32_bits(mag));
}

static inline uint16_t lh_fp32_to_fp16(float f) {
  const uint32_t x = lh_f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: ties-to-even rounds up to inf
  if (ax >= 0x38800000u) {                       // >= 2^-14: fp16 normal
    uint32_t r = (ax >> 13) - (112u << 10);      // rebias exponent 127 -> 15, keep 10 bits
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r += 1;  // carry may bump the exponent
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t e = ax >> 23;
  if (e < 102) return sign;  // < 2^-25: rounds to zero
  // fp16 subnormal (or rounds up to the smallest normal): r = round(m * 2^(e - 126))
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u))) r += 1;
  return static_cast<uint16_t>(sign | r);
}
