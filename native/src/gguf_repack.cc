// GGUF blocks -> MatMulNBits, the same bits as app/engine/onnx/gguf-repack.ts (see the header).
// Each GGUF block (32 or 256 elements) is repacked on its own, so threads take contiguous block
// ranges; zero points are constant per type and filled per row.
#include "gguf_repack.h"

#include <pthread.h>

#include <cstring>

#include "fp16.h"

namespace {

// The reference converts fp16 through JS numbers, whose NaN is the canonical quiet NaN: match it.
inline float half_at(const uint8_t* p) {
  const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) return lh_bits_f32(0x7fc00000u);
  return lh_fp16_to_fp32(h);
}

struct type_info {
  uint32_t block_elements;  // GGUF block
  uint32_t block_bytes;
  uint32_t bits;
  uint32_t block_size;  // MatMulNBits block
  uint8_t zero_point;   // 0: the op's default, not emitted
  bool has_mins;
};

bool info_for(uint32_t type, type_info* t) {
  switch (type) {
    case LH_GGUF_Q8_0: *t = {32, 34, 8, 32, 0, false}; return true;
    case LH_GGUF_Q4_0: *t = {32, 18, 4, 32, 0, false}; return true;
    case LH_GGUF_Q4_1: *t = {32, 20, 4, 32, 8, true}; return true;
    case LH_GGUF_Q5_0: *t = {32, 22, 8, 32, 16, false}; return true;
    case LH_GGUF_Q5_1: *t = {32, 24, 8, 32, 16, true}; return true;
    case LH_GGUF_Q4_K: *t = {256, 144, 4, 32, 8, true}; return true;
    case LH_GGUF_Q5_K: *t = {256, 176, 8, 32, 16, true}; return true;
    case LH_GGUF_Q6_K: *t = {256, 210, 8, 16, 32, false}; return true;
    case LH_GGUF_MXFP4: *t = {32, 17, 8, 32, 0, false}; return true;
    default: return false;
  }
}

struct job {
  uint32_t type;
  const uint8_t* raw;
  uint8_t* b;
  float* scales;
  float* mins;
  size_t first;  // GGUF blocks [first, end)
  size_t end;
};

void q8_0(const job& j) {
  for (size_t blk = j.first; blk < j.end; blk++) {
    const uint8_t* s = j.raw + blk * 34;
    j.scales[blk] = half_at(s);
    uint8_t* d = j.b + blk * 32;
    for (int i = 0; i < 32; i++) d[i] = static_cast<uint8_t>(s[2 + i] ^ 0x80u);  // int8 q -> q + 128
  }
}

// Q4_0 / Q4_1 quants: element e of the block in byte e % 16, high nibble when e >= 16.
inline void nibbles32(const uint8_t* q, uint8_t* d) {
  for (int i = 0; i < 8; i++) d[i] = static_cast<uint8_t>((q[2 * i] & 0x0f) | ((q[2 * i + 1] & 0x0f) << 4));
  for (int i = 0; i < 8; i++) d[8 + i] = static_cast<uint8_t>((q[2 * i] >> 4) | (q[2 * i + 1] & 0xf0));
}

void q4_0(const job& j) {
  for (size_t blk = j.first; blk < j.end; blk++) {
    const uint8_t* s = j.raw + blk * 18;
    j.scales[blk] = half_at(s);
    nibbles32(s + 2, j.b + blk * 16);
  }
}

void q4_1(const job& j) {
  for (size_t blk = j.first; blk < j.end; blk++) {
    const uint8_t* s = j.raw + blk * 20;
    const float d = half_at(s);
    j.scales[blk] = d;
    j.mins[blk] = static_cast<float>(-static_cast<double>(half_at(s + 2)) - 8.0 * static_cast<double>(d));
    nibbles32(s + 4, j.b + blk * 16);
  }
}

void q5(const job& j, bool with_min) {
  const size_t bytes = with_min ? 24 : 22;
  for (size_t blk = j.first; blk < j.end; blk++) {
    const uint8_t* s = j.raw + blk * bytes;
    const float d = half_at(s);
    j.scales[blk] = d;
    if (with_min) j.mins[blk] = static_cast<float>(-static_cast<double>(half_at(s + 2)) - 16.0 * static_cast<double>(d));
    const uint8_t* qhp = s + (with_min ? 4 : 2);
    const uint32_t qh = static_cast<uint32_t>(qhp[0]) | (static_cast<uint32_t>(qhp[1]) << 8) | (static_cast<uint32_t>(qhp[2]) << 16) |
                        (static_cast<uint32_t>(qhp[3]) << 24);
    const uint8_t* q = qhp + 4;
    uint8_t* out = j.b + blk * 32;
    for (int i = 0; i < 16; i++) {
      out[i] = static_cast<uint8_t>((q[i] & 0x0f) | (((qh >> i) & 1u) << 4));
      out[i + 16] = static_cast<uint8_t>((q[i] >> 4) | (((qh >> (i + 16)) & 1u) << 4));
    }
  }
}

