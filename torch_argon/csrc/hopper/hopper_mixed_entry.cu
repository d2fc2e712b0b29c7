// hopper_mixed_gemm.h's C entry point: the ranges the kernel cannot check (n, k, the code
// width, the token tile), then the unit of that width and tile. Apart from the CUTLASS units so that it compiles in a
// second and each unit holds one kernel.
#include <cstdio>

#include "hopper/hopper_mixed_gemm.h"
#include "hopper/hopper_mixed_units.h"

extern "C" int argon_hopper_mixed_gemm(const ArgonHopperMixedGemm* gemm, char* err,
                                       int err_len) {
  if (gemm->n <= 0 || gemm->n % 16 || gemm->k <= 0 || gemm->k % 64 ||
      (gemm->code_bits != 4 && gemm->code_bits != 8) ||
      (gemm->tile_rows != 64 && gemm->tile_rows != 128)) {
    snprintf(err, static_cast<size_t>(err_len),
             "hopper mixed-input GEMM: n must be a positive multiple of 16, k of 64, "
             "code_bits 4 or 8 and tile_rows 64 or 128, got n=%d k=%d code_bits=%d tile_rows=%d",
             gemm->n, gemm->k, gemm->code_bits, gemm->tile_rows);
    return 1;
  }
  if (gemm->max_tiles_m <= 0) return 0;
  if (gemm->tile_rows == 64)
    return gemm->code_bits == 4 ? argon_hopper_mixed_run_u4_t64(*gemm, err, err_len)
                                : argon_hopper_mixed_run_u8_t64(*gemm, err, err_len);
  return gemm->code_bits == 4 ? argon_hopper_mixed_run_u4_t128(*gemm, err, err_len)
                              : argon_hopper_mixed_run_u8_t128(*gemm, err, err_len);
}
