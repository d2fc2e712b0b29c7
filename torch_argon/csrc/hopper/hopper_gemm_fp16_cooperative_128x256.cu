// The Hopper grouped GEMM on fp16 operands (fp32 accumulation, fp16 output), configuration
// 2 of hopper_gemm.h (cooperative_128x256): one CUTLASS kernel per unit, so the six compile in parallel.
#include "hopper/hopper_grouped_gemm.cuh"
#include "hopper/hopper_units.h"

ARGON_HOPPER_UNIT(fp16, cutlass::half_t, 2)
