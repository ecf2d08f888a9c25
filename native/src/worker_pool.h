// A few persistent threads for the dense path's matmuls (dense_stage.cc).
//
// lh_parallel_ranges starts and joins pthreads per call (~10–30 µs each): fine for attention over
// thousands of rows, too slow for the ~8 matmuls of every layer of every decoded token (a 1 B model
// decodes a token in ~20 ms; 200 thread starts would cost a fifth of it). These workers stay: after
// a job each spins a short while for the next one (the matmuls of one stage follow each other within
// microseconds), then sleeps on a condition variable, so between tokens and while attention runs on
// the same cores they cost nothing.
//
// One caller at a time (the engine's JS thread); lh_worker_pool_run is not reentrant. The split is
// lh_parallel_ranges' (range r = [r·n/used, (r+1)·n/used), used = min(threads, items)), range 0 on
// the calling thread, so which thread runs an item never changes what it computes.
#pragma once

#include <cstdint>

#include "status.h"

struct lh_worker_pool;

// threads: 1..LH_MAX_RANGE_THREADS (parallel_ranges.h), threads − 1 workers started. Null when no
// memory; a worker that cannot be started leaves its ranges to the caller (work is always done).
lh_worker_pool* lh_worker_pool_create(uint32_t threads);

// Stops and joins the workers. Null: nothing.
void lh_worker_pool_free(lh_worker_pool* pool);

// Threads the pool runs ranges on (the caller included).
uint32_t lh_worker_pool_threads(const lh_worker_pool* pool);

// run(ctx, begin, end) for the ranges of `items` over min(parts, threads, items) threads (parts 0: all
// threads); returns when every range is done. pool null: one range, inline.
void lh_worker_pool_run(lh_worker_pool* pool, uint32_t items, uint32_t parts, void (*run)(void* ctx, uint32_t begin, uint32_t end), void* ctx);

// The process's shared pool: the dense stages' matmuls and the speculator when it runs inline
// (infinigen.h) take turns on the same threads, so a step never has more runnable threads than it asked
// for. lh_shared_pool_reserve grows it to `threads` (LH_OUT_OF_MEMORY if that fails; the old pool stays);
// lh_shared_pool_lock returns it (null before any reserve: lh_worker_pool_run then runs inline) and
// holds its lock until lh_shared_pool_unlock, so one caller uses it at a time.
lh_status lh_shared_pool_reserve(uint32_t threads);
lh_worker_pool* lh_shared_pool_lock();
void lh_shared_pool_unlock();
