// Dot kernels for F32, F16, Q4_0, Q8_0 (quant_dot.h). Not written yet: no type has kernels here.
#include "quant_dot.h"

bool lh_qdot_q_kernels(uint32_t type, lh_qdot_impl impl, lh_qdot_kernels* out) {
  (void)type;
  (void)impl;
  (void)out;
  return false;
}
