// See quant_dot_peak.h.
#include "quant_dot_peak.h"

#include <chrono>
#include <cmath>
#include <cstdlib>

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A pass does about this many MACs (~a few ms on one core at the kernels' speeds): long enough to
// time, short enough that the best of a few passes misses another process's burst.
constexpr double kPassMacs = 2.0e8;

struct Buffers {
  uint8_t* w = nullptr;
  uint8_t* xq = nullptr;
  float* x = nullptr;
  float* y = nullptr;
  ~Buffers() {
    std::free(w);
    std::free(xq);
    std::free(x);
    std::free(y);
  }
};

}  // namespace

lh_status lh_qdot_measure_peak(uint32_t type, uint32_t repeats, lh_qdot_peak* out) {
  lh_qdot_kernels k{};
  if (out == nullptr || repeats < 1 || repeats > LH_PEAK_MAX_REPEATS || !lh_qdot_kernels_for(type, LH_QDOT_AUTO, &k)) return LH_BAD_ARGUMENT;
  const uint32_t tokens = k.impl == LH_QDOT_AMX ? 256 : 64;  // dense_stage.cc's token blocks
  const size_t rb = k.row_bytes(LH_PEAK_COLS), arb = k.act_row_bytes(LH_PEAK_COLS);
  Buffers b;
  b.w = static_cast<uint8_t*>(std::malloc(rb * LH_PEAK_ROWS));
  b.xq = static_cast<uint8_t*>(std::malloc(arb * tokens + 64));
  b.x = static_cast<float*>(std::malloc(sizeof(float) * LH_PEAK_COLS));
  b.y = static_cast<float*>(std::malloc(sizeof(float) * LH_PEAK_ROWS * tokens));
  if (b.w == nullptr || b.xq == nullptr || b.x == nullptr || b.y == nullptr) return LH_OUT_OF_MEMORY;
  // Weights: bytes below 0x40, so every fp16 scale the block layouts keep is finite (~1..2) and no
  // NaN slows a float path. Activations: a smooth finite row, quantized once for all tokens.
  uint32_t s = 0x9e3779b9u;
  for (size_t i = 0; i < rb * LH_PEAK_ROWS; ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    b.w[i] = static_cast<uint8_t>(s & 0x3f);
  }
  for (uint32_t i = 0; i < LH_PEAK_COLS; ++i) b.x[i] = std::sin(0.37f * static_cast<float>(i));
  for (uint32_t t = 0; t < tokens; ++t) k.quantize_act(b.x, LH_PEAK_COLS, b.xq + t * arb);
  const double call_macs = static_cast<double>(LH_PEAK_ROWS) * LH_PEAK_COLS * tokens;
  const uint32_t calls = static_cast<uint32_t>(std::ceil(kPassMacs / call_macs));
  k.dot_tile(b.w, rb, LH_PEAK_ROWS, LH_PEAK_COLS, b.xq, tokens, b.y, LH_PEAK_ROWS);  // warm: caches, AMX tile state
  double best = 1e30;
  for (uint32_t r = 0; r < repeats; ++r) {
    const double t0 = now_s();
    for (uint32_t c = 0; c < calls; ++c) k.dot_tile(b.w, rb, LH_PEAK_ROWS, LH_PEAK_COLS, b.xq, tokens, b.y, LH_PEAK_ROWS);
    const double dt = now_s() - t0;
    best = dt < best ? dt : best;
  }
  out->impl = k.impl;
  out->tokens = tokens;
  out->macs_per_s = best > 0 ? call_macs * calls / best : 0;
  return LH_OK;
}
