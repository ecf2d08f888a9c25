// The attention argument block (attention_params.h): scale, sliding window, sinks and soft-cap in
// every kernel against the scalar reference, NaN/Inf parity, guard bytes, the same bits across threads,
// the defaults' bits, and the pool-level entry points (slot lists, logits, H2O's mass, SnapKV, the
// speculator) with the block.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../src/attention.h"
#include "../src/fp16.h"
#include "../src/infinigen.h"
#include "../src/kv_pool.h"
#include "../src/policy_select.h"
#include "../src/sparse_attention.h"
#include "check.h"
#include "test_rng.h"

namespace {

constexpr lh_attention_impl kImpls[] = {LH_ATTN_PORTABLE, LH_ATTN_AVX2, LH_ATTN_AVX512, LH_ATTN_AVX2_PER_HEAD};
constexpr size_t kGuard = 16;
constexpr float kCanary = -12345.678f;
constexpr double kAtol = 1e-5, kRtol = 1e-4, kNmseTol = 1e-10;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

// A kernel-level case: K/V rows of kv_type with a head stride larger than tokens·d, int8 scales,
// positions per row (ascending from `base`, or a permutation of them: what an evicting pool holds),
// q for `queries` query tokens and guarded outputs.
struct XCase {
  uint32_t tokens, queries, heads, kvh, d, kv_type;
  size_t stride, rows_per_head;
  std::vector<float> q;
  std::vector<uint8_t> k, v;          // (kvh, stride) elements of kv_type
  std::vector<float> ks, vs;          // (kvh, rows_per_head) int8 scales
  std::vector<int32_t> pos;           // (kvh, rows_per_head) positions
  std::vector<float> sinks;           // (heads)
  std::vector<float> out_a, out_b;    // guard + (queries, heads, d) + guard

  XCase(uint32_t t, uint32_t nq, uint32_t h, uint32_t kv, uint32_t dim, uint32_t type, bool scrambled, Rng& rng)
      : tokens(t), queries(nq), heads(h), kvh(kv), d(dim), kv_type(type) {
    rows_per_head = t + 3;
    stride = rows_per_head * d;
    const size_t eb = lh_kv_type_bytes(type);
    q.resize(static_cast<size_t>(nq) * h * d);
    for (auto& x : q) x = rng.normal();
    k.resize(kvh * stride * eb);
    v.resize(kvh * stride * eb);
    ks.assign(kvh * rows_per_head, 0.0f);
    vs.assign(kvh * rows_per_head, 0.0f);
    std::vector<float> row(d);
    for (uint32_t g = 0; g < kvh; ++g)
      for (size_t r = 0; r < rows_per_head; ++r)
        for (int part = 0; part < 2; ++part) {
          for (auto& x : row) x = rng.normal();
          uint8_t* dst = (part == 0 ? k.data() : v.data()) + (g * stride + r * d) * eb;
          if (type == LH_KV_F32) std::memcpy(dst, row.data(), d * 4);
          else if (type == LH_KV_I8) (part == 0 ? ks : vs)[g * rows_per_head + r] = lh_kv_quantize_i8(row.data(), d, reinterpret_cast<int8_t*>(dst));
          else
            for (uint32_t i = 0; i < d; ++i) {
              const uint16_t hb = lh_fp32_to_fp16(row[i]);
              std::memcpy(dst + 2 * i, &hb, 2);
            }
        }
    std::vector<int32_t> order(rows_per_head);
    for (size_t r = 0; r < rows_per_head; ++r) order[r] = static_cast<int32_t>(r);
    if (scrambled)
      for (size_t r = rows_per_head - 1; r > 0; --r) std::swap(order[r], order[rng.next() % (r + 1)]);
    pos.resize(kvh * rows_per_head);
    for (uint32_t g = 0; g < kvh; ++g)
      for (size_t r = 0; r < rows_per_head; ++r) pos[g * rows_per_head + r] = 100 + order[r];  // every head the same token
    sinks.resize(h);
    for (auto& x : sinks) x = 2.0f * rng.normal();
    out_a.assign(static_cast<size_t>(nq) * h * d + 2 * kGuard, kCanary);
    out_b = out_a;
  }
  size_t n() const { return static_cast<size_t>(queries) * heads * d; }
  lh_attention_args args(std::vector<float>& out, const lh_attention_params& p, int32_t query_position) {
    lh_attention_args a{};
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = out.data() + kGuard;
    a.head_stride = stride;
    a.tokens = tokens;
    a.heads = heads;
    a.kv_heads = kvh;
    a.head_dim = d;
    a.kv_type = kv_type;
    if (kv_type == LH_KV_I8) {
      a.k_scale = ks.data();
      a.v_scale = vs.data();
    }
    lh_attention_args_set_params(&a, &p);
    a.positions = pos.data();
    a.query_position = query_position;
    return a;
  }
  static bool guards_ok(const std::vector<float>& out) {
    for (size_t i = 0; i < kGuard; ++i)
      if (!same_bits(out[i], kCanary) || !same_bits(out[out.size() - 1 - i], kCanary)) return false;
    return true;
  }
};

struct Cmp {
  double nmse = 0, max_abs = 0;
  bool within = true, parity = true;
};

// o against r: finite elements within atol + rtol|r| (and NMSE), non-finite ones in the same places.
Cmp compare(const float* o, const float* r, size_t n) {
  Cmp c;
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(o[i]) != std::isfinite(r[i])) c.parity = false;
    if (!std::isfinite(r[i])) continue;
    const double e = static_cast<double>(o[i]) - r[i];
    num += e * e;
    den += static_cast<double>(r[i]) * r[i];
    c.max_abs = std::max(c.max_abs, std::fabs(e));
    if (!(std::fabs(e) <= kAtol + kRtol * std::fabs(r[i]))) c.within = false;
  }
  c.nmse = den > 0 ? num / den : num;
  return c;
}

