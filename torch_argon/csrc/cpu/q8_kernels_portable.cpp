// The q8 kernels (q8_kernels.h) for any CPU: q8_generic.h's loops compiled for the build's
// baseline (SSE2 on x86-64, NEON on arm64). Codes are stored signed (bias 0).
#include "q8_generic.h"

namespace argon::q8 {
namespace {

void quantize_portable(Dtype dtype, const void* x, int64_t row_stride, int64_t col_stride,
                       int64_t rows, int64_t n_in, int8_t* q, float* d, int32_t* sum) {
  quantize_rows(dtype, x, row_stride, col_stride, rows, n_in, q, d, sum);
}

template <typename D>
struct DecodePortable {
  static void fn(const uint8_t* w, int64_t row_stride, int64_t cols, const Panel& p) {
    decode_panel<D, 0>(w, row_stride, cols, p);
  }
};

void gemm_portable(const Rows& x, int64_t r0, int64_t rows, const Panel& p, int sub,
                   bool with_min, float* c, int64_t ldc) {
  gemm_rows(x, r0, rows, p, sub, with_min, c, ldc);
}

constexpr Kernels kPortable =
    make_kernels<DecodePortable>("portable", &quantize_portable, &gemm_portable);

}  // namespace

const Kernels* kernels_portable() { return &kPortable; }

}  // namespace argon::q8
