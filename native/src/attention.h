// Decode (one query token) and causal prefill (a chunk of query tokens) attention over fp16, fp32
// or int8 K/V rows, GQA aware.
//
// For every query head h, with its KV head g = h / (heads / kv_heads):
//   s_t   = scale * dot(q[h], K[g][t])                      t = 0 .. tokens-1
//   out[h] = sum_t softmax(s)_t * V[g][t]                    (max-subtracted, numerically stable)
//
// Non-finite inputs: a NaN score anywhere in a head, a +inf score, or a head whose scores are
// all -inf makes that head's whole output NaN; -inf scores among finite ones get zero weight.
// The optimised kernels and the scalar reference agree on which outputs are non-finite.
//
// Shapes (elements):
//   q   : (heads, head_dim)                         fp32
//   k   : (kv_heads, [head_stride]) rows (tokens, head_dim) of kv_type; row t of head g starts at
//         k + g * head_stride + t * head_dim. The pool's layer rows have head_stride =
//         capacity * head_dim; a gathered, packed block has head_stride = tokens * head_dim.
//   v   : same layout as k
//   k_scale, v_scale: int8 only, (kv_heads, head_stride / head_dim) fp32: the scale of row r of
//         head g is k_scale[g * (head_stride / head_dim) + r] (indexed like the rows; head_stride
//         must be a multiple of head_dim). Row r of K means k_scale[..] * (its int8 values), so
//         s_t = scale * k_scale[t] * sum_i q_i * k_i and the value row adds p_t * v_scale[t] * v.
//         A NaN scale (a non-finite row, kv_pool.h) makes every head that reads the row NaN.
//   rows: optional (kv_heads, rows_stride) int32: with it, token t of head g is the row
//         rows[g * rows_stride + t] of that head (k + g * head_stride + rows[..] * head_dim), so
//         attention reads a selected subset of the pool's rows in place, in the listed order
//         (decode only; every index must lie inside head_stride)
//   out : (heads, head_dim)                         fp32; must not overlap q, k or v
//
// Optional features (attention_params.h; each off when its field is zero, which is what an aggregate
// or `{}` initializer leaves, so older call sites keep today's bits):
//   softcap : > 0: every scaled logit becomes softcap · tanh(s / softcap) before the softmax
//   sinks   : (heads) one logit per query head joining the softmax denominator (no value row)
//   window  : > 0: a row takes part only if its position p satisfies query_position − window < p <=
//             query_position; rows outside are not read. positions (kv_heads, head_stride / head_dim)
//             int32 gives each row's position, indexed like the rows and the int8 scales (head_stride
//             must then be a multiple of head_dim). Prefill: query i is at its own row's position,
//             positions[tokens − queries + i] (KV head 0's; query_position is not read).
//   ring    : ring_slots > 0 (a window layer's ring, kv_pool.h "Rings"; window must be set): without a
//             row list, token t is the row in slot (ring_start + t) % ring_slots, so the tokens are
//             walked oldest first, in position order, as over the full sequence (the same tiles, the
//             same bits); tokens <= ring_slots <= head_stride / head_dim, ring_start < ring_slots.
//             A row list is read as given (its entries are slots).
// Without window and softcap the kernels run exactly today's code; sinks only change each head's
// final normalisation. The window runs as a filtered row list (each tile takes the next visible rows),
// softcap as a capped score step in the same tiles; a windowed prefill is one decode per query.
// The kernel allocates nothing and writes nothing outside out.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention_params.h"
#include "kv_pool.h"
#include "status.h"

constexpr uint32_t LH_MAX_HEADS = 4096;
constexpr uint32_t LH_MAX_ATTENTION_THREADS = 64;  // threads one attention call may use

