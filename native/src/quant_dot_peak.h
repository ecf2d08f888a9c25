// The dot kernels' compute peak on this host: how many weight-element × token products per second
// (multiply-accumulates, MACs) a kernel does when nothing waits for memory. bench/dense.mjs divides
// it into a prefill's MACs per token for a compute bound beside decode's bandwidth bound. Not used by
// the engine.
//
// The probe is dense_stage.cc's prefill piece: LH_PEAK_ROWS weight rows × LH_PEAK_COLS columns (in L2),
// a block of tokens (64, the stage's; 256 for AMX, its block) passing over them, the activations
// quantized once beforehand. One thread; the best of `repeats` passes of ~2e8 MACs each.
#pragma once

#include <cstdint>

#include "quant_dot.h"
#include "status.h"

constexpr uint32_t LH_PEAK_ROWS = 32;
constexpr uint32_t LH_PEAK_COLS = 2048;  // a multiple of every block size (32, 256)
constexpr uint32_t LH_PEAK_MAX_REPEATS = 100;

struct lh_qdot_peak {
  lh_qdot_impl impl;   // the kernels measured (AUTO's choice: the best the CPU and the level cap allow)
  uint32_t tokens;     // the token block
  double macs_per_s;   // weight elements × tokens per second, best pass
};

// Measures AUTO's kernels of ggml `type`. LH_BAD_ARGUMENT: the type has no kernels, repeats outside
// [1, LH_PEAK_MAX_REPEATS], null out. LH_OUT_OF_MEMORY: the probe's buffers (under 1 MiB) could not
// be allocated. *out is written only on LH_OK.
lh_status lh_qdot_measure_peak(uint32_t type, uint32_t repeats, lh_qdot_peak* out);