// The feature sets of the sweep.
struct Feature {
  const char* name;
  float scale;       // 0: 1/√d
  float softcap;
  bool sinks;
  int window;        // 0 none; > 0 that; -1: 1 + tokens / 3; -2: tokens + 50 (>= context)
  bool scrambled;    // positions not in row order (an evicting pool)
  bool listed;       // a row list (a random subset in random order, the latest row always in)
};
constexpr Feature kFeatures[] = {
    {"scale 0.37", 0.37f, 0, false, 0, false, false},
    {"softcap 1.5", 0, 1.5f, false, 0, false, false},
    {"sinks", 0, 0, true, 0, false, false},
    {"window 1", 0, 0, false, 1, false, false},
    {"window 5, scrambled positions", 0, 0, false, 5, true, false},
    {"window >= context", 0, 0, false, -2, false, false},
    {"window tokens/3 + softcap + sinks + scale", 0.2f, 3.0f, true, -1, true, false},
    {"listed rows, window 17 + sinks", 0, 0, true, 17, false, true},
    {"listed rows, softcap 0.5", 0, 0.5f, false, 0, true, true},
};

lh_attention_params params_for(const Feature& f, const XCase& c) {
  lh_attention_params p = lh_attention_params_default(c.d);
  if (f.scale != 0) p.scale = f.scale;
  p.softcap = f.softcap;
  p.sinks = f.sinks ? c.sinks.data() : nullptr;
  p.window = f.window > 0 ? static_cast<uint32_t>(f.window) : f.window == -1 ? 1 + c.tokens / 3 : f.window == -2 ? c.tokens + 50 : 0;
  return p;
}

// A row list over c's rows: per KV head a random subset of [0, stored) in random order with the
// newest position's row always in; rows (kvh, tokens_listed) into `rows`; returns the count.
uint32_t make_list(const XCase& c, uint32_t stored, Rng& rng, std::vector<int32_t>& rows) {
  std::vector<int32_t> pick;
  size_t newest = 0;
  for (size_t r = 0; r < stored; ++r)
    if (c.pos[r] > c.pos[newest]) newest = r;
  for (size_t r = 0; r < stored; ++r)
    if (r == newest || rng.uniform() < 0.6f) pick.push_back(static_cast<int32_t>(r));
  for (size_t i = pick.size() - 1; i > 0; --i) std::swap(pick[i], pick[rng.next() % (i + 1)]);
  rows.clear();
  for (uint32_t g = 0; g < c.kvh; ++g) rows.insert(rows.end(), pick.begin(), pick.end());
  return static_cast<uint32_t>(pick.size());
}

// Every decode kernel with every feature set against the reference, over lengths that are not a
// multiple of a tile, GQA ratios 1/2/4/8, head dims with SIMD tails, fp16/fp32/int8 rows.
void test_params_decode_sweep(lh_attention_impl impl) {
  Rng rng(2900 + impl);
  int cases = 0, bad = 0, bad_guard = 0;
  double worst = 0;
  char first[200] = "";
  uint32_t type_turn = 0;
  for (const Feature& f : kFeatures)
    for (const uint32_t t : {1u, 7u, 33u, 257u, 1000u})
      for (const uint32_t ratio : {1u, 2u, 4u, 8u})
        for (const uint32_t d : {8u, 64u, 13u}) {
          const uint32_t kvh = 1 + (type_turn % 2);
          const uint32_t type = type_turn++ % 3;  // fp16, fp32, int8 in turn
          XCase c(t, 1, kvh * ratio, kvh, d, type, f.scrambled, rng);
          const lh_attention_params p = params_for(f, c);
          // the query: the newest position among the stored rows (the current token's own row is visible)
          int32_t qpos = 0;
          for (uint32_t r = 0; r < t; ++r) qpos = std::max(qpos, c.pos[r]);
          lh_attention_args ao = c.args(c.out_a, p, qpos), ar = c.args(c.out_b, p, qpos);
          std::vector<int32_t> rows;
          if (f.listed) {
            const uint32_t n = make_list(c, t, rng, rows);
            ao.rows = ar.rows = rows.data();
            ao.rows_stride = ar.rows_stride = n;
            ao.tokens = ar.tokens = n;
          }
          const lh_status so = lh_attention_decode(&ao, impl), sr = lh_attention_decode_ref(&ar);
          const Cmp df = compare(c.out_a.data() + kGuard, c.out_b.data() + kGuard, c.n());
          ++cases;
          worst = std::max(worst, df.nmse);
          if (!XCase::guards_ok(c.out_a) || !XCase::guards_ok(c.out_b)) ++bad_guard;
          // every case here has a finite output (the query's own row is always visible)
          bool finite = true;
          for (size_t i = 0; i < c.n(); ++i) finite = finite && std::isfinite(c.out_b[kGuard + i]);
          if (!(so == LH_OK && sr == LH_OK && df.within && df.parity && df.nmse <= kNmseTol && finite) && bad++ == 0)
            std::snprintf(first, sizeof first, "%s: tokens %u heads %u kv %u dim %u type %u: nmse %.3g max %.3g st %d/%d", f.name, t,
                          kvh * ratio, kvh, d, type, df.nmse, df.max_abs, so, sr);
        }
  char name[200];
  std::snprintf(name, sizeof name, "attention params %s: scale/softcap/sinks/window (+ listed rows, scrambled positions) vs reference, %d cases",
                lh_attention_impl_name(impl), cases);
  check(bad == 0, name, "%d bad, first %s", bad, first);
  std::printf("      worst NMSE %.3e\n", worst);
  std::snprintf(name, sizeof name, "attention params %s: guard bytes untouched", lh_attention_impl_name(impl));
  check(bad_guard == 0, name, "%d cases wrote outside their output", bad_guard);
}

