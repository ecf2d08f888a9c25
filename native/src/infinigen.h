// InfiniGen speculation, selection, gather and attention over gathered rows (ARCHITECTURE.md §4–§5).
//
// Per decode step and sparse layer ℓ (ℓ >= dense_layers), while layer ℓ−1 still runs in onnxruntime:
//   begin(ℓ, q_spec)   q_spec (heads, head_dim) = RoPE_t(x_{ℓ−1}·W_q^{(ℓ)}), from stage ℓ−1's graph.
//                      On the worker thread: q̃_h = q_spec_h · A_{ℓ,g}[:, C]  (pool's projection),
//                      then per KV group: scores of the group's heads against its partial key tiles
//                      (infinigen_score.h: float64, each tile read once for the whole group), their
//                      maxima and counts, and the group's top ⌊cap·N⌋ by combined score; then n and
//                      each group's top n from that list: the §4.5 rule with exactly the result of
//                      lh_infinigen_select (the port of app/engine/kv/select-reference.ts; native
//                      tests compare them), then the reuse-cache bookkeeping: rows
//                      selected at the previous step (same slot, same token) are hits, the rest are
//                      misses, counted as the bytes that would cross to a device.
//   attend(ℓ, q)       after the current token's K/V were appended to the pool (its last slot):
//                      waits for the job and runs the decode attention kernel over the listed pool
//                      rows in place, [selected slots ascending, current token] (ARCHITECTURE.md §3:
//                      on the CPU provider attention reads the pool rows in place; nothing is copied).
// When every candidate is selected, the listed rows are the pool rows in slot order and attend()
// is bit-identical to lh_attention_decode over the whole layer (same kernel, same rows, same order).
//
// Threading: one persistent worker thread per speculator (pthread + condition variable), jobs in
// FIFO order; or, with inline_threads, none (the job runs inside begin() on the shared pool). The worker reads only the layer it was given, slots < the length at begin(), and never
// the victim reserved at begin() on a full evicting pool, so the caller may append the current token
// to that layer while the job runs (no shared byte: a partial last tile is read lane by lane, the
// prefetch counters are updated by lh_kv_pool_note_job; `npm test` runs this under TSan). The caller
// must not truncate/reset the pool or free it while jobs are pending (drain() first).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention_params.h"
#include "kv_pool.h"
#include "status.h"

struct lh_infinigen_knobs {
  double alpha;           // > 0: score margin below each head's maximum
  double cap;             // (0, 1]: most tokens per head as a fraction of the candidates
  uint32_t dense_layers;  // layers below this select every candidate
};

// Inputs of one layer's selection (the shapes of select-reference.ts's PartialScoreInput).
struct lh_select_input {
  uint32_t heads, kv_heads, p, slots;
  const float* q_partial;     // (heads, p)
  const void* k_partial;      // (kv_heads, head_stride): rows (slots, p) of k_type
  size_t head_stride;         // elements between two KV heads' partial rows (>= slots * p)
  uint32_t k_type;            // LH_KV_F16 or LH_KV_F32
  const uint8_t* candidates;  // (slots) 1 = candidate; null = every slot
  double scale;               // > 0
};

// Caller-owned scratch for `slots` slots and `heads` heads.
struct lh_select_scratch {
  double* scores;    // (heads, slots)
  double* combined;  // (slots)
  double* values;    // (slots) the candidates' combined scores, reordered by the top-n search
};

// The selection rule of select-reference.ts, exactly (float64 scores, ties -> lower slot):
// selected (kv_heads, selected_stride): the first *n entries of each row are its slots, ascending.
// *n = tokens per KV head (all candidates for a dense layer), *candidates = N, counts (heads) = c_h
// (untouched for dense layers or N = 0; may be null). LH_BAD_ARGUMENT on bad shapes/knobs or a
// non-finite candidate score (nothing meaningful written).
lh_status lh_infinigen_select(uint32_t layer, const lh_select_input* in, const lh_infinigen_knobs* knobs,
                              const lh_select_scratch* scratch, int32_t* selected, size_t selected_stride,
                              uint32_t* n, uint32_t* candidates, int32_t* counts);

