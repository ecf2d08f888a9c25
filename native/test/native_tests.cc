// C++ tests of the native core: fp16 conversion, KV pool, mapped file, the attention kernels
// against the scalar reference (random shape sweep, NMSE, NaN/Inf parity, guard bytes), and
// InfiniGen: selection vs a plain full-sort rule, partial key rows, gather + attention over the
// gathered rows vs the scalar reference and vs full attention, reuse-cache hits.
// Prints one line per check and, last, exactly "native: N passed, N failed"; exits 1 on failure.
// Built without exceptions; every check is a plain function returning normally.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../src/attention.h"
#include "../src/bandwidth.h"
#include "../src/cpu_level.h"
#include "../src/fp16.h"
#include "../src/heap_trim.h"
#include "../src/infinigen.h"
#include "../src/infinigen_score.h"
#include "../src/kv_pool.h"
#include "../src/mapped_file.h"
#include "../src/parallel_ranges.h"
#include "../src/policy_select.h"
#include "../src/sparse_attention.h"
#include "../src/status.h"
#include "../src/worker_pool.h"
#include "check.h"
#include "test_rng.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static int g_passed = 0;
static int g_failed = 0;

void check(bool ok, const char* name, const char* fmt, ...) {
  if (ok) {
    ++g_passed;
    std::printf("ok    %s\n", name);
    return;
  }
  ++g_failed;
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  std::printf("FAIL  %s: %s\n", name, why);
}

namespace {

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return lh_f32_bits(a) == lh_f32_bits(b);
}

// ---------------------------------------------------------------------------------------------
// fp16
// ---------------------------------------------------------------------------------------------
void test_fp16() {
  // 1. every fp16 value survives fp16 -> fp32 -> fp16 (NaNs stay NaN, quieted)
  int bad = 0;
  uint32_t first_bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = lh_fp16_to_fp32(static_cast<uint16_t>(h));
    const uint16_t back = lh_fp32_to_fp16(f);
    const bool is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    const bool ok = is_nan ? (std::isnan(f) && (back & 0x7c00u) == 0x7c00u && (back & 0x3ffu) != 0 &&
                              back == (h | 0x200u))
                           : back == h;
    if (!ok && bad++ == 0) first_bad = h;
  }
  check(bad == 0, "fp16 round trip, all 65536 values", "%d mismatches, first 0x%04x", bad, first_bad);

  // 2. known values
  check(lh_fp16_to_fp32(0x3c00) == 1.0f && lh_fp16_to_fp32(0xc000) == -2.0f && lh_fp16_to_fp32(0x7bff) == 65504.0f &&
            lh_fp16_to_fp32(0x0001) == 0x1p-24f && lh_fp16_to_fp32(0x0400) == 0x1p-14f &&
            std::isinf(lh_fp16_to_fp32(0x7c00)) && lh_fp16_to_fp32(0xfc00) < 0 && std::signbit(lh_fp16_to_fp32(0x8000)),
        "fp16 -> fp32 known values");
  check(lh_fp32_to_fp16(65519.0f) == 0x7bff && lh_fp32_to_fp16(65520.0f) == 0x7c00 && lh_fp32_to_fp16(1e10f) == 0x7c00 &&
            lh_fp32_to_fp16(-1e10f) == 0xfc00 && lh_fp32_to_fp16(0x1p-25f) == 0x0000 &&
            lh_fp32_to_fp16(0x1.000002p-25f) == 0x0001 && lh_fp32_to_fp16(-0.0f) == 0x8000 &&
            lh_fp32_to_fp16(1e-30f) == 0 && lh_fp32_to_fp16(INFINITY) == 0x7c00 &&
            (lh_fp32_to_fp16(NAN) & 0x7fffu) > 0x7c00u,
        "fp32 -> fp16 overflow, underflow, inf, nan");

  // 3. ties to even and nearest between every pair of adjacent finite fp16 values
  bad = 0;
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const float lo = lh_fp16_to_fp32(static_cast<uint16_t>(h));
    const float hi = lh_fp16_to_fp32(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) * 0.5f;  // exact: fp16 has 11 significant bits
    const uint16_t even = (h & 1u) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    if (lh_fp32_to_fp16(mid) != even) ++bad;
    if (lh_fp32_to_fp16(std::nextafter(mid, 0.0f)) != h) ++bad;
    if (lh_fp32_to_fp16(std::nextafter(mid, INFINITY)) != h + 1) ++bad;
    if (lh_fp32_to_fp16(-mid) != (even | 0x8000u)) ++bad;
  }
  check(bad == 0, "fp32 -> fp16 rounds to nearest, ties to even (all adjacent pairs)", "%d wrong", bad);

#if defined(__x86_64__)
  // 4. agrees with the F16C instruction (what the AVX2 kernel uses) on 2^24+ float patterns
  if (__builtin_cpu_supports("f16c")) {
    bad = 0;
    uint32_t first = 0;
    for (uint64_t x = 0; x <= 0xffffffffull; x += 251) {
      const float f = lh_bits_f32(static_cast<uint32_t>(x));
      const uint16_t hw = [&]() __attribute__((target("f16c"))) {
        return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0));
      }();
      const uint16_t sw = lh_fp32_to_fp16(f);
      if (hw != sw && bad++ == 0) first = static_cast<uint32_t>(x);
    }
    check(bad == 0, "fp32 -> fp16 matches F16C on 17M float bit patterns", "%d differ, first 0x%08x", bad, first);
    bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float hw = [&]() __attribute__((target("f16c"))) { return _cvtsh_ss(static_cast<uint16_t>(h)); }();
      if (!same_bits_or_both_nan(hw, lh_fp16_to_fp32(static_cast<uint16_t>(h)))) ++bad;
    }
    check(bad == 0, "fp16 -> fp32 matches F16C on all 65536 values", "%d differ", bad);
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// KV pool
// ---------------------------------------------------------------------------------------------
// fp16 rows on append (kv_pool.cc's to_fp16, F16C where the CPU has it) hold exactly
// lh_fp32_to_fp16's bits: ties, overflow to inf, subnormals, signed zeros, NaN payloads, and random
// bit patterns, in rows of 37 (the 8-wide loop and its scalar tail) over 3 KV heads.
void test_kv_pool_fp16_rows() {
  const uint32_t H = 3, D = 37, T = 400;
  lh_kv_pool_config cfg{static_cast<uint64_t>(T + 8) * H * (2 * D * 2 + 16) + 4096, 1, H, D, LH_KV_F16, 0};
  lh_kv_pool p;
  if (lh_kv_pool_init(&p, &cfg) != LH_OK) {
    check(false, "kv pool fp16 rows", "pool init failed");
    return;
  }
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                               0x7fbfe000u, 0x477fefffu, 0x477ff000u, 0x477fe000u, 0x38800000u, 0x387fffffu, 0x33000000u,
                               0x33000001u, 0x32ffffffu, 0x3f801000u, 0x3f803000u, 0x3f800fffu, 0xb8801000u, 0x00000001u};
  Rng rng(97);
  std::vector<float> k(H * D), v(H * D), all;
  size_t n_special = 0;
  bool ok = true;
  for (uint32_t t = 0; t < T && ok; ++t) {
    for (size_t i = 0; i < k.size(); ++i) {
      uint32_t bits = n_special < sizeof specials / sizeof specials[0] ? specials[n_special++] : static_cast<uint32_t>(rng.next());
      if (t % 2 == 1) bits = (bits & 0x807fffffu) | ((101u + static_cast<uint32_t>(rng.next() % 46)) << 23);  // exponents near fp16's range
      std::memcpy(&k[i], &bits, 4);
      v[i] = -k[i] * 0.75f;
    }
    ok = lh_kv_pool_append_batch(&p, 0, k.data(), v.data(), 1, static_cast<int32_t>(t), nullptr) == LH_OK;
    const uint16_t* kr = static_cast<const uint16_t*>(lh_kv_pool_k_rows(&p, 0));
    const uint16_t* vr = static_cast<const uint16_t*>(lh_kv_pool_v_rows(&p, 0));
    for (uint32_t g = 0; g < H && ok; ++g)
      for (uint32_t i = 0; i < D; ++i) {
        const size_t at = g * lh_kv_pool_head_stride(&p, 0) + static_cast<size_t>(t) * D + i;
        if (kr[at] != lh_fp32_to_fp16(k[g * D + i]) || vr[at] != lh_fp32_to_fp16(v[g * D + i])) ok = false;
      }
  }
  check(ok, "kv pool fp16 rows: appended rows hold lh_fp32_to_fp16's bits (specials, ties, subnormals, NaN payloads, random bits)");
  lh_kv_pool_free(&p);
}

void test_kv_pool() {
  // capacity vs budget: the plan fits the budget, and one more token would not
  {
    bool ok = true;
    const uint64_t budgets[] = {1 << 12, 100000, 1 << 20, 12345678};
    const uint32_t dims[][3] = {{1, 1, 1}, {2, 2, 8}, {4, 8, 64}, {3, 1, 128}};
    for (const uint64_t b : budgets) {
      for (const auto& d : dims) {
        lh_kv_pool_config cfg{b, d[0], d[1], d[2], LH_KV_F16, 0};
        uint32_t cap = 0;
        uint64_t bytes = 0;
        const lh_status st = lh_kv_pool_plan(&cfg, &cap, &bytes);
        if (st == LH_BAD_ARGUMENT) continue;  // budget too small for this shape
        lh_kv_pool_config more = cfg;
        uint32_t cap2 = 0;
        uint64_t bytes2 = 0;
        more.budget_bytes = bytes + cfg.layers * cfg.kv_heads * (4ull * cfg.head_dim + 4) * 1 + 4 * 64;
        lh_kv_pool_plan(&more, &cap2, &bytes2);
        const uint64_t per_token = static_cast<uint64_t>(d[0]) * d[1] * (4ull * d[2] + 4);
        ok = ok && st == LH_OK && bytes <= b && cap >= 1 && cap <= b / per_token && cap2 >= cap + 1 &&
             b - bytes < per_token + 4 * 64;  // no more than one token and the padding unused
      }
    }
    check(ok, "kv pool capacity fits the budget and wastes < 1 token + padding");
  }
  {
    lh_kv_pool_config tiny{10, 2, 2, 8, LH_KV_F16, 0};
    uint32_t cap;
    uint64_t bytes;
    lh_kv_pool_config huge{1ull << 60, 2, 2, 8, LH_KV_F16, 0};
    lh_kv_pool_config ram{1ull << 46, 32, 8, 128, LH_KV_F16, 0};  // 64 TiB: more than this machine's RAM
    lh_kv_pool_config zero{1 << 20, 0, 2, 8, LH_KV_F16, 0}, wide{1 << 20, 2, 2, LH_MAX_HEAD_DIM + 1, LH_KV_F16, 0};
    check(lh_kv_pool_plan(&tiny, &cap, &bytes) == LH_BAD_ARGUMENT && lh_kv_pool_plan(&huge, &cap, &bytes) == LH_BAD_ARGUMENT &&
              lh_kv_pool_plan(&ram, &cap, &bytes) == LH_OUT_OF_MEMORY && lh_kv_pool_plan(&zero, &cap, &bytes) == LH_BAD_ARGUMENT &&
              lh_kv_pool_plan(&wide, &cap, &bytes) == LH_BAD_ARGUMENT && lh_kv_pool_plan(nullptr, &cap, &bytes) == LH_BAD_ARGUMENT,
          "kv pool rejects tiny, absurd, larger-than-RAM and malformed configs");
    lh_kv_pool p;
    check(lh_kv_pool_init(&p, &huge) == LH_BAD_ARGUMENT && p.base == nullptr, "kv pool init failure leaves the struct zeroed");
  }
  // append / readback / positions / full / reset / free
  {
    const uint32_t L = 3, H = 2, D = 12;
    lh_kv_pool_config cfg{0, L, H, D, LH_KV_F16, 0};
    cfg.budget_bytes = 5ull * L * H * (4 * D + 4) + 4 * 64 + 3;  // exactly 5 tokens
    lh_kv_pool p;
    const lh_status st = lh_kv_pool_init(&p, &cfg);
    check(st == LH_OK && p.capacity == 5 && p.byte_length <= cfg.budget_bytes, "kv pool init (5 tokens)", "status %d cap %u",
          st, p.capacity);
    if (st != LH_OK) return;
    Rng rng(7);
    std::vector<float> k(H * D), v(H * D);
    std::vector<std::vector<float>> kept_k, kept_v;
    bool ok = true;
    for (uint32_t t = 0; t < 5; ++t) {
      for (auto& x : k) x = lh_fp16_to_fp32(lh_fp32_to_fp16(rng.normal()));  // fp16-exact values
      for (auto& x : v) x = rng.normal();
      uint32_t slot = 99;
      ok = ok && lh_kv_pool_append(&p, 1, k.data(), v.data(), static_cast<int32_t>(100 + t), &slot) == LH_OK && slot == t;
      kept_k.push_back(k);
      kept_v.push_back(v);
    }
    check(ok && lh_kv_pool_length(&p, 1) == 5 && lh_kv_pool_length(&p, 0) == 0 && lh_kv_pool_length(&p, 2) == 0,
          "kv pool append fills one layer only");
    ok = true;
    float row[D];
    int32_t pos = -1;
    for (uint32_t t = 0; t < 5; ++t) {
      for (uint32_t g = 0; g < H; ++g) {
        ok = ok && lh_kv_pool_read(&p, LH_KV_KEY, 1, g, t, row, &pos) == LH_OK && pos == static_cast<int32_t>(100 + t);
        for (uint32_t i = 0; i < D; ++i) ok = ok && row[i] == kept_k[t][g * D + i];
        ok = ok && lh_kv_pool_read(&p, LH_KV_VALUE, 1, g, t, row, nullptr) == LH_OK;
        for (uint32_t i = 0; i < D; ++i) ok = ok && row[i] == lh_fp16_to_fp32(lh_fp32_to_fp16(kept_v[t][g * D + i]));
      }
    }
    check(ok, "kv pool readback: K exact, V rounded to fp16, positions kept");
    check(lh_kv_pool_append(&p, 1, k.data(), v.data(), 7, nullptr) == LH_POOL_FULL && lh_kv_pool_length(&p, 1) == 5,
          "kv pool full returns LH_POOL_FULL and changes nothing");
    check(lh_kv_pool_append(&p, L, k.data(), v.data(), 0, nullptr) == LH_BAD_ARGUMENT &&
              lh_kv_pool_append(&p, 0, nullptr, v.data(), 0, nullptr) == LH_BAD_ARGUMENT &&
              lh_kv_pool_append(&p, 0, k.data(), v.data(), -1, nullptr) == LH_BAD_ARGUMENT &&
              lh_kv_pool_read(&p, LH_KV_KEY, 1, H, 0, row, nullptr) == LH_BAD_ARGUMENT &&
              lh_kv_pool_read(&p, LH_KV_KEY, 1, 0, 5, row, nullptr) == LH_BAD_ARGUMENT &&
              lh_kv_pool_read(&p, LH_KV_KEY, 0, 0, 0, row, nullptr) == LH_BAD_ARGUMENT,
          "kv pool bad arguments return LH_BAD_ARGUMENT");
    check(lh_kv_pool_reset(&p) == LH_OK && lh_kv_pool_length(&p, 1) == 0 &&
              lh_kv_pool_append(&p, 1, k.data(), v.data(), 0, nullptr) == LH_OK,
          "kv pool reset empties every layer");
    lh_kv_pool_free(&p);
    lh_kv_pool_free(&p);
    check(!lh_kv_pool_live(&p) && lh_kv_pool_append(&p, 0, k.data(), v.data(), 0, nullptr) == LH_BAD_ARGUMENT &&
              lh_kv_pool_length(&p, 0) == 0 && lh_kv_pool_k_rows(&p, 0) == nullptr && lh_kv_pool_reset(&p) == LH_BAD_ARGUMENT,
          "kv pool free is idempotent; use after free is LH_BAD_ARGUMENT");
  }
}

// ---------------------------------------------------------------------------------------------
// Mapped file
// ---------------------------------------------------------------------------------------------
void test_mapped_file() {
  char path[] = "/tmp/longhand-native-test-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    check(false, "mapped file: temp file", "mkstemp failed");
    return;
  }
  unsigned char bytes[10000];
  for (size_t i = 0; i < sizeof bytes; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  const bool wrote = write(fd, bytes, sizeof bytes) == static_cast<ssize_t>(sizeof bytes);
  close(fd);
  lh_mapped_file f;
  const lh_status st = lh_mapped_file_open(&f, path);
  check(wrote && st == LH_OK && f.size == sizeof bytes && std::memcmp(f.data, bytes, sizeof bytes) == 0,
        "mapped file has the file's bytes");
  if (st == LH_OK) {
    static_cast<unsigned char*>(f.data)[0] ^= 0xff;  // copy-on-write: must not reach the file
    lh_mapped_file_close(&f);
    lh_mapped_file_close(&f);
    lh_mapped_file g;
    check(lh_mapped_file_open(&g, path) == LH_OK && static_cast<unsigned char*>(g.data)[0] == bytes[0],
          "writes to a mapping are private (file unchanged); close is idempotent");
    lh_mapped_file_close(&g);
  }
  unlink(path);
  lh_mapped_file h;
  check(lh_mapped_file_open(&h, path) == LH_IO_ERROR && h.error == ENOENT && h.data == nullptr, "missing file: LH_IO_ERROR, ENOENT");
  check(lh_mapped_file_open(&h, "/tmp") == LH_IO_ERROR && h.error == EISDIR, "directory: LH_IO_ERROR, EISDIR");
  check(lh_mapped_file_open(&h, "") == LH_BAD_ARGUMENT && lh_mapped_file_open(&h, nullptr) == LH_BAD_ARGUMENT,
        "empty or null path: LH_BAD_ARGUMENT");
  char empty[] = "/tmp/longhand-native-empty-XXXXXX";
  const int efd = mkstemp(empty);
  close(efd);
  check(lh_mapped_file_open(&h, empty) == LH_OK && h.size == 0 && h.data == nullptr, "empty file maps to 0 bytes");
  lh_mapped_file_close(&h);
  unlink(empty);
  // Regression (found by native/fuzz/fuzz_mapped_file): opening a FIFO waited for a writer forever.
  // An alarm interrupts a regressed open() (EINTR) so this test fails instead of hanging.
  char fifo_dir[] = "/tmp/longhand-native-fifo-XXXXXX";
  if (mkdtemp(fifo_dir) != nullptr) {
    const std::string fifo = std::string(fifo_dir) + "/fifo";
    struct sigaction quiet {}, before {};
    quiet.sa_handler = [](int) {};
    sigaction(SIGALRM, &quiet, &before);  // no SA_RESTART: a blocked open() returns EINTR
    const bool made = mkfifo(fifo.c_str(), 0600) == 0;
    const auto t0 = std::chrono::steady_clock::now();
    alarm(2);
    const lh_status fs = made ? lh_mapped_file_open(&h, fifo.c_str()) : LH_INTERNAL;
    alarm(0);
    sigaction(SIGALRM, &before, nullptr);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    check(made && fs == LH_IO_ERROR && h.error == EINVAL && h.data == nullptr && secs < 1.0,
          "FIFO: LH_IO_ERROR (EINVAL, not a regular file) at once, no wait for a writer", "status %d errno %d after %.2f s", fs,
          h.error, secs);
    unlink(fifo.c_str());
    rmdir(fifo_dir);
  }
}

// The kB a /proc/self/smaps field ("Anonymous", "AnonHugePages") counts over every mapping that
// overlaps [lo, hi) (whole mappings: an owned range is split into several). -1: no such mapping.
long smaps_kb(const void* lo_address, const void* hi_address, const char* field) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  const uintptr_t a = reinterpret_cast<uintptr_t>(lo_address), b = reinterpret_cast<uintptr_t>(hi_address);
  char line[512];
  char pattern[64];
  std::snprintf(pattern, sizeof pattern, "%s: %%ld kB", field);
  bool inside = false;
  long kb = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    // a mapping's header line ("lo-hi perms ..."); field lines ("Anonymous: 4 kB") do not parse as two numbers
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      inside = lo < b && hi > a;
      continue;
    }
    long v = 0;
    if (inside && std::sscanf(line, pattern, &v) == 1) kb = (kb < 0 ? 0 : kb) + v;
  }
  std::fclose(f);
  return kb;
}

// Whether transparent huge pages can be had by MADV_HUGEPAGE ("always" or "madvise" mode).
bool transparent_huge_pages_on() {
  FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return false;
  char line[128] = {0};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  return read && std::strstr(line, "[never]") == nullptr;
}

// lh_mapped_file_own: the range's pages become the process's anonymous pages with the file's
// bytes at the same addresses, the 2 MiB-aligned interior on huge pages, split over threads;
// release still brings the file's bytes back.
void test_mapped_file_own() {
  char path[] = "/tmp/longhand-native-own-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    check(false, "mapped file own: temp file", "mkstemp failed");
    return;
  }
  const size_t size = (size_t{40} << 20) + 1234;  // 40 MiB and a partial page: two 16-MiB+ pieces on two threads
  std::vector<unsigned char> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  const bool wrote = write(fd, bytes.data(), size) == static_cast<ssize_t>(size);
  close(fd);
  lh_mapped_file f;
  if (!wrote || lh_mapped_file_open(&f, path) != LH_OK) {
    check(false, "mapped file own: open", "could not write or map %s", path);
    unlink(path);
    return;
  }
  const unsigned char* data = static_cast<const unsigned char*>(f.data);
  const size_t huge = size_t{2} << 20;
  check(reinterpret_cast<uintptr_t>(data) % huge == 0, "open: the file is mapped at a 2 MiB-aligned address", "%p", f.data);
  const long before_kb = smaps_kb(data, data + size, "Anonymous");
  size_t owned = 0;
  // from inside the second page to the file's last byte: whole pages, clipped to the file; the
  // interior [2 MiB, 40 MiB) on huge pages, the rest of the first 2 MiB and the last partial page
  // on 4 KiB ones
  const lh_status st = lh_mapped_file_own(&f, 5000, size - 5000, 2, &owned);
  const long after_kb = smaps_kb(data, data + size, "Anonymous");
  const long huge_kb = smaps_kb(data, data + size, "AnonHugePages");
  check(st == LH_OK && owned == size - 4096 && std::memcmp(data, bytes.data(), size) == 0,
        "own: LH_OK, the whole pages covering the range (clipped to the file), the file's bytes unchanged", "status %d owned %zu", st,
        owned);
  check(before_kb == 0 && after_kb >= static_cast<long>((size - 4096) >> 10), "own: the range is the process's anonymous memory now (smaps)",
        "Anonymous before %ld kB, after %ld kB, range %zu kB", before_kb, after_kb, size >> 10);
  if (transparent_huge_pages_on()) {
    // 36 of the 38 interior MiB at least: the kernel may not find a free 2 MiB frame for every piece
    check(huge_kb >= 36 * 1024 && huge_kb <= 38 * 1024, "own: the 2 MiB-aligned interior sits on huge pages (smaps AnonHugePages)",
          "AnonHugePages %ld kB of a 38 MiB interior", huge_kb);
  } else {
    std::printf("      note: transparent huge pages are off here; own's huge-page interior is not checked\n");
  }
  size_t released = 0;
  check(lh_mapped_file_release(&f, 0, size, &released) == LH_OK && released == size && smaps_kb(data, data + size, "Anonymous") == 0 &&
            std::memcmp(data, bytes.data(), size) == 0,
        "release after own drops the copy (huge pages too) and the file's bytes fault in again", "released %zu, Anonymous %ld kB",
        released, smaps_kb(data, data + size, "Anonymous"));
  // [2 MiB - 4 KiB, 4 MiB - 4 KiB): whole pages, but no whole aligned 2 MiB
  check(lh_mapped_file_own(&f, huge - 4096, huge, 1, &owned) == LH_OK && owned == huge &&
            smaps_kb(data, data + size, "AnonHugePages") == 0 && smaps_kb(data, data + size, "Anonymous") == static_cast<long>(huge >> 10) &&
            std::memcmp(data, bytes.data(), size) == 0,
        "own: a range across a 2 MiB boundary with no whole 2 MiB page inside takes 4 KiB pages only");
  check(lh_mapped_file_release(&f, 0, size, &released) == LH_OK && smaps_kb(data, data + size, "Anonymous") == 0, "release: again all file pages");
  check(lh_mapped_file_own(&f, 0, 1, 1, &owned) == LH_OK && owned == static_cast<size_t>(sysconf(_SC_PAGESIZE)) &&
            lh_mapped_file_own(&f, 7, 0, 1, &owned) == LH_OK && owned == 0,
        "own: one byte owns its page; 0 bytes own nothing");
  check(lh_mapped_file_own(&f, size, 1, 1, &owned) == LH_BAD_ARGUMENT && lh_mapped_file_own(&f, 0, size + 1, 1, &owned) == LH_BAD_ARGUMENT &&
            lh_mapped_file_own(&f, 0, 1, 0, &owned) == LH_BAD_ARGUMENT && lh_mapped_file_own(nullptr, 0, 1, 1, &owned) == LH_BAD_ARGUMENT,
        "own: a range past the end, 0 threads or no file is LH_BAD_ARGUMENT");
  lh_mapped_file_close(&f);
  check(lh_mapped_file_own(&f, 0, 1, 1, &owned) == LH_BAD_ARGUMENT && owned == 0, "own: a closed file is LH_BAD_ARGUMENT");
  unlink(path);
}

// ---------------------------------------------------------------------------------------------
// Attention: optimised vs scalar reference
// ---------------------------------------------------------------------------------------------
// Every decode kernel; each test runs the ones this CPU has (lh_attention_available).
constexpr lh_attention_impl kAttentionImpls[] = {LH_ATTN_PORTABLE, LH_ATTN_AVX2, LH_ATTN_AVX512, LH_ATTN_AVX2_PER_HEAD};

// Under ThreadSanitizer (scripts/native-sanitize.mjs --thread) every test runs 5-15x slower and only
// code that starts threads can race; the split over threads is the same code for every attention
// implementation. So there the suites that repeat per implementation run one, the best this CPU has
// (what users run), instead of four: about a minute of the sanitizer's three. The plain and the
// ASan+UBSan builds run them all.
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

static bool attention_impl_under_test(lh_attention_impl impl) {
  if (!lh_attention_available(impl)) return false;
  if (!kThreadSanitizer) return true;
  for (const lh_attention_impl best : {LH_ATTN_AVX512, LH_ATTN_AVX2, LH_ATTN_PORTABLE})
    if (lh_attention_available(best)) return impl == best;
  return false;
}

constexpr size_t kGuard = 16;        // canary floats before and after every output buffer
constexpr float kCanary = -12345.678f;

// A test case's buffers: K/V rows with a head stride larger than tokens*head_dim (like the pool,
// which has spare capacity), q, and two guarded outputs.
struct Case {
  uint32_t tokens, heads, kv_heads, head_dim;
  size_t stride;
  std::vector<float> q;           // (heads, head_dim)
  std::vector<uint16_t> k, v;     // (kv_heads, stride)
  std::vector<float> out_opt;     // guard + (heads, head_dim) + guard
  std::vector<float> out_ref;     // guard + (heads, head_dim) + guard

  Case(uint32_t t, uint32_t h, uint32_t kvh, uint32_t d, Rng& rng) : tokens(t), heads(h), kv_heads(kvh), head_dim(d) {
    stride = static_cast<size_t>(t + 3) * d;  // spare slots after the last token
    q.resize(static_cast<size_t>(h) * d);
    k.resize(kvh * stride);
    v.resize(kvh * stride);
    for (auto& x : q) x = rng.normal();
    for (auto& x : k) x = lh_fp32_to_fp16(rng.normal());
    for (auto& x : v) x = lh_fp32_to_fp16(rng.normal());
    out_opt.assign(static_cast<size_t>(h) * d + 2 * kGuard, kCanary);
    out_ref.assign(static_cast<size_t>(h) * d + 2 * kGuard, kCanary);
  }
  lh_attention_args args(std::vector<float>& out) {
    lh_attention_args a{};
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = out.data() + kGuard;
    a.head_stride = stride;
    a.tokens = tokens;
    a.heads = heads;
    a.kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    a.kv_type = LH_KV_F16;
    return a;
  }
  static bool guards_ok(const std::vector<float>& out) {
    for (size_t i = 0; i < kGuard; ++i)
      if (lh_f32_bits(out[i]) != lh_f32_bits(kCanary) || lh_f32_bits(out[out.size() - 1 - i]) != lh_f32_bits(kCanary)) return false;
    return true;
  }
  size_t n() const { return static_cast<size_t>(heads) * head_dim; }
};

struct Diff {
  double nmse;      // sum (o - r)^2 / sum r^2
  double max_abs;   // max |o - r|
  bool within;      // every element: |o - r| <= atol + rtol * |r|
};

Diff compare(const float* o, const float* r, size_t n, double atol, double rtol) {
  double num = 0, den = 0, mx = 0;
  bool within = true;
  for (size_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(o[i]) - r[i];
    num += e * e;
    den += static_cast<double>(r[i]) * r[i];
    mx = std::fabs(e) > mx ? std::fabs(e) : mx;
    if (!(std::fabs(e) <= atol + rtol * std::fabs(r[i]))) within = false;
  }
  return {den > 0 ? num / den : num, mx, within};
}

