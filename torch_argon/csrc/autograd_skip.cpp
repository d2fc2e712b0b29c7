// Autograd-key kernels for every argon op: skip torch's boxed autograd fallback when no
// gradient can flow, and refuse the call when one would be needed.
//
// Why a kernel: an op with no kernel at the Autograd key goes through torch's fallback for
// custom ops, a boxed function that scans the arguments for requires_grad and redispatches. A
// call from C++ (plan_fresh's call of moe_plan_out, each functional form's call of its _out
// form) then has its arguments pushed onto an IValue stack and popped again: on this project's
// 2-core CPU host the typed handle's call of a tiny moe_plan_out took 1.6 us with the fallback
// in the way and 0.78 us without (a load_inline probe), 1.5K of ~26K host instructions per call
// (bench/lab/host_instructions.py). Here the common case, grad mode off or no tensor argument
// requiring grad, redispatches the unboxed call below the autograd keys, as the fallback does
// (the ADInplaceOrView key, a fallthrough for these ops, is skipped either way).
//
// Why a refusal: an op without a backward formula would otherwise return outputs whose
// backward passes no gradient (torch only warns), so a model trained through it would silently
// not train. In grad mode, a tensor argument that requires grad (an input, or an output the op
// would write) raises autograd_refusal.h's NotImplementedError naming the op and the argument,
// before any kernel runs. A tensor with a forward-mode gradient (a dual tensor) raises too.
// Which ops have what (issue 46):
//   - the functional forms of moe_gather, moe_combine, swiglu, moe_mm and moe_qmm have backward
//     formulas (torch_argon/autograd.py, torch.library.register_autograd): their Autograd slot
//     is the formula's, so they are left out here (kHasFormula);
//   - moe_plan is not differentiable (integer outputs; sorted_weight is a copy the layer never
//     differentiates through): it runs below autograd whatever requires grad, its outputs
//     never require grad (kNeverDifferentiable);
//   - the _out forms (torch's own out= ops refuse autograd too), swiglu_backward and
//     moe_mm_weight_grad (the formulas' own ops: no double backward) and dequantize (bytes in)
//     keep the refusal.
#include <torch/library.h>

#include <string_view>

#include "autograd_refusal.h"
#include "op_signatures.h"
#include "op_table.h"

namespace argon {
namespace {

bool requires_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }
bool requires_grad(const OptTensor& t) { return t.has_value() && requires_grad(*t); }
template <typename T>
bool requires_grad(const T&) {  // ints, dtypes: never
  return false;
}

// A forward-mode gradient (level 0, the one forward_ad.dual_level opens first); tensors with no
// autograd metadata, the common case, cost two loads.
bool has_forward_grad(const Tensor& t) {
  return t.defined() && t.unsafeGetTensorImpl()->autograd_meta() != nullptr &&
         t._fw_grad(/*level=*/0).defined();
}
bool has_forward_grad(const OptTensor& t) { return t.has_value() && has_forward_grad(*t); }
template <typename T>
bool has_forward_grad(const T&) {
  return false;
}

// The position of the first argument that requires grad, or -1.
template <typename... Args>
int first_requiring_grad(const Args&... args) {
  const bool flags[] = {requires_grad(args)...};
  for (int i = 0; i < static_cast<int>(sizeof...(Args)); ++i) {
    if (flags[i]) return i;
  }
  return -1;
}

}  // namespace

[[noreturn]] void refuse_gradient(std::string_view op, std::string_view argument) {
  C10_THROW_ERROR(NotImplementedError,
                  c10::str(op, ": ", argument, " requires grad, but this op has no backward "
                           "formula: no gradient would reach it. To train, call the functional "
                           "forms of moe_gather, moe_combine, swiglu, moe_mm or moe_qmm (or "
                           "moe_layer / nn.MoE, which run them in grad mode); their out= forms, "
                           "the fused Triton GEMMs and the backward ops themselves are forward "
                           "only. For inference, call under torch.no_grad() or "
                           "torch.inference_mode()."));
}