struct lh_attention_args {
  const float* q;        // (heads, head_dim); prefill: (queries, heads, head_dim)
  const void* k;         // (kv_heads, head_stride) see above; elements of kv_type
  const void* v;         // (kv_heads, head_stride)
  float* out;            // (heads, head_dim); prefill: (queries, heads, head_dim)
  size_t head_stride;    // elements from one KV head's rows to the next; >= tokens * head_dim
  uint32_t tokens;       // >= 1
  uint32_t heads;        // multiple of kv_heads, <= LH_MAX_HEADS
  uint32_t kv_heads;     // >= 1
  uint32_t head_dim;     // 1 .. LH_MAX_HEAD_DIM
  float scale;           // usually 1 / sqrt(head_dim)
  uint32_t kv_type;      // lh_kv_type of k and v; 0 (fp16) when left out of an initializer
  const int32_t* rows;   // (kv_heads, rows_stride) row of each token, or null: token t is row t
  size_t rows_stride;    // >= tokens when rows is set
  const float* k_scale;  // int8: (kv_heads, head_stride / head_dim) scale of each key row; else ignored
  const float* v_scale;  // int8: (kv_heads, head_stride / head_dim) scale of each value row; else ignored
  // attention_params.h features (above); zero = off
  const float* sinks;        // (heads) sink logit of each query head, or null
  float softcap;             // 0: off; else > 0, finite
  uint32_t window;           // 0: none
  const int32_t* positions;  // window > 0: (kv_heads, head_stride / head_dim) position of each row
  int32_t query_position;    // window > 0, decode: position of the query (prefill: each query's own row's)
  uint32_t ring_start;       // ring_slots > 0: slot of token 0 (the oldest row)
  uint32_t ring_slots;       // 0: token t is row t; else the ring's capacity (see "ring" above)
};

// Row (slot) of token t without a row list: t, or its slot in a ring.
inline size_t lh_attention_token_row(const lh_attention_args* a, uint32_t t) {
  if (a->ring_slots == 0) return t;
  const uint64_t s = static_cast<uint64_t>(a->ring_start) + t;
  return static_cast<size_t>(s % a->ring_slots);
}

// Copies a parameter block's scale, sinks, softcap and window into args (positions and query_position
// stay the caller's: they come from where the rows live).
inline void lh_attention_args_set_params(lh_attention_args* a, const lh_attention_params* p) {
  a->scale = p->scale;
  a->sinks = p->sinks;
  a->softcap = p->softcap;
  a->window = p->window;
}

enum lh_attention_impl {
  LH_ATTN_AUTO = 0,      // the best one this CPU runs
  LH_ATTN_PORTABLE = 1,  // tiled online softmax, plain C++ (any CPU)
  LH_ATTN_AVX2 = 2,      // AVX2 + FMA + F16C (x86-64 with those features, checked at run time): the
                         // grouped kernel (each K/V row widened once per KV head for all of its query
                         // heads, tiles of 16 rows, vector exp); MHA and head_dim > 256 run the per-head kernel
  LH_ATTN_AVX512 = 3,    // AVX-512 F/BW/VL/DQ (+ AVX2, FMA, F16C): the grouped kernel on 16 lanes
                         // (AUTO's choice where available); head_dim > 256 runs the per-head kernel
  LH_ATTN_AVX2_PER_HEAD = 4,  // the previous AVX2 kernel: per (row, query head) a dot, a scalar exp and an
                              // axpy; kept as the baseline bench/attention-kernel.mjs measures against
};

// Validates args (LH_BAD_ARGUMENT, nothing written) and runs the chosen implementation.
// LH_BAD_ARGUMENT also when `impl` is not available on this CPU.
lh_status lh_attention_decode(const lh_attention_args* args, lh_attention_impl impl = LH_ATTN_AUTO);

