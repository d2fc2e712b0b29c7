// swiglu on the CPU: out = act(g) * u in fp32, rounded once, act = silu(g) = g / (1 + exp(-g)),
// or gelu in its erf or tanh form (csrc/shared/activation.h: the formulas). Inputs as two [R, I]
// tensors or one [R, 2I] tensor (gate half, then up half).
// One pass over each row: load, widen to fp32, silu, multiply, round once, store; no
// temporaries. The row loop is plain C++ that GCC vectorises, with SSE2 in the baseline build
// and with AVX2 in the clone ARGON_CPU_CLONES adds; exp is our own (exp_f32 below) because
// libm's expf, or floorf without SSE4.1, would keep the loop scalar. Parallel over blocks of
// rows. Limits: exp_f32 is within 1 ulp of exp, so an fp32 output may differ from torch's silu
// by a few ulps (4 measured) and a half-precision one by an ulp; the contract allows a few.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "../checks.h"
#include "shared/activation.h"
#include "../float_dispatch.h"
#include "../op_signatures.h"
#include "cpu_clones.h"

namespace argon {
namespace {

constexpr int64_t kGrainElements = 32768;  // elements per parallel task: amortises the fork

// exp(y) in fp32, branch-free so that loops over it vectorise. y = n ln2 + r with
// n = round(y / ln2) (to nearest, by adding and taking away 1.5 * 2^23: no floor, which SSE2
// lacks) and ln2 split in two (n * 0.693359375 is exact for |n| < 2^9), exp(r) by Cephes's
// degree-5 minimax polynomial for expf, then 2^n set in the exponent bits, as 2^(n - 1) * 2 so
// that n = 128 (y near ln(FLT_MAX)) still fits. Checked against double exp on every float of
// [-86, 88.72]: within 1 ulp. Below -86, y is clamped (exp(-86) ~ 4e-38 is only ever added to
// 1 here); above ln(FLT_MAX) it is +inf, as expf gives; NaN stays NaN.
inline float exp_f32(float y) {
  const bool is_nan = y != y;
  const bool overflow = y > 88.72283f;
  y = is_nan ? 0.f : y;
  y = y < -86.f ? -86.f : y;
  y = y > 88.72283f ? 88.72283f : y;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds |x| < 2^22 to an integer
  const float n = (y * 1.44269504088896341f + kRound) - kRound;
  float r = y - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 126) << 23;
  float half_scale;
  std::memcpy(&half_scale, &bits, sizeof half_scale);
  const float e = p * half_scale * 2.f;
  return is_nan ? std::numeric_limits<float>::quiet_NaN()
                : overflow ? std::numeric_limits<float>::infinity() : e;
}

// The primitives of the shared activations: exp_f32 (so the silu loop vectorises), libm's erf
// and tanh (those loops stay scalar).
struct CpuMath {
  static float expf(float x) { return exp_f32(x); }
  static float erff(float x) { return std::erf(x); }
  static float tanhf(float x) { return std::tanh(x); }
};
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
