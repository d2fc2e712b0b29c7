// hopper_gemm.h's C entry points: argument range checks the glue cannot get wrong silently
// (config, dtype), then the unit of the element type and configuration. Kept apart from the
// CUTLASS units so that this file compiles in a second and each unit holds one kernel.
#include <cstdio>

#include "hopper/hopper_gemm.h"
#include "hopper/hopper_units.h"

namespace {
using WorkspaceBytes = size_t (*)(int n_groups, int sm_count);
using Run = int (*)(const ArgonHopperGemm& gemm, char* err, int err_len);
static_assert(ARGON_HOPPER_N_CONFIGS == 3, "one unit per configuration below");

// [dtype][config], dtype ARGON_HOPPER_FP16 = 0, ARGON_HOPPER_BF16 = 1
constexpr WorkspaceBytes kWorkspaceBytes[2][ARGON_HOPPER_N_CONFIGS] = {
    {argon_hopper_workspace_bytes_fp16_0, argon_hopper_workspace_bytes_fp16_1,
     argon_hopper_workspace_bytes_fp16_2},
    {argon_hopper_workspace_bytes_bf16_0, argon_hopper_workspace_bytes_bf16_1,
     argon_hopper_workspace_bytes_bf16_2}};
constexpr Run kRun[2][ARGON_HOPPER_N_CONFIGS] = {
    {argon_hopper_run_fp16_0, argon_hopper_run_fp16_1, argon_hopper_run_fp16_2},
    {argon_hopper_run_bf16_0, argon_hopper_run_bf16_1, argon_hopper_run_bf16_2}};

bool known(int dtype, int config) {
  return (dtype == ARGON_HOPPER_FP16 || dtype == ARGON_HOPPER_BF16) && config >= 0 &&
         config < ARGON_HOPPER_N_CONFIGS;
}
}  // namespace

extern "C" size_t argon_hopper_workspace_bytes(int dtype, int config, int n_groups,
                                               int sm_count) {
  if (!known(dtype, config) || n_groups <= 0 || sm_count <= 0) return 0;
  return kWorkspaceBytes[dtype][config](n_groups, sm_count);
}

extern "C" int argon_hopper_grouped_gemm(const ArgonHopperGemm* gemm, char* err, int err_len) {
  if (!known(gemm->dtype, gemm->config)) {
    snprintf(err, static_cast<size_t>(err_len),
             "hopper grouped GEMM: unknown dtype %d or config %d", gemm->dtype, gemm->config);
    return 1;
  }
  if (gemm->n_groups <= 0) return 0;
  return kRun[gemm->dtype][gemm->config](*gemm, err, err_len);
}
