// The launcher of the q8 activation quantization (gpuq_quantize.h; declared in gpuq_launch.h):
// one thread per 32-value block. Built for the GPU and for the host emulation from this source
// (a generated unit includes it: build_tools/gpuq_codegen.py).
#include <cstdio>

#include "gpuq/gpuq_launch.h"
#include "gpuq/gpuq_quantize.h"

namespace gpuq {
inline namespace GPUQ_TARGET {

#if defined(__CUDACC__)
namespace {
constexpr int kQuantizeThreads = 128;

__global__ void quantize_q8_kernel(const void* x, int64_t stride, int64_t rows, int n_in,
                                   int in_kind, int8_t* q, float* d) {
  const int blocks = n_in / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * blocks) return;
  const int64_t r = i / blocks, b = i % blocks;
  quantize_block_q8(x, r * stride + 32 * b, in_kind, q + r * n_in + 32 * b, d + r * blocks + b);
}
}  // namespace
#endif

int quantize_q8(const void* x, int64_t stride, int64_t rows, int n_in, int in_kind, int8_t* q,
                float* d, void* stream, char* err, int err_len) {
  const int64_t n = rows * (n_in / 32);
  if (n == 0) return 0;
#if defined(__CUDACC__)
  const int64_t grid = (n + kQuantizeThreads - 1) / kQuantizeThreads;
  quantize_q8_kernel<<<static_cast<unsigned>(grid), kQuantizeThreads, 0,
                       static_cast<cudaStream_t>(stream)>>>(x, stride, rows, n_in, in_kind, q, d);
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return 0;
  if (err && err_len > 0) std::snprintf(err, err_len, "%s", cudaGetErrorString(e));
  return 1;
#else
  (void)stream;
  (void)err;
  (void)err_len;
  const int blocks = n_in / 32;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / blocks, b = i % blocks;
    quantize_block_q8(x, r * stride + 32 * b, in_kind, q + r * n_in + 32 * b, d + r * blocks + b);
  }
  return 0;
#endif
}

}  // namespace GPUQ_TARGET
}  // namespace gpuq