// Per-layer figures of the latest step (ns from CLOCK_MONOTONIC, comparable with process.hrtime).
struct lh_layer_stats {
  uint32_t n;               // tokens per KV head selected (excluding the current token)
  uint32_t candidates;      // N
  uint32_t hits, misses;    // reuse cache, summed over KV heads
  uint64_t bytes;           // K+V bytes read from the pool for misses (what would cross to a device)
  uint64_t begin_ns;        // begin() called
  uint64_t job_start_ns, job_end_ns;  // worker picked the job up / finished the gather
  uint64_t spec_ns;         // q̃ + scores + selection
  uint64_t gather_ns;       // staging copies
  uint64_t wait_ns;         // attend() waited for the job
  uint64_t attn_ns;         // attention over the staged rows
  uint32_t valid;           // 1 once a job of this step ran
};

struct lh_speculator_config {
  uint32_t heads;          // query heads, multiple of the pool's kv_heads
  lh_infinigen_knobs knobs;
  double scale;            // score scale (1/sqrt(head_dim) for Llama)
  // 0: the job runs on the speculator's own worker thread, overlapping the caller's next dense stage
  // (right when that thread has a core of its own). 1..LH_MAX_RANGE_THREADS: no worker thread; begin()
  // runs the job at once on the caller's thread, its KV groups split over this many threads of the
  // shared pool (worker_pool.h), and attend() splits attention over them too (right when the dense
  // stages already use every core: a side thread would only take turns with them). Same selections,
  // same bits either way.
  uint32_t inline_threads = 0;
  // (layers) what each layer's attention computes (attention_params.h: scale, window, sinks, soft-cap)
  // for attend(), attend_ref() and recall(), copied at creation (sinks included); null: every layer the
  // default (1/√head_dim, nothing else). Taken once at creation rather than per call, so the decode step
  // passes no per-layer object across the JS boundary. The speculation's own score scale stays `scale`.
  const lh_attention_params* layer_attention = nullptr;
};

struct lh_speculator;

// Allocates everything (staging, scratch) and starts the worker. The pool must have partial rows.
lh_status lh_speculator_create(lh_speculator** out, lh_kv_pool* pool, const lh_speculator_config* cfg);
// Stops the worker (after pending jobs) and frees. Safe on null.
void lh_speculator_destroy(lh_speculator* sp);

// Queues speculation + gather of `layer` (>= dense_layers, projection set) over slots 0..length-1.
lh_status lh_speculator_begin(lh_speculator* sp, uint32_t layer, const float* q_spec);
// Waits for every queued job.
void lh_speculator_drain(lh_speculator* sp);
// Waits for layer's job, then attention over [staged rows, the layer's last slot]; q, out (heads, head_dim).
// threads 1..64: the KV heads split as lh_attention_decode_threads does (same bits for any count); an
// inline speculator splits them over min(threads, inline_threads) threads of the shared pool.
lh_status lh_speculator_attend(lh_speculator* sp, uint32_t layer, const float* q, float* out, uint32_t threads = 1);
// Same attention by the scalar reference, reading the selected rows straight from the pool.
lh_status lh_speculator_attend_ref(lh_speculator* sp, uint32_t layer, const float* q, float* out);
// Share of layer's true softmax mass (query q over every slot, current token included) that the
// selected set + the current token covers, averaged over query heads. After attend(). The layer's
// attention block applies: its scale and soft-cap to the logits, its window to which slots carry mass;
// a sink's share is left out (it is no row, and no selection can miss it).
lh_status lh_speculator_recall(lh_speculator* sp, uint32_t layer, const float* q, double* recall);
// Forgets every staged row (after truncate/reset of the pool). Drains first.
void lh_speculator_clear_staging(lh_speculator* sp);
// The latest selection of (layer, kv_head): *n slots, ascending. Null if none.
const int32_t* lh_speculator_selected(lh_speculator* sp, uint32_t layer, uint32_t kv_head, uint32_t* n);
const lh_layer_stats* lh_speculator_stats(lh_speculator* sp, uint32_t layer);

// Scalar reference of attention over gathered rows, reading from the pool: per KV head g the n
// slots slots[g][0..n) (ascending) then `current`. q, out (heads, head_dim). In reference/infinigen_ref.cc.
// attn: scale, window (by the pool's positions, the query at `current`'s), sinks and soft-cap; null:
// the default block.
lh_status lh_attention_gathered_ref(const lh_kv_pool* pool, uint32_t layer, const int32_t* const* slots, uint32_t n,
                                    uint32_t current, const float* q, uint32_t heads, float* out,
                                    const lh_attention_params* attn = nullptr);

uint64_t lh_now_ns();
