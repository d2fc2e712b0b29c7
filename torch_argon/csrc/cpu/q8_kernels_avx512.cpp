// The q8 kernels (q8_kernels.h) for AVX-512 CPUs with VNNI: quantize and decode are
// q8_generic.h's loops compiled for AVX-512; the GEMM is written with intrinsics.
//
// GEMM: a step computes MR rows x NG groups of 16 columns (MR <= 4, NG <= 2: 8 float and 8 int
// accumulators in zmm registers). Per sub-block of SUB values and per 4 values k..k+3: one
// 64-byte load of each group's panel (16 columns x 4 codes + 128, unsigned), and per row one
// vpdpbusd per group with the row's 4 activation codes broadcast to every lane. The int32 sums
// start at -128 * (sum of the row's codes over the sub-block), which removes the +128 of the
// codes exactly; after the sub-block they are converted to float and accumulated as
// acc += isum * (s * d) (- m * (d * qsum) for formats with mins), with FMA.
// Each output's operations do not depend on MR or NG, so the row and column tails compute the
// same bits as the main steps.
#include "cpu_isa_targets.h"
#include "q8_generic.h"

#ifdef ARGON_X86_VARIANTS
#include <immintrin.h>
// GCC 12 warns that its own _mm512_cvtepi32_ps reads an uninitialized value (the undefined
// pass-through operand of the unmasked form): a false positive, once per instantiation.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace argon::q8 {

#ifdef ARGON_X86_VARIANTS
namespace {

// 16 values of a contiguous row as float32, exactly (bf16: the bits shifted up; fp16: vcvtph2ps,
// exact for every finite value and subnormal).
ARGON_TARGET_AVX512 inline __m512 load16(Dtype dtype, const void* p) {
  switch (dtype) {
    case Dtype::kFloat32: return _mm512_loadu_ps(p);
    case Dtype::kFloat16:
      return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    case Dtype::kBFloat16:
      return _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
  }
  return _mm512_setzero_ps();
}

// quantize_block of q8_generic.h on registers: the same divisions, products and rounding (half
// to even, explicit in the conversion), so the same codes and scales.
ARGON_TARGET_AVX512 void quantize_avx512(Dtype dtype, const void* x, int64_t row_stride,
                                         int64_t col_stride, int64_t rows, int64_t n_in,
                                         int8_t* q, float* d, int32_t* sum) {
  if (col_stride != 1) {
    return quantize_rows(dtype, x, row_stride, col_stride, rows, n_in, q, d, sum);
  }
  const int64_t item = dtype == Dtype::kFloat32 ? 4 : 2;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const char* xr = static_cast<const char*>(x) + r * row_stride * item;
    for (int64_t b = 0; b < n_in / kBlock; ++b) {
      const __m512 v0 = load16(dtype, xr + (b * kBlock) * item);
      const __m512 v1 = load16(dtype, xr + (b * kBlock + 16) * item);
      const __mmask16 nan = _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) |
                            _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q);
      const float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
      int8_t* qb = q + r * n_in + b * kBlock;
      float* db = d + r * (n_in / kBlock) + b;
      int32_t* sb = sum + r * (n_in / 16) + 2 * b;
      const float inv = 127.0f / amax;
      const bool finite = nan == 0 && amax <= std::numeric_limits<float>::max();
      if (!finite || amax == 0.0f || !(inv <= std::numeric_limits<float>::max())) {
        *db = !finite ? (nan != 0 ? std::numeric_limits<float>::quiet_NaN() : amax) : 0.0f;
        std::memset(qb, 0, kBlock);
        sb[0] = sb[1] = 0;
        continue;
      }
      *db = amax / 127.0f;
      const __m512 vinv = _mm512_set1_ps(inv), lim = _mm512_set1_ps(127.0f);
      constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      const __m512i q0 = _mm512_cvt_roundps_epi32(
          _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, vinv), -lim), lim), kNearest);
      const __m512i q1 = _mm512_cvt_roundps_epi32(
          _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, vinv), -lim), lim), kNearest);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(q1));
      sb[0] = _mm512_reduce_add_epi32(q0);
      sb[1] = _mm512_reduce_add_epi32(q1);
    }
  }
}

template <typename D>
struct DecodeAvx512 {
  ARGON_TARGET_AVX512 static void fn(const uint8_t* w, int64_t row_stride, int64_t cols,
                                     const Panel& p) {
    decode_panel<D, 128>(w, row_stride, cols, p);
  }
};

