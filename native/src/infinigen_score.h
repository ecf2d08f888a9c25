// InfiniGen speculation kernels (used by the speculator in infinigen.cc): scores of one KV group's
// query heads against that KV head's partial key tiles, and the threshold statistics the §4.5 rule
// needs, with a scalar reference ("portable") and an AVX2/FMA/F16C version chosen by cpuid.
//
// Arithmetic (the same as score_rows / lh_infinigen_select, so the speculator picks exactly the slots
// the reference rule picks): per head hh and slot j, acc = 0; acc += double(q[hh][i]) · double(k_j[i])
// for i = 0..p−1 in order; score = acc · scale, all float64. A float·fp16 product is exact in float64
// (24 + 11 significant bits), so an FMA rounds exactly like the separate multiply and add: every
// implementation gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention.h"  // lh_attention_impl (LH_ATTN_AUTO / _PORTABLE / _AVX2)
#include "status.h"

// Scores of `group` query heads over slots 0..slots−1 of one KV head's partial key tiles.
//   kp     (ceil(slots / 8), p, 8) fp16: slot j's element i at kp[((j >> 3) * p + i) * 8 + (j & 7)]
//   q      (group, p) fp32, q̃ of the group's heads
//   out    (group, out_stride) float64, out_stride >= slots; lanes past `slots` are not written
//   max    (group) the largest score of each head over the slots (NaN ignored); may be null
//   finite set to 1 if every score is finite, else 0; may be null
//   skip   a slot whose partial row is not read (-1: none): its score is −∞ and max / finite ignore it.
//          The speculator passes the victim that the main thread's append() overwrites while the job runs.
// No fp16 lane of slot >= slots is read either (the vector path copies a partial last tile lane by
// lane), so a job may score slots 0..N−1 while append() writes slot N's lane of the same tile.
// LH_BAD_ARGUMENT (nothing written) on null pointers with slots > 0, p == 0, group == 0,
// out_stride < slots, or an implementation this CPU does not run.
lh_status lh_spec_score_group(const uint16_t* kp, uint32_t p, uint32_t slots, const float* q, uint32_t group, double scale,
                              double* out, size_t out_stride, double* max, uint32_t* finite,
                              lh_attention_impl impl = LH_ATTN_AUTO, int32_t skip = -1);

// How many of s[0..n) are strictly greater than threshold (NaN never is).
uint32_t lh_spec_count_above(const double* s, uint32_t n, double threshold, lh_attention_impl impl = LH_ATTN_AUTO);

// comb[j] = max over hh < group of (s[hh * stride + j] − m[hh]) for j < n (float64, exact like the
// scalar std::max chain for finite inputs); *lo / *hi = the smallest / largest comb[j].
void lh_spec_combine(const double* s, size_t stride, uint32_t group, const double* m, uint32_t n, double* comb, double* lo,
                     double* hi, lh_attention_impl impl = LH_ATTN_AUTO);

// The top-k search's two passes over comb (the histogram rule of infinigen.cc's kth_largest): the
// bucket of x is min(kSpecBuckets − 1, ⌊(x − lo)·inv⌋) for lo <= x (lo = the minimum, inv >= 0).
constexpr uint32_t kSpecBuckets = 1024;
inline uint32_t lh_spec_bucket(double x, double lo, double inv) {
  const double b = (x - lo) * inv;
  return b >= kSpecBuckets - 1 ? kSpecBuckets - 1 : static_cast<uint32_t>(b);
}
// hist (kSpecBuckets) = how many of v[0..n) fall in each bucket (overwritten).
void lh_spec_histogram(const double* v, uint32_t n, double lo, double inv, uint32_t* hist, lh_attention_impl impl = LH_ATTN_AUTO);
// The indices j < n whose bucket is >= b (i.e. (v[j] − lo)·inv >= b), ascending, into out; returns
// how many. out must have room for that count + 8 (the vector path stores whole groups of 4).
uint32_t lh_spec_collect(const double* v, uint32_t n, double lo, double inv, uint32_t b, int32_t* out,
                         lh_attention_impl impl = LH_ATTN_AUTO);