// Tolerances: both sides accumulate in fp32 from identical fp16 inputs; only summation order
// and FMA contraction differ, so errors are a few fp32 ulps of the largest partial sums.
constexpr double kNmseTol = 1e-10;
constexpr double kAtol = 1e-5, kRtol = 1e-4;

void test_attention_sweep(lh_attention_impl impl) {
  const uint32_t lengths[] = {1, 7, 33, 257, 1000};
  const uint32_t ratios[] = {1, 2, 4, 8};
  const uint32_t dims[] = {8, 64, 128, 12, 1};  // 12 and 1: tails shorter than a SIMD vector
  const uint32_t kv_heads_list[] = {1, 2};
  Rng rng(1234);
  int cases = 0, bad = 0, bad_guard = 0;
  double worst_nmse = 0, worst_abs = 0;
  char first[160] = "";
  for (const uint32_t t : lengths)
    for (const uint32_t r : ratios)
      for (const uint32_t d : dims)
        for (const uint32_t kvh : kv_heads_list) {
          Case c(t, kvh * r, kvh, d, rng);
          lh_attention_args ao = c.args(c.out_opt), ar = c.args(c.out_ref);
          const lh_status so = lh_attention_decode(&ao, impl), sr = lh_attention_decode_ref(&ar);
          const Diff df = compare(c.out_opt.data() + kGuard, c.out_ref.data() + kGuard, c.n(), kAtol, kRtol);
          ++cases;
          worst_nmse = df.nmse > worst_nmse ? df.nmse : worst_nmse;
          worst_abs = df.max_abs > worst_abs ? df.max_abs : worst_abs;
          const bool ok = so == LH_OK && sr == LH_OK && df.nmse <= kNmseTol && df.within;
          if (!Case::guards_ok(c.out_opt) || !Case::guards_ok(c.out_ref)) ++bad_guard;
          if (!ok && bad++ == 0)
            std::snprintf(first, sizeof first, "tokens %u heads %u kv %u dim %u: nmse %.3g max %.3g st %d/%d", t, kvh * r, kvh, d,
                          df.nmse, df.max_abs, so, sr);
        }
  char name[160];
  std::snprintf(name, sizeof name, "attention %s vs reference, %d shapes, NMSE <= %.0e and |e| <= %.0e + %.0e|r|",
                lh_attention_impl_name(impl), cases, kNmseTol, kAtol, kRtol);
  check(bad == 0, name, "%d bad, first %s", bad, first);
  std::printf("      worst NMSE %.3e, worst |error| %.3e\n", worst_nmse, worst_abs);
  std::snprintf(name, sizeof name, "attention %s: guard bytes around every output untouched", lh_attention_impl_name(impl));
  check(bad_guard == 0, name, "%d cases wrote outside their output", bad_guard);
}

// Listed rows (args.rows): a random subset of each head's rows in a random order, attended in
// place, against (a) the reference over the same list and (b) the same kernel over a packed copy
// of those rows in that order, which must be bit-identical (same arithmetic, same row order).
void test_attention_rows(lh_attention_impl impl) {
  Rng rng(4321);
  int cases = 0, bad_ref = 0, bad_packed = 0, bad_guard = 0;
  for (const uint32_t t : {1u, 5u, 33u, 70u, 300u})
    for (const uint32_t r : {1u, 2u, 4u})
      for (const uint32_t d : {8u, 64u, 13u}) {
        const uint32_t kvh = 2, stored = t + 40;
        Case c(stored, kvh * r, kvh, d, rng);
        std::vector<int32_t> rows(static_cast<size_t>(kvh) * (t + 2), -1);  // (kv_heads, t + 2): stride > t
        for (uint32_t g = 0; g < kvh; ++g)
          for (uint32_t i = 0; i < t; ++i) rows[g * (t + 2) + i] = static_cast<int32_t>(rng.next() % stored);
        lh_attention_args ao = c.args(c.out_opt), ar = c.args(c.out_ref);
        ao.tokens = ar.tokens = t;
        ao.rows = ar.rows = rows.data();
        ao.rows_stride = ar.rows_stride = t + 2;
        const lh_status so = lh_attention_decode(&ao, impl), sr = lh_attention_decode_ref(&ar);
        const Diff df = compare(c.out_opt.data() + kGuard, c.out_ref.data() + kGuard, c.n(), kAtol, kRtol);
        if (so != LH_OK || sr != LH_OK || df.nmse > kNmseTol || !df.within) ++bad_ref;
        if (!Case::guards_ok(c.out_opt) || !Case::guards_ok(c.out_ref)) ++bad_guard;
        // packed copy of the listed rows, attended without a list
        std::vector<uint16_t> pk(static_cast<size_t>(kvh) * t * d), pv(pk.size());
        for (uint32_t g = 0; g < kvh; ++g)
          for (uint32_t i = 0; i < t; ++i)
            for (uint32_t e = 0; e < d; ++e) {
              pk[(g * t + i) * d + e] = c.k[g * c.stride + static_cast<size_t>(rows[g * (t + 2) + i]) * d + e];
              pv[(g * t + i) * d + e] = c.v[g * c.stride + static_cast<size_t>(rows[g * (t + 2) + i]) * d + e];
            }
        std::vector<float> packed_out(c.n());
        lh_attention_args ap = c.args(c.out_ref);
        ap.k = pk.data();
        ap.v = pv.data();
        ap.head_stride = static_cast<size_t>(t) * d;
        ap.tokens = t;
        ap.out = packed_out.data();
        const lh_status sp = lh_attention_decode(&ap, impl);
        if (sp != LH_OK || std::memcmp(packed_out.data(), c.out_opt.data() + kGuard, c.n() * sizeof(float)) != 0) ++bad_packed;
        ++cases;
      }
  char name[200];
  std::snprintf(name, sizeof name, "attention %s over listed rows: %d cases vs reference over the same list", lh_attention_impl_name(impl), cases);
  check(bad_ref == 0 && bad_guard == 0, name, "%d bad, %d guard", bad_ref, bad_guard);
  std::snprintf(name, sizeof name, "attention %s over listed rows == the same kernel over a packed copy, bit for bit", lh_attention_impl_name(impl));
  check(bad_packed == 0, name, "%d of %d differ", bad_packed, cases);
  // a row outside the head's stride, a negative row, a list shorter than tokens: LH_BAD_ARGUMENT
  Case c(10, 2, 1, 8, rng);
  std::vector<int32_t> rows = {0, 1, 2, 3};
  lh_attention_args a = c.args(c.out_opt);
  a.tokens = 4;
  a.rows = rows.data();
  a.rows_stride = 4;
  const lh_status ok = lh_attention_decode(&a, impl);
  rows[2] = static_cast<int32_t>(c.stride / 8);  // first row past the stride
  const lh_status past = lh_attention_decode(&a, impl);
  rows[2] = -1;
  const lh_status negative = lh_attention_decode(&a, impl);
  rows[2] = 2;
  a.rows_stride = 3;
  const lh_status short_list = lh_attention_decode(&a, impl);
  a.rows_stride = 4;
  const lh_status prefill = lh_attention_prefill(&a, 2, impl);
  check(ok == LH_OK && past == LH_BAD_ARGUMENT && negative == LH_BAD_ARGUMENT && short_list == LH_BAD_ARGUMENT && prefill == LH_BAD_ARGUMENT,
        "attention over listed rows: out-of-stride, negative rows, a short list, prefill with a list are LH_BAD_ARGUMENT");
}

// Inject a non-finite value and require both kernels to be non-finite at the same outputs.
void test_attention_nonfinite(lh_attention_impl impl) {
  struct Inject {
    const char* what;
    int where;  // 0 q, 1 k, 2 v
    float value;
  };
  const Inject injects[] = {{"NaN in q", 0, NAN},   {"+inf in q", 0, INFINITY}, {"-inf in q", 0, -INFINITY},
                            {"NaN in K", 1, NAN},   {"+inf in K", 1, INFINITY}, {"-inf in K", 1, -INFINITY},
                            {"NaN in V", 2, NAN},   {"+inf in V", 2, INFINITY}};
  const uint32_t lengths[] = {1, 7, 33, 100};
  Rng rng(99);
  int bad = 0, cases = 0, nonfinite_cases = 0;
  char first[200] = "";
  for (const Inject& inj : injects)
    for (const uint32_t t : lengths)
      for (int rep = 0; rep < 4; ++rep) {
        const uint32_t kvh = 2, ratio = rep % 2 ? 4 : 1, d = rep < 2 ? 8 : 64;
        Case c(t, kvh * ratio, kvh, d, rng);
        const uint32_t g = static_cast<uint32_t>(rng.next() % kvh);
        const uint32_t tok = static_cast<uint32_t>(rng.next() % t);
        const uint32_t i = static_cast<uint32_t>(rng.next() % d);
        if (inj.where == 0) c.q[(g * ratio) * d + i] = inj.value;
        if (inj.where == 1) c.k[g * c.stride + tok * d + i] = lh_fp32_to_fp16(inj.value);
        if (inj.where == 2) c.v[g * c.stride + tok * d + i] = lh_fp32_to_fp16(inj.value);
        lh_attention_args ao = c.args(c.out_opt), ar = c.args(c.out_ref);
        lh_attention_decode(&ao, impl);
        lh_attention_decode_ref(&ar);
        ++cases;
        bool any = false, same = true;
        for (size_t j = 0; j < c.n(); ++j) {
          const bool fo = std::isfinite(c.out_opt[kGuard + j]), fr = std::isfinite(c.out_ref[kGuard + j]);
          any = any || !fr;
          same = same && fo == fr;
        }
        // Finite outputs must still agree.
        const Diff df = [&] {
          std::vector<float> o, r;
          for (size_t j = 0; j < c.n(); ++j)
            if (std::isfinite(c.out_ref[kGuard + j])) {
              o.push_back(c.out_opt[kGuard + j]);
              r.push_back(c.out_ref[kGuard + j]);
            }
          return compare(o.data(), r.data(), o.size(), kAtol, kRtol);
        }();
        nonfinite_cases += any;
        const bool ok = same && df.within && Case::guards_ok(c.out_opt);
        if (!ok && bad++ == 0) std::snprintf(first, sizeof first, "%s, tokens %u ratio %u dim %u", inj.what, t, ratio, d);
      }
  char name[160];
  std::snprintf(name, sizeof name, "attention %s: NaN/Inf parity with reference (%d cases, %d non-finite)",
                lh_attention_impl_name(impl), cases, nonfinite_cases);
  check(bad == 0 && nonfinite_cases > cases / 2, name, "%d differ, first %s", bad, first);

  // All scores -inf (q = +inf against negative keys) -> NaN in both; one -inf score among
  // finite ones -> zero weight, finite output in both.
  {
    Case c(40, 1, 1, 8, rng);
    for (auto& x : c.q) x = 0;
    c.q[0] = INFINITY;
    for (uint32_t t = 0; t < 40; ++t) c.k[t * 8] = lh_fp32_to_fp16(-1.0f);
    lh_attention_args ao = c.args(c.out_opt), ar = c.args(c.out_ref);
    lh_attention_decode(&ao, impl);
    lh_attention_decode_ref(&ar);
    bool nan_all = true;
    for (size_t j = 0; j < c.n(); ++j) nan_all = nan_all && std::isnan(c.out_opt[kGuard + j]) && std::isnan(c.out_ref[kGuard + j]);
    Case e(40, 1, 1, 8, rng);
    for (uint32_t t = 0; t < 40; ++t) e.k[t * 8] = lh_fp32_to_fp16(t == 35 ? -1.0f : 0.0f);  // token 35 gets -inf
    for (auto& x : e.q) x = 0;
    e.q[0] = 1e30f;  // scores: 0 for every token but 35, which gets -1e30 * scale (weight exactly 0)
    lh_attention_args eo = e.args(e.out_opt), er = e.args(e.out_ref);
    lh_attention_decode(&eo, impl);
    lh_attention_decode_ref(&er);
    const Diff df = compare(e.out_opt.data() + kGuard, e.out_ref.data() + kGuard, e.n(), kAtol, kRtol);
    std::snprintf(name, sizeof name, "attention %s: all -inf scores give NaN; a hugely negative score gets weight 0",
                  lh_attention_impl_name(impl));
    check(nan_all && df.within, name);
  }
}

// One decode call's inputs with rows of every KV type: a random query (heads, d), K/V rows
// (kv_heads, stored, d) as fp32 with their fp16 roundings and independent int8 rows, int8 scales in
// [scale_lo, scale_lo + 0.02), and random row lists (kv_heads, tokens) into the stored rows (repeats
// allowed). args(type, listed) points a call at one type's rows, through the lists or not.
struct MixedRows {
  uint32_t tokens, heads, kvh, d, stored;
  std::vector<float> q, k32, v32, ks, vs;
  std::vector<uint16_t> k16, v16;
  std::vector<int8_t> k8, v8;
  std::vector<int32_t> rows;
  MixedRows(uint32_t tokens_, uint32_t heads_, uint32_t kvh_, uint32_t d_, uint32_t stored_, float scale_lo, Rng& rng)
      : tokens(tokens_), heads(heads_), kvh(kvh_), d(d_), stored(stored_), q(static_cast<size_t>(heads_) * d_),
        k32(kvh_ * stride()), v32(k32.size()), ks(static_cast<size_t>(kvh_) * stored_), vs(ks.size()), k16(k32.size()), v16(k32.size()),
        k8(k32.size()), v8(k32.size()), rows(static_cast<size_t>(kvh_) * tokens_) {
    for (auto& x : q) x = rng.normal();
    for (size_t i = 0; i < k32.size(); ++i) {
      k32[i] = rng.normal();
      v32[i] = rng.normal();
      k16[i] = lh_fp32_to_fp16(k32[i]);
      v16[i] = lh_fp32_to_fp16(v32[i]);
      k8[i] = static_cast<int8_t>(static_cast<int>(rng.next() % 255) - 127);
      v8[i] = static_cast<int8_t>(static_cast<int>(rng.next() % 255) - 127);
    }
    for (size_t i = 0; i < ks.size(); ++i) {
      ks[i] = scale_lo + 0.02f * rng.uniform();
      vs[i] = scale_lo + 0.02f * rng.uniform();
    }
    for (auto& r : rows) r = static_cast<int32_t>(rng.next() % stored);
  }
  size_t stride() const { return static_cast<size_t>(stored) * d; }
  lh_attention_args args(uint32_t type, bool listed) const {
    lh_attention_args a{};
    a.q = q.data();
    a.k = type == LH_KV_F32 ? static_cast<const void*>(k32.data()) : type == LH_KV_I8 ? static_cast<const void*>(k8.data()) : static_cast<const void*>(k16.data());
    a.v = type == LH_KV_F32 ? static_cast<const void*>(v32.data()) : type == LH_KV_I8 ? static_cast<const void*>(v8.data()) : static_cast<const void*>(v16.data());
    a.head_stride = stride();
    a.tokens = tokens;
    a.heads = heads;
    a.kv_heads = kvh;
    a.head_dim = d;
    a.scale = 1.0f / std::sqrt(static_cast<float>(d));
    a.kv_type = type;
    a.k_scale = type == LH_KV_I8 ? ks.data() : nullptr;
    a.v_scale = type == LH_KV_I8 ? vs.data() : nullptr;
    if (listed) {
      a.rows = rows.data();
      a.rows_stride = tokens;
    }
    return a;
  }
};

// The grouped kernels' edges, against the reference: query heads per KV head 1..24 (past the
// 16-head batch: 24 = a full and a partial batch), token counts around the 16-row tile (1, 7, 16,
// 17, 33, 1029), head dims 8, 64, 128, 13 (padded), 256 (largest tiled), 300 (the per-head
// fallback), fp16 / fp32 / int8 rows, contiguous and listed. Tolerance as kNmseTol / kAtol / kRtol:
// both sides sum fp32 products of the same inputs; the vector exp is within 2 ulp of std::exp
// (test_attention_exp), i.e. weights within ~3e-7 relative, far inside 1e-4. A wrong exp, a wrong
// lane order in the transposed dots or a lost tail row is off by >= 1e-3.
void test_attention_grouped_shapes(lh_attention_impl impl) {
  Rng rng(606);
  int cases = 0, bad = 0, bad_guard = 0;
  double worst = 0;
  char first[200] = "";
  for (const uint32_t type : {static_cast<uint32_t>(LH_KV_F16), static_cast<uint32_t>(LH_KV_F32), static_cast<uint32_t>(LH_KV_I8)})
    for (const uint32_t group : {1u, 2u, 4u, 8u, 16u, 24u})
      for (const uint32_t t : {1u, 7u, 16u, 17u, 33u, 1029u})
        for (const uint32_t d : {8u, 64u, 128u, 13u, 256u, 300u}) {
          if (t == 1029 && (d > 128 || group > 8)) continue;  // the reference's time, not the kernel's
          const bool listed = (cases % 2) == 1;
          const uint32_t kvh = 2, heads = kvh * group, stored = t + 9;
          const MixedRows m(t, heads, kvh, d, stored, 0.005f, rng);
          const lh_attention_args a = m.args(type, listed);
          const size_t n = m.q.size();
          std::vector<float> oo(n + 2 * kGuard, kCanary), orr(n + 2 * kGuard, kCanary);
          lh_attention_args ao = a, ar = a;
          ao.out = oo.data() + kGuard;
          ar.out = orr.data() + kGuard;
          const lh_status so = lh_attention_decode(&ao, impl), sr = lh_attention_decode_ref(&ar);
          const Diff df = compare(oo.data() + kGuard, orr.data() + kGuard, n, kAtol, kRtol);
          worst = df.nmse > worst ? df.nmse : worst;
          ++cases;
          if (!Case::guards_ok(oo)) ++bad_guard;
          if ((so != LH_OK || sr != LH_OK || df.nmse > kNmseTol || !df.within) && bad++ == 0)
            std::snprintf(first, sizeof first, "type %u group %u tokens %u dim %u listed %d: nmse %.3g max %.3g st %d/%d", type, group, t, d,
                          listed, df.nmse, df.max_abs, so, sr);
        }
  char name[200];
  std::snprintf(name, sizeof name, "attention %s vs reference: %d shapes, group 1..24, tokens 1..1029 around the tile, dims 8..300, fp16/fp32/int8, listed",
                lh_attention_impl_name(impl), cases);
  check(bad == 0 && bad_guard == 0, name, "%d bad, first %s; %d guards", bad, first, bad_guard);
  std::printf("      worst NMSE %.3e\n", worst);
}

// Each query head's running max is its own: the heads of a group get scores 150 apart (head j of
// the group: every score exactly 150·j - 75·(group - 1), q = that times e0, every key row starting
// with 1), so a head shifted by another head's max would get weights exp(±150) — 0 or inf — and a
// NaN output, where the right answer is the mean of its value rows. The random shapes cannot tell
// (softmax does not care which finite shift it gets while nothing overflows).
void test_attention_head_maxes(lh_attention_impl impl) {
  Rng rng(77);
  int cases = 0, bad = 0;
  char first[160] = "";
  for (const uint32_t group : {2u, 3u, 4u, 8u, 16u, 24u})
    for (const uint32_t t : {1u, 17u, 100u})
      for (const uint32_t d : {8u, 64u}) {
        const uint32_t kvh = 2;
        Case c(t, kvh * group, kvh, d, rng);
        for (uint32_t g = 0; g < kvh; ++g)
          for (uint32_t r = 0; r < t; ++r) c.k[g * c.stride + static_cast<size_t>(r) * d] = lh_fp32_to_fp16(1.0f);
        for (uint32_t h = 0; h < kvh * group; ++h) {
          for (uint32_t i = 0; i < d; ++i) c.q[static_cast<size_t>(h) * d + i] = 0.0f;
          c.q[static_cast<size_t>(h) * d] = 150.0f * static_cast<float>(h % group) - 75.0f * static_cast<float>(group - 1);
        }
        lh_attention_args ao = c.args(c.out_opt), ar = c.args(c.out_ref);
        ao.scale = ar.scale = 1.0f;
        const lh_status so = lh_attention_decode(&ao, impl), sr = lh_attention_decode_ref(&ar);
        const Diff df = compare(c.out_opt.data() + kGuard, c.out_ref.data() + kGuard, c.n(), kAtol, kRtol);
        ++cases;
        if ((so != LH_OK || sr != LH_OK || !df.within || df.nmse > kNmseTol) && bad++ == 0)
          std::snprintf(first, sizeof first, "group %u tokens %u dim %u: max |e| %.3g", group, t, d, df.max_abs);
      }
  char name[200];
  std::snprintf(name, sizeof name, "attention %s: every head softmaxed by its own max (group 2..24, scores 150 apart, %d cases)",
                lh_attention_impl_name(impl), cases);
  check(bad == 0, name, "%d bad, first %s", bad, first);
}

// The grouped kernels' vector exp against std::exp: within 2 ulp wherever the result is a normal
// float ([-87.3, 88.72]), exactly 0 below -87.3 (std::exp is under FLT_MIN there: a weight that
// small is nothing next to the max's 1), +inf above ln(FLT_MAX), +inf -> +inf, -inf -> 0,
// NaN -> NaN; the AVX2 and AVX-512 versions give the same bits.
void test_attention_exp() {
  std::vector<float> x;
  for (double v = -120.0; v <= 100.0; v += 0.00731) x.push_back(static_cast<float>(v));
  for (const float v : {-INFINITY, INFINITY, NAN, -100.0f, -87.3f, -87.29f, -87.31f, -0.0f, 0.0f, 1e-8f, -1e-8f, 0.5f, -0.5f, 1.0f,
                        -1.0f, 88.0f, 88.7f, 88.72f, 88.73f, 89.0f, 1e30f, -1e30f, -0.34657359f, 0.34657359f})
    x.push_back(v);
  Rng rng(3);
  for (int i = 0; i < 100000; ++i) x.push_back(static_cast<float>(-30.0 * rng.uniform()));  // attention's range: s - max <= 0
  std::vector<float> y2(x.size()), y5(x.size());
  bool same = true;
  for (const lh_attention_impl impl : {LH_ATTN_AVX2, LH_ATTN_AVX512}) {
    if (!lh_attention_available(impl)) continue;

    std::vector<float>& y = impl == LH_ATTN_AVX2 ? y2 : y5;
    const lh_status st = lh_attention_vector_exp(impl, x.data(), y.data(), x.size());
    int bad = 0;
    int64_t worst_ulp = 0;
    char first[120] = "";
    for (size_t i = 0; i < x.size(); ++i) {
      const float e = std::exp(x[i]);
      bool ok;
      if (std::isnan(x[i])) ok = std::isnan(y[i]);
      else if (x[i] < -87.3f) ok = lh_f32_bits(y[i]) == 0 && e < 1.3e-38f;
      else if (std::isinf(e)) ok = std::isinf(y[i]) && y[i] > 0;
      else {
        const int64_t ulp = std::llabs(static_cast<int64_t>(lh_f32_bits(y[i])) - static_cast<int64_t>(lh_f32_bits(e)));
        worst_ulp = ulp > worst_ulp ? ulp : worst_ulp;
        ok = ulp <= 2;
      }
      if (!ok && bad++ == 0) std::snprintf(first, sizeof first, "exp(%.9g) = %.9g, std::exp %.9g", x[i], y[i], e);
    }
    char name[200];
    std::snprintf(name, sizeof name, "attention %s vector exp vs std::exp over %zu inputs in [-120, 100] and +-inf, NaN: <= 2 ulp, 0 below -87.3",
                  lh_attention_impl_name(impl), x.size());
    check(st == LH_OK && bad == 0, name, "%d bad, first %s", bad, first);
    std::printf("      worst %lld ulp\n", static_cast<long long>(worst_ulp));
  }
  if (lh_attention_available(LH_ATTN_AVX2) && lh_attention_available(LH_ATTN_AVX512)) {
    for (size_t i = 0; i < x.size(); ++i) same = same && lh_f32_bits(y2[i]) == lh_f32_bits(y5[i]);
    check(same, "attention vector exp: AVX2 and AVX-512 give the same bits");
  }
  float one = 0.0f;
  bool auto_ok = !lh_attention_available(LH_ATTN_AVX2);  // portable-only CPU: AUTO has no vector exp (checked below)
  if (!auto_ok) {
    std::vector<float> ya(x.size());
    const std::vector<float>& yk = lh_attention_available(LH_ATTN_AVX512) ? y5 : y2;
    auto_ok = lh_attention_vector_exp(LH_ATTN_AUTO, x.data(), ya.data(), x.size()) == LH_OK &&
              std::memcmp(ya.data(), yk.data(), ya.size() * sizeof(float)) == 0;
  } else {
    auto_ok = lh_attention_vector_exp(LH_ATTN_AUTO, &one, &one, 1) == LH_BAD_ARGUMENT;
  }
  check(auto_ok, "attention vector exp: AUTO is the exp of the kernel AUTO runs");
  check(lh_attention_vector_exp(LH_ATTN_PORTABLE, &one, &one, 1) == LH_BAD_ARGUMENT &&
            lh_attention_vector_exp(LH_ATTN_AVX2_PER_HEAD, &one, &one, 1) == LH_BAD_ARGUMENT,
        "attention vector exp: kernels without one (portable, per-head) are LH_BAD_ARGUMENT");
}

void test_attention_bad_args() {
  Rng rng(5);
  Case c(10, 4, 2, 8, rng);
  lh_attention_args a = c.args(c.out_opt);
  bool ok = lh_attention_decode(nullptr) == LH_BAD_ARGUMENT && lh_attention_decode_ref(nullptr) == LH_BAD_ARGUMENT;
  lh_attention_args b = a;
  b.heads = 3;  // not a multiple of kv_heads
  ok = ok && lh_attention_decode(&b) == LH_BAD_ARGUMENT && lh_attention_decode_ref(&b) == LH_BAD_ARGUMENT;
  b = a;
  b.tokens = 0;
  ok = ok && lh_attention_decode(&b) == LH_BAD_ARGUMENT;
  b = a;
  b.head_dim = 0;
  ok = ok && lh_attention_decode(&b) == LH_BAD_ARGUMENT;
  b = a;
  b.head_stride = 10 * 8 - 1;  // rows of one head would run into the next
  ok = ok && lh_attention_decode(&b) == LH_BAD_ARGUMENT;
  b = a;
  b.out = const_cast<float*>(b.q) + 1;  // output overlapping q
  ok = ok && lh_attention_decode(&b) == LH_BAD_ARGUMENT && lh_attention_decode_ref(&b) == LH_BAD_ARGUMENT;
  b = a;
  b.k = nullptr;
  ok = ok && lh_attention_decode(&b) == LH_BAD_ARGUMENT;
  ok = ok && Case::guards_ok(c.out_opt);
  for (size_t j = 0; j < c.n(); ++j) ok = ok && lh_f32_bits(c.out_opt[kGuard + j]) == lh_f32_bits(kCanary);  // nothing written
  check(ok, "attention bad arguments return LH_BAD_ARGUMENT and write nothing");
}

