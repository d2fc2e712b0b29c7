// The gated epilogue's activation, shared by the Metal kernels and their host build: swiglu's
// `activation` argument as a code in the params, and the activation itself in fp32.
//   ARGON_ACT_SILU       silu(g) = g / (1 + exp(-g))                         (SwiGLU)
//   ARGON_ACT_GELU       gelu(g) = 0.5 g (1 + erf(g / sqrt 2))                (GeGLU, erf form)
//   ARGON_ACT_GELU_TANH  0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))      (tanh approximation)
// Computed as g * (0.5 (1 + erf)) (the same product as torch's 0.5 g (1 + erf), rounded once):
// the factor in [0, 1] keeps g near FLT_MAX finite whatever order a compiler multiplies in (an
// nvcc build gave inf for g >= 2^127). csrc/cpu, csrc/cuda and the Triton epilogue do the same. Metal has no erf: argon_erf is our own, within 3 ulp of erf in fp32.
// The codes live in swiglu_params.h (shared with the host C++); this header is for kernels.
#pragma once
#include <metal_stdlib>

#include "shared/swiglu_params.h"

using namespace metal;

// erf in fp32 (the host build runs this same code, not libm's erf). |x| < 1: x * P(x^2), a least-squares fit of erf(x)/x; 1 <= |x| < 4:
// 1 - exp(Q(|x|)), a fit of log(erfc(x)); beyond 4, erfc(x) < 2e-8 is below half an ulp of 1.
inline float argon_erf(float x) {
  const float a = fabs(x);
  float r;
  if (a < 1.0f) {
    const float t = a * a;
    float p = 8.006874123e-05f;
    p = p * t - 8.053751080e-04f;
    p = p * t + 5.192957819e-03f;
    p = p * t - 2.685607038e-02f;
    p = p * t + 1.128363460e-01f;
    p = p * t - 3.761262894e-01f;
    p = p * t + 1.128379226e+00f;
    r = a * p;
  } else if (a < 4.0f) {
    float q = 1.626406629e-06f;
    q = q * a - 4.581871690e-05f;
    q = q * a + 5.945508019e-04f;
    q = q * a - 4.747871310e-03f;
    q = q * a + 2.638438344e-02f;
    q = q * a - 1.100090817e-01f;
    q = q * a - 6.319084764e-01f;
    q = q * a - 1.130180955e+00f;
    q = q * a + 3.060951422e-04f;
    r = 1.0f - exp(q);
  } else {
    r = 1.0f;
  }
  return x < 0.0f ? -r : (x == x ? r : x);
}

// The activation of g in fp32.
inline float argon_activation(float g, unsigned act) {
  if (act == ARGON_ACT_GELU) {
    return g * (0.5f * (1.0f + argon_erf(g * 0.7071067811865476f)));
  }
  if (act == ARGON_ACT_GELU_TANH) {
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
    return g * (0.5f * (1.0f + tanh(inner)));
  }
  return g / (1.0f + exp(-g));
}
