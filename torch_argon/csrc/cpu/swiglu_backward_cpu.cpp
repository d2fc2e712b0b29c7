// swiglu_backward on the CPU: with a = act(g) and a' its derivative (shared/activation.h),
//   out[r, :I] = d gate = grad_out * u * a'      out[r, I:] = d up = grad_out * a
// each computed in fp32 from the widened inputs and rounded once to gate's dtype. One pass over
// each row, no temporaries; the loop is plain C++ compiled twice (ARGON_CPU_CLONES) as swiglu's
// is. Parallel over blocks of rows; every element depends only on its own inputs, so the bytes
// do not depend on the thread count.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../checks.h"
#include "../float_dispatch.h"
#include "../op_signatures.h"
#include "cpu_clones.h"
#include "cpu_math.h"
#include "shared/activation.h"

namespace argon {
namespace {

constexpr int64_t kGrainPairs = 16384;  // (d gate, d up) pairs per parallel task

struct SiluGrad {
  static ArgonActGrad apply(float x) { return argon_silu_grad<CpuMath>(x); }
};
struct GeluGrad {
  static ArgonActGrad apply(float x) { return argon_gelu_grad<CpuMath>(x); }
};
struct GeluTanhGrad {
  static ArgonActGrad apply(float x) { return argon_gelu_tanh_grad<CpuMath>(x); }
};

// Rows [0, rows): dy [rows, I] (row stride dy_row), g and u (row strides g_row, u_row; elements
// adjacent), out [rows, 2I] contiguous.
template <typename Grad, typename grad_t, typename in_t>
ARGON_CPU_CLONES void swiglu_backward_rows(const grad_t* dy, int64_t dy_row, const in_t* g,
                                           int64_t g_row, const in_t* u, int64_t u_row, in_t* out,
                                           int64_t rows, int64_t I) {
  for (int64_t r = 0; r < rows; ++r) {
    const grad_t* dyr = dy + r * dy_row;
    const in_t* gr = g + r * g_row;
    const in_t* ur = u + r * u_row;
    in_t* dg = out + r * 2 * I;
    in_t* du = dg + I;
    for (int64_t i = 0; i < I; ++i) {
      const ArgonActGrad a = Grad::apply(static_cast<float>(gr[i]));
      const float d = static_cast<float>(dyr[i]);
      dg[i] = static_cast<in_t>(d * static_cast<float>(ur[i]) * a.slope);
      du[i] = static_cast<in_t>(d * a.value);
    }
  }
}

void swiglu_backward_out_cpu(const Tensor& grad_out_in, const Tensor& gate,
                             const OptTensor& up, c10::string_view activation,
                             const Tensor& out) {
  const int act = check_swiglu_backward(grad_out_in, gate, up, activation, out);
  const int64_t R = out.size(0), I = out.size(1) / 2;
  if (R == 0 || I == 0) return;
  Tensor g = up ? gate : gate.narrow(1, 0, I);
  Tensor u = up ? *up : gate.narrow(1, I, I);
  Tensor dy = grad_out_in;
  if (g.stride(1) != 1) g = g.contiguous();  // rows may have any stride, elements must be adjacent
  if (u.stride(1) != 1) u = u.contiguous();
  if (dy.stride(1) != 1) dy = dy.contiguous();
  ARGON_DISPATCH_FLOAT_PAIR(dy.scalar_type(), g.scalar_type(), "swiglu_backward", [&] {
    using grad_t = in_t;
    using value_t = out_t;
    const grad_t* dy_data = dy.const_data_ptr<grad_t>();
    const value_t* g_data = g.const_data_ptr<value_t>();
    const value_t* u_data = u.const_data_ptr<value_t>();
    value_t* out_data = out.data_ptr<value_t>();
    const int64_t ds = dy.stride(0), gs = g.stride(0), us = u.stride(0);
    at::parallel_for(0, R, std::max<int64_t>(1, kGrainPairs / I), [&](int64_t r0, int64_t r1) {
      const auto rows = act == ARGON_ACT_GELU
                            ? swiglu_backward_rows<GeluGrad, grad_t, value_t>
                        : act == ARGON_ACT_GELU_TANH
                            ? swiglu_backward_rows<GeluTanhGrad, grad_t, value_t>
                            : swiglu_backward_rows<SiluGrad, grad_t, value_t>;
      rows(dy_data + r0 * ds, ds, g_data + r0 * gs, gs, u_data + r0 * us, us,
           out_data + r0 * 2 * I, r1 - r0, I);
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) {
  m.impl("swiglu_backward_out", TORCH_FN(swiglu_backward_out_cpu));
}

}  // namespace argon
