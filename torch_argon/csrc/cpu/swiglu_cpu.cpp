// swiglu on the CPU: out = act(g) * u in fp32, rounded once, act = silu(g) = g / (1 + exp(-g)),
// or gelu in its erf or tanh form (csrc/shared/activation.h: the formulas). Inputs as two [R, I]
// tensors or one [R, 2I] tensor (gate half, then up half).
// One pass over each row: load, widen to fp32, silu, multiply, round once, store; no
// temporaries. The row loop is plain C++ that GCC vectorises, with SSE2 in the baseline build
// and with AVX2 in the clone ARGON_CPU_CLONES adds; exp is our own (exp_f32, cpu_math.h) because
// libm's expf, or floorf without SSE4.1, would keep the loop scalar. Parallel over blocks of
// rows. Limits: exp_f32 is within 1 ulp of exp, so an fp32 output may differ from torch's silu
// by a few ulps (4 measured) and a half-precision one by an ulp; the contract allows a few.
#include <ATen/Parallel.h>
#include <torch/library.h>


#include "../checks.h"
#include "shared/activation.h"
#include "../float_dispatch.h"
#include "../op_signatures.h"
#include "cpu_clones.h"
#include "cpu_math.h"

namespace argon {
namespace {

constexpr int64_t kGrainElements = 32768;  // elements per parallel task: amortises the fork

struct Silu {
  static float apply(float x) { return argon_silu<CpuMath>(x); }
};
struct Gelu {
  static float apply(float x) { return argon_gelu<CpuMath>(x); }
};
struct GeluTanh {
  static float apply(float x) { return argon_gelu_tanh<CpuMath>(x); }
};

// Rows [0, rows) of out (contiguous, I per row) from g and u (element stride 1, any row stride).
template <typename Act, typename in_t, typename out_t>
ARGON_CPU_CLONES void swiglu_rows(const in_t* g, int64_t g_row, const in_t* u, int64_t u_row,
                                  out_t* out, int64_t rows, int64_t I) {
  for (int64_t r = 0; r < rows; ++r) {
    const in_t* gr = g + r * g_row;
    const in_t* ur = u + r * u_row;
    out_t* o = out + r * I;
    for (int64_t i = 0; i < I; ++i) {
      o[i] = static_cast<out_t>(Act::apply(static_cast<float>(gr[i])) * static_cast<float>(ur[i]));
    }
  }
}

void swiglu_out_cpu(const Tensor& gate, const OptTensor& up, c10::string_view activation,
                    const Tensor& out) {
  const int act = check_swiglu(gate, up, activation, out);
  const int64_t R = out.size(0), I = out.size(1);
  if (R == 0 || I == 0) return;
  Tensor g = up ? gate : gate.narrow(1, 0, I);
  Tensor u = up ? *up : gate.narrow(1, I, I);
  if (g.stride(1) != 1) g = g.contiguous();  // rows may have any stride, elements must be adjacent
  if (u.stride(1) != 1) u = u.contiguous();
  ARGON_DISPATCH_FLOAT_PAIR(g.scalar_type(), out.scalar_type(), "swiglu", [&] {
    const in_t* g_data = g.const_data_ptr<in_t>();
    const in_t* u_data = u.const_data_ptr<in_t>();
    out_t* out_data = out.data_ptr<out_t>();
    const int64_t gs = g.stride(0), us = u.stride(0);
    at::parallel_for(0, R, std::max<int64_t>(1, kGrainElements / I), [&](int64_t r0, int64_t r1) {
      const auto rows = act == ARGON_ACT_GELU        ? swiglu_rows<Gelu, in_t, out_t>
                        : act == ARGON_ACT_GELU_TANH ? swiglu_rows<GeluTanh, in_t, out_t>
                                                     : swiglu_rows<Silu, in_t, out_t>;
      rows(g_data + r0 * gs, gs, u_data + r0 * us, us, out_data + r0 * I, r1 - r0, I);
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("swiglu_out", TORCH_FN(swiglu_out_cpu)); }

}  // namespace argon