// lh_attention_decode with the KV heads split into contiguous ranges over up to `threads` threads
// (the caller's plus ones started for the call, parallel_ranges.h); each range runs the same kernel
// over its heads, so the result is bit-identical for any thread count. Fewer threads are used when
// the work is small (see lh_attention_decode_threads_used). threads 1..LH_MAX_ATTENTION_THREADS.
lh_status lh_attention_decode_threads(const lh_attention_args* args, uint32_t threads, lh_attention_impl impl = LH_ATTN_AUTO);
// How many threads lh_attention_decode_threads uses for these args: min(threads, kv_heads,
// work / LH_ATTENTION_MIN_WORK_PER_THREAD), at least 1, where work = tokens · (heads + 4 · kv_heads)
// · max(head_dim, 64) / 64: a score of a 64-wide head per (token, query head) plus a K/V row read and
// widened per (token, KV head), which costs about four scores in the grouped kernels; a wider head
// costs in proportion. A thread only for ~200-300 us of work.
constexpr uint64_t LH_ATTENTION_MIN_WORK_PER_THREAD = 131072;  // work units (above) per thread
constexpr uint64_t LH_ATTENTION_ROW_WORK = 4;                   // work units of one row read, in scores
uint32_t lh_attention_decode_threads_used(const lh_attention_args* args, uint32_t threads);
// The same count for a split over a running worker pool (lh_attention_decode_pool): its threads wake
// in microseconds when they were spinning after the dense stage's matmuls and in tens of microseconds
// from sleep, not the ~100 us a started thread costs, so a thread pays from ~1/8 of the work. Measured
// on a Zen 4 host (2 threads, fp16 rows from DRAM, Gemma-3-4B-like layers: 8 heads / 4 KV heads,
// head_dim 256): a 1,024-row window layer 0.47 ms on one thread, which the started-thread rule kept
// on one thread at every context (98,304 units).
constexpr uint64_t LH_ATTENTION_POOL_MIN_WORK_PER_THREAD = 16384;  // work units per pool thread
uint32_t lh_attention_decode_pool_threads_used(const lh_attention_args* args, uint32_t threads);
// lh_attention_decode_threads with the KV heads split over min(threads, kv_heads) threads of a running
// worker pool (worker_pool.h; null: inline) instead of threads started for the call: a pool thread
// wakes in microseconds, so every call splits. Same bits as lh_attention_decode.
struct lh_worker_pool;
lh_status lh_attention_decode_pool(const lh_attention_args* args, lh_worker_pool* pool, uint32_t threads,
                                   lh_attention_impl impl = LH_ATTN_AUTO);

// The scalar reference: two passes, plain loops, fp32 math, scalar fp16 conversion, int8 rows
// dequantised element by element (k_scale * k_i).
// Lives in reference/attention_ref.cc. Same validation and contract.
lh_status lh_attention_decode_ref(const lh_attention_args* args);

// Shared argument check used by both.
lh_status lh_attention_check(const lh_attention_args* args);

// Causal prefill: the last `queries` of the `tokens` stored rows are the chunk's own tokens
// (already appended), and q / out hold one (heads, head_dim) block per chunk token. Query i
// attends rows 0 .. tokens - queries + i (itself and everything before it), exactly what decode
// would compute for that token alone. 1 <= queries <= tokens. Same validation (for the
// (queries, heads, head_dim) extents of q and out) and the same non-finite rules per query.
lh_status lh_attention_prefill(const lh_attention_args* args, uint32_t queries, lh_attention_impl impl = LH_ATTN_AUTO);
// Where decode runs the grouped kernel (AVX-512, and AVX2 for GQA, head_dim <= 256) the chunk's
// queries share each KV head's rows: batches of 16 (query, query head) pairs of one KV head walk
// the rows once, each tile widened once for every pair that reaches it, each pair stopping at its
// own prefix; elsewhere each query is one decode. Either way every query's output is what decode
// computes for it, bit for bit.
//
// lh_attention_prefill with the work spread over `threads` threads (the caller's plus threads − 1
// started for the call): batch (or query) i runs on thread i % threads, so the causal triangle's
// long and short rows are shared evenly. Each query is computed exactly as lh_attention_prefill
// computes it (same kernel, same rows, its own output block), so the result is bit-identical for
// any thread count.
// One query (decode) is lh_attention_decode_threads: its KV heads are split instead.
// threads 1..LH_MAX_ATTENTION_THREADS (more than queries: the extra ones get nothing).
lh_status lh_attention_prefill_threads(const lh_attention_args* args, uint32_t queries, uint32_t threads,
                                       lh_attention_impl impl = LH_ATTN_AUTO);
lh_status lh_attention_prefill_ref(const lh_attention_args* args, uint32_t queries);
lh_status lh_attention_prefill_check(const lh_attention_args* args, uint32_t queries);

// The vector exp the grouped kernels use, over n floats (x and y may be the same buffer), for
// tests: y = exp(x) within ~2 ulp on [-87.3, 88.72], 0 below (-inf included), +inf above, NaN for
// NaN. AUTO: the exp of the kernel AUTO runs. LH_BAD_ARGUMENT when impl has no vector exp
// (portable, per-head, or AUTO on a CPU that runs the portable kernel: they call std::exp) or is
// not available here.
lh_status lh_attention_vector_exp(lh_attention_impl impl, const float* x, float* y, size_t n);

// Whether an implementation runs on this CPU, and its name ("portable", "avx2-fma-f16c", "avx512",
// "avx2-per-head"; AUTO: the name of the one it runs).
bool lh_attention_available(lh_attention_impl impl);
const char* lh_attention_impl_name(lh_attention_impl impl);
