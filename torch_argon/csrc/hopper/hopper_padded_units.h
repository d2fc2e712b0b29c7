// The padded GEMM's units (hopper_padded_<dtype>_<config>.cu, one per element type and
// configuration, defined by ARGON_HOPPER_PADDED_UNIT of hopper_padded_gemm.cuh) and the fused
// gate/up GEMM's (hopper_padded_act_<dtype>_<config>.cu, ARGON_HOPPER_PADDED_ACT_UNIT), as
// hopper_padded_entry.cu dispatches to them.
#pragma once

#include "hopper/hopper_padded_gemm.h"

#define ARGON_HOPPER_PADDED_DECLARE_UNIT(suffix, index) \
  int argon_hopper_padded_run_##suffix##_##index(const ArgonHopperPaddedGemm& gemm, char* err, \
                                                 int err_len);
ARGON_HOPPER_PADDED_DECLARE_UNIT(fp16, 0)
ARGON_HOPPER_PADDED_DECLARE_UNIT(fp16, 1)
ARGON_HOPPER_PADDED_DECLARE_UNIT(bf16, 0)
ARGON_HOPPER_PADDED_DECLARE_UNIT(bf16, 1)
#define ARGON_HOPPER_PADDED_DECLARE_ACT_UNIT(suffix, index)                               \
  int argon_hopper_padded_act_run_##suffix##_##index(const ArgonHopperPaddedGemm& gemm,        \
                                                     char* err, int err_len);
ARGON_HOPPER_PADDED_DECLARE_ACT_UNIT(fp16, 0)
ARGON_HOPPER_PADDED_DECLARE_ACT_UNIT(fp16, 1)
ARGON_HOPPER_PADDED_DECLARE_ACT_UNIT(bf16, 0)
ARGON_HOPPER_PADDED_DECLARE_ACT_UNIT(bf16, 1)
#undef ARGON_HOPPER_PADDED_DECLARE_UNIT
#undef ARGON_HOPPER_PADDED_DECLARE_ACT_UNIT
