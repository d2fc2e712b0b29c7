// The argon ops, declared once. Every place that registers something per op (the schemas, the
// functional forms, the autograd-key kernels, the Metal out ops, the Python op list) expands
// ARGON_OPS, so an op added here is registered everywhere, or the build fails where its kernel is
// missing. docs/adding-an-op.md lists what else a new op needs.
//
// X(name, functional schema, _out schema, functional C++ type, _out C++ type): the schemas are
// written without the op's name (the name is `name` and `name`_out); the C++ types are those of
// op_signatures.h, which every backend's _out kernel has exactly.
// Functional forms allocate their outputs (sizes from shapes only, never from data) and run the
// _out form; backends implement only the _out forms, which write every element of their outputs.
// No includes: module.cpp expands the table for the op names without pulling in ATen.
#pragma once

#define ARGON_OPS(X)                                                                             \
  X(moe_plan,                                                                                    \
    "(Tensor topk_ids, Tensor topk_weights, int n_expert, int tile_m) -> (Tensor counts, "       \
    "Tensor offsets, Tensor sorted_token, Tensor sorted_weight, Tensor pos, Tensor tile_expert, "\
    "Tensor meta)",                                                                              \
    "(Tensor topk_ids, Tensor topk_weights, int n_expert, int tile_m, Tensor(a!) counts, "       \
    "Tensor(b!) offsets, Tensor(c!) sorted_token, Tensor(d!) sorted_weight, Tensor(e!) pos, "    \
    "Tensor(f!) tile_expert, Tensor(g!) meta) -> ()",                                            \
    PlanFn, PlanOutFn)                                                                           \
  X(moe_gather,                                                                                  \
    "(Tensor x, Tensor sorted_token, ScalarType? out_dtype=None) -> Tensor",                     \
    "(Tensor x, Tensor sorted_token, Tensor(a!) out) -> ()",                                     \
    GatherFn, GatherOutFn)                                                                       \
  X(moe_combine,                                                                                 \
    "(Tensor y, Tensor pos, Tensor topk_weights, Tensor? shared=None, Tensor? residual=None, "   \
    "ScalarType? out_dtype=None) -> Tensor",                                                     \
    "(Tensor y, Tensor pos, Tensor topk_weights, Tensor? shared, Tensor? residual, "             \
    "Tensor(a!) out) -> ()",                                                                     \
    CombineFn, CombineOutFn)                                                                     \
  X(swiglu,                                                                                      \
    "(Tensor gate, Tensor? up=None, ScalarType? out_dtype=None, str activation=\"silu\") -> "    \
    "Tensor",                                                                                    \
    "(Tensor gate, Tensor? up, str activation, Tensor(a!) out) -> ()",                           \
    SwigluFn, SwigluOutFn)                                                                       \
  X(swiglu_backward,                                                                             \
    "(Tensor grad_out, Tensor gate, Tensor? up=None, str activation=\"silu\") -> Tensor",        \
    "(Tensor grad_out, Tensor gate, Tensor? up, str activation, Tensor(a!) out) -> ()",          \
    SwigluBackwardFn, SwigluBackwardOutFn)                                                       \
  X(moe_mm,                                                                                      \
    "(Tensor xs, Tensor w, Tensor tile_expert, int tile_m) -> Tensor",                           \
    "(Tensor xs, Tensor w, Tensor tile_expert, int tile_m, Tensor(a!) out) -> ()",               \
    MoeMmFn, MoeMmOutFn)                                                                         \
  X(moe_mm_weight_grad,                                                                          \
    "(Tensor xs, Tensor grad_out, Tensor tile_expert, int tile_m, int n_expert) -> Tensor",      \
    "(Tensor xs, Tensor grad_out, Tensor tile_expert, int tile_m, int n_expert, "                \
    "Tensor(a!) out) -> ()",                                                                     \
    MoeMmWeightGradFn, MoeMmWeightGradOutFn)                                                     \
  X(dequantize,                                                                                  \
    "(Tensor w_q, int qtype, int n_in) -> Tensor",                                               \
    "(Tensor w_q, int qtype, int n_in, Tensor(a!) out) -> ()",                                   \
    DequantizeFn, DequantizeOutFn)                                                               \
  X(moe_qmm,                                                                                     \
    "(Tensor xs, Tensor w_q, int qtype, int n_in, Tensor tile_expert, int tile_m, "              \
    "str activation_quant=\"none\") -> Tensor",                                                  \
    "(Tensor xs, Tensor w_q, int qtype, int n_in, Tensor tile_expert, int tile_m, "              \
    "str activation_quant, Tensor(a!) out) -> ()",                                               \
    MoeQmmFn, MoeQmmOutFn)

namespace argon {
// The two op libraries (schemas.h), as template arguments of the per-library registrations
// (functional.cpp, autograd_skip.cpp).
inline constexpr char kArgon[] = "argon";
inline constexpr char kArgonHost[] = "argon_host";
inline constexpr char kArgonMetalCuda[] = "argon_metal_cuda";  // CUDA builds: csrc/metal/cuda
}  // namespace argon
