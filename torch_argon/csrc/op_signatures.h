// C++ signatures of the ops. Every backend declares its _out kernels with exactly these types, so
// the functional forms (functional.cpp) can call any backend through one typed handle; the
// autograd-key kernels (autograd_skip.cpp) are written once for all of them.
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <tuple>

namespace argon {

using Tensor = at::Tensor;
using OptTensor = std::optional<at::Tensor>;

using PlanOutFn = void(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                       int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                       const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
                       const Tensor& tile_expert, const Tensor& meta);
using GatherOutFn = void(const Tensor& x, const Tensor& sorted_token, const Tensor& out);
using CombineOutFn = void(const Tensor& y, const Tensor& pos, const Tensor& topk_weights,
                          const OptTensor& shared, const OptTensor& residual, const Tensor& out);
using SwigluOutFn = void(const Tensor& gate, const OptTensor& up, c10::string_view activation,
                         const Tensor& out);
using SwigluBackwardOutFn = void(const Tensor& grad_out, const Tensor& gate, const OptTensor& up,
                                 c10::string_view activation, const Tensor& out);
using MoeMmOutFn = void(const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                        int64_t tile_m, const Tensor& out);
using MoeMmWeightGradOutFn = void(const Tensor& xs, const Tensor& grad_out,
                                  const Tensor& tile_expert, int64_t tile_m, int64_t n_expert,
                                  const Tensor& out);
using DequantizeOutFn = void(const Tensor& w_q, int64_t qtype, int64_t n_in, const Tensor& out);
using MoeQmmOutFn = void(const Tensor& xs, const Tensor& w_q, int64_t qtype, int64_t n_in,
                         const Tensor& tile_expert, int64_t tile_m,
                         c10::string_view activation_quant, const Tensor& out);

// moe_plan's seven outputs: counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta.
using PlanOutputs = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;
using PlanFn = PlanOutputs(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                           int64_t tile_m);
using GatherFn = Tensor(const Tensor& x, const Tensor& sorted_token,
                        std::optional<at::ScalarType> out_dtype);
using CombineFn = Tensor(const Tensor& y, const Tensor& pos, const Tensor& topk_weights,
                         const OptTensor& shared, const OptTensor& residual,
                         std::optional<at::ScalarType> out_dtype);
using SwigluFn = Tensor(const Tensor& gate, const OptTensor& up,
                        std::optional<at::ScalarType> out_dtype, c10::string_view activation);
using SwigluBackwardFn = Tensor(const Tensor& grad_out, const Tensor& gate, const OptTensor& up,
                                c10::string_view activation);
using MoeMmFn = Tensor(const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                       int64_t tile_m);
using MoeMmWeightGradFn = Tensor(const Tensor& xs, const Tensor& grad_out,
                                 const Tensor& tile_expert, int64_t tile_m, int64_t n_expert);
using DequantizeFn = Tensor(const Tensor& w_q, int64_t qtype, int64_t n_in);
using MoeQmmFn = Tensor(const Tensor& xs, const Tensor& w_q, int64_t qtype, int64_t n_in,
                        const Tensor& tile_expert, int64_t tile_m,
                        c10::string_view activation_quant);

// The typed handle of op `name` of library `ns` (e.g. "argon", "moe_plan_out"); find it once
// (a static) and call it for every call after.
template <typename Fn>
c10::TypedOperatorHandle<Fn> find_op(const char* ns, const char* name) {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow((std::string(ns) + "::" + name).c_str(), "")
      .typed<Fn>();
}

}  // namespace argon
