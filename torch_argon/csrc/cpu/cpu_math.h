// The fp32 math of the CPU's elementwise kernels (swiglu, swiglu_backward): an exp of our own
// that vectorises, and CpuMath, the primitives the shared activations (shared/activation.h)
// take from a backend.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace argon {

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

}  // namespace argon
