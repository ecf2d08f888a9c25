// Rings of the KV pool (kv_pool.h "Rings"): a sliding-window layer keeps only its newest tokens and
// each append past its capacity overwrites the oldest. Held against a plain layer that keeps every
// token: the same rows by position, the same windowed attention bit for bit (decode, slot lists and
// prefill chunks that straddle the wrap, every kernel and the scalar reference), truncation, the
// newest rows exported / imported (a ring's checkpoint), and the configurations a ring refuses.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/attention.h"
#include "../src/kv_pool.h"
#include "../src/sparse_attention.h"
#include "check.h"
#include "test_rng.h"

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

constexpr uint32_t H = 2, D = 24, HEADS = 4;  // KV heads, head_dim, query heads (GQA 2)

// The K and V rows of the token at position p: fixed by p, so two pools fed the same positions hold
// the same values whatever their slots.
void token_rows(uint32_t p, std::vector<float>& k, std::vector<float>& v) {
  Rng r(1000 + p);
  k.resize(H * D);
  v.resize(H * D);
  for (auto& x : k) x = r.normal();
  for (auto& x : v) x = r.normal();
}

// layer 0: plain with `full` slots; layer 1: a ring of `ring` slots
lh_kv_pool make_pool(uint32_t kv_type, uint32_t partial, uint32_t full, uint32_t ring, bool as_ring) {
  lh_kv_pool_config c{};
  c.budget_bytes = 64u << 20;
  c.layers = 2;
  c.kv_heads = H;
  c.head_dim = D;
  c.kv_type = kv_type;
  c.partial_dim = partial;
  static uint32_t caps[2], rings[2];
  caps[0] = full;
  caps[1] = as_ring ? ring : full;
  rings[0] = 0;
  rings[1] = as_ring ? 1 : 0;
  c.layer_capacity = caps;
  c.layer_ring = rings;
  lh_kv_pool p{};
  if (lh_kv_pool_init(&p, &c) != LH_OK) std::fprintf(stderr, "ring test: pool init failed\n");
  return p;
}

// Appends positions [from, to) to layer 1 in batches of `chunk` (1: one append per token).
void feed(lh_kv_pool* p, uint32_t from, uint32_t to, uint32_t chunk) {
  std::vector<float> k, v, kb, vb;
  for (uint32_t t0 = from; t0 < to; t0 += chunk) {
    const uint32_t n = std::min(chunk, to - t0);
    kb.clear();
    vb.clear();
    for (uint32_t t = t0; t < t0 + n; ++t) {
      token_rows(t, k, v);
      kb.insert(kb.end(), k.begin(), k.end());
      vb.insert(vb.end(), v.begin(), v.end());
    }
    if (n == 1) lh_kv_pool_append(p, 1, kb.data(), vb.data(), static_cast<int32_t>(t0), nullptr);
    else lh_kv_pool_append_batch(p, 1, kb.data(), vb.data(), n, static_cast<int32_t>(t0), nullptr);
  }
}

// Attention args over layer 1 as the addon builds them (window set, a ring walked oldest first).
lh_attention_args layer_args(const lh_kv_pool* p, const float* q, float* out, uint32_t window) {
  lh_attention_args a{};
  a.q = q;
  a.k = lh_kv_pool_k_rows(p, 1);
  a.v = lh_kv_pool_v_rows(p, 1);
  a.out = out;
  a.head_stride = lh_kv_pool_head_stride(p, 1);
  a.tokens = lh_kv_pool_length(p, 1);
  a.heads = HEADS;
  a.kv_heads = H;
  a.head_dim = D;
  a.scale = lh_attention_default_scale(D);
  a.kv_type = p->kv_type;
  a.k_scale = lh_kv_pool_k_scales(p, 1);
  a.v_scale = lh_kv_pool_v_scales(p, 1);
  a.window = window;
  a.positions = lh_kv_pool_positions(p, 1);
  a.query_position = a.positions[lh_kv_pool_last_slot(p, 1)];
  if (lh_kv_pool_is_ring(p, 1)) {
    a.ring_start = p->ring_start[1];
    a.ring_slots = lh_kv_pool_layer_capacity(p, 1);
  }
  return a;
}

