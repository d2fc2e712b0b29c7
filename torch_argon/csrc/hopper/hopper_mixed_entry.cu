// hopper_mixed_gemm.h's C entry point: the ranges the kernel cannot check (n, k, the code
// width), then the unit of that width. Apart from the CUTLASS units so that it compiles in a
// second and each unit holds one kernel.
#include <cstdio>

#include "hopper/hopper_mixed_gemm.h"
#include "hopper/hopper_mixed_units.h"

extern "C" int argon_hopper_mixed_gemm(const ArgonHopperMixedGemm* gemm, char* err,
                                       int err_len) {
  if (gemm->n <= 0 || gemm->n % 16 || gemm->k <= 0 || gemm->k % 64 ||
      (gemm->code_bits != 4 && gemm->code_bits != 8)) {
    snprintf(err, static_cast<size_t>(err_len),
             "hopper mixed-input GEMM: n must be a positive multiple of 16, k of 64 and "
             "code_bits 4 or 8, got n=%d k=%d code_bits=%d",
             gemm->n, gemm->k, gemm->code_bits);
    return 1;
  }
  if (gemm->max_tiles_m <= 0) return 0;
  return gemm->code_bits == 4 ? argon_hopper_mixed_run_u4(*gemm, err, err_len)
                              : argon_hopper_mixed_run_u8(*gemm, err, err_len);
}
