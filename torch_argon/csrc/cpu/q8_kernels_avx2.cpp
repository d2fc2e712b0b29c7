// The q8 kernels (q8_kernels.h) for AVX2 CPUs: quantize and decode are q8_generic.h's loops
// compiled for AVX2 + FMA (codes stored signed, bias 0); the GEMM is written with intrinsics.
//
// GEMM: a step computes MR rows x one group of 16 columns (two ymm halves of 8 columns; MR <= 2
// keeps the 4 int and 4 float accumulators, the weights and their magnitudes in the 16 ymm
// registers). Per 4 values k..k+3 and half: vpmaddubsw multiplies |code| (unsigned) by the row's
// 4 codes broadcast with the code's sign applied (vpsignb), so each 16-bit pair sum is at most
// 2 * 128 * 127 and cannot saturate; vpmaddwd with ones widens the pairs to the column's int32
// lane. After the sub-block: acc += isum * (s * d) (- m * (d * qsum)), with FMA.
// Each output's operations do not depend on MR, so the row tail computes the same bits.
#include "cpu_isa_targets.h"
#include "q8_generic.h"

#ifdef ARGON_X86_VARIANTS
#include <immintrin.h>
#endif

namespace argon::q8 {

#ifdef ARGON_X86_VARIANTS
namespace {

ARGON_TARGET_AVX2 void quantize_avx2(Dtype dtype, const void* x, int64_t row_stride,
                                     int64_t col_stride, int64_t rows, int64_t n_in, int8_t* q,
                                     float* d, int32_t* sum) {
  quantize_rows(dtype, x, row_stride, col_stride, rows, n_in, q, d, sum);
}

template <typename D>
struct DecodeAvx2 {
  ARGON_TARGET_AVX2 static void fn(const uint8_t* w, int64_t row_stride, int64_t cols,
                                   const Panel& p) {
    decode_panel<D, 0>(w, row_stride, cols, p);
  }
};

template <int MR, int SUB, bool MIN>
ARGON_TARGET_AVX2 void gemm_step(const Rows& x, int64_t r, const Panel& p, int64_t g, float* c,
                                 int64_t ldc) {
  const int64_t n_in = p.n_in, subs = n_in / SUB;
  const uint8_t* codes = p.codes + g * kCols * n_in;
  const float* scales = p.scales + g * kCols * subs;
  const float* mins = MIN ? p.mins + g * kCols * subs : nullptr;
  const int8_t* xq[MR];
  const float* xd[MR];
  const int32_t* xsum[MR];
  for (int rr = 0; rr < MR; ++rr) {
    xq[rr] = x.q + (r + rr) * n_in;
    xd[rr] = x.d + (r + rr) * (n_in / kBlock);
    xsum[rr] = x.sum + (r + rr) * (n_in / 16);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR][2];
  for (int rr = 0; rr < MR; ++rr) acc[rr][0] = acc[rr][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < subs; ++i) {
    const int64_t k0 = i * SUB;
    __m256i isum[MR][2];
    for (int rr = 0; rr < MR; ++rr) isum[rr][0] = isum[rr][1] = _mm256_setzero_si256();
    for (int qd = 0; qd < SUB / kQuad; ++qd) {
      const uint8_t* wq = codes + (k0 / kQuad + qd) * (kCols * kQuad);
      const __m256i w[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq)),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 32))};
      const __m256i w_abs[2] = {_mm256_abs_epi8(w[0]), _mm256_abs_epi8(w[1])};
      for (int rr = 0; rr < MR; ++rr) {
        int32_t four;
        std::memcpy(&four, xq[rr] + k0 + qd * kQuad, kQuad);
        const __m256i xb = _mm256_set1_epi32(four);
        for (int h = 0; h < 2; ++h) {
          const __m256i pairs = _mm256_maddubs_epi16(w_abs[h], _mm256_sign_epi8(xb, w[h]));
          isum[rr][h] = _mm256_add_epi32(isum[rr][h], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 s = _mm256_loadu_ps(scales + i * kCols + 8 * h);
      for (int rr = 0; rr < MR; ++rr) {
        const float dx = xd[rr][k0 / kBlock];
        const __m256 sd = _mm256_mul_ps(s, _mm256_set1_ps(dx));
        acc[rr][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[rr][h]), sd, acc[rr][h]);
        if constexpr (MIN) {
          const int32_t qsum =
              SUB == 16 ? xsum[rr][k0 / 16] : xsum[rr][k0 / 16] + xsum[rr][k0 / 16 + 1];
          const __m256 m = _mm256_loadu_ps(mins + i * kCols + 8 * h);
          acc[rr][h] = _mm256_fnmadd_ps(m, _mm256_set1_ps(dx * float(qsum)), acc[rr][h]);
        }
      }
    }
  }
  for (int rr = 0; rr < MR; ++rr) {
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(c + (r + rr) * ldc + g * kCols + 8 * h, acc[rr][h]);
  }
}

template <int SUB, bool MIN>
ARGON_TARGET_AVX2 void gemm_panel(const Rows& x, int64_t r0, int64_t rows, const Panel& p,
                                  float* c, int64_t ldc) {
  // c's row 0 is x's row r0
  const Rows xr{x.q + r0 * x.n_in, x.d + r0 * (x.n_in / kBlock), x.sum + r0 * (x.n_in / 16),
                x.n_in};
  for (int64_t g = 0; g < p.groups; ++g) {
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2) gemm_step<2, SUB, MIN>(xr, r, p, g, c, ldc);
    if (r < rows) gemm_step<1, SUB, MIN>(xr, r, p, g, c, ldc);
  }
}

ARGON_TARGET_AVX2 void gemm_avx2(const Rows& x, int64_t r0, int64_t rows, const Panel& p,
                                 int sub, bool with_min, float* c, int64_t ldc) {
  with_sub_and_min(sub, with_min, [&](auto s, auto m) {
    gemm_panel<decltype(s)::value, decltype(m)::value>(x, r0, rows, p, c, ldc);
  });
}

constexpr Kernels kAvx2 = make_kernels<DecodeAvx2>("avx2", &quantize_avx2, &gemm_avx2);

}  // namespace

const Kernels* kernels_avx2() { return &kAvx2; }
#else
const Kernels* kernels_avx2() { return nullptr; }
#endif

}  // namespace argon::q8
