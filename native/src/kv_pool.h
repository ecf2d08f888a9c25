// The KV pool: every layer's keys and values for every stored token, in native memory.
//
// One mmap allocation per model load, sized from a byte budget; nothing on the token path
// allocates. Rows are fp16 (default) or fp32 (kv_type LH_KV_F32: exact comparisons with a
// reference that keeps an F32 cache). With partial_dim p > 0 the pool also holds InfiniGen's partial
// key rows (RoPE(k)·A)[C] (fp16, same slot as the full row) and, per layer and KV head, the
// projection A[:, C] that produces them. With evict = 1 (ARCHITECTURE.md §5) the pool also holds, per
// layer and slot, a prefetch counter and a candidate flag, and a full layer makes room for a new
// token by evicting one slot (see "Eviction" below). With kv_type LH_KV_I8 the rows are int8 and
// every row has one fp32 scale in the ks / vs regions (see "int8 rows" below).
//
// Memory layout of the one allocation (regions in this order, each starting on a 64-byte line).
// capacity(l) is layer l's own slot count (lh_kv_pool_layer_capacity): every layer's the same unless the
// config gives layer_capacity; "(layer, kv_head, capacity(l), ...)" means layer l's block holds kv_head
// runs of capacity(l) slots and the blocks follow each other (lh_kv_pool_slot_index gives the index).
//   length : (layer)                                   uint32  slots in use per layer
//   k      : (layer, kv_head, capacity(l), head_dim)   fp16|fp32|int8  key rows
//   v      : (layer, kv_head, capacity(l), head_dim)   fp16|fp32|int8  value rows
//   pos    : (layer, kv_head, capacity(l))             int32   token position held by each slot
//   ks     : (layer, kv_head, capacity(l))             fp32    scale of each int8 key row (int8 only)
//   vs     : (layer, kv_head, capacity(l))             fp32    scale of each int8 value row (int8 only)
//   kp     : (layer, kv_head, capacity8(l) / 8, partial_dim, 8)  fp16  partial key rows (partial_dim > 0),
//            in tiles of 8 slots: element i of slot s is at tile s/8, row i, lane s%8, so the
//            speculator scores 8 slots with one vector load per element (capacity8 = capacity
//            rounded up to a multiple of 8; lh_kv_pool_partial_at gives the index)
//   proj   : (layer, kv_head, head_dim, partial_dim)   fp32    A[:, C] per layer and KV head
//   proj_set : (layer)                                 uint32  1 once proj of the layer is set
//   counter: (layer, capacity(l))                      uint32  prefetch counter of each slot (evict)
//   cand   : (layer, capacity(l))                      uint8   1 = slot is a selection candidate (evict)
//   ev     : (layer)                                   lh_kv_evict_layer bookkeeping (evict)
// The budget covers the whole allocation: rows, int8 scales, positions, partial rows, counters, flags, headers.
// Without layer_capacity the layout, byte_length and bytes_per_token are what they were before
// per-layer capacities existed (every capacity(l) = capacity).
//
// Per-layer capacity (layer_capacity): a sliding-window layer needs only its window (plus what prefix
// reuse needs), so it can be given fewer slots than a global layer, in the same one allocation. Each
// layer follows the pool's rules on its own: without evict, appending past capacity(l) is LH_POOL_FULL;
// with evict, a full layer evicts (capacity(l) must exceed sinks + recent).
//
// Rings (layer_ring, ARCHITECTURE.md §5). A ring layer never fills: once it holds capacity(l) tokens,
// each append overwrites the slot of its OLDEST token. Its tokens are ROWS in position order: row 0 is
// the oldest token held, row length−1 the newest, and row r lives in slot (ring_start + r) % capacity
// (lh_kv_pool_row_slot); a plain layer's row r is slot r. Every slot keeps its token's position, so a
// windowed attention over a ring's rows (attention.h: ring_start / ring_slots walk the rows in position
// order) reads the same rows in the same order as over the full sequence: the same bits. A ring layer
// needs a fixed capacity and a pool without evict. truncate() forgets a ring's newest rows (positions
// >= n) and the oldest rows it overwrote stay gone: what a cut back to n needs (the window before n) is
// still there only while n − window >= the position of row 0 (the runner checks, kv/ring-checkpoints).
//
// Eviction (evict = 1). A token is PROTECTED while it is a sink (position < sinks) or in the recent
// window (one of the `recent` newest positions stored in the layer). When a layer holds `capacity`
// tokens and one more is appended, the victim is the unprotected slot with the smallest counter (ties:
// the oldest position); its rows, partial row and position are overwritten by the new token in place
// (so the victim and its partial key leave the candidate set), the layer's eviction count goes up by
// one, and the new token starts with counter 0. Counters: +1 per KV head that selects the slot
// (lh_kv_pool_note_selected; the speculator's job calls lh_kv_pool_note_job), and every `age_every` noted steps of a
// layer all its counters are halved (lh_kv_pool_age). Layers that nobody selects from (dense layers,
// policy 'full') keep counters at 0, so their victims go oldest-first outside the sinks (StreamingLLM).
// A speculator reserves the victim at begin() (lh_kv_pool_reserve_victim), before selection, so the
// selection never sees the slot that the append will overwrite.
// int8 rows (LH_KV_I8). Per token, KV head and part (K or V): scale = max|x| / 127 (fp32) and
// q_i = round(x_i / max|x| * 127), round to nearest, ties to EVEN (nearbyint in the default mode,
// computed in double), so |x_i - scale * q_i| <= scale / 2 (plus fp32 rounding of scale). The
// stored row means scale * q_i; readK/readV, attention, scores and partial rows all use that.
//   zero row, or max|x| < 2^-100: scale 0, q all 0 (reads back as exact zeros; the tiny row is
//     flushed so that 1/scale cannot overflow)
//   a row with any NaN or +-inf element: scale NaN, q all 0. It reads back as NaN in every element,
//     and attention over it gives NaN for every query head that attends it (a NaN score; see
//     attention.h), so a non-finite K/V never turns into silently wrong finite numbers. The
//     fp16/fp32 pools also keep such rows (their non-finite elements) rather than refusing them.
// A partial row is computed from the STORED key row (after fp16 rounding or int8 quantisation) when the token is
// appended to a layer whose projection is set, and for every stored slot when it is set.
// A layer's slots fill from 0 upwards; slot s of every KV head of a layer holds the same token.
#pragma once

