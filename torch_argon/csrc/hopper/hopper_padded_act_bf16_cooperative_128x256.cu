// The padded Hopper gate/up GEMM with the activation in its epilogue on bf16 operands (fp32
// accumulation, h in bf16), configuration 1 of hopper_padded_gemm.h (cooperative_128x256): one CUTLASS
// kernel per unit, compiled with --fmad=false (build_tools/hopper_build.py UNIT_FLAGS).
#include "hopper/hopper_padded_gemm.cuh"
#include "hopper/hopper_padded_units.h"

ARGON_HOPPER_PADDED_ACT_UNIT(bf16, cutlass::bfloat16_t, 1)
