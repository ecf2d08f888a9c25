// Dot kernels for MXFP4 (quant_dot.h), the expert weights of gpt-oss and of llama.cpp's MXFP4_MOE
// files: the scalar reference, AVX-512 (F/BW/VL/DQ + VNNI) and AVX2 (+FMA, F16C).
//
// Weight block (ggml-common.h block_mxfp4, ggml type 39): 32 elements in 17 bytes,
//   uint8 e (E8M0: a bare exponent) | uint8 qs[16] (element j in the low nibble of qs[j], j+16 in the high)
//   x = kv[nibble] · 2^(e − 128)
// where kv is E2M1 doubled as integers (ggml's kvalues_mxfp4) {0, 1, 2, 3, 4, 6, 8, 12, 0, −1, −2,
// −3, −4, −6, −8, −12} and 2^(e − 128) is ggml's GGML_E8M0_TO_FP32_HALF(e) (half of E8M0's 2^(e − 127),
// which undoes the doubling): subnormal for e < 2, 2^-128 / 2^-127 exactly.
//
// Activations: Q8_0's (quant_dot_q.cc): int8 q [k], float d [k/32] (rounded to fp16 as ggml's
// block_q8_0.d), int32 −8·Σq [k/32], int32 −128·Σq [k/32], by the same quantizer (the kernels
// take Q8_0's quantize_act of the same impl), so a block's integer dot Σ kv·q is exact everywhere,
// then × (2^(e−128) · d_x) in fp32. Only the order of the float sums differs between implementations:
//   scalar   Σ kv[nib]·q per block, s += scale_w · d_x · float(Σ)
//   AVX-512  the nibbles through vpshufb into kv + 12 (unsigned 0..24) so vpdpbusd takes them as its
//            unsigned operand; the −12·Σq offset per 4-byte lane is the accumulator it starts from
//            (as Q4_0's −8·Σq in quant_dot_q.cc). Two blocks (one zmm) a step.
//   AVX2     the nibbles through vpshufb into kv (signed), then ggml's AVX2 int8 dot:
//            vpmaddubsw(|kv|, sign(q, kv)), vpmaddwd by ones (|pair| ≤ 2·12·127, never saturates).
// Per call size:
//   decode (1-2 tokens)  one row at a time, one stream through the weights, the lines asked for ahead
//                        (AVX-512: the tokens' offsets once per call, 16 scales per gather)
//   3-7 tokens           tiles of R rows × T tokens of accumulators in registers (4 × 4, AVX2 4 × 2)
//   8 tokens and more    prefill: 16 (AVX-512) or 8 (AVX2) rows a vector, their codes laid out
//                        transposed once per chunk of blocks and shared by up to 64 tokens; the two
//                        give the same bits
// No allocation, no threads; weight loads end at a block's last byte (no over-read of the mapping:
// moe_ffn hands expert slices of a mapped 3-D tensor straight to these kernels).
#include <cmath>
#include <cstring>

#include "quant_dot.h"
#include "quant_dot_transpose.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LH_X86 1
#include <immintrin.h>
#endif

