// Autograd-key kernels for every argon op: skip torch's boxed autograd fallback when no
// gradient can flow, and defer to that same fallback when one could.
//
// Why: an op with no kernel at the Autograd key goes through torch's fallback for custom ops,
// a boxed function (every argument pushed onto an IValue stack and popped again) that scans
// the arguments for requires_grad and redispatches. That round trip is most of an argon op's
// host cost beyond its kernel launch: ~1.2 us of the 2.0-2.5 us a tiny moe_plan_out costs on
// this project's 2-core CPU host (a load_inline probe calling the op handle with and without
// an Autograd kernel in the way), paid once by each _out call and twice by each functional
// call (its own, then its _out form's).
// Here the common case, grad mode off or no tensor argument requiring grad, redispatches the
// unboxed call below the autograd keys, as the fallback does (the ADInplaceOrView key, a
// fallthrough for these ops, is skipped either way). Otherwise the arguments are boxed and
// handed to the fallback itself (VariableHooksInterface::basic_autograd_not_implemented_fallback),
// so outputs get the same "no autograd formula" history and the same warning on backward as
// without this file (the argon ops are forward only: nn.py). Either way the backend kernel runs
// below the autograd keys, as torch asks of a non-differentiable op's Autograd kernel.
#include <ATen/core/VariableHooksInterface.h>
#include <torch/library.h>

#include <type_traits>

#include "op_signatures.h"

namespace argon {
namespace {

bool requires_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }
bool requires_grad(const OptTensor& t) { return t.has_value() && requires_grad(*t); }
template <typename T>
bool requires_grad(const T&) {  // ints, dtypes: never
  return false;
}

template <const char* NS, const char* Name, typename Fn>
struct SkipAutograd;

template <const char* NS, const char* Name, typename Ret, typename... Args>
struct SkipAutograd<NS, Name, Ret(Args...)> {
  static Ret kernel(c10::DispatchKeySet keys, Args... args) {
    static const auto op = find_op<Ret(Args...)>(NS, Name);
    // The kernels below run with the autograd keys excluded, so the ATen ops they call (the
    // CPU moe_mm's at::mm_out, for one) see no autograd either: an out= op of torch raises
    // if an input requires grad, and before this guard moe_mm did with a weight that did.
    at::AutoDispatchBelowAutograd below_autograd;
    if (c10::GradMode::is_enabled() && (requires_grad(args) || ...)) {
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

constexpr char kMoePlan[] = "moe_plan";
constexpr char kMoeGather[] = "moe_gather";
constexpr char kMoeCombine[] = "moe_combine";
constexpr char kSwiglu[] = "swiglu";
constexpr char kMoeMm[] = "moe_mm";
constexpr char kMoePlanOut[] = "moe_plan_out";
constexpr char kMoeGatherOut[] = "moe_gather_out";
constexpr char kMoeCombineOut[] = "moe_combine_out";
constexpr char kSwigluOut[] = "swiglu_out";
constexpr char kMoeMmOut[] = "moe_mm_out";

template <const char* NS, const char* Name, typename Fn>
void skip_autograd(torch::Library& m) {
  m.impl(Name, TORCH_FN((&SkipAutograd<NS, Name, Fn>::kernel)));
}

template <const char* NS>
void register_skips(torch::Library& m) {
  skip_autograd<NS, kMoePlan, PlanFn>(m);
  skip_autograd<NS, kMoeGather, GatherFn>(m);
  skip_autograd<NS, kMoeCombine, CombineFn>(m);
  skip_autograd<NS, kSwiglu, SwigluFn>(m);
  skip_autograd<NS, kMoeMm, MoeMmFn>(m);
  skip_autograd<NS, kMoePlanOut, PlanOutFn>(m);
  skip_autograd<NS, kMoeGatherOut, GatherOutFn>(m);
  skip_autograd<NS, kMoeCombineOut, CombineOutFn>(m);
  skip_autograd<NS, kSwigluOut, SwigluOutFn>(m);
  skip_autograd<NS, kMoeMmOut, MoeMmOutFn>(m);
}

constexpr char kArgon[] = "argon";
constexpr char kArgonHost[] = "argon_host";

}  // namespace

TORCH_LIBRARY_IMPL(argon, Autograd, m) { register_skips<kArgon>(m); }
TORCH_LIBRARY_IMPL(argon_host, Autograd, m) { register_skips<kArgonHost>(m); }

}  // namespace argon
