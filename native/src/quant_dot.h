// Dot products of GGUF weight rows, read in place from the mapped file, with activation rows:
// the kernels of the native dense path (dense_stage.h), where onnxruntime's MatMulNBits needed
// its own repacked copy of every weight and has no 5- or 6-bit layout at all.
//
//   y[t·y_stride + r] = Σ_i W[r][i] · x_t[i]      r < n_rows, t < n_tok, i < k
//
// W is n_rows GGUF rows of k elements, row r at w + r·w_row_bytes, in the file's own block
// layout. The activations x_t are first put in the form the weight type's dot wants
// (quantize_act, once per token and matmul), as llama.cpp does:
//
//   weight type          activation row (act_row_bytes(k))           the dot
//   F32                  k floats (a copy)                           fp32 FMA
//   F16                  k floats (a copy)                           fp16 widened, fp32 FMA
//   Q4_0, Q8_0           int8 blocks of 32, one scale each           int8·int8 per block, × scales
//   Q4_K, Q5_K, Q6_K     int8 super-blocks of 256, one scale each,   integer dots per sub-block,
//                        with the int sums per 16 (the min terms)    × sub-block scales and mins
//   MXFP4                Q8_0's (int8 blocks of 32, one scale each)  int8 · E2M1 (doubled, integer)
//                                                                    per block, × 2^(e−128)·d_x
//   Q5_0                 Q8_0's                                      int8 · (5-bit code − 16) per
//                                                                    block, × d_w·d_x
//   Q4_1, Q5_1           Q8_0's (its Σq per block for the minimum)   int8 · unsigned code per block,
//                                                                    × d_w·d_x, + m_w·d_x·Σq
//
// The activation layout is each family's own business (it may add block sums the SIMD dot wants);
// only its size and quantize_act are shared. Every implementation of one type quantizes the
// activations to the same bits (the scalar quantizer is the reference), so the integer parts of
// the dots are exact and implementations differ only in the order of their float sums.
//
// Implementations: LH_QDOT_SCALAR (portable reference, every type), LH_QDOT_AVX2 (AVX2 + FMA +
// F16C), LH_QDOT_AVX512 (AVX-512 F/BW/VL/DQ + VNNI), LH_QDOT_AMX (AVX512 + AMX-INT8 tiles in the
// prefill of Q4_0, Q8_0 and the K-quants). LH_QDOT_AUTO picks the best the CPU has, at most the
// level cpu_level.h's cap allows.
// Kernels never allocate and never start threads: the caller splits rows over threads
// (dense_stage.cc), and any split of the rows gives the same bits. A call of one or two tokens
// (decode) may run another kernel than a call of many (prefill): the same integer dots, summed in
// another float order.
#pragma once

#include <cstddef>
#include <cstdint>

// GGML type ids (ggml.h's enum ggml_type) of the weight types that have kernels here.
enum lh_qdot_type : uint32_t {
  LH_QDOT_F32 = 0,
  LH_QDOT_F16 = 1,
  LH_QDOT_Q4_0 = 2,
  LH_QDOT_Q4_1 = 3,
  LH_QDOT_Q5_0 = 6,
  LH_QDOT_Q5_1 = 7,
  LH_QDOT_Q8_0 = 8,
  LH_QDOT_Q4_K = 12,
  LH_QDOT_Q5_K = 13,
  LH_QDOT_Q6_K = 14,
  LH_QDOT_MXFP4 = 39,
};

enum lh_qdot_impl : uint32_t {
  LH_QDOT_AUTO = 0,
  LH_QDOT_SCALAR = 1,
  LH_QDOT_AVX2 = 2,
  LH_QDOT_AVX512 = 3,
  // AVX512's kernels, and for the prefill (16 tokens or more) of Q4_0, Q8_0 and the K-quants AMX-INT8
  // tiles: the integer dot of 16 tokens × 16 rows × a block (Q4_0, Q8_0) or a super-block (K-quants)
  // is one to twelve tile instructions. Needs AMX-TILE + AMX-INT8 and the kernel's permission to use
  // the tile state (Linux 5.16+, arch_prctl). Bits: the K-quants' equal SCALAR's, Q4_0/Q8_0's AVX512's.
  LH_QDOT_AMX = 4,
};