#include <cstddef>
#include <cstdint>

#include "status.h"

// Hard limits. They keep every size computation far from overflow and reject typos early.
constexpr uint32_t LH_MAX_LAYERS = 1024;
constexpr uint32_t LH_MAX_KV_HEADS = 1024;
constexpr uint32_t LH_MAX_HEAD_DIM = 1024;
constexpr uint32_t LH_MAX_TOKENS = 0x7fffffffu;  // slots per layer (positions are int32)

// Element type of the K/V rows.
enum lh_kv_type : uint32_t {
  LH_KV_F16 = 0,  // IEEE half, round to nearest even on append (default)
  LH_KV_F32 = 1,  // stored as given
  LH_KV_I8 = 2,   // int8 with one fp32 scale per row (see "int8 rows" above)
};

// Bytes of one element of a row of this type (0 for an unknown type).
inline uint32_t lh_kv_type_bytes(uint32_t t) { return t == LH_KV_F16 ? 2u : t == LH_KV_F32 ? 4u : t == LH_KV_I8 ? 1u : 0u; }

// Bytes of one K (or V) row of head_dim elements of this type, its int8 scale included.
inline uint64_t lh_kv_row_bytes(uint32_t t, uint32_t head_dim) {
  return static_cast<uint64_t>(head_dim) * lh_kv_type_bytes(t) + (t == LH_KV_I8 ? sizeof(float) : 0u);
}

// Quantises one row x (n fp32) to out (n int8) by the rule above and returns its scale.
float lh_kv_quantize_i8(const float* x, size_t n, int8_t* out);

