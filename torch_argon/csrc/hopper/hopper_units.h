// The per-element-type units' functions (hopper_gemm_fp16.cu, hopper_gemm_bf16.cu, defined by
// ARGON_HOPPER_ELEMENT_UNIT of hopper_grouped_gemm.cuh), as hopper_entry.cu dispatches to them.
#pragma once
#include <cstddef>

#include "hopper/hopper_gemm.h"

#define ARGON_HOPPER_DECLARE_UNIT(suffix)                                                \
  size_t argon_hopper_workspace_bytes_##suffix(int config, int n_groups, int sm_count); \
  int argon_hopper_run_##suffix(const ArgonHopperGemm& gemm, char* err, int err_len);
ARGON_HOPPER_DECLARE_UNIT(fp16)
ARGON_HOPPER_DECLARE_UNIT(bf16)
#undef ARGON_HOPPER_DECLARE_UNIT
