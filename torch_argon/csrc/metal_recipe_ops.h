// The five argon _out ops on top of the Metal recipe, written once for both places the recipe
// runs: the MPS stream (mps/) and the host runner (metal_host/). Each op checks its arguments
// (checks.h), makes inputs contiguous and allocates scratch BEFORE anything is encoded, then
// hands the encoding to the target in one piece.
#pragma once
#include <functional>

#include <torch/library.h>

#include "metal_recipe.h"
#include "op_signatures.h"

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

void plan_out(Target& target, const Tensor& topk_ids, const Tensor& topk_weights,
              int64_t n_expert, int64_t tile_m, const Tensor& counts, const Tensor& offsets,
              const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
              const Tensor& tile_expert, const Tensor& meta);
void gather_out(Target& target, const Tensor& x, const Tensor& sorted_token, const Tensor& out);
void combine_out(Target& target, const Tensor& y, const Tensor& pos, const Tensor& topk_weights,
                 const OptTensor& shared, const OptTensor& residual, const Tensor& out);
void swiglu_out(Target& target, const Tensor& gate, const OptTensor& up, const Tensor& out);
void moe_mm_out(Target& target, const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                int64_t tile_m, const Tensor& out);

// The five _out kernels on the target returned by `get`; register_all puts them in a
// TORCH_LIBRARY_IMPL block (argon/MPS, argon_host/CPU).
template <Target& (*get)()>
struct OutOps {
  static void register_all(torch::Library& m) {
    m.impl("moe_plan_out", TORCH_FN(plan));
    m.impl("moe_gather_out", TORCH_FN(gather));
    m.impl("moe_combine_out", TORCH_FN(combine));
    m.impl("swiglu_out", TORCH_FN(swiglu));
    m.impl("moe_mm_out", TORCH_FN(moe_mm));
  }
  static void plan(const Tensor& a, const Tensor& b, int64_t c, int64_t d, const Tensor& e,
                   const Tensor& f, const Tensor& g, const Tensor& h, const Tensor& i,
                   const Tensor& j, const Tensor& k) {
    plan_out(get(), a, b, c, d, e, f, g, h, i, j, k);
  }
  static void gather(const Tensor& x, const Tensor& st, const Tensor& out) {
    gather_out(get(), x, st, out);
  }
  static void combine(const Tensor& y, const Tensor& pos, const Tensor& w, const OptTensor& s,
                      const OptTensor& r, const Tensor& out) {
    combine_out(get(), y, pos, w, s, r, out);
  }
  static void swiglu(const Tensor& g, const OptTensor& u, const Tensor& out) {
    swiglu_out(get(), g, u, out);
  }
  static void moe_mm(const Tensor& xs, const Tensor& w, const Tensor& te, int64_t tm,
                     const Tensor& out) {
    moe_mm_out(get(), xs, w, te, tm, out);
  }
};

}  // namespace argon::metal