struct lh_kv_pool_config {
  uint64_t budget_bytes;  // the whole allocation may not exceed this
  uint32_t layers;        // 1..LH_MAX_LAYERS
  uint32_t kv_heads;      // 1..LH_MAX_KV_HEADS
  uint32_t head_dim;      // 1..LH_MAX_HEAD_DIM
  uint32_t kv_type;       // lh_kv_type; 0 (fp16) when left out of an aggregate initializer
  uint32_t partial_dim;   // p of the partial key rows, 0..head_dim; 0 (none) when left out
  uint32_t evict;         // 1: evict when a layer is full (needs capacity > sinks + recent); 0: LH_POOL_FULL
  uint32_t sinks;         // protected first positions (evict; the runner's default 4)
  uint32_t recent;        // protected newest tokens per layer (evict; the runner's default 64)
  uint32_t age_every;     // counters halve every age_every noted steps (evict; >= 1, the runner's default 32)
  uint32_t no_huge_pages; // 0 (default): a pool of >= 2 MiB starts on a 2 MiB boundary and is advised
                          // MADV_HUGEPAGE (Linux; THP 'madvise' mode backs it with 2 MiB pages, so scattered
                          // row reads miss the TLB far less); nonzero: plain 4 KiB pages (for A/B benchmarks)
  const uint32_t* layer_capacity;  // null (default): every layer gets the capacity the budget holds. Else
                                   // (layers): > 0 that layer's slots exactly (<= LH_MAX_TOKENS); 0: the
                                   // layer shares what the budget leaves after the fixed ones, equally
                                   // with the other 0 entries. Read during init only.
  const uint32_t* layer_ring;      // null (default): no ring. Else (layers): nonzero makes that layer a ring
                                   // (see "Rings"); it needs layer_capacity > 0 for the layer and evict 0.
                                   // Read during init only.
};

// Per-layer eviction bookkeeping (in the pool's allocation).
struct lh_kv_evict_layer {
  uint64_t evictions;      // tokens evicted from the layer since init/reset
  uint64_t appends;        // tokens appended since init/reset (the speculator checks "one since begin")
  int32_t newest;          // largest position stored (-1: empty)
  int32_t last_slot;       // slot of the latest appended token (-1: none)
  int32_t last_evicted;    // position evicted by the latest append (-1: that append evicted nothing)
  uint32_t pending;        // 0, or 1 + the victim reserved for the next append
  uint32_t age_tick;       // noted steps since the last halving
  uint32_t pad;
};

struct lh_kv_pool {
  // configuration, fixed by lh_kv_pool_init
  uint32_t layers;
  uint32_t kv_heads;
  uint32_t head_dim;
  uint32_t capacity;          // slots (tokens) of the largest layer (every layer's without layer_capacity)
  uint32_t layer_cap[LH_MAX_LAYERS];    // (layer) capacity(l), slots of each layer
  uint64_t layer_row0[LH_MAX_LAYERS];   // (layer) sum of capacity(i) for i < l: where layer l's slots start (per KV head block)
  uint64_t layer_prow0[LH_MAX_LAYERS];  // (layer) sum of capacity8(i) for i < l: the same in the partial-row tiles
  uint8_t ring[LH_MAX_LAYERS];          // (layer) 1: the layer is a ring
  uint32_t ring_start[LH_MAX_LAYERS];   // (layer) slot of row 0 (the oldest token held) of a ring; 0 otherwise
  uint32_t kv_type;           // lh_kv_type of the rows
  uint32_t elem_bytes;        // 2 (fp16), 4 (fp32) or 1 (int8)
  uint64_t bytes_per_token;   // bytes one token costs across all layers and heads (scales included)
  uint64_t byte_length;       // bytes of the allocation (<= budget)
  uint32_t huge_pages;        // 1 when the mapping was 2 MiB aligned and madvise(MADV_HUGEPAGE) succeeded

