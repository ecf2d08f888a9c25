// Microbenchmark of H2O's selection (lh_select_h2o: each KV head's k-th largest mass, then the slot
// pass that keeps and evicts) on the long-context bench's shapes: budget 10% of N, recent half of
// it, every slot live. Not part of the tests.
//
//   g++ -std=c++17 -O3 -march=x86-64-v2 -fno-exceptions -Inative/src -o /tmp/h2o_select_bench native/test/h2o_select_bench.cc \
//     native/src/{policy_select,kv_pool,worker_pool,parallel_ranges,attention,sparse_attention,row_gather,mapped_file,heap_trim}.cc native/src/reference/*.cc -lpthread
//   /tmp/h2o_select_bench [kv_heads=32] [tokens=32768] [reps=15]
//
// Prints the best call's time (one thread) and per KV head, and a checksum of the lists (equal
// checksums: the same selections).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "policy_select.h"
#include "test_rng.h"

int main(int argc, char** argv) {
  const uint32_t kv_heads = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 32;
  const uint32_t N = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 32768;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 15;
  const uint32_t budget = N / 10, recent = budget / 2;
  const size_t C = N + 64;
  Rng rng(1);
  std::vector<float> acc(static_cast<size_t>(kv_heads) * C);  // (kv_heads, C) accumulated masses
  for (auto& x : acc) x = rng.uniform() * rng.uniform();       // many small, few large, as masses are
  const std::vector<uint8_t> all_live(acc.size(), 1);
  std::vector<uint8_t> live;
  std::vector<int32_t> slots(static_cast<size_t>(kv_heads) * budget);  // (Σ lists) kept slots
  std::vector<uint32_t> offsets(kv_heads + 1);
  std::vector<uint8_t> scratch(lh_select_scratch_bytes(N));
  double best = 1e30;
  uint64_t checksum = 0;
  for (int r = 0; r < reps; ++r) {
    live = all_live;  // the selection evicts for good: every call starts from the same state
    const auto t0 = std::chrono::steady_clock::now();
    if (lh_select_h2o(acc.data(), live.data(), kv_heads, C, N, budget, recent, slots.data(), offsets.data(), scratch.data(), scratch.size(), 1) != LH_OK) {
      std::fprintf(stderr, "lh_select_h2o failed\n");
      return 1;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    best = ms < best ? ms : best;
    for (uint32_t i = 0; i < offsets[kv_heads]; ++i) checksum = checksum * 31 + static_cast<uint64_t>(slots[i]);
  }
  std::printf("h2o select: %u KV heads, N %u, budget %u: best %.3f ms a call (%.1f us a KV head), checksum %llu\n", kv_heads, N, budget,
              best, best * 1000 / kv_heads, static_cast<unsigned long long>(checksum));
  return 0;
}
