// Fuzz target: decode and causal prefill attention (src/attention.h), every implementation this
// CPU runs (portable, AVX2+FMA+F16C) against the scalar reference (src/reference/attention_ref.cc).
//
// Input: a shape (tokens, KV heads, GQA group, head dim, row padding, fp16/fp32, queries, scale)
// and the q/K/V data (palette values with NaN/±inf in some inputs, or continuous ones).
// Invariants:
//   - every implementation agrees with the reference: the same outputs non-finite, the finite ones
//     within the bound of attention_check.h;
//   - prefill's last query is bit for bit the decode of that query over all tokens;
//   - nothing is written outside `out` (guard elements) and q/K/V are never written;
//   - arguments the header calls bad (GQA ratio, stride, queries, out overlapping q or the rows)
//     return LH_BAD_ARGUMENT and leave `out` untouched;
//   - with listed rows (args.rows) every kernel agrees with the reference over the same rows, and
//     rows outside the head's stride, a short rows_stride or a prefill of several queries are refused.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../src/attention.h"
#include "../src/fp16.h"
#include "attention_check.h"
#include "fuzz_input.h"

namespace {

struct Rows {
  uint32_t type;
  std::vector<uint16_t> h;  // fp16 rows
  std::vector<float> f;     // fp32 rows
  const void* ptr() const { return type == LH_KV_F16 ? static_cast<const void*>(h.data()) : f.data(); }
  float at(size_t i) const { return type == LH_KV_F16 ? lh_fp16_to_fp32(h[i]) : f[i]; }
  size_t bytes() const { return type == LH_KV_F16 ? h.size() * 2 : f.size() * 4; }
};

Rows make_rows(FuzzInput& in, uint32_t type, size_t n, bool nonfinite, bool continuous) {
  Rows r{type, {}, {}};
  if (type == LH_KV_F16) r.h.resize(n);
  else r.f.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = continuous ? in.normal() : in.value(nonfinite);
    if (type == LH_KV_F16) r.h[i] = lh_fp32_to_fp16(x);
    else r.f[i] = x;
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  static const uint32_t kDims[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 63, 64, 65, 96, 128};
  static const uint32_t kGroups[] = {1, 2, 3, 4, 8};
  const uint32_t shape = in.byte();
  uint32_t tokens = (shape & 3) == 0 ? in.range(1, 4) : (shape & 3) == 1 ? in.range(1, 40) : (shape & 3) == 2 ? in.range(30, 100) : in.range(1, 700);
  const uint32_t kvh = in.range(1, 4), group = kGroups[in.range(0, 4)], heads = kvh * group;
  const uint32_t d = kDims[in.range(0, 20)];
  const uint32_t type = in.range(0, 1);
  const uint32_t pad = in.range(0, 3) == 0 ? in.range(0, 2 * d + 7) : 0;  // any stride >= tokens * d, not only whole rows
  const size_t stride = static_cast<size_t>(tokens) * d + pad;
  const uint32_t queries = in.chance(2) ? 1 : in.range(1, tokens);
  const uint32_t sc = in.range(0, 7);
  const float scale = sc < 4 ? 1.0f / std::sqrt(static_cast<float>(d)) : sc == 4 ? 1.0f : sc == 5 ? 0.0f : sc == 6 ? -0.5f : 0.01f;
  const bool nonfinite = in.chance(3);
  const bool continuous = !nonfinite && in.chance(2);
  // keep the work per input bounded: long contexts only with small heads
  while (static_cast<uint64_t>(tokens) * heads * d * queries > (1u << 15) && tokens > 1) {
    tokens /= 2;
  }
  const size_t stride2 = static_cast<size_t>(tokens) * d + pad;
  const uint32_t q_count = queries > tokens ? tokens : queries;
  (void)stride;

  const size_t width = static_cast<size_t>(heads) * d;
  std::vector<float> q(width * q_count);
  for (auto& x : q) x = continuous ? in.normal() : in.value(nonfinite);
  const Rows k = make_rows(in, type, kvh * stride2, nonfinite, continuous);
  const Rows v = make_rows(in, type, kvh * stride2, nonfinite, continuous);
  const std::vector<float> q_before = q;

  lh_attention_args a{};
  a.q = q.data();
  a.k = k.ptr();
  a.v = v.ptr();
  a.head_stride = stride2;
  a.tokens = tokens;
  a.heads = heads;
  a.kv_heads = kvh;
  a.head_dim = d;
  a.scale = scale;
  a.kv_type = type;

  // the reference, decode of the last query and prefill of all of them
  Guarded<float> ref_dec(width), ref_pre(width * q_count);
  lh_attention_args last = a;
  last.q = q.data() + (q_count - 1) * width;
  last.out = ref_dec.data();
  FUZZ_CHECK(lh_attention_decode_ref(&last) == LH_OK, "reference decode refused valid arguments");
  a.out = ref_pre.data();
  FUZZ_CHECK(lh_attention_prefill_ref(&a, q_count) == LH_OK, "reference prefill refused valid arguments");
  FUZZ_CHECK(ref_dec.guards_intact() && ref_pre.guards_intact(), "reference wrote outside out");

  // per query and head: the bound, over the rows that query sees
  std::vector<HeadBound> bounds(static_cast<size_t>(q_count) * heads);
  for (uint32_t i = 0; i < q_count; ++i)
    for (uint32_t h = 0; h < heads; ++h) {
      const size_t g0 = static_cast<size_t>(h / group) * stride2;
      const uint32_t seen = tokens - q_count + i + 1;
      bounds[static_cast<size_t>(i) * heads + h] =
          attention_bound(q.data() + i * width + h * d, d, seen, scale, [&](uint32_t t, uint32_t j) { return k.at(g0 + t * d + j); },
                          [&](uint32_t t, uint32_t j) { return v.at(g0 + t * d + j); });
    }

  for (lh_attention_impl impl : {LH_ATTN_PORTABLE, LH_ATTN_AVX2, LH_ATTN_AVX512, LH_ATTN_AVX2_PER_HEAD, LH_ATTN_AUTO}) {
    if (!lh_attention_available(impl)) {
      Guarded<float> o(width);
      lh_attention_args x = last;
      x.out = o.data();
      FUZZ_CHECK(lh_attention_decode(&x, impl) == LH_BAD_ARGUMENT && o.untouched(), "an unavailable kernel ran");
      continue;
    }
    const char* name = lh_attention_impl_name(impl);
    Guarded<float> dec(width), pre(width * q_count);
    lh_attention_args x = last;
    x.out = dec.data();
    FUZZ_CHECK(lh_attention_decode(&x, impl) == LH_OK, "%s decode refused valid arguments", name);
    lh_attention_args y = a;
    y.out = pre.data();
    FUZZ_CHECK(lh_attention_prefill(&y, q_count, impl) == LH_OK, "%s prefill refused valid arguments", name);
    FUZZ_CHECK(dec.guards_intact() && pre.guards_intact(), "%s wrote outside out (tokens %u heads %u kv %u d %u)", name, tokens, heads,
               kvh, d);
    for (uint32_t h = 0; h < heads; ++h)
      expect_close(dec.data() + h * d, ref_dec.data() + h * d, d, bounds[static_cast<size_t>(q_count - 1) * heads + h], name, h);
    for (uint32_t i = 0; i < q_count; ++i)
      for (uint32_t h = 0; h < heads; ++h)
        expect_close(pre.data() + i * width + h * d, ref_pre.data() + i * width + h * d, d, bounds[static_cast<size_t>(i) * heads + h],
                     name, h);
    const float* pl = pre.data() + (q_count - 1) * width;
    for (size_t e = 0; e < width; ++e)
      FUZZ_CHECK(lh_f32_bits(pl[e]) == lh_f32_bits(dec.data()[e]) || (std::isnan(pl[e]) && std::isnan(dec.data()[e])),
                 "%s: prefill's last query differs from decode at %zu: %a vs %a", name, e, static_cast<double>(pl[e]),
                 static_cast<double>(dec.data()[e]));
  }
  FUZZ_CHECK(std::memcmp(q.data(), q_before.data(), q.size() * sizeof(float)) == 0, "a kernel wrote into q");

  // listed rows (args.rows: the speculator's attention over selected pool rows in place): each
  // head reads rows[g * rows_stride + t] of its block, in that order; rows inside head_stride only
  {
    const size_t row_limit = stride2 / d;  // whole rows inside one head's stride
    const uint32_t listed = in.range(1, static_cast<uint32_t>(std::min<size_t>(row_limit + 2, 200)));
    const size_t rows_stride = listed + in.range(0, 3);
    std::vector<int32_t> rows(kvh * rows_stride, 0);
    for (uint32_t g = 0; g < kvh; ++g)
      for (uint32_t t = 0; t < listed; ++t) rows[g * rows_stride + t] = static_cast<int32_t>(in.range(0, static_cast<uint32_t>(row_limit - 1)));
    const uint32_t bad = in.range(0, 7);  // 0: a row past the stride, 1: negative, 2: rows_stride < tokens, 3: prefill of 2
    if (bad == 0) rows[in.range(0, kvh - 1) * rows_stride + in.range(0, listed - 1)] = static_cast<int32_t>(row_limit + in.range(0, 3));
    if (bad == 1) rows[in.range(0, kvh - 1) * rows_stride + in.range(0, listed - 1)] = -1;
    lh_attention_args r = last;
    r.tokens = listed;
    r.rows = rows.data();
    r.rows_stride = bad == 2 ? listed - 1 : rows_stride;
    Guarded<float> ref(width);
    r.out = ref.data();
    const lh_status rs = lh_attention_decode_ref(&r);
    if (bad <= 2 || (bad == 3 && q_count < 2)) {
      if (bad <= 2) {
        FUZZ_CHECK(rs == LH_BAD_ARGUMENT && ref.untouched(), "listed rows case %u accepted by the reference: %d", bad, rs);
        for (lh_attention_impl impl : {LH_ATTN_PORTABLE, LH_ATTN_AVX2, LH_ATTN_AVX512, LH_ATTN_AVX2_PER_HEAD}) {
          if (!lh_attention_available(impl)) continue;
          Guarded<float> o(width);
          r.out = o.data();
          FUZZ_CHECK(lh_attention_decode(&r, impl) == LH_BAD_ARGUMENT && o.untouched() && o.guards_intact(),
                     "listed rows case %u accepted by %s", bad, lh_attention_impl_name(impl));
        }
      }
    } else if (bad == 3) {
      Guarded<float> o(width * q_count);
      lh_attention_args y = a;
      y.rows = rows.data();
      y.rows_stride = rows_stride;
      y.out = o.data();
      FUZZ_CHECK(lh_attention_prefill(&y, q_count) == LH_BAD_ARGUMENT && o.untouched(), "listed rows with %u queries accepted", q_count);
    } else {
      FUZZ_CHECK(rs == LH_OK && ref.guards_intact(), "reference over listed rows: %d", rs);
      for (lh_attention_impl impl : {LH_ATTN_PORTABLE, LH_ATTN_AVX2, LH_ATTN_AVX512, LH_ATTN_AVX2_PER_HEAD}) {
        if (!lh_attention_available(impl)) continue;
        Guarded<float> o(width);
        r.out = o.data();
        FUZZ_CHECK(lh_attention_decode(&r, impl) == LH_OK && o.guards_intact(), "%s over listed rows", lh_attention_impl_name(impl));
        for (uint32_t h = 0; h < heads; ++h) {
          const uint32_t g = h / group;
          const size_t g0 = static_cast<size_t>(g) * stride2;
          const int32_t* rg = rows.data() + g * rows_stride;
          const HeadBound b = attention_bound(last.q + h * d, d, listed, scale, [&](uint32_t t, uint32_t j) { return k.at(g0 + rg[t] * d + j); },
                                              [&](uint32_t t, uint32_t j) { return v.at(g0 + rg[t] * d + j); });
          expect_close(o.data() + h * d, ref.data() + h * d, d, b, "listed rows", h);
        }
      }
    }
  }

  // arguments the header calls bad: refused, nothing written
  {
    Guarded<float> o(width * (q_count + 1));
    lh_attention_args b = last;
    b.out = o.data();
    const uint32_t which = in.range(0, 6);
    uint32_t bq = 1;
    if (which == 0) b.heads = heads + (kvh > 1 ? 1 : 0) + (kvh == 1 ? LH_MAX_HEADS : 0);  // not a multiple / too many
    if (which == 1) b.head_stride = static_cast<size_t>(tokens) * d - 1;
    if (which == 2) bq = tokens + 1;
    if (which == 3) b.out = const_cast<float*>(b.q);  // out == q (two views of one ArrayBuffer in JS)
    if (which == 4) b.kv_type = 7;
    if (which == 5) b.tokens = 0;
    if (which == 6) b.head_dim = LH_MAX_HEAD_DIM + 1;
    const lh_status s3 = lh_attention_prefill(&b, bq), s4 = lh_attention_prefill_ref(&b, bq);
    FUZZ_CHECK(s3 == LH_BAD_ARGUMENT && s4 == LH_BAD_ARGUMENT, "bad argument case %u accepted by prefill: %d %d", which, s3, s4);
    FUZZ_CHECK(o.untouched() && o.guards_intact(), "bad argument case %u: prefill wrote into out", which);
    if (which != 2) {  // case 2 (queries > tokens) concerns prefill only
      const lh_status s1 = lh_attention_decode(&b), s2 = lh_attention_decode_ref(&b);
      FUZZ_CHECK(s1 == LH_BAD_ARGUMENT && s2 == LH_BAD_ARGUMENT, "bad argument case %u accepted by decode: %d %d", which, s1, s2);
    }
    FUZZ_CHECK(o.untouched() && o.guards_intact(), "bad argument case %u wrote into out", which);
    FUZZ_CHECK(std::memcmp(q.data(), q_before.data(), q.size() * sizeof(float)) == 0, "bad argument case %u wrote into q", which);
  }
  return 0;
}