  // the one allocation; null when the pool is not initialised or has been freed
  void* base;
  uint32_t* length;  // (layer)
  void* k;           // (layer, kv_head, capacity, head_dim) fp16, fp32 or int8 (kv_type)
  void* v;           // (layer, kv_head, capacity, head_dim) fp16, fp32 or int8 (kv_type)
  int32_t* pos;      // (layer, kv_head, capacity)
  float* ks;         // (layer, kv_head, capacity) int8 key row scales, or null for fp16/fp32
  float* vs;         // (layer, kv_head, capacity) int8 value row scales, or null for fp16/fp32
  uint32_t partial_dim;   // 0: no partial rows
  uint16_t* kp;           // (layer, kv_head, capacity8 / 8, partial_dim, 8) fp16 tiles, or null
  float* proj;            // (layer, kv_head, head_dim, partial_dim), or null
  uint32_t* proj_set;     // (layer), or null
  uint32_t evict, sinks, recent, age_every;  // as configured (evict 0: the three are 0)
  uint32_t* counter;          // (layer, capacity), or null without evict
  uint8_t* cand;              // (layer, capacity), or null without evict
  lh_kv_evict_layer* ev;      // (layer), or null without evict
};

// Computes the capacity (slots of the largest layer) and allocation size a config yields, allocating
// nothing; layer_caps (if not null, (layers)) receives each layer's. LH_BAD_ARGUMENT: a dimension out of
// range, a budget too small for one token (in every shared layer), a budget that would hold more than
// LH_MAX_TOKENS slots, fixed layer capacities whose bytes exceed the budget or LH_MAX_TOKENS, evict
// with age_every 0 or a layer capacity that is not larger than sinks + recent. LH_OUT_OF_MEMORY: larger
// than the machine's physical memory.
lh_status lh_kv_pool_plan(const lh_kv_pool_config* cfg, uint32_t* capacity, uint64_t* byte_length, uint32_t* layer_caps = nullptr);

// Plans and maps the pool (MAP_PRIVATE|MAP_ANONYMOUS; pages are touched only when written); see
// no_huge_pages for the 2 MiB alignment and MADV_HUGEPAGE advice (advice only: a kernel that refuses
// it leaves huge_pages 0 and the pool works the same).
// On failure *pool is zeroed and nothing is allocated.
lh_status lh_kv_pool_init(lh_kv_pool* pool, const lh_kv_pool_config* cfg);

// Unmaps the pool and zeroes the struct. Idempotent; safe on a zeroed struct.
void lh_kv_pool_free(lh_kv_pool* pool);

// True while the pool holds its allocation.
inline bool lh_kv_pool_live(const lh_kv_pool* pool) { return pool != nullptr && pool->base != nullptr; }

// Forgets every token of every layer (the memory stays mapped). LH_BAD_ARGUMENT if freed.
lh_status lh_kv_pool_reset(lh_kv_pool* pool);

// Appends one token to `layer`: k and v are fp32 (kv_head, head_dim), stored as the pool's type
// (fp16: round to nearest even; int8: per-row scale, see "int8 rows"). `position` >= 0 is the
// token's position in the text. *slot (if not null)
// receives the slot used. LH_POOL_FULL when the layer has `capacity` tokens: nothing changes (a ring:
// the token overwrites its oldest row's slot instead).
// With evict: a full layer evicts (the reserved victim if any, else the rule above) and the token takes
// the victim's slot; LH_POOL_FULL if every slot is protected (the capacity check at init makes this
// impossible for increasing positions; positions that do not increase, which JS can pass, can reach it).
lh_status lh_kv_pool_append(lh_kv_pool* pool, uint32_t layer, const float* k, const float* v,
                            int32_t position, uint32_t* slot);

// Appends `tokens` consecutive tokens to `layer` in one call: k and v are fp32
// (tokens, kv_head, head_dim); token i gets position first_position + i. All or nothing:
// LH_POOL_FULL (nothing changes) when fewer than `tokens` slots are free (a ring never: each token
// past its capacity overwrites the oldest row, so a batch longer than the ring keeps its last
// capacity tokens; with evict, tokens == 1
// on a full layer evicts like lh_kv_pool_append; a batch of more never evicts). *first_slot (if not
// null) receives the slot of token 0. LH_BAD_ARGUMENT: tokens == 0, a null pointer, a layer out of
// range, a negative position or first_position + tokens - 1 past INT32_MAX.
lh_status lh_kv_pool_append_batch(lh_kv_pool* pool, uint32_t layer, const float* k, const float* v,
                                  uint32_t tokens, int32_t first_position, uint32_t* first_slot);

