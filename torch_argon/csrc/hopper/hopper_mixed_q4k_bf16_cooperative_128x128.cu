// The Q4_K mixed-input Hopper GEMM (hopper_mixed_q4k_gemm.cuh): bf16 activations and output,
// cooperative consumers, tile 128 x 128 x 64; and its C entry point (hopper_mixed_q4k_gemm.h),
// which checks the ranges the kernel cannot (n, k) before the launch.
#include <cstdio>

#include "hopper/hopper_mixed_q4k_gemm.cuh"

extern "C" int argon_hopper_mixed_q4k_gemm(const ArgonHopperMixedQ4kGemm* gemm, char* err,
                                           int err_len) {
  if (gemm->n <= 0 || gemm->n % 8 || gemm->k <= 0 || gemm->k % 256) {
    snprintf(err, static_cast<size_t>(err_len),
             "%s: n must be a positive multiple of 8 and k of 256, got n=%d k=%d",
             argon_hopper_mixed::kKernel, gemm->n, gemm->k);
    return 1;
  }
  if (gemm->max_tiles_m <= 0) return 0;
  return argon_hopper_mixed::run<argon_hopper_mixed::MixedQ4kGemm>(*gemm, err, err_len);
}