// Non-finite inputs with the features on: the kernels and the reference agree on which outputs are
// non-finite, finite ones agree; a NaN row outside the window changes nothing.
void test_params_nonfinite(lh_attention_impl impl) {
  Rng rng(2950 + impl);
  int cases = 0, bad = 0, outside_bad = 0;
  char first[200] = "";
  const float values[] = {NAN, INFINITY, -INFINITY};
  for (const Feature& f : kFeatures)
    for (const float value : values)
      for (int where = 0; where < 3; ++where)
        for (const uint32_t t : {1u, 33u, 100u}) {
          XCase c(t, 1, 2 * (where + 1), 2, where == 1 ? 64 : 8, LH_KV_F32, f.scrambled, rng);
          const lh_attention_params p = params_for(f, c);
          int32_t qpos = 0;
          for (uint32_t r = 0; r < t; ++r) qpos = std::max(qpos, c.pos[r]);
          const uint32_t g = static_cast<uint32_t>(rng.next() % c.kvh), r = static_cast<uint32_t>(rng.next() % t),
                         i = static_cast<uint32_t>(rng.next() % c.d);
          float* kf = reinterpret_cast<float*>(c.k.data());
          float* vf = reinterpret_cast<float*>(c.v.data());
          if (where == 0) c.q[(g * (c.heads / c.kvh)) * c.d + i] = value;
          if (where == 1) kf[g * c.stride + r * c.d + i] = value;
          if (where == 2) vf[g * c.stride + r * c.d + i] = value;
          lh_attention_args ao = c.args(c.out_a, p, qpos), ar = c.args(c.out_b, p, qpos);
          std::vector<int32_t> rows;
          if (f.listed) {
            const uint32_t n = make_list(c, t, rng, rows);
            ao.rows = ar.rows = rows.data();
            ao.rows_stride = ar.rows_stride = ao.tokens = ar.tokens = n;
          }
          lh_attention_decode(&ao, impl);
          lh_attention_decode_ref(&ar);
          const Cmp df = compare(c.out_a.data() + kGuard, c.out_b.data() + kGuard, c.n());
          ++cases;
          if (!(df.parity && df.within) && bad++ == 0)
            std::snprintf(first, sizeof first, "%s, %g in %s, tokens %u: parity %d max %.3g", f.name, value, where == 0 ? "q" : where == 1 ? "K" : "V",
                          t, df.parity, df.max_abs);
        }
  // a NaN in a row outside the window is never read
  for (const uint32_t t : {40u, 300u}) {
    XCase c(t, 1, 8, 2, 16, LH_KV_F16, false, rng);
    lh_attention_params p = lh_attention_params_default(c.d);
    p.window = 10;
    const uint16_t nan16 = lh_fp32_to_fp16(NAN);
    for (uint32_t g = 0; g < c.kvh; ++g) {
      std::memcpy(c.k.data() + 2 * (g * c.stride + 0 * c.d + 3), &nan16, 2);
      std::memcpy(c.v.data() + 2 * (g * c.stride + 5 * c.d + 1), &nan16, 2);
    }
    lh_attention_args ao = c.args(c.out_a, p, 100 + static_cast<int32_t>(t) - 1), ar = c.args(c.out_b, p, 100 + static_cast<int32_t>(t) - 1);
    lh_attention_decode(&ao, impl);
    lh_attention_decode_ref(&ar);
    for (size_t i = 0; i < c.n(); ++i) outside_bad += std::isfinite(c.out_a[kGuard + i]) && std::isfinite(c.out_b[kGuard + i]) ? 0 : 1;
  }
  char name[200];
  std::snprintf(name, sizeof name, "attention params %s: NaN/Inf parity with the features on, %d cases; NaN rows outside the window unread",
                lh_attention_impl_name(impl), cases);
  check(bad == 0 && outside_bad == 0, name, "%d bad (first %s), %d non-finite outputs from unread rows", bad, first, outside_bad);
}

