// `native_tests --bench-dot [reps]`: the dot kernels of quant_dot.h on one thread, per weight type
// and implementation, against the machine's read bandwidth. Not a test: numbers to tune by.
//
//   decode   T = 1 over 2048 × 5632 matrices (an ffn_up of the 1 B fixture), enough of them to be
//            256 MiB in all so they stream from DRAM; GB/s of weight bytes and % of the measured
//            one-thread read bandwidth
//   prefill  T = 64 tokens over 32-row tiles of one matrix (dense_stage.cc's prefill pieces):
//            ns per weight element and token, compute-bound
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../src/bandwidth.h"
#include "../src/quant_dot.h"
#include "check.h"
#include "test_rng.h"

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

const char* impl_name(lh_qdot_impl impl) { return impl == LH_QDOT_AMX ? "amx" : impl == LH_QDOT_AVX512 ? "avx512" : impl == LH_QDOT_AVX2 ? "avx2" : "scalar"; }

// random bytes with a sane fp16 scale wherever the type keeps one: finite dots, real memory traffic
void fill(uint8_t* p, size_t n, Rng& rng) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rng.next() & 0x3f);  // no fp16 NaN/Inf patterns
}

}  // namespace

void bench_quant_dot(int reps) {
  constexpr uint32_t kRows = 5632, kCols = 2048, kTok = 64;
  constexpr size_t kTotal = 256ull << 20;
  double bw1 = 0;
  lh_measure_read_bandwidth(512ull << 20, 3, 1, &bw1);
  std::printf("bench: dot kernels, one thread; read bandwidth %.1f GB/s; decode over %u x %u matrices (256 MiB in all), prefill %u tokens x 32-row tiles\n",
              bw1, kRows, kCols, kTok);
  std::printf("bench: %-6s %-7s %10s %8s %9s %16s\n", "type", "impl", "decode ms", "GB/s", "% of bw", "prefill ns/el/tok");
  const struct {
    uint32_t type;
    const char* name;
  } types[] = {{LH_QDOT_Q4_0, "Q4_0"}, {LH_QDOT_Q8_0, "Q8_0"}, {LH_QDOT_Q4_K, "Q4_K"}, {LH_QDOT_Q5_K, "Q5_K"}, {LH_QDOT_Q6_K, "Q6_K"}, {LH_QDOT_MXFP4, "MXFP4"}, {LH_QDOT_Q5_0, "Q5_0"}, {LH_QDOT_Q4_1, "Q4_1"}, {LH_QDOT_Q5_1, "Q5_1"}, {LH_QDOT_F16, "F16"}};
  Rng rng(7);
  std::vector<float> x(static_cast<size_t>(kTok) * kCols);
  for (float& v : x) v = rng.normal();
  std::vector<float> y(static_cast<size_t>(kTok) * kRows);
  for (const auto& t : types)
    for (const lh_qdot_impl impl : {LH_QDOT_SCALAR, LH_QDOT_AVX2, LH_QDOT_AVX512, LH_QDOT_AMX}) {
      lh_qdot_kernels k{};
      if (!lh_qdot_kernels_for(t.type, impl, &k)) continue;
      const size_t rb = k.row_bytes(kCols), mat = rb * kRows;
      const size_t n_mats = (kTotal + mat - 1) / mat;
      const size_t bytes = mat * n_mats;
      void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (map == MAP_FAILED) continue;
      (void)madvise(map, bytes, MADV_HUGEPAGE);  // as the engine's owned weights (and the bandwidth figure) are
      uint8_t* w = static_cast<uint8_t*>(map);
      fill(w, bytes, rng);
      // MXFP4's E8M0 byte: 2^-10 .. 2^-3 as in gpt-oss (below 2^-64 the scales would make the products subnormal)
      if (t.type == LH_QDOT_MXFP4)
        for (size_t o = 0; o < bytes; o += 17) w[o] = static_cast<uint8_t>(118 + (w[o] & 7));
      // fp16 scales of 0x3f3f-ish are ~1.2: fine for timing
      const size_t arb = k.act_row_bytes(kCols);
      std::vector<uint8_t> xq(arb * kTok + 64);
      for (uint32_t tk = 0; tk < kTok; ++tk) k.quantize_act(x.data() + static_cast<size_t>(tk) * kCols, kCols, xq.data() + tk * arb);
      // decode: every matrix once per rep, best rep
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        for (size_t m = 0; m < n_mats; ++m) k.dot_tile(w + m * mat, rb, kRows, kCols, xq.data(), 1, y.data(), kRows);
        const double dt = now_s() - t0;
        best = dt < best ? dt : best;
      }
      const double gbs = static_cast<double>(bytes) / best / 1e9;
      // prefill: one matrix in 32-row tiles, all tokens over each tile (the scalar impl on a quarter of the rows)
      const uint32_t rows = impl == LH_QDOT_SCALAR ? kRows / 8 : kRows;
      double pbest = 1e30;
      for (int r = 0; r < (reps < 3 ? reps : 3); ++r) {
        const double t0 = now_s();
        for (uint32_t r0 = 0; r0 < rows; r0 += 32) k.dot_tile(w + r0 * rb, rb, 32, kCols, xq.data(), kTok, y.data() + r0, kRows);
        const double dt = now_s() - t0;
        pbest = dt < pbest ? dt : pbest;
      }
      const double ns = pbest * 1e9 / (static_cast<double>(rows) * kCols * kTok);
      std::printf("bench: %-6s %-7s %10.3f %8.1f %8.0f%% %16.4f\n", t.name, impl_name(impl), best * 1e3 / static_cast<double>(n_mats), gbs, 100 * gbs / bw1, ns);
      munmap(map, bytes);
    }
}
