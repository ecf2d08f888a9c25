// The checks every dot kernel of quant_dot.h must pass, whatever its weight type: the family test
// files (quant_dot_q_tests.cc, quant_dot_k_tests.cc) describe a type by how to draw a random GGUF
// row and how ggml dequantizes one, and qdot_sweep runs the same checks over it:
//
//   1. exact activations: x = c·q with q integer in [-127, 127], one ±127 per block and c a power
//      of two, so that every implementation quantizes x without loss; then y must equal the float64
//      dot of the dequantized row with x within float rounding (1e-5 of Σ|terms|), over a sweep of
//      k, rows and tokens that covers every tile remainder.
//   2. random activations (blocks of very different magnitudes): each implementation quantizes to
//      the scalar reference's bytes, computes what the scalar reference computes up to the order of
//      float sums, and the scalar result is within activation-quantization error of float64 (NMSE).
//   3. what must not change the bits: any split of the rows across calls (threads split rows); a
//      split of the tokens may change the order of float sums only (decode and prefill kernels).
//   4. output stride and guard bytes: nothing written outside [t·y_stride + r], nothing past the
//      activation row.
//   5. non-finite inputs: a token with a NaN or ±Inf gets NaN in every output, the tokens beside it
//      are unaffected; a block of zeros (or below 2^-100) contributes nothing and stays finite.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "../src/quant_dot.h"
#include "test_rng.h"

struct QdotTypeCase {
  uint32_t type;
  const char* name;  // "Q4_K"
  // One random row of k elements in the type's GGUF layout: out has row_bytes(k) bytes.
  void (*random_row)(Rng& rng, uint64_t k, uint8_t* out);
  // ggml's dequantization of one row (the formulas of ggml-quants.c's dequantize_row_*), into
  // value[k]; magnitude[k] gets the sum of the absolute terms that make each value (|d·sc·q| + |dmin·m|
  // for the types with a min), which bounds the float rounding of any order of evaluation.
  void (*dequantize_row)(const uint8_t* row, uint64_t k, double* value, double* magnitude);
  std::vector<uint64_t> ks;  // element counts to sweep (multiples of the block; 1 for F32/F16)
};

void qdot_sweep(const QdotTypeCase& c);

// `impl` gives `reference`'s bits on every output (both run on the reference's quantized
// activations): shapes[i] = {rows, tokens, k}, row 0 of each at the type's integer extremes
// (extreme_row writes one row of k elements) and token 1 all `token1` (every code ±127), the rest
// random rows and Gaussian activations. `what` names the check. Where the CPU lacks `impl`, an info
// line says so and nothing is checked.
void qdot_check_same_bits(const QdotTypeCase& c, lh_qdot_impl impl, lh_qdot_impl reference, const std::vector<std::array<uint32_t, 3>>& shapes,
                          void (*extreme_row)(uint64_t k, uint8_t* out), float token1, const char* what);

// As qdot_check_same_bits, but `impl` may sum in another float order: each output within tol of the
// Σ|terms| of its dot (the bound qdot_sweep holds every implementation to against scalar: 1e-5).
void qdot_check_close(const QdotTypeCase& c, lh_qdot_impl impl, lh_qdot_impl reference, const std::vector<std::array<uint32_t, 3>>& shapes,
                      void (*extreme_row)(uint64_t k, uint8_t* out), float token1, double tol, const char* what);

// fp16 bits of a random finite scale, magnitude in [lo, hi), either sign when `signed_scale`.
uint16_t qdot_random_half(Rng& rng, float lo, float hi, bool signed_scale);

// The type cases above, for tests of code built on the kernels (moe_ffn_tests.cc): false when the
// family file has no such type. quant_dot_q_tests.cc: F32, F16, Q4_0, Q8_0; quant_dot_k_tests.cc: the K-quants.
bool qdot_q_case(uint32_t type, QdotTypeCase* out);
bool qdot_k_case(uint32_t type, QdotTypeCase* out);
bool qdot_mxfp4_case(uint32_t type, QdotTypeCase* out);  // quant_dot_mxfp4_tests.cc
bool qdot_q5_case(uint32_t type, QdotTypeCase* out);     // quant_dot_q5_tests.cc
bool qdot_q1_case(uint32_t type, QdotTypeCase* out);     // quant_dot_q1_tests.cc: Q4_1, Q5_1