// Causal prefill with the features (windowed prefill runs one decode per query, soft-capped prefill the
// grouped batches): against the prefill reference, and 1 vs 3 threads bit for bit.
void test_params_prefill(lh_attention_impl impl) {
  Rng rng(2970 + impl);
  int cases = 0, bad = 0, bad_threads = 0;
  char first[200] = "";
  for (const Feature& f : kFeatures) {
    if (f.listed || f.scrambled) continue;  // prefill: contiguous rows, the chunk's positions ascending
    for (const uint32_t tq : {1u, 3u, 17u, 40u})
      for (const uint32_t ratio : {1u, 4u, 8u})
        for (const uint32_t before : {0u, 9u, 70u}) {
          const uint32_t T = before + tq, kvh = 2, d = ratio == 8 ? 13 : 32;
          XCase c(T, tq, kvh * ratio, kvh, d, LH_KV_F16, false, rng);
          const lh_attention_params p = params_for(f, c);
          const int32_t qpos = 100 + static_cast<int32_t>(before);
          lh_attention_args ao = c.args(c.out_a, p, qpos), ar = c.args(c.out_b, p, qpos);
          const lh_status so = lh_attention_prefill(&ao, tq, impl), sr = lh_attention_prefill_ref(&ar, tq);
          const Cmp df = compare(c.out_a.data() + kGuard, c.out_b.data() + kGuard, c.n());
          std::vector<float> three = c.out_a;
          lh_attention_args at = c.args(three, p, qpos);
          const lh_status st = lh_attention_prefill_threads(&at, tq, 3, impl);
          for (size_t i = 0; i < three.size(); ++i) bad_threads += same_bits(three[i], c.out_a[i]) ? 0 : 1;
          ++cases;
          if (!(so == LH_OK && sr == LH_OK && st == LH_OK && df.within && df.parity && XCase::guards_ok(c.out_a)) && bad++ == 0)
            std::snprintf(first, sizeof first, "%s: T %u queries %u heads %u: max %.3g st %d/%d/%d", f.name, T, tq, kvh * ratio, df.max_abs, so, sr, st);
        }
  }
  char name[200];
  std::snprintf(name, sizeof name, "attention params %s: causal prefill with the features == reference, %d cases; 3 threads == 1 bit for bit",
                lh_attention_impl_name(impl), cases);
  check(bad == 0 && bad_threads == 0, name, "%d bad (first %s), %d elements differ across threads", bad, first, bad_threads);
}

// Where a feature changes nothing, the bits are today's: sinks of −1e30 (e^{sink − m} = 0), a window
// holding every position (ascending rows: the windowed tiles are the plain kernel's tiles), explicit
// default params; decode (plain and listed rows), prefill, and the KV-head thread split with all the
// features (positions and sinks follow each thread's heads).
void test_params_default_bits(lh_attention_impl impl) {
  Rng rng(2990 + impl);
  int bad_sink = 0, bad_window = 0, bad_default = 0, bad_split = 0;
  for (const uint32_t t : {1u, 17u, 300u})
    for (const uint32_t ratio : {1u, 4u})
      for (const uint32_t type : {0u, 2u}) {
        XCase c(t, 1, 2 * ratio, 2, 64, type, false, rng);
        const lh_attention_params none = lh_attention_params_default(c.d);
        const int32_t qpos = 100 + static_cast<int32_t>(t) - 1;
        lh_attention_args base{};  // today's initialisation: the new fields zero
        {
          lh_attention_args a = c.args(c.out_b, none, qpos);
          base = a;
          base.positions = nullptr;
          base.query_position = 0;
          lh_attention_decode(&base, impl);
        }
        std::vector<float> quiet(c.heads, -1e30f);
        lh_attention_params p = none;
        p.sinks = quiet.data();
        lh_attention_args a = c.args(c.out_a, p, qpos);
        lh_attention_decode(&a, impl);
        for (size_t i = 0; i < c.out_a.size(); ++i) bad_sink += same_bits(c.out_a[i], c.out_b[i]) ? 0 : 1;
        p = none;
        p.window = t + 1000;
        a = c.args(c.out_a, p, qpos);
        lh_attention_decode(&a, impl);
        for (size_t i = 0; i < c.out_a.size(); ++i) bad_window += same_bits(c.out_a[i], c.out_b[i]) ? 0 : 1;
        a = c.args(c.out_a, none, qpos);
        lh_attention_decode(&a, impl);
        for (size_t i = 0; i < c.out_a.size(); ++i) bad_default += same_bits(c.out_a[i], c.out_b[i]) ? 0 : 1;
      }
  // prefill: window over everything == no window (per-query decode == the grouped batches' bits)
  for (const uint32_t tq : {5u, 33u}) {
    XCase c(tq + 20, tq, 8, 2, 32, LH_KV_F16, false, rng);
    const lh_attention_params none = lh_attention_params_default(c.d);
    lh_attention_args b = c.args(c.out_b, none, 120);
    lh_attention_prefill_threads(&b, tq, 2, impl);
    lh_attention_params p = none;
    p.window = 100000;
    lh_attention_args a = c.args(c.out_a, p, 120);
    lh_attention_prefill_threads(&a, tq, 2, impl);
    for (size_t i = 0; i < c.out_a.size(); ++i) bad_window += same_bits(c.out_a[i], c.out_b[i]) ? 0 : 1;
  }
  // the KV-head split with every feature: 1 thread == 3 threads
  {
    XCase c(6000, 1, 32, 4, 64, LH_KV_F16, true, rng);
    lh_attention_params p = lh_attention_params_default(c.d);
    p.window = 4000;
    p.softcap = 4.0f;
    p.sinks = c.sinks.data();
    lh_attention_args a = c.args(c.out_a, p, 100 + 5990), b = c.args(c.out_b, p, 100 + 5990);
    const bool split = lh_attention_decode_threads_used(&b, 3) > 1;
    lh_attention_decode(&a, impl);
    lh_attention_decode_threads(&b, 3, impl);
    for (size_t i = 0; i < c.out_a.size(); ++i) bad_split += same_bits(c.out_a[i], c.out_b[i]) ? 0 : 1;
    if (!split) ++bad_split;
  }
  char name[200];
  std::snprintf(name, sizeof name,
                "attention params %s: today's bits where nothing changes (sinks -1e30, window over everything, explicit defaults); thread split with all features",
                lh_attention_impl_name(impl));
  check(bad_sink == 0 && bad_window == 0 && bad_default == 0 && bad_split == 0, name, "sink %d window %d default %d split %d", bad_sink, bad_window,
        bad_default, bad_split);
}

