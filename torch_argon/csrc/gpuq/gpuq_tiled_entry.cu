// The launcher of one GGUF format's tile-decode GEMM (gpuq_tiled_kernel.h; gpuq_launch.h declares
// it): a generated unit (build_tools/gpuq_codegen.py: tiled_<NAME>) defines GPUQ_FORMAT_NAME
// and includes this file, once per format, apart from the format's gpuq kernels
// (gpuq_entry.cu) so that the two compile in parallel. nvcc builds it for the GPU, the host
// compiler for the emulation (every lane a fiber: gpuq_host_runtime.h), from the same source.
#include <cstdio>
#include <string>

#include "gpuq/gpuq_launch.h"
#include "gpuq/gpuq_tiled_kernel.h"

#define GPUQ_CAT2(a, b) a##b
#define GPUQ_CAT(a, b) GPUQ_CAT2(a, b)

namespace gpuq {
inline namespace GPUQ_TARGET {
namespace {

using Format = GPUQ_CAT(Fmt, GPUQ_FORMAT_NAME);

constexpr int64_t kMaxGridY = 65535;

int report(char* err, int err_len, const char* what) {
  if (err && err_len > 0) std::snprintf(err, err_len, "%s", what);
  return 1;
}

template <bool BF16, bool SWIGLU, int BM>
int run(const GemmParams& p, void* stream, char* err, int err_len) {
  constexpr int cols = SWIGLU ? kTileW / 2 : kTileW;
  const int gx = (p.n_out + cols - 1) / cols;
  // grid y is at most 65535: more tiles take several launches, each from row_group0 on
  for (int64_t first = 0; first < p.n_tiles_all && gx > 0; first += kMaxGridY) {
    GemmParams part = p;
    part.row_group0 = static_cast<int32_t>(first);
    const int64_t left = p.n_tiles_all - first;
    const int gy = static_cast<int>(left < kMaxGridY ? left : kMaxGridY);
#if defined(__CUDACC__)
    tiled_qmm_kernel<Format, BF16, SWIGLU, BM>
        <<<dim3(gx, gy), kTiledThreads, 0, static_cast<cudaStream_t>(stream)>>>(part);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return report(err, err_len, cudaGetErrorString(e));
#else
    (void)stream;
    const std::string e = host::launch(gx, gy, kTiledThreads, [&part] {
      tiled_qmm_kernel<Format, BF16, SWIGLU, BM>(part);
    });
    if (!e.empty()) return report(err, err_len, e.c_str());
#endif
  }
  return 0;
}

template <bool BF16, bool SWIGLU>
int run_bm(const GemmParams& p, void* stream, char* err, int err_len) {
  switch (p.tile_m) {
    case 64: return run<BF16, SWIGLU, 64>(p, stream, err, err_len);
    case 128: return run<BF16, SWIGLU, 128>(p, stream, err, err_len);
    default: return report(err, err_len, "gpuq tiled: tile_m must be 64 or 128");
  }
}

}  // namespace

int GPUQ_CAT(gemm_tiled_, GPUQ_FORMAT_NAME)(const GemmParams& p, bool swiglu, bool bf16,
                                            void* stream, char* err, int err_len) {
  if (bf16) {
    return swiglu ? run_bm<true, true>(p, stream, err, err_len)
                  : run_bm<true, false>(p, stream, err, err_len);
  }
  return swiglu ? run_bm<false, true>(p, stream, err, err_len)
                : run_bm<false, false>(p, stream, err, err_len);
}

}  // namespace GPUQ_TARGET
}  // namespace gpuq
