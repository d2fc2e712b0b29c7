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

extern "C" int argon_hopper_grouped_gemm(int dtype, int config, const void* a, const void* b,
                                         void* d, const int32_t* offsets, const int32_t* counts,
                                         int n_groups, int64_t rows, int n, int k,
                                         void* workspace,
                                         size_t workspace_bytes, int sm_count, void* stream,
                                         char* err, int err_len) {
  if (!known(dtype, config)) {
    snprintf(err, static_cast<size_t>(err_len),
             "hopper grouped GEMM: unknown dtype %d or config %d", dtype, config);
    return 1;
  }
  if (n_groups <= 0) return 0;
  auto* s = static_cast<cudaStream_t>(stream);
  return dtype == ARGON_HOPPER_BF16
             ? argon_hopper_run_bf16(config, a, b, d, offsets, counts, n_groups, rows, n, k, workspace,
                                     workspace_bytes, sm_count, s, err, err_len)
             : argon_hopper_run_fp16(config, a, b, d, offsets, counts, n_groups, rows, n, k, workspace,
                                     workspace_bytes, sm_count, s, err, err_len);
}
