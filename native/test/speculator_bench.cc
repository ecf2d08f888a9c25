// Microbenchmark of the InfiniGen speculator's worker job (q̃, scores, selection, reuse bookkeeping)
// on the long-context bench's shapes, without onnxruntime. Not part of the tests.
//
//   g++ -std=c++17 -O3 -march=x86-64-v2 -fno-exceptions -Inative/src -o /tmp/speculator_bench native/test/speculator_bench.cc \
//     native/src/{infinigen,infinigen_score,kv_pool,attention,mapped_file,parallel_ranges,row_gather,heap_trim,worker_pool}.cc native/src/reference/*.cc -lpthread
//   /tmp/speculator_bench [kv_heads=32] [heads=32] [tokens=32768] [layers=4] [steps=6] [p=19] [inline_threads=0]
//
// Builds a pool of `layers` sparse layers (plus one dense layer 0) holding `tokens` random rows,
// then per step begins every sparse layer in turn (as the runner does, one layer ahead), appends the
// current token and attends. Prints the worker's spec / gather times per layer-step (median) and the
// same figures scaled to the 14 sparse layers of the 16-layer fixture.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "infinigen.h"
#include "kv_pool.h"
#include "test_rng.h"

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const uint32_t kvh = argc > 1 ? std::atoi(argv[1]) : 32;
  const uint32_t heads = argc > 2 ? std::atoi(argv[2]) : 32;
  const uint32_t tokens = argc > 3 ? std::atoi(argv[3]) : 32768;
  const uint32_t sparse = argc > 4 ? std::atoi(argv[4]) : 4;
  const int steps = argc > 5 ? std::atoi(argv[5]) : 6;
  const uint32_t P = argc > 6 ? std::atoi(argv[6]) : 19;
  const uint32_t inline_threads = argc > 7 ? std::atoi(argv[7]) : 0;  // 0: the side worker thread
  const uint32_t D = 64, L = sparse + 1;
  Rng rng(7);
  lh_kv_pool pool{};
  lh_kv_pool_config cfg{};
  cfg.layers = L;
  cfg.kv_heads = kvh;
  cfg.head_dim = D;
  cfg.kv_type = LH_KV_F16;
  cfg.partial_dim = P;
  const uint32_t cap = tokens + steps + 8;
  cfg.budget_bytes = static_cast<uint64_t>(L) * kvh * (2ull * lh_kv_row_bytes(LH_KV_F16, D) + 4 + 2ull * P) * (cap + 8) + (1u << 20) +
                     static_cast<uint64_t>(L) * kvh * D * P * 4;
  cfg.no_huge_pages = 0;
  if (lh_kv_pool_init(&pool, &cfg) != LH_OK) {
    std::fprintf(stderr, "pool init failed\n");
    return 1;
  }
  std::vector<float> proj(static_cast<size_t>(kvh) * D * P);
  for (auto& x : proj) x = rng.normal() * 0.125f;
  const uint32_t chunk = 512;
  std::vector<float> k(static_cast<size_t>(chunk) * kvh * D), v(k.size());
  for (uint32_t l = 1; l < L; ++l) {
    lh_kv_pool_set_projection(&pool, l, proj.data());
    for (uint32_t t = 0; t < tokens; t += chunk) {
      const uint32_t n = std::min(chunk, tokens - t);
      for (size_t i = 0; i < static_cast<size_t>(n) * kvh * D; ++i) k[i] = rng.normal(), v[i] = rng.normal();
      lh_kv_pool_append_batch(&pool, l, k.data(), v.data(), n, static_cast<int32_t>(t), nullptr);
    }
  }
  lh_speculator_config sc{heads, {5.0, 0.1, 1}, 1.0 / std::sqrt(static_cast<double>(D))};
  sc.inline_threads = inline_threads;
  lh_speculator* sp = nullptr;
  if (lh_speculator_create(&sp, &pool, &sc) != LH_OK) {
    std::fprintf(stderr, "speculator create failed\n");
    return 1;
  }
  std::vector<float> q(static_cast<size_t>(heads) * D), out(q.size()), k1(static_cast<size_t>(kvh) * D), v1(k1.size());
  std::vector<double> spec, gather, attn, wait;
  uint64_t n_sum = 0;
  for (int s = 0; s < steps; ++s) {
    for (uint32_t l = 1; l < L; ++l) {
      for (auto& x : q) x = rng.normal();
      lh_speculator_begin(sp, l, q.data());
      for (auto& x : k1) x = rng.normal();
      for (auto& x : v1) x = rng.normal();
      lh_kv_pool_append(&pool, l, k1.data(), v1.data(), static_cast<int32_t>(tokens + s), nullptr);
      lh_speculator_attend(sp, l, q.data(), out.data(), inline_threads > 0 ? inline_threads : 1);
      const lh_layer_stats* st = lh_speculator_stats(sp, l);
      if (s > 0) {
        spec.push_back(st->spec_ns / 1e6);
        gather.push_back(st->gather_ns / 1e6);
        attn.push_back(st->attn_ns / 1e6);
        wait.push_back(st->wait_ns / 1e6);
        n_sum += st->n;
      }
    }
  }
  const double sm = median(spec), gm = median(gather);
  std::printf("%s kv_heads %u heads %u tokens %u p %u: per layer-step spec %.3f ms, gather %.3f ms, attention %.3f ms, n %.0f; "
              "x14 layers: spec+gather %.1f ms/step\n",
              inline_threads > 0 ? ("inline " + std::to_string(inline_threads) + " threads").c_str() : "side thread", kvh, heads, tokens, P, sm, gm, median(attn), spec.empty() ? 0.0 : static_cast<double>(n_sum) / spec.size(), (sm + gm) * 14);
  lh_speculator_destroy(sp);
  lh_kv_pool_free(&pool);
  return 0;
}