// Slot lists of the window policy: the newest (window − 1) rows + the current token, oldest first.
std::vector<int32_t> window_list(const lh_kv_pool* p, uint32_t window) {
  const uint32_t len = lh_kv_pool_length(p, 1), past = std::min(len - 1, window - 1);
  std::vector<int32_t> one;
  for (uint32_t r = len - 1 - past; r < len; ++r) one.push_back(static_cast<int32_t>(lh_kv_pool_row_slot(p, 1, r)));
  return one;
}

// Appends, wraps, reads back by position; slots hold their positions; partial rows follow.
void test_ring_rows() {
  bool ok = true;
  for (const uint32_t kv_type : {0u, 1u, 2u})
    for (const uint32_t chunk : {1u, 3u, 7u, 13u}) {
      const uint32_t cap = 11, n = 47;
      lh_kv_pool r = make_pool(kv_type, 6, 64, cap, true), f = make_pool(kv_type, 6, 64, cap, false);
      std::vector<float> proj(H * D * 6);
      Rng g(7);
      for (auto& x : proj) x = g.normal();
      lh_kv_pool_set_projection(&r, 1, proj.data());
      lh_kv_pool_set_projection(&f, 1, proj.data());
      feed(&r, 0, n, chunk);
      feed(&f, 0, n, chunk);
      ok = ok && lh_kv_pool_length(&r, 1) == cap && lh_kv_pool_length(&f, 1) == n;
      std::vector<float> a(D), b(D);
      for (uint32_t row = 0; row < cap; ++row) {
        const uint32_t s = lh_kv_pool_row_slot(&r, 1, row), pos = n - cap + row;
        for (uint32_t h = 0; h < H; ++h) {
          int32_t pr = -1, pf = -1;
          ok = ok && lh_kv_pool_read(&r, LH_KV_KEY, 1, h, s, a.data(), &pr) == LH_OK && lh_kv_pool_read(&f, LH_KV_KEY, 1, h, pos, b.data(), &pf) == LH_OK;
          ok = ok && pr == static_cast<int32_t>(pos) && pf == pr && std::memcmp(a.data(), b.data(), D * 4) == 0;
          ok = ok && lh_kv_pool_read(&r, LH_KV_VALUE, 1, h, s, a.data(), nullptr) == LH_OK && lh_kv_pool_read(&f, LH_KV_VALUE, 1, h, pos, b.data(), nullptr) == LH_OK &&
               std::memcmp(a.data(), b.data(), D * 4) == 0;
          ok = ok && lh_kv_pool_read_partial(&r, 1, h, s, a.data()) == LH_OK && lh_kv_pool_read_partial(&f, 1, h, pos, b.data()) == LH_OK &&
               std::memcmp(a.data(), b.data(), 6 * 4) == 0;
        }
      }
      ok = ok && lh_kv_pool_last_slot(&r, 1) == static_cast<int32_t>(lh_kv_pool_row_slot(&r, 1, cap - 1));
      // a batch longer than the ring keeps its last `cap` tokens
      lh_kv_pool_reset(&r);
      feed(&r, 0, 30, 30);
      int32_t p0 = -1;
      ok = ok && lh_kv_pool_length(&r, 1) == cap && lh_kv_pool_read(&r, LH_KV_KEY, 1, 0, lh_kv_pool_row_slot(&r, 1, 0), a.data(), &p0) == LH_OK && p0 == 30 - static_cast<int32_t>(cap);
      lh_kv_pool_free(&r);
      lh_kv_pool_free(&f);
    }
  check(ok, "kv ring: appends (single, batches, a batch longer than the ring) wrap; every row holds its position's K, V and partial row, as a plain layer's slot of that position");
}

