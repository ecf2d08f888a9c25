// Column energies of skewed rows (ARCHITECTURE.md §4.2): InfiniGen chooses the partial columns of
// layer ℓ and KV head g as the ⌊r·d⌋ largest of Σ|q·A_g| + Σ|k·A_g| over the sequence's first
// positions. This kernel does the sums for a run of tokens of one layer.
//
// For t in 0..tokens−1 (in order), for g in 0..kv_heads−1:
//   q_energy[g, j] += Σ_{h in g's group} |(q[t, h, :] · A_g)[j]|     (group = heads / kv_heads)
//   k_energy[g, j] += |(k[t, g, :] · A_g)[j]|
// Each product row is computed in fp32 (FMA where the CPU has it) and added to the fp64 sums; the
// additions into one sum happen in token order, so splitting a run into several calls gives the same
// bits as one call (checkpoints rely on it). The scalar reference lh_skew_energy_ref does the same
// with fp64 products; the two agree to the fp32 rounding of each product row.
#pragma once

#include <cstddef>
#include <cstdint>

#include "status.h"

// q: (tokens, heads, d) fp32; k: (tokens, kv_heads, d) fp32; a: (kv_heads, d, d) fp32, A_g[i, j] at
// a[(g * d + i) * d + j]; q_energy, k_energy: (kv_heads, d) fp64, added to.
// LH_BAD_ARGUMENT: a null pointer, d or kv_heads 0, heads not a positive multiple of kv_heads, d > 1024.
lh_status lh_skew_energy(const float* q, const float* k, size_t tokens, uint32_t heads, uint32_t kv_heads, uint32_t d,
                         const float* a, double* q_energy, double* k_energy);

// The scalar reference (fp64 products), for tests.
lh_status lh_skew_energy_ref(const float* q, const float* k, size_t tokens, uint32_t heads, uint32_t kv_heads, uint32_t d,
                             const float* a, double* q_energy, double* k_energy);