void test_params_bad_args() {
  Rng rng(3001);
  XCase c(10, 1, 4, 2, 8, LH_KV_F16, false, rng);
  lh_attention_params p = lh_attention_params_default(c.d);
  p.window = 3;
  lh_attention_args a = c.args(c.out_a, p, 109);
  a.positions = nullptr;
  bool ok = lh_attention_decode(&a) == LH_BAD_ARGUMENT && lh_attention_decode_ref(&a) == LH_BAD_ARGUMENT;
  p = lh_attention_params_default(c.d);
  p.softcap = -1.0f;
  a = c.args(c.out_a, p, 109);
  ok = ok && lh_attention_decode(&a) == LH_BAD_ARGUMENT;
  p.softcap = NAN;
  a = c.args(c.out_a, p, 109);
  ok = ok && lh_attention_decode(&a) == LH_BAD_ARGUMENT;
  bool untouched = true;
  for (size_t i = 0; i < c.out_a.size(); ++i) untouched = untouched && same_bits(c.out_a[i], kCanary);
  // the block's own check
  std::vector<float> sinks(4, 0.0f);
  auto refused = [&](lh_attention_params q) { return lh_attention_params_check(&q, 4) == LH_BAD_ARGUMENT; };
  lh_attention_params d = lh_attention_params_default(8);
  bool block = lh_attention_params_check(&d, 4) == LH_OK && lh_attention_params_check(nullptr, 4) == LH_BAD_ARGUMENT;
  for (const float s : {0.0f, -1.0f, NAN, INFINITY}) {
    lh_attention_params q = d;
    q.scale = s;
    block = block && refused(q);
  }
  for (const float s : {-0.5f, NAN, INFINITY}) {
    lh_attention_params q = d;
    q.softcap = s;
    block = block && refused(q);
  }
  sinks[2] = NAN;
  lh_attention_params q = d;
  q.sinks = sinks.data();
  block = block && refused(q);
  check(ok && untouched && block, "attention params: a window without positions, a bad softcap, scale or sink are LH_BAD_ARGUMENT (nothing written)");
}

// ---- pool level ----

struct PoolFixture {
  lh_kv_pool pool{};
  uint32_t L, H, D;
  PoolFixture(uint32_t layers, uint32_t kvh, uint32_t d, uint32_t kv_type, uint32_t partial, uint64_t budget) : L(layers), H(kvh), D(d) {
    lh_kv_pool_config cfg{};
    cfg.budget_bytes = budget;
    cfg.layers = layers;
    cfg.kv_heads = kvh;
    cfg.head_dim = d;
    cfg.kv_type = kv_type;
    cfg.partial_dim = partial;
    lh_kv_pool_init(&pool, &cfg);
  }
  ~PoolFixture() { lh_kv_pool_free(&pool); }
  void append(uint32_t layer, Rng& rng, int32_t pos) {
    std::vector<float> k(H * D), v(H * D);
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    lh_kv_pool_append(&pool, layer, k.data(), v.data(), pos, nullptr);
  }
};