namespace {

constexpr uint64_t kQK = 32;      // elements per block
constexpr size_t kBlock = 17;     // e + 16 bytes of nibbles
constexpr int kOffset = 12;       // −min(kv): the SIMD kernels multiply unsigned codes kv + 12 and take 12·Σq off
constexpr int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

size_t mxfp4_row_bytes(uint64_t k) { return static_cast<size_t>(k / kQK) * kBlock; }

// 2^(e − 128) as ggml's ggml_e8m0_to_fp32_half: e < 2 subnormal (0x00200000 << e), else exponent e − 1.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The activation row is Q8_0's (quant_dot_q.cc): int8 q [k], then float d, int32 −8·Σq, int32
// −128·Σq per block: k + 12·k/32 bytes.
inline size_t act_row_bytes_of(uint64_t k) { return static_cast<size_t>(k) + static_cast<size_t>(k / kQK) * 12; }

// block b's activation scale d
inline float act_d(const uint8_t* xr, uint64_t k, uint64_t b) {
  float d;
  std::memcpy(&d, xr + k + 4 * b, 4);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Scalar (the reference)
// ---------------------------------------------------------------------------------------------
void mxfp4_dot_scalar(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                      size_t y_stride) {
  for (uint32_t t = 0; t < n_tok; ++t) {
    const uint8_t* xr = xq + t * act_row_bytes_of(k);
    const int8_t* q = reinterpret_cast<const int8_t*>(xr);
    for (uint32_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      float s = 0.0f;
      for (uint64_t b = 0; b < k / kQK; ++b) {
        const uint8_t* blk = row + b * kBlock;
        const int8_t* qb = q + b * kQK;
        int32_t isum = 0;
        for (uint32_t j = 0; j < 16; ++j) {
          isum += kValues[blk[1 + j] & 15] * qb[j];
          isum += kValues[blk[1 + j] >> 4] * qb[j + 16];
        }
        s += e8m0_half(blk[0]) * act_d(xr, k, b) * static_cast<float>(isum);
      }
      y[t * y_stride + r] = s;
    }
  }
}

#ifdef LH_X86
using tile_fn = void (*)(const uint8_t*, size_t, uint64_t, const uint8_t*, size_t, float*, size_t);

// Rows in groups of up to R, tokens in groups of up to T, a [rows][tokens] table of tile
// instantiations for the remainders; decode (≤ 2 tokens) one row at a time.
template <int R, int T, template <int, int> class Tile>
struct Table {
  tile_fn fn[R][T];
  constexpr Table() : fn{} {
    fill<0>();
  }
  template <int I>
  constexpr void fill() {
    if constexpr (I < R * T) {
      fn[I / T][I % T] = Tile<I / T + 1, I % T + 1>::fn;
      fill<I + 1>();
    }
  }
};

template <int R, int T, template <int, int> class Tile>
void run_tiles(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y, size_t y_stride) {
  static constexpr Table<R, T, Tile> table{};
  const size_t x_row_bytes = act_row_bytes_of(k);
  const uint32_t rows_per_tile = n_tok <= 2 ? 1u : static_cast<uint32_t>(R);
  const uint32_t toks_per_tile = n_tok <= 2 ? n_tok : static_cast<uint32_t>(T);
  for (uint32_t r0 = 0; r0 < n_rows; r0 += rows_per_tile) {
    const uint32_t rr = n_rows - r0 < rows_per_tile ? n_rows - r0 : rows_per_tile;
    for (uint32_t t0 = 0; t0 < n_tok; t0 += toks_per_tile) {
      const uint32_t tt = n_tok - t0 < toks_per_tile ? n_tok - t0 : toks_per_tile;
      table.fn[rr - 1][tt - 1](w + r0 * w_row_bytes, w_row_bytes, k, xq + t0 * x_row_bytes, x_row_bytes, y + t0 * y_stride + r0, y_stride);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AVX-512 F/BW/VL/DQ + VNNI
// ---------------------------------------------------------------------------------------------
#define LH_QD512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The codes kv + 12 of blocks b, b+1 (has2: b+1 exists, else its half is code 12 against zero
// activations) of one row, in element order: [qs_b, qs_b, qs_b+1, qs_b+1] with the odd 16-byte lanes
// shifted by 4, masked to nibbles, looked up in the table.
LH_QD512 inline __m512i load_codes_pair(const uint8_t* row, uint64_t b, bool has2) {
  const uint8_t* p = row + b * kBlock + 1;
  const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i hi = has2 ? _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kBlock))) : _mm256_setzero_si256();
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  const __m512i sh = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0);
  const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(z, sh), _mm512_set1_epi8(0x0F));
  const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  return _mm512_shuffle_epi8(table, nib);
}

// [scale_b ×8, scale_b+1 ×8]
LH_QD512 inline __m512 load_scale_pair(const uint8_t* row, uint64_t b, bool has2) {
  const __m128 d01 = _mm_setr_ps(e8m0_half(row[b * kBlock]), has2 ? e8m0_half(row[(b + 1) * kBlock]) : 0.0f, 0.0f, 0.0f);
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(d01));
}

