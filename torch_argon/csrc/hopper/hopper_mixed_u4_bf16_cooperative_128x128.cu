// The mixed-input Hopper GEMM (hopper_mixed_gemm.cuh) with 4-bit codes (Q4_K, Q4_0 repacked):
// bf16 activations and output, cooperative consumers, tile 128 x 128 x 64.
#include "hopper/hopper_mixed_gemm.cuh"
#include "hopper/hopper_mixed_units.h"

int argon_hopper_mixed_run_u4(const ArgonHopperMixedGemm& gemm, char* err, int err_len) {
  return argon_hopper_mixed::run<argon_hopper_mixed::MixedGemm<cutlass::uint4b_t>>(gemm, err,
                                                                                     err_len);
}
