// The q8 kernels' steps written once in plain C++ (q8_kernels.h says what each computes), as
// always-inline templates: each ISA file wraps them in functions compiled for its target, where
// the compiler inlines and vectorises them for that instruction set. The portable variant takes
// all three from here; the AVX2 and AVX-512 variants their quantize and decode (their GEMMs are
// written with intrinsics).
// Torch-free.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "q8_decode.h"
#include "q8_kernels.h"

namespace argon::q8 {

ARGON_Q8_INLINE float bf16_to_float(uint16_t h) { return argon_as_float(uint32_t(h) << 16); }
ARGON_Q8_INLINE float f16_to_float(uint16_t h) {
  const uint8_t bytes[2] = {uint8_t(h & 0xFF), uint8_t(h >> 8)};
  return f16_at(bytes);
}

// One row's 32-value blocks, as activation_q8.py defines them. A block holding a NaN or an
// infinity gets a non-finite scale (its amax, or NaN) and zero codes, so every output the row
// contributes to is non-finite and no conversion of a non-finite float to int happens.
ARGON_Q8_INLINE void quantize_block(const float* v, int8_t* q, float* d, int32_t* sum) {
  float amax = 0.0f;
  bool nan = false;
  for (int i = 0; i < kBlock; ++i) {
    const float a = std::fabs(v[i]);
    amax = a > amax ? a : amax;
    nan |= v[i] != v[i];
  }
  const float inv = 127.0f / amax, scale = amax / 127.0f;
  const bool finite = !nan && amax <= std::numeric_limits<float>::max();
  if (!finite || amax == 0.0f || !(inv <= std::numeric_limits<float>::max())) {
    *d = !finite ? (nan ? std::numeric_limits<float>::quiet_NaN() : amax) : 0.0f;
    std::memset(q, 0, kBlock);
    sum[0] = sum[1] = 0;
    return;
  }
  *d = scale;
  int32_t s0 = 0, s1 = 0;
  for (int i = 0; i < kBlock; ++i) {
    float r = std::nearbyint(v[i] * inv);  // half to even (the default rounding mode)
    r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
    q[i] = static_cast<int8_t>(static_cast<int32_t>(r));
  }
  for (int i = 0; i < 16; ++i) s0 += q[i];
  for (int i = 16; i < 32; ++i) s1 += q[i];
  sum[0] = s0;
  sum[1] = s1;
}

template <typename T, typename Widen>
ARGON_Q8_INLINE void quantize_rows_of(const T* x, int64_t row_stride, int64_t col_stride,
                                      int64_t rows, int64_t n_in, int8_t* q, float* d,
                                      int32_t* sum, Widen widen) {
  float v[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * row_stride;
    for (int64_t b = 0; b < n_in / kBlock; ++b) {
      const T* xb = xr + b * kBlock * col_stride;
      if (col_stride == 1) {
        for (int i = 0; i < kBlock; ++i) v[i] = widen(xb[i]);
      } else {
        for (int i = 0; i < kBlock; ++i) v[i] = widen(xb[i * col_stride]);
      }
      quantize_block(v, q + r * n_in + b * kBlock, d + r * (n_in / kBlock) + b,
                     sum + r * (n_in / 16) + 2 * b);
    }
  }
}

ARGON_Q8_INLINE void quantize_rows(Dtype dtype, const void* x, int64_t row_stride,
                                   int64_t col_stride, int64_t rows, int64_t n_in, int8_t* q,
                                   float* d, int32_t* sum) {
  switch (dtype) {
    case Dtype::kFloat32:
      return quantize_rows_of(static_cast<const float*>(x), row_stride, col_stride, rows, n_in,
                              q, d, sum, [](float f) { return f; });
    case Dtype::kFloat16:
      return quantize_rows_of(static_cast<const uint16_t*>(x), row_stride, col_stride, rows,
                              n_in, q, d, sum, [](uint16_t h) { return f16_to_float(h); });
    case Dtype::kBFloat16:
      return quantize_rows_of(static_cast<const uint16_t*>(x), row_stride, col_stride, rows,
                              n_in, q, d, sum, [](uint16_t h) { return bf16_to_float(h); });
  }
}

// Decodes `cols` weight rows into the panel (q8_kernels.h), codes stored as code + bias
// (bias 128 for the VNNI variants: the XOR of the sign bit; 0 otherwise).
template <typename D, int kBias>
ARGON_Q8_INLINE void decode_panel(const uint8_t* w, int64_t row_stride, int64_t cols,
                                  const Panel& p) {
  using Block = typename D::Block;
  const int64_t n_in = p.n_in, chunks = n_in / kBlock, subs = n_in / D::kSub;
  constexpr int kPerChunk = kBlock / D::kSub;  // scales per 32 values
  constexpr int kChunksPerBlock = D::kValues / kBlock;
  constexpr uint32_t kFlip = kBias == 128 ? 0x80808080u : 0u;
  int8_t code[kBlock];
  float s[kPerChunk], m[kPerChunk] = {};
  for (int64_t g = 0; g < p.groups; ++g) {
    uint8_t* codes = p.codes + g * kCols * n_in;
    float* scales = p.scales + g * kCols * subs;
    float* mins = D::kMin ? p.mins + g * kCols * subs : nullptr;
    for (int col = 0; col < kCols; ++col) {
      const int64_t n = g * kCols + col;
      if (n >= cols) {  // padding: code 0, scale 0
        for (int64_t k = 0; k < n_in; k += kQuad) {
          std::memcpy(codes + (k / kQuad) * (kCols * kQuad) + col * kQuad, &kFlip, kQuad);
        }
        for (int64_t i = 0; i < subs; ++i) {
          scales[i * kCols + col] = 0.0f;
          if (D::kMin) mins[i * kCols + col] = 0.0f;
        }
        continue;
      }
      const uint8_t* row = w + n * row_stride;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t k0 = c * kBlock;
        const Block* b = reinterpret_cast<const Block*>(row) + c / kChunksPerBlock;
        D::chunk(b, static_cast<uint32_t>(c % kChunksPerBlock), code, s, m);
        for (int qd = 0; qd < kBlock / kQuad; ++qd) {
          uint32_t word;
          std::memcpy(&word, code + qd * kQuad, kQuad);
          word ^= kFlip;
          std::memcpy(codes + (k0 / kQuad + qd) * (kCols * kQuad) + col * kQuad, &word, kQuad);
        }
        for (int i = 0; i < kPerChunk; ++i) {
          scales[(c * kPerChunk + i) * kCols + col] = s[i];
          if (D::kMin) mins[(c * kPerChunk + i) * kCols + col] = m[i];
        }
      }
    }
  }
}