// Q4_K / Q5_K: 6-bit scale and min of sub-block s from the 12 packed bytes p.
inline void scale_min_k4(int s, const uint8_t* p, uint32_t* sc, uint32_t* m) {
  if (s < 4) {
    *sc = p[s] & 63u;
    *m = p[s + 4] & 63u;
  } else {
    const uint32_t hi = p[s + 4];
    *sc = (hi & 0x0fu) | ((static_cast<uint32_t>(p[s - 4]) >> 6) << 4);
    *m = (hi >> 4) | ((static_cast<uint32_t>(p[s]) >> 6) << 4);
  }
}

void k45(const job& j, bool five) {
  const size_t bytes = five ? 176 : 144;
  const double mid = five ? 16.0 : 8.0;
  for (size_t blk = j.first; blk < j.end; blk++) {
    const uint8_t* s = j.raw + blk * bytes;
    const float d = half_at(s);
    const float dmin = half_at(s + 2);
    for (int sub = 0; sub < 8; sub++) {
      uint32_t sc, m;
      scale_min_k4(sub, s + 4, &sc, &m);
      const float scale = d * static_cast<float>(sc);  // fround(d·sc): an exact product rounded once
      j.scales[blk * 8 + sub] = scale;
      j.mins[blk * 8 + sub] = static_cast<float>(static_cast<double>(dmin * static_cast<float>(m)) - mid * static_cast<double>(scale));
    }
    const uint8_t* qh = s + 16;
    const uint8_t* qs = s + (five ? 48 : 16);
    for (int sub = 0; sub < 8; sub += 2, qs += 32) {
      if (five) {
        uint8_t* out = j.b + blk * 256 + sub * 32;
        const uint8_t lo_bit = static_cast<uint8_t>(1u << sub);
        const uint8_t hi_bit = static_cast<uint8_t>(2u << sub);
        for (int l = 0; l < 32; l++) {
          out[l] = static_cast<uint8_t>((qs[l] & 0x0f) | ((qh[l] & lo_bit) ? 16 : 0));
          out[32 + l] = static_cast<uint8_t>((qs[l] >> 4) | ((qh[l] & hi_bit) ? 16 : 0));
        }
      } else {
        // codes base+l = low nibble of qs[l], base+32+l = high nibble; packed two per byte
        uint8_t* out = j.b + (blk * 256 + sub * 32) / 2;
        for (int l = 0; l < 16; l++) {
          out[l] = static_cast<uint8_t>((qs[2 * l] & 0x0f) | ((qs[2 * l + 1] & 0x0f) << 4));
          out[16 + l] = static_cast<uint8_t>((qs[2 * l] >> 4) | (qs[2 * l + 1] & 0xf0));
        }
      }
    }
  }
}

void q6_k(const job& j) {
  for (size_t blk = j.first; blk < j.end; blk++) {
    const uint8_t* s = j.raw + blk * 210;
    const float d = half_at(s + 208);
    for (int i = 0; i < 16; i++) j.scales[blk * 16 + i] = d * static_cast<float>(static_cast<int8_t>(s[192 + i]));
    for (int h = 0; h < 2; h++) {
      const uint8_t* ql = s + h * 64;
      const uint8_t* qh = s + 128 + h * 32;
      uint8_t* out = j.b + blk * 256 + h * 128;
      for (int l = 0; l < 32; l++) {
        const uint32_t hb = qh[l];
        out[l] = static_cast<uint8_t>((ql[l] & 0x0f) | ((hb & 3u) << 4));
        out[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0f) | (((hb >> 2) & 3u) << 4));
        out[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((hb >> 4) & 3u) << 4));
        out[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((hb >> 6) & 3u) << 4));
      }
    }
  }
}

// MXFP4: e (E8M0) | qs[16]; value kv[nibble]·2^(e−128) -> code kv + 128 under the default zero point,
// scale 2^(e−128) (ggml's GGML_E8M0_TO_FP32_HALF: fp32 subnormal for e < 2).
void mxfp4(const job& j) {
  static constexpr uint8_t kCodes[16] = {128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116};
  for (size_t blk = j.first; blk < j.end; blk++) {
    const uint8_t* s = j.raw + blk * 17;
    const uint32_t bits = s[0] < 2 ? 0x00200000u << s[0] : static_cast<uint32_t>(s[0] - 1) << 23;
    std::memcpy(&j.scales[blk], &bits, 4);
    uint8_t* d = j.b + blk * 32;
    for (int i = 0; i < 16; i++) {
      d[i] = kCodes[s[1 + i] & 0x0f];
      d[i + 16] = kCodes[s[1 + i] >> 4];
    }
  }
}