namespace {

template <const char* NS, const char* Name, bool Refuse, typename Fn>
struct SkipAutograd;

template <const char* NS, const char* Name, bool Refuse, typename Ret, typename... Args>
struct SkipAutograd<NS, Name, Refuse, Ret(Args...)> {
  static Ret kernel(c10::DispatchKeySet keys, Args... args) {
    static const auto op = find_op<Ret(Args...)>(NS, Name);
    TORCH_CHECK_NOT_IMPLEMENTED(!(has_forward_grad(args) || ...), "Trying to use forward AD with ",
                                NS, "::", Name, ", which does not support it (the argon ops have "
                                "backward formulas only)");
    if (Refuse && c10::GradMode::is_enabled()) {
      const int i = first_requiring_grad(args...);
      if (i >= 0) refuse_gradient(op.schema().name(), op.schema().arguments()[i].name());
    }
    // The backend kernels run with the autograd keys excluded, so the ATen ops they call see
    // no autograd either: torch's out= ops raise when an input requires grad.
    at::AutoDispatchBelowAutograd below_autograd;
    return op.redispatch(keys & c10::after_autograd_keyset, args...);
  }
};

// The ops with a backward formula: torch.library.register_autograd's kernel sends a call with
// no argument requiring grad below autograd, so a dual tensor would lose its tangent silently.
// This kernel, one key lower (ADInplaceOrView, which every tensor outside inference mode
// carries), refuses forward AD for them as SkipAutograd does for the others.
template <const char* NS, const char* Name, typename Fn>
struct RefuseForwardAD;

template <const char* NS, const char* Name, typename Ret, typename... Args>
struct RefuseForwardAD<NS, Name, Ret(Args...)> {
  static Ret kernel(c10::DispatchKeySet keys, Args... args) {
    static const auto op = find_op<Ret(Args...)>(NS, Name);
    TORCH_CHECK_NOT_IMPLEMENTED(!(has_forward_grad(args) || ...), "Trying to use forward AD with ",
                                NS, "::", Name, ", which does not support it (the argon ops have "
                                "backward formulas only)");
    return op.redispatch(keys & c10::after_ADInplaceOrView_keyset, args...);
  }
};

// The op names as constants with linkage (template arguments of SkipAutograd).
#define ARGON_NAME_CONSTANTS(name, schema, out_schema, Fn, OutFn) \
  constexpr char k_##name[] = #name;                              \
  constexpr char k_##name##_out[] = #name "_out";
ARGON_OPS(ARGON_NAME_CONSTANTS)
#undef ARGON_NAME_CONSTANTS

// The functional forms whose Autograd slot is a backward formula (torch_argon/autograd.py).
constexpr bool kHasFormula(std::string_view name) {
  return name == "moe_gather" || name == "moe_combine" || name == "swiglu" || name == "moe_mm" ||
         name == "moe_qmm";
}
// The ops that run below autograd whatever requires grad: no output is differentiable.
constexpr bool kNeverDifferentiable(std::string_view name) { return name == "moe_plan"; }

template <const char* NS, const char* Name, typename Fn>
void skip_autograd(torch::Library& m) {
  if constexpr (!kHasFormula(Name)) {
    m.impl(Name, TORCH_FN((&SkipAutograd<NS, Name, !kNeverDifferentiable(Name), Fn>::kernel)));
  }
}

template <const char* NS, const char* Name, typename Fn>
void refuse_forward_ad(torch::Library& m) {
  if constexpr (kHasFormula(Name)) {
    m.impl(Name, TORCH_FN((&RefuseForwardAD<NS, Name, Fn>::kernel)));
  }
}

template <const char* NS>
void register_forward_ad_refusals(torch::Library& m) {
#define ARGON_REFUSE_FORWARD_AD(name, schema, out_schema, Fn, OutFn) \
  refuse_forward_ad<NS, k_##name, Fn>(m);
  ARGON_OPS(ARGON_REFUSE_FORWARD_AD)
#undef ARGON_REFUSE_FORWARD_AD
}

template <const char* NS>
void register_skips(torch::Library& m) {
#define ARGON_SKIP_AUTOGRAD(name, schema, out_schema, Fn, OutFn) \
  skip_autograd<NS, k_##name, Fn>(m);                            \
  skip_autograd<NS, k_##name##_out, OutFn>(m);
  ARGON_OPS(ARGON_SKIP_AUTOGRAD)
#undef ARGON_SKIP_AUTOGRAD
}

}  // namespace

#ifndef ARGON_TEST_MODULE
TORCH_LIBRARY_IMPL(argon, Autograd, m) { register_skips<kArgon>(m); }
TORCH_LIBRARY_IMPL(argon, ADInplaceOrView, m) { register_forward_ad_refusals<kArgon>(m); }
#else  // torch_argon._C_test (module_test.cpp)
TORCH_LIBRARY_IMPL(argon_host, Autograd, m) { register_skips<kArgonHost>(m); }
TORCH_LIBRARY_IMPL(argon_host, ADInplaceOrView, m) { register_forward_ad_refusals<kArgonHost>(m); }
#ifdef ARGON_WITH_CUDA
TORCH_LIBRARY_IMPL(argon_metal_cuda, Autograd, m) { register_skips<kArgonMetalCuda>(m); }
TORCH_LIBRARY_IMPL(argon_metal_cuda, ADInplaceOrView, m) {
  register_forward_ad_refusals<kArgonMetalCuda>(m);
}
#endif
#endif

}  // namespace argon
