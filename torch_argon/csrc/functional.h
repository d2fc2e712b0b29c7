// The functional ops, written once for every backend and for the fakes: check the arguments,
// allocate outputs whose sizes come from shapes alone (never from data, so no host sync), and
// run the _out form. `Out` says how the _out form runs:
//   DispatchOut<NS>  the _out op of library NS through the dispatcher, which picks the device's
//                    kernel (functional.cpp registers these as the ops' functional kernels);
//   ChecksOnly       its argument checks alone: the fakes (meta tensors, torch.compile's
//                    FakeTensors), which python_meta.cpp hands to the Python fake registrations.
// So a fake runs the very checks and output-shape rules of the kernels, and a call that a kernel
// would refuse fails while torch.compile traces, with the kernel's exception and message.
// Sizes are SymInts: under torch.compile with dynamic shapes the outputs get symbolic sizes.
#pragma once
#include <ATen/ATen.h>

#include "checks.h"
#include "op_signatures.h"

namespace argon {

template <const char* NS>
struct DispatchOut {
  static void moe_plan_out(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                           int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                           const Tensor& sorted_token, const Tensor& sorted_weight,
                           const Tensor& pos, const Tensor& tile_expert, const Tensor& meta) {
    static auto op = find_op<PlanOutFn>(NS, "moe_plan_out");
    op.call(topk_ids, topk_weights, n_expert, tile_m, counts, offsets, sorted_token,
            sorted_weight, pos, tile_expert, meta);
  }
  static void moe_gather_out(const Tensor& x, const Tensor& sorted_token, const Tensor& out) {
    static auto op = find_op<GatherOutFn>(NS, "moe_gather_out");
    op.call(x, sorted_token, out);
  }
  static void moe_combine_out(const Tensor& y, const Tensor& pos, const Tensor& topk_weights,
                              const OptTensor& shared, const OptTensor& residual,
                              const Tensor& out) {
    static auto op = find_op<CombineOutFn>(NS, "moe_combine_out");
    op.call(y, pos, topk_weights, shared, residual, out);
  }
  static void swiglu_out(const Tensor& gate, const OptTensor& up, c10::string_view activation,
                         const Tensor& out) {
    static auto op = find_op<SwigluOutFn>(NS, "swiglu_out");
    op.call(gate, up, activation, out);
  }
  static void swiglu_backward_out(const Tensor& grad_out, const Tensor& gate, const OptTensor& up,
                                  c10::string_view activation, const Tensor& out) {
    static auto op = find_op<SwigluBackwardOutFn>(NS, "swiglu_backward_out");
    op.call(grad_out, gate, up, activation, out);
  }
  static void moe_mm_weight_grad_out(const Tensor& xs, const Tensor& grad_out,
                                     const Tensor& tile_expert, int64_t tile_m, int64_t n_expert,
                                     const Tensor& out) {
    static auto op = find_op<MoeMmWeightGradOutFn>(NS, "moe_mm_weight_grad_out");
    op.call(xs, grad_out, tile_expert, tile_m, n_expert, out);
  }
  static void moe_mm_out(const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                         int64_t tile_m, const Tensor& out) {
    static auto op = find_op<MoeMmOutFn>(NS, "moe_mm_out");
    op.call(xs, w, tile_expert, tile_m, out);
  }
  static void dequantize_out(const Tensor& w_q, int64_t qtype, int64_t n_in, const Tensor& out) {
    static auto op = find_op<DequantizeOutFn>(NS, "dequantize_out");
    op.call(w_q, qtype, n_in, out);
  }
  static void moe_qmm_out(const Tensor& xs, const Tensor& w_q, int64_t qtype, int64_t n_in,
                          const Tensor& tile_expert, int64_t tile_m,
                          c10::string_view activation_quant, const Tensor& out) {
    static auto op = find_op<MoeQmmOutFn>(NS, "moe_qmm_out");
    op.call(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out);
  }
};

// The _out forms' fakes: exactly the checks every backend's kernel runs first.
struct ChecksOnly {
  static void moe_plan_out(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                           int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                           const Tensor& sorted_token, const Tensor& sorted_weight,
                           const Tensor& pos, const Tensor& tile_expert, const Tensor& meta) {
    check_plan_outputs(check_plan_args(topk_ids, topk_weights, n_expert, tile_m), topk_ids,
                       topk_weights, counts, offsets, sorted_token, sorted_weight, pos,
                       tile_expert, meta);
  }
  static void moe_gather_out(const Tensor& x, const Tensor& sorted_token, const Tensor& out) {
    check_gather(x, sorted_token, out);
  }
  static void moe_combine_out(const Tensor& y, const Tensor& pos, const Tensor& topk_weights,
                              const OptTensor& shared, const OptTensor& residual,
                              const Tensor& out) {
    check_combine(y, pos, topk_weights, shared, residual, out);
  }
  static void swiglu_out(const Tensor& gate, const OptTensor& up, c10::string_view activation,
                         const Tensor& out) {
    check_swiglu(gate, up, activation, out);
  }
  static void swiglu_backward_out(const Tensor& grad_out, const Tensor& gate, const OptTensor& up,
                                  c10::string_view activation, const Tensor& out) {
    check_swiglu_backward(grad_out, gate, up, activation, out);
  }
  static void moe_mm_weight_grad_out(const Tensor& xs, const Tensor& grad_out,
                                     const Tensor& tile_expert, int64_t tile_m, int64_t n_expert,
                                     const Tensor& out) {
    check_moe_mm_weight_grad(xs, grad_out, tile_expert, tile_m, n_expert, out);
  }
  static void moe_mm_out(const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                         int64_t tile_m, const Tensor& out) {
    check_moe_mm(xs, w, tile_expert, tile_m, out);
  }
  static void dequantize_out(const Tensor& w_q, int64_t qtype, int64_t n_in, const Tensor& out) {
    check_dequantize(w_q, qtype, n_in, out);
  }
  static void moe_qmm_out(const Tensor& xs, const Tensor& w_q, int64_t qtype, int64_t n_in,
                          const Tensor& tile_expert, int64_t tile_m,
                          c10::string_view activation_quant, const Tensor& out) {
    check_moe_qmm(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out);
  }
};

template <typename Out>
struct Functional {
  static PlanOutputs moe_plan(const Tensor& topk_ids, const Tensor& topk_weights,
                              int64_t n_expert, int64_t tile_m) {
    const SymPlanDims d = check_plan_args(topk_ids, topk_weights, n_expert, tile_m);
    PlanOutputs out = make_plan_outputs(
        d, [&](std::initializer_list<c10::SymInt> size, at::ScalarType dtype) {
          return at::empty_symint(size, topk_ids.options().dtype(dtype));
        });
    const auto& [counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta] = out;
    Out::moe_plan_out(topk_ids, topk_weights, n_expert, tile_m, counts, offsets, sorted_token,
                      sorted_weight, pos, tile_expert, meta);
    return out;
  }

