// The Hopper grouped GEMM on fp16 operands (fp32 accumulation, fp16 output): every configuration
// of hopper_grouped_gemm.cuh instantiated for cutlass::half_t.
#include "hopper/hopper_grouped_gemm.cuh"
#include "hopper/hopper_units.h"

ARGON_HOPPER_ELEMENT_UNIT(fp16, cutlass::half_t)
