// The mixed-input GEMM's units (hopper_mixed_u<bits>_bf16_cooperative_128x128.cu: one kernel
// of hopper_mixed_gemm.cuh per code width), as hopper_mixed_entry.cu dispatches to them.
#pragma once
#include "hopper/hopper_mixed_gemm.h"

int argon_hopper_mixed_run_u4(const ArgonHopperMixedGemm& gemm, char* err, int err_len);
int argon_hopper_mixed_run_u8(const ArgonHopperMixedGemm& gemm, char* err, int err_len);