  static Tensor moe_gather(const Tensor& x, const Tensor& sorted_token,
                           std::optional<at::ScalarType> out_dtype) {
    Tensor out = at::empty_symint(check_gather_inputs(x, sorted_token),
                                  x.options().dtype(out_dtype.value_or(x.scalar_type())));
    Out::moe_gather_out(x, sorted_token, out);
    return out;
  }

  static Tensor moe_combine(const Tensor& y, const Tensor& pos, const Tensor& topk_weights,
                            const OptTensor& shared, const OptTensor& residual,
                            std::optional<at::ScalarType> out_dtype) {
    Tensor out = at::empty_symint(check_combine_inputs(y, pos, topk_weights, shared, residual),
                                  y.options().dtype(out_dtype.value_or(y.scalar_type())));
    Out::moe_combine_out(y, pos, topk_weights, shared, residual, out);
    return out;
  }

  static Tensor swiglu(const Tensor& gate, const OptTensor& up,
                       std::optional<at::ScalarType> out_dtype, c10::string_view activation) {
    Tensor out = at::empty_symint(check_swiglu_inputs(gate, up, activation).out_shape,
                                  gate.options().dtype(out_dtype.value_or(gate.scalar_type())));
    Out::swiglu_out(gate, up, activation, out);
    return out;
  }

  static Tensor moe_mm(const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                       int64_t tile_m) {
    Tensor out = at::empty_symint(check_moe_mm_inputs(xs, w, tile_expert, tile_m), xs.options());
    Out::moe_mm_out(xs, w, tile_expert, tile_m, out);
    return out;
  }

  static Tensor swiglu_backward(const Tensor& grad_out, const Tensor& gate, const OptTensor& up,
                                c10::string_view activation) {
    Tensor out = at::empty_symint(
        check_swiglu_backward_inputs(grad_out, gate, up, activation).out_shape, gate.options());
    Out::swiglu_backward_out(grad_out, gate, up, activation, out);
    return out;
  }

  static Tensor moe_mm_weight_grad(const Tensor& xs, const Tensor& grad_out,
                                   const Tensor& tile_expert, int64_t tile_m, int64_t n_expert) {
    Tensor out = at::empty_symint(
        check_moe_mm_weight_grad_inputs(xs, grad_out, tile_expert, tile_m, n_expert),
        xs.options());
    Out::moe_mm_weight_grad_out(xs, grad_out, tile_expert, tile_m, n_expert, out);
    return out;
  }

  static Tensor dequantize(const Tensor& w_q, int64_t qtype, int64_t n_in) {
    Tensor out = at::empty_symint(check_dequantize_inputs(w_q, qtype, n_in),
                                  w_q.options().dtype(at::kFloat));
    Out::dequantize_out(w_q, qtype, n_in, out);
    return out;
  }

  static Tensor moe_qmm(const Tensor& xs, const Tensor& w_q, int64_t qtype, int64_t n_in,
                        const Tensor& tile_expert, int64_t tile_m,
                        c10::string_view activation_quant) {
    Tensor out = at::empty_symint(
        check_moe_qmm_inputs(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant),
        xs.options());
    Out::moe_qmm_out(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out);
    return out;
  }
};

}  // namespace argon
