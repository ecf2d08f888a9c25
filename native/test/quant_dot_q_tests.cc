// Tests of the F32, F16, Q4_0, Q8_0 dot kernels (quant_dot.h). Not written yet.
#include "check.h"

void test_quant_dot_q() {}
