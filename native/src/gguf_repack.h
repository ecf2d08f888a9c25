// GGUF block-quantised tensors -> com.microsoft MatMulNBits layout, natively and in parallel.
//
// The same maths as app/engine/onnx/gguf-repack.ts and matmul-nbits.ts (fromQ4_0, fromQ8_0,
// packWithZeroPoints), which stay the reference: every output byte and float is the same bits
// (gguf-repack-native.test.ts checks it on every type). Per type (N rows of K, row-major):
//
//   type   bits block  b                 scales           zero_points            mins
//   Q8_0    8    32    [N·K]  q+128      [N·K/32]         — (default 128)        —
//   Q4_0    4    32    [N·K/2]           [N·K/32]         — (default 8)          —
//   Q4_1    4    32    [N·K/2]           [N·K/32]         [N·ceil(K/64)] 8s      [N·K/32]
//   Q5_0    8    32    [N·K]  code q     [N·K/32]         [N·K/32] 16s           —
//   Q5_1    8    32    [N·K]             [N·K/32]         [N·K/32] 16s           [N·K/32]
//   Q4_K    4    32    [N·K/2]           [N·K/32]         [N·ceil(K/64)] 8s      [N·K/32]
//   Q5_K    8    32    [N·K]             [N·K/32]         [N·K/32] 16s           [N·K/32]
//   Q6_K    8    16    [N·K]             [N·K/16]         [N·K/16] 32s           —
//   MXFP4   8    32    [N·K]  kv+128     [N·K/32] 2^(e−128) — (default 128)       —
//
// 4-bit B: element 2j in the low nibble of byte j. 4-bit zero points: one nibble per block, two
// per byte, each row padded to whole bytes (the padding nibble 0). The caller sizes the outputs
// with lh_gguf_repack_sizes and passes null for the ones a type does not have.
#pragma once

#include <cstddef>
#include <cstdint>

#include "status.h"

// GGML type ids (ggml.h's enum ggml_type), the ones repacked here.
enum lh_gguf_type : uint32_t {
  LH_GGUF_Q4_0 = 2,
  LH_GGUF_Q4_1 = 3,
  LH_GGUF_Q5_0 = 6,
  LH_GGUF_Q5_1 = 7,
  LH_GGUF_Q8_0 = 8,
  LH_GGUF_Q4_K = 12,
  LH_GGUF_Q5_K = 13,
  LH_GGUF_Q6_K = 14,
  LH_GGUF_MXFP4 = 39,
};

enum { LH_REPACK_MAX_THREADS = 64 };

struct lh_repack_sizes {
  uint32_t bits;        // 4 or 8
  uint32_t block_size;  // 32 or 16
  size_t raw_bytes;     // bytes of the GGUF tensor
  size_t b_bytes;
  size_t scales;        // float count
  size_t zero_points;   // bytes, 0 when the type uses the op's default
  size_t mins;          // float count, 0 when the type has no min term
};

// Sizes for `type` at [n, k]. LH_BAD_ARGUMENT: unknown type, n or k < 1, k not a multiple of 32
// (of 16 for Q6_K's block size as well), or n·k not whole GGUF blocks (32 or 256 elements), or a size
// that overflows size_t.
lh_status lh_gguf_repack_sizes(uint32_t type, uint64_t n, uint64_t k, lh_repack_sizes* out);

// Repacks `raw` (exactly sizes.raw_bytes) into the outputs (exactly the sizes above; null where a
// size is 0) on up to `threads` threads (1..LH_REPACK_MAX_THREADS; fewer when the tensor is small).
// LH_BAD_ARGUMENT (nothing written): as lh_gguf_repack_sizes, raw_bytes wrong, a needed output null.
// A thread that cannot start leaves its share to the calling thread: the result is never partial.
lh_status lh_gguf_repack(uint32_t type, const uint8_t* raw, size_t raw_bytes, uint64_t n, uint64_t k, uint32_t threads, uint8_t* b,
                         float* scales, uint8_t* zero_points, float* mins);
