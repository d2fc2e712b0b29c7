// hopper_padded_gemm.h's C entry points (the GEMM, and the gate/up GEMM with the activation):
// the argument ranges the glue cannot get wrong silently (config, dtype; n and the activation
// of the fused one), then the unit of the element type and configuration. Apart from the
// CUTLASS units so that it compiles in a second and each unit holds one kernel.
#include <cstdio>

#include "hopper/hopper_gemm.h"
#include "hopper/hopper_padded_gemm.h"
#include "hopper/hopper_padded_units.h"
#include "shared/swiglu_params.h"

namespace {
using Run = int (*)(const ArgonHopperPaddedGemm& gemm, char* err, int err_len);
static_assert(ARGON_HOPPER_PADDED_N_CONFIGS == 2, "one unit per configuration below");

// [dtype][config], dtype ARGON_HOPPER_FP16 = 0, ARGON_HOPPER_BF16 = 1
constexpr Run kRun[2][ARGON_HOPPER_PADDED_N_CONFIGS] = {
    {argon_hopper_padded_run_fp16_0, argon_hopper_padded_run_fp16_1},
    {argon_hopper_padded_run_bf16_0, argon_hopper_padded_run_bf16_1}};
constexpr Run kRunAct[2][ARGON_HOPPER_PADDED_N_CONFIGS] = {
    {argon_hopper_padded_act_run_fp16_0, argon_hopper_padded_act_run_fp16_1},
    {argon_hopper_padded_act_run_bf16_0, argon_hopper_padded_act_run_bf16_1}};

bool known(const ArgonHopperPaddedGemm* gemm, const char* what, char* err, int err_len) {
  const bool ok = (gemm->dtype == ARGON_HOPPER_FP16 || gemm->dtype == ARGON_HOPPER_BF16) &&
                  gemm->config >= 0 && gemm->config < ARGON_HOPPER_PADDED_N_CONFIGS;
  if (!ok)
    snprintf(err, static_cast<size_t>(err_len), "%s: unknown dtype %d or config %d", what,
             gemm->dtype, gemm->config);
  return ok;
}
}  // namespace

extern "C" int argon_hopper_padded_gemm(const ArgonHopperPaddedGemm* gemm, char* err,
                                        int err_len) {
  if (!known(gemm, "hopper padded GEMM", err, err_len)) return 1;
  if (gemm->max_tiles_m <= 0 || gemm->n <= 0) return 0;
  return kRun[gemm->dtype][gemm->config](*gemm, err, err_len);
}

extern "C" int argon_hopper_padded_act_gemm(const ArgonHopperPaddedGemm* gemm, char* err,
                                            int err_len) {
  const char* what = "hopper padded gate/up GEMM with the activation";
  if (!known(gemm, what, err, err_len)) return 1;
  const int act = gemm->activation;
  if (gemm->n % 16 != 0 ||
      (act != ARGON_ACT_SILU && act != ARGON_ACT_GELU && act != ARGON_ACT_GELU_TANH)) {
    snprintf(err, static_cast<size_t>(err_len),
             "%s: n must be a multiple of 16 (gate and up in blocks of 8) and the activation "
             "known, got n %d, activation %d", what, gemm->n, act);
    return 1;
  }
  if (gemm->max_tiles_m <= 0 || gemm->n <= 0) return 0;
  return kRunAct[gemm->dtype][gemm->config](*gemm, err, err_len);
}