// Windowed attention over a ring == over the plain layer that keeps every token, bit for bit.
void test_ring_attention() {
  bool same = true, ref_same = true;
  int runs = 0;
  for (const uint32_t kv_type : {0u, 1u, 2u})
    for (const uint32_t window : {5u, 16u}) {
      const uint32_t chunk = 6, cap = window - 1 + chunk, total = 4 * window + 9;  // several windows long
      lh_kv_pool r = make_pool(kv_type, 0, 256, cap, true), f = make_pool(kv_type, 0, 256, cap, false);
      std::vector<float> q(chunk * HEADS * D), orr(chunk * HEADS * D), of(chunk * HEADS * D), oref(chunk * HEADS * D);
      Rng g(31 + window + kv_type);
      uint32_t at = 0;
      while (at < total) {
        // prefill chunks of varying size (straddling the wrap), then decode steps
        const uint32_t n = at < 2 * window ? 1 + (at % chunk) : 1;
        const uint32_t T = std::min(n, total - at);
        feed(&r, at, at + T, T);
        feed(&f, at, at + T, T);
        at += T;
        for (auto& x : q) x = g.normal();
        lh_attention_args a = layer_args(&r, q.data(), orr.data(), window), b = layer_args(&f, q.data(), of.data(), window);
        for (const lh_attention_impl impl : {LH_ATTN_AUTO, LH_ATTN_PORTABLE}) {
          if (!lh_attention_available(impl)) continue;
          if (T > 1) {
            same = same && lh_attention_prefill(&a, T, impl) == LH_OK && lh_attention_prefill(&b, T, impl) == LH_OK;
            for (size_t i = 0; i < T * HEADS * D; ++i) same = same && same_bits(orr[i], of[i]);
          } else {
            same = same && lh_attention_decode(&a, impl) == LH_OK && lh_attention_decode(&b, impl) == LH_OK;
            for (size_t i = 0; i < HEADS * D; ++i) same = same && same_bits(orr[i], of[i]);
          }
        }
        // the scalar reference walks the ring the same way
        if (T > 1) ref_same = ref_same && lh_attention_prefill_ref(&a, T) == LH_OK;
        else ref_same = ref_same && lh_attention_decode_ref(&a) == LH_OK;
        lh_attention_args c = layer_args(&f, q.data(), oref.data(), window);
        if (T > 1) ref_same = ref_same && lh_attention_prefill_ref(&c, T) == LH_OK;
        else ref_same = ref_same && lh_attention_decode_ref(&c) == LH_OK;
        for (size_t i = 0; i < T * HEADS * D; ++i) ref_same = ref_same && same_bits(orr[i], oref[i]);
        if (T == 1) {
          // the window policy's slot lists (attendSelected): the same rows by position
          const std::vector<int32_t> lr = window_list(&r, window), lf = window_list(&f, window);
          std::vector<int32_t> sr, sf;
          for (uint32_t h = 0; h < H; ++h) {
            sr.insert(sr.end(), lr.begin(), lr.end());
            sf.insert(sf.end(), lf.begin(), lf.end());
          }
          const std::vector<uint32_t> off = {0, static_cast<uint32_t>(lr.size()), static_cast<uint32_t>(2 * lr.size())};
          lh_attention_params pa = lh_attention_params_default(D);
          pa.window = window;
          same = same && lh_attention_slots(&r, 1, q.data(), HEADS, sr.data(), off.data(), &pa, orr.data(), 1) == LH_OK &&
                 lh_attention_slots(&f, 1, q.data(), HEADS, sf.data(), off.data(), &pa, of.data(), 1) == LH_OK;
          for (size_t i = 0; i < HEADS * D; ++i) same = same && same_bits(orr[i], of[i]);
        }
        runs += 1;
      }
      lh_kv_pool_free(&r);
      lh_kv_pool_free(&f);
    }
  check(same && runs > 0, "kv ring: windowed attention over a ring (decode, window slot lists, prefill chunks across the wrap; auto and portable kernels) == over every token, bit for bit", "%d steps", runs);
  check(ref_same, "kv ring: the scalar reference walks a ring oldest first and gives the plain layer's bits");
}