void test_params_pool_level() {
  const uint32_t H = 4, D = 16, T = 90, heads = 16;
  for (const uint32_t kv_type : {static_cast<uint32_t>(LH_KV_F16), static_cast<uint32_t>(LH_KV_I8)}) {
    Rng rng(3100 + kv_type);
    PoolFixture f(2, H, D, kv_type, 0, 1 << 20);
    for (uint32_t t = 0; t < T; ++t) f.append(1, rng, static_cast<int32_t>(3 * t));  // positions 0, 3, 6, ...: the window counts positions
    std::vector<float> q(heads * D), o(heads * D), r(heads * D), sinks(heads);
    for (auto& x : q) x = rng.normal();
    for (auto& x : sinks) x = rng.normal();
    // lists: a random subset per KV head, the current token (slot T-1) always in
    std::vector<int32_t> sl;
    std::vector<uint32_t> off{0};
    for (uint32_t g = 0; g < H; ++g) {
      for (uint32_t t = 0; t < T; ++t)
        if (t == T - 1 || rng.uniform() < 0.5f) sl.push_back(static_cast<int32_t>(t));
      off.push_back(static_cast<uint32_t>(sl.size()));
    }
    lh_attention_params p = lh_attention_params_default(D);
    p.scale = 0.3f;
    p.window = 40;  // positions > 267 - 40: the last 14 tokens
    p.sinks = sinks.data();
    p.softcap = 2.5f;
    bool ok = lh_attention_slots(&f.pool, 1, q.data(), heads, sl.data(), off.data(), &p, o.data(), 1) == LH_OK;
    // the reference: per KV head, decode_ref over its list with the pool's positions
    for (uint32_t g = 0; g < H; ++g) {
      lh_attention_args a{};
      const size_t eb = f.pool.elem_bytes, stride = lh_kv_pool_head_stride(&f.pool, 1);
      a.q = q.data() + g * 4 * D;
      a.k = static_cast<const uint8_t*>(lh_kv_pool_k_rows(&f.pool, 1)) + g * stride * eb;
      a.v = static_cast<const uint8_t*>(lh_kv_pool_v_rows(&f.pool, 1)) + g * stride * eb;
      a.out = r.data() + g * 4 * D;
      a.head_stride = stride;
      a.tokens = off[g + 1] - off[g];
      a.heads = 4;
      a.kv_heads = 1;
      a.head_dim = D;
      a.kv_type = kv_type;
      a.rows = sl.data() + off[g];
      a.rows_stride = a.tokens;
      if (kv_type == LH_KV_I8) {
        a.k_scale = lh_kv_pool_k_scales(&f.pool, 1) + g * lh_kv_pool_layer_capacity(&f.pool, 1);
        a.v_scale = lh_kv_pool_v_scales(&f.pool, 1) + g * lh_kv_pool_layer_capacity(&f.pool, 1);
      }
      lh_attention_args_set_params(&a, &p);
      a.sinks = sinks.data() + g * 4;
      a.positions = lh_kv_pool_positions(&f.pool, 1) + g * lh_kv_pool_layer_capacity(&f.pool, 1);
      a.query_position = 3 * (T - 1);
      ok = ok && lh_attention_decode_ref(&a) == LH_OK;
    }
    const Cmp df = compare(o.data(), r.data(), o.size());
    // threads: the same bits
    std::vector<float> o3(o.size());
    ok = ok && lh_attention_slots(&f.pool, 1, q.data(), heads, sl.data(), off.data(), &p, o3.data(), 3) == LH_OK;
    int bad_threads = 0;
    for (size_t i = 0; i < o.size(); ++i) bad_threads += same_bits(o[i], o3[i]) ? 0 : 1;
    const std::string type = kv_type == LH_KV_I8 ? " (int8)" : " (fp16)";
    check(ok && df.within && df.parity && bad_threads == 0, ("slots with scale/window/sinks/softcap == reference over the lists; 3 threads same bits" + type).c_str(),
          "max %.3g, %d differ across threads", df.max_abs, bad_threads);

    // explicit defaults == today's scale-only calls, bit for bit: slots, scores, h2o, snapkv
    const lh_attention_params def = lh_attention_params_default(D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<float> a1(o.size()), a2(o.size());
    int bad_def = 0;
    lh_attention_slots(&f.pool, 1, q.data(), heads, sl.data(), off.data(), scale, a1.data());
    lh_attention_slots(&f.pool, 1, q.data(), heads, sl.data(), off.data(), &def, a2.data());
    for (size_t i = 0; i < a1.size(); ++i) bad_def += same_bits(a1[i], a2[i]) ? 0 : 1;
    std::vector<float> s1(heads * T), s2(heads * T);
    lh_attention_scores(&f.pool, 1, q.data(), heads, T, scale, s1.data());
    lh_attention_scores(&f.pool, 1, q.data(), heads, T, &def, s2.data());
    for (size_t i = 0; i < s1.size(); ++i) bad_def += same_bits(s1[i], s2[i]) ? 0 : 1;
    const uint32_t C = 128;
    std::vector<float> acc1(H * C, 0.5f), acc2(H * C, 0.5f), hs(lh_h2o_scratch_floats(T) * 4);
    lh_h2o_accumulate(&f.pool, 1, q.data(), heads, acc1.data(), C, T, sl.data(), off.data(), scale, hs.data(), hs.size());
    lh_h2o_accumulate(&f.pool, 1, q.data(), heads, acc2.data(), C, T, sl.data(), off.data(), &def, hs.data(), hs.size(), 2);
    for (size_t i = 0; i < acc1.size(); ++i) bad_def += same_bits(acc1[i], acc2[i]) ? 0 : 1;
    std::vector<float> obs(4 * heads * D);
    for (auto& x : obs) x = rng.normal();
    std::vector<int32_t> k1(H * 40), k2(H * 40);
    std::vector<uint32_t> ko1(H + 1), ko2(H + 1);
    std::vector<uint8_t> scratch(lh_select_scratch_bytes(T) * 4);
    lh_snapkv_compress(&f.pool, 1, obs.data(), heads, T, 4, 40, 5, scale, k1.data(), ko1.data(), scratch.data(), scratch.size());
    lh_snapkv_compress(&f.pool, 1, obs.data(), heads, T, 4, 40, 5, &def, k2.data(), ko2.data(), scratch.data(), scratch.size());
    bad_def += k1 == k2 && ko1 == ko2 ? 0 : 1;
    check(bad_def == 0, ("slots, scores, h2o, snapkv: the explicit default block == today's scale-only call, bit for bit" + type).c_str(), "%d differ", bad_def);

    // scores: scale and soft-cap; h2o: soft-capped logits and the sink in the normaliser, against a plain softmax
    lh_attention_params cap = def;
    cap.scale = 0.4f;
    cap.softcap = 1.5f;
    cap.sinks = sinks.data();
    lh_attention_scores(&f.pool, 1, q.data(), heads, T, &cap, s2.data());
    double worst_s = 0, worst_acc = 0;
    std::vector<double> want(H * C, 0.5);
    for (uint32_t h = 0; h < heads; ++h) {
      const uint32_t g = h / 4;
      std::vector<double> s(T);
      for (uint32_t t = 0; t < T; ++t) {
        float row[D];
        lh_kv_pool_read(&f.pool, LH_KV_KEY, 1, g, t, row, nullptr);
        double dot = 0;
        for (uint32_t i = 0; i < D; ++i) dot += static_cast<double>(q[h * D + i]) * row[i];
        s[t] = 1.5 * std::tanh(0.4 * dot / 1.5);
        worst_s = std::max(worst_s, std::fabs(s[t] - s2[h * T + t]));
      }
      double mx = -INFINITY, z = 0;
      for (uint32_t i = off[g]; i < off[g + 1]; ++i) mx = std::max(mx, s[sl[i]]);
      for (uint32_t i = off[g]; i < off[g + 1]; ++i) z += std::exp(s[sl[i]] - mx);
      z += std::exp(sinks[h] - mx);
      for (uint32_t i = off[g]; i < off[g + 1]; ++i) want[g * C + sl[i]] += std::exp(s[sl[i]] - mx) / z;
    }
    std::fill(acc1.begin(), acc1.end(), 0.5f);
    const bool h2o_ok = lh_h2o_accumulate(&f.pool, 1, q.data(), heads, acc1.data(), C, T, sl.data(), off.data(), &cap, hs.data(), hs.size()) == LH_OK;
    for (size_t i = 0; i < acc1.size(); ++i) worst_acc = std::max(worst_acc, std::fabs(acc1[i] - want[i]));
    check(h2o_ok && worst_s < 1e-4 && worst_acc < 1e-5, ("scores soft-capped; h2o mass with soft-cap and sinks == plain softmax" + type).c_str(),
          "scores %.3g acc %.3g", worst_s, worst_acc);
    lh_attention_params bad = def;
    bad.scale = NAN;
    check(lh_attention_slots(&f.pool, 1, q.data(), heads, sl.data(), off.data(), &bad, o.data()) == LH_BAD_ARGUMENT &&
              lh_attention_scores(&f.pool, 1, q.data(), heads, T, &bad, s2.data()) == LH_BAD_ARGUMENT &&
              lh_h2o_accumulate(&f.pool, 1, q.data(), heads, acc1.data(), C, T, sl.data(), off.data(), &bad, hs.data(), hs.size()) == LH_BAD_ARGUMENT &&
              lh_snapkv_compress(&f.pool, 1, obs.data(), heads, T, 4, 40, 5, &bad, k1.data(), ko1.data(), scratch.data(), scratch.size()) == LH_BAD_ARGUMENT,
          ("slots, scores, h2o, snapkv refuse a bad block" + type).c_str());
  }
}

// The speculator with per-layer blocks: attend == its scalar reference over the same rows with the
// layer's scale/window/sinks/softcap; explicit default blocks == no blocks, bit for bit; recall in (0, 1].
void test_params_speculator() {
  const uint32_t L = 3, H = 2, D = 32, P = 8, ratio = 4, heads = H * ratio;
  int bad_ref = 0, bad_default = 0;
  bool recall_ok = true, created = true;
  for (const uint32_t kv_type : {static_cast<uint32_t>(LH_KV_F16), static_cast<uint32_t>(LH_KV_I8)}) {
    Rng rng(3200 + kv_type);
    const uint64_t per = static_cast<uint64_t>(L) * H * (2ull * lh_kv_row_bytes(kv_type, D) + 4 + 2ull * P);
    PoolFixture f(L, H, D, kv_type, P, per * 400 + 4096 + static_cast<uint64_t>(L) * H * D * P * 4);
    std::vector<float> proj(static_cast<size_t>(L) * H * D * P);
    for (auto& x : proj) x = rng.normal() * 0.5f;
    for (uint32_t l = 1; l < L; ++l) lh_kv_pool_set_projection(&f.pool, l, proj.data() + static_cast<size_t>(l) * H * D * P);
    for (int t = 0; t < 200; ++t)
      for (uint32_t l = 0; l < L; ++l) f.append(l, rng, t);
    std::vector<float> sinks(heads);
    for (auto& x : sinks) x = rng.normal();
    std::vector<lh_attention_params> blocks(L, lh_attention_params_default(D)), defaults(L, lh_attention_params_default(D));
    blocks[1].softcap = 3.0f;
    blocks[1].sinks = sinks.data();
    blocks[2].scale = 0.25f;
    blocks[2].window = 60;
    blocks[2].sinks = sinks.data();
    lh_speculator_config with{heads, {3.0, 0.3, 1}, 1.0 / std::sqrt(static_cast<double>(D))};
    with.layer_attention = blocks.data();
    lh_speculator_config plain{heads, {3.0, 0.3, 1}, 1.0 / std::sqrt(static_cast<double>(D))};
    lh_speculator_config explicit_default = plain;
    explicit_default.layer_attention = defaults.data();
    lh_speculator *sw = nullptr, *sp = nullptr, *sd = nullptr;
    created = created && lh_speculator_create(&sw, &f.pool, &with) == LH_OK && lh_speculator_create(&sp, &f.pool, &plain) == LH_OK &&
              lh_speculator_create(&sd, &f.pool, &explicit_default) == LH_OK;
    sinks.assign(heads, 99.0f);  // copied at creation: later changes to the caller's array do nothing
    std::vector<float> q(heads * D), o1(heads * D), o2(heads * D), o3(heads * D);
    for (int step = 0; step < 4 && created; ++step)
      for (uint32_t l = 1; l < L; ++l) {
        for (auto& x : q) x = rng.normal();
        lh_speculator_begin(sw, l, q.data());
        lh_speculator_begin(sp, l, q.data());
        lh_speculator_begin(sd, l, q.data());
        f.append(l, rng, 200 + step);
        lh_speculator_attend(sw, l, q.data(), o1.data(), 2);
        lh_speculator_attend_ref(sw, l, q.data(), o2.data());
        const Cmp df = compare(o1.data(), o2.data(), o1.size());
        bad_ref += df.within && df.parity ? 0 : 1;
        lh_speculator_attend(sp, l, q.data(), o1.data());
        lh_speculator_attend(sd, l, q.data(), o3.data());
        for (size_t i = 0; i < o1.size(); ++i) bad_default += same_bits(o1[i], o3[i]) ? 0 : 1;
        double rc = 0;
        recall_ok = recall_ok && lh_speculator_recall(sw, l, q.data(), &rc) == LH_OK && rc > 0 && rc <= 1.0 + 1e-9;
      }
    lh_speculator_destroy(sw);
    lh_speculator_destroy(sp);
    lh_speculator_destroy(sd);
  }
  check(created && bad_ref == 0 && recall_ok, "speculator with per-layer blocks (softcap+sinks; scale+window+sinks): attend == scalar reference; recall in (0, 1]",
        "%d steps off, recall %d", bad_ref, recall_ok);
  check(bad_default == 0, "speculator: explicit default blocks == no blocks, bit for bit", "%d differ", bad_default);
  // a bad block is refused at creation
  Rng rng(3300);
  PoolFixture f(2, 2, 8, LH_KV_F16, 4, 1 << 20);
  std::vector<lh_attention_params> blocks(2, lh_attention_params_default(8));
  blocks[1].softcap = -2.0f;
  lh_speculator_config c{4, {3.0, 0.3, 1}, 0.3};
  c.layer_attention = blocks.data();
  lh_speculator* sp = nullptr;
  check(lh_speculator_create(&sp, &f.pool, &c) == LH_BAD_ARGUMENT && sp == nullptr, "speculator: a bad per-layer block is LH_BAD_ARGUMENT");
}

}  // namespace

void test_attention_params() {
  for (const lh_attention_impl impl : kImpls)
    if (lh_attention_available(impl)) {
      test_params_decode_sweep(impl);
      test_params_nonfinite(impl);
      test_params_prefill(impl);
      test_params_default_bits(impl);
    }
  test_params_bad_args();
  test_params_pool_level();
  test_params_speculator();
}
