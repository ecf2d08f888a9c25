// Selection of the comparison policies over the pool (ARCHITECTURE.md §6): streaming, h2o, quest and
// snapkv pick, per KV head, the slots a decode step attends, by exactly the rules of the plain
// TypeScript references (app/engine/kv/policies-reference.ts, topk.ts), which stay the tests' oracle.
// The state each policy keeps across steps (H2O's accumulated mass and live flags, Quest's page
// bounds, SnapKV's observation queries) is owned by the caller (sparse-policies.ts) and passed in;
// nothing here allocates: every function takes a caller-sized scratch (lh_select_scratch_bytes).
//
// The ranking rule shared by every policy (topk.ts): only candidates compete; larger score first; on
// equal scores the LOWER slot wins; NaN ranks below everything (as −inf, and a NaN ties with −inf:
// the lower slot wins); the result is ascending by slot. Scores are ranked as doubles.
//
// Arithmetic, chosen to give the references' bits:
//   - attention logits: the bits of lh_attention_score (sparse_attention.h) and lh_attention_scores
//     (each logit its own fp32 sum in element order; computed 8 slots at a time);
//   - probabilities and votes in double: e = exp(s − max), sum in list order, p = e / sum (the
//     references use JS Math.exp; glibc's exp and V8's agree except, at most, in the last bit of
//     rare arguments);
//   - min/max with JS semantics (NaN wins; −0 < +0), products of fp32 values in double (exact).
//
// Output lists: slots (total) int32 and offsets (kv_heads + 1) uint32, KV head g's ascending list at
// slots[offsets[g] .. offsets[g+1]); a list may be empty (no candidate); the current token is never
// in it (the caller attends it). `slots` must hold kv_heads * (the per-head bound stated below).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention_params.h"
#include "kv_pool.h"
#include "status.h"

// Bytes of scratch any of the functions below needs for `n` = max(N, pages, prompt) candidates.
inline size_t lh_select_scratch_bytes(size_t n) { return n * (3 * sizeof(double) + 2 * sizeof(int32_t) + 1) + 64; }

// The shared top-k: the `k` largest scores[j] among the candidates j < n (mask null: every j; else
// mask[j] != 0), ascending, into out (>= min(k, n) slots). Returns how many were written.
// `idx` is scratch of n int32.
size_t lh_top_indices(const double* scores, size_t n, size_t k, const uint8_t* mask, int32_t* idx, int32_t* out);

// streaming (StreamingLLM): sinks [0, min(sinks, N)) and the recent window [N − window, N), ascending,
// into out (>= N slots; the same for every KV head). Returns the count.
size_t lh_select_streaming(uint32_t N, uint32_t sinks, uint32_t window, int32_t* out);

// h2o, one step: per KV head g, among the live slots of 0..N−1 (live: (kv_heads, C) uint8), the recent
// ones (j >= N − recent) plus the (budget − |live recent|) older ones of largest acc (acc: (kv_heads, C)
// fp32); then every older slot (j < N − recent) not kept is evicted for good (live[g, j] = 0).
// Per-head bound: budget. LH_BAD_ARGUMENT: recent > budget, N > C, a null pointer, scratch too small.
// threads > 1: the KV heads split over that many threads of the shared pool (worker_pool.h) when the
// scratch holds that many lh_select_scratch_bytes(N) slices (else one thread); the same result.
lh_status lh_select_h2o(const float* acc, uint8_t* live, uint32_t kv_heads, size_t C, uint32_t N, uint32_t budget, uint32_t recent,
                        int32_t* slots, uint32_t* offsets, void* scratch, size_t scratch_bytes, uint32_t threads = 1);

// h2o, the mass of one query: for each query head h (KV head g = h / (heads / kv_heads)) the softmax of
// its logits (lh_attention_score against `layer`'s rows) over KV head g's list (slots/offsets, any
// order, the current token included) — or over every slot 0..n−1 when slots is null (prefill) — is
// added to acc[g, j] (fp32, (kv_heads, C); computed as double(acc) + e / sum, then rounded), head by
// head in order. LH_BAD_ARGUMENT: bad shape, a slot >= length(layer) or >= C, n > length or > C.
// scratch: >= lh_h2o_scratch_floats(the longest list, or n) floats (float-aligned, as any float array).
// threads > 1: the KV heads (each with its query heads, in order) split over that many threads of the
// shared pool when the scratch holds that many such slices (else one thread); the same bits.
inline size_t lh_h2o_scratch_floats(size_t longest) { return 3 * longest + 4; }  // logits, then their exps as doubles
// attn (attention_params.h): the logits' scale and soft-cap, and each query head's sink joining the
// softmax normaliser (sum + e^{sink − max}); its window is not applied (the lists are the policy's).
// LH_BAD_ARGUMENT also for a bad attn block.
lh_status lh_h2o_accumulate(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, float* acc, size_t C, uint32_t n,
                            const int32_t* slots, const uint32_t* offsets, const lh_attention_params* attn, float* scratch,
                            size_t scratch_floats, uint32_t threads = 1);
