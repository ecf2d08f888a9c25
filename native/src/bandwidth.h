// Memory read bandwidth, measured: a vectorised sum over a buffer allocated (and touched) once, on
// 2 MiB pages where the kernel gives them (madvise MADV_HUGEPAGE), timed per pass, best pass kept.
// Used by bench/ to turn "bytes read per decode token" into a tokens/s upper bound. Not used by the
// engine.
#pragma once

#include <cstdint>

#include "status.h"

constexpr uint64_t LH_BANDWIDTH_MIN_BYTES = 65536;
constexpr uint64_t LH_BANDWIDTH_MAX_BYTES = 1ull << 36;  // 64 GiB
constexpr uint32_t LH_BANDWIDTH_MAX_REPEATS = 1000;
constexpr uint32_t LH_BANDWIDTH_MAX_THREADS = 256;

// Allocates `bytes` (rounded down to a multiple of 64 * threads), fills it, then `repeats` times
// sums all of it with `threads` threads (each its own contiguous slice; the calling thread is one
// of them) and keeps the fastest pass. *gb_per_s = bytes / seconds / 1e9 of that pass.
// LH_BAD_ARGUMENT: bytes outside [MIN, MAX], repeats outside [1, MAX_REPEATS], threads outside
// [1, MAX_THREADS], null out. LH_OUT_OF_MEMORY: the buffer could not be allocated. LH_INTERNAL:
// a thread could not be started. Nothing is written to *gb_per_s on failure; the buffer is freed.
lh_status lh_measure_read_bandwidth(uint64_t bytes, uint32_t repeats, uint32_t threads, double* gb_per_s);
