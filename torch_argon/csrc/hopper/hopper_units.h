// The units' functions (hopper_gemm_<dtype>_<config>.cu, one per element type and configuration,
// defined by ARGON_HOPPER_UNIT of hopper_grouped_gemm.cuh), as hopper_entry.cu dispatches to them.
#pragma once
#include <cstddef>

#include "hopper/hopper_gemm.h"

#define ARGON_HOPPER_DECLARE_UNIT(suffix, index)                                          \
  size_t argon_hopper_workspace_bytes_##suffix##_##index(int n_groups, int sm_count);     \
  int argon_hopper_run_##suffix##_##index(const ArgonHopperGemm& gemm, char* err, int err_len);
ARGON_HOPPER_DECLARE_UNIT(fp16, 0)
ARGON_HOPPER_DECLARE_UNIT(fp16, 1)
ARGON_HOPPER_DECLARE_UNIT(fp16, 2)
ARGON_HOPPER_DECLARE_UNIT(bf16, 0)
ARGON_HOPPER_DECLARE_UNIT(bf16, 1)
ARGON_HOPPER_DECLARE_UNIT(bf16, 2)
#undef ARGON_HOPPER_DECLARE_UNIT