// The same with nothing but a scale (today's call).
inline lh_status lh_h2o_accumulate(const lh_kv_pool* pool, uint32_t layer, const float* q, uint32_t heads, float* acc, size_t C, uint32_t n,
                                   const int32_t* slots, const uint32_t* offsets, float scale, float* scratch, size_t scratch_floats,
                                   uint32_t threads = 1) {
  const lh_attention_params attn{scale, 0u, nullptr, 0.0f};
  return lh_h2o_accumulate(pool, layer, q, heads, acc, C, n, slots, offsets, &attn, scratch, scratch_floats, threads);
}

// quest, bounds: extends the element-wise key bounds page_min/page_max ((kv_heads, max_pages, d) fp32)
// with the stored key rows of slots from..to−1 of `layer` (page of slot j: j / page_size), min/max
// with JS semantics. LH_BAD_ARGUMENT: to > length(layer), a page >= max_pages, page_size 0.
lh_status lh_quest_extend_bounds(const lh_kv_pool* pool, uint32_t layer, float* page_min, float* page_max, uint32_t max_pages,
                                 uint32_t page_size, uint32_t from, uint32_t to);

// quest, one step: pages = ceil(N / page_size); per query head h the bound U_{h,P} = Σ_i max(q_i·min_i,
// q_i·max_i) (double); per KV head the pages ranked by max over the group of (U_{h,P} − max_P U_{h,P}),
// the top `top_pages` kept with all their slots < N. q: (heads, d) fp32; bounds as above (pages <=
// max_pages). Per-head bound: min(N, top_pages * page_size). LH_BAD_ARGUMENT: bad shape, scratch small.
// threads > 1: the KV heads are split over that many threads of the shared pool (worker_pool.h), each
// with its own part of the scratch, when the scratch holds lh_quest_scratch_bytes(kv_heads, pages,
// threads) (else one thread); the same lists either way.
lh_status lh_select_quest(const float* q, uint32_t heads, uint32_t kv_heads, uint32_t d, const float* page_min, const float* page_max,
                          uint32_t max_pages, uint32_t N, uint32_t page_size, uint32_t top_pages, int32_t* slots, uint32_t* offsets,
                          void* scratch, size_t scratch_bytes, uint32_t threads = 1);
// Scratch of lh_select_quest on `threads` threads: per thread a head's bounds, the group's combined
// bounds and the top-k's index list (pages each), plus every KV head's chosen pages.
inline size_t lh_quest_scratch_bytes(size_t kv_heads, size_t pages, size_t threads) {
  return threads * (pages * (2 * sizeof(double) + sizeof(int32_t)) + 64) + kv_heads * pages * sizeof(int32_t) + 64;
}

// quest's bound of one query head qh (d) over pages [0, pages) of one KV head's bounds ((pages, d),
// as in lh_select_quest): out[P] = Σ_i max(q_i·min_i, q_i·max_i) in double, i in order, JS max (NaN
// wins). What lh_select_quest ranks; SIMD across pages where the CPU has AVX2, the same bits.
void lh_quest_page_bounds(const float* qh, uint32_t d, const float* page_min, const float* page_max, uint32_t pages, double* out);

// snapkv, once per prompt of P tokens: the `window` queries obs_q ((window, heads, d) fp32; row i is
// the query of position P − window + i) vote: per query head, each row's softmax over slots
// 0..P−window+i (its logits by lh_attention_score against `layer`), summed over rows on the prefix
// [0, P − window), max-pooled along the prefix (kernel odd, −inf padding), summed over the group; per
// KV head the top (budget − window) prefix slots + the window [P − window, P). Needs window <= budget
// < P and P <= length(layer) (a prompt within the budget keeps everything: the caller's case).
// Per-head bound: budget. LH_BAD_ARGUMENT otherwise, or scratch too small.
// attn: the logits' scale and soft-cap (the votes rank slots; sinks and window are not applied).
lh_status lh_snapkv_compress(const lh_kv_pool* pool, uint32_t layer, const float* obs_q, uint32_t heads, uint32_t P, uint32_t window,
                             uint32_t budget, uint32_t kernel, const lh_attention_params* attn, int32_t* slots, uint32_t* offsets,
                             void* scratch, size_t scratch_bytes);
inline lh_status lh_snapkv_compress(const lh_kv_pool* pool, uint32_t layer, const float* obs_q, uint32_t heads, uint32_t P, uint32_t window,
                                    uint32_t budget, uint32_t kernel, float scale, int32_t* slots, uint32_t* offsets, void* scratch,
                                    size_t scratch_bytes) {
  const lh_attention_params attn{scale, 0u, nullptr, 0.0f};
  return lh_snapkv_compress(pool, layer, obs_q, heads, P, window, budget, kernel, &attn, slots, offsets, scratch, scratch_bytes);
}
