// The gated epilogue's activations in fp32, written once for every language (Metal, CUDA, C++):
// swiglu's `activation` argument names one (ARGON_ACTIVATIONS: its name and its code in the
// params), and argon_activation<M> computes it, M supplying the backend's exp, erf and tanh in
// fp32 as static functions expf, erff, tanhf:
//   silu       g / (1 + exp(-g))                                      (SwiGLU)
//   gelu       g * (0.5 (1 + erf(g / sqrt 2)))                        (GeGLU, erf form)
//   gelu_tanh  g * (0.5 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))))    (tanh approximation)
// GELU is the same product as torch's 0.5 g (1 + erf), rounded once, written as g times a
// factor in [0, 1] so that g near FLT_MAX stays finite whatever order a compiler multiplies in
// (an nvcc build gave inf for g >= 2^127 in the other order). The Triton epilogue does the same.
// argon_activation_grad<M> gives act(g) and its derivative act'(g) together (swiglu_backward):
//   silu       s (1 + g (1 - s)), s = 1 / (1 + exp(-g))
//   gelu       Phi(g) + g phi(g), Phi = 0.5 (1 + erf(g / sqrt 2)), phi = exp(-g^2 / 2) / sqrt(2 pi)
//   gelu_tanh  0.5 (1 + t) + 0.5 g (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 g^2), t as above
// the formulas torch's own silu / gelu backward kernels use, in fp32.
// Backends' M: metal/activation.h (Metal has no erf: its own, within 3 ulp), csrc/cpu/
// swiglu_cpu.cpp (an exp of its own that vectorises, libm's erf and tanh), csrc/cuda/
// swiglu_cuda.cu (CUDA's expf, erff, tanhf).
#pragma once
#include "shared/portable.h"
#include "shared/swiglu_params.h"

// X(name, code): the activations by the name swiglu takes, with their ARGON_ACT_* code.
#define ARGON_ACTIVATIONS(X)   \
  X(silu, ARGON_ACT_SILU)      \
  X(gelu, ARGON_ACT_GELU)      \
  X(gelu_tanh, ARGON_ACT_GELU_TANH)

template <typename M>
ARGON_FN float argon_silu(float g) {
  return g / (1.0f + M::expf(-g));
}

template <typename M>
ARGON_FN float argon_gelu(float g) {
  return g * (0.5f * (1.0f + M::erff(g * 0.7071067811865476f)));
}

template <typename M>
ARGON_FN float argon_gelu_tanh(float g) {
  const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return g * (0.5f * (1.0f + M::tanhf(inner)));
}

// The activation with code `act` (ARGON_ACT_*; any other code is silu).
template <typename M>
ARGON_FN float argon_activation(float g, argon_u32 act) {
  if (act == ARGON_ACT_GELU) return argon_gelu<M>(g);
  if (act == ARGON_ACT_GELU_TANH) return argon_gelu_tanh<M>(g);
  return argon_silu<M>(g);
}

// swiglu's value before its one rounding: act(g) * u in fp32. The CUDA swiglu kernel
// (csrc/cuda/swiglu_cuda.cu) and the padded Hopper GEMM's gate/up epilogue
// (csrc/hopper/hopper_padded_act_epilogue.cuh) both compute it here, with CUDA's expf / erff /
// tanhf and the same nvcc floating-point flags (--fmad=false: no multiply-add contracted into
// an fma), so that the fused epilogue writes the unfused swiglu's bits.
template <typename M>
ARGON_FN float argon_gated(float g, float u, argon_u32 act) {
  return argon_activation<M>(g, act) * u;
}

// act(g) and act'(g), as argon_activation_grad returns them.
struct ArgonActGrad {
  float value, slope;
};

template <typename M>
ARGON_FN ArgonActGrad argon_silu_grad(float g) {
  const float s = 1.0f / (1.0f + M::expf(-g));
  ArgonActGrad r;
  r.value = g * s;
  r.slope = s * (1.0f + g * (1.0f - s));
  return r;
}

template <typename M>
ARGON_FN ArgonActGrad argon_gelu_grad(float g) {
  const float cdf = 0.5f * (1.0f + M::erff(g * 0.7071067811865476f));
  const float pdf = M::expf(-0.5f * g * g) * 0.3989422804014327f;
  ArgonActGrad r;
  r.value = g * cdf;
  r.slope = cdf + g * pdf;
  return r;
}

template <typename M>
ARGON_FN ArgonActGrad argon_gelu_tanh_grad(float g) {
  const float t = M::tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g));
  ArgonActGrad r;
  r.value = g * (0.5f * (1.0f + t));
  r.slope = 0.5f * (1.0f + t) +
            0.5f * g * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 0.134145f * g * g);
  return r;
}

// The activation with code `act` and its derivative (any other code is silu).
template <typename M>
ARGON_FN ArgonActGrad argon_activation_grad(float g, argon_u32 act) {
  if (act == ARGON_ACT_GELU) return argon_gelu_grad<M>(g);
  if (act == ARGON_ACT_GELU_TANH) return argon_gelu_tanh_grad<M>(g);
  return argon_silu_grad<M>(g);
}