// Attention straight over the pool's rows (head stride = capacity * head_dim).
void test_attention_over_pool() {
  const uint32_t L = 2, H = 2, D = 64, T = 77, heads = 8;
  lh_kv_pool_config cfg{1 << 22, L, H, D, LH_KV_F16, 0};
  lh_kv_pool p;
  if (lh_kv_pool_init(&p, &cfg) != LH_OK) {
    check(false, "attention over pool rows", "pool init failed");
    return;
  }
  Rng rng(3);
  std::vector<float> k(H * D), v(H * D), q(heads * D), o(heads * D), r(heads * D);
  for (uint32_t t = 0; t < T; ++t) {
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    lh_kv_pool_append(&p, 1, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
  }
  for (auto& x : q) x = rng.normal();
  lh_attention_args a{q.data(), lh_kv_pool_k_rows(&p, 1), lh_kv_pool_v_rows(&p, 1), o.data(), lh_kv_pool_head_stride(&p, 1),
                      lh_kv_pool_length(&p, 1), heads, H, D, 0.125f, LH_KV_F16};
  lh_attention_args b = a;
  b.out = r.data();
  const bool ok = lh_attention_decode(&a) == LH_OK && lh_attention_decode_ref(&b) == LH_OK;
  const Diff df = compare(o.data(), r.data(), o.size(), kAtol, kRtol);
  check(ok && df.nmse <= kNmseTol && df.within, "attention over pool rows (capacity stride) matches reference", "nmse %.3g", df.nmse);
  lh_kv_pool_free(&p);
}

// fp32 rows: the pool stores them exactly; both kernels read them; a bad kv_type is refused.
void test_kv_fp32() {
  const uint32_t L = 2, H = 2, D = 24, heads = 8;
  lh_kv_pool_config cfg{1 << 20, L, H, D, LH_KV_F32, 0};
  lh_kv_pool p;
  const lh_status st = lh_kv_pool_init(&p, &cfg);
  lh_kv_pool_config bad{1 << 20, L, H, D, 7, 0};
  lh_kv_pool q;
  check(st == LH_OK && p.elem_bytes == 4 && p.bytes_per_token == static_cast<uint64_t>(L) * H * (8ull * D + 4) &&
            lh_kv_pool_init(&q, &bad) == LH_BAD_ARGUMENT,
        "kv pool fp32: init, 4-byte rows, unknown kv_type refused");
  if (st != LH_OK) return;
  Rng rng(17);
  std::vector<float> k(H * D), v(H * D), row(D);
  std::vector<std::vector<float>> kept;
  bool exact = true;
  for (uint32_t t = 0; t < 50; ++t) {
    for (auto& x : k) x = rng.normal() * 3.0f + 1e-7f;  // not fp16-representable
    for (auto& x : v) x = rng.normal();
    exact = exact && lh_kv_pool_append(&p, 1, k.data(), v.data(), static_cast<int32_t>(t), nullptr) == LH_OK;
    kept.push_back(k);
  }
  for (uint32_t t = 0; t < 50; t += 7)
    for (uint32_t g = 0; g < H; ++g) {
      exact = exact && lh_kv_pool_read(&p, LH_KV_KEY, 1, g, t, row.data(), nullptr) == LH_OK;
      for (uint32_t i = 0; i < D; ++i) exact = exact && lh_f32_bits(row[i]) == lh_f32_bits(kept[t][g * D + i]);
    }
  check(exact, "kv pool fp32 keeps rows bit for bit");
  std::vector<float> qv(heads * D), o(heads * D), r(heads * D);
  for (auto& x : qv) x = rng.normal();
  lh_attention_args a{qv.data(), lh_kv_pool_k_rows(&p, 1), lh_kv_pool_v_rows(&p, 1), o.data(), lh_kv_pool_head_stride(&p, 1),
                      lh_kv_pool_length(&p, 1), heads, H, D, 1.0f / std::sqrt(24.0f), LH_KV_F32};
  lh_attention_args b = a;
  b.out = r.data();
  bool ok = lh_attention_decode_ref(&b) == LH_OK;
  for (const lh_attention_impl impl : kAttentionImpls) {
    if (!lh_attention_available(impl)) continue;
    ok = ok && lh_attention_decode(&a, impl) == LH_OK;
    const Diff df = compare(o.data(), r.data(), o.size(), kAtol, kRtol);
    ok = ok && df.nmse <= kNmseTol && df.within;
  }
  // The fp32 reference against a float64 computation of the same attention.
  double worst = 0;
  for (uint32_t h = 0; h < heads; ++h) {
    const uint32_t g = h / (heads / H);
    std::vector<double> s(50);
    double m = -1e300, sum = 0;
    for (uint32_t t = 0; t < 50; ++t) {
      double dot = 0;
      for (uint32_t i = 0; i < D; ++i) dot += static_cast<double>(qv[h * D + i]) * kept[t][g * D + i];
      s[t] = dot / std::sqrt(24.0);
      m = s[t] > m ? s[t] : m;
    }
    for (uint32_t t = 0; t < 50; ++t) sum += std::exp(s[t] - m);
    for (uint32_t i = 0; i < D; ++i) {
      double acc = 0;
      for (uint32_t t = 0; t < 50; ++t) {
        float vv[D];
        lh_kv_pool_read(&p, LH_KV_VALUE, 1, g, t, vv, nullptr);
        acc += std::exp(s[t] - m) / sum * vv[i];
      }
      worst = std::fabs(acc - r[h * D + i]) > worst ? std::fabs(acc - r[h * D + i]) : worst;
    }
  }
  check(ok && worst < 1e-5, "attention over fp32 rows: kernels match the reference, reference matches float64",
        "worst |ref - f64| %.3g", worst);
  lh_kv_pool_free(&p);
}

// Batch append equals T single appends; all or nothing when full; truncate keeps a prefix.
void test_kv_batch_append() {
  const uint32_t L = 2, H = 3, D = 10;
  bool ok = true;
  for (const uint32_t type : {static_cast<uint32_t>(LH_KV_F16), static_cast<uint32_t>(LH_KV_F32)}) {
    lh_kv_pool_config cfg{0, L, H, D, type, 0};
    cfg.budget_bytes = 20ull * L * H * (2ull * D * lh_kv_type_bytes(type) + 4) + 4 * 64;  // 20 tokens
    lh_kv_pool a, b;
    if (lh_kv_pool_init(&a, &cfg) != LH_OK || lh_kv_pool_init(&b, &cfg) != LH_OK || a.capacity != 20) {
      check(false, "kv pool batch append: init");
      return;
    }
    Rng rng(23 + type);
    const uint32_t T = 13;
    std::vector<float> k(T * H * D), v(T * H * D);
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    uint32_t first = 99;
    ok = ok && lh_kv_pool_append_batch(&a, 1, k.data(), v.data(), T, 40, &first) == LH_OK && first == 0 &&
         lh_kv_pool_length(&a, 1) == T && lh_kv_pool_length(&a, 0) == 0;
    for (uint32_t t = 0; t < T; ++t)
      ok = ok && lh_kv_pool_append(&b, 1, k.data() + t * H * D, v.data() + t * H * D, static_cast<int32_t>(40 + t), nullptr) == LH_OK;
    float ra[D], rb[D];
    int32_t pa = -1, pb = -2;
    for (uint32_t t = 0; t < T; ++t)
      for (uint32_t g = 0; g < H; ++g)
        for (const lh_kv_part part : {LH_KV_KEY, LH_KV_VALUE}) {
          ok = ok && lh_kv_pool_read(&a, part, 1, g, t, ra, &pa) == LH_OK && lh_kv_pool_read(&b, part, 1, g, t, rb, &pb) == LH_OK &&
               pa == pb && std::memcmp(ra, rb, sizeof ra) == 0;
        }
    // 7 free slots: a batch of 8 fails and changes nothing, a batch of 7 fits
    ok = ok && lh_kv_pool_append_batch(&a, 1, k.data(), v.data(), 8, 53, nullptr) == LH_POOL_FULL && lh_kv_pool_length(&a, 1) == T;
    ok = ok && lh_kv_pool_append_batch(&a, 1, k.data(), v.data(), 7, 53, &first) == LH_OK && first == T && lh_kv_pool_length(&a, 1) == 20;
    ok = ok && lh_kv_pool_append_batch(&a, 0, k.data(), v.data(), 0, 0, nullptr) == LH_BAD_ARGUMENT &&
         lh_kv_pool_append_batch(&a, 0, k.data(), v.data(), 2, 0x7fffffff, nullptr) == LH_BAD_ARGUMENT &&
         lh_kv_pool_append_batch(&a, 0, nullptr, v.data(), 1, 0, nullptr) == LH_BAD_ARGUMENT &&
         lh_kv_pool_append_batch(&a, L, k.data(), v.data(), 1, 0, nullptr) == LH_BAD_ARGUMENT;
    ok = ok && lh_kv_pool_append_batch(&a, 0, k.data(), v.data(), 3, 0, nullptr) == LH_OK;
    ok = ok && lh_kv_pool_truncate(&a, 5) == LH_OK && lh_kv_pool_length(&a, 1) == 5 && lh_kv_pool_length(&a, 0) == 3;
    ok = ok && lh_kv_pool_read(&a, LH_KV_KEY, 1, 0, 4, ra, &pa) == LH_OK && pa == 44 &&
         lh_kv_pool_read(&a, LH_KV_KEY, 1, 0, 5, ra, nullptr) == LH_BAD_ARGUMENT;
    lh_kv_pool_free(&a);
    ok = ok && lh_kv_pool_truncate(&a, 0) == LH_BAD_ARGUMENT;
    lh_kv_pool_free(&b);
  }
  check(ok, "kv pool append_batch == T appends (fp16, fp32); all or nothing when full; truncate keeps a prefix");
}

// Causal prefill: optimised vs reference, and each query vs a decode over its own prefix.
void test_attention_prefill(lh_attention_impl impl) {
  struct Shape {
    uint32_t tokens, queries, kvh, ratio, d;
  };
  const Shape shapes[] = {{1, 1, 1, 1, 8},  {7, 7, 2, 4, 12},  {40, 33, 2, 2, 64}, {100, 1, 1, 8, 64},
                          {64, 64, 4, 1, 128}, {300, 37, 2, 4, 8}, {33, 32, 1, 2, 1},  {129, 100, 2, 1, 24}};
  Rng rng(77);
  int bad = 0, bad_guard = 0, cases = 0, bad_threads = 0, bad_thread_args = 0;
  double worst = 0;
  char first[160] = "";
  for (const uint32_t type : {static_cast<uint32_t>(LH_KV_F16), static_cast<uint32_t>(LH_KV_F32)})
    for (const Shape& sh : shapes) {
      const uint32_t heads = sh.kvh * sh.ratio, d = sh.d, T = sh.tokens, Q = sh.queries;
      const size_t stride = static_cast<size_t>(T + 5) * d;
      std::vector<float> q(static_cast<size_t>(Q) * heads * d);
      for (auto& x : q) x = rng.normal();
      std::vector<uint16_t> k16(sh.kvh * stride), v16(sh.kvh * stride);
      std::vector<float> k32(sh.kvh * stride), v32(sh.kvh * stride);
      for (size_t i = 0; i < k16.size(); ++i) {
        k32[i] = rng.normal();
        v32[i] = rng.normal();
        k16[i] = lh_fp32_to_fp16(k32[i]);
        v16[i] = lh_fp32_to_fp16(v32[i]);
      }
      const size_t n = q.size();
      std::vector<float> oo(n + 2 * kGuard, kCanary), orr(n + 2 * kGuard, kCanary), od(n + 2 * kGuard, kCanary);
      lh_attention_args a{};
      a.q = q.data();
      a.k = type == LH_KV_F32 ? static_cast<const void*>(k32.data()) : static_cast<const void*>(k16.data());
      a.v = type == LH_KV_F32 ? static_cast<const void*>(v32.data()) : static_cast<const void*>(v16.data());
      a.head_stride = stride;
      a.tokens = T;
      a.heads = heads;
      a.kv_heads = sh.kvh;
      a.head_dim = d;
      a.scale = 1.0f / std::sqrt(static_cast<float>(d));
      a.kv_type = type;
      lh_attention_args ao = a, ar = a;
      ao.out = oo.data() + kGuard;
      ar.out = orr.data() + kGuard;
      const lh_status so = lh_attention_prefill(&ao, Q, impl), sr = lh_attention_prefill_ref(&ar, Q);
      // query i alone, by decode over tokens - Q + i + 1 rows
      bool dec_ok = true;
      for (uint32_t i = 0; i < Q; ++i) {
        lh_attention_args one = a;
        one.q = q.data() + static_cast<size_t>(i) * heads * d;
        one.out = od.data() + kGuard + static_cast<size_t>(i) * heads * d;
        one.tokens = T - Q + i + 1;
        dec_ok = dec_ok && lh_attention_decode(&one, impl) == LH_OK;
      }
      const Diff df = compare(oo.data() + kGuard, orr.data() + kGuard, n, kAtol, kRtol);
      const bool same_as_decode = std::memcmp(oo.data(), od.data(), od.size() * sizeof(float)) == 0;
      // the same prefill over 2, 3 and 7 threads (more threads than queries included): bit for bit
      for (const uint32_t threads : {2u, 3u, 7u}) {
        std::vector<float> ot(n + 2 * kGuard, kCanary);
        lh_attention_args at = a;
        at.out = ot.data() + kGuard;
        const lh_status s = lh_attention_prefill_threads(&at, Q, threads, impl);
        bad_threads += s == LH_OK && std::memcmp(ot.data(), oo.data(), ot.size() * sizeof(float)) == 0 ? 0 : 1;
      }
      worst = df.nmse > worst ? df.nmse : worst;
      ++cases;
      if (!Case::guards_ok(oo) || !Case::guards_ok(orr)) ++bad_guard;
      const bool ok = so == LH_OK && sr == LH_OK && dec_ok && df.nmse <= kNmseTol && df.within && same_as_decode;
      if (!ok && bad++ == 0)
        std::snprintf(first, sizeof first, "type %u tokens %u queries %u heads %u/%u dim %u: nmse %.3g st %d/%d decode-equal %d", type, T, Q,
                      heads, sh.kvh, d, df.nmse, so, sr, same_as_decode);
    }
  char name[200];
  std::snprintf(name, sizeof name, "attention prefill %s vs reference (%d cases, fp16+fp32 rows), each query == its own decode",
                lh_attention_impl_name(impl), cases);
  check(bad == 0, name, "%d bad, first %s", bad, first);
  std::printf("      worst NMSE %.3e\n", worst);
  std::snprintf(name, sizeof name, "attention prefill %s: guard bytes untouched", lh_attention_impl_name(impl));
  check(bad_guard == 0, name, "%d cases wrote outside their output", bad_guard);
  {
    Case c(9, 4, 2, 8, rng);
    std::vector<float> q(3 * 4 * 8, 0.5f), o(q.size() + 2 * kGuard);
    lh_attention_args a = c.args(o);
    a.q = q.data();
    bad_thread_args += lh_attention_prefill_threads(&a, 3, 0, impl) == LH_BAD_ARGUMENT ? 0 : 1;
    bad_thread_args += lh_attention_prefill_threads(&a, 3, LH_MAX_ATTENTION_THREADS + 1, impl) == LH_BAD_ARGUMENT ? 0 : 1;
  }
  std::snprintf(name, sizeof name, "attention prefill %s over 2/3/7 threads == one thread bit for bit (guards too); 0 or too many threads refused",
                lh_attention_impl_name(impl));
  check(bad_threads == 0 && bad_thread_args == 0, name, "%d differ, %d bad-argument cases accepted", bad_threads, bad_thread_args);
}

// Decode with the KV heads split over threads: the same bits as one thread, for fp16/fp32/int8 rows,
// with and without a row list, shapes big enough that the split really happens (>= 131,072 work
// units a thread: tokens · (heads + 4 · kv_heads)), odd KV-head counts (uneven ranges), guards untouched; how many threads are used; bad counts.
void test_attention_decode_threads(lh_attention_impl impl) {
  Rng rng(2027);
  struct Shape { uint32_t tokens, heads, kvh, d; };
  int cases = 0, bad = 0, bad_guard = 0, no_split = 0;
  char first[200] = "";
  for (const Shape sh : {Shape{11000, 16, 2, 16}, Shape{2100, 32, 32, 8}, Shape{13000, 9, 3, 13}, Shape{8400, 16, 4, 64}})
    for (const uint32_t type : {LH_KV_F16, LH_KV_F32, LH_KV_I8})
      for (const bool listed : {false, true}) {
        const uint32_t stored = sh.tokens + 7;
        const MixedRows m(sh.tokens, sh.heads, sh.kvh, sh.d, stored, 0.01f, rng);
        const lh_attention_args a = m.args(type, listed);
        const size_t n = m.q.size();
        std::vector<float> one(n + 2 * kGuard, kCanary);
        lh_attention_args a1 = a;
        a1.out = one.data() + kGuard;
        const lh_status s1 = lh_attention_decode(&a1, impl);
        for (const uint32_t threads : {2u, 3u, 7u}) {
          std::vector<float> ot(n + 2 * kGuard, kCanary), op(n + 2 * kGuard, kCanary);
          lh_attention_args at = a, ap = a;
          at.out = ot.data() + kGuard;
          ap.out = op.data() + kGuard;
          const lh_status st = lh_attention_decode_threads(&at, threads, impl);
          // a one-query prefill over threads takes the same path (without a row list: prefill has none)
          const lh_status sp = listed ? LH_OK : lh_attention_prefill_threads(&ap, 1, threads, impl);
          const bool same = std::memcmp(ot.data(), one.data(), ot.size() * sizeof(float)) == 0 &&
                            (listed || std::memcmp(op.data(), one.data(), op.size() * sizeof(float)) == 0);
          if (lh_attention_decode_threads_used(&a, threads) < 2) ++no_split;
          if (!Case::guards_ok(ot)) ++bad_guard;
          ++cases;
          if ((s1 != LH_OK || st != LH_OK || sp != LH_OK || !same) && bad++ == 0)
            std::snprintf(first, sizeof first, "type %u tokens %u heads %u/%u dim %u listed %d threads %u: st %d/%d/%d", type, sh.tokens, sh.heads,
                          sh.kvh, sh.d, listed, threads, s1, st, sp);
        }
      }
  char name[200];
  std::snprintf(name, sizeof name, "attention decode %s over 2/3/7 threads == one thread bit for bit (%d cases, fp16/fp32/int8, listed rows too)",
                lh_attention_impl_name(impl), cases);
  check(bad == 0 && bad_guard == 0 && no_split == 0, name, "%d differ, first %s; %d guards; %d cases did not split", bad, first, bad_guard, no_split);
  // threads used: a thread per 131,072 units of tokens · (heads + 4 · kv_heads), at most one per KV head, at most as asked
  lh_attention_args u{};
  const auto used = [&](uint32_t tokens, uint32_t heads, uint32_t kvh, uint32_t threads, uint32_t dim = 64) {
    u.tokens = tokens;
    u.heads = heads;
    u.kv_heads = kvh;
    u.head_dim = dim;
    return lh_attention_decode_threads_used(&u, threads);
  };
  check(used(1638, 32, 32, 2) == 1 && used(1639, 32, 32, 2) == 2 && used(1639, 32, 32, 64) == 2 && used(32768, 32, 32, 64) == 32 &&
            used(2048, 32, 4, 2) == 1 && used(5461, 32, 4, 2) == 1 && used(5462, 32, 4, 2) == 2 && used(100000, 3, 3, 7) == 3 &&
            used(8192, 4, 1, 2) == 1 && used(16384, 32, 4, 2) == 2 && used(1, 1, 1, 1) == 1,
        "attention decode threads used: min(threads, kv_heads, tokens * (heads + 4 kv_heads) / 131072), at least 1");
  // a head wider than 64 costs in proportion: Qwen3's 128 at GQA 32/8 splits from 2,048 tokens (the
  // 64-wide units kept it on one thread until 4,096), a 256-wide Gemma head at GQA 8/4 from 2,731;
  // heads narrower than 64 count as 64 (MHA 32/32 still from 1,639)
  check(used(2047, 32, 8, 2, 128) == 1 && used(2048, 32, 8, 2, 128) == 2 && used(2730, 8, 4, 2, 256) == 1 && used(2731, 8, 4, 2, 256) == 2 &&
            used(1638, 32, 32, 2, 32) == 1 && used(1639, 32, 32, 2, 32) == 2,
        "attention decode threads used: the work scales with head_dim / 64 above 64");
  // over the running worker pool a thread pays from 16,384 units: a Gemma-3-4B-like window layer
  // (8 / 4 heads, head_dim 256, 1,024 rows) splits, as do 512 rows (49,152 units) and 342; 341 do not
  const auto pool_used = [&](uint32_t tokens, uint32_t heads, uint32_t kvh, uint32_t threads, uint32_t dim) {
    u.tokens = tokens;
    u.heads = heads;
    u.kv_heads = kvh;
    u.head_dim = dim;
    return lh_attention_decode_pool_threads_used(&u, threads);
  };
  check(pool_used(1024, 8, 4, 2, 256) == 2 && used(1024, 8, 4, 2, 256) == 1 && pool_used(512, 8, 4, 2, 256) == 2 &&
            pool_used(341, 8, 4, 2, 256) == 1 && pool_used(342, 8, 4, 2, 256) == 2 && pool_used(100000, 8, 4, 64, 256) == 4 &&
            pool_used(1, 1, 1, 1, 64) == 1,
        "attention decode pool threads used: min(threads, kv_heads, work / 16384), at least 1");
  Case c(9, 4, 2, 8, rng);
  lh_attention_args b = c.args(c.out_opt);
  check(lh_attention_decode_threads(&b, 0, impl) == LH_BAD_ARGUMENT && lh_attention_decode_threads(&b, LH_MAX_ATTENTION_THREADS + 1, impl) == LH_BAD_ARGUMENT &&
            lh_attention_decode_threads(&b, LH_MAX_ATTENTION_THREADS, impl) == LH_OK,
        "attention decode threads: 0 or more than 64 refused, 64 accepted");
}

// Non-finite parity for prefill: a NaN in one key row poisons exactly the queries that see it.
void test_attention_prefill_nonfinite(lh_attention_impl impl) {
  Rng rng(31);
  int bad = 0;
  for (const float inject : {NAN, INFINITY}) {
    const uint32_t T = 20, Q = 10, H = 2, heads = 4, d = 16;
    Case c(T, heads, H, d, rng);
    std::vector<float> q(static_cast<size_t>(Q) * heads * d), o(q.size()), r(q.size());
    for (auto& x : q) x = rng.normal();
    c.k[0 * c.stride + 14 * d + 3] = lh_fp32_to_fp16(inject);  // row 14 of KV head 0: queries 4.. see it
    lh_attention_args a = c.args(c.out_opt);
    a.q = q.data();
    a.out = o.data();
    lh_attention_args b = a;
    b.out = r.data();
    lh_attention_prefill(&a, Q, impl);
    lh_attention_prefill_ref(&b, Q);
    for (uint32_t i = 0; i < Q; ++i)
      for (uint32_t h = 0; h < heads; ++h)
        for (uint32_t j = 0; j < d; ++j) {
          const size_t at = (static_cast<size_t>(i) * heads + h) * d + j;
          const bool sees = i >= 4 && h / (heads / H) == 0;
          const bool fo = std::isfinite(o[at]), fr = std::isfinite(r[at]);
          if (fo != fr || (sees && inject != inject && fo) || (!sees && !fo)) ++bad;
        }
  }
  char name[160];
  std::snprintf(name, sizeof name, "attention prefill %s: NaN/Inf reach exactly the queries that see the row, like the reference",
                lh_attention_impl_name(impl));
  check(bad == 0, name, "%d outputs differ", bad);
  Case c(5, 2, 1, 8, rng);
  lh_attention_args a = c.args(c.out_opt);
  check(lh_attention_prefill(&a, 0, impl) == LH_BAD_ARGUMENT && lh_attention_prefill(&a, 6, impl) == LH_BAD_ARGUMENT &&
            lh_attention_prefill_ref(&a, 6) == LH_BAD_ARGUMENT && Case::guards_ok(c.out_opt),
        "attention prefill: 0 queries or more queries than tokens is LH_BAD_ARGUMENT");
}

// Not a test: how much faster the optimised kernel is on a Llama-like decode step.
void bench_attention() {
  Rng rng(11);
  const uint32_t t = 4096, kvh = 8, ratio = 4, d = 128;
  Case c(t, kvh * ratio, kvh, d, rng);
  auto time_ms = [&](auto&& fn) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      best = ms < best ? ms : best;
    }
    return best;
  };
  lh_attention_args a = c.args(c.out_opt), b = c.args(c.out_ref);
  const double ref = time_ms([&] { lh_attention_decode_ref(&b); });
  const double port = time_ms([&] { lh_attention_decode(&a, LH_ATTN_PORTABLE); });
  const double best = time_ms([&] { lh_attention_decode(&a, LH_ATTN_AUTO); });
  const double kv_mb = 2.0 * kvh * t * d * 2 / 1e6;
  std::printf("      bench: decode attention, %u tokens, %u heads / %u kv heads, dim %u (%.1f MB of K/V), best of 5:\n", t, kvh * ratio,
              kvh, d, kv_mb);
  std::printf("      bench:   reference %.2f ms | portable %.2f ms (%.1fx) | %s %.2f ms (%.1fx, %.1f GB/s)\n", ref, port, ref / port,
              lh_attention_impl_name(LH_ATTN_AUTO), best, ref / best, kv_mb / best);
}


// Not a test: `native_tests --bench-kernels [reps]` (bench/attention-kernel.mjs runs it). ms per
// call of one layer's decode attention for every kernel this CPU runs but the portable one, over
// GQA 32/4 and MHA 32/32, head_dim 64, fp16 rows in a pool-like layout (capacity 32,768 rows a KV
// head, so the head stride is the same at every length), 1 and 2 threads, full attention and a
// listed 10% of the rows (sorted random subset per KV head, as InfiniGen lists them). Each figure
// is the minimum of `reps` calls in this process, each from cold caches (another job on the machine
// only adds time).
// "bound ms": the K+V bytes at the read bandwidth lh_measure_read_bandwidth finds for the threads used.
// Then per shape a causal prefill of a 128-query chunk over 2,048 / 8,192 rows (1 thread, min of reps / 2).
void bench_attention_kernels(int reps) {
  const uint32_t d = 64, cap = 32768;
  const uint32_t token_counts[] = {2048, 8192, 32768};
  struct Shape { uint32_t heads, kvh; const char* name; };
  const Shape shapes[] = {{32, 4, "GQA 32/4"}, {32, 32, "MHA 32/32"}};
  std::vector<lh_attention_impl> impls;
  for (const lh_attention_impl impl : {LH_ATTN_AVX2_PER_HEAD, LH_ATTN_AVX2, LH_ATTN_AVX512})
    if (lh_attention_available(impl)) impls.push_back(impl);
  // The bound: K+V bytes over the read bandwidth of as many threads (best of 5 passes over 256 MiB).
  double bw[3] = {0, 0, 0};
  for (uint32_t th = 1; th <= 2; ++th) lh_measure_read_bandwidth(256ull << 20, 5, th, &bw[th]);
  std::printf("decode attention, one layer, head_dim %u, fp16, ms per call (min of %d), auto = %s; read bandwidth %.1f GB/s (1 thread), %.1f (2)\n",
              d, reps, lh_attention_impl_name(LH_ATTN_AUTO), bw[1], bw[2]);
  std::printf("%-10s %6s %-8s %3s %4s", "shape", "tokens", "rows", "thr", "used");
  for (const lh_attention_impl impl : impls) std::printf(" %14s", lh_attention_impl_name(impl));
  std::printf(" %8s %8s %8s\n", "speedup", "GB/s", "bound ms");
  // Each timed call starts from cold caches, as in a decode step (a layer's rows are read once a
  // step, with the layer's weights streamed between): without this the min of reps over the same
  // rows measured them from L3 wherever they fit (GQA 2K: 2 MiB; MHA's listed 10% at 32K: 26 MiB),
  // and the listed-row figures came out flattered on hosts with a large L3.
  std::vector<uint64_t> flush((256u << 20) / sizeof(uint64_t), 1);
  volatile uint64_t flush_sink = 0;
  const auto evict_caches = [&]() {
    uint64_t sum = 0;
    for (size_t i = 0; i < flush.size(); i += 8) sum += flush[i];
    flush_sink = flush_sink + sum;
  };
  Rng rng(8);
  for (const Shape& sh : shapes) {
    const size_t stride = static_cast<size_t>(cap) * d;
    // K and V (kv_heads, cap, d) fp16 in one mapping with transparent huge pages asked for, as the
    // pool maps its rows (kv_pool.h): with 4 KiB pages a listed 10% of 32,768 rows costs a TLB miss a row.
    const size_t elems = sh.kvh * stride, bytes = 2 * elems * sizeof(uint16_t);
    void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      std::printf("bench: mmap of %zu bytes failed\n", bytes);
      return;
    }
    madvise(map, bytes, MADV_HUGEPAGE);
    uint16_t* k = static_cast<uint16_t*>(map);
    uint16_t* v = k + elems;
    for (size_t i = 0; i < elems; ++i) {
      k[i] = lh_fp32_to_fp16(rng.normal());
      v[i] = lh_fp32_to_fp16(rng.normal());
    }
    // one layer's args over the mapping's first `tokens` rows of each KV head (q / out: (queries, heads, d))
    const auto layer_args = [&](const float* q, float* out, uint32_t tokens) {
      lh_attention_args a{};
      a.q = q;
      a.k = k;
      a.v = v;
      a.out = out;
      a.head_stride = stride;
      a.tokens = tokens;
      a.heads = sh.heads;
      a.kv_heads = sh.kvh;
      a.head_dim = d;
      a.scale = 0.125f;
      a.kv_type = LH_KV_F16;
      return a;
    };
    // prints each kernel's best ms of `calls` runs of run(impl); returns first / last (the speedup)
    const auto time_kernels = [&](int calls, const auto& run) {
      double first = 0, last = 0;
      for (const lh_attention_impl impl : impls) {
        double best = 1e30;
        for (int rep = 0; rep < calls; ++rep) {
          evict_caches();
          const auto t0 = std::chrono::steady_clock::now();
          run(impl);
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          best = ms < best ? ms : best;
        }
        if (first == 0) first = best;
        last = best;
        std::printf(" %14.3f", best);
      }
      return std::make_pair(first / last, last);
    };
    std::vector<float> q(static_cast<size_t>(sh.heads) * d), out(q.size());
    for (auto& x : q) x = rng.normal();
    for (const uint32_t t : token_counts)
      for (const bool listed : {false, true}) {
        const uint32_t n = listed ? t / 10 : t;
        std::vector<int32_t> rows(static_cast<size_t>(sh.kvh) * n);  // (kv_heads, n) ascending subset
        for (uint32_t g = 0; g < sh.kvh && listed; ++g) {
          std::vector<int32_t> all(t);
          for (uint32_t i = 0; i < t; ++i) all[i] = static_cast<int32_t>(i);
          for (uint32_t i = 0; i < n; ++i) std::swap(all[i], all[i + rng.next() % (t - i)]);
          std::sort(all.begin(), all.begin() + n);
          std::copy(all.begin(), all.begin() + n, rows.begin() + static_cast<size_t>(g) * n);
        }
        lh_attention_args a = layer_args(q.data(), out.data(), n);
        if (listed) {
          a.rows = rows.data();
          a.rows_stride = n;
        }
        for (const uint32_t threads : {1u, 2u}) {
          const uint32_t used = lh_attention_decode_threads_used(&a, threads);
          std::printf("%-10s %6u %-8s %3u %4u", sh.name, t, listed ? "10%" : "all", threads, used);
          const auto [speedup, last] = time_kernels(reps, [&](lh_attention_impl impl) { lh_attention_decode_threads(&a, threads, impl); });
          const double kv_bytes = 2.0 * sh.kvh * n * d * sizeof(uint16_t);
          std::printf(" %7.1fx %8.1f %8.3f\n", speedup, kv_bytes / (last * 1e6), bw[used] > 0 ? kv_bytes / (bw[used] * 1e6) : 0.0);
        }
      }
    // Causal prefill of a 128-token chunk at the end of 2,048 and 8,192 stored rows, 1 thread (the
    // engine's prefillChunk 128): each query is the decode of its own prefix.
    const uint32_t chunk = 128;
    std::vector<float> qp(static_cast<size_t>(chunk) * sh.heads * d), op(qp.size());
    for (auto& x : qp) x = rng.normal();
    for (const uint32_t t : {2048u, 8192u}) {
      const lh_attention_args a = layer_args(qp.data(), op.data(), t);
      std::printf("%-10s %6u %-8s %3u %4s", sh.name, t, "prefill", 1u, "128q");
      const auto [speedup, last] = time_kernels((reps + 1) / 2, [&](lh_attention_impl impl) { lh_attention_prefill(&a, chunk, impl); });
      (void)last;
      std::printf(" %7.1fx\n", speedup);
    }
    munmap(map, bytes);
  }
}

