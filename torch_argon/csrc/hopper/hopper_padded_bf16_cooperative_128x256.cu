// The padded Hopper GEMM on bf16 operands (fp32 accumulation, bf16 output), configuration 1 of
// hopper_padded_gemm.h (cooperative_128x256): one CUTLASS kernel per unit, so the units compile in parallel.
#include "hopper/hopper_padded_gemm.cuh"
#include "hopper/hopper_padded_units.h"

ARGON_HOPPER_PADDED_UNIT(bf16, cutlass::bfloat16_t, 1)