template <int MR, int NG, int SUB, bool MIN>
ARGON_TARGET_AVX512 void gemm_step(const Rows& x, int64_t r, const Panel& p, int64_t g,
                                   float* c, int64_t ldc) {
  const int64_t n_in = p.n_in, subs = n_in / SUB;
  const uint8_t* codes[NG];
  const float* scales[NG];
  const float* mins[NG];
  for (int gg = 0; gg < NG; ++gg) {
    codes[gg] = p.codes + (g + gg) * kCols * n_in;
    scales[gg] = p.scales + (g + gg) * kCols * subs;
    mins[gg] = MIN ? p.mins + (g + gg) * kCols * subs : nullptr;
  }
  const int8_t* xq[MR];
  const float* xd[MR];
  const int32_t* xsum[MR];
  for (int rr = 0; rr < MR; ++rr) {
    xq[rr] = x.q + (r + rr) * n_in;
    xd[rr] = x.d + (r + rr) * (n_in / kBlock);
    xsum[rr] = x.sum + (r + rr) * (n_in / 16);
  }
  __m512 acc[MR][NG];
  for (int rr = 0; rr < MR; ++rr) {
    for (int gg = 0; gg < NG; ++gg) acc[rr][gg] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < subs; ++i) {
    const int64_t k0 = i * SUB;
    __m512i isum[MR][NG];
    int32_t qsum[MR];
    for (int rr = 0; rr < MR; ++rr) {
      qsum[rr] = SUB == 16 ? xsum[rr][k0 / 16] : xsum[rr][k0 / 16] + xsum[rr][k0 / 16 + 1];
      const __m512i start = _mm512_set1_epi32(-128 * qsum[rr]);
      for (int gg = 0; gg < NG; ++gg) isum[rr][gg] = start;
    }
    for (int qd = 0; qd < SUB / kQuad; ++qd) {
      __m512i w[NG];
      for (int gg = 0; gg < NG; ++gg) {
        w[gg] = _mm512_loadu_si512(codes[gg] + (k0 / kQuad + qd) * (kCols * kQuad));
      }
      for (int rr = 0; rr < MR; ++rr) {
        int32_t four;
        std::memcpy(&four, xq[rr] + k0 + qd * kQuad, kQuad);
        const __m512i xb = _mm512_set1_epi32(four);
        for (int gg = 0; gg < NG; ++gg) isum[rr][gg] = _mm512_dpbusd_epi32(isum[rr][gg], w[gg], xb);
      }
    }
    for (int gg = 0; gg < NG; ++gg) {
      const __m512 s = _mm512_loadu_ps(scales[gg] + i * kCols);
      for (int rr = 0; rr < MR; ++rr) {
        const float dx = xd[rr][k0 / kBlock];
        const __m512 sd = _mm512_mul_ps(s, _mm512_set1_ps(dx));
        acc[rr][gg] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[rr][gg]), sd, acc[rr][gg]);
        if constexpr (MIN) {
          const __m512 m = _mm512_loadu_ps(mins[gg] + i * kCols);
          acc[rr][gg] = _mm512_fnmadd_ps(m, _mm512_set1_ps(dx * float(qsum[rr])), acc[rr][gg]);
        }
      }
    }
  }
  for (int rr = 0; rr < MR; ++rr) {
    for (int gg = 0; gg < NG; ++gg) {
      _mm512_storeu_ps(c + (r + rr) * ldc + (g + gg) * kCols, acc[rr][gg]);
    }
  }
}

template <int NG, int SUB, bool MIN>
ARGON_TARGET_AVX512 void gemm_groups(const Rows& x, int64_t r0, int64_t rows, const Panel& p,
                                     int64_t g, float* c, int64_t ldc) {
  // c's row 0 is x's row r0
  const Rows xr{x.q + r0 * x.n_in, x.d + r0 * (x.n_in / kBlock), x.sum + r0 * (x.n_in / 16),
                x.n_in};
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) gemm_step<4, NG, SUB, MIN>(xr, r, p, g, c, ldc);
  switch (rows - r) {
    case 3: gemm_step<3, NG, SUB, MIN>(xr, r, p, g, c, ldc); break;
    case 2: gemm_step<2, NG, SUB, MIN>(xr, r, p, g, c, ldc); break;
    case 1: gemm_step<1, NG, SUB, MIN>(xr, r, p, g, c, ldc); break;
    default: break;
  }
}

template <int SUB, bool MIN>
ARGON_TARGET_AVX512 void gemm_panel(const Rows& x, int64_t r0, int64_t rows, const Panel& p,
                                    float* c, int64_t ldc) {
  int64_t g = 0;
  for (; g + 2 <= p.groups; g += 2) gemm_groups<2, SUB, MIN>(x, r0, rows, p, g, c, ldc);
  if (g < p.groups) gemm_groups<1, SUB, MIN>(x, r0, rows, p, g, c, ldc);
}

ARGON_TARGET_AVX512 void gemm_avx512(const Rows& x, int64_t r0, int64_t rows, const Panel& p,
                                     int sub, bool with_min, float* c, int64_t ldc) {
  with_sub_and_min(sub, with_min, [&](auto s, auto m) {
    gemm_panel<decltype(s)::value, decltype(m)::value>(x, r0, rows, p, c, ldc);
  });
}

constexpr Kernels kAvx512 =
    make_kernels<DecodeAvx512>("avx512", &quantize_avx512, &gemm_avx512);

}  // namespace

const Kernels* kernels_avx512() { return &kAvx512; }
#else
const Kernels* kernels_avx512() { return nullptr; }
#endif

}  // namespace argon::q8