// ---------------------------------------------------------------------------------------------
// InfiniGen
// ---------------------------------------------------------------------------------------------
// The selection rule written the plainest way (full stable sort), independent of the kernel's
// nth_element path. Returns per KV head its ascending slots; n through *n_out.
std::vector<std::vector<int32_t>> plain_select(uint32_t layer, uint32_t heads, uint32_t kvh, uint32_t p, uint32_t slots,
                                               const std::vector<float>& q, const std::vector<float>& k, const std::vector<uint8_t>& cand,
                                               double scale, const lh_infinigen_knobs& kn, uint32_t* n_out) {
  std::vector<int32_t> cands;
  for (uint32_t j = 0; j < slots; ++j)
    if (cand[j]) cands.push_back(static_cast<int32_t>(j));
  const uint32_t N = static_cast<uint32_t>(cands.size());
  if (N == 0 || layer < kn.dense_layers) {
    *n_out = N;
    return std::vector<std::vector<int32_t>>(kvh, cands);
  }
  const uint32_t group = heads / kvh;
  std::vector<double> sc(static_cast<size_t>(heads) * slots, -INFINITY), m(heads);
  double total = 0;
  for (uint32_t h = 0; h < heads; ++h) {
    for (int32_t j : cands) {
      double acc = 0;
      for (uint32_t i = 0; i < p; ++i) acc += static_cast<double>(q[h * p + i]) * k[((h / group) * slots + j) * p + i];
      sc[h * slots + j] = acc * scale;
    }
    m[h] = -INFINITY;
    for (int32_t j : cands) m[h] = std::max(m[h], sc[h * slots + j]);
    for (int32_t j : cands) total += sc[h * slots + j] > m[h] - kn.alpha ? 1 : 0;
  }
  const uint32_t capn = static_cast<uint32_t>(std::floor(kn.cap * N + 1e-9));
  const uint32_t n = std::max<uint32_t>(1, std::min<uint32_t>(static_cast<uint32_t>(std::floor(total / heads)), capn));
  *n_out = n;
  std::vector<std::vector<int32_t>> out(kvh);
  for (uint32_t g = 0; g < kvh; ++g) {
    std::vector<std::pair<double, int32_t>> v;
    for (int32_t j : cands) {
      double best = -INFINITY;
      for (uint32_t h = g * group; h < (g + 1) * group; ++h) best = std::max(best, sc[h * slots + j] - m[h]);
      v.push_back({best, j});
    }
    std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });  // slots already ascending
    for (uint32_t r = 0; r < n && r < v.size(); ++r) out[g].push_back(v[r].second);
    std::sort(out[g].begin(), out[g].end());
  }
  return out;
}

void test_infinigen_select() {
  Rng rng(77);
  int bad = 0, runs = 0;
  const uint32_t ratios[] = {1, 2, 4};
  for (uint32_t trial = 0; trial < 120; ++trial) {
    const uint32_t kvh = 1 + trial % 3, heads = kvh * ratios[trial % 3], p = 1 + trial % 5;
    const uint32_t slots = trial % 7 == 0 ? 0 : 1 + static_cast<uint32_t>(rng.next() % 300);
    std::vector<float> q(heads * p), k(static_cast<size_t>(kvh) * slots * p);
    for (auto& x : q) x = rng.normal() * 2;
    // quantised keys: many exact ties
    for (auto& x : k) x = trial % 2 ? std::round(rng.normal() * 2) : rng.normal();
    std::vector<uint8_t> cand(slots);
    for (auto& c : cand) c = (rng.next() % 5) != 0;
    const lh_infinigen_knobs kn{0.5 + (trial % 9), trial % 4 == 0 ? 1.0 : 0.2, trial % 5 == 0 ? 3u : 0u};
    const uint32_t layer = trial % 6;
    std::vector<double> scores(heads * slots + 1), comb(slots + 1), values(slots + 1);
    std::vector<int32_t> sel(kvh * slots + 1);
    lh_select_input in{heads, kvh, p, slots, q.data(), k.data(), static_cast<size_t>(slots) * p, LH_KV_F32, cand.data(), 0.35};
    lh_select_scratch scr{scores.data(), comb.data(), values.data()};
    uint32_t n = 0, N = 0, n_ref = 0;
    const lh_status st = lh_infinigen_select(layer, &in, &kn, &scr, sel.data(), slots, &n, &N, nullptr);
    const auto ref = plain_select(layer, heads, kvh, p, slots, q, k, cand, 0.35, kn, &n_ref);
    ++runs;
    bool ok = st == LH_OK && n == n_ref;
    for (uint32_t g = 0; ok && g < kvh; ++g)
      for (uint32_t r = 0; r < ref[g].size(); ++r) ok = ok && sel[g * slots + r] == ref[g][r];
    if (!ok) ++bad;
  }
  check(bad == 0, "infinigen select: random inputs (GQA 1/2/4, ties, masks, dense layers) == plain full-sort rule", "%d of %d differ", bad, runs);

  // hand pattern: 2 KV heads, group 2, p 1; head 0 spikes at slot 3, head 1 at slot 7, KV head 1 flat
  {
    const uint32_t slots = 10;
    std::vector<float> k(2 * slots, 0.0f), q = {1, 1, 1, 1};
    k[3] = 10;
    k[7] = 9;
    std::vector<double> scores(4 * slots), comb(slots), values(slots);
    std::vector<int32_t> sel(2 * slots);
    lh_select_input in{4, 2, 1, slots, q.data(), k.data(), slots, LH_KV_F32, nullptr, 1.0};
    lh_select_scratch scr{scores.data(), comb.data(), values.data()};
    lh_infinigen_knobs kn{2.0, 1.0, 0};
    uint32_t n = 0, N = 0;
    int32_t counts[4];
    lh_infinigen_select(1, &in, &kn, &scr, sel.data(), slots, &n, &N, counts);
    // counts: heads 0,1 (KV 0): 2 each (slots 3, 7 within 2 of 10); heads 2,3: 10 each -> mean 6
    check(n == 6 && N == 10 && counts[0] == 2 && counts[2] == 10 && sel[0] == 0 && sel[1] == 1 && sel[2] == 2 && sel[3] == 3 &&
              sel[4] == 4 && sel[5] == 7 && sel[slots] == 0 && sel[slots + 5] == 5,
          "infinigen select: hand pattern (own max per head, mean count, ties -> lower slot)", "n %u", n);
  }
  // bad knobs
  {
    float q = 1, k = 1;
    double sc[1], cb[1], od[1];
    int32_t sel[1];
    lh_select_input in{1, 1, 1, 1, &q, &k, 1, LH_KV_F32, nullptr, 1.0};
    lh_select_scratch scr{sc, cb, od};
    lh_infinigen_knobs a0{0, 0.2, 0}, c0{5, 0, 0}, c2{5, 1.5, 0};
    uint32_t n, N;
    check(lh_infinigen_select(2, &in, &a0, &scr, sel, 1, &n, &N, nullptr) == LH_BAD_ARGUMENT &&
              lh_infinigen_select(2, &in, &c0, &scr, sel, 1, &n, &N, nullptr) == LH_BAD_ARGUMENT &&
              lh_infinigen_select(2, &in, &c2, &scr, sel, 1, &n, &N, nullptr) == LH_BAD_ARGUMENT,
          "infinigen select: alpha <= 0, cap outside (0, 1] are LH_BAD_ARGUMENT");
  }
}

// A pool with partial rows, `tokens` random tokens appended and a random projection set.
struct SpecFixture {
  lh_kv_pool pool{};
  uint32_t L, H, D, P, heads;
  std::vector<float> proj;  // (layer, kv_head, D, P)
  SpecFixture(uint32_t layers, uint32_t kvh, uint32_t d, uint32_t p, uint32_t group, uint32_t capacity, uint32_t kv_type, Rng& rng)
      : L(layers), H(kvh), D(d), P(p), heads(kvh * group) {
    lh_kv_pool_config cfg{0, L, H, D, kv_type, P};
    const uint64_t per = static_cast<uint64_t>(L) * H * (2ull * lh_kv_row_bytes(kv_type, D) + 4 + 2ull * P);
    cfg.budget_bytes = per * capacity + 4096 + static_cast<uint64_t>(L) * H * D * P * 4;
    lh_kv_pool_init(&pool, &cfg);
    proj.resize(static_cast<size_t>(L) * H * D * P);
    for (auto& x : proj) x = rng.normal() * 0.5f;
  }
  ~SpecFixture() { lh_kv_pool_free(&pool); }
  void append(uint32_t layer, Rng& rng, int32_t pos) {
    std::vector<float> k(H * D), v(H * D);
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    lh_kv_pool_append(&pool, layer, k.data(), v.data(), pos, nullptr);
  }
};

void test_partial_rows() {
  Rng rng(5);
  SpecFixture f(2, 2, 16, 4, 1, 64, LH_KV_F16, rng);
  for (int t = 0; t < 10; ++t) f.append(0, rng, t);
  lh_kv_pool_set_projection(&f.pool, 0, f.proj.data());  // rebuilds slots 0..9
  for (int t = 10; t < 20; ++t) f.append(0, rng, t);     // written at append
  int bad = 0;
  float krow[16], prow[4];
  for (uint32_t g = 0; g < 2; ++g)
    for (uint32_t t = 0; t < 20; ++t) {
      lh_kv_pool_read(&f.pool, LH_KV_KEY, 0, g, t, krow, nullptr);
      lh_kv_pool_read_partial(&f.pool, 0, g, t, prow);
      for (uint32_t i = 0; i < 4; ++i) {
        double acc = 0;
        for (uint32_t j = 0; j < 16; ++j) acc += static_cast<double>(krow[j]) * f.proj[(g * 16 + j) * 4 + i];
        if (std::fabs(prow[i] - acc) > 1e-3 + 1e-3 * std::fabs(acc)) ++bad;
      }
    }
  check(bad == 0, "partial rows: rebuilt and appended rows == fp16(K_stored · A[:, C])", "%d elements off", bad);
  check(lh_kv_pool_set_projection(&f.pool, 2, f.proj.data()) == LH_BAD_ARGUMENT, "partial rows: projection of a layer out of range is LH_BAD_ARGUMENT");
}

void test_speculator() {
  const uint32_t ratios[] = {1, 2, 4};
  for (uint32_t kt : {static_cast<uint32_t>(LH_KV_F16), static_cast<uint32_t>(LH_KV_F32), static_cast<uint32_t>(LH_KV_I8)})
    for (uint32_t ratio : ratios) {
      Rng rng(100 + ratio + kt);
      const uint32_t L = 3, H = 2, D = 40, P = 12, cap_tokens = 300;
      SpecFixture f(L, H, D, P, ratio, cap_tokens, kt, rng);
      const uint32_t heads = H * ratio;
      // everything selected (alpha huge, cap 1) -> bit-equal to full attention
      lh_speculator_config all{heads, {1e30, 1.0, 1}, 1.0 / std::sqrt(40.0)};
      lh_speculator* sp = nullptr;
      const lh_status cs = lh_speculator_create(&sp, &f.pool, &all);
      lh_kv_pool_set_projection(&f.pool, 2, f.proj.data());
      for (int t = 0; t < 257; ++t) f.append(2, rng, t);
      std::vector<float> q(heads * D), qs(heads * D), o1(heads * D), o2(heads * D), o3(heads * D);
      int bit_bad = 0, ref_bad = 0;
      for (int step = 0; step < 3; ++step) {
        for (auto& x : q) x = rng.normal();
        for (auto& x : qs) x = rng.normal();
        lh_speculator_begin(sp, 2, qs.data());
        f.append(2, rng, 257 + step);
        lh_speculator_attend(sp, 2, q.data(), o1.data());
        lh_speculator_attend_ref(sp, 2, q.data(), o3.data());
        lh_attention_args a{q.data(), lh_kv_pool_k_rows(&f.pool, 2), lh_kv_pool_v_rows(&f.pool, 2), o2.data(),
                            lh_kv_pool_head_stride(&f.pool, 2), lh_kv_pool_length(&f.pool, 2), heads, H, D, 1.0f / std::sqrt(40.0f), kt,
                            nullptr, 0, lh_kv_pool_k_scales(&f.pool, 2), lh_kv_pool_v_scales(&f.pool, 2)};
        lh_attention_decode(&a);
        for (uint32_t i = 0; i < heads * D; ++i) {
          bit_bad += same_bits_or_both_nan(o1[i], o2[i]) ? 0 : 1;
          ref_bad += std::fabs(o1[i] - o3[i]) <= 1e-5f + 1e-4f * std::fabs(o3[i]) ? 0 : 1;
        }
      }
      const lh_layer_stats* st = lh_speculator_stats(sp, 2);
      check(cs == LH_OK && bit_bad == 0 && ref_bad == 0 && st->n == 259 && st->candidates == 259,
            (std::string("speculator: all selected == full attention bit for bit, == scalar reference (") +
             (kt == LH_KV_I8 ? "int8" : kt ? "fp32" : "fp16") +
             ", group " + std::to_string(ratio) + ")").c_str(),
            "bit %d ref %d n %u", bit_bad, ref_bad, st->n);
      // after 3 steps everything was staged: the last step's misses are only the previous current token
      check(st->hits == H * 259 && st->misses == 0, "speculator: reuse cache, all selected: step 3 hits every row (steps 1-2 staged them)",
            "hits %u misses %u", st->hits, st->misses);
      lh_speculator_destroy(sp);

      // realistic knobs: staged attention == scalar reference over the same rows
      lh_speculator_config some{heads, {2.0, 0.2, 1}, 1.0 / std::sqrt(40.0)};
      lh_speculator_create(&sp, &f.pool, &some);
      int bad = 0;
      bool ns_ok = true;
      for (int step = 0; step < 4; ++step) {
        for (auto& x : q) x = rng.normal();
        lh_speculator_begin(sp, 2, q.data());
        f.append(2, rng, 300 + step);
        lh_speculator_attend(sp, 2, q.data(), o1.data());
        lh_speculator_attend_ref(sp, 2, q.data(), o3.data());
        for (uint32_t i = 0; i < heads * D; ++i) bad += std::fabs(o1[i] - o3[i]) <= 1e-5f + 1e-4f * std::fabs(o3[i]) ? 0 : 1;
        const lh_layer_stats* s2 = lh_speculator_stats(sp, 2);
        ns_ok = ns_ok && s2->n >= 1 && s2->n <= s2->candidates / 5 && s2->hits + s2->misses == H * s2->n &&
                s2->job_end_ns >= s2->job_start_ns;
        double recall = 0;
        ns_ok = ns_ok && lh_speculator_recall(sp, 2, q.data(), &recall) == LH_OK && recall > 0 && recall <= 1.0 + 1e-9;
      }
      check(bad == 0 && ns_ok, "speculator: alpha 2, cap 0.2: gathered attention == scalar reference over the selected rows; n <= cap*N",
            "%d off", bad);
      check(lh_speculator_begin(sp, 0, q.data()) == LH_BAD_ARGUMENT && lh_speculator_attend(sp, 1, q.data(), o1.data()) == LH_BAD_ARGUMENT,
            "speculator: dense layers are refused");
      lh_speculator_destroy(sp);
    }
}

// Inline speculators (no side thread; groups and attention on 2 or 3 threads of the shared pool) against
// the side-thread one on the same pool, step by step: the same selections, the same reuse figures and
// attention outputs with the same bits (MHA, GQA 4 and 8 over 2 and 3 KV heads: more threads than groups too).
void test_speculator_inline() {
  int bad_sel = 0, bad_bits = 0, bad_stats = 0, runs = 0;
  for (const uint32_t kvh : {2u, 3u})
    for (const uint32_t ratio : {1u, 4u, 8u}) {
      Rng rng(300 + kvh * 10 + ratio);
      const uint32_t L = 2, D = 40, P = 12, cap_tokens = 1100;
      SpecFixture f(L, kvh, D, P, ratio, cap_tokens, LH_KV_F16, rng);
      const uint32_t heads = kvh * ratio;
      lh_kv_pool_set_projection(&f.pool, 1, f.proj.data() + static_cast<size_t>(kvh) * D * P);
      for (int t = 0; t < 1037; ++t) f.append(1, rng, t);
      lh_speculator* sp[3] = {nullptr, nullptr, nullptr};
      const uint32_t inline_threads[3] = {0, 2, 3};
      bool made = true;
      for (int i = 0; i < 3; ++i) {
        lh_speculator_config c{heads, {2.0, 0.1, 1}, 1.0 / std::sqrt(40.0)};
        c.inline_threads = inline_threads[i];
        made = made && lh_speculator_create(&sp[i], &f.pool, &c) == LH_OK;
      }
      if (!made) {
        ++bad_sel;
        for (lh_speculator* s : sp) lh_speculator_destroy(s);
        continue;
      }
      std::vector<float> q(heads * D), qs(heads * D), o[3];
      for (auto& v : o) v.resize(heads * D);
      for (int step = 0; step < 4; ++step) {
        ++runs;
        for (auto& x : q) x = rng.normal();
        for (auto& x : qs) x = rng.normal();
        for (lh_speculator* s : sp) bad_sel += lh_speculator_begin(s, 1, qs.data()) == LH_OK ? 0 : 1;
        f.append(1, rng, 1037 + step);
        for (int i = 0; i < 3; ++i) bad_sel += lh_speculator_attend(sp[i], 1, q.data(), o[i].data(), 2) == LH_OK ? 0 : 1;
        const lh_layer_stats* s0 = lh_speculator_stats(sp[0], 1);
        for (int i = 1; i < 3; ++i) {
          const lh_layer_stats* si = lh_speculator_stats(sp[i], 1);
          bad_stats += si->n == s0->n && si->hits == s0->hits && si->misses == s0->misses && si->wait_ns < 1000000 ? 0 : 1;
          for (uint32_t g = 0; g < kvh; ++g) {
            uint32_t n0 = 0, ni = 0;
            const int32_t* a = lh_speculator_selected(sp[0], 1, g, &n0);
            const int32_t* b = lh_speculator_selected(sp[i], 1, g, &ni);
            bad_sel += a != nullptr && b != nullptr && n0 == ni && n0 > 0 && std::memcmp(a, b, n0 * sizeof(int32_t)) == 0 ? 0 : 1;
          }
          for (uint32_t e = 0; e < heads * D; ++e) bad_bits += same_bits_or_both_nan(o[0][e], o[i][e]) ? 0 : 1;
        }
      }
      for (lh_speculator* s : sp) lh_speculator_destroy(s);
    }
  check(runs == 24 && bad_sel == 0 && bad_bits == 0 && bad_stats == 0,
        "speculator inline on 2 and 3 pool threads == the side-thread speculator: selections, reuse figures, attention bits",
        "runs %d, selections %d, bits %d, stats %d off", runs, bad_sel, bad_bits, bad_stats);
  lh_speculator_config too_many{1, {2.0, 0.1, 1}, 1.0};
  too_many.inline_threads = LH_MAX_RANGE_THREADS + 1;
  Rng rng(1);
  SpecFixture f(2, 1, 8, 4, 1, 16, LH_KV_F16, rng);
  lh_speculator* sp = nullptr;
  check(lh_speculator_create(&sp, &f.pool, &too_many) == LH_BAD_ARGUMENT && sp == nullptr,
        "speculator: inline_threads above LH_MAX_RANGE_THREADS is LH_BAD_ARGUMENT");
}

