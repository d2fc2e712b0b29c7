// The functional ops, written once for every backend: check the arguments, allocate outputs
// whose sizes come from shapes alone (never from data, so no host sync), and call the _out op
// of the same library through the dispatcher, which picks the device's kernel.
#include <torch/library.h>

#include "checks.h"
#include "op_signatures.h"
#include "schemas.h"

namespace argon {
namespace {

// One instance per op library (`argon`; in torch_argon._C_test `argon_host`, and in CUDA builds
// `argon_metal_cuda`), so each calls its own _out kernels.
template <const char* NS>
struct Functional {
  static PlanOutputs moe_plan(
      const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert, int64_t tile_m) {
    const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
    PlanOutputs out = make_plan_outputs(
        d, [&](std::initializer_list<int64_t> size, at::ScalarType dtype) {
          return at::empty(size, topk_ids.options().dtype(dtype));
        });
    auto& [counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta] = out;
    static auto op = find_op<PlanOutFn>(NS, "moe_plan_out");
    op.call(topk_ids, topk_weights, n_expert, tile_m, counts, offsets, sorted_token,
            sorted_weight, pos, tile_expert, meta);
    return out;
  }

  static Tensor moe_gather(const Tensor& x, const Tensor& sorted_token,
                           std::optional<at::ScalarType> out_dtype) {
    TORCH_CHECK_VALUE(x.dim() == 2, "x must be 2-D [T, H], got shape ", x.sizes());
    TORCH_CHECK_VALUE(sorted_token.dim() == 1, "sorted_token must be 1-D [R], got shape ",
                sorted_token.sizes());
    Tensor out = at::empty({sorted_token.size(0), x.size(1)},
                           x.options().dtype(out_dtype.value_or(x.scalar_type())));
    static auto op = find_op<GatherOutFn>(NS, "moe_gather_out");
    op.call(x, sorted_token, out);
    return out;
  }

  static Tensor moe_combine(const Tensor& y, const Tensor& pos, const Tensor& topk_weights,
                            const OptTensor& shared, const OptTensor& residual,
                            std::optional<at::ScalarType> out_dtype) {
    TORCH_CHECK_VALUE(y.dim() == 2, "y must be 2-D [R, H], got shape ", y.sizes());
    TORCH_CHECK_VALUE(pos.dim() == 2, "pos must be 2-D [T, K], got shape ", pos.sizes());
    Tensor out = at::empty({pos.size(0), y.size(1)},
                           y.options().dtype(out_dtype.value_or(y.scalar_type())));
    static auto op = find_op<CombineOutFn>(NS, "moe_combine_out");
    op.call(y, pos, topk_weights, shared, residual, out);
    return out;
  }

  static Tensor swiglu(const Tensor& gate, const OptTensor& up,
                       std::optional<at::ScalarType> out_dtype, c10::string_view activation) {
    TORCH_CHECK_VALUE(gate.dim() == 2, "gate must be 2-D, got shape ", gate.sizes());
    const int64_t inner = up.has_value() ? gate.size(1) : gate.size(1) / 2;
    Tensor out = at::empty({gate.size(0), inner},
                           gate.options().dtype(out_dtype.value_or(gate.scalar_type())));
    static auto op = find_op<SwigluOutFn>(NS, "swiglu_out");
    op.call(gate, up, activation, out);
    return out;
  }

  static Tensor moe_mm(const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                       int64_t tile_m) {
    TORCH_CHECK_VALUE(xs.dim() == 2, "xs must be 2-D [R, Kd], got shape ", xs.sizes());
    TORCH_CHECK_VALUE(w.dim() == 3, "w must be 3-D [E, N, Kd], got shape ", w.sizes());
    Tensor out = at::empty({xs.size(0), w.size(1)}, xs.options());
    static auto op = find_op<MoeMmOutFn>(NS, "moe_mm_out");
    op.call(xs, w, tile_expert, tile_m, out);
    return out;
  }

  static Tensor dequantize(const Tensor& w_q, int64_t qtype, int64_t n_in) {
    check_quantized_weight(w_q, check_qtype(qtype), n_in, 0, "[..., N, row_bytes]");
    std::vector<int64_t> shape = w_q.sizes().vec();
    shape.back() = n_in;
    Tensor out = at::empty(shape, w_q.options().dtype(at::kFloat));
    static auto op = find_op<DequantizeOutFn>(NS, "dequantize_out");
    op.call(w_q, qtype, n_in, out);
    return out;
  }

  static Tensor moe_qmm(const Tensor& xs, const Tensor& w_q, int64_t qtype, int64_t n_in,
                        const Tensor& tile_expert, int64_t tile_m,
                        c10::string_view activation_quant) {
    TORCH_CHECK_VALUE(xs.dim() == 2, "xs must be 2-D [R, n_in], got shape ", xs.sizes());
    TORCH_CHECK_VALUE(w_q.dim() == 3, "w_q must be 3-D [E, N, row_bytes], got shape ",
                      w_q.sizes());
    Tensor out = at::empty({xs.size(0), w_q.size(1)}, xs.options());
    static auto op = find_op<MoeQmmOutFn>(NS, "moe_qmm_out");
    op.call(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant, out);
    return out;
  }

  static void register_impls(torch::Library& m) {
#define ARGON_IMPL_FUNCTIONAL(name, schema, out_schema, Fn, OutFn) \
  m.impl(#name, TORCH_FN(name));
    ARGON_OPS(ARGON_IMPL_FUNCTIONAL)
#undef ARGON_IMPL_FUNCTIONAL
  }
};


}  // namespace

#ifndef ARGON_TEST_MODULE
TORCH_LIBRARY(argon, m) { define_schemas(m); }
TORCH_LIBRARY_IMPL(argon, CompositeExplicitAutograd, m) { Functional<kArgon>::register_impls(m); }
#else
// torch_argon._C_test (module_test.cpp): the test executors' op libraries.
TORCH_LIBRARY(argon_host, m) { define_schemas(m); }
TORCH_LIBRARY_IMPL(argon_host, CompositeExplicitAutograd, m) {
  Functional<kArgonHost>::register_impls(m);
}
#ifdef ARGON_WITH_CUDA
// The .metal kernels compiled for CUDA (csrc/metal/cuda): the metal_cuda test backend.
TORCH_LIBRARY(argon_metal_cuda, m) { define_schemas(m); }
TORCH_LIBRARY_IMPL(argon_metal_cuda, CompositeExplicitAutograd, m) {
  Functional<kArgonMetalCuda>::register_impls(m);
}
#endif
#endif

}  // namespace argon