struct lh_qdot_kernels {
  uint32_t type;
  lh_qdot_impl impl;  // never AUTO
  // elements per GGUF block of this type (1 for F32/F16, 32, or 256); k must be a multiple
  uint32_t block_elems;
  // bytes of one weight row of k elements (k a multiple of block_elems)
  size_t (*row_bytes)(uint64_t k);
  // bytes of one activation row of k elements, as quantize_act writes it
  size_t (*act_row_bytes)(uint64_t k);
  // x [k] floats -> out [act_row_bytes(k)] bytes. Non-finite inputs: the row's dots are NaN.
  void (*quantize_act)(const float* x, uint64_t k, uint8_t* out);
  // The tile above: n_rows weight rows × n_tok activation rows (act rows at xq + t·xq_row_bytes,
  // xq_row_bytes = act_row_bytes(k)). Efficient for n_tok = 1 (decode: the weights stream from
  // memory once) and for a few dozen rows × many tokens (prefill: the caller's row tile stays in
  // cache while every token passes over it).
  void (*dot_tile)(const uint8_t* w, size_t w_row_bytes, uint32_t n_rows, uint64_t k, const uint8_t* xq, uint32_t n_tok, float* y,
                   size_t y_stride);
};

// The kernels of `type` in `impl` (AUTO: the best available). False when the type has no kernels
// here or the CPU cannot run that impl; *out is then untouched.
bool lh_qdot_kernels_for(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out);

// Does this CPU run `impl`, and does the level cap (cpu_level.h, LONGHAND_CPU_LEVEL) allow it?
// (SCALAR: always; AUTO: always.) AUTO above picks among the impls this says yes to.
bool lh_qdot_available(lh_qdot_impl impl);

// Per family, in its own file; lh_qdot_kernels_for (quant_dot.cc) asks each in turn.
//   quant_dot_q.cc: F32, F16, Q4_0, Q8_0        quant_dot_k.cc: Q4_K, Q5_K, Q6_K
//   quant_dot_mxfp4.cc: MXFP4 (no AMX kernels: AUTO takes AVX-512's there)
//   quant_dot_q5.cc: Q5_0, quant_dot_q1.cc: Q4_1, Q5_1 (no AMX kernels either)
// impl is never AUTO here and the CPU is known to run it.
bool lh_qdot_q_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out);
bool lh_qdot_k_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out);
bool lh_qdot_mxfp4_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out);
bool lh_qdot_q5_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out);
bool lh_qdot_q1_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out);

// Decode (one token) streams each weight row once, front to back, and on this project's VMs the
// hardware prefetcher alone does not keep enough lines in flight: Q4_0 / Q8_0 decode read at 74% /
// 78% of the one-thread read bandwidth, and with the lines 2 KiB ahead asked for as each block is
// read, at 85-89% / 91-97% (native_tests --bench-dot, weights on huge pages; 1 and 4 KiB ahead
// gave less). Used by the kernel families' decode loops: `bytes` is the block about to be read.
// Locality 3 (prefetcht0) on purpose, unlike attention.cc's scattered rows: on the Zen 5 host of
// 2026-12-06, prefetcht1 2 KiB ahead streamed Q4_0 / Q8_0 / Q4_K / Q5_K decode at 20 / 22 / 18 / 20
// GB/s against 24 / 24 / 23 / 23 with prefetcht0 (three runs each); only Q6_K gained (23 -> 23-30).
// 4 and 8 KiB ahead with prefetcht1 halved Q4_0 and Q8_0.
constexpr size_t LH_QDOT_PREFETCH_AHEAD = 2048;
inline void lh_qdot_prefetch_ahead(const uint8_t* block, size_t bytes) {
  // a prefetch never faults, so past the row's (or the mapping's) end is harmless
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(block + LH_QDOT_PREFETCH_AHEAD + o, 0, 3);
}
