// The mixed-input Hopper GEMM (hopper_mixed_gemm.cuh) with 8-bit codes (Q8_0, Q5_0, Q5_K,
// IQ4_NL, IQ4_XS repacked): bf16 activations and output, cooperative consumers, tile
// 128 x 128 x 64.
#include "hopper/hopper_mixed_gemm.cuh"
#include "hopper/hopper_mixed_units.h"

int argon_hopper_mixed_run_u8(const ArgonHopperMixedGemm& gemm, char* err, int err_len) {
  return argon_hopper_mixed::run<argon_hopper_mixed::MixedGemm<uint8_t>>(gemm, err, err_len);
}
