// The Hopper grouped GEMM on bf16 operands (fp32 accumulation, bf16 output): every configuration
// of hopper_grouped_gemm.cuh instantiated for cutlass::bfloat16_t.
#include "hopper/hopper_grouped_gemm.cuh"
#include "hopper/hopper_units.h"

ARGON_HOPPER_ELEMENT_UNIT(bf16, cutlass::bfloat16_t)
