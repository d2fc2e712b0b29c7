// The padded Hopper GEMM on fp16 operands (fp32 accumulation, fp16 output), configuration 0 of
// hopper_padded_gemm.h (pingpong_128x128): one CUTLASS kernel per unit, so the units compile in parallel.
#include "hopper/hopper_padded_gemm.cuh"
#include "hopper/hopper_padded_units.h"

ARGON_HOPPER_PADDED_UNIT(fp16, cutlass::half_t, 0)
