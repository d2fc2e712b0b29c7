// The mixed-input Hopper GEMM (hopper_mixed_gemm.cuh) with 4-bit codes (Q4_K, Q4_0 repacked):
// bf16 activations and output, cooperative consumers, tile 128 x 128 x 64 (the plan's tile_m 128).
#include "hopper/hopper_mixed_gemm.cuh"
#include "hopper/hopper_mixed_units.h"

ARGON_HOPPER_MIXED_UNIT(4, cutlass::uint4b_t, 128)
