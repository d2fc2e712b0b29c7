// The padded Hopper gate/up GEMM with the activation in its epilogue on fp16 operands (fp32
// accumulation, h in fp16), configuration 0 of hopper_padded_gemm.h (pingpong_128x128): one CUTLASS
// kernel per unit, compiled with --fmad=false (build_tools/hopper_build.py UNIT_FLAGS).
#include "hopper/hopper_padded_gemm.cuh"
#include "hopper/hopper_padded_units.h"

ARGON_HOPPER_PADDED_ACT_UNIT(fp16, cutlass::half_t, 0)
