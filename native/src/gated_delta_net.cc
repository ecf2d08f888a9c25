// lh_gdn_run: see gated_delta_net.h.
#include "gated_delta_net.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "parallel_ranges.h"
#include "worker_pool.h"

namespace {

constexpr uint32_t kDefaultChunk = 64;

// A 64-byte aligned buffer that only grows (the process's: runs hold the shared pool's lock).
struct Buf {
  float* p = nullptr;
  size_t cap = 0;  // floats
  bool reserve(size_t floats) {
    if (floats <= cap) return true;
    void* q = nullptr;
    const size_t want = (floats + 15) & ~static_cast<size_t>(15);
    if (posix_memalign(&q, 64, want * sizeof(float)) != 0) return false;
    std::free(p);
    p = static_cast<float*>(q);
    cap = want;
    return true;
  }
};
Buf g_x;        // [T, C] the convolved, activated, L2-normed q|k|v
Buf g_scratch;  // [Hv, per-head scratch] the chunked form's (head_scratch_floats)

// a·b over n floats in 8 partial sums (a fixed order: the same bits whatever thread runs it)
inline float dot(const float* a, const float* b, uint32_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (uint32_t k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  for (; i < n; ++i) s[i & 7] += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

struct Job {
  lh_gdn_shape sh;
  const lh_gdn_io* io;
  uint32_t C, chunk;
  float* x;        // [T, C]
  float* scratch;  // [Hv, per_head]
  size_t per_head;
};

// Floats of one head's chunk scratch: Λ [n], k·k and q·k [n, n] each, Δ, S0ᵀk, S0ᵀq [n, D] each.
size_t head_scratch_floats(uint32_t n, uint32_t D) { return n + 2 * static_cast<size_t>(n) * n + 3 * static_cast<size_t>(n) * D; }

// Row r of tail ++ qkv ([(K−1) + T, C]).
inline const float* in_row(const Job& j, uint32_t r) {
  const uint32_t K1 = j.sh.conv_kernel - 1;
  const float* tail = j.io->state + static_cast<size_t>(j.sh.value_heads) * j.sh.head_dim * j.sh.head_dim;
  return r < K1 ? tail + static_cast<size_t>(r) * j.C : j.io->qkv + static_cast<size_t>(r - K1) * j.C;
}

// Tokens [begin, end): the convolution, silu, and the L2 norm of each q and k head.
void run_conv(void* ctx, uint32_t begin, uint32_t end) {
  const Job& j = *static_cast<const Job*>(ctx);
  const uint32_t C = j.C, K = j.sh.conv_kernel, D = j.sh.head_dim, Hk = j.sh.key_heads;
  const float* w = j.io->conv;
  for (uint32_t t = begin; t < end; ++t) {
    float* x = j.x + static_cast<size_t>(t) * C;
    for (uint32_t c = 0; c < C; ++c) {
      float acc = 0;
      for (uint32_t k = 0; k < K; ++k) acc += in_row(j, t + k)[c] * w[static_cast<size_t>(c) * K + k];
      x[c] = silu(acc);
    }
    for (uint32_t h = 0; h < 2 * Hk; ++h) {  // q heads, then k heads
      float* v = x + static_cast<size_t>(h) * D;
      double ss = 0;
      for (uint32_t i = 0; i < D; ++i) ss += static_cast<double>(v[i]) * v[i];
      const double norm = std::sqrt(ss);
      const float inv = static_cast<float>(1.0 / (norm > j.sh.eps ? norm : static_cast<double>(j.sh.eps)));
      for (uint32_t i = 0; i < D; ++i) v[i] *= inv;
    }
  }
}

// Head h, token by token: the exact recurrence. o (unnormed, scaled) into out's head columns.
void head_tokens(const Job& j, uint32_t h) {
  const uint32_t D = j.sh.head_dim, Hk = j.sh.key_heads, Hv = j.sh.value_heads, C = j.C, T = j.io->tokens, V = Hv * D;
  const uint32_t kh = h % Hk;  // llama.cpp tiles the key heads over the value heads
  float* m = j.io->state + static_cast<size_t>(h) * D * D;
  float* delta = j.scratch + h * j.per_head;  // [D]
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (uint32_t t = 0; t < T; ++t) {
    const float* x = j.x + static_cast<size_t>(t) * C;
    const float *q = x + kh * D, *k = x + (Hk + kh) * D, *v = x + 2 * Hk * D + h * D;
    const float g = std::exp(j.io->decay[static_cast<size_t>(t) * Hv + h]), b = j.io->beta[static_cast<size_t>(t) * Hv + h];
    for (uint32_t r = 0; r < D; ++r) {
      float* row = m + static_cast<size_t>(r) * D;
      for (uint32_t i = 0; i < D; ++i) row[i] *= g;
      delta[r] = (v[r] - dot(row, k, D)) * b;
    }
    float* o = j.io->out + static_cast<size_t>(t) * V + h * D;
    for (uint32_t r = 0; r < D; ++r) {
      float* row = m + static_cast<size_t>(r) * D;
      const float dr = delta[r];
      for (uint32_t i = 0; i < D; ++i) row[i] += k[i] * dr;
      o[r] = dot(row, q, D) * scale;
    }
  }
}

// Head h in chunks of j.chunk tokens (gated_delta_net.h's chunked form), the state carried across them.
void head_chunks(const Job& j, uint32_t h) {
  const uint32_t D = j.sh.head_dim, Hk = j.sh.key_heads, Hv = j.sh.value_heads, C = j.C, T = j.io->tokens, V = Hv * D, N = j.chunk;
  const uint32_t kh = h % Hk;
  float* m = j.io->state + static_cast<size_t>(h) * D * D;
  float* lam = j.scratch + h * j.per_head;  // [N]
  float* kk = lam + N;                      // [N, N] k_t·k_s, s < t
  float* qk = kk + static_cast<size_t>(N) * N;  // [N, N] q_t·k_s, s ≤ t
  float* dl = qk + static_cast<size_t>(N) * N;  // [N, D] Δ
  float* sk = dl + static_cast<size_t>(N) * D;  // [N, D] S0ᵀk_t
  float* sq = sk + static_cast<size_t>(N) * D;  // [N, D] S0ᵀq_t
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const uint32_t qo = kh * D, ko = (Hk + kh) * D, vo = 2 * Hk * D + h * D;
  for (uint32_t t0 = 0; t0 < T; t0 += N) {
    const uint32_t n = T - t0 < N ? T - t0 : N;
    const float* x0 = j.x + static_cast<size_t>(t0) * C;
    auto krow = [&](uint32_t t) { return x0 + static_cast<size_t>(t) * C + ko; };
    auto qrow = [&](uint32_t t) { return x0 + static_cast<size_t>(t) * C + qo; };
    double acc = 0;
    for (uint32_t t = 0; t < n; ++t) {
      acc += j.io->decay[static_cast<size_t>(t0 + t) * Hv + h];
      lam[t] = static_cast<float>(acc);
    }
    // S0ᵀk_t and S0ᵀq_t: row r of M is column r of S0, so each is a dot product per (r, t)
    for (uint32_t r = 0; r < D; ++r) {
      const float* row = m + static_cast<size_t>(r) * D;
      for (uint32_t t = 0; t < n; ++t) {
        sk[static_cast<size_t>(t) * D + r] = dot(row, krow(t), D);
        sq[static_cast<size_t>(t) * D + r] = dot(row, qrow(t), D);
      }
    }
    for (uint32_t t = 0; t < n; ++t)
      for (uint32_t s = 0; s <= t; ++s) {
        if (s < t) kk[static_cast<size_t>(t) * N + s] = dot(krow(t), krow(s), D);
        qk[static_cast<size_t>(t) * N + s] = dot(qrow(t), krow(s), D);
      }
    // Δ by forward substitution, then o_t from S0 and the Δ so far
    for (uint32_t t = 0; t < n; ++t) {
      const float b = j.io->beta[static_cast<size_t>(t0 + t) * Hv + h], et = std::exp(lam[t]);
      const float* v = x0 + static_cast<size_t>(t) * C + vo;
      float* d = dl + static_cast<size_t>(t) * D;
      const float* skt = sk + static_cast<size_t>(t) * D;
      for (uint32_t r = 0; r < D; ++r) d[r] = b * (v[r] - et * skt[r]);
      for (uint32_t s = 0; s < t; ++s) {
        const float c = b * std::exp(lam[t] - lam[s]) * kk[static_cast<size_t>(t) * N + s];
        const float* ds = dl + static_cast<size_t>(s) * D;
        for (uint32_t r = 0; r < D; ++r) d[r] -= c * ds[r];
      }
      float* o = j.io->out + static_cast<size_t>(t0 + t) * V + h * D;
      const float* sqt = sq + static_cast<size_t>(t) * D;
      for (uint32_t r = 0; r < D; ++r) o[r] = et * sqt[r];
      for (uint32_t s = 0; s <= t; ++s) {
        const float c = std::exp(lam[t] - lam[s]) * qk[static_cast<size_t>(t) * N + s];
        const float* ds = dl + static_cast<size_t>(s) * D;
        for (uint32_t r = 0; r < D; ++r) o[r] += c * ds[r];
      }
      for (uint32_t r = 0; r < D; ++r) o[r] *= scale;
    }
    // S_n = e^{Λ_{n−1}}·S0 + Σ_s e^{Λ_{n−1}−Λ_s}·k_s·Δ_sᵀ  (row r of M: column r of S)
    const float last = lam[n - 1], el = std::exp(last);
    for (uint32_t r = 0; r < D; ++r) {
      float* row = m + static_cast<size_t>(r) * D;
      for (uint32_t i = 0; i < D; ++i) row[i] *= el;
      for (uint32_t s = 0; s < n; ++s) {
        const float c = std::exp(last - lam[s]) * dl[static_cast<size_t>(s) * D + r];
        const float* k = krow(s);
        for (uint32_t i = 0; i < D; ++i) row[i] += c * k[i];
      }
    }
  }
}

// Heads [begin, end): the recurrence, then each token's gated RMSNorm of the head's output.
void run_heads(void* ctx, uint32_t begin, uint32_t end) {
  const Job& j = *static_cast<const Job*>(ctx);
  const uint32_t D = j.sh.head_dim, V = j.sh.value_heads * D, T = j.io->tokens;
  for (uint32_t h = begin; h < end; ++h) {
    if (j.chunk <= 1 || T == 1) head_tokens(j, h);
    else head_chunks(j, h);
    for (uint32_t t = 0; t < T; ++t) {
      float* o = j.io->out + static_cast<size_t>(t) * V + h * D;
      const float* z = j.io->z + static_cast<size_t>(t) * V + h * D;
      double ss = 0;
      for (uint32_t r = 0; r < D; ++r) ss += static_cast<double>(o[r]) * o[r];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / D + j.sh.eps));
      for (uint32_t r = 0; r < D; ++r) o[r] = o[r] * inv * j.io->norm[r] * silu(z[r]);
    }
  }
}

}  // namespace

