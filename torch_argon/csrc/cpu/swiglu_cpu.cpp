// swiglu on the CPU: out = silu(g) * u in fp32, rounded once. Inputs as two [R, I] tensors or
// one [R, 2I] tensor (gate half, then up half). Parallel over rows; the inner loop has no libm
// call (fast_exp.h), so it vectorises.
#include <ATen/Parallel.h>
#include <torch/library.h>


#include "../checks.h"
#include "../op_signatures.h"
#include "fast_exp.h"
#include "float_dispatch.h"

namespace argon {
namespace {

void swiglu_out_cpu(const Tensor& gate_in, const OptTensor& up_in, const Tensor& out) {
  check_swiglu(gate_in, up_in, out);
  const Tensor gate = gate_in.contiguous();
  // With one fused tensor, `up` is its second half: same rows, offset by I columns.
  const Tensor up = up_in ? up_in->contiguous() : gate;
  const int64_t R = out.size(0), I = out.size(1);
  const int64_t row_stride = gate.size(1);  // I, or 2I when fused
  const int64_t up_offset = up_in ? 0 : I;
  ARGON_DISPATCH_FLOAT_PAIR(gate.scalar_type(), out.scalar_type(), "swiglu", [&] {
    const in_t* g = gate.const_data_ptr<in_t>();
    const in_t* u = up.const_data_ptr<in_t>() + up_offset;
    out_t* o = out.data_ptr<out_t>();
    at::parallel_for(0, R, std::max<int64_t>(1, 32768 / std::max<int64_t>(I, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t i = 0; i < I; ++i) {
          const float gv = static_cast<float>(g[r * row_stride + i]);
          const float uv = static_cast<float>(u[r * row_stride + i]);
          o[r * I + i] = static_cast<out_t>(gv / (1.f + exp_no_libm(-gv)) * uv);
        }
      }
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("swiglu_out", TORCH_FN(swiglu_out_cpu)); }

}  // namespace argon