// Keeps the first `tokens` slots of every layer and forgets the rest (layers holding fewer keep
// theirs); a ring forgets its rows holding positions >= tokens. The memory stays mapped.
// LH_BAD_ARGUMENT if freed.
// With evict: forgets every slot holding a position >= tokens instead (the last slot moves into each
// hole, so slot order is no longer position order; tokens evicted earlier stay gone); a reserved
// victim is released. Not on the token path (rollback, edits).
lh_status lh_kv_pool_truncate(lh_kv_pool* pool, uint32_t tokens);

// Tokens stored in `layer` (0 for a freed pool or a layer out of range).
uint32_t lh_kv_pool_length(const lh_kv_pool* pool, uint32_t layer);

// Slots of `layer` (no checks: layer < layers of a live pool).
inline uint32_t lh_kv_pool_layer_capacity(const lh_kv_pool* pool, uint32_t layer) { return pool->layer_cap[layer]; }

// True when `layer` is a ring (no checks).
inline bool lh_kv_pool_is_ring(const lh_kv_pool* pool, uint32_t layer) { return pool->ring[layer] != 0; }

// Slot of row r (r < length: 0 the oldest token held) of `layer`: r itself for a plain layer. No checks.
inline uint32_t lh_kv_pool_row_slot(const lh_kv_pool* pool, uint32_t layer, uint32_t r) {
  if (pool->ring[layer] == 0) return r;
  const uint64_t s = static_cast<uint64_t>(pool->ring_start[layer]) + r;
  return static_cast<uint32_t>(s % pool->layer_cap[layer]);
}

// Whether slot s of `layer` holds a token: s < length, or (a ring) s is the slot of one of its rows. No
// checks on the pool or layer.
bool lh_kv_pool_slot_live(const lh_kv_pool* pool, uint32_t layer, uint32_t s);

// Empties one layer (non-evicting pools): its length and ring start go to 0, the memory stays. The
// runner restores a ring's checkpoint into it (lh_kv_pool_import_layer needs an empty layer).
// LH_BAD_ARGUMENT: freed or evicting pool, layer out of range.
lh_status lh_kv_pool_clear_layer(lh_kv_pool* pool, uint32_t layer);

// Index of slot s of (layer, kv_head) in the per-slot regions (pos, ks, vs); times head_dim, of its
// first element in k and v. No checks.
inline size_t lh_kv_pool_slot_index(const lh_kv_pool* pool, uint32_t layer, uint32_t kv_head, uint32_t s) {
  return static_cast<size_t>(pool->layer_row0[layer]) * pool->kv_heads + static_cast<size_t>(kv_head) * pool->layer_cap[layer] + s;
}

// Index of slot s of `layer` in the per-layer regions (counter, cand). No checks.
inline size_t lh_kv_pool_layer_slot(const lh_kv_pool* pool, uint32_t layer, uint32_t s) { return static_cast<size_t>(pool->layer_row0[layer]) + s; }

// Elements between the rows of two consecutive KV heads of `layer`: capacity(layer) * head_dim.
inline size_t lh_kv_pool_head_stride(const lh_kv_pool* pool, uint32_t layer) {
  return static_cast<size_t>(pool->layer_cap[layer]) * pool->head_dim;
}

// Start of a layer's key / value rows: (kv_head, capacity(layer), head_dim) of the pool's kv_type.
// Null if freed or out of range.
const void* lh_kv_pool_k_rows(const lh_kv_pool* pool, uint32_t layer);
const void* lh_kv_pool_v_rows(const lh_kv_pool* pool, uint32_t layer);

// Start of a layer's int8 row scales: (kv_head, capacity(layer)) fp32, indexed like the rows (scale of
// row s of KV head g at g * capacity(layer) + s). Null for fp16/fp32 pools, if freed or out of range.
const float* lh_kv_pool_k_scales(const lh_kv_pool* pool, uint32_t layer);
const float* lh_kv_pool_v_scales(const lh_kv_pool* pool, uint32_t layer);

// Start of a layer's slot positions: (kv_head, capacity(layer)) int32, indexed like the rows (the position of
// slot s of KV head g at g * capacity(layer) + s; every KV head holds the same). Null if freed or out of range.
const int32_t* lh_kv_pool_positions(const lh_kv_pool* pool, uint32_t layer);