uint64_t lh_gdn_state_floats(const lh_gdn_shape* s) {
  const uint64_t C = (2ull * s->key_heads + s->value_heads) * s->head_dim;
  return static_cast<uint64_t>(s->value_heads) * s->head_dim * s->head_dim + (s->conv_kernel - 1ull) * C;
}

lh_status lh_gdn_run(const lh_gdn_shape* sh, const lh_gdn_io* io, uint32_t chunk, uint32_t threads) {
  if (sh == nullptr || io == nullptr || io->tokens == 0 || sh->key_heads == 0 || sh->value_heads == 0 || sh->head_dim == 0 || sh->conv_kernel == 0 ||
      sh->value_heads % sh->key_heads != 0 || !(sh->eps >= 0) || threads == 0 || threads > LH_MAX_RANGE_THREADS)
    return LH_BAD_ARGUMENT;
  if (io->qkv == nullptr || io->z == nullptr || io->beta == nullptr || io->decay == nullptr || io->conv == nullptr || io->norm == nullptr || io->state == nullptr ||
      io->out == nullptr)
    return LH_BAD_ARGUMENT;
  lh_status r = lh_shared_pool_reserve(threads);
  if (r != LH_OK) return r;
  const uint32_t T = io->tokens, D = sh->head_dim, C = (2 * sh->key_heads + sh->value_heads) * D, K1 = sh->conv_kernel - 1;
  const uint32_t n = chunk == 0 ? kDefaultChunk : chunk;
  const size_t per_head = n <= 1 ? D : head_scratch_floats(n < T ? n : T, D);
  lh_worker_pool* pool = lh_shared_pool_lock();
  if (!g_x.reserve(static_cast<size_t>(T) * C) || !g_scratch.reserve(per_head * sh->value_heads)) {
    lh_shared_pool_unlock();
    return LH_OUT_OF_MEMORY;
  }
  Job job{*sh, io, C, n < T ? n : T, g_x.p, g_scratch.p, per_head};
  lh_worker_pool_run(pool, T, T >= 8 ? threads : 1, run_conv, &job);
  // the tail moves on: the last K−1 rows of tail ++ qkv (a row still in the tail moves towards its start)
  float* tail = io->state + static_cast<size_t>(sh->value_heads) * D * D;
  for (uint32_t i = 0; i < K1; ++i) std::memmove(tail + static_cast<size_t>(i) * C, in_row(job, T + i), static_cast<size_t>(C) * sizeof(float));
  lh_worker_pool_run(pool, sh->value_heads, threads, run_heads, &job);
  lh_shared_pool_unlock();
  return LH_OK;
}
