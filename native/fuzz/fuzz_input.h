// Shared by every fuzz target in this folder: turning libFuzzer's input bytes into shapes,
// choices and float data, output buffers with guard bytes, and the check that aborts.
//
// Decoding: choices (shapes, operations, indices) are read from the front of the input and float
// data (one byte per palette value) from the back, so mutating one does not shift the other. A
// target stops issuing operations once the choices run out (exhausted()); data that runs out
// comes from a xorshift64* generator seeded with a hash of the whole input, so short inputs still
// fill large buffers and every input is reproducible.
// A failed invariant prints what broke and calls abort(): libFuzzer records the input as a
// crash, exactly like a sanitizer report, so a wrong result counts as a finding, not only a
// crash.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../src/fp16.h"

#define FUZZ_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "\nFUZZ INVARIANT BROKEN at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), end_(size) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the input seeds the generator
    for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
    s_ = h | 1;
  }

  bool exhausted() const { return at_ >= end_; }

  // The next choice byte (front of the input), or a generated one when none is left.
  uint8_t byte() {
    if (at_ < end_) return data_[at_++];
    return static_cast<uint8_t>(next() >> 56);
  }
  // The next data byte (back of the input), or a generated one when none is left.
  uint8_t data_byte() {
    if (end_ > at_) return data_[--end_];
    return static_cast<uint8_t>(next() >> 56);
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | byte();
    return v;
  }
  // An integer in [lo, hi] (hi - lo < 2^32), from one byte when the range fits in one.
  uint32_t range(uint32_t lo, uint32_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - lo + 1;
    const uint32_t raw = span <= 256 ? byte() : u32();
    return lo + static_cast<uint32_t>(raw % span);
  }
  bool chance(uint32_t one_in) { return range(0, one_in - 1) == 0; }

  // A float from a palette that covers what the kernels must handle: zeros of both signs,
  // small integers and fractions (exact ties), fp16 subnormals and limits, larger magnitudes,
  // ±inf and NaN (only when `nonfinite`), and ordinary normal-ish values. Magnitudes stay
  // below 2^14 so that no finite sum in a kernel can overflow: a difference between two
  // implementations is then a real disagreement, not an accident of summation order.
  float value(bool nonfinite) {
    const uint8_t b = data_byte();
    switch (b >> 4) {
      case 0: return 0.0f;
      case 1: return (b & 1) ? -0.0f : 1.0f;
      case 2: return static_cast<float>(static_cast<int>(b & 15) - 8);           // -8 .. 7
      case 3: return static_cast<float>(static_cast<int>(b & 15) - 8) * 0.125f;  // exact eighths
      case 4: return ((b & 1) ? -1.0f : 1.0f) * 0x1p-24f * static_cast<float>(1 + (b & 14));  // fp16 subnormals
      case 5: return ((b & 1) ? -1.0f : 1.0f) * (b & 2 ? 65504.0f / 8 : 1024.0f);  // large, fp16-exact
      case 6: return ((b & 1) ? -1.0f : 1.0f) * 0x1p-30f;                    // underflows in fp16
      case 7:
        if (nonfinite) {
          const int w = b & 3;
          return w == 0 ? NAN : w == 1 ? INFINITY : w == 2 ? -INFINITY : 1.0f;
        }
        return 0.5f;
      default: return normal() * (b & 8 ? 4.0f : 1.0f);  // half of all values: continuous ones
    }
  }

  // A normal-ish float from the generator (not from the input: keeps the input small).
  float normal() {
    const float u1 = static_cast<float>(next() >> 40) * 0x1p-24f + 0x1p-25f;
    const float u2 = static_cast<float>(next() >> 40) * 0x1p-24f;
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
  }

 private:
  uint64_t next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }
  const uint8_t* data_;
  size_t end_;     // data bytes are taken from the back, down to at_
  size_t at_ = 0;  // choice bytes are taken from the front, up to end_
  uint64_t s_;
};

// An output buffer of `n` elements with guard elements on both sides, each holding a canary bit
// pattern. The usable part is exactly n elements long (ASan sees a read or write past it as well,
// because the guards are part of the same allocation: the canary check catches what ASan cannot).
template <class T>
class Guarded {
 public:
  static constexpr size_t kGuard = 16;
  explicit Guarded(size_t n) : n_(n), buf_(n + 2 * kGuard) { fill_canary(); }
  T* data() { return buf_.data() + kGuard; }
  const T* data() const { return buf_.data() + kGuard; }
  size_t size() const { return n_; }
  void fill_canary() {
    for (auto& x : buf_) std::memset(&x, 0xA5, sizeof(T));
  }
  // True when no guard element changed.
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (!is_canary(buf_[i]) || !is_canary(buf_[n_ + kGuard + i])) return false;
    return true;
  }
  // True when the usable part still holds the canary everywhere (nothing was written).
  bool untouched() const {
    for (size_t i = 0; i < n_; ++i)
      if (!is_canary(buf_[kGuard + i])) return false;
    return true;
  }

 private:
  static bool is_canary(const T& x) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    for (unsigned char c : b)
      if (c != 0xA5) return false;
    return true;
  }
  size_t n_;
  std::vector<T> buf_;
};

// Exactly what the addon hands the core for a Float32Array argument: n floats in their own heap
// block, so ASan reports any read past the end (the addon validates lengths before calling).
inline std::vector<float> floats(FuzzInput& in, size_t n, bool nonfinite) {
  std::vector<float> v(n);
  for (auto& x : v) x = in.value(nonfinite);
  return v;
}

inline bool finite_f(float x) { return std::isfinite(x); }
