// The C entry points of the gpuq kernels, one shared library per target: nvcc builds it for the
// GPU, a host C++ compiler (-x c++) for the emulation CI runs (torch_argon/gpuq/library.py).
// The GEMM is compiled once per format (one translation unit each, -DGPUQ_FORMAT=FmtQ4_K
// -DGPUQ_FORMAT_NAME=Q4_K, so the formats build in parallel); -DGPUQ_QUANTIZE builds the q8
// activation quantization. Each entry returns 0, or an error code with a message in `err`.
#include <cstdio>
#include <cstring>

#include "gpuq_kernel.h"
#include "gpuq_quantize.h"

#define GPUQ_CAT2(a, b) a##b
#define GPUQ_CAT(a, b) GPUQ_CAT2(a, b)
#define GPUQ_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using gpuq::GemmParams;

int report(char* err, int err_len, const char* what) {
  if (err && err_len > 0) std::snprintf(err, err_len, "%s", what);
  return 1;
}

#if defined(__CUDACC__)
using Stream = cudaStream_t;

int check_launch(char* err, int err_len) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : report(err, err_len, cudaGetErrorString(e));
}
#else
using Stream = void*;
#endif

#if defined(GPUQ_FORMAT)
template <bool BF16, int NT, bool SWIGLU, bool Q8>
int run(const GemmParams& p, Stream stream, char* err, int err_len) {
  constexpr int WN = SWIGLU ? 1 : 2;
  const int cols_per_block = gpuq::kWarps * 16 * WN;
  const int gx = (p.n_out + cols_per_block - 1) / cols_per_block;
  const int64_t rows = static_cast<int64_t>(p.n_tiles_all) * p.tile_m;
  const int gy = static_cast<int>(rows / p.rows_per_warp);
  if (gx == 0 || gy == 0) return 0;
#if defined(__CUDACC__)
  gpuq::qmm_kernel<gpuq::GPUQ_FORMAT, BF16, NT, SWIGLU, Q8>
      <<<dim3(gx, gy), gpuq::kWarps * 32, 0, stream>>>(p);
  return check_launch(err, err_len);
#else
  (void)stream;
  const std::string e = gpuq::host::launch(gx, gy, gpuq::kWarps * 32, [&p] {
    gpuq::qmm_kernel<gpuq::GPUQ_FORMAT, BF16, NT, SWIGLU, Q8>(p);
  });
  return e.empty() ? 0 : report(err, err_len, e.c_str());
#endif
}

template <bool BF16, bool SWIGLU, bool Q8>
int run_nt(const GemmParams& p, int nt, Stream stream, char* err, int err_len) {
  switch (nt) {
    case 1: return run<BF16, 1, SWIGLU, Q8>(p, stream, err, err_len);
    case 2: return run<BF16, 2, SWIGLU, Q8>(p, stream, err, err_len);
    case 4: return run<BF16, 4, SWIGLU, Q8>(p, stream, err, err_len);
    default: return report(err, err_len, "gpuq: token blocks per warp must be 1, 2 or 4");
  }
}
#endif

}  // namespace

#if defined(GPUQ_FORMAT)
// The GEMM of one format. nt: 8-token blocks per warp (1, 2, 4); swiglu: act(gate) * up of a
// [E, 2 n_out, row_bytes] gate_up tensor; q8: x holds int8 codes and x_scale their scales;
// bf16: the activations' (and out's) type is bf16, else fp16 (q8: out's type is out_bf16).
GPUQ_EXPORT int GPUQ_CAT(gpuq_gemm_, GPUQ_FORMAT_NAME)(const GemmParams* p, int nt, int swiglu,
                                                       int q8, int bf16, void* stream, char* err,
                                                       int err_len) {
  const Stream s = static_cast<Stream>(stream);
  if (q8) {  // the MMA is int8 either way: one instantiation, out's type chosen at the store
    return swiglu ? run_nt<true, true, true>(*p, nt, s, err, err_len)
                  : run_nt<true, false, true>(*p, nt, s, err, err_len);
  }
  if (bf16) {
    return swiglu ? run_nt<true, true, false>(*p, nt, s, err, err_len)
                  : run_nt<true, false, false>(*p, nt, s, err, err_len);
  }
  return swiglu ? run_nt<false, true, false>(*p, nt, s, err, err_len)
                : run_nt<false, false, false>(*p, nt, s, err, err_len);
}
#endif

#if defined(GPUQ_QUANTIZE)
#if defined(__CUDACC__)
__global__ void quantize_q8_kernel(const void* x, int64_t stride, int64_t rows, int n_in,
                                   int in_kind, int8_t* q, float* d) {
  const int blocks = n_in / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * blocks) return;
  const int64_t r = i / blocks, b = i % blocks;
  gpuq::quantize_block_q8(x, r * stride + 32 * b, in_kind, q + r * n_in + 32 * b,
                          d + r * blocks + b);
}
#endif

// q int8 [rows, n_in] and d float [rows, n_in / 32] of x [rows, n_in] (row stride in elements;
// in_kind 0 bf16, 1 fp16, 2 fp32), as torch_argon.quant.activation_q8 defines them.
GPUQ_EXPORT int gpuq_quantize_q8(const void* x, int64_t stride, int64_t rows, int n_in,
                                 int in_kind, int8_t* q, float* d, void* stream, char* err,
                                 int err_len) {
  const int64_t n = rows * (n_in / 32);
  if (n == 0) return 0;
#if defined(__CUDACC__)
  const int threads = 128;
  quantize_q8_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0,
                       static_cast<cudaStream_t>(stream)>>>(x, stride, rows, n_in, in_kind, q, d);
  return check_launch(err, err_len);
#else
  (void)stream;
  (void)err;
  (void)err_len;
  const int blocks = n_in / 32;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / blocks, b = i % blocks;
    gpuq::quantize_block_q8(x, r * stride + 32 * b, in_kind, q + r * n_in + 32 * b,
                            d + r * blocks + b);
  }
  return 0;
#endif
}
#endif