void run_job(const job& j) {
  switch (j.type) {
    case LH_GGUF_Q8_0: q8_0(j); break;
    case LH_GGUF_Q4_0: q4_0(j); break;
    case LH_GGUF_Q4_1: q4_1(j); break;
    case LH_GGUF_Q5_0: q5(j, false); break;
    case LH_GGUF_Q5_1: q5(j, true); break;
    case LH_GGUF_Q4_K: k45(j, false); break;
    case LH_GGUF_Q5_K: k45(j, true); break;
    case LH_GGUF_Q6_K: q6_k(j); break;
    case LH_GGUF_MXFP4: mxfp4(j); break;
    default: break;
  }
}

void* run_thread(void* arg) {
  run_job(*static_cast<const job*>(arg));
  return nullptr;
}

// a·b into *out; false on overflow
bool mul(size_t a, size_t b, size_t* out) {
  if (a != 0 && b > SIZE_MAX / a) return false;
  *out = a * b;
  return true;
}

}  // namespace

lh_status lh_gguf_repack_sizes(uint32_t type, uint64_t n, uint64_t k, lh_repack_sizes* out) {
  type_info t;
  if (out == nullptr || !info_for(type, &t) || n < 1 || k < 1 || k % 32 != 0 || k % t.block_size != 0) return LH_BAD_ARGUMENT;
  if (n > SIZE_MAX || k > SIZE_MAX) return LH_BAD_ARGUMENT;
  size_t elements;
  if (!mul(static_cast<size_t>(n), static_cast<size_t>(k), &elements) || elements % t.block_elements != 0) return LH_BAD_ARGUMENT;
  lh_repack_sizes s{};
  s.bits = t.bits;
  s.block_size = t.block_size;
  if (!mul(elements / t.block_elements, t.block_bytes, &s.raw_bytes)) return LH_BAD_ARGUMENT;
  s.b_bytes = t.bits == 8 ? elements : elements / 2;
  s.scales = elements / t.block_size;
  const size_t blocks_per_row = static_cast<size_t>(k) / t.block_size;
  if (t.zero_point != 0) {
    const size_t per_row = t.bits == 8 ? blocks_per_row : (blocks_per_row + 1) / 2;
    if (!mul(static_cast<size_t>(n), per_row, &s.zero_points)) return LH_BAD_ARGUMENT;
  }
  s.mins = t.has_mins ? elements / 32 : 0;
  *out = s;
  return LH_OK;
}

lh_status lh_gguf_repack(uint32_t type, const uint8_t* raw, size_t raw_bytes, uint64_t n, uint64_t k, uint32_t threads, uint8_t* b,
                         float* scales, uint8_t* zero_points, float* mins) {
  lh_repack_sizes s;
  if (lh_gguf_repack_sizes(type, n, k, &s) != LH_OK) return LH_BAD_ARGUMENT;
  if (threads < 1 || threads > LH_REPACK_MAX_THREADS || raw == nullptr || raw_bytes != s.raw_bytes || b == nullptr || scales == nullptr ||
      (s.zero_points != 0 && zero_points == nullptr) || (s.mins != 0 && mins == nullptr))
    return LH_BAD_ARGUMENT;
  type_info t;
  if (!info_for(type, &t)) return LH_BAD_ARGUMENT;
  const size_t blocks = raw_bytes / t.block_bytes;

  if (s.zero_points != 0) {
    const uint8_t zp = t.zero_point;
    if (t.bits == 8) {
      std::memset(zero_points, zp, s.zero_points);
    } else {
      const size_t blocks_per_row = static_cast<size_t>(k) / t.block_size;
      const size_t per_row = (blocks_per_row + 1) / 2;
      std::memset(zero_points, zp | (zp << 4), s.zero_points);
      if (blocks_per_row % 2 == 1)
        for (size_t r = 0; r < static_cast<size_t>(n); r++) zero_points[r * per_row + per_row - 1] = zp;  // padding nibble 0
    }
  }

  // At least 256 KiB of raw bytes per thread (~0.1 ms of work): a thread start costs ~0.03 ms.
  const size_t min_blocks = (size_t{1} << 18) / t.block_bytes + 1;
  size_t parts = threads;
  if (blocks / min_blocks < parts) parts = blocks / min_blocks > 0 ? blocks / min_blocks : 1;
  job jobs[LH_REPACK_MAX_THREADS];
  for (size_t p = 0; p < parts; p++) {
    jobs[p] = job{type, raw, b, scales, mins, blocks * p / parts, blocks * (p + 1) / parts};
  }
  pthread_t tids[LH_REPACK_MAX_THREADS];
  bool started[LH_REPACK_MAX_THREADS] = {};
  for (size_t p = 1; p < parts; p++) started[p] = pthread_create(&tids[p], nullptr, run_thread, &jobs[p]) == 0;
  run_job(jobs[0]);
  for (size_t p = 1; p < parts; p++) {
    if (started[p])
      pthread_join(tids[p], nullptr);
    else
      run_job(jobs[p]);  // no thread: do its share here
  }
  return LH_OK;
}