template <int R, int T>
LH_QD512 void mxfp4_tile_avx512(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y,
                                size_t y_stride) {
  const uint64_t nb = k / kQK;
  const __m512i off = _mm512_set1_epi8(kOffset), zero = _mm512_setzero_si512();
  const __m512i pair_lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (uint64_t b = 0; b < nb; b += 2) {
    const bool has2 = b + 1 < nb;
    __m512i xv[T], base[T];
    __m512 dx[T];
    for (int t = 0; t < T; ++t) {
      const uint8_t* xr = xq + t * x_row_bytes;
      xv[t] = has2 ? _mm512_loadu_si512(xr + b * kQK) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xr + b * kQK);
      const __m128 d01 = _mm_setr_ps(act_d(xr, k, b), has2 ? act_d(xr, k, b + 1) : 0.0f, 0.0f, 0.0f);
      dx[t] = _mm512_permutexvar_ps(pair_lanes, _mm512_zextps128_ps512(d01));
      base[t] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, xv[t]));  // −12·Σq per lane
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      if (R == 1) lh_qdot_prefetch_ahead(row + b * kBlock, 1);  // decode: a line per pair (34 bytes) keeps pace
      const __m512i wv = load_codes_pair(row, b, has2);
      const __m512 dw = load_scale_pair(row, b, has2);
      for (int t = 0; t < T; ++t) {
        const __m512i dot = _mm512_dpbusd_epi32(base[t], wv, xv[t]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx[t]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int R, int T>
struct Tile512 { static constexpr tile_fn fn = &mxfp4_tile_avx512<R, T>; };

// Decode (one or two tokens), one row at a time: mxfp4_tile_avx512<1, T>'s integers and float
// operations in its order (its bits), with what depends on the tokens alone done once per call: each
// pair's −12·Σq lanes and d_x pair (on the stack: kDecodeStackPairs pairs, k ≤ 16384), and each row's
// 16 block scales from one gather of the E8M0 bytes (stride 17; a masked gather in a short last group,
// so nothing past the row is read) converted in a vector, multiplied by the tokens' d_x once.
constexpr uint64_t kDecodeStackPairs = 256;

template <int T>
LH_QD512 void mxfp4_decode_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes,
                                  float* y, size_t y_stride) {
  const uint64_t nb = k / kQK, np = (nb + 1) / 2;
  alignas(64) int32_t base[T][kDecodeStackPairs][16];
  alignas(64) float dx[T][kDecodeStackPairs * 2];
  const __m512i off = _mm512_set1_epi8(kOffset), zero = _mm512_setzero_si512();
  for (int t = 0; t < T; ++t) {
    const uint8_t* xr = xq + t * x_row_bytes;
    for (uint64_t p = 0; p < np; ++p) {
      const __m512i xv = 2 * p + 1 < nb ? _mm512_loadu_si512(xr + 2 * p * kQK) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xr + 2 * p * kQK);
      _mm512_store_si512(base[t][p], _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, xv)));
    }
    for (uint64_t b = 0; b < 2 * np; ++b) dx[t][b] = b < nb ? act_d(xr, k, b) : 0.0f;
  }
  const __m512i e_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(static_cast<int>(kBlock)));
  const __m512i pair_lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i one = _mm512_set1_epi32(1), sub_bits = _mm512_set1_epi32(0x00200000), byte = _mm512_set1_epi32(0xFF);
  for (uint32_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + r * w_row_bytes;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (uint64_t g = 0; g < nb; g += 16) {
      const uint32_t in_group = nb - g < 16 ? static_cast<uint32_t>(nb - g) : 16u;
      const __mmask16 live = static_cast<__mmask16>((1u << in_group) - 1u);
      // 2^(e − 128): exponent field e − 1, or the subnormal 0x00200000 << e for e < 2 (a dead lane: 0)
      const __m512i e = _mm512_and_si512(_mm512_mask_i32gather_epi32(zero, live, e_at, row + g * kBlock, 1), byte);
      const __mmask16 tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
      const __m512i bits = _mm512_mask_blend_epi32(tiny, _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23), _mm512_sllv_epi32(sub_bits, e));
      const __m512 dw = _mm512_maskz_mov_ps(live, _mm512_castsi512_ps(bits));
      __m512 dd[T];
      for (int t = 0; t < T; ++t) dd[t] = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(live, dx[t] + g));
      for (uint32_t p = 0; 2 * p < in_group; ++p) {
        const uint64_t b = g + 2 * p;
        const bool has2 = 2 * p + 1 < in_group;
        lh_qdot_prefetch_ahead(row + b * kBlock, 1);  // a line per pair (34 bytes) keeps pace
        const __m512i wv = load_codes_pair(row, b, has2);
        const __m512i lanes = _mm512_add_epi32(pair_lanes, _mm512_set1_epi32(static_cast<int>(2 * p)));
        for (int t = 0; t < T; ++t) {
          const __m512i xv = has2 ? _mm512_loadu_si512(xq + t * x_row_bytes + b * kQK) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xq + t * x_row_bytes + b * kQK);
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_load_si512(base[t][b / 2]), wv, xv);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(lanes, dd[t]), acc[t]);
        }
      }
    }
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = _mm512_reduce_add_ps(acc[t]);
  }
}

