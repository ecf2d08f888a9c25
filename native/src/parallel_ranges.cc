// lh_parallel_ranges: see parallel_ranges.h.
#include "parallel_ranges.h"

#include <pthread.h>

namespace {
struct Range {
  void (*run)(void*, uint32_t, uint32_t);
  void* ctx;
  uint32_t begin, end;
};

void* range_main(void* arg) {
  const Range* r = static_cast<const Range*>(arg);
  r->run(r->ctx, r->begin, r->end);
  return nullptr;
}
}  // namespace

void lh_parallel_ranges(uint32_t items, uint32_t threads, void (*run)(void* ctx, uint32_t begin, uint32_t end), void* ctx) {
  if (items == 0) return;
  if (threads < 1) threads = 1;
  if (threads > LH_MAX_RANGE_THREADS) threads = LH_MAX_RANGE_THREADS;
  const uint32_t used = threads < items ? threads : items;
  Range ranges[LH_MAX_RANGE_THREADS];
  pthread_t ids[LH_MAX_RANGE_THREADS];
  bool started[LH_MAX_RANGE_THREADS] = {};
  for (uint32_t r = 0; r < used; ++r) {
    const uint64_t b = static_cast<uint64_t>(r) * items / used, e = static_cast<uint64_t>(r + 1) * items / used;
    ranges[r] = Range{run, ctx, static_cast<uint32_t>(b), static_cast<uint32_t>(e)};
  }
  for (uint32_t r = 1; r < used; ++r) started[r] = pthread_create(&ids[r], nullptr, range_main, &ranges[r]) == 0;
  run(ctx, ranges[0].begin, ranges[0].end);
  for (uint32_t r = 1; r < used; ++r) {
    if (started[r]) pthread_join(ids[r], nullptr);
    else run(ctx, ranges[r].begin, ranges[r].end);  // no thread to be had: this thread runs the range
  }
}
