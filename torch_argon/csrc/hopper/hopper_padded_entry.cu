// hopper_padded_gemm.h's C entry point: the argument ranges the glue cannot get wrong silently
// (config, dtype), then the unit of the element type and configuration. Apart from the CUTLASS
// units so that it compiles in a second and each unit holds one kernel.
#include <cstdio>

#include "hopper/hopper_gemm.h"
#include "hopper/hopper_padded_gemm.h"
#include "hopper/hopper_padded_units.h"

namespace {
using Run = int (*)(const ArgonHopperPaddedGemm& gemm, char* err, int err_len);
static_assert(ARGON_HOPPER_PADDED_N_CONFIGS == 2, "one unit per configuration below");

// [dtype][config], dtype ARGON_HOPPER_FP16 = 0, ARGON_HOPPER_BF16 = 1
constexpr Run kRun[2][ARGON_HOPPER_PADDED_N_CONFIGS] = {
    {argon_hopper_padded_run_fp16_0, argon_hopper_padded_run_fp16_1},
    {argon_hopper_padded_run_bf16_0, argon_hopper_padded_run_bf16_1}};
}  // namespace

extern "C" int argon_hopper_padded_gemm(const ArgonHopperPaddedGemm* gemm, char* err,
                                        int err_len) {
  const bool known = (gemm->dtype == ARGON_HOPPER_FP16 || gemm->dtype == ARGON_HOPPER_BF16) &&
                     gemm->config >= 0 && gemm->config < ARGON_HOPPER_PADDED_N_CONFIGS;
  if (!known) {
    snprintf(err, static_cast<size_t>(err_len),
             "hopper padded GEMM: unknown dtype %d or config %d", gemm->dtype, gemm->config);
    return 1;
  }
  if (gemm->max_tiles_m <= 0 || gemm->n <= 0) return 0;
  return kRun[gemm->dtype][gemm->config](*gemm, err, err_len);
}