// Prefill (kPrefillMinTokens tokens or more): 16 rows at once, one row a 32-bit lane. Per chunk of
// kPrefillChunk blocks the rows' codes kv + 12 are laid out once, transposed: wt[b][j] holds dword j
// (codes 4j..4j+3) of block b of the 16 rows, dw[b] their scales 2^(e−128). Per (token, block): the
// integer dot of all 16 rows is 8 vpdpbusd against the token's dword j broadcast, started from the
// block's −12·Σq (= 1.5 × the activation row's −8·Σq, exact), then one FMA by dw·d_x: each (row,
// token) sums its blocks in order whatever the rows beside it (any split of the rows: the same bits).
// The tile above spends a convert, a multiply and an FMA per row, token and block pair on top of its
// vpdpbusd, and unpacks every weight pair again for each group of 4 tokens.
constexpr uint32_t kPrefillMinTokens = 8;
constexpr uint32_t kPrefillChunk = 32;   // blocks: wt 16 KiB
constexpr uint32_t kPrefillTokens = 64;  // tokens per pass: acc 4 KiB

LH_QD512 void mxfp4_prefill16(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes,
                              uint32_t n_tok, float* y, size_t y_stride) {
  const uint64_t nb = k / kQK;
  alignas(64) int32_t wt[kPrefillChunk][8][16];
  alignas(64) float dw[kPrefillChunk][16];
  alignas(64) uint8_t codes[16][64];  // one block pair of each row, before the transpose
  alignas(64) float acc[kPrefillTokens][16];
  const __m512i row_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(64));
  const __mmask16 live = static_cast<__mmask16>((1u << n_rows) - 1u);
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kPrefillTokens) {
    const uint32_t tn = n_tok - t0 < kPrefillTokens ? n_tok - t0 : kPrefillTokens;
    for (uint32_t t = 0; t < tn; ++t) _mm512_store_ps(acc[t], _mm512_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kPrefillChunk) {
      const uint32_t nc = nb - c0 < kPrefillChunk ? static_cast<uint32_t>(nb - c0) : kPrefillChunk;
      for (uint32_t b = 0; b < nc; b += 2) {
        const bool has2 = b + 1 < nc;
        for (uint32_t r = 0; r < 16; ++r) {
          if (r >= n_rows) {
            _mm512_store_si512(codes[r], _mm512_setzero_si512());
            dw[b][r] = 0.0f;
            if (has2) dw[b + 1][r] = 0.0f;
            continue;
          }
          const uint8_t* row = w + r * w_row_bytes;
          _mm512_store_si512(codes[r], load_codes_pair(row, c0 + b, has2));
          dw[b][r] = e8m0_half(row[(c0 + b) * kBlock]);
          if (has2) dw[b + 1][r] = e8m0_half(row[(c0 + b + 1) * kBlock]);
        }
        for (uint32_t h = 0; h < (has2 ? 2u : 1u); ++h)
          for (int j = 0; j < 8; ++j)
            _mm512_store_si512(wt[b + h][j], _mm512_i32gather_epi32(row_at, codes[0] + 32 * h + 4 * j, 1));
      }
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * x_row_bytes;
        const int32_t* neg8 = reinterpret_cast<const int32_t*>(xr + k + (k / kQK) * 4);
        __m512 a = _mm512_load_ps(acc[t]);
        for (uint32_t b = 0; b < nc; ++b) {
          const uint64_t blk = c0 + b;
          int32_t n8;
          std::memcpy(&n8, neg8 + blk, 4);
          __m512i sum = _mm512_set1_epi32(n8 / 2 * 3);  // −12·Σq (n8 = −8·Σq: even)
          for (int j = 0; j < 8; ++j) {
            int32_t x4;
            std::memcpy(&x4, xr + blk * kQK + 4 * j, 4);
            sum = _mm512_dpbusd_epi32(sum, _mm512_load_si512(wt[b][j]), _mm512_set1_epi32(x4));
          }
          a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(_mm512_load_ps(dw[b]), _mm512_set1_ps(act_d(xr, k, blk))), a);
        }
        _mm512_store_ps(acc[t], a);
      }
    }
    for (uint32_t t = 0; t < tn; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * y_stride, live, _mm512_load_ps(acc[t]));
  }
}

