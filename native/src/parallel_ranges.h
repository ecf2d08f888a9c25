// Splitting `items` independent work items into contiguous ranges over a few threads, for one call.
//
// The calling thread runs the first range itself and starts threads − 1 pthreads for the others,
// joined before the call returns; a thread that cannot be started has its range run inline by the
// caller after the others, so the work is always done. Each item is handed to exactly one call of
// `run`, and which thread runs it does not change what it computes, so a kernel that writes each
// item's own output gives the same bits for any thread count.
//
// Ranges: item i of n goes to range floor(i · used / n) boundaries, i.e. range r = [r·n/used,
// (r+1)·n/used), used = min(threads, items). Starting a thread costs ~10–30 µs here, so callers
// pass threads > 1 only for work of at least a few hundred microseconds.
#pragma once

#include <cstdint>

constexpr uint32_t LH_MAX_RANGE_THREADS = 64;

// run(ctx, begin, end) for every range; threads 1..LH_MAX_RANGE_THREADS (out of range: clamped).
void lh_parallel_ranges(uint32_t items, uint32_t threads, void (*run)(void* ctx, uint32_t begin, uint32_t end), void* ctx);
