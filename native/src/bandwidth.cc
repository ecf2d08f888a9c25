// See bandwidth.h. SSE2 only (baseline x86-64): one core's read bandwidth is bound by the
// misses it can keep in flight, not by vector width; 4 independent accumulators keep the adds
// off the critical path. Other architectures use a plain unrolled uint64 loop.
#include "bandwidth.h"

#include <pthread.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace {

struct slice_job {
  const uint8_t* data;
  size_t bytes;  // multiple of 64
  uint64_t sum;
};

uint64_t sum_slice(const uint8_t* p, size_t bytes) {
#if defined(__SSE2__)
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < bytes; i += 64) {
    a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  uint64_t lanes[2];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes), s);
  return lanes[0] + lanes[1];
#else
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < bytes / 8; i += 8)
    for (int j = 0; j < 8; j++) a[j] += q[i + j];
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
#endif
}

void* run_slice(void* arg) {
  slice_job* job = static_cast<slice_job*>(arg);
  job->sum = sum_slice(job->data, job->bytes);
  return nullptr;
}

}  // namespace

lh_status lh_measure_read_bandwidth(uint64_t bytes, uint32_t repeats, uint32_t threads, double* gb_per_s) {
  if (gb_per_s == nullptr || bytes < LH_BANDWIDTH_MIN_BYTES || bytes > LH_BANDWIDTH_MAX_BYTES || repeats < 1 ||
      repeats > LH_BANDWIDTH_MAX_REPEATS || threads < 1 || threads > LH_BANDWIDTH_MAX_THREADS)
    return LH_BAD_ARGUMENT;
  const size_t slice = static_cast<size_t>(bytes / threads) & ~static_cast<size_t>(63);
  if (slice == 0) return LH_BAD_ARGUMENT;
  const size_t total = slice * threads;
  if (static_cast<uint64_t>(total) != static_cast<uint64_t>(slice) * threads) return LH_OUT_OF_MEMORY;

  // On 2 MiB pages where the kernel gives them, as the engine's owned weights and its KV pool are:
  // a pass over 4 KiB pages is ~15% slower (TLB misses), and a bound measured that way would let a
  // decode over huge pages read above 100% of it.
  constexpr size_t kHugePage = size_t{2} << 20;
  void* mem = nullptr;
  if (posix_memalign(&mem, kHugePage, total) != 0 || mem == nullptr) return LH_OUT_OF_MEMORY;
  (void)madvise(mem, total, MADV_HUGEPAGE);  // EINVAL without THP: 4 KiB pages then
  uint8_t* data = static_cast<uint8_t*>(mem);
  // Touch every page (and give the sum something to add) before timing.
  for (size_t i = 0; i < total; i++) data[i] = static_cast<uint8_t>(i * 131u + 7u);

  slice_job jobs[LH_BANDWIDTH_MAX_THREADS];
  pthread_t tids[LH_BANDWIDTH_MAX_THREADS];
  double best = 0;
  uint64_t check = 0;
  lh_status st = LH_OK;
  for (uint32_t r = 0; r < repeats && st == LH_OK; r++) {
    for (uint32_t t = 0; t < threads; t++) jobs[t] = slice_job{data + static_cast<size_t>(t) * slice, slice, 0};
    const auto t0 = std::chrono::steady_clock::now();
    uint32_t started = 1;
    for (; started < threads; started++) {
      if (pthread_create(&tids[started], nullptr, run_slice, &jobs[started]) != 0) {
        st = LH_INTERNAL;
        break;
      }
    }
    run_slice(&jobs[0]);
    for (uint32_t t = 1; t < started; t++) pthread_join(tids[t], nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    if (st != LH_OK) break;
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    for (uint32_t t = 0; t < threads; t++) check += jobs[t].sum;
    if (seconds > 0) {
      const double gbs = static_cast<double>(total) / seconds / 1e9;
      if (gbs > best) best = gbs;
    }
  }
  // Keep the sums observable so the loads cannot be optimised away.
  volatile uint64_t sink = check;
  (void)sink;
  std::free(mem);
  if (st != LH_OK) return st;
  if (!(best > 0)) return LH_INTERNAL;
  *gb_per_s = best;
  return LH_OK;
}
