// The padded Hopper GEMM on fp16 operands (fp32 accumulation, fp16 output), configuration 1 of
// hopper_padded_gemm.h (cooperative_128x256): one CUTLASS kernel per unit, so the units compile in parallel.
#include "hopper/hopper_padded_gemm.cuh"
#include "hopper/hopper_padded_units.h"

ARGON_HOPPER_PADDED_UNIT(fp16, cutlass::half_t, 1)
