// lh_worker_pool: see worker_pool.h.
#include "worker_pool.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "parallel_ranges.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LH_PAUSE() _mm_pause()
#else
#define LH_PAUSE() ((void)0)
#endif

namespace {
// ~50–100 µs of pause instructions (Zen 4: a few dozen cycles each): long enough
// to cover the gap between two matmuls of one stage, short enough not to hold a core during attention.
constexpr uint32_t kSpinRounds = 2000;
}  // namespace

struct Worker {
  lh_worker_pool* pool;
  uint32_t index;  // 1..threads−1: the range it runs
  pthread_t id;
  bool started;
};

struct lh_worker_pool {
  uint32_t threads;
  Worker workers[LH_MAX_RANGE_THREADS];
  // the job: written by the caller before `generation` is bumped (release), read by the workers after
  // they see the new generation (acquire)
  void (*run)(void*, uint32_t, uint32_t);
  void* ctx;
  uint32_t items, used;
  std::atomic<uint64_t> generation{0};
  std::atomic<uint32_t> pending{0};  // live workers that have not finished with the current job
  std::atomic<bool> stopping{false};
  std::atomic<uint32_t> sleepers{0};
  pthread_mutex_t mutex;
  pthread_cond_t wake;
};

namespace {
void run_range(lh_worker_pool* p, uint32_t r) {
  const uint32_t b = static_cast<uint32_t>(static_cast<uint64_t>(r) * p->items / p->used);
  const uint32_t e = static_cast<uint32_t>(static_cast<uint64_t>(r + 1) * p->items / p->used);
  p->run(p->ctx, b, e);
}

void* worker_main(void* arg) {
  Worker* w = static_cast<Worker*>(arg);
  lh_worker_pool* p = w->pool;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = p->generation.load(std::memory_order_acquire);
    for (uint32_t spin = 0; g == seen && spin < kSpinRounds && !p->stopping.load(std::memory_order_relaxed); ++spin) {
      LH_PAUSE();
      g = p->generation.load(std::memory_order_acquire);
    }
    if (g == seen) {
      pthread_mutex_lock(&p->mutex);
      p->sleepers.fetch_add(1);  // seq_cst with the caller's bump and read below: no lost wake-up
      while ((g = p->generation.load()) == seen && !p->stopping.load(std::memory_order_relaxed))
        pthread_cond_wait(&p->wake, &p->mutex);
      p->sleepers.fetch_sub(1, std::memory_order_relaxed);
      pthread_mutex_unlock(&p->mutex);
    }
    if (p->stopping.load(std::memory_order_acquire)) return nullptr;
    seen = g;
    if (w->index < p->used) run_range(p, w->index);
    // every live worker acknowledges every job, its range run or not: the caller changes the job's
    // fields only after all of them are past reading them
    p->pending.fetch_sub(1, std::memory_order_acq_rel);
  }
}
}  // namespace

lh_worker_pool* lh_worker_pool_create(uint32_t threads) {
  if (threads < 1) threads = 1;
  if (threads > LH_MAX_RANGE_THREADS) threads = LH_MAX_RANGE_THREADS;
  lh_worker_pool* p = new (std::nothrow) lh_worker_pool;
  if (p == nullptr) return nullptr;
  p->threads = threads;
  p->run = nullptr;
  p->ctx = nullptr;
  p->items = p->used = 0;
  pthread_mutex_init(&p->mutex, nullptr);
  pthread_cond_init(&p->wake, nullptr);
  for (uint32_t i = 1; i < threads; ++i) {
    Worker& w = p->workers[i];
    w.pool = p;
    w.index = i;
    w.started = pthread_create(&w.id, nullptr, worker_main, &w) == 0;
  }
  return p;
}

void lh_worker_pool_free(lh_worker_pool* p) {
  if (p == nullptr) return;
  pthread_mutex_lock(&p->mutex);
  p->stopping.store(true, std::memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mutex);
  for (uint32_t i = 1; i < p->threads; ++i)
    if (p->workers[i].started) pthread_join(p->workers[i].id, nullptr);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mutex);
  delete p;
}

uint32_t lh_worker_pool_threads(const lh_worker_pool* p) { return p == nullptr ? 1 : p->threads; }

void lh_worker_pool_run(lh_worker_pool* p, uint32_t items, uint32_t parts, void (*run)(void* ctx, uint32_t begin, uint32_t end), void* ctx) {
  if (items == 0) return;
  uint32_t used = p == nullptr ? 1 : p->threads;
  if (parts != 0 && parts < used) used = parts;
  if (items < used) used = items;
  if (used == 1) {
    run(ctx, 0, items);
    return;
  }
  p->run = run;
  p->ctx = ctx;
  p->items = items;
  p->used = used;
  // every live worker acknowledges the job (worker_main); the ranges of workers that never started
  // are run here, after range 0
  uint32_t live = 0;
  for (uint32_t i = 1; i < p->threads; ++i) live += p->workers[i].started ? 1 : 0;
  p->pending.store(live, std::memory_order_relaxed);
  p->generation.fetch_add(1);
  if (p->sleepers.load() > 0) {
    pthread_mutex_lock(&p->mutex);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
  }
  run_range(p, 0);
  for (uint32_t i = 1; i < used; ++i)
    if (!p->workers[i].started) run_range(p, i);
  for (uint32_t spin = 0; p->pending.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 100000) LH_PAUSE();
    else sched_yield();
  }
}

namespace {
pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;
lh_worker_pool* g_shared = nullptr;  // grown to the most threads anyone reserved
}  // namespace

lh_status lh_shared_pool_reserve(uint32_t threads) {
  lh_status r = LH_OK;
  pthread_mutex_lock(&g_shared_lock);
  if (lh_worker_pool_threads(g_shared) < threads) {
    lh_worker_pool* bigger = lh_worker_pool_create(threads);
    if (bigger == nullptr) r = LH_OUT_OF_MEMORY;
    else {
      lh_worker_pool_free(g_shared);
      g_shared = bigger;
    }
  }
  pthread_mutex_unlock(&g_shared_lock);
  return r;
}

lh_worker_pool* lh_shared_pool_lock() {
  pthread_mutex_lock(&g_shared_lock);
  return g_shared;
}

void lh_shared_pool_unlock() { pthread_mutex_unlock(&g_shared_lock); }
