// The argon _out ops on top of the Metal recipe, written once for both places the recipe
// runs: the MPS stream (mps/) and the host runner (host/). Each op checks its arguments
// (checks.h), makes inputs contiguous and allocates scratch BEFORE anything is encoded, then
// hands the encoding to the target in one piece.
#pragma once
#include <functional>

#include <torch/library.h>

#include "metal/recipe.h"
#include "op_signatures.h"
#include "op_table.h"

namespace argon::metal {

class Target {
 public:
  virtual ~Target() = default;
  // A tensor's binding: its storage's buffer and the storage offset in bytes.
  virtual BufArg bind(const at::Tensor& t) = 0;
  // Runs `body` against this target's encoder (MPS: inside dispatch_sync on the stream's queue,
  // into its shared compute encoder; host: on the lane runner, now).
  virtual void encode(const std::function<void(Encoder&)>& body) = 0;
};

ArgonDtype argon_dtype(at::ScalarType t);

// The _out ops, one per op of the table, each with its op's _out signature after the target.
void moe_plan_out(Target& target, const Tensor& topk_ids, const Tensor& topk_weights,
                  int64_t n_expert, int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                  const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
                  const Tensor& tile_expert, const Tensor& meta);
void moe_gather_out(Target& target, const Tensor& x, const Tensor& sorted_token,
                    const Tensor& out);
void moe_combine_out(Target& target, const Tensor& y, const Tensor& pos,
                     const Tensor& topk_weights, const OptTensor& shared,
                     const OptTensor& residual, const Tensor& out);
void swiglu_out(Target& target, const Tensor& gate, const OptTensor& up,
                c10::string_view activation, const Tensor& out);
void swiglu_backward_out(Target& target, const Tensor& grad_out, const Tensor& gate,
                         const OptTensor& up, c10::string_view activation, const Tensor& out);
void moe_mm_weight_grad_out(Target& target, const Tensor& xs, const Tensor& grad_out,
                            const Tensor& tile_expert, int64_t tile_m, int64_t n_expert,
                            const Tensor& out);
void moe_mm_out(Target& target, const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                int64_t tile_m, const Tensor& out);
void dequantize_out(Target& target, const Tensor& w_q, int64_t qtype, int64_t n_in,
                    const Tensor& out);
void moe_qmm_out(Target& target, const Tensor& xs, const Tensor& w_q, int64_t qtype,
                 int64_t n_in, const Tensor& tile_expert, int64_t tile_m,
                 c10::string_view activation_quant, const Tensor& out);

// An op body above bound to the target `get` returns: a kernel with the op's own signature.
template <Target& (*get)(), auto body>
struct OnTarget;
template <Target& (*get)(), typename... Args, void (*body)(Target&, Args...)>
struct OnTarget<get, body> {
  static void kernel(Args... args) { body(get(), args...); }
};

// Registers every op's _out kernel on the target `get` returns, in a TORCH_LIBRARY_IMPL block
// (argon/MPS, argon_host/CPU).
template <Target& (*get)()>
void register_out_ops(torch::Library& m) {
#define ARGON_IMPL_METAL_OUT(name, schema, out_schema, Fn, OutFn) \
  m.impl(#name "_out", TORCH_FN((&OnTarget<get, &name##_out>::kernel)));
  ARGON_OPS(ARGON_IMPL_METAL_OUT)
#undef ARGON_IMPL_METAL_OUT
}

}  // namespace argon::metal