// Bytes one K (or V) row of this pool costs, its int8 scale included (what a fetch moves).
inline size_t lh_kv_pool_row_bytes(const lh_kv_pool* pool) { return static_cast<size_t>(lh_kv_row_bytes(pool->kv_type, pool->head_dim)); }

enum lh_kv_part { LH_KV_KEY = 0, LH_KV_VALUE = 1 };

// Reads one stored row back as fp32: out is (head_dim); int8 rows are dequantised (scale * q_i). `slot` must
// hold a token: < length(layer), or a ring's slot of one of its rows.
// *position (if not null) receives the slot's token position.
lh_status lh_kv_pool_read(const lh_kv_pool* pool, lh_kv_part part, uint32_t layer, uint32_t kv_head,
                          uint32_t slot, float* out, int32_t* position);

// Sets layer's projection A[:, C] (proj: (kv_head, head_dim, partial_dim) fp32) and rebuilds the
// partial rows of every slot stored in the layer from the stored key rows. LH_BAD_ARGUMENT if the
// pool has no partial rows, the layer is out of range, or proj is null.
lh_status lh_kv_pool_set_projection(lh_kv_pool* pool, uint32_t layer, const float* proj);

// Slots per KV head of `layer` in the partial-row region: capacity(layer) rounded up to whole tiles of 8.
inline size_t lh_kv_pool_partial_slots(const lh_kv_pool* pool, uint32_t layer) {
  return (static_cast<size_t>(pool->layer_cap[layer]) + 7) & ~static_cast<size_t>(7);
}

// Index in kp of element i of the partial row of (layer, kv_head, slot s).
inline size_t lh_kv_pool_partial_at(const lh_kv_pool* pool, uint32_t layer, uint32_t kv_head, size_t s, size_t i) {
  const size_t tile0 = (static_cast<size_t>(pool->layer_prow0[layer]) * pool->kv_heads + kv_head * lh_kv_pool_partial_slots(pool, layer)) >> 3;
  return ((tile0 + (s >> 3)) * pool->partial_dim + i) * 8 + (s & 7);
}

// Start of a layer's partial key rows: (kv_head, capacity8(layer) / 8, partial_dim, 8) fp16 tiles. Null if none.
const uint16_t* lh_kv_pool_partial_rows(const lh_kv_pool* pool, uint32_t layer);

// Reads one partial key row back as fp32: out is (partial_dim).
lh_status lh_kv_pool_read_partial(const lh_kv_pool* pool, uint32_t layer, uint32_t kv_head, uint32_t slot, float* out);

// ---- eviction (pools created with evict = 1; LH_BAD_ARGUMENT otherwise) ----

// If `layer` is full and has no reserved victim, chooses one now (the rule above), sets its counter to
// 0 and its candidate flag to 0, and keeps it for the next append. No-op if the layer has room or a
// victim is reserved. LH_POOL_FULL if every slot is protected.
lh_status lh_kv_pool_reserve_victim(lh_kv_pool* pool, uint32_t layer);

// Counter += 1 for each of the n slots (< length(layer); others are ignored).
lh_status lh_kv_pool_note_selected(lh_kv_pool* pool, uint32_t layer, const int32_t* slots, uint32_t n);

// One step of `layer`: every age_every-th call halves all of the layer's counters.
lh_status lh_kv_pool_age(lh_kv_pool* pool, uint32_t layer);

// The speculator job's form of note_selected for `lists` lists of n slots (list g at slots + g·stride)
// and then age: it may run while the main thread appends the current token to the same layer, so it
// reads neither the layer's length nor the eviction state append() writes, and touches no counter
// of a slot >= len (len = the layer's length when the job began) or of `reserved` (the victim that
// append() overwrites and resets, -1 if none). Equal to note_selected ×lists + age otherwise: those
// two counters are 0 before and after (reserve_victim and append both zero them).
lh_status lh_kv_pool_note_job(lh_kv_pool* pool, uint32_t layer, uint32_t len, int32_t reserved, const int32_t* slots,
                              size_t stride, uint32_t lists, uint32_t n);