void mxfp4_dot_avx512(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                      size_t y_stride) {
  if (n_tok >= kPrefillMinTokens) {
    for (uint32_t r0 = 0; r0 < n_rows; r0 += 16)
      mxfp4_prefill16(w + r0 * w_row_bytes, w_row_bytes, n_rows - r0 < 16 ? n_rows - r0 : 16, k, xq, act_row_bytes_of(k), n_tok, y + r0, y_stride);
    return;
  }
  if (n_tok <= 2 && (k / kQK + 1) / 2 <= kDecodeStackPairs) {
    if (n_tok == 1) mxfp4_decode_avx512<1>(w, w_row_bytes, n_rows, k, xq, act_row_bytes_of(k), y, y_stride);
    else mxfp4_decode_avx512<2>(w, w_row_bytes, n_rows, k, xq, act_row_bytes_of(k), y, y_stride);
    return;
  }
  run_tiles<4, 4, Tile512>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// AVX2 + FMA + F16C
// ---------------------------------------------------------------------------------------------
#define LH_QD2 __attribute__((target("avx2,fma,f16c")))

inline LH_QD2 float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// the 32 signed values kv of block b in element order (low lane: low nibbles, high lane: high)
LH_QD2 inline __m256i load_values_avx2(const uint8_t* row, uint64_t b) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * kBlock + 1));
  const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
  const __m256i table = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return _mm256_shuffle_epi8(table, nib);
}

// Σ kv·q of one block as 8 int32 lanes, converted to float (exact: |Σ| ≤ 32·12·127)
LH_QD2 inline __m256 block_dot_avx2(__m256i wv, __m256i xv) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// A accumulators per (row, token), block b into b % A: decode (A = 4) lets four FMA chains overlap;
// the prefill tiles (A = 1) have R·T chains already. Every row of one call sums in one order (any
// split of the rows gives the same bits).
template <int R, int T, int A>
LH_QD2 void mxfp4_tile_avx2(const uint8_t* w, size_t w_row_bytes, uint64_t k, const uint8_t* xq, size_t x_row_bytes, float* y, size_t y_stride) {
  const uint64_t nb = k / kQK;
  __m256 acc[R][T][A];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      for (int a = 0; a < A; ++a) acc[r][t][a] = _mm256_setzero_ps();
  for (uint64_t b = 0; b < nb; ++b) {
    __m256i xv[T];
    float dx[T];
    for (int t = 0; t < T; ++t) {
      xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * x_row_bytes + b * kQK));
      dx[t] = act_d(xq + t * x_row_bytes, k, b);
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * w_row_bytes;
      if (A > 1) lh_qdot_prefetch_ahead(row + b * kBlock, 1);
      const __m256i wv = load_values_avx2(row, b);
      const float dw = e8m0_half(row[b * kBlock]);
      for (int t = 0; t < T; ++t) acc[r][t][b % A] = _mm256_fmadd_ps(block_dot_avx2(wv, xv[t]), _mm256_set1_ps(dw * dx[t]), acc[r][t][b % A]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      __m256 s = acc[r][t][0];
      for (int a = 1; a < A; ++a) s = _mm256_add_ps(s, acc[r][t][a]);
      y[t * y_stride + r] = hsum8(s);
    }
}

template <int R, int T>
struct Tile2 { static constexpr tile_fn fn = &mxfp4_tile_avx2<R, T, 1>; };

