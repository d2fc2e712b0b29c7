// hopper_gemm.h's C entry points: argument range checks the glue cannot get wrong silently
// (config, dtype), then the unit of the element type. Kept apart from the CUTLASS units so that
// this file compiles in a second and the units only once per element type.
#include <cstdio>

#include "hopper/hopper_gemm.h"
#include "hopper/hopper_units.h"

namespace {
bool known(int dtype, int config) {
  return (dtype == ARGON_HOPPER_FP16 || dtype == ARGON_HOPPER_BF16) && config >= 0 &&
         config < ARGON_HOPPER_N_CONFIGS;
}
}  // namespace

extern "C" size_t argon_hopper_workspace_bytes(int dtype, int config, int n_groups,
                                               int sm_count) {
  if (!known(dtype, config) || n_groups <= 0 || sm_count <= 0) return 0;
  return dtype == ARGON_HOPPER_BF16 ? argon_hopper_workspace_bytes_bf16(config, n_groups, sm_count)
                                    : argon_hopper_workspace_bytes_fp16(config, n_groups, sm_count);
}

extern "C" int argon_hopper_grouped_gemm(const ArgonHopperGemm* gemm, char* err, int err_len) {
  if (!known(gemm->dtype, gemm->config)) {
    snprintf(err, static_cast<size_t>(err_len),
             "hopper grouped GEMM: unknown dtype %d or config %d", gemm->dtype, gemm->config);
    return 1;
  }
  if (gemm->n_groups <= 0) return 0;
  return gemm->dtype == ARGON_HOPPER_BF16 ? argon_hopper_run_bf16(*gemm, err, err_len)
                                          : argon_hopper_run_fp16(*gemm, err, err_len);
}
