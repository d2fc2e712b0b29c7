// Autograd-key kernels for every argon op: skip torch's boxed autograd fallback when no
// gradient can flow, and defer to that same fallback when one could.
//
// Why: an op with no kernel at the Autograd key goes through torch's fallback for custom ops,
// a boxed function that scans the arguments for requires_grad and redispatches. A call from
// C++ (plan_fresh's call of moe_plan_out, each functional form's call of its _out form) then
// has its arguments pushed onto an IValue stack and popped again: on this project's 2-core
// CPU host the typed handle's call of a tiny moe_plan_out took 1.6 us with the fallback in the
// way and 0.78 us without (a load_inline probe), 1.5K of ~26K host instructions per call
// (bench/lab/host_instructions.py). Calls from Python arrive boxed and gain little.
// Here the common case, grad mode off or no tensor argument requiring grad, redispatches the
// unboxed call below the autograd keys, as the fallback does (the ADInplaceOrView key, a
// fallthrough for these ops, is skipped either way). Otherwise the arguments are boxed and
// handed to the fallback itself (VariableHooksInterface::basic_autograd_not_implemented_fallback),
// so outputs get the same "no autograd formula" history and the same warning on backward as
// without this file (the argon ops are forward only: nn.py). Either way the backend kernel runs
// below the autograd keys, as torch asks of a non-differentiable op's Autograd kernel.
// Two cases raise, where the fallback would let a derivative go silently wrong: a tensor with a
// forward-mode gradient (a dual tensor), and, in grad mode, an output argument that requires
// grad (torch's own out= ops refuse it too).
#include <ATen/core/VariableHooksInterface.h>
#include <torch/library.h>

#include <type_traits>

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

// Raises if an argument the op writes (Tensor(a!) in the schema) requires grad.
template <typename... Args>
void check_written_args_untracked(const c10::OperatorHandle& op, const Args&... args) {
  const auto& schema = op.schema();
  size_t i = 0;
  const auto check = [&](const auto& arg) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    TORCH_CHECK(alias == nullptr || !alias->isWrite() || !requires_grad(arg), schema.name(),
                ": ", schema.arguments()[i].name(),
                " requires grad; the argon ops are forward only and cannot write into a tensor "
                "that autograd tracks (pass one that does not require grad, or call under "
                "torch.no_grad())");
    ++i;
  };
  (check(args), ...);
}

template <const char* NS, const char* Name, typename Fn>
struct SkipAutograd;

template <const char* NS, const char* Name, typename Ret, typename... Args>
struct SkipAutograd<NS, Name, Ret(Args...)> {
  static Ret kernel(c10::DispatchKeySet keys, Args... args) {
    static const auto op = find_op<Ret(Args...)>(NS, Name);
    TORCH_CHECK_NOT_IMPLEMENTED(!(has_forward_grad(args) || ...), "Trying to use forward AD with ",
                                NS, "::", Name, ", which does not support it (the argon ops are "
                                "forward only)");
    // The backend kernels run with the autograd keys excluded, so the ATen ops they call see
    // no autograd either: torch's out= ops raise when an input requires grad, which made the
    // CPU moe_mm (at::mm_out) fail for a weight requiring grad until this guard.
    at::AutoDispatchBelowAutograd below_autograd;
    if (c10::GradMode::is_enabled() && (requires_grad(args) || ...)) {
      check_written_args_untracked(op, args...);
      torch::jit::Stack stack = c10::impl::boxArgs<Args...>(args...);
      at::impl::GetVariableHooks()->basic_autograd_not_implemented_fallback(op, keys, &stack);
      if constexpr (std::is_void_v<Ret>) {
        return;
      } else {
        return c10::impl::PopResult<Ret>::call(stack);
      }
    }
    return op.redispatch(keys & c10::after_autograd_keyset, args...);
  }
};

// The op names as constants with linkage (template arguments of SkipAutograd).
#define ARGON_NAME_CONSTANTS(name, schema, out_schema, Fn, OutFn) \
  constexpr char k_##name[] = #name;                              \
  constexpr char k_##name##_out[] = #name "_out";
ARGON_OPS(ARGON_NAME_CONSTANTS)
#undef ARGON_NAME_CONSTANTS

template <const char* NS, const char* Name, typename Fn>
void skip_autograd(torch::Library& m) {
  m.impl(Name, TORCH_FN((&SkipAutograd<NS, Name, Fn>::kernel)));
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
#else  // torch_argon._C_test (module_test.cpp)
TORCH_LIBRARY_IMPL(argon_host, Autograd, m) { register_skips<kArgonHost>(m); }
#ifdef ARGON_WITH_CUDA
TORCH_LIBRARY_IMPL(argon_metal_cuda, Autograd, m) { register_skips<kArgonMetalCuda>(m); }
#endif
#endif

}  // namespace argon
