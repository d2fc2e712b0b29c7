// The launch recipe of the argon Metal kernels, written once: which kernels, in which order, with
// which grid and params, and which tensor binds which kernel parameter (by name: bind.h). It is
// written against the Encoder interface (encoder.h) that MPS (mps/) and the host runner (host/)
// implement, so every parity test run on the host also checks the recipe the GPU uses. Free of
// torch, so the standalone ThreadSanitizer build uses it.
#pragma once
#include <cstdint>

#include "shared/combine_params.h"
#include "shared/gather_params.h"
#include "metal/encoder.h"
#include "shared/moe_mm_params.h"
#include "shared/plan_params.h"
#include "shared/quant_params.h"
#include "shared/swiglu_params.h"

namespace argon::metal {

// ---- moe_plan --------------------------------------------------------------------------------
struct PlanLaunch {
  ArgonPlanParams params{};
  uint64_t scratch_ints = 1;  // int32 elements of the block_counts scratch buffer (>= 1)
};
// Throws std::invalid_argument beyond the limits (E > ARGON_PLAN_MAX_EXPERTS, rows beyond int32).
PlanLaunch plan_launch(int64_t T, int64_t K, int64_t E, int64_t tile_m, int64_t r_max,
                       bool ids_64bit, ArgonDtype weight_dtype);
struct PlanBuffers {
  BufArg ids, weights, counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta, scratch;
};
void encode_plan(Encoder& enc, const PlanLaunch& launch, const PlanBuffers& b);

// ---- moe_gather ------------------------------------------------------------------------------
struct GatherBuffers {
  BufArg x, sorted_token, out;
};
// The kernel the recipe picks for these params and bindings (exposed for tests and logs).
const char* gather_kernel(const ArgonGatherParams& p, const GatherBuffers& b);
void encode_gather(Encoder& enc, const ArgonGatherParams& p, const GatherBuffers& b);

// ---- moe_combine -----------------------------------------------------------------------------
struct CombineBuffers {
  BufArg y, pos, weights, shared, residual, out;  // shared / residual: any buffer when absent
};
void encode_combine(Encoder& enc, const ArgonCombineParams& p, const CombineBuffers& b);

// ---- swiglu ----------------------------------------------------------------------------------
struct SwigluBuffers {
  BufArg gate, up, out;  // fused [R, 2I] input: up = gate, p.up_offset = I
};
void encode_swiglu(Encoder& enc, const ArgonSwigluParams& p, const SwigluBuffers& b);

// ---- swiglu_backward -------------------------------------------------------------------------
struct SwigluBackwardBuffers {
  BufArg grad_out, gate, up, out;  // fused [R, 2I] input: up = gate, p.up_offset = I
};
void encode_swiglu_backward(Encoder& enc, const ArgonSwigluBackwardParams& p,
                            const SwigluBackwardBuffers& b);

// ---- moe_mm ----------------------------------------------------------------------------------
struct MoeMmBuffers {
  BufArg xs, w, tile_expert, out;
};
const char* moe_mm_kernel(const ArgonMoeMmParams& p);
void encode_moe_mm(Encoder& enc, const ArgonMoeMmParams& p, const MoeMmBuffers& b);

// ---- moe_mm_weight_grad ----------------------------------------------------------------------
struct MoeMmWeightGradBuffers {
  BufArg xs, grad_out, tile_expert, out;
};
void encode_moe_mm_weight_grad(Encoder& enc, const ArgonMoeMmWeightGradParams& p,
                               const MoeMmWeightGradBuffers& b);

// ---- dequantize, moe_qmm (quant_params.h; the kernels are per format) -----------------------
// The kernel for ggml type `qtype`, or nullptr for a type without kernels.
const char* dequantize_kernel(uint32_t qtype);
const char* moe_qmm_kernel(uint32_t qtype);
struct DequantizeBuffers {
  BufArg w, out;
};
// Throws std::invalid_argument for a type without kernels or a grid beyond 2^32 threadgroups.
void encode_dequantize(Encoder& enc, uint32_t qtype, const ArgonDequantParams& p,
                       const DequantizeBuffers& b);
struct MoeQmmBuffers {
  BufArg xs, w, tile_expert, out;
};
void encode_moe_qmm(Encoder& enc, uint32_t qtype, const ArgonMoeQmmParams& p,
                    const MoeQmmBuffers& b);

}  // namespace argon::metal