// A ring's args are checked: no window, a start or token count past the ring.
void test_ring_args() {
  lh_kv_pool r = make_pool(0, 0, 64, 9, true);
  feed(&r, 0, 12, 4);
  std::vector<float> q(HEADS * D), o(HEADS * D);
  lh_attention_args a = layer_args(&r, q.data(), o.data(), 4);
  bool ok = lh_attention_check(&a) == LH_OK;
  lh_attention_args b = a;
  b.window = 0;
  ok = ok && lh_attention_check(&b) == LH_BAD_ARGUMENT;
  b = a;
  b.ring_start = b.ring_slots;
  ok = ok && lh_attention_check(&b) == LH_BAD_ARGUMENT;
  b = a;
  b.ring_slots = 8;  // fewer than the tokens
  ok = ok && lh_attention_check(&b) == LH_BAD_ARGUMENT;
  b = a;
  b.ring_slots = 65;  // past the head's stride
  ok = ok && lh_attention_check(&b) == LH_BAD_ARGUMENT;
  lh_kv_pool_free(&r);
  // configurations: a ring needs a fixed capacity and no eviction
  lh_kv_pool_config c{};
  c.budget_bytes = 8u << 20;
  c.layers = 2;
  c.kv_heads = H;
  c.head_dim = D;
  uint32_t caps[2] = {32, 0}, rings[2] = {0, 1};
  c.layer_capacity = caps;
  c.layer_ring = rings;
  lh_kv_pool p{};
  ok = ok && lh_kv_pool_init(&p, &c) == LH_BAD_ARGUMENT;
  caps[1] = 80;
  c.evict = 1;
  c.sinks = 4;
  c.recent = 8;
  c.age_every = 4;
  ok = ok && lh_kv_pool_init(&p, &c) == LH_BAD_ARGUMENT;
  c.evict = 0;
  ok = ok && lh_kv_pool_init(&p, &c) == LH_OK && lh_kv_pool_is_ring(&p, 1) && !lh_kv_pool_is_ring(&p, 0);
  lh_kv_pool_free(&p);
  check(ok, "kv ring: attention refuses a ring without a window or with a start / size past it; a ring needs a fixed capacity and no eviction");
}

