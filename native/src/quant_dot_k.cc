// Dot kernels for Q4_K, Q5_K, Q6_K (quant_dot.h). Not written yet: no type has kernels here.
#include "quant_dot.h"

bool lh_qdot_k_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out) {
  (void)type;
  (void)impl;
  (void)out;
  return false;
}
