// moe_qmm's q8 path on the CPU (activation_quant="q8"; moe_qmm_q8_cpu.cpp).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace argon {

// out = the q8 product of xs with w_q over the plan's tiles (te: tile_expert's n_tiles values,
// checked in [-1, E)); the arguments are checked (check_moe_qmm), w_q has unit column stride.
void moe_qmm_q8_cpu(const at::Tensor& xs, const at::Tensor& w_q, int64_t qtype, int64_t n_in,
                    const int32_t* te, int64_t n_tiles, int64_t tile_m, const at::Tensor& out);

}  // namespace argon
