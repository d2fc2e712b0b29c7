// exp(x) in float without a libm call or a branch, so that loops calling it vectorise at the
// baseline ISA. Range reduction x = n*ln2 + r (|r| <= ln2/2, ln2 split in two for exactness),
// a degree-7 Taylor polynomial for e^r (truncation error < 1e-8 relative), and 2^n built from
// the exponent bits. Within 2 ulp of expf over the clamped range [-87, 88]: beyond it the
// result saturates (exp(-87) ~ 1.6e-38, exp(88) ~ 1.7e38), which silu and the like absorb.
#pragma once
#include <cstdint>
#include <cstring>

namespace argon {

inline float exp_no_libm(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  const float t = x * 1.44269504088896341f;             // x / ln2
  const float n = (t + 12582912.f) - 12582912.f;         // round to nearest (|t| < 2^22)
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
  float p = 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;  // 2^n (memcpy, not std::bit_cast: torch 2.11 builds extensions as C++17)
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace argon
