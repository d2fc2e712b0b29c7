// The q8 kernels (q8_kernels.h) for AVX2 CPUs: q8_generic.h's loops compiled for AVX2 + FMA,
// where the compiler vectorises the int8 dot products with vpmaddwd (bias 0: signed codes).
#include "cpu_isa_targets.h"
#include "q8_generic.h"

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

ARGON_TARGET_AVX2 void gemm_avx2(const Rows& x, int64_t r0, int64_t rows, const Panel& p,
                                 int sub, bool with_min, float* c, int64_t ldc) {
  gemm_rows(x, r0, rows, p, sub, with_min, c, ldc);
}

constexpr Kernels kAvx2 = make_kernels<DecodeAvx2>("avx2", &quantize_avx2, &gemm_avx2);

}  // namespace

const Kernels* kernels_avx2() { return &kAvx2; }
#else
const Kernels* kernels_avx2() { return nullptr; }
#endif

}  // namespace argon::q8