// Reuse cache on a hand-made sequence: keys chosen so the selected set is known each step.
// The speculator's group scoring kernel: every implementation == the scalar reference bit for bit
// (scores), the same max and finiteness; == the row-major float64 rule of lh_infinigen_select;
// lanes past `slots` untouched (guards); odd p, slots not a multiple of the tile, groups 1..16 (AVX-512 scores 8 heads a chunk).
void test_spec_score_kernels() {
  Rng rng(9001);
  int bad_bits = 0, bad_rule = 0, bad_max = 0, bad_guard = 0, bad_count = 0, bad_comb = 0, bad_finite = 0, bad_hist = 0, runs = 0;
  const uint32_t ps[] = {1, 3, 5, 19, 31};
  const uint32_t slot_counts[] = {0, 1, 7, 8, 9, 31, 33, 257, 1001};
  const uint32_t groups[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16};
  const lh_attention_impl impls[] = {LH_ATTN_PORTABLE, LH_ATTN_AVX2, LH_ATTN_AVX512, LH_ATTN_AUTO};
  for (uint32_t p : ps)
    for (uint32_t slots : slot_counts)
      for (uint32_t group : groups) {
        const bool ties = (runs % 3) == 1, special = (runs % 7) == 3;
        ++runs;
        const uint32_t tiles = (slots + 7) / 8 + 1;
        std::vector<uint16_t> kp(static_cast<size_t>(tiles) * p * 8);
        for (auto& x : kp) x = lh_fp32_to_fp16(ties ? std::round(2 * rng.normal()) * 0.5f : rng.normal());
        if (special && slots > 0) kp[(static_cast<size_t>((slots - 1) >> 3) * p) * 8 + ((slots - 1) & 7)] = 0x7c00;  // +inf key
        std::vector<float> q(static_cast<size_t>(group) * p);
        for (auto& x : q) x = ties ? std::round(4 * rng.normal()) * 0.25f : rng.normal();
        const double scale = 1.0 / std::sqrt(static_cast<double>(p) + 2);
        const size_t stride = slots + 5;
        std::vector<double> ref(group * stride, 777.0), m_ref(group);
        uint32_t fin_ref = 9;
        lh_spec_score_group(kp.data(), p, slots, q.data(), group, scale, ref.data(), stride, m_ref.data(), &fin_ref, LH_ATTN_PORTABLE);
        // the rule as lh_infinigen_select's score_rows computes it, from row-major fp32 keys
        for (uint32_t hh = 0; hh < group; ++hh)
          for (uint32_t j = 0; j < slots; ++j) {
            double acc = 0;
            for (uint32_t i = 0; i < p; ++i)
              acc += static_cast<double>(q[hh * p + i]) * static_cast<double>(lh_fp16_to_fp32(kp[((j >> 3) * p + i) * 8 + (j & 7)]));
            const double want = acc * scale, got = ref[hh * stride + j];
            bad_rule += (std::isnan(want) && std::isnan(got)) || std::memcmp(&want, &got, sizeof want) == 0 ? 0 : 1;
          }
        bad_finite += fin_ref == ((special && slots > 0) ? 0u : 1u) ? 0 : 1;
        for (lh_attention_impl impl : impls) {
          if (!lh_attention_available(impl)) continue;
          std::vector<double> out(group * stride, 777.0), m(group);
          uint32_t fin = 9;
          lh_spec_score_group(kp.data(), p, slots, q.data(), group, scale, out.data(), stride, m.data(), &fin, impl);
          for (uint32_t hh = 0; hh < group; ++hh) {
            for (uint32_t j = 0; j < slots; ++j) {
              const double a = out[hh * stride + j], b = ref[hh * stride + j];
              bad_bits += (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0 ? 0 : 1;
            }
            for (size_t j = slots; j < stride; ++j) bad_guard += out[hh * stride + j] == 777.0 ? 0 : 1;
            bad_max += (m[hh] == m_ref[hh] || (std::isnan(m[hh]) && std::isnan(m_ref[hh]))) ? 0 : 1;
          }
          bad_finite += fin == fin_ref ? 0 : 1;
          if (fin_ref == 0) continue;
          for (uint32_t hh = 0; hh < group; ++hh) {
            const double thr = m_ref[hh] - 1.5;
            uint32_t want = 0;
            for (uint32_t j = 0; j < slots; ++j) want += ref[hh * stride + j] > thr ? 1 : 0;
            bad_count += lh_spec_count_above(ref.data() + hh * stride, slots, thr, impl) == want ? 0 : 1;
          }
          std::vector<double> comb(slots + 3, 555.0);
          double lo = 0, hi = 0;
          lh_spec_combine(ref.data(), stride, group, m_ref.data(), slots, comb.data(), &lo, &hi, impl);
          double wl = INFINITY, wh = -INFINITY;
          for (uint32_t j = 0; j < slots; ++j) {
            double best = -INFINITY;
            for (uint32_t hh = 0; hh < group; ++hh) best = std::max(best, ref[hh * stride + j] - m_ref[hh]);
            bad_comb += comb[j] == best ? 0 : 1;
            wl = std::min(wl, best);
            wh = std::max(wh, best);
          }
          bad_comb += (slots == 0 || (lo == wl && hi == wh)) && comb[slots] == 555.0 ? 0 : 1;
          if (slots == 0) continue;
          // the top-k search's passes: histogram and the listed slots of the top buckets == scalar bucket_of
          const double inv = wh > wl ? kSpecBuckets / (wh - wl) : 0.0;
          std::vector<uint32_t> hist(kSpecBuckets, 99), want_hist(kSpecBuckets, 0);
          lh_spec_histogram(comb.data(), slots, wl, inv, hist.data(), impl);
          auto bucket = [&](double x) -> uint32_t {
            const double bb = (x - wl) * inv;
            return bb >= kSpecBuckets - 1 ? kSpecBuckets - 1 : static_cast<uint32_t>(bb);
          };
          for (uint32_t j = 0; j < slots; ++j) ++want_hist[bucket(comb[j])];
          bad_hist += hist == want_hist ? 0 : 1;
          for (uint32_t b : {0u, 1u, bucket(comb[slots / 2]), kSpecBuckets - 1}) {
            std::vector<int32_t> list(slots + 8, -5), want_list;
            for (uint32_t j = 0; j < slots; ++j)
              if (bucket(comb[j]) >= b) want_list.push_back(static_cast<int32_t>(j));
            const uint32_t got = lh_spec_collect(comb.data(), slots, wl, inv, b, list.data(), impl);
            bad_hist += got == want_list.size() && std::equal(want_list.begin(), want_list.end(), list.begin()) ? 0 : 1;
          }
        }
      }
  check(bad_bits == 0 && bad_guard == 0 && bad_max == 0 && bad_finite == 0,
        "speculator kernels: group scores, every implementation == the scalar reference bit for bit (odd p, partial tiles, "
        "groups 1-8, ties, an inf key), same max and finiteness, lanes past the slots untouched",
        "%d bits, %d guards, %d max, %d finite of %d runs", bad_bits, bad_guard, bad_max, bad_finite, runs);
  check(bad_rule == 0, "speculator kernels: group scores == lh_infinigen_select's float64 row rule bit for bit", "%d differ", bad_rule);
  check(bad_count == 0 && bad_comb == 0, "speculator kernels: count above the threshold and the combined score == scalar loops",
        "%d counts, %d combined", bad_count, bad_comb);
  check(bad_hist == 0, "speculator kernels: top-k histogram and top-bucket slot lists == the scalar bucket rule", "%d differ", bad_hist);
  check(lh_spec_score_group(nullptr, 3, 5, nullptr, 1, 1.0, nullptr, 5, nullptr, nullptr) == LH_BAD_ARGUMENT &&
            lh_spec_score_group(nullptr, 0, 0, nullptr, 1, 1.0, nullptr, 0, nullptr, nullptr) == LH_BAD_ARGUMENT,
        "speculator kernels: null buffers and p 0 are LH_BAD_ARGUMENT");
}

// The kernel beside a concurrent append(): the `skip` slot (the victim being overwritten) and the lanes
// past `slots` of the last tile (the new token's) hold NaN keys here; every implementation must leave
// them out: skip scores −∞, every other score == the scalar reference without skip, the max over the
// rest, finite stays 1 (a NaN lane that was read and counted would make it 0 or the max NaN).
void test_spec_score_skip() {
  Rng rng(9002);
  int bad_bits = 0, bad_skip = 0, bad_max = 0, bad_finite = 0, runs = 0;
  const lh_attention_impl impls[] = {LH_ATTN_PORTABLE, LH_ATTN_AVX2, LH_ATTN_AVX512, LH_ATTN_AUTO};
  for (uint32_t p : {1u, 5u, 31u})
    for (uint32_t slots : {1u, 8u, 9u, 33u, 100u})
      for (uint32_t group : {1u, 2u, 3u, 4u, 7u, 8u, 11u})
        for (int32_t skip : {0, 7, 8, 13, 31, 32, 99}) {
          if (static_cast<uint32_t>(skip) >= slots) continue;
          ++runs;
          const uint32_t tiles = (slots + 7) / 8;
          std::vector<uint16_t> kp(static_cast<size_t>(tiles) * p * 8);
          for (auto& x : kp) x = lh_fp32_to_fp16(rng.normal());
          std::vector<float> q(static_cast<size_t>(group) * p);
          for (auto& x : q) x = rng.normal();
          const double scale = 0.25;
          const size_t stride = slots + 3;
          std::vector<double> ref(group * stride), m_ref(group);
          lh_spec_score_group(kp.data(), p, slots, q.data(), group, scale, ref.data(), stride, m_ref.data(), nullptr, LH_ATTN_PORTABLE);
          // poison what a concurrent append writes: the skip slot's lanes and the lanes past slots
          for (uint32_t i = 0; i < p; ++i) {
            kp[((static_cast<size_t>(skip) >> 3) * p + i) * 8 + (skip & 7)] = 0x7e00;
            for (uint32_t j = slots; j < tiles * 8; ++j) kp[((static_cast<size_t>(j) >> 3) * p + i) * 8 + (j & 7)] = 0x7e00;
          }
          for (lh_attention_impl impl : impls) {
            if (!lh_attention_available(impl)) continue;
            std::vector<double> out(group * stride, 777.0), m(group);
            uint32_t fin = 9;
            lh_spec_score_group(kp.data(), p, slots, q.data(), group, scale, out.data(), stride, m.data(), &fin, impl, skip);
            for (uint32_t hh = 0; hh < group; ++hh) {
              double want_max = -INFINITY;
              for (uint32_t j = 0; j < slots; ++j) {
                const double a = out[hh * stride + j], b = ref[hh * stride + j];
                if (static_cast<int32_t>(j) == skip) {
                  bad_skip += a == -INFINITY ? 0 : 1;
                  continue;
                }
                bad_bits += std::memcmp(&a, &b, sizeof a) == 0 ? 0 : 1;
                want_max = std::max(want_max, b);
              }
              for (size_t j = slots; j < stride; ++j) bad_skip += out[hh * stride + j] == 777.0 ? 0 : 1;
              bad_max += m[hh] == want_max ? 0 : 1;
            }
            bad_finite += fin == 1 ? 0 : 1;
          }
        }
  check(bad_bits == 0 && bad_skip == 0 && bad_max == 0 && bad_finite == 0,
        "speculator kernels: the skipped slot (NaN keys) scores -inf and the lanes past the slots (NaN) are left out; "
        "every other score == the reference bit for bit, max and finiteness over the rest",
        "%d bits, %d skip/guard, %d max, %d finite of %d runs", bad_bits, bad_skip, bad_max, bad_finite, runs);
}

// lh_heap_trim gives freed heap blocks back: 512 blocks of 64 KiB (under glibc's mmap threshold, so
// from the heap), touched, then all freed but the last (it pins the heap's top, so free() cannot
// shrink the heap by itself): RSS must fall by at least half of the 32 MiB after the trim. Skipped
// under the sanitizers (their allocators are not glibc's heap) and off glibc.
void test_heap_trim() {
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  constexpr size_t kBlock = 64 * 1024, kBlocks = 512;
  std::vector<char*> blocks(kBlocks);
  for (auto& b : blocks) {
    b = static_cast<char*>(std::malloc(kBlock));
    if (b != nullptr) std::memset(b, 1, kBlock);
  }
  for (size_t i = 0; i + 1 < kBlocks; ++i) std::free(blocks[i]);
  const uint64_t before = lh_resident_bytes();
  const int released = lh_heap_trim();
  const uint64_t after = lh_resident_bytes();
  std::free(blocks[kBlocks - 1]);
  check(released == 1 && before > after && before - after >= kBlocks * kBlock / 2,
        "heap trim: 32 MiB of freed heap blocks below a live one leave RSS after lh_heap_trim",
        "released %d, RSS %llu -> %llu bytes", released, (unsigned long long)before, (unsigned long long)after);
#else
  std::printf("skip  heap trim: the sanitizers' allocators are not glibc's heap (or not glibc)\n");
#endif
}

// lh_kv_pool_note_job == note_selected per list + age on the slots it may touch, and leaves alone the
// counters of the reserved victim and of slots >= len (what append() writes meanwhile).
void test_kv_note_job() {
  const uint32_t L = 1, H = 2, D = 4, P = 2;
  lh_kv_pool_config cfg{0, L, H, D, LH_KV_F16, P, 1, 1, 2, 3};  // sinks 1, recent 2, age every 3 steps
  cfg.budget_bytes = 1 << 16;
  lh_kv_pool a, b;
  if (lh_kv_pool_init(&a, &cfg) != LH_OK || lh_kv_pool_init(&b, &cfg) != LH_OK) {
    check(false, "eviction: note_job pools", "init failed");
    return;
  }
  Rng rng(77);
  std::vector<float> k(H * D), v(H * D);
  const uint32_t len = 40;
  for (uint32_t t = 0; t < len; ++t) {
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    lh_kv_pool_append(&a, 0, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
    lh_kv_pool_append(&b, 0, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
  }
  const uint32_t n = 6;
  const int32_t reserved = 11;
  int bad = 0;
  for (uint32_t step = 0; step < 7; ++step) {
    std::vector<int32_t> sel(static_cast<size_t>(H) * 8);  // (kv_head, stride 8)
    for (uint32_t g = 0; g < H; ++g)
      for (uint32_t r = 0; r < n; ++r) sel[g * 8 + r] = static_cast<int32_t>((step * 5 + g * 3 + r * 7) % len);
    // what append() would do meanwhile: the slot past len and the victim get written (poison them)
    b.counter[len] = 1000 + step;
    b.counter[reserved] = 2000 + step;
    bad += lh_kv_pool_note_job(&b, 0, len, reserved, sel.data(), 8, H, n) == LH_OK ? 0 : 1;
    for (uint32_t g = 0; g < H; ++g) {
      std::vector<int32_t> list(sel.begin() + g * 8, sel.begin() + g * 8 + n);
      list.erase(std::remove(list.begin(), list.end(), reserved), list.end());
      lh_kv_pool_note_selected(&a, 0, list.data(), static_cast<uint32_t>(list.size()));
    }
    const uint32_t keep = a.counter[reserved];
    lh_kv_pool_age(&a, 0);
    a.counter[reserved] = keep;  // untouched by note_job
    for (uint32_t s = 0; s < len; ++s) bad += s == static_cast<uint32_t>(reserved) || a.counter[s] == b.counter[s] ? 0 : 1;
    bad += b.counter[len] == 1000 + step && b.counter[reserved] == 2000 + step ? 0 : 1;
    b.counter[reserved] = a.counter[reserved];
  }
  check(bad == 0 && lh_kv_pool_note_job(&b, 0, a.capacity + 1, -1, &reserved, 1, 1, 1) == LH_BAD_ARGUMENT &&
            lh_kv_pool_note_job(&b, 1, len, -1, &reserved, 1, 1, 1) == LH_BAD_ARGUMENT &&
            lh_kv_pool_note_job(&b, 0, len, -1, nullptr, 1, 1, 1) == LH_BAD_ARGUMENT,
        "eviction: the speculator's note_job == note_selected per KV head + age, leaving the victim and slots >= len alone; "
        "bad arguments refused",
        "%d differ", bad);
  lh_kv_pool_free(&a);
  lh_kv_pool_free(&b);
}

// The speculator's selection (per-group scoring, top ⌊cap·N⌋ per group, then top n) == lh_infinigen_select
// on the same q̃ and partial keys: same n, same slots (ties -> lower slot), GQA 1/2/4/8, odd lengths,
// quantised ties, cap 1, tiny caps, and an evicting pool (candidate masks, reused slots).
void test_speculator_select_exact() {
  int bad = 0, runs = 0;
  for (uint32_t evict : {0u, 1u})
    for (uint32_t ratio : {1u, 2u, 4u, 8u})
      for (uint32_t tokens : {5u, 203u, 517u, 1001u}) {
        const uint32_t L = 2, H = 2, D = 16, P = 5, heads = H * ratio;
        Rng rng(300 + ratio * 7 + tokens + evict);
        lh_kv_pool_config cfg{};
        cfg.layers = L;
        cfg.kv_heads = H;
        cfg.head_dim = D;
        cfg.kv_type = LH_KV_F16;
        cfg.partial_dim = P;
        const uint32_t cap_tokens = evict != 0 ? std::max(tokens / 2, 80u) : tokens + 16;
        const uint64_t per = static_cast<uint64_t>(L) * H * (2ull * 2 * D + 4 + 2ull * P) + L * 5;
        cfg.budget_bytes = per * cap_tokens + 8192 + static_cast<uint64_t>(L) * H * D * P * 4;
        if (evict != 0) {
          cfg.evict = 1;
          cfg.sinks = 4;
          cfg.recent = 16;
          cfg.age_every = 8;
        }
        lh_kv_pool pool{};
        if (lh_kv_pool_init(&pool, &cfg) != LH_OK) {
          ++bad;
          continue;
        }
        const bool ties = tokens % 2 == 1;
        std::vector<float> proj(static_cast<size_t>(H) * D * P);
        for (auto& x : proj) x = ties ? std::round(4 * rng.normal() * 0.3f) / 4 : rng.normal() * 0.3f;
        lh_kv_pool_set_projection(&pool, 1, proj.data());
        std::vector<float> k(H * D), v(H * D);
        auto put = [&](int32_t pos) {
          for (auto& x : k) x = ties ? std::round(rng.normal()) : rng.normal();
          for (auto& x : v) x = rng.normal();
          lh_kv_pool_append(&pool, 1, k.data(), v.data(), pos, nullptr);
        };
        for (uint32_t t = 0; t < tokens; ++t) put(static_cast<int32_t>(t));
        const double knobs[][2] = {{2, 0.2}, {6, 0.1}, {0.5, 1.0}, {1e30, 0.05}, {3, 0.001}};
        int32_t pos = static_cast<int32_t>(tokens);
        for (const auto& kn : knobs) {
          lh_speculator_config sc{heads, {kn[0], kn[1], 1}, 1.0 / std::sqrt(static_cast<double>(D))};
          lh_speculator* sp = nullptr;
          if (lh_speculator_create(&sp, &pool, &sc) != LH_OK) {
            ++bad;
            continue;
          }
          for (int step = 0; step < 2; ++step) {
            ++runs;
            std::vector<float> qs(heads * D), q(heads * D), o(heads * D);
            for (auto& x : qs) x = ties ? std::round(2 * rng.normal()) : rng.normal();
            for (auto& x : q) x = rng.normal();
            if (lh_speculator_begin(sp, 1, qs.data()) != LH_OK) {
              ++bad;
              continue;
            }
            const uint32_t N = lh_kv_pool_length(&pool, 1);
            std::vector<uint8_t> cand(N, 1);
            if (evict != 0) std::memcpy(cand.data(), lh_kv_pool_candidates(&pool, 1), N);
            // the reference's inputs as the worker computes q̃ (fp32, j order) and the stored partial rows
            std::vector<float> qp(heads * P, 0.0f), kpart(static_cast<size_t>(H) * N * P);
            for (uint32_t h = 0; h < heads; ++h)
              for (uint32_t j = 0; j < D; ++j)
                for (uint32_t i = 0; i < P; ++i) qp[h * P + i] += qs[h * D + j] * proj[((h / ratio) * D + j) * P + i];
            for (uint32_t g = 0; g < H; ++g)
              for (uint32_t t = 0; t < N; ++t) lh_kv_pool_read_partial(&pool, 1, g, t, kpart.data() + (static_cast<size_t>(g) * N + t) * P);
            lh_select_input in{heads, H, P, N, qp.data(), kpart.data(), static_cast<size_t>(N) * P, LH_KV_F32, cand.data(), sc.scale};
            std::vector<double> scores(static_cast<size_t>(heads) * N), comb(N), vals(N);
            lh_select_scratch scr{scores.data(), comb.data(), vals.data()};
            std::vector<int32_t> want(static_cast<size_t>(H) * N);
            uint32_t wn = 0, wN = 0;
            lh_infinigen_select(1, &in, &sc.knobs, &scr, want.data(), N, &wn, &wN, nullptr);
            lh_kv_pool_append(&pool, 1, k.data(), v.data(), pos++, nullptr);
            if (lh_speculator_attend(sp, 1, q.data(), o.data()) != LH_OK) {
              ++bad;
              continue;
            }
            bool same = lh_speculator_stats(sp, 1)->n == wn;
            for (uint32_t g = 0; g < H && same; ++g) {
              uint32_t n = 0;
              const int32_t* got = lh_speculator_selected(sp, 1, g, &n);
              same = got != nullptr && n == wn && std::memcmp(got, want.data() + static_cast<size_t>(g) * N, wn * sizeof(int32_t)) == 0;
            }
            bad += same ? 0 : 1;
          }
          lh_speculator_destroy(sp);
        }
        lh_kv_pool_free(&pool);
      }
  check(bad == 0 && runs > 0,
        "speculator: selection == lh_infinigen_select exactly (GQA 1/2/4/8, odd lengths, ties, cap 1 and tiny caps, evicting pools)",
        "%d of %d differ", bad, runs);
}

// Quest's KV heads split over pool threads (7 KV heads on 2, 3 and 5 threads: parts of unequal size,
// more heads than threads): the single thread's lists and offsets exactly, for several tops and
// lengths; a scratch too small for the split falls back to one thread with the same result.
void test_quest_threads() {
  Rng rng(4242);
  const uint32_t H = 7, group = 2, heads = H * group, D = 16, ps = 16, max_pages = 70;
  std::vector<float> mn(static_cast<size_t>(H) * max_pages * D), mxb(mn.size()), q(static_cast<size_t>(heads) * D);
  for (size_t i = 0; i < mn.size(); ++i) {
    const float a = static_cast<float>(rng.normal()), b = static_cast<float>(rng.normal());
    mn[i] = std::min(a, b), mxb[i] = std::max(a, b);
  }
  for (auto& x : q) x = static_cast<float>(rng.normal());
  lh_shared_pool_reserve(5);
  int bad = 0, runs = 0;
  for (uint32_t N : {17u, 500u, 1111u})
    for (uint32_t top : {1u, 3u, 9u, 70u}) {
      const uint32_t pages = (N + ps - 1) / ps;
      std::vector<int32_t> one(static_cast<size_t>(H) * std::min(N, top * ps) + 1, -7);
      std::vector<uint32_t> one_off(H + 1);
      std::vector<uint8_t> scratch(lh_select_scratch_bytes(pages));
      bad += lh_select_quest(q.data(), heads, H, D, mn.data(), mxb.data(), max_pages, N, ps, top, one.data(), one_off.data(), scratch.data(), scratch.size()) == LH_OK ? 0 : 1;
      for (uint32_t th : {2u, 3u, 5u}) {
        ++runs;
        std::vector<int32_t> split(one.size(), -7);
        std::vector<uint32_t> split_off(H + 1);
        std::vector<uint8_t> big(lh_quest_scratch_bytes(H, pages, th));
        bad += lh_select_quest(q.data(), heads, H, D, mn.data(), mxb.data(), max_pages, N, ps, top, split.data(), split_off.data(), big.data(), big.size(), th) == LH_OK &&
                       split == one && split_off == one_off ? 0 : 1;
        std::vector<int32_t> small(one.size(), -7);
        std::vector<uint32_t> small_off(H + 1);
        bad += lh_select_quest(q.data(), heads, H, D, mn.data(), mxb.data(), max_pages, N, ps, top, small.data(), small_off.data(), scratch.data(), scratch.size(), th) == LH_OK &&
                       small == one && small_off == one_off ? 0 : 1;
      }
    }
  check(bad == 0 && runs == 36, "quest on 2, 3 and 5 pool threads (7 KV heads) == one thread: the same lists and offsets", "%d of %d differ", bad, runs);
}

// H2O's selection and accounting with the KV heads split over pool threads (5 KV heads, GQA 2, on 2, 3
// and 4 threads): one thread's lists, offsets, evictions and accumulated bits exactly, over several
// steps that feed each other; a scratch of one slice runs one thread with the same result.
void test_h2o_threads() {
  Rng rng(777);
  const uint32_t H = 5, group = 2, heads = H * group, D = 16, T = 300, C = 320;
  lh_kv_pool_config cfg{};
  cfg.budget_bytes = static_cast<uint64_t>(C) * H * (2ull * lh_kv_row_bytes(LH_KV_F16, D) + 4) + 4096;
  cfg.layers = 1;
  cfg.kv_heads = H;
  cfg.head_dim = D;
  cfg.kv_type = LH_KV_F16;
  lh_kv_pool pool{};
  check(lh_kv_pool_init(&pool, &cfg) == LH_OK, "h2o threads: pool");
  std::vector<float> k(H * D), v(H * D);
  for (uint32_t t = 0; t < T; ++t) {
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    lh_kv_pool_append(&pool, 0, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
  }
  lh_shared_pool_reserve(4);
  const float scale = 0.25f;
  int bad = 0, runs = 0;
  for (uint32_t threads : {2u, 3u, 4u}) {
    std::vector<float> acc1(static_cast<size_t>(H) * C, 0.0f), accN = acc1;
    std::vector<uint8_t> live1(static_cast<size_t>(H) * C, 1), liveN = live1;
    std::vector<float> q(heads * D);
    for (auto& x : q) x = rng.normal();
    // prefill-style accounting over every slot, then steps of select + accumulate over the lists
    std::vector<float> hs1(lh_h2o_scratch_floats(T)), hsN(lh_h2o_scratch_floats(T) * threads);
    bad += lh_h2o_accumulate(&pool, 0, q.data(), heads, acc1.data(), C, T, nullptr, nullptr, scale, hs1.data(), hs1.size()) == LH_OK ? 0 : 1;
    bad += lh_h2o_accumulate(&pool, 0, q.data(), heads, accN.data(), C, T, nullptr, nullptr, scale, hsN.data(), hsN.size(), threads) == LH_OK ? 0 : 1;
    for (uint32_t step = 0; step < 4; ++step) {
      ++runs;
      const uint32_t N = T - 3 + step, budget = 40 + 7 * step, recent = 9;
      for (auto& x : q) x = rng.normal();
      std::vector<int32_t> s1(static_cast<size_t>(H) * budget, -5), sN = s1;
      std::vector<uint32_t> o1(H + 1), oN(H + 1);
      std::vector<uint8_t> sc1(lh_select_scratch_bytes(N)), scN(lh_select_scratch_bytes(N) * threads);
      bad += lh_select_h2o(acc1.data(), live1.data(), H, C, N, budget, recent, s1.data(), o1.data(), sc1.data(), sc1.size()) == LH_OK ? 0 : 1;
      bad += lh_select_h2o(accN.data(), liveN.data(), H, C, N, budget, recent, sN.data(), oN.data(), scN.data(), scN.size(), threads) == LH_OK ? 0 : 1;
      bad += o1 == oN && std::equal(s1.begin(), s1.begin() + o1[H], sN.begin()) && live1 == liveN ? 0 : 1;
      bad += lh_h2o_accumulate(&pool, 0, q.data(), heads, acc1.data(), C, N, s1.data(), o1.data(), scale, hs1.data(), hs1.size()) == LH_OK ? 0 : 1;
      bad += lh_h2o_accumulate(&pool, 0, q.data(), heads, accN.data(), C, N, sN.data(), oN.data(), scale, hsN.data(), hsN.size(), threads) == LH_OK ? 0 : 1;
      for (size_t i = 0; i < acc1.size(); ++i) bad += lh_f32_bits(acc1[i]) == lh_f32_bits(accN[i]) ? 0 : 1;
      // one slice of scratch asked for `threads`: one thread, the same lists as asked for one
      std::vector<int32_t> s2(s1.size(), -5), s3 = s2;
      std::vector<uint32_t> o2(H + 1), o3(H + 1);
      std::vector<uint8_t> live2 = live1, live3 = live1;
      bad += lh_select_h2o(acc1.data(), live2.data(), H, C, N + 1, budget, recent, s2.data(), o2.data(), sc1.data(), sc1.size()) == LH_OK &&
                     lh_select_h2o(acc1.data(), live3.data(), H, C, N + 1, budget, recent, s3.data(), o3.data(), sc1.data(), sc1.size(), threads) == LH_OK &&
                     o2 == o3 && s2 == s3 && live2 == live3 ? 0 : 1;
    }
  }
  check(bad == 0 && runs == 12, "h2o on 2, 3 and 4 pool threads (5 KV heads) == one thread: lists, evictions and accumulated bits", "%d off", bad);
  lh_kv_pool_free(&pool);
}

void test_speculator_reuse() {
  Rng rng(9);
  const uint32_t D = 4, P = 4;
  SpecFixture f(1, 1, D, P, 1, 64, LH_KV_F32, rng);
  std::vector<float> eye(D * P, 0.0f);
  for (uint32_t i = 0; i < D; ++i) eye[i * P + i] = 1.0f;
  lh_kv_pool_set_projection(&f.pool, 0, eye.data());
  // 20 tokens; key j = (j, 0, 0, 0): query (1,0,0,0) scores grow with j, query (-1,0,0,0) the reverse
  auto put = [&](float x, int32_t pos) {
    float k[4] = {x, 0, 0, 0}, v[4] = {1, 2, 3, 4};
    lh_kv_pool_append(&f.pool, 0, k, v, pos, nullptr);
  };
  for (int j = 0; j < 20; ++j) put(static_cast<float>(j), j);
  lh_speculator_config c{1, {100.0, 0.25, 0}, 1.0};  // n = floor(0.25 N)
  lh_speculator* sp = nullptr;
  lh_speculator_create(&sp, &f.pool, &c);
  float up[4] = {1, 0, 0, 0}, down[4] = {-1, 0, 0, 0}, out[4];
  uint32_t hits[3], misses[3], n[3];
  float* qs[3] = {up, up, down};
  for (int step = 0; step < 3; ++step) {
    lh_speculator_begin(sp, 0, qs[step]);
    put(0.5f, 20 + step);  // the current token (low score)
    lh_speculator_attend(sp, 0, up, out);
    const lh_layer_stats* s = lh_speculator_stats(sp, 0);
    hits[step] = s->hits;
    misses[step] = s->misses;
    n[step] = s->n;
  }
  // step 0: N 20, n 5, slots 15..19, all misses; step 1: N 21, n 5, top = 15..19 again (slot 20 is 0.5) -> 5 hits;
  // step 2: query down: N 22, n 5: the lowest keys 0, 20(0.5), 1, 21(0.5), 2 -> slots {0,1,2,20,21}: 20 and 21 were
  // staged as current tokens? slot 20 was current at step 0 (not staged at step 1: only selected + current 21) -> 1 hit (21)
  check(n[0] == 5 && hits[0] == 0 && misses[0] == 5 && n[1] == 5 && hits[1] == 5 && misses[1] == 0 && n[2] == 5 && hits[2] == 1 &&
            misses[2] == 4,
        "speculator: reuse cache on a hand-made sequence (hits = selected ∩ previously staged, current token stays staged)",
        "n %u %u %u hits %u %u %u misses %u %u %u", n[0], n[1], n[2], hits[0], hits[1], hits[2], misses[0], misses[1], misses[2]);
  lh_speculator_destroy(sp);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Comparison policies: attention over slot lists, full logits
// ---------------------------------------------------------------------------------------------
// Every slot ascending == lh_attention_decode bit for bit; a random subset per KV head == the
// scalar reference over the same rows packed by hand; logits == a plain dot product; bad lists refused.
void test_attention_slots() {
  const uint32_t L = 2, H = 4, D = 8, T = 53, heads = 8;
  for (uint32_t kv_type : {LH_KV_F16, LH_KV_F32}) {
    lh_kv_pool_config cfg{1 << 20, L, H, D, kv_type, 0};
    lh_kv_pool p;
    if (lh_kv_pool_init(&p, &cfg) != LH_OK) {
      check(false, "attention over slot lists", "pool init failed");
      return;
    }
    Rng rng(17 + kv_type);
    std::vector<float> k(H * D), v(H * D), q(heads * D), o(heads * D), r(heads * D);
    for (uint32_t t = 0; t < T; ++t) {
      for (auto& x : k) x = rng.normal();
      for (auto& x : v) x = rng.normal();
      lh_kv_pool_append(&p, 1, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
    }
    for (auto& x : q) x = rng.normal();
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<uint8_t> scratch(2 * T * D * 4);
    std::vector<int32_t> all;
    std::vector<uint32_t> off{0};
    for (uint32_t g = 0; g < H; ++g) {
      for (uint32_t t = 0; t < T; ++t) all.push_back(static_cast<int32_t>(t));
      off.push_back(static_cast<uint32_t>(all.size()));
    }
    lh_attention_args a{q.data(), lh_kv_pool_k_rows(&p, 1), lh_kv_pool_v_rows(&p, 1), r.data(), lh_kv_pool_head_stride(&p, 1), T, heads, H, D, scale, kv_type};
    bool ok = lh_attention_decode(&a) == LH_OK &&
              lh_attention_slots(&p, 1, q.data(), heads, all.data(), off.data(), scale, o.data()) == LH_OK;
    bool same = ok;
    for (size_t i = 0; i < o.size(); ++i) same = same && same_bits_or_both_nan(o[i], r[i]);
    check(same, kv_type == LH_KV_F16 ? "slots: every slot == decode over the layer (fp16)" : "slots: every slot == decode over the layer (fp32)");

    // random subsets of different lengths per KV head, vs the reference over hand-packed rows
    std::vector<int32_t> sub;
    std::vector<uint32_t> soff{0};
    for (uint32_t g = 0; g < H; ++g) {
      for (uint32_t t = 0; t < T; ++t)
        if (t == T - 1 || rng.uniform() < 0.2f + 0.2f * g) sub.push_back(static_cast<int32_t>(t));
      soff.push_back(static_cast<uint32_t>(sub.size()));
    }
    ok = lh_attention_slots(&p, 1, q.data(), heads, sub.data(), soff.data(), scale, o.data()) == LH_OK;
    double worst = 0;
    for (uint32_t g = 0; g < H; ++g) {
      const uint32_t n = soff[g + 1] - soff[g];
      std::vector<float> kk(n * D), vv(n * D);
      for (uint32_t i = 0; i < n; ++i) {
        lh_kv_pool_read(&p, LH_KV_KEY, 1, g, static_cast<uint32_t>(sub[soff[g] + i]), kk.data() + i * D, nullptr);
        lh_kv_pool_read(&p, LH_KV_VALUE, 1, g, static_cast<uint32_t>(sub[soff[g] + i]), vv.data() + i * D, nullptr);
      }
      lh_attention_args b{q.data() + g * 2 * D, kk.data(), vv.data(), r.data() + g * 2 * D, static_cast<size_t>(n) * D, n, 2, 1, D, scale, LH_KV_F32};
      ok = ok && lh_attention_decode_ref(&b) == LH_OK;
    }
    for (size_t i = 0; i < o.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(o[i] - r[i])));
    check(ok && worst < 1e-5, "slots: random per-head subsets == reference over packed rows", "max |diff| %.3g", worst);

    std::vector<float> sc(heads * T);
    ok = lh_attention_scores(&p, 1, q.data(), heads, T, scale, sc.data()) == LH_OK;
    worst = 0;
    for (uint32_t h = 0; h < heads; ++h)
      for (uint32_t t = 0; t < T; ++t) {
        float row[D];
        lh_kv_pool_read(&p, LH_KV_KEY, 1, h / 2, t, row, nullptr);
        double s = 0;
        for (uint32_t i = 0; i < D; ++i) s += static_cast<double>(q[h * D + i]) * row[i];
        worst = std::max(worst, std::fabs(scale * s - sc[h * T + t]));
      }
    check(ok && worst < 1e-4, "scores: == plain dot products", "max |diff| %.3g", worst);

    std::vector<int32_t> bad = all;
    bad[5] = static_cast<int32_t>(T);
    std::vector<uint32_t> empty = off;
    empty[1] = 0;
    check(lh_attention_slots(&p, 1, q.data(), heads, bad.data(), off.data(), scale, o.data()) == LH_BAD_ARGUMENT &&
              lh_attention_slots(&p, 1, q.data(), heads, all.data(), empty.data(), scale, o.data()) == LH_BAD_ARGUMENT &&
              lh_attention_slots_gathered(&p, 1, q.data(), heads, all.data(), off.data(), scratch.data(), 8, scale, o.data()) == LH_BAD_ARGUMENT &&
              lh_attention_scores(&p, 1, q.data(), heads, T + 1, scale, sc.data()) == LH_BAD_ARGUMENT,
          "slots/scores: a slot out of range, an empty list, small scratch, too many tokens are refused");
    lh_kv_pool_free(&p);
  }
}

// Slot lists over threads: a pool big enough that the KV heads really split (>= 131,072 work units a
// thread: a score per (listed row, query head), 4 per listed row), lists of uneven lengths per head, fp16/fp32/int8: 2/3/7 threads give the one-thread bits;
// 0 or 65 threads are refused with nothing written.
void test_attention_slots_threads() {
  Rng rng(5151);
  bool same = true, ran = true, refused = true;
  for (uint32_t kv_type : {LH_KV_F16, LH_KV_F32, LH_KV_I8}) {
    const uint32_t H = 5, D = 32, T = 20000, heads = 10;  // ~60,000 listed rows x (2 heads + 4): 2 threads
    lh_kv_pool_config cfg{static_cast<uint64_t>(T + 8) * 2 * H * (2 * D * 4 + 16) + 4096, 2, H, D, kv_type, 0};
    lh_kv_pool p;
    if (lh_kv_pool_init(&p, &cfg) != LH_OK) {
      ran = false;
      continue;
    }
    std::vector<float> k(H * D), v(H * D), q(heads * D);
    for (uint32_t t = 0; t < T; ++t) {
      for (auto& x : k) x = rng.normal();
      for (auto& x : v) x = rng.normal();
      lh_kv_pool_append(&p, 1, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
    }
    for (auto& x : q) x = rng.normal();
    std::vector<int32_t> slots;
    std::vector<uint32_t> off{0};
    for (uint32_t g = 0; g < H; ++g) {  // head g keeps ~(30 + 15 g)% of the slots, the last one always
      for (uint32_t t = 0; t < T; ++t)
        if (t == T - 1 || rng.uniform() < 0.3f + 0.15f * g) slots.push_back(static_cast<int32_t>(t));
      off.push_back(static_cast<uint32_t>(slots.size()));
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<float> one(heads * D + 2 * kGuard, kCanary);
    ran = ran && lh_attention_slots(&p, 1, q.data(), heads, slots.data(), off.data(), scale, one.data() + kGuard) == LH_OK;
    for (const uint32_t threads : {2u, 3u, 7u}) {
      std::vector<float> ot(one.size(), kCanary);
      ran = ran && lh_attention_slots(&p, 1, q.data(), heads, slots.data(), off.data(), scale, ot.data() + kGuard, threads) == LH_OK;
      same = same && std::memcmp(ot.data(), one.data(), ot.size() * sizeof(float)) == 0;
    }
    std::vector<float> untouched(one.size(), kCanary);
    refused = refused && lh_attention_slots(&p, 1, q.data(), heads, slots.data(), off.data(), scale, untouched.data() + kGuard, 0) == LH_BAD_ARGUMENT &&
              lh_attention_slots(&p, 1, q.data(), heads, slots.data(), off.data(), scale, untouched.data() + kGuard, 65) == LH_BAD_ARGUMENT;
    for (float x : untouched) refused = refused && lh_f32_bits(x) == lh_f32_bits(kCanary);
    lh_kv_pool_free(&p);
  }
  check(ran && same && refused, "slots over 2/3/7 threads == one thread bit for bit (fp16/fp32/int8, 5 KV heads, 20,000 tokens, uneven lists); 0/65 threads refused, nothing written",
        "ran %d same %d refused %d", ran, same, refused);
}

// In-place listed rows vs the previous gather-into-scratch path: the same bits for fp16/fp32/int8
// pools, GQA 1/2/4, lists of any length (1, not a multiple of the kernel's tile of 32, repeats,
// any order), contexts 1..1000; outputs guarded on both sides; NaN rows agree too.
void test_attention_slots_in_place() {
  Rng rng(4242);
  bool same = true, guards = true, ran = true;
  int cases = 0;
  for (uint32_t kv_type : {LH_KV_F16, LH_KV_F32, LH_KV_I8})
    for (uint32_t group : {1u, 2u, 4u})
      for (uint32_t T : {1u, 31u, 33u, 257u, 1000u}) {
        const uint32_t H = 1 + static_cast<uint32_t>(rng.next() % 3), D = (rng.next() % 2) ? 64 : 24, heads = H * group;
        lh_kv_pool_config cfg{static_cast<uint64_t>(T + 8) * 2 * H * (2 * D * 4 + 16) + 4096, 2, H, D, kv_type, 0};
        lh_kv_pool p;
        if (lh_kv_pool_init(&p, &cfg) != LH_OK) {
          ran = false;
          continue;
        }
        std::vector<float> k(static_cast<size_t>(T) * H * D), v(k.size());
        for (auto& x : k) x = rng.normal();
        for (auto& x : v) x = rng.normal();
        if (T > 40) k[(static_cast<size_t>(37) * H) * D + 3] = NAN;  // one non-finite row of KV head 0
        lh_kv_pool_append_batch(&p, 1, k.data(), v.data(), T, 0, nullptr);
        std::vector<float> q(static_cast<size_t>(heads) * D);
        for (auto& x : q) x = rng.normal();
        std::vector<int32_t> slots;
        std::vector<uint32_t> off{0};
        uint32_t longest = 0;
        for (uint32_t g = 0; g < H; ++g) {
          const uint32_t n = 1 + static_cast<uint32_t>(rng.next() % (T + 3));
          for (uint32_t i = 0; i < n; ++i) slots.push_back(static_cast<int32_t>(rng.next() % T));
          off.push_back(static_cast<uint32_t>(slots.size()));
          longest = std::max(longest, n);
        }
        const size_t w = static_cast<size_t>(heads) * D, guard = 16;
        std::vector<float> a(w + 2 * guard, 12345.0f), b(w + 2 * guard, 12345.0f);
        std::vector<uint8_t> scratch(2 * static_cast<size_t>(longest) * lh_kv_pool_row_bytes(&p));
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        ran = ran && lh_attention_slots(&p, 1, q.data(), heads, slots.data(), off.data(), scale, a.data() + guard) == LH_OK &&
              lh_attention_slots_gathered(&p, 1, q.data(), heads, slots.data(), off.data(), scratch.data(), scratch.size(), scale, b.data() + guard) == LH_OK;
        for (size_t i = 0; i < w; ++i) same = same && same_bits_or_both_nan(a[guard + i], b[guard + i]);
        for (size_t i = 0; i < guard; ++i)
          guards = guards && a[i] == 12345.0f && a[guard + w + i] == 12345.0f;
        ++cases;
        lh_kv_pool_free(&p);
      }
  check(ran && same, "slots in place == gathered into scratch, bit for bit (fp16/fp32/int8, GQA 1/2/4, 45 shapes)", "ran %d cases", cases);
  check(guards, "slots in place: nothing written outside out");
}

// Huge pages for the pool (kv_pool.h, no_huge_pages): a pool of >= 2 MiB starts on a 2 MiB boundary
// and, where THP is not 'never', the kernel took the MADV_HUGEPAGE advice; the smaps line of the
// mapping then shows AnonHugePages once rows are written. no_huge_pages = 1 maps plain pages. Both
// pools store and read back the same rows, and free() unmaps exactly what was mapped.
std::string read_text(const char* path) {
  std::string out;
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// kB of AnonHugePages in the smaps entry of the mapping that starts at `base` (-1: not found)
long anon_huge_kb(const void* base) {
  const std::string smaps = read_text("/proc/self/smaps");
  char head[32];
  std::snprintf(head, sizeof head, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(base)));
  size_t at = smaps.find(head);
  while (at != std::string::npos && at != 0 && smaps[at - 1] != '\n') at = smaps.find(head, at + 1);
  if (at == std::string::npos) return -1;
  const size_t key = smaps.find("AnonHugePages:", at);
  if (key == std::string::npos) return -1;
  return std::strtol(smaps.c_str() + key + 14, nullptr, 10);
}

void test_kv_pool_huge_pages() {
#if defined(__linux__)
  const std::string thp = read_text("/sys/kernel/mm/transparent_hugepage/enabled");
  const bool thp_on = !thp.empty() && thp.find("[never]") == std::string::npos;
  const uint32_t L = 2, H = 4, D = 64, T = 4096;  // 2 * 2 * 4 * 4096 * 64 * 2 B = 16 MiB of rows
  lh_kv_pool_config cfg{static_cast<uint64_t>(T) * L * H * (2 * D * 2 + 4) + 4096, L, H, D, LH_KV_F16, 0};
  lh_kv_pool a, b;
  cfg.no_huge_pages = 0;
  const bool ia = lh_kv_pool_init(&a, &cfg) == LH_OK;
  cfg.no_huge_pages = 1;
  const bool ib = lh_kv_pool_init(&b, &cfg) == LH_OK;
  if (!ia || !ib) {
    check(false, "huge pages: pool init", "init failed");
    return;
  }
  const bool aligned = (reinterpret_cast<uintptr_t>(a.base) & ((uintptr_t{2} << 20) - 1)) == 0;
  check(aligned && (a.huge_pages == 1) == thp_on && b.huge_pages == 0, "huge pages: a 16 MiB pool is 2 MiB aligned and advised (THP not 'never'); no_huge_pages maps plain pages",
        "aligned %d, advised %u (THP %s), plain pool advised %u", aligned, a.huge_pages, thp_on ? "on" : "never", b.huge_pages);
  Rng rng(99);
  std::vector<float> k(static_cast<size_t>(T) * H * D), v(k.size());
  for (auto& x : k) x = rng.normal();
  for (auto& x : v) x = rng.normal();
  bool same = lh_kv_pool_append_batch(&a, 1, k.data(), v.data(), T, 0, nullptr) == LH_OK &&
              lh_kv_pool_append_batch(&b, 1, k.data(), v.data(), T, 0, nullptr) == LH_OK;
  std::vector<float> ra(D), rb(D);
  for (uint32_t t = 0; t < T && same; t += 97)
    for (uint32_t g = 0; g < H; ++g) {
      lh_kv_pool_read(&a, LH_KV_VALUE, 1, g, t, ra.data(), nullptr);
      lh_kv_pool_read(&b, LH_KV_VALUE, 1, g, t, rb.data(), nullptr);
      same = same && std::memcmp(ra.data(), rb.data(), D * sizeof(float)) == 0 && ra[0] == lh_fp16_to_fp32(lh_fp32_to_fp16(v[(static_cast<size_t>(t) * H + g) * D]));
    }
  check(same, "huge pages: both pools store and read back the same rows");
  const long huge_kb = anon_huge_kb(a.base), plain_kb = anon_huge_kb(b.base);
  // the kernel may lack free 2 MiB pages at this moment; then it falls back to 4 KiB ones: say so, do not fail
  std::printf("info  huge pages: AnonHugePages %ld kB in the advised pool, %ld kB in the plain one\n", huge_kb, plain_kb);
  check(plain_kb <= 0, "huge pages: the plain pool has no huge pages", "%ld kB", plain_kb);
  lh_kv_pool_free(&a);
  lh_kv_pool_free(&b);
  check(a.base == nullptr && b.base == nullptr, "huge pages: free() zeroes both pools");
#endif
}

// ---------------------------------------------------------------------------------------------
// Comparison policies' selection (policy_select.h) against plain references written here: a full
// std::sort by (key desc, slot asc) with NaN as -inf, double softmax, every candidate scanned.
// Scores are drawn from a few values (ties everywhere), with NaN and -inf among them; GQA 1/2/4;
// lengths that are not a multiple of the page size; guard values after every output list.
// ---------------------------------------------------------------------------------------------
std::vector<int32_t> ref_top(const std::vector<double>& score, const std::vector<int32_t>& cand, size_t k) {
  std::vector<int32_t> c = cand;
  std::sort(c.begin(), c.end(), [&](int32_t a, int32_t b) {
    const double ka = std::isnan(score[a]) ? -INFINITY : score[a], kb = std::isnan(score[b]) ? -INFINITY : score[b];
    if (ka != kb) return ka > kb;
    return a < b;
  });
  if (c.size() > k) c.resize(k);
  std::sort(c.begin(), c.end());
  return c;
}

double tie_value(Rng& rng) {
  const uint64_t r = rng.next() % 16;
  if (r == 0) return NAN;
  if (r == 1) return -INFINITY;
  if (r == 2) return -0.0;  // equal to +0 (the r % 5 == 0 values), ranked apart from it by bit order
  if (r == 3) return -0.5;
  return static_cast<double>(r % 5) * 0.25;  // five values: many ties
}

bool same_list(const int32_t* got, size_t n, const std::vector<int32_t>& want) {
  return n == want.size() && std::equal(want.begin(), want.end(), got);
}

void test_policy_select() {
  Rng rng(777);
  constexpr int32_t kGuard = 0x5eed;
  // top-k
  bool top_ok = true;
  for (int c = 0; c < 300 && top_ok; ++c) {
    const size_t n = rng.next() % 200, k = rng.next() % (n + 3);
    std::vector<double> sc(n);
    std::vector<uint8_t> mask(n);
    std::vector<int32_t> cand;
    const bool masked = rng.next() % 2;
    for (size_t j = 0; j < n; ++j) {
      sc[j] = tie_value(rng);
      mask[j] = masked ? (rng.next() % 3 != 0) : 1;
      if (mask[j]) cand.push_back(static_cast<int32_t>(j));
    }
    std::vector<int32_t> idx(n + 1), out(n + 2, kGuard);
    const size_t got = lh_top_indices(sc.data(), n, k, masked ? mask.data() : nullptr, idx.data(), out.data());
    top_ok = same_list(out.data(), got, ref_top(sc, cand, k)) && out[got] == kGuard;
  }
  check(top_ok, "policy top-k == full sort (ties: lower slot; NaN as -inf; masks; 300 cases)");

  // streaming
  bool st_ok = true;
  for (uint32_t N = 0; N < 70 && st_ok; ++N)
    for (uint32_t sinks : {0u, 4u, 80u})
      for (uint32_t window : {0u, 1u, 13u, 100u}) {
        std::vector<int32_t> want, out(N + 1, kGuard);
        for (uint32_t j = 0; j < N; ++j)
          if (j < sinks || j + window >= N) want.push_back(static_cast<int32_t>(j));
        const size_t got = lh_select_streaming(N, sinks, window, out.data());
        st_ok = st_ok && same_list(out.data(), got, want) && out[got] == kGuard;
      }
  check(st_ok, "streaming == sinks + recent window for every N < 70");

  // h2o: selection + permanent eviction, and the mass accumulated over lists / over every slot
  bool h2o_ok = true, acc_ok = true;
  // masses of a few tied values (NaN, ±inf, ±0), then of every magnitude (2^-60 .. 2^60, either
  // sign, a fifth of them repeats) over longer pools: the k-th largest is found digit by digit
  for (const bool wide : {false, true})
    for (int c = 0; c < 36; ++c) {
      const uint32_t C = wide ? 3000 : 150;
      const uint32_t kvh = 1 + static_cast<uint32_t>(rng.next() % 3), N = static_cast<uint32_t>(rng.next() % C);
      const uint32_t budget = N == 0 ? 0 : static_cast<uint32_t>(rng.next() % (N + 1)), recent = budget == 0 ? 0 : static_cast<uint32_t>(rng.next() % (budget + 1));
      std::vector<float> acc(static_cast<size_t>(kvh) * C);
      std::vector<uint8_t> live(acc.size()), live_ref;
      for (size_t i = 0; i < acc.size(); ++i) {
        if (!wide) acc[i] = static_cast<float>(tie_value(rng));
        else if (i > 0 && rng.next() % 5 == 0) acc[i] = acc[rng.next() % i];
        else acc[i] = std::ldexp(rng.uniform() - 0.5f, static_cast<int>(rng.next() % 121) - 60);
        live[i] = rng.next() % 5 != 0;
      }
      live_ref = live;
      std::vector<int32_t> slots(static_cast<size_t>(kvh) * budget + 1, kGuard);
      std::vector<uint32_t> off(kvh + 1);
      std::vector<uint8_t> scratch(lh_select_scratch_bytes(N));
      h2o_ok = h2o_ok && lh_select_h2o(acc.data(), live.data(), kvh, C, N, budget, recent, slots.data(), off.data(), scratch.data(), scratch.size()) == LH_OK;
      for (uint32_t g = 0; g < kvh && h2o_ok; ++g) {
        const uint32_t rs = N > recent ? N - recent : 0;
        std::vector<double> key(N);
        std::vector<int32_t> older, rec;
        for (uint32_t j = 0; j < N; ++j) {
          key[j] = acc[g * C + j];
          if (!live_ref[g * C + j]) continue;
          (j < rs ? older : rec).push_back(static_cast<int32_t>(j));
        }
        std::vector<int32_t> want = ref_top(key, older, budget - rec.size());
        std::vector<uint8_t> keep(N);
        for (int32_t j : want) keep[j] = 1;
        for (uint32_t j = 0; j < rs; ++j)
          if (!keep[j]) live_ref[g * C + j] = 0;
        want.insert(want.end(), rec.begin(), rec.end());
        h2o_ok = same_list(slots.data() + off[g], off[g + 1] - off[g], want);
      }
      h2o_ok = h2o_ok && live == live_ref && slots[off[kvh]] == kGuard;
    }
  check(h2o_ok, "h2o == recent + heavy hitters by full sort; older slots not kept are evicted for good (GQA 1/2/4, ties, NaN, ±0, masses of every magnitude)");

  for (uint32_t kv_type : {LH_KV_F16, LH_KV_F32, LH_KV_I8})
    for (uint32_t group : {1u, 2u, 4u}) {
      const uint32_t H = 2, D = 24, T = 101, heads = H * group, C = 128;
      lh_kv_pool_config cfg{static_cast<uint64_t>(T + 8) * 2 * H * (2 * D * 4 + 16) + 4096, 2, H, D, kv_type, 0};
      lh_kv_pool p;
      if (lh_kv_pool_init(&p, &cfg) != LH_OK) {
        acc_ok = false;
        continue;
      }
      std::vector<float> k(static_cast<size_t>(T) * H * D), v(k.size()), q(static_cast<size_t>(heads) * D);
      for (auto& x : k) x = rng.normal();
      for (auto& x : v) x = rng.normal();
      for (auto& x : q) x = rng.normal();
      lh_kv_pool_append_batch(&p, 1, k.data(), v.data(), T, 0, nullptr);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      std::vector<int32_t> sl;
      std::vector<uint32_t> off{0};
      for (uint32_t g = 0; g < H; ++g) {
        for (uint32_t j = 0; j < T; ++j)
          if (rng.next() % 3 == 0 || j == T - 1) sl.push_back(static_cast<int32_t>(j));
        off.push_back(static_cast<uint32_t>(sl.size()));
      }
      std::vector<float> acc(static_cast<size_t>(H) * C, 0.5f), ref = acc, sc(static_cast<size_t>(heads) * T);
      std::vector<float> hs(lh_h2o_scratch_floats(T));
      acc_ok = acc_ok && lh_h2o_accumulate(&p, 1, q.data(), heads, acc.data(), C, T, sl.data(), off.data(), scale, hs.data(), hs.size()) == LH_OK &&
               lh_attention_scores(&p, 1, q.data(), heads, T, scale, sc.data()) == LH_OK;
      for (uint32_t h = 0; h < heads; ++h) {
        const uint32_t g = h / group;
        double mx = -INFINITY, sum = 0;
        for (uint32_t i = off[g]; i < off[g + 1]; ++i) mx = std::max(mx, static_cast<double>(sc[h * T + sl[i]]));
        for (uint32_t i = off[g]; i < off[g + 1]; ++i) sum += std::exp(static_cast<double>(sc[h * T + sl[i]]) - mx);
        for (uint32_t i = off[g]; i < off[g + 1]; ++i)
          ref[g * C + sl[i]] = static_cast<float>(ref[g * C + sl[i]] + std::exp(static_cast<double>(sc[h * T + sl[i]]) - mx) / sum);
      }
      // over every slot (prefill): n = 57 < T
      for (uint32_t h = 0; h < heads; ++h) {
        const uint32_t g = h / group, n = 57;
        double mx = -INFINITY, sum = 0;
        for (uint32_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(sc[h * T + j]));
        for (uint32_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(sc[h * T + j]) - mx);
        for (uint32_t j = 0; j < n; ++j) ref[g * C + j] = static_cast<float>(ref[g * C + j] + std::exp(static_cast<double>(sc[h * T + j]) - mx) / sum);
      }
      acc_ok = acc_ok && lh_h2o_accumulate(&p, 1, q.data(), heads, acc.data(), C, 57, nullptr, nullptr, scale, hs.data(), hs.size()) == LH_OK;
      for (size_t i = 0; i < acc.size(); ++i) acc_ok = acc_ok && lh_f32_bits(acc[i]) == lh_f32_bits(ref[i]);
      std::vector<int32_t> bad = sl;
      bad[0] = static_cast<int32_t>(T);
      acc_ok = acc_ok && lh_h2o_accumulate(&p, 1, q.data(), heads, acc.data(), C, T, bad.data(), off.data(), scale, hs.data(), hs.size()) == LH_BAD_ARGUMENT &&
               lh_h2o_accumulate(&p, 1, q.data(), heads, acc.data(), C, T + 1, nullptr, nullptr, scale, hs.data(), hs.size()) == LH_BAD_ARGUMENT &&
               lh_h2o_accumulate(&p, 1, q.data(), heads, acc.data(), C, T, sl.data(), off.data(), scale, hs.data(), 3) == LH_BAD_ARGUMENT;

      // quest: bounds from the stored rows, then pages by the group's bound
      const uint32_t ps = 16, max_pages = (C + ps - 1) / ps;
      std::vector<float> mn(static_cast<size_t>(H) * max_pages * D, INFINITY), mxb(mn.size(), -INFINITY);
      acc_ok = acc_ok && lh_quest_extend_bounds(&p, 1, mn.data(), mxb.data(), max_pages, ps, 0, 40) == LH_OK &&
               lh_quest_extend_bounds(&p, 1, mn.data(), mxb.data(), max_pages, ps, 40, T) == LH_OK &&
               lh_quest_extend_bounds(&p, 1, mn.data(), mxb.data(), max_pages, ps, 0, T + 1) == LH_BAD_ARGUMENT;
      bool bounds_ok = true;
      std::vector<float> row(D);
      for (uint32_t g = 0; g < H; ++g)
        for (uint32_t P = 0; P * ps < T; ++P)
          for (uint32_t i = 0; i < D; ++i) {
            float lo = INFINITY, hi = -INFINITY;
            for (uint32_t j = P * ps; j < std::min(T, (P + 1) * ps); ++j) {
              lh_kv_pool_read(&p, LH_KV_KEY, 1, g, j, row.data(), nullptr);
              lo = std::min(lo, row[i]);
              hi = std::max(hi, row[i]);
            }
            const size_t at = (static_cast<size_t>(g) * max_pages + P) * D + i;
            bounds_ok = bounds_ok && mn[at] == lo && mxb[at] == hi;
          }
      bool quest_ok = bounds_ok;
      for (uint32_t N : {1u, 15u, 16u, 17u, 100u, T}) {
        const uint32_t pages = (N + ps - 1) / ps, top = 1 + static_cast<uint32_t>(rng.next() % (pages + 1));
        std::vector<int32_t> qs(static_cast<size_t>(H) * std::min(N, top * ps) + 1, kGuard);
        std::vector<uint32_t> qo(H + 1);
        std::vector<uint8_t> scratch(lh_select_scratch_bytes(pages));
        quest_ok = quest_ok && lh_select_quest(q.data(), heads, H, D, mn.data(), mxb.data(), max_pages, N, ps, top, qs.data(), qo.data(), scratch.data(), scratch.size()) == LH_OK;
        for (uint32_t g = 0; g < H && quest_ok; ++g) {
          std::vector<double> comb(pages, -INFINITY), u(pages);
          for (uint32_t h = g * group; h < (g + 1) * group; ++h) {
            double m = -INFINITY;
            for (uint32_t P = 0; P < pages; ++P) {
              double s = 0;
              for (uint32_t i = 0; i < D; ++i) {
                const size_t at = (static_cast<size_t>(g) * max_pages + P) * D + i;
                s += std::max(static_cast<double>(q[h * D + i]) * mn[at], static_cast<double>(q[h * D + i]) * mxb[at]);
              }
              u[P] = s;
              m = std::max(m, s);
            }
            for (uint32_t P = 0; P < pages; ++P) comb[P] = std::max(comb[P], u[P] - m);
          }
          std::vector<int32_t> all_pages;
          for (uint32_t P = 0; P < pages; ++P) all_pages.push_back(static_cast<int32_t>(P));
          std::vector<int32_t> want;
          for (int32_t P : ref_top(comb, all_pages, top))
            for (uint32_t j = P * ps; j < std::min(N, (P + 1) * ps); ++j) want.push_back(static_cast<int32_t>(j));
          quest_ok = same_list(qs.data() + qo[g], qo[g + 1] - qo[g], want);
        }
        quest_ok = quest_ok && qs[qo[H]] == kGuard;

      }
      acc_ok = acc_ok && quest_ok;

      // snapkv over a prompt of P = T slots, window 5, kernel 7 and 1
      for (uint32_t kernel : {1u, 7u}) {
        const uint32_t P = T, w = 5, budget = 30;
        std::vector<float> obs(static_cast<size_t>(w) * heads * D);
        for (auto& x : obs) x = rng.normal();
        std::vector<int32_t> ks(static_cast<size_t>(H) * budget + 1, kGuard);
        std::vector<uint32_t> ko(H + 1);
        std::vector<uint8_t> scratch(lh_select_scratch_bytes(P));
        bool snap_ok = lh_snapkv_compress(&p, 1, obs.data(), heads, P, w, budget, kernel, scale, ks.data(), ko.data(), scratch.data(), scratch.size()) == LH_OK;
        const uint32_t prefix = P - w, half = kernel / 2;
        for (uint32_t g = 0; g < H && snap_ok; ++g) {
          std::vector<double> gv(prefix, 0.0);
          for (uint32_t h = g * group; h < (g + 1) * group; ++h) {
            std::vector<double> vote(prefix, 0.0);
            for (uint32_t i = 0; i < w; ++i) {
              std::vector<float> srow(heads * P);
              lh_attention_scores(&p, 1, obs.data() + static_cast<size_t>(i) * heads * D, heads, P, scale, srow.data());
              double m = -INFINITY, sum = 0;
              for (uint32_t j = 0; j <= prefix + i; ++j) m = std::max(m, static_cast<double>(srow[h * P + j]));
              for (uint32_t j = 0; j <= prefix + i; ++j) sum += std::exp(srow[h * P + j] - m);
              for (uint32_t j = 0; j < prefix; ++j) vote[j] += std::exp(srow[h * P + j] - m) / sum;
            }
            for (uint32_t j = 0; j < prefix; ++j) {
              double a = -INFINITY;
              for (int64_t t = static_cast<int64_t>(j) - half; t <= static_cast<int64_t>(j + half); ++t)
                if (t >= 0 && t < prefix) a = std::max(a, vote[t]);
              gv[j] += a;
            }
          }
          std::vector<int32_t> cand;
          for (uint32_t j = 0; j < prefix; ++j) cand.push_back(static_cast<int32_t>(j));
          std::vector<int32_t> want = ref_top(gv, cand, budget - w);
          for (uint32_t j = prefix; j < P; ++j) want.push_back(static_cast<int32_t>(j));
          snap_ok = same_list(ks.data() + ko[g], ko[g + 1] - ko[g], want);
        }
        snap_ok = snap_ok && ks[ko[H]] == kGuard &&
                  lh_snapkv_compress(&p, 1, obs.data(), heads, P, w, P, kernel, scale, ks.data(), ko.data(), scratch.data(), scratch.size()) == LH_BAD_ARGUMENT &&
                  lh_snapkv_compress(&p, 1, obs.data(), heads, P, budget + 1, budget, kernel, scale, ks.data(), ko.data(), scratch.data(), scratch.size()) == LH_BAD_ARGUMENT &&
                  lh_snapkv_compress(&p, 1, obs.data(), heads, P, w, budget, kernel, scale, ks.data(), ko.data(), scratch.data(), 16) == LH_BAD_ARGUMENT;
        acc_ok = acc_ok && snap_ok;
      }
      lh_kv_pool_free(&p);
    }
  check(acc_ok, "h2o mass (lists and every slot), quest bounds and pages, snapkv votes == plain references (fp16/fp32/int8, GQA 1/2/4, N not a multiple of 16)");

  // quest over many pages (its bounds eight pages a lane-set, the rest one by one): pages copied from
  // others in another lane or in the tail must tie exactly (the lower page wins), a NaN bound ranks
  // last, and q with ±0 and large entries, for every cut of the ranking
  {
    const uint32_t H = 2, group = 2, heads = H * group, D = 24, ps = 16, pages = 37, max_pages = 40, N = (pages - 1) * ps + 5;
    std::vector<float> mn(static_cast<size_t>(H) * max_pages * D), mxb(mn.size()), q(static_cast<size_t>(heads) * D);
    for (size_t i = 0; i < mn.size(); ++i) {
      const float a = static_cast<float>(rng.normal()), b = static_cast<float>(rng.normal());
      mn[i] = std::min(a, b), mxb[i] = std::max(a, b);
    }
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(rng.normal()) * (i % 7 == 3 ? 1e6f : 1.0f);
    q[0] = 0.0f, q[1] = -0.0f;
    const uint32_t copies[][2] = {{2, 36}, {9, 20}, {2, 30}, {17, 35}, {5, 33}, {12, 34}, {25, 32}, {0, 31}};
    for (uint32_t g = 0; g < H; ++g) {
      for (const auto& c : copies)
        for (uint32_t i = 0; i < D; ++i) {
          const size_t from = (static_cast<size_t>(g) * max_pages + c[0]) * D + i, to = (static_cast<size_t>(g) * max_pages + c[1]) * D + i;
          mn[to] = mn[from], mxb[to] = mxb[from];
        }
      mn[(static_cast<size_t>(g) * max_pages + 11) * D + 5] = NAN;
    }
    std::vector<double> comb_all[H];
    for (uint32_t g = 0; g < H; ++g) {
      comb_all[g].assign(pages, -INFINITY);
      for (uint32_t h = g * group; h < (g + 1) * group; ++h) {
        std::vector<double> u(pages);
        double m = -INFINITY;
        for (uint32_t P = 0; P < pages; ++P) {
          double sum = 0;
          for (uint32_t i = 0; i < D; ++i) {
            const size_t at = (static_cast<size_t>(g) * max_pages + P) * D + i;
            const double a = static_cast<double>(q[h * D + i]) * mn[at], b = static_cast<double>(q[h * D + i]) * mxb[at];
            sum += (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
          }
          u[P] = sum;
          m = std::isnan(sum) || std::isnan(m) ? NAN : std::max(m, sum);
        }
        for (uint32_t P = 0; P < pages; ++P) {
          const double v = u[P] - m, c = comb_all[g][P];
          comb_all[g][P] = std::isnan(v) || std::isnan(c) ? NAN : std::max(c, v);
        }
      }
    }
    bool many_ok = true;
    std::vector<int32_t> all_pages;
    for (uint32_t P = 0; P < pages; ++P) all_pages.push_back(static_cast<int32_t>(P));
    for (uint32_t top = 1; top <= pages && many_ok; ++top) {
      std::vector<int32_t> qs(static_cast<size_t>(H) * std::min(N, top * ps) + 1, kGuard);
      std::vector<uint32_t> qo(H + 1);
      std::vector<uint8_t> scratch(lh_select_scratch_bytes(pages));
      many_ok = lh_select_quest(q.data(), heads, H, D, mn.data(), mxb.data(), max_pages, N, ps, top, qs.data(), qo.data(), scratch.data(),
                                scratch.size()) == LH_OK;
      for (uint32_t g = 0; g < H && many_ok; ++g) {
        std::vector<int32_t> want;
        for (int32_t P : ref_top(comb_all[g], all_pages, top))
          for (uint32_t j = P * ps; j < std::min(N, (P + 1) * ps); ++j) want.push_back(static_cast<int32_t>(j));
        many_ok = same_list(qs.data() + qo[g], qo[g + 1] - qo[g], want);
      }
      many_ok = many_ok && qs[qo[H]] == kGuard;
    }
    check(many_ok, "quest over 37 pages == plain reference for every top (copied pages tie exactly across lanes and the tail, NaN last, q ±0)");
    // and the bounds themselves: the plain sum's bits, page by page (lanes and tail alike)
    bool bits_ok = true;
    std::vector<double> got(pages);
    for (uint32_t h = 0; h < heads; ++h) {
      const uint32_t g = h / group;
      const size_t at = static_cast<size_t>(g) * max_pages * D;
      lh_quest_page_bounds(q.data() + h * D, D, mn.data() + at, mxb.data() + at, pages, got.data());
      for (uint32_t P = 0; P < pages; ++P) {
        double sum = 0;
        for (uint32_t i = 0; i < D; ++i) {
          const double a = static_cast<double>(q[h * D + i]) * mn[at + P * D + i], b = static_cast<double>(q[h * D + i]) * mxb[at + P * D + i];
          sum += (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
        }
        bits_ok = bits_ok && (std::memcmp(&sum, &got[P], sizeof sum) == 0 || (std::isnan(sum) && std::isnan(got[P])));
      }
    }
    check(bits_ok, "quest page bounds: the plain in-order double sum's bits on every page (8-page SIMD lanes and the tail)");
  }
}

// ---------------------------------------------------------------------------------------------
// Eviction under a byte budget (ARCHITECTURE.md §5): 5,000 tokens through a pool that holds ~300
// ---------------------------------------------------------------------------------------------
void test_kv_eviction() {
  const uint32_t L = 2, H = 2, D = 8, P = 4, ratio = 2, heads = H * ratio, sinks = 4, recent = 64, steps = 5000;
  lh_kv_pool_config cfg{0, L, H, D, LH_KV_F16, P, 1, sinks, recent, 32};
  const uint64_t per_token = static_cast<uint64_t>(L) * H * (2 * D * 2 + 4 + 2 * P) + L * 5;
  cfg.budget_bytes = 300 * per_token + 1024;  // 300 tokens + room for the headers
  lh_kv_pool pool;
  const lh_status is = lh_kv_pool_init(&pool, &cfg);
  check(is == LH_OK && pool.byte_length <= cfg.budget_bytes && pool.capacity >= 290 && pool.capacity <= 300 &&
            pool.bytes_per_token == per_token,
        "eviction: the budget sizes the pool (rows + partial rows + positions + counters + flags + headers <= budget)",
        "status %d bytes %llu budget %llu capacity %u", is, (unsigned long long)pool.byte_length,
        (unsigned long long)cfg.budget_bytes, pool.capacity);
  if (is != LH_OK) return;
  lh_kv_pool_config tiny = cfg;
  tiny.budget_bytes = 60 * per_token + 1024;
  lh_kv_pool t2;
  check(lh_kv_pool_init(&t2, &tiny) == LH_BAD_ARGUMENT, "eviction: a budget holding no more than sinks + recent is refused");
  Rng rng(4242);
  std::vector<float> proj(H * D * P);
  for (auto& x : proj) x = rng.normal();
  lh_kv_pool_set_projection(&pool, 1, proj.data());
  lh_speculator_config sc{heads, {3.0, 0.3, 1}, 1.0 / std::sqrt(8.0)};
  lh_speculator* sp = nullptr;
  const lh_status cs = lh_speculator_create(&sp, &pool, &sc);
  std::vector<float> k(H * D), v(H * D), q(heads * D), qs(heads * D), o1(heads * D), o3(heads * D);
  std::vector<uint8_t> evicted(L * steps, 0);  // (layer, position)
  uint64_t ev_count[2] = {0, 0};
  int over_budget = 0, protected_evicted = 0, evicted_selected = 0, bad_status = 0, ref_off = 0, sel_steps = 0, hits = 0;
  for (uint32_t t = 0; t < steps; ++t) {
    for (auto& x : qs) x = rng.normal();
    const bool speculate = t >= 8;
    if (speculate && lh_speculator_begin(sp, 1, qs.data()) != LH_OK) ++bad_status;
    for (uint32_t l = 0; l < L; ++l) {
      for (auto& x : k) x = rng.normal();
      for (auto& x : v) x = rng.normal();
      uint32_t slot = 0;
      if (lh_kv_pool_append(&pool, l, k.data(), v.data(), static_cast<int32_t>(t), &slot) != LH_OK) ++bad_status;
      const lh_kv_evict_layer* e = lh_kv_pool_evict_state(&pool, l);
      if (e->last_evicted >= 0) {
        const int32_t p = e->last_evicted;
        ev_count[l] += 1;
        evicted[l * steps + p] = 1;
        if (p < static_cast<int32_t>(sinks) || p >= static_cast<int32_t>(t) - static_cast<int32_t>(recent)) ++protected_evicted;
      }
      if (lh_kv_pool_length(&pool, l) > pool.capacity || pool.byte_length > cfg.budget_bytes) ++over_budget;
    }
    if (!speculate) continue;
    for (auto& x : q) x = rng.normal();
    if (lh_speculator_attend(sp, 1, q.data(), o1.data()) != LH_OK) ++bad_status;
    lh_speculator_attend_ref(sp, 1, q.data(), o3.data());
    for (uint32_t i = 0; i < heads * D; ++i) ref_off += std::fabs(o1[i] - o3[i]) <= 1e-5f + 1e-4f * std::fabs(o3[i]) ? 0 : 1;
    const int32_t cur = lh_kv_pool_last_slot(&pool, 1);
    for (uint32_t g = 0; g < H; ++g) {
      uint32_t n = 0;
      const int32_t* sel = lh_speculator_selected(sp, 1, g, &n);
      for (uint32_t r = 0; sel != nullptr && r < n; ++r) {
        // the slot now holds the token it held at selection unless it was this step's victim
        const int32_t p = pool.pos[(static_cast<size_t>(1) * H + g) * pool.capacity + sel[r]];
        if (sel[r] == cur || evicted[1 * steps + p]) ++evicted_selected;
      }
    }
    hits += static_cast<int>(lh_speculator_stats(sp, 1)->hits);
    ++sel_steps;
  }
  const uint64_t expect = steps - pool.capacity;
  uint32_t counted = 0;
  for (uint32_t s2 = 0; s2 < pool.capacity; ++s2) counted += pool.counter[pool.capacity + s2] > 0 ? 1 : 0;
  check(cs == LH_OK && bad_status == 0 && over_budget == 0, "eviction: 5,000 appends on a 300-token budget, never past the budget",
        "status errors %d, over budget %d", bad_status, over_budget);
  check(ev_count[0] == expect && ev_count[1] == expect && lh_kv_pool_evict_state(&pool, 0)->evictions == expect &&
            lh_kv_pool_evict_state(&pool, 1)->evictions == expect,
        "eviction: each layer evicts exactly one token per append once full, and counts it",
        "layer0 %llu layer1 %llu expected %llu", (unsigned long long)ev_count[0], (unsigned long long)ev_count[1], (unsigned long long)expect);
  check(protected_evicted == 0, "eviction: sinks and the recent window are never evicted", "%d protected evictions", protected_evicted);
  check(evicted_selected == 0 && sel_steps > 0, "eviction: no evicted token (nor this step's victim) is ever selected afterwards",
        "%d selected evicted", evicted_selected);
  check(ref_off == 0 && hits > 0, "eviction: staged attention over reused slots == scalar reference (reuse cache checks positions)",
        "%d off, %d hits", ref_off, hits);
  check(counted > 0, "eviction: the speculated layer's slots carry prefetch counters", "%u counted", counted);
  bool sinks_kept = true;
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t p = 0; p < sinks; ++p) sinks_kept = sinks_kept && !evicted[l * steps + p];
  check(sinks_kept, "eviction: the sink tokens are still in the pool");
  lh_speculator_drain(sp);
  lh_kv_pool_truncate(&pool, 4990);
  bool trunc_ok = true;
  for (uint32_t l = 0; l < L; ++l) {
    const uint32_t len = lh_kv_pool_length(&pool, l);
    trunc_ok = trunc_ok && len == pool.capacity - 10;
    for (uint32_t s2 = 0; s2 < len; ++s2) trunc_ok = trunc_ok && pool.pos[static_cast<size_t>(l) * H * pool.capacity + s2] < 4990;
  }
  check(trunc_ok, "eviction: truncate(n) forgets exactly the slots holding positions >= n");
  lh_speculator_destroy(sp);
  lh_kv_pool_free(&pool);
}

// ---------------------------------------------------------------------------------------------
// int8 rows (kv_type LH_KV_I8): quantiser, kernels vs reference, the pool
// ---------------------------------------------------------------------------------------------

// Quantisation: |x - scale * q| <= scale / 2 per element (plus a few fp32 ulps of max|x|, the
// rounding of scale itself), max|x| maps to +-127, ties to even, zero, tiny and non-finite rows.
void test_int8_quantize() {
  Rng rng(808);
  int bad = 0, rows = 0;
  double worst = 0;  // worst |x - deq| / scale
  int8_t q[LH_MAX_HEAD_DIM];
  for (const uint32_t d : {1u, 7u, 64u, 128u, 1024u})
    for (const float mag : {1e-25f, 1e-3f, 1.0f, 37.0f, 1e30f})  // rows stay above the 2^-100 flush
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<float> x(d);
        for (auto& e : x) e = rng.normal() * mag;
        const float scale = lh_kv_quantize_i8(x.data(), d, q);
        float amax = 0;
        for (const float e : x) amax = std::max(amax, std::fabs(e));
        bool ok = scale == amax / 127.0f;
        int peak = 0;
        for (uint32_t i = 0; i < d; ++i) {
          const double err = std::fabs(static_cast<double>(x[i]) - static_cast<double>(scale) * q[i]);
          worst = std::max(worst, err / scale);
          ok = ok && q[i] >= -127 && q[i] <= 127 && err <= scale * 0.5 + amax * 1e-6;
          peak = std::max(peak, std::abs(static_cast<int>(q[i])));
        }
        ok = ok && peak == 127;
        bad += ok ? 0 : 1;
        ++rows;
      }
  check(bad == 0, "int8: quantise/dequantise round trip |x - scale*q| <= scale/2, max|x| -> 127, over d 1..1024 and |x| 1e-25..1e30",
        "%d of %d rows off", bad, rows);
  std::printf("      worst |x - deq(q(x))| = %.4f scale\n", worst);
  // ties: x/max|x|*127 = 2.5 -> 2, 3.5 -> 4, -2.5 -> -2 (to even), 0.5 -> 0
  const float tie[] = {2.5f, 3.5f, -2.5f, 0.5f, 127.0f};
  const float s_tie = lh_kv_quantize_i8(tie, 5, q);
  check(s_tie == 1.0f && q[0] == 2 && q[1] == 4 && q[2] == -2 && q[3] == 0 && q[4] == 127, "int8: ties round to even",
        "scale %g q %d %d %d %d %d", s_tie, q[0], q[1], q[2], q[3], q[4]);
  // zero and tiny rows: scale 0, all zeros
  const float zero[4] = {0.0f, -0.0f, 0.0f, 0.0f}, tiny[3] = {1e-35f, -3e-31f, 0.0f};
  std::memset(q, 5, 4);
  const float sz = lh_kv_quantize_i8(zero, 4, q);
  bool zeros = sz == 0.0f && q[0] == 0 && q[1] == 0 && q[2] == 0 && q[3] == 0;
  std::memset(q, 5, 3);
  const float st = lh_kv_quantize_i8(tiny, 3, q);
  zeros = zeros && st == 0.0f && q[0] == 0 && q[1] == 0 && q[2] == 0;
  check(zeros, "int8: a zero row and a row below 2^-100 get scale 0 and zero values");
  // non-finite rows: NaN scale, zero values, whatever else the row holds
  bool nan_rows = true;
  for (const float bad_value : {NAN, INFINITY, -INFINITY}) {
    const float row[4] = {1.0f, bad_value, 3.0f, -2.0f};
    std::memset(q, 5, 4);
    const float s = lh_kv_quantize_i8(row, 4, q);
    nan_rows = nan_rows && std::isnan(s) && q[0] == 0 && q[1] == 0 && q[2] == 0 && q[3] == 0;
  }
  check(nan_rows, "int8: a row with NaN, +inf or -inf is stored as a NaN row (scale NaN, values 0)");
}

// An int8 test case: rows quantised from random rows of varied magnitude (a scale per row),
// a head stride with spare slots, guarded outputs.
struct Int8Case {
  uint32_t tokens, heads, kv_heads, head_dim;
  size_t stride;                  // elements per KV head (tokens + 3 rows)
  std::vector<float> q;           // (heads, head_dim)
  std::vector<int8_t> k, v;       // (kv_heads, stride)
  std::vector<float> ks, vs;      // (kv_heads, stride / head_dim)
  std::vector<float> out_opt;     // guard + (heads, head_dim) + guard
  std::vector<float> out_ref;

  Int8Case(uint32_t t, uint32_t h, uint32_t kvh, uint32_t d, Rng& rng, uint32_t queries = 1)
      : tokens(t), heads(h), kv_heads(kvh), head_dim(d) {
    stride = static_cast<size_t>(t + 3) * d;
    q.resize(static_cast<size_t>(queries) * h * d);
    k.resize(kvh * stride);
    v.resize(kvh * stride);
    ks.resize(kvh * (t + 3));
    vs.resize(kvh * (t + 3));
    for (auto& x : q) x = rng.normal();
    std::vector<float> row(d);
    for (size_t r = 0; r < ks.size(); ++r) {
      const float mag = std::exp(rng.normal());  // rows of different sizes, as real K/V have
      for (auto& x : row) x = rng.normal() * mag;
      ks[r] = lh_kv_quantize_i8(row.data(), d, k.data() + r * d);
      for (auto& x : row) x = rng.normal();
      vs[r] = lh_kv_quantize_i8(row.data(), d, v.data() + r * d);
    }
    out_opt.assign(static_cast<size_t>(queries) * h * d + 2 * kGuard, kCanary);
    out_ref.assign(out_opt.size(), kCanary);
  }
  lh_attention_args args(std::vector<float>& out) {
    lh_attention_args a{};
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = out.data() + kGuard;
    a.head_stride = stride;
    a.tokens = tokens;
    a.heads = heads;
    a.kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    a.kv_type = LH_KV_I8;
    a.k_scale = ks.data();
    a.v_scale = vs.data();
    return a;
  }
  size_t n() const { return out_opt.size() - 2 * kGuard; }
};

// Decode and prefill over int8 rows: the same sweep shapes as fp16, vs the scalar reference
// (which dequantises element by element), with guard bytes; listed rows vs reference and vs a
// packed copy bit for bit.
void test_attention_int8(lh_attention_impl impl) {
  const char* name_impl = lh_attention_impl_name(impl);
  Rng rng(8080);
  int cases = 0, bad = 0, bad_guard = 0;
  double worst_nmse = 0;
  char first[160] = "";
  for (const uint32_t t : {1u, 7u, 33u, 257u, 1000u})
    for (const uint32_t r : {1u, 2u, 4u, 8u})
      for (const uint32_t d : {8u, 64u, 128u, 12u, 1u})
        for (const uint32_t kvh : {1u, 2u}) {
          Int8Case c(t, kvh * r, kvh, d, rng);
          lh_attention_args ao = c.args(c.out_opt), ar = c.args(c.out_ref);
          const lh_status so = lh_attention_decode(&ao, impl), sr = lh_attention_decode_ref(&ar);
          const Diff df = compare(c.out_opt.data() + kGuard, c.out_ref.data() + kGuard, c.n(), kAtol, kRtol);
          ++cases;
          worst_nmse = std::max(worst_nmse, df.nmse);
          if (!Case::guards_ok(c.out_opt) || !Case::guards_ok(c.out_ref)) ++bad_guard;
          if (!(so == LH_OK && sr == LH_OK && df.nmse <= kNmseTol && df.within) && bad++ == 0)
            std::snprintf(first, sizeof first, "tokens %u heads %u kv %u dim %u: nmse %.3g st %d/%d", t, kvh * r, kvh, d, df.nmse, so, sr);
        }
  char name[200];
  std::snprintf(name, sizeof name, "attention %s int8 rows vs reference, %d shapes, guard bytes untouched", name_impl, cases);
  check(bad == 0 && bad_guard == 0, name, "%d bad (first %s), %d guard", bad, first, bad_guard);
  std::printf("      worst NMSE %.3e\n", worst_nmse);

  // prefill: query i over rows 0 .. tokens - queries + i
  struct Shape {
    uint32_t tokens, queries, kvh, ratio, d;
  };
  const Shape shapes[] = {{1, 1, 1, 1, 8}, {7, 7, 2, 4, 12}, {40, 33, 2, 2, 64}, {64, 64, 4, 1, 128}, {300, 37, 2, 4, 8}, {33, 32, 1, 2, 1}};
  int pbad = 0;
  for (const Shape& sh : shapes) {
    Int8Case c(sh.tokens, sh.kvh * sh.ratio, sh.kvh, sh.d, rng, sh.queries);
    lh_attention_args ao = c.args(c.out_opt), ar = c.args(c.out_ref);
    const lh_status so = lh_attention_prefill(&ao, sh.queries, impl), sr = lh_attention_prefill_ref(&ar, sh.queries);
    const Diff df = compare(c.out_opt.data() + kGuard, c.out_ref.data() + kGuard, c.n(), kAtol, kRtol);
    if (so != LH_OK || sr != LH_OK || df.nmse > kNmseTol || !df.within || !Case::guards_ok(c.out_opt) || !Case::guards_ok(c.out_ref)) ++pbad;
  }
  std::snprintf(name, sizeof name, "attention %s int8 causal prefill vs reference (%zu shapes), guard bytes untouched", name_impl,
                sizeof shapes / sizeof shapes[0]);
  check(pbad == 0, name, "%d bad", pbad);

  // listed rows, in place: vs the reference over the same list and vs a packed copy (rows and scales)
  int lbad = 0, lpacked = 0, lcases = 0;
  for (const uint32_t t : {1u, 5u, 33u, 70u, 300u})
    for (const uint32_t d : {8u, 64u, 13u}) {
      const uint32_t kvh = 2, stored = t + 40, r = 2;
      Int8Case c(stored, kvh * r, kvh, d, rng);
      std::vector<int32_t> rows(static_cast<size_t>(kvh) * (t + 2), -1);
      for (uint32_t g = 0; g < kvh; ++g)
        for (uint32_t i = 0; i < t; ++i) rows[g * (t + 2) + i] = static_cast<int32_t>(rng.next() % stored);
      lh_attention_args ao = c.args(c.out_opt), ar = c.args(c.out_ref);
      ao.tokens = ar.tokens = t;
      ao.rows = ar.rows = rows.data();
      ao.rows_stride = ar.rows_stride = t + 2;
      const lh_status so = lh_attention_decode(&ao, impl), sr = lh_attention_decode_ref(&ar);
      const Diff df = compare(c.out_opt.data() + kGuard, c.out_ref.data() + kGuard, c.n(), kAtol, kRtol);
      if (so != LH_OK || sr != LH_OK || df.nmse > kNmseTol || !df.within || !Case::guards_ok(c.out_opt)) ++lbad;
      std::vector<int8_t> pk(static_cast<size_t>(kvh) * t * d), pv(pk.size());
      std::vector<float> pks(static_cast<size_t>(kvh) * t), pvs(pks.size()), packed_out(c.n());
      const size_t srows = c.stride / d;
      for (uint32_t g = 0; g < kvh; ++g)
        for (uint32_t i = 0; i < t; ++i) {
          const size_t row = static_cast<size_t>(rows[g * (t + 2) + i]);
          std::memcpy(&pk[(g * t + i) * d], &c.k[g * c.stride + row * d], d);
          std::memcpy(&pv[(g * t + i) * d], &c.v[g * c.stride + row * d], d);
          pks[g * t + i] = c.ks[g * srows + row];
          pvs[g * t + i] = c.vs[g * srows + row];
        }
      lh_attention_args ap = c.args(c.out_ref);
      ap.k = pk.data();
      ap.v = pv.data();
      ap.k_scale = pks.data();
      ap.v_scale = pvs.data();
      ap.head_stride = static_cast<size_t>(t) * d;
      ap.tokens = t;
      ap.out = packed_out.data();
      if (lh_attention_decode(&ap, impl) != LH_OK ||
          std::memcmp(packed_out.data(), c.out_opt.data() + kGuard, c.n() * sizeof(float)) != 0)
        ++lpacked;
      ++lcases;
    }
  std::snprintf(name, sizeof name, "attention %s int8 listed rows: %d cases vs reference, and == a packed copy bit for bit", name_impl, lcases);
  check(lbad == 0 && lpacked == 0, name, "%d vs reference, %d vs packed", lbad, lpacked);

  // missing scales, a stride that is not whole rows: LH_BAD_ARGUMENT, nothing written
  Int8Case c(10, 2, 1, 8, rng);
  lh_attention_args a = c.args(c.out_opt);
  a.k_scale = nullptr;
  const lh_status no_k = lh_attention_decode(&a, impl);
  a = c.args(c.out_opt);
  a.v_scale = nullptr;
  const lh_status no_v = lh_attention_decode(&a, impl);
  a = c.args(c.out_opt);
  a.head_stride = c.stride - 1;
  const lh_status ragged = lh_attention_decode(&a, impl);
  a = c.args(c.out_opt);
  a.out = c.ks.data();  // out over the key scales
  a.heads = 1;
  const lh_status alias = lh_attention_decode(&a, impl);
  bool untouched = true;
  for (const float x : c.out_opt) untouched = untouched && lh_f32_bits(x) == lh_f32_bits(kCanary);
  std::snprintf(name, sizeof name, "attention %s int8: missing scales, a ragged stride, out over the scales are LH_BAD_ARGUMENT", name_impl);
  check(no_k == LH_BAD_ARGUMENT && no_v == LH_BAD_ARGUMENT && ragged == LH_BAD_ARGUMENT && alias == LH_BAD_ARGUMENT && untouched, name,
        "%d %d %d %d", no_k, no_v, ragged, alias);
}

// The int8 pool: sizes (scales counted in the budget), read back within scale/2, a non-finite
// row reads back NaN and makes exactly the heads that attend it NaN, partial rows from the
// dequantised keys, slot attention and scores, truncate with eviction moving scales with rows.
void test_kv_int8() {
  const uint32_t L = 2, H = 2, D = 24, P = 6, heads = 8, T = 60;
  lh_kv_pool_config cfg{1 << 20, L, H, D, LH_KV_I8, P};
  lh_kv_pool p;
  const lh_status st = lh_kv_pool_init(&p, &cfg);
  const uint64_t per_token = static_cast<uint64_t>(L) * H * (2ull * (D + 4) + 4 + 2ull * P);
  check(st == LH_OK && p.elem_bytes == 1 && p.bytes_per_token == per_token && p.byte_length <= cfg.budget_bytes &&
            p.capacity >= (cfg.budget_bytes - 64 * 1024) / per_token && lh_kv_pool_k_scales(&p, 1) != nullptr,
        "kv pool int8: 1-byte rows + a 4-byte scale per row, counted in bytes_per_token and the budget", "bpt %llu cap %u",
        (unsigned long long)p.bytes_per_token, p.capacity);
  if (st != LH_OK) return;
  Rng rng(88);
  std::vector<float> proj(H * D * P);
  for (auto& x : proj) x = rng.normal() * 0.5f;
  lh_kv_pool_set_projection(&p, 1, proj.data());
  std::vector<float> k(H * D), v(H * D), row(D);
  std::vector<std::vector<float>> kept_k, kept_v;
  for (uint32_t t = 0; t < T; ++t) {
    for (auto& x : k) x = rng.normal() * 2.0f;
    for (auto& x : v) x = rng.normal();
    lh_kv_pool_append(&p, 1, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
    kept_k.push_back(k);
    kept_v.push_back(v);
  }
  int off = 0;
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t g = 0; g < H; ++g)
      for (const lh_kv_part part : {LH_KV_KEY, LH_KV_VALUE}) {
        const std::vector<float>& src = part == LH_KV_KEY ? kept_k[t] : kept_v[t];
        lh_kv_pool_read(&p, part, 1, g, t, row.data(), nullptr);
        float amax = 0;
        for (uint32_t i = 0; i < D; ++i) amax = std::max(amax, std::fabs(src[g * D + i]));
        for (uint32_t i = 0; i < D; ++i)
          if (!(std::fabs(row[i] - src[g * D + i]) <= amax / 127.0f * 0.5f * 1.0001f)) ++off;
      }
  check(off == 0, "kv pool int8: readK/readV return the dequantised row, within scale/2 of what was appended", "%d elements off", off);
  // partial rows: fp16(sum_j deq(K)_j * A[j, i]), what attention and the speculator both read
  int pbad = 0;
  float prow[LH_MAX_HEAD_DIM];
  for (uint32_t g = 0; g < H; ++g)
    for (uint32_t t = 0; t < T; ++t) {
      lh_kv_pool_read(&p, LH_KV_KEY, 1, g, t, row.data(), nullptr);
      lh_kv_pool_read_partial(&p, 1, g, t, prow);
      for (uint32_t i = 0; i < P; ++i) {
        double acc = 0;
        for (uint32_t j = 0; j < D; ++j) acc += static_cast<double>(row[j]) * proj[(g * D + j) * P + i];
        if (std::fabs(prow[i] - acc) > 1e-3 + 1e-3 * std::fabs(acc)) ++pbad;
      }
    }
  check(pbad == 0, "kv pool int8: partial rows == fp16(dequantised K_stored · A[:, C])", "%d elements off", pbad);
  // attention over the pool, both kernels vs reference; slot lists of every slot == decode; scores
  std::vector<float> q(heads * D), o(heads * D), r(heads * D), os(heads * D), sc(heads * T);
  for (auto& x : q) x = rng.normal();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  lh_attention_args a{q.data(), lh_kv_pool_k_rows(&p, 1), lh_kv_pool_v_rows(&p, 1), o.data(), lh_kv_pool_head_stride(&p, 1),
                      T, heads, H, D, scale, LH_KV_I8, nullptr, 0, lh_kv_pool_k_scales(&p, 1), lh_kv_pool_v_scales(&p, 1)};
  lh_attention_args b = a;
  b.out = r.data();
  bool ok = lh_attention_decode_ref(&b) == LH_OK;
  for (const lh_attention_impl impl : kAttentionImpls) {
    if (!lh_attention_available(impl)) continue;
    ok = ok && lh_attention_decode(&a, impl) == LH_OK;
    const Diff df = compare(o.data(), r.data(), o.size(), kAtol, kRtol);
    ok = ok && df.nmse <= kNmseTol && df.within;
  }
  lh_attention_decode(&a);
  std::vector<int32_t> all;
  std::vector<uint32_t> offs{0};
  for (uint32_t g = 0; g < H; ++g) {
    for (uint32_t t = 0; t < T; ++t) all.push_back(static_cast<int32_t>(t));
    offs.push_back(static_cast<uint32_t>(all.size()));
  }
  std::vector<uint8_t> scratch(2 * T * lh_kv_pool_row_bytes(&p));
  const lh_status ss = lh_attention_slots(&p, 1, q.data(), heads, all.data(), offs.data(), scale, os.data());
  const lh_status small = lh_attention_slots_gathered(&p, 1, q.data(), heads, all.data(), offs.data(), scratch.data(), 2 * T * D, scale, os.data());
  bool same = ss == LH_OK && small == LH_BAD_ARGUMENT;
  for (size_t i = 0; i < o.size(); ++i) same = same && lh_f32_bits(o[i]) == lh_f32_bits(os[i]);
  const lh_status sst = lh_attention_scores(&p, 1, q.data(), heads, T, scale, sc.data());
  double sworst = 0;
  for (uint32_t h = 0; h < heads; ++h)
    for (uint32_t t = 0; t < T; ++t) {
      lh_kv_pool_read(&p, LH_KV_KEY, 1, h / (heads / H), t, row.data(), nullptr);
      double dot = 0;
      for (uint32_t i = 0; i < D; ++i) dot += static_cast<double>(q[h * D + i]) * row[i];
      sworst = std::max(sworst, std::fabs(dot * scale - sc[h * T + t]));
    }
  check(ok, "attention over int8 pool rows: every kernel == scalar reference");
  check(same, "attention over int8 slot lists (every slot) == decode over the layer bit for bit; scratch without room for the scales refused");
  check(sst == LH_OK && sworst < 1e-4, "scores over int8 rows == q · dequantised K", "worst %.3g", sworst);
  // a non-finite row: reads back NaN; heads of its KV group attend it and are NaN, the others stay finite
  for (auto& x : k) x = rng.normal();
  k[D + 3] = INFINITY;  // KV head 1
  const lh_status sa = lh_kv_pool_append(&p, 1, k.data(), v.data(), static_cast<int32_t>(T), nullptr);
  lh_kv_pool_read(&p, LH_KV_KEY, 1, 1, T, row.data(), nullptr);
  bool all_nan = true;
  for (const float x : row) all_nan = all_nan && std::isnan(x);
  lh_kv_pool_read(&p, LH_KV_KEY, 1, 0, T, row.data(), nullptr);
  bool head0_finite = true;
  for (const float x : row) head0_finite = head0_finite && std::isfinite(x);
  a.tokens = T + 1;
  b.tokens = T + 1;
  bool heads_ok = sa == LH_OK && all_nan && head0_finite;
  for (const lh_attention_impl impl : kAttentionImpls) {
    if (!lh_attention_available(impl)) continue;
    heads_ok = heads_ok && lh_attention_decode(&a, impl) == LH_OK && lh_attention_decode_ref(&b) == LH_OK;
    for (uint32_t h = 0; h < heads; ++h)
      for (uint32_t i = 0; i < D; ++i) {
        const bool want_nan = h >= heads / 2;  // KV head 1's group
        heads_ok = heads_ok && std::isnan(o[h * D + i]) == want_nan && std::isnan(r[h * D + i]) == want_nan;
      }
  }
  check(heads_ok, "kv pool int8: an appended row with +inf reads back NaN and makes exactly the heads that attend it NaN");
  lh_kv_pool_free(&p);

  // eviction pool: truncate moves the last slot into each hole, scales with the rows
  lh_kv_pool_config ecfg{0, 1, H, D, LH_KV_I8, 0, 1, 2, 4, 32};
  ecfg.budget_bytes = 40 * (static_cast<uint64_t>(H) * (2 * (D + 4) + 4) + 5) + 1024;
  lh_kv_pool e;
  const lh_status es = lh_kv_pool_init(&e, &ecfg);
  std::vector<std::vector<float>> by_pos_k, by_pos_v;
  for (uint32_t t = 0; t < 100; ++t) {  // fills and evicts
    for (auto& x : k) x = rng.normal() * static_cast<float>(1 + t % 5);
    for (auto& x : v) x = rng.normal() * static_cast<float>(1 + t % 3);
    lh_kv_pool_append(&e, 0, k.data(), v.data(), static_cast<int32_t>(t), nullptr);
    by_pos_k.push_back(k);
    by_pos_v.push_back(v);
  }
  lh_kv_pool_truncate(&e, 97);  // holes at the slots of positions 97..99 get filled from the end
  int moved_bad = 0;
  const uint32_t len = lh_kv_pool_length(&e, 0);
  for (uint32_t s = 0; s < len; ++s)
    for (uint32_t g = 0; g < H; ++g) {
      int32_t pos = -1;
      for (const lh_kv_part part : {LH_KV_KEY, LH_KV_VALUE}) {
        lh_kv_pool_read(&e, part, 0, g, s, row.data(), &pos);
        const std::vector<float>& src = part == LH_KV_KEY ? by_pos_k[pos] : by_pos_v[pos];
        float amax = 0;
        for (uint32_t i = 0; i < D; ++i) amax = std::max(amax, std::fabs(src[g * D + i]));
        for (uint32_t i = 0; i < D; ++i)
          if (!(std::fabs(row[i] - src[g * D + i]) <= amax / 127.0f * 0.5f * 1.0001f)) ++moved_bad;
      }
    }
  check(es == LH_OK && e.byte_length <= ecfg.budget_bytes && len > 0 && moved_bad == 0,
        "kv pool int8 with eviction: after evictions and truncate every slot's rows (with their scales) match its position",
        "status %d len %u, %d elements off", es, len, moved_bad);
  lh_kv_pool_free(&e);
}

// ---------------------------------------------------------------------------------------------
// KV snapshots: export / import of a layer's packed section (kv_pool.h "snapshots")
// ---------------------------------------------------------------------------------------------

// A byte buffer with 64 canary bytes on each side, so a write outside [data, data + n) shows.
struct GuardedBytes {
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kCanary = 0xA5;
  std::vector<uint8_t> all;
  size_t n;
  size_t shift;  // extra offset so data() can be unaligned
  explicit GuardedBytes(size_t bytes, size_t misalign = 0) : all(bytes + 2 * kGuard + misalign, kCanary), n(bytes), shift(misalign) {}
  uint8_t* data() { return all.data() + kGuard + shift; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard + shift; ++i)
      if (all[i] != kCanary) return false;
    for (size_t i = kGuard + shift + n; i < all.size(); ++i)
      if (all[i] != kCanary) return false;
    return true;
  }
  bool untouched() const {
    for (const uint8_t b : all)
      if (b != kCanary) return false;
    return true;
  }
};

// Every stored K/V row, int8 scale, position and partial row of `layer` (slots [0, tokens)) of a and
// b are the same bits. Counts mismatching elements.
int snapshot_diff(const lh_kv_pool& a, const lh_kv_pool& b, uint32_t layer, uint32_t tokens) {
  int bad = 0;
  std::vector<float> ra(a.head_dim), rb(a.head_dim), pa(a.partial_dim + 1), pb(a.partial_dim + 1);
  for (uint32_t g = 0; g < a.kv_heads; ++g)
    for (uint32_t s = 0; s < tokens; ++s) {
      for (const lh_kv_part part : {LH_KV_KEY, LH_KV_VALUE}) {
        int32_t qa = -1, qb = -2;
        if (lh_kv_pool_read(&a, part, layer, g, s, ra.data(), &qa) != LH_OK || lh_kv_pool_read(&b, part, layer, g, s, rb.data(), &qb) != LH_OK) {
          ++bad;
          continue;
        }
        bad += qa != qb;
        for (uint32_t i = 0; i < a.head_dim; ++i) bad += lh_f32_bits(ra[i]) != lh_f32_bits(rb[i]);
      }
      if (a.ks != nullptr) {
        const size_t at = (static_cast<size_t>(layer) * a.kv_heads + g) * a.capacity + s, bt = (static_cast<size_t>(layer) * b.kv_heads + g) * b.capacity + s;
        bad += lh_f32_bits(a.ks[at]) != lh_f32_bits(b.ks[bt]);
        bad += lh_f32_bits(a.vs[at]) != lh_f32_bits(b.vs[bt]);
      }
      if (a.partial_dim > 0) {
        if (lh_kv_pool_read_partial(&a, layer, g, s, pa.data()) != LH_OK || lh_kv_pool_read_partial(&b, layer, g, s, pb.data()) != LH_OK) {
          ++bad;
          continue;
        }
        for (uint32_t i = 0; i < a.partial_dim; ++i) bad += lh_f32_bits(pa[i]) != lh_f32_bits(pb[i]);
      }
    }
  return bad;
}

void test_kv_snapshot() {
  const uint32_t L = 2, H = 3, D = 20, P = 5, T = 37;  // D and T not multiples of 8: partial tiles end mid-tile
  for (const uint32_t type : {LH_KV_F16, LH_KV_F32, LH_KV_I8}) {
    const char* tn = type == LH_KV_F16 ? "fp16" : type == LH_KV_F32 ? "fp32" : "int8";
    char name[160];
    const uint64_t per = static_cast<uint64_t>(L) * H * (2ull * lh_kv_row_bytes(type, D) + 4 + 2ull * P);
    const uint64_t fixed = 4096 + static_cast<uint64_t>(L) * H * D * P * 4;
    lh_kv_pool_config cfg{per * 50 + fixed, L, H, D, type, P, 0, 0, 0, 0};
    lh_kv_pool_config cfg2 = cfg;
    cfg2.budget_bytes = per * 70 + fixed;  // another capacity: the section must not depend on it
    lh_kv_pool src, dst;
    if (lh_kv_pool_init(&src, &cfg) != LH_OK || lh_kv_pool_init(&dst, &cfg2) != LH_OK || src.capacity == dst.capacity) {
      std::snprintf(name, sizeof name, "kv snapshot %s: pools", tn);
      check(false, name, "init failed");
      return;
    }
    Rng rng(900 + type);
    std::vector<float> proj(static_cast<size_t>(H) * D * P);
    for (auto& x : proj) x = rng.normal() * 0.5f;
    lh_kv_pool_set_projection(&src, 1, proj.data());  // layer 1's partial rows written at append
    std::vector<float> k(H * D), v(H * D);
    for (uint32_t t = 0; t < T; ++t)
      for (uint32_t l = 0; l < L; ++l) {
        for (auto& x : k) x = rng.normal() * static_cast<float>(1 + t % 4);
        for (auto& x : v) x = rng.normal();
        if (t == 5 && l == 1) k[D + 2] = NAN;  // a non-finite row (int8: NaN scale) survives the trip too
        lh_kv_pool_append(&src, l, k.data(), v.data(), static_cast<int32_t>(3 + 2 * t), nullptr);  // gaps in positions
      }
    lh_kv_pool_set_projection(&src, 0, proj.data());  // layer 0's rebuilt by set_projection

    // export: size, guards, field contents (raw bytes of each head's rows, scales, positions)
    lh_kv_snapshot_layout sl{};
    const uint64_t eb = lh_kv_type_bytes(type);
    const uint64_t want = 2ull * H * T * D * eb + (type == LH_KV_I8 ? 2ull * H * T * 4 : 0) + 4ull * T;
    const bool layout_ok = lh_kv_pool_snapshot_layout(&src, T, &sl) == LH_OK && sl.total == want && sl.v == 1ull * H * T * D * eb &&
                           sl.pos == want - 4ull * T && (type != LH_KV_I8 || sl.vs == sl.ks + 4ull * H * T);
    std::snprintf(name, sizeof name, "kv snapshot %s: section size 2*H*T*D*%u%s + 4*T = %llu bytes", tn, static_cast<unsigned>(eb),
                  type == LH_KV_I8 ? " + 2*H*T*4" : "", static_cast<unsigned long long>(want));
    check(layout_ok, name, "total %llu", static_cast<unsigned long long>(sl.total));
    GuardedBytes sec0(want, 3), sec1(want, 1);  // unaligned outputs
    const lh_status e0 = lh_kv_pool_export_layer(&src, 0, T, sec0.data(), want);
    const lh_status e1 = lh_kv_pool_export_layer(&src, 1, T, sec1.data(), want);
    int field_bad = 0;
    const size_t cap = src.capacity;
    for (uint32_t g = 0; g < H; ++g) {
      const size_t head = static_cast<size_t>(1) * H + g;
      field_bad += std::memcmp(sec1.data() + sl.k + g * T * D * eb, static_cast<const char*>(src.k) + head * cap * D * eb, T * D * eb) != 0;
      field_bad += std::memcmp(sec1.data() + sl.v + g * T * D * eb, static_cast<const char*>(src.v) + head * cap * D * eb, T * D * eb) != 0;
      if (type == LH_KV_I8) {
        field_bad += std::memcmp(sec1.data() + sl.ks + g * T * 4, src.ks + head * cap, T * 4) != 0;
        field_bad += std::memcmp(sec1.data() + sl.vs + g * T * 4, src.vs + head * cap, T * 4) != 0;
      }
    }
    for (uint32_t t = 0; t < T; ++t) {
      int32_t x;
      std::memcpy(&x, sec1.data() + sl.pos + 4 * t, 4);
      field_bad += x != static_cast<int32_t>(3 + 2 * t);
    }
    std::snprintf(name, sizeof name, "kv snapshot %s: export packs K, V%s, positions per KV head; guard bytes intact", tn, type == LH_KV_I8 ? ", scales" : "");
    check(e0 == LH_OK && e1 == LH_OK && field_bad == 0 && sec0.guards_intact() && sec1.guards_intact(), name, "status %d %d, %d fields differ", e0, e1, field_bad);

    // import into a pool of another capacity: layer 1 has its projection set before (rebuilt by the
    // import), layer 0 gets it after (rebuilt by set_projection); data unaligned (offsets 3 and 1)
    lh_kv_pool_set_projection(&dst, 1, proj.data());
    const lh_status i0 = lh_kv_pool_import_layer(&dst, 0, T, sec0.data(), want);
    const lh_status i1 = lh_kv_pool_import_layer(&dst, 1, T, sec1.data(), want);
    lh_kv_pool_set_projection(&dst, 0, proj.data());
    const int d0 = snapshot_diff(src, dst, 0, T), d1 = snapshot_diff(src, dst, 1, T);
    std::snprintf(name, sizeof name, "kv snapshot %s: round trip == source bit for bit (rows, %spositions, partial rows rebuilt)", tn, type == LH_KV_I8 ? "scales, " : "");
    check(i0 == LH_OK && i1 == LH_OK && lh_kv_pool_length(&dst, 0) == T && lh_kv_pool_length(&dst, 1) == T && d0 == 0 && d1 == 0, name,
          "status %d %d, lengths %u %u, %d + %d elements differ", i0, i1, lh_kv_pool_length(&dst, 0), lh_kv_pool_length(&dst, 1), d0, d1);
    // every KV head's position copy, not only head 0's (attention's slot lists read each head)
    int pos_bad = 0;
    for (uint32_t g = 0; g < H; ++g)
      for (uint32_t t = 0; t < T; ++t) pos_bad += dst.pos[(static_cast<size_t>(1) * H + g) * dst.capacity + t] != static_cast<int32_t>(3 + 2 * t);
    // the partial rows equal fp16(K_stored · A[:, C]) computed here (not only "the same as the source")
    int part_bad = 0;
    float krow[D], prow[P];
    for (uint32_t g = 0; g < H; ++g)
      for (uint32_t t = 0; t < T; ++t) {
        lh_kv_pool_read(&dst, LH_KV_KEY, 1, g, t, krow, nullptr);
        lh_kv_pool_read_partial(&dst, 1, g, t, prow);
        for (uint32_t i = 0; i < P; ++i) {
          double acc = 0;
          for (uint32_t j = 0; j < D; ++j) acc += static_cast<double>(krow[j]) * proj[(g * D + j) * P + i];
          if (!(std::fabs(prow[i] - acc) <= 1e-3 + 1e-3 * std::fabs(acc)) && !(std::isnan(acc) && std::isnan(prow[i]))) ++part_bad;
        }
      }
    std::snprintf(name, sizeof name, "kv snapshot %s: import writes every KV head's positions and partial rows == fp16(K · A[:, C])", tn);
    check(pos_bad == 0 && part_bad == 0, name, "%d positions, %d partial elements off", pos_bad, part_bad);
    // the imported layer keeps working: the next append lands in slot T in both pools, same bits
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    uint32_t sa = 0, sb = 0;
    const bool next = lh_kv_pool_append(&src, 1, k.data(), v.data(), 3 + 2 * T, &sa) == LH_OK &&
                      lh_kv_pool_append(&dst, 1, k.data(), v.data(), 3 + 2 * T, &sb) == LH_OK && sa == T && sb == T &&
                      snapshot_diff(src, dst, 1, T + 1) == 0;
    std::snprintf(name, sizeof name, "kv snapshot %s: append after import continues at slot T like the source", tn);
    check(next, name);
    // a prefix: export the first 11 slots, import them into a fresh layer
    lh_kv_snapshot_layout sp{};
    lh_kv_pool_snapshot_layout(&src, 11, &sp);
    GuardedBytes pre(sp.total);
    lh_kv_pool_reset(&dst);
    const bool prefix = lh_kv_pool_export_layer(&src, 1, 11, pre.data(), sp.total) == LH_OK && pre.guards_intact() &&
                        lh_kv_pool_import_layer(&dst, 1, 11, pre.data(), sp.total) == LH_OK && lh_kv_pool_length(&dst, 1) == 11 &&
                        snapshot_diff(src, dst, 1, 11) == 0;
    std::snprintf(name, sizeof name, "kv snapshot %s: a prefix of 11 of %u slots round-trips", tn, T + 1);
    check(prefix, name);

    // bad arguments: LH_BAD_ARGUMENT, the output untouched, the target pool's whole allocation unchanged
    lh_kv_pool_reset(&dst);
    lh_kv_pool_append(&dst, 0, k.data(), v.data(), 0, nullptr);  // layer 0 not empty
    std::vector<uint8_t> before(static_cast<const uint8_t*>(dst.base), static_cast<const uint8_t*>(dst.base) + dst.byte_length);
    GuardedBytes out(want);
    int refused = 0, total = 0;
    auto expect_bad = [&](lh_status st) {
      ++total;
      refused += st == LH_BAD_ARGUMENT;
    };
    expect_bad(lh_kv_pool_export_layer(&src, L, T, out.data(), want));                       // layer out of range
    expect_bad(lh_kv_pool_export_layer(&src, 0, T + 1, out.data(), sl.total + 1));           // more than the layer holds
    expect_bad(lh_kv_pool_export_layer(&src, 0, T, out.data(), want - 1));                   // size short
    expect_bad(lh_kv_pool_export_layer(&src, 0, T, out.data(), want + 1));                   // size long
    expect_bad(lh_kv_pool_export_layer(&src, 0, T, nullptr, want));                          // null
    expect_bad(lh_kv_pool_snapshot_layout(&src, src.capacity + 1, &sp));                     // past capacity
    expect_bad(lh_kv_pool_snapshot_layout(&src, T, nullptr));
    const bool out_ok = out.untouched();
    expect_bad(lh_kv_pool_import_layer(&dst, 0, T, sec0.data(), want));                      // layer not empty
    expect_bad(lh_kv_pool_import_layer(&dst, L, T, sec0.data(), want));                      // layer out of range
    expect_bad(lh_kv_pool_import_layer(&dst, 1, T, sec0.data(), want - 1));                  // size short
    expect_bad(lh_kv_pool_import_layer(&dst, 1, T, sec0.data(), want + 1));                  // size long
    expect_bad(lh_kv_pool_import_layer(&dst, 1, T, nullptr, want));                          // null
    expect_bad(lh_kv_pool_import_layer(&dst, 1, dst.capacity + 1, sec0.data(), want));       // past capacity
    std::vector<uint8_t> badpos(sec0.data(), sec0.data() + want);
    const int32_t neg = -1, dup = 3 + 2 * 9, small = 2;
    std::memcpy(badpos.data() + sl.pos + 4 * 0, &neg, 4);  // negative first position
    expect_bad(lh_kv_pool_import_layer(&dst, 1, T, badpos.data(), want));
    std::memcpy(badpos.data() + sl.pos, sec0.data() + sl.pos, 4);
    std::memcpy(badpos.data() + sl.pos + 4 * 10, &dup, 4);  // slot 10 repeats slot 9's position
    expect_bad(lh_kv_pool_import_layer(&dst, 1, T, badpos.data(), want));
    const int64_t at_dup = lh_kv_snapshot_bad_position(badpos.data() + sl.pos, T);
    std::memcpy(badpos.data() + sl.pos + 4 * 10, sec0.data() + sl.pos + 4 * 10, 4);
    std::memcpy(badpos.data() + sl.pos + 4 * (T - 1), &small, 4);  // the last goes backwards
    expect_bad(lh_kv_pool_import_layer(&dst, 1, T, badpos.data(), want));
    const int64_t at_last = lh_kv_snapshot_bad_position(badpos.data() + sl.pos, T);
    const bool pool_same = std::memcmp(before.data(), dst.base, dst.byte_length) == 0 && lh_kv_pool_length(&dst, 1) == 0;
    std::snprintf(name, sizeof name, "kv snapshot %s: every bad argument is LH_BAD_ARGUMENT; nothing written (output, whole pool)", tn);
    check(refused == total && out_ok && pool_same && at_dup == 10 && at_last == T - 1, name, "%d of %d refused, out %d, pool %d, bad at %lld %lld",
          refused, total, out_ok, pool_same, static_cast<long long>(at_dup), static_cast<long long>(at_last));
    // zero tokens: an empty section both ways
    lh_kv_snapshot_layout z{};
    const bool zero = lh_kv_pool_snapshot_layout(&src, 0, &z) == LH_OK && z.total == 0 && lh_kv_pool_export_layer(&src, 0, 0, nullptr, 0) == LH_OK &&
                      lh_kv_pool_import_layer(&dst, 1, 0, nullptr, 0) == LH_OK && lh_kv_pool_length(&dst, 1) == 0;
    std::snprintf(name, sizeof name, "kv snapshot %s: 0 tokens is an empty section both ways", tn);
    check(zero, name);
    lh_kv_pool_free(&src);
    lh_kv_pool_free(&dst);
    std::snprintf(name, sizeof name, "kv snapshot %s: a freed pool is LH_BAD_ARGUMENT", tn);
    check(lh_kv_pool_export_layer(&src, 0, 0, nullptr, 0) == LH_BAD_ARGUMENT && lh_kv_pool_import_layer(&dst, 0, 0, nullptr, 0) == LH_BAD_ARGUMENT &&
              lh_kv_pool_snapshot_layout(&src, 0, &z) == LH_BAD_ARGUMENT,
          name);
  }
  // evicting pools are refused (slot order is not position order there)
  lh_kv_pool_config ecfg{0, 1, 2, 8, LH_KV_F16, 0, 1, 1, 2, 4};
  ecfg.budget_bytes = 20ull * (2 * (2 * 16 + 4) + 5) + 1024;
  lh_kv_pool e;
  const lh_status es = lh_kv_pool_init(&e, &ecfg);
  std::vector<float> k(16, 1.0f);
  lh_kv_pool_append(&e, 0, k.data(), k.data(), 0, nullptr);
  lh_kv_snapshot_layout el{};
  lh_kv_pool_snapshot_layout(&e, 1, &el);
  std::vector<uint8_t> buf(el.total);
  lh_kv_pool_config e2 = ecfg;
  lh_kv_pool f;
  lh_kv_pool_init(&f, &e2);
  check(es == LH_OK && lh_kv_pool_export_layer(&e, 0, 1, buf.data(), buf.size()) == LH_BAD_ARGUMENT &&
            lh_kv_pool_import_layer(&f, 0, 1, buf.data(), buf.size()) == LH_BAD_ARGUMENT && lh_kv_pool_length(&f, 0) == 0,
        "kv snapshot: evicting pools are refused (LH_BAD_ARGUMENT)");
  lh_kv_pool_free(&e);
  lh_kv_pool_free(&f);
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // LONGHAND_CPU_LEVEL caps every kernel choice as it does in the addon: the whole suite (and the
  // benches) then runs the kernels of that level only, e.g. the AVX2 ones on an AVX-512 host.
  if (const char* level_env = std::getenv(LH_CPU_LEVEL_ENV); level_env != nullptr && *level_env != '\0') {
    lh_cpu_level level = LH_CPU_PORTABLE;
    if (!lh_cpu_level_parse(level_env, &level) || lh_cpu_level_force(level) != LH_OK) {
      std::fprintf(stderr, "native_tests: %s=%s is not a level this CPU runs (it has %s at most; portable, avx2, avx512, amx)\n", LH_CPU_LEVEL_ENV,
                   level_env, lh_cpu_level_name(lh_cpu_level_detected()));
      return 2;
    }
    std::printf("info  %s=%s: kernels capped at %s (this CPU runs %s)\n", LH_CPU_LEVEL_ENV, level_env, lh_cpu_level_name(level),
                lh_cpu_level_name(lh_cpu_level_detected()));
  }
  if (argc > 1 && std::strcmp(argv[1], "--bench-kernels") == 0) {
    bench_attention_kernels(argc > 2 ? std::atoi(argv[2]) : 7);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--bench-dot") == 0) {
    bench_quant_dot(argc > 2 ? std::atoi(argv[2]) : 5);
    return 0;
  }
  if (kThreadSanitizer) std::printf("info  ThreadSanitizer: the per-implementation attention suites run %s only\n", lh_attention_impl_name(LH_ATTN_AUTO));
  test_fp16();
  test_cpu_level();
  test_quant_dot_q();
  test_quant_dot_k();
  test_quant_dot_mxfp4();
  test_quant_dot_q5();
  test_quant_dot_q1();
  test_dense_stage();
  test_moe_ffn();
  test_gated_delta_net();
  test_qwen35_stage();
  test_kv_pool();
  test_kv_pool_fp16_rows();
  test_mapped_file();
  test_mapped_file_own();
  for (const lh_attention_impl impl : kAttentionImpls)
    if (attention_impl_under_test(impl)) test_attention_sweep(impl);
  for (const lh_attention_impl impl : kAttentionImpls)
    if (attention_impl_under_test(impl)) test_attention_nonfinite(impl);
  for (const lh_attention_impl impl : kAttentionImpls)
    if (attention_impl_under_test(impl)) test_attention_rows(impl);
  for (const lh_attention_impl impl : kAttentionImpls)
    if (attention_impl_under_test(impl)) {
      test_attention_grouped_shapes(impl);
      test_attention_head_maxes(impl);
    }
  test_attention_exp();
  test_attention_bad_args();
  test_attention_over_pool();
  test_kv_fp32();
  test_kv_batch_append();
  for (const lh_attention_impl impl : kAttentionImpls)
    if (attention_impl_under_test(impl)) test_attention_prefill(impl);
  for (const lh_attention_impl impl : kAttentionImpls)
    if (attention_impl_under_test(impl)) test_attention_prefill_nonfinite(impl);
  for (const lh_attention_impl impl : kAttentionImpls)
    if (attention_impl_under_test(impl)) test_attention_decode_threads(impl);
  test_infinigen_select();
  test_partial_rows();
  test_speculator();
  test_speculator_inline();
  test_quest_threads();
  test_h2o_threads();
  test_speculator_reuse();
  test_spec_score_kernels();
  test_spec_score_skip();
  test_kv_note_job();
  test_heap_trim();
  test_speculator_select_exact();
  test_attention_slots();
  test_attention_slots_in_place();
  test_attention_slots_threads();
  test_kv_pool_huge_pages();
  test_policy_select();
  test_kv_eviction();
  test_int8_quantize();
  for (const lh_attention_impl impl : kAttentionImpls)
    if (attention_impl_under_test(impl)) test_attention_int8(impl);
  test_kv_int8();
  test_kv_snapshot();
  test_attention_params();
  test_kv_layer_capacity();
  test_kv_ring();
  if (!(argc > 1 && std::strcmp(argv[1], "--no-bench") == 0)) bench_attention();
  std::printf("native: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
