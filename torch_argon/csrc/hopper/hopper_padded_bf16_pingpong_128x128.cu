// The padded Hopper GEMM on bf16 operands (fp32 accumulation, bf16 output), configuration 0 of
// hopper_padded_gemm.h (pingpong_128x128): one CUTLASS kernel per unit, so the units compile in parallel.
#include "hopper/hopper_padded_gemm.cuh"
#include "hopper/hopper_padded_units.h"

ARGON_HOPPER_PADDED_UNIT(bf16, cutlass::bfloat16_t, 0)