// The GEMM in plain loops (the portable variant; bias 0: signed codes).
ARGON_Q8_INLINE void gemm_rows(const Rows& x, int64_t r0, int64_t rows, const Panel& p, int sub,
                               bool with_min, float* c, int64_t ldc) {
  const int64_t n_in = p.n_in, subs = n_in / sub;
  for (int64_t g = 0; g < p.groups; ++g) {
    const int8_t* codes = reinterpret_cast<const int8_t*>(p.codes + g * kCols * n_in);
    const float* scales = p.scales + g * kCols * subs;
    const float* mins = with_min ? p.mins + g * kCols * subs : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* xq = x.q + (r0 + r) * n_in;
      const float* xd = x.d + (r0 + r) * (n_in / kBlock);
      const int32_t* xsum = x.sum + (r0 + r) * (n_in / 16);
      float acc[kCols] = {};
      for (int64_t i = 0; i < subs; ++i) {
        const int64_t k0 = i * sub;
        int32_t isum[kCols] = {};
        for (int64_t qd = k0 / kQuad; qd < (k0 + sub) / kQuad; ++qd) {
          const int8_t* wq = codes + qd * (kCols * kQuad);
          const int8_t* xv = xq + qd * kQuad;
          for (int col = 0; col < kCols; ++col) {
            int32_t t = 0;
            for (int j = 0; j < kQuad; ++j) t += int32_t(wq[col * kQuad + j]) * int32_t(xv[j]);
            isum[col] += t;
          }
        }
        const float dx = xd[k0 / kBlock];
        const int32_t qsum = sub == 16 ? xsum[k0 / 16] : xsum[k0 / 16] + xsum[k0 / 16 + 1];
        const float* s = scales + i * kCols;
        for (int col = 0; col < kCols; ++col) acc[col] += float(isum[col]) * (s[col] * dx);
        if (with_min) {
          const float* m = mins + i * kCols;
          const float dq = dx * float(qsum);
          for (int col = 0; col < kCols; ++col) acc[col] -= m[col] * dq;
        }
      }
      float* out = c + r * ldc + g * kCols;
      for (int col = 0; col < kCols; ++col) out[col] = acc[col];
    }
  }
}

// A variant's decode table: decode_panel for every format of ARGON_Q8_DECODERS, each wrapped by
// `Wrap<D>::fn` (the ISA file's target-attributed function).
template <template <typename> class Wrap>
constexpr Kernels make_kernels(const char* isa, QuantizeFn quantize, GemmFn gemm) {
  return Kernels{isa, quantize,
                 {
#define ARGON_Q8_DECODE_ENTRY(D, id) &Wrap<D>::fn,
                     ARGON_Q8_DECODERS(ARGON_Q8_DECODE_ENTRY)
#undef ARGON_Q8_DECODE_ENTRY
                 },
                 gemm};
}

}  // namespace argon::q8
