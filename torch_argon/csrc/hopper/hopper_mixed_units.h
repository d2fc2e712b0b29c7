// The mixed-input GEMM's units (hopper_mixed_u<bits>_bf16_cooperative_128x<tile>.cu: one kernel
// of hopper_mixed_gemm.cuh per code width and token tile), as hopper_mixed_entry.cu dispatches
// to them.
#pragma once
#include "hopper/hopper_mixed_gemm.h"

int argon_hopper_mixed_run_u4_t128(const ArgonHopperMixedGemm& gemm, char* err, int err_len);
int argon_hopper_mixed_run_u8_t128(const ArgonHopperMixedGemm& gemm, char* err, int err_len);
int argon_hopper_mixed_run_u4_t64(const ArgonHopperMixedGemm& gemm, char* err, int err_len);
int argon_hopper_mixed_run_u8_t64(const ArgonHopperMixedGemm& gemm, char* err, int err_len);

// One unit's definition: its code width (4 or 8), codes' element and token tile.
#define ARGON_HOPPER_MIXED_UNIT(bits, Narrow, tile)                                             \
  int argon_hopper_mixed_run_u##bits##_t##tile(const ArgonHopperMixedGemm& gemm, char* err,    \
                                               int err_len) {                                  \
    return argon_hopper_mixed::run<argon_hopper_mixed::MixedGemm<Narrow, tile>>(gemm, err,     \
                                                                                err_len);      \
  }