// Prefill (kPrefillMinTokens tokens or more), AVX2: mxfp4_prefill16's scheme on 8 rows a ymm, with
// vpmaddubsw for vpdpbusd: codes kv + 12 (unsigned, ≤ 24) × the token's dword j broadcast (signed,
// |q| ≤ 127) give int16 pair sums ≤ 2·24·127; four of them summed in int16 (≤ 24384, no wrap), then
// vpmaddwd by ones to int32, onto −12·Σq; one FMA per token and block by the 8 rows' dw·d_x.
LH_QD2 void mxfp4_prefill8_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, size_t x_row_bytes,
                                uint32_t n_tok, float* y, size_t y_stride) {
  const uint64_t nb = k / kQK;
  alignas(32) int32_t wt[kPrefillChunk][8][8];  // [block][dword j][row]
  alignas(32) float dw[kPrefillChunk][8];
  alignas(32) float acc[kPrefillTokens][8];
  const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
  const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  for (uint32_t t0 = 0; t0 < n_tok; t0 += kPrefillTokens) {
    const uint32_t tn = n_tok - t0 < kPrefillTokens ? n_tok - t0 : kPrefillTokens;
    for (uint32_t t = 0; t < tn; ++t) _mm256_store_ps(acc[t], _mm256_setzero_ps());
    for (uint64_t c0 = 0; c0 < nb; c0 += kPrefillChunk) {
      const uint32_t nc = nb - c0 < kPrefillChunk ? static_cast<uint32_t>(nb - c0) : kPrefillChunk;
      for (uint32_t b = 0; b < nc; ++b) {
        __m256i rows[8], cols[8];
        for (uint32_t r = 0; r < 8; ++r) {
          if (r >= n_rows) {
            rows[r] = _mm256_setzero_si256();
            dw[b][r] = 0.0f;
            continue;
          }
          const uint8_t* blk = w + r * w_row_bytes + (c0 + b) * kBlock;
          const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 1));
          rows[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4));
          dw[b][r] = e8m0_half(blk[0]);
        }
        lh_transpose_8x8(rows, cols);
        for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(wt[b][j]), cols[j]);
      }
      for (uint32_t t = 0; t < tn; ++t) {
        const uint8_t* xr = xq + (t0 + t) * x_row_bytes;
        const int32_t* neg8 = reinterpret_cast<const int32_t*>(xr + k + (k / kQK) * 4);
        __m256 a = _mm256_load_ps(acc[t]);
        for (uint32_t b = 0; b < nc; ++b) {
          const uint64_t blk = c0 + b;
          int32_t n8;
          std::memcpy(&n8, neg8 + blk, 4);
          __m256i sum = _mm256_set1_epi32(n8 / 2 * 3);  // −12·Σq
          for (int half = 0; half < 2; ++half) {
            __m256i s16 = _mm256_setzero_si256();
            for (int j = 4 * half; j < 4 * half + 4; ++j) {
              int32_t x4;
              std::memcpy(&x4, xr + blk * kQK + 4 * j, 4);
              s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(wt[b][j])), _mm256_set1_epi32(x4)));
            }
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(s16, ones));
          }
          a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(_mm256_load_ps(dw[b]), _mm256_set1_ps(act_d(xr, k, blk))), a);
        }
        _mm256_store_ps(acc[t], a);
      }
    }
    for (uint32_t t = 0; t < tn; ++t)
      for (uint32_t r = 0; r < n_rows; ++r) y[(t0 + t) * y_stride + r] = acc[t][r];
  }
}

void mxfp4_dot_avx2(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                    size_t y_stride) {
  if (n_tok <= 2) {  // decode: one row at a time, one stream through the weights
    const size_t x_row_bytes = act_row_bytes_of(k);
    for (uint32_t r = 0; r < n_rows; ++r) {
      if (n_tok == 1) mxfp4_tile_avx2<1, 1, 4>(w + r * w_row_bytes, w_row_bytes, k, xq, x_row_bytes, y + r, y_stride);
      else mxfp4_tile_avx2<1, 2, 4>(w + r * w_row_bytes, w_row_bytes, k, xq, x_row_bytes, y + r, y_stride);
    }
    return;
  }
  if (n_tok >= kPrefillMinTokens) {
    for (uint32_t r0 = 0; r0 < n_rows; r0 += 8)
      mxfp4_prefill8_avx2(w + r0 * w_row_bytes, w_row_bytes, n_rows - r0 < 8 ? n_rows - r0 : 8, k, xq, act_row_bytes_of(k), n_tok, y + r0, y_stride);
    return;
  }
  run_tiles<4, 2, Tile2>(w, w_row_bytes, n_rows, k, xq, n_tok, y, y_stride);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // LH_X86

}  // namespace

bool lh_qdot_mxfp4_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out) {
  if (type != LH_QDOT_MXFP4) return false;
  // the activations are Q8_0's, quantized by Q8_0's quantizer of the same impl (the same bytes in every impl)
  lh_qdot_kernels q8{};
  if (!lh_qdot_q_kernels(LH_QDOT_Q8_0, impl == LH_QDOT_AMX ? LH_QDOT_AVX512 : impl, &q8)) return false;
  lh_qdot_kernels k{};
  k.type = type;
  k.impl = impl;
  k.block_elems = kQK;
  k.row_bytes = mxfp4_row_bytes;
  k.act_row_bytes = q8.act_row_bytes;
  k.quantize_act = q8.quantize_act;
  switch (impl) {
    case LH_QDOT_SCALAR: k.dot_tile = mxfp4_dot_scalar; break;
#ifdef LH_X86
    case LH_QDOT_AVX512: k.dot_tile = mxfp4_dot_avx512; break;
    case LH_QDOT_AVX2: k.dot_tile = mxfp4_dot_avx2; break;
#endif
    default: return false;  // AMX: no tile kernel for MXFP4; AUTO then takes AVX-512's
  }
  *out = k;
  return true;
}
