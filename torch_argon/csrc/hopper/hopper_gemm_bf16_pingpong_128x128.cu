// The Hopper grouped GEMM on bf16 operands (fp32 accumulation, bf16 output), configuration
// 1 of hopper_gemm.h (pingpong_128x128): one CUTLASS kernel per unit, so the six compile in parallel.
#include "hopper/hopper_grouped_gemm.cuh"
#include "hopper/hopper_units.h"

ARGON_HOPPER_UNIT(bf16, cutlass::bfloat16_t, 1)