// Truncation forgets the newest rows; the newest rows export and import (a checkpoint) so that
// attention after the restore equals the plain layer's.
void test_ring_truncate_and_rows() {
  bool ok = true;
  for (const uint32_t kv_type : {0u, 2u}) {
    const uint32_t window = 8, cap = 13;
    lh_kv_pool r = make_pool(kv_type, 4, 128, cap, true), f = make_pool(kv_type, 4, 128, cap, false);
    feed(&r, 0, 40, 5);
    feed(&f, 0, 40, 5);
    // cut back 3: the ring keeps rows of positions 27..36, its oldest stay gone
    lh_kv_pool_truncate(&r, 37);
    lh_kv_pool_truncate(&f, 37);
    int32_t p0 = -1, pl = -1;
    std::vector<float> row(D);
    ok = ok && lh_kv_pool_length(&r, 1) == cap - 3 && lh_kv_pool_read(&r, LH_KV_KEY, 1, 0, lh_kv_pool_row_slot(&r, 1, 0), row.data(), &p0) == LH_OK && p0 == 27 &&
         lh_kv_pool_read(&r, LH_KV_KEY, 1, 0, lh_kv_pool_row_slot(&r, 1, cap - 4), row.data(), &pl) == LH_OK && pl == 36;
    // a dead slot (forgotten by the truncation) is refused
    ok = ok && lh_kv_pool_read(&r, LH_KV_KEY, 1, 0, lh_kv_pool_row_slot(&r, 1, cap - 1), row.data(), nullptr) == LH_BAD_ARGUMENT;
    // attention scores over the cut ring's rows (oldest first, live slots only) == the plain layer's over
    // the same positions; by slot they would read the forgotten slots
    {
      const uint32_t rows = lh_kv_pool_length(&r, 1);
      std::vector<float> q(HEADS * D), sr(HEADS * rows), sf(HEADS * 37);
      Rng g(11);
      for (auto& x : q) x = g.normal();
      ok = ok && lh_attention_scores(&r, 1, q.data(), HEADS, rows, 0.3f, sr.data()) == LH_OK && lh_attention_scores(&f, 1, q.data(), HEADS, 37, 0.3f, sf.data()) == LH_OK;
      for (uint32_t h = 0; h < HEADS; ++h)
        for (uint32_t t = 0; t < rows; ++t) ok = ok && same_bits(sr[h * rows + t], sf[h * 37 + 27 + t]);
    }
    // the newest window − 1 rows as a section == the plain layer's slots of those positions
    lh_kv_snapshot_layout sl;
    lh_kv_pool_snapshot_layout(&r, window - 1, &sl);
    std::vector<uint8_t> a(sl.total), b(sl.total);
    const uint32_t len = lh_kv_pool_length(&r, 1);
    ok = ok && lh_kv_pool_export_rows(&r, 1, len - (window - 1), window - 1, a.data(), a.size()) == LH_OK &&
         lh_kv_pool_export_rows(&f, 1, 37 - (window - 1), window - 1, b.data(), b.size()) == LH_OK && a == b;
    ok = ok && lh_kv_pool_export_rows(&r, 1, len - (window - 2), window - 1, a.data(), a.size()) == LH_BAD_ARGUMENT;  // past the newest row
    // restore it into the emptied ring and continue: attention equals the plain layer's
    ok = ok && lh_kv_pool_clear_layer(&r, 1) == LH_OK && lh_kv_pool_length(&r, 1) == 0 && lh_kv_pool_import_layer(&r, 1, window - 1, b.data(), b.size()) == LH_OK;
    std::vector<float> q(4 * HEADS * D), orr(4 * HEADS * D), of(4 * HEADS * D);
    Rng g(5);
    for (auto& x : q) x = g.normal();
    for (uint32_t step = 0; step < 12; ++step) {
      const uint32_t T = step < 4 ? 4 : 1, p = 37 + (step < 4 ? 4 * step : 16 + (step - 4));
      feed(&r, p, p + T, T);
      feed(&f, p, p + T, T);
      lh_attention_args x = layer_args(&r, q.data(), orr.data(), window), y = layer_args(&f, q.data(), of.data(), window);
      if (T > 1) ok = ok && lh_attention_prefill(&x, T) == LH_OK && lh_attention_prefill(&y, T) == LH_OK;
      else ok = ok && lh_attention_decode(&x) == LH_OK && lh_attention_decode(&y) == LH_OK;
      for (size_t i = 0; i < T * HEADS * D; ++i) ok = ok && same_bits(orr[i], of[i]);
    }
    // clear_layer refuses an evicting pool (no ring there) and a layer out of range
    ok = ok && lh_kv_pool_clear_layer(&r, 2) == LH_BAD_ARGUMENT;
    lh_kv_pool_free(&r);
    lh_kv_pool_free(&f);
  }
  check(ok, "kv ring: truncate forgets the newest rows (the overwritten oldest stay gone); attention scores walk the cut ring's rows; the newest rows export as the plain layer's, import into a cleared ring, and attention continues bit for bit");
}

}  // namespace

void test_kv_ring() {
  test_ring_rows();
  test_ring_attention();
  test_ring_args();
  test_ring_truncate_and_rows();
}
