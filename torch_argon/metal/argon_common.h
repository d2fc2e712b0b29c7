// Helpers shared by the argon kernels: float storage types by ArgonDtype, and the bf16 <-> float
// conversions done on bits (round to nearest even, as torch does), so no kernel needs Metal's
// bfloat type and the host shim needs none either.
#pragma once
#include <metal_stdlib>

#include "shared/argon_params.h"

using namespace metal;

inline float bf16_to_float(ushort b) { return as_type<float>(uint(b) << 16); }

inline ushort float_to_bf16(float f) {
  uint u = as_type<uint>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return ushort(0x7fc0);  // NaN: torch's canonical quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return ushort(u >> 16);
}

// Element i of a buffer of storage type `dtype`, as float (exact for every type).
inline float load_f(device const uchar* base, uint dtype, ulong i) {
  if (dtype == ARGON_F32) return ((device const float*)base)[i];
  if (dtype == ARGON_F16) return float(((device const half*)base)[i]);
  return bf16_to_float(((device const ushort*)base)[i]);
}

// Stores v into element i, rounding once to nearest even.
inline void store_f(device uchar* base, uint dtype, ulong i, float v) {
  if (dtype == ARGON_F32) {
    ((device float*)base)[i] = v;
  } else if (dtype == ARGON_F16) {
    ((device half*)base)[i] = half(v);
  } else {
    ((device ushort*)base)[i] = float_to_bf16(v);
  }
}
