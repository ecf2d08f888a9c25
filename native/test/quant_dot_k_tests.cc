// Tests of the Q4_K, Q5_K, Q6_K dot kernels (quant_dot.h). Not written yet.
#include "check.h"

void test_quant_dot_k() {}