// Candidate flags of a layer: (capacity) uint8, 1 = candidate. Null without evict.
const uint8_t* lh_kv_pool_candidates(const lh_kv_pool* pool, uint32_t layer);

// Bookkeeping of a layer; null without evict or out of range.
const lh_kv_evict_layer* lh_kv_pool_evict_state(const lh_kv_pool* pool, uint32_t layer);

// Slot of the latest appended token of `layer` (without evict: length - 1); -1 if empty.
int32_t lh_kv_pool_last_slot(const lh_kv_pool* pool, uint32_t layer);

// ---- snapshots: one layer's slots packed into a flat section (KV snapshot files, issue 10) ----
//
// A layer's section for `tokens` slots [0, tokens), fields in this order, each packed with no
// padding (the section is a byte stream: it may sit at any alignment in a file or a JS buffer):
//   k   : (kv_head, tokens, head_dim)   the pool's raw elements (fp16 bits | fp32 | int8)
//   v   : (kv_head, tokens, head_dim)   same
//   ks  : (kv_head, tokens)             fp32 int8 key row scales (int8 pools only)
//   vs  : (kv_head, tokens)             fp32 int8 value row scales (int8 pools only)
//   pos : (tokens)                      int32 token positions (the same for every KV head)
// All little-endian (the host's order; the pool only builds for little-endian targets).
// Partial key rows are not stored: import rebuilds them from the key rows (the same arithmetic as
// lh_kv_pool_set_projection), so a snapshot does not depend on the skew's column choice.
// Evicting pools are refused (LH_BAD_ARGUMENT): their slot order is not position order and their
// counters/flags are not part of the section.
struct lh_kv_snapshot_layout {
  uint64_t k, v, ks, vs, pos;  // byte offsets of the fields (ks == vs == pos without int8)
  uint64_t total;              // bytes of the section
};

// Offsets of a `tokens`-slot section of this pool's shape and type. LH_BAD_ARGUMENT if the pool
// is freed, tokens > capacity (the largest layer's), or out is null.
lh_status lh_kv_pool_snapshot_layout(const lh_kv_pool* pool, uint32_t tokens, lh_kv_snapshot_layout* out);

// Packs rows [0, tokens) of `layer` into out (exactly out_bytes == layout.total bytes; any
// alignment): a plain layer's slots [0, tokens), a ring's oldest `tokens` rows in position order.
// LH_BAD_ARGUMENT (nothing written): freed or evicting pool, layer out of range,
// tokens > length(layer), out null with out_bytes > 0, or out_bytes != the section's size.
lh_status lh_kv_pool_export_layer(const lh_kv_pool* pool, uint32_t layer, uint32_t tokens, void* out, size_t out_bytes);

// The same for rows [first, first + tokens) (a ring's newest rows: its checkpoint, its snapshot).
// LH_BAD_ARGUMENT also when first + tokens > length(layer).
lh_status lh_kv_pool_export_rows(const lh_kv_pool* pool, uint32_t layer, uint32_t first, uint32_t tokens, void* out, size_t out_bytes);

// The inverse into an EMPTY layer: copies the section's rows (and int8 scales) into slots
// [0, tokens) (a ring: rows [0, tokens), ring start 0), writes every KV head's positions, sets length(layer) = tokens and, when the layer's
// projection is set, rebuilds the partial rows of those slots from the imported key rows.
// LH_BAD_ARGUMENT (the pool is unchanged): freed or evicting pool, layer out of range, length(layer)
// != 0, tokens > capacity(layer), data null with bytes > 0, bytes != the section's size, or positions that
// are negative or not strictly increasing (the pool's truncate and attention assume slot order is
// position order).
lh_status lh_kv_pool_import_layer(lh_kv_pool* pool, uint32_t layer, uint32_t tokens, const void* data, size_t bytes);

// First slot i whose position in a section breaks the import rule (negative, or <= the previous),
// or -1 when every position is fine. `pos` points at the section's pos field (any alignment).
int64_t lh_kv_snapshot_bad_position(const void* pos, uint32_t tokens);
