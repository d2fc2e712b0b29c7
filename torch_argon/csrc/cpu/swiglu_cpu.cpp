// swiglu on the CPU: out = silu(g) * u in fp32, rounded once. Inputs as two [R, I] tensors or
// one [R, 2I] tensor (gate half, then up half).
// Parallel over blocks of rows small enough to stay in cache; inside a block, torch's own
// elementwise kernels (vectorised for the CPU they run on, picked at run time) convert to fp32,
// apply silu, multiply and round once into `out`. A hand loop here would be compiled for the
// baseline ISA only.
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/library.h>

#include "../checks.h"
#include "../op_signatures.h"

namespace argon {
namespace {

constexpr int64_t kBlockElements = 16384;  // fp32 temporaries of a block: 2 x 64 KB

void swiglu_out_cpu(const Tensor& gate, const OptTensor& up, const Tensor& out) {
  check_swiglu(gate, up, out);
  const int64_t R = out.size(0), I = out.size(1);
  if (R == 0 || I == 0) return;
  const Tensor g = up ? gate : gate.narrow(1, 0, I);
  const Tensor u = up ? *up : gate.narrow(1, I, I);
  const int64_t block = std::max<int64_t>(1, kBlockElements / I);
  at::parallel_for(0, R, block, [&](int64_t r0, int64_t r1) {
    // Inference mode is thread-local: the pool's threads do not inherit the caller's, and
    // without it the in-place ops below would refuse the caller's inference tensors.
    const c10::InferenceMode no_autograd;
    for (int64_t r = r0; r < r1; r += block) {
      const int64_t n = std::min(block, r1 - r);
      Tensor h = at::silu(g.narrow(0, r, n).to(at::kFloat));  // .to: no copy for fp32
      h.mul_(u.narrow(0, r, n).to(at::kFloat));
      out.narrow(0, r, n).copy_(h);
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("swiglu_out", TORCH_FN(swiglu_out_cpu)); }

}  // namespace argon
