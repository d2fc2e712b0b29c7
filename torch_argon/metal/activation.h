// The gated epilogue's activation for the Metal kernels: the formulas of csrc/shared/
// activation.h with Metal's exp and tanh and an erf of our own (Metal has none), argon_erf,
// within 3 ulp of erf in fp32; the host build runs this same code, not libm's erf.
#pragma once
#include <metal_stdlib>

#include "shared/activation.h"

using namespace metal;

// erf in fp32. |x| < 1: x * P(x^2), a least-squares fit of erf(x)/x; 1 <= |x| < 4:
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

// The primitives of the shared activations (csrc/shared/activation.h) on Metal: a kernel calls
// argon_activation<ArgonMetalMath>(g, code).
struct ArgonMetalMath {
  static inline float expf(float x) { return exp(x); }
  static inline float erff(float x) { return argon_erf(x); }
  static inline float tanhf(float x) { return tanh(x); }
};
