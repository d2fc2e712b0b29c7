// The q8 activation quantization (torch_argon/quant/activation_q8.py) of one 32-value block:
// amax, inv = 127 / amax and d = amax / 127 correctly rounded, q = rint(x * inv) ties to even;
// d = q = 0 when amax is 0 or 127 / amax overflows. A block with a NaN or an infinity gets a
// non-finite d (its q is unspecified, as the definition says).
#pragma once
#include "gpuq_params.h"
#include "gpuq_prims.h"

namespace gpuq {
inline namespace GPUQ_TARGET {

// in_kind: the FloatKind of the bits at x (gpuq_params.h).
GQ_DEV float load_activation(const void* x, int64_t i, int in_kind) {
  if (in_kind == kFp32) return static_cast<const float*>(x)[i];
  const uint32_t h = static_cast<const uint16_t*>(x)[i];
  return in_kind == kBf16 ? bf16_bits_to_float(h) : half_bits_to_float(h);
}

GQ_DEV void quantize_block_q8(const void* row, int64_t first, int in_kind, int8_t* q, float* d) {
  float v[32];
  float amax = 0.f;
  bool finite = true;
  for (int i = 0; i < 32; ++i) {
    v[i] = load_activation(row, first + i, in_kind);
    const float a = fabsf(v[i]);
    if (!(a <= 3.4028234663852886e38f)) finite = false;  // NaN or inf
    amax = a > amax ? a : amax;
  }
  if (!finite) {
    *d = as_float(0x7FC00000u);
    for (int i = 0; i < 32; ++i) q[i] = 0;
    return;
  }
  const float inv = div_rn(127.0f, amax);
  const bool zero = amax == 0.f || !(inv <= 3.4028234663852886e38f);
  *d = zero ? 0.f : div_rn(amax, 127.0f);
  for (int i = 0; i < 32; ++i) {
    const int r = zero ? 0 : round_half_even(v[i] * inv);
    q[i] = static_cast<int8_t>(r > 127 ? 127 : (r < -127 ? -127 : r));
  }
}

}  // namespace GPUQ_TARGET
}  // namespace gpuq
