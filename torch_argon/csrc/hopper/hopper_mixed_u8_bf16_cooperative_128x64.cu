// The mixed-input Hopper GEMM (hopper_mixed_gemm.cuh) with 8-bit codes (Q8_0, Q5_0, Q5_K, IQ4_NL, IQ4_XS repacked):
// bf16 activations and output, cooperative consumers, tile 128 x 64 x 64 (the plan's tile_m 64). The token tile of 64 serves plans whose experts hold
// few rows (half of a 128-row tile would be padding).
#include "hopper/hopper_mixed_gemm.cuh"
#include "hopper/hopper_mixed_units.h"

ARGON_HOPPER_MIXED_UNIT(8, uint8_t, 64)
