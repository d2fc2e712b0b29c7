// moe_mm on CUDA: out[rows of tile j] = xs[rows] @ w[tile_expert[j]]^T; rows of tiles whose
// expert is -1 (or out of range) are zero. No host sync on any path.
//
// Fast path (bf16 on sm_90 / sm_100, dims and strides 16-byte aligned): torch._grouped_mm,
// whose CUTLASS kernel takes group ends along the rows. We derive them on the device from
// tile_expert (plan_group_ends: tiles per expert, scanned, times tile_m), and check in the
// same kernel that the tiles are in the plan's layout (experts ascending, each expert's tiles
// contiguous, -1 tiles only after them). Then the tile kernel below runs over every row block:
// it writes zeros for -1 tiles (grouped_mm leaves rows past the last group unwritten), and
// recomputes every other tile only if the layout check failed, so any tile_expert gives the
// contract's result, and a plan's tile_expert costs one grouped GEMM plus two small kernels.
// (torch._grouped_mm's other paths read the offsets back to the host: we never take them.)
//
// Other dtypes and devices: moe_mm_tiles_kernel computes every tile. A block owns one row block
// (16 rows, fewer when tile_m < 16, so a row block never straddles two tiles) and 64 columns,
// stages 32-wide slices of xs and w in shared memory as fp32, and accumulates in fp32 (fmaf; the
// contract compares GEMMs with a tolerance). Persistent grid over (row block, column block)
// items. Simple and correct for any strides; not tuned (fp16 and fp32 run at a fraction of the
// tensor-core rate).
#include <torch/library.h>

#include "../checks.h"
#include "../op_signatures.h"
#include "../float_dispatch.h"
#include "cuda_common.cuh"
#include "plan_groups.cuh"

namespace argon::cuda {
namespace {

constexpr int kRowBlock = 16, kColBlock = 64, kKSlice = 32, kMmThreads = 256;

template <typename T>
struct MmParams {
  const T* xs;
  int64_t xs_s0, xs_s1;
  const T* w;
  int64_t w_s0, w_s1, w_s2;
  const int* tile_expert;
  T* out;
  int64_t out_s0;
  int64_t R, N, Kd;
  int E, tm, rb;
  const int* layout_ok;  // nullable: when set and true, valid tiles are already computed
};

template <typename T>
__global__ void __launch_bounds__(kMmThreads) moe_mm_tiles_kernel(MmParams<T> p) {
  __shared__ float s_a[kRowBlock][kKSlice + 1];
  __shared__ float s_b[kColBlock][kKSlice + 1];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t col_blocks = ceil_div_dev(p.N, kColBlock);
  const int64_t items = (p.R / p.rb) * col_blocks;
  const bool skip_valid = p.layout_ok != nullptr && *p.layout_ok != 0;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t r0 = (item / col_blocks) * p.rb, n0 = (item % col_blocks) * kColBlock;
    const int e = p.tile_expert[r0 / p.tm];
    if (e < 0 || e >= p.E) {
      for (int i = tid; i < p.rb * kColBlock; i += kMmThreads) {
        const int r = i / kColBlock, n = i % kColBlock;
        if (n0 + n < p.N) p.out[(r0 + r) * p.out_s0 + n0 + n] = from_float<T>(0.f);
      }
      continue;
    }
    if (skip_valid) continue;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const T* w = p.w + e * p.w_s0;
    for (int64_t k0 = 0; k0 < p.Kd; k0 += kKSlice) {
      for (int i = tid; i < kRowBlock * kKSlice; i += kMmThreads) {
        const int r = i / kKSlice, k = i % kKSlice;
        s_a[r][k] = r < p.rb && k0 + k < p.Kd
                        ? to_float(p.xs[(r0 + r) * p.xs_s0 + (k0 + k) * p.xs_s1])
                        : 0.f;
      }
      for (int i = tid; i < kColBlock * kKSlice; i += kMmThreads) {
        const int n = i / kKSlice, k = i % kKSlice;
        s_b[n][k] = n0 + n < p.N && k0 + k < p.Kd
                        ? to_float(w[(n0 + n) * p.w_s1 + (k0 + k) * p.w_s2])
                        : 0.f;
      }
      __syncthreads();
#pragma unroll 8
      for (int k = 0; k < kKSlice; ++k) {
        const float a = s_a[ty][k];
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[q] = fmaf(a, s_b[tx + 16 * q][k], acc[q]);
      }
      __syncthreads();
    }
    if (ty < p.rb) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t n = n0 + tx + 16 * q;
        if (n < p.N) p.out[(r0 + ty) * p.out_s0 + n] = from_float<T>(acc[q]);
      }
    }
  }
}

template <typename T>
MmParams<T> mm_params(const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                      int64_t tile_m, const Tensor& out) {
  MmParams<T> p{};
  p.xs = xs.const_data_ptr<T>();
  p.xs_s0 = xs.stride(0);
  p.xs_s1 = xs.stride(1);
  p.w = w.const_data_ptr<T>();
  p.w_s0 = w.stride(0);
  p.w_s1 = w.stride(1);
  p.w_s2 = w.stride(2);
  p.tile_expert = tile_expert.const_data_ptr<int>();
  p.out = out.data_ptr<T>();
  p.out_s0 = out.stride(0);
  p.R = xs.size(0);
  p.N = w.size(1);
  p.Kd = xs.size(1);
  p.E = static_cast<int>(w.size(0));
  p.tm = static_cast<int>(tile_m);
  p.rb = static_cast<int>(std::min<int64_t>(kRowBlock, tile_m));
  return p;
}

template <typename T>
void launch_tiles(const MmParams<T>& p) {
  const int64_t items = (p.R / p.rb) * ceil_div(p.N, kColBlock);
  if (items == 0) return;
  moe_mm_tiles_kernel<T><<<grid_for(items, 1, 8), kMmThreads, 0, stream()>>>(p);
  ARGON_CUDA_CHECK_LAUNCH();
}

bool grouped_mm_applies(const Tensor& xs, const Tensor& w, const Tensor& out) {
  if (xs.scalar_type() != at::kBFloat16) return false;
  const int major = at::cuda::getCurrentDeviceProperties()->major;
  if (major != 9 && major != 10) return false;
  const int64_t R = xs.size(0), Kd = xs.size(1), N = w.size(1), E = w.size(0);
  auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0; };
  return R > 0 && Kd > 0 && N > 0 && Kd % 8 == 0 && N % 8 == 0 && E <= kGroupedMmMaxGroups &&
         xs.stride(1) == 1 && xs.stride(0) % 8 == 0 && aligned(xs) &&
         grouped_mm_takes_weights(w) && aligned(w) &&
         (!out.defined() || out.stride(0) % 8 == 0);
}

// The grouped-GEMM path; returns torch._grouped_mm's output with -1 tiles zeroed.
Tensor grouped_mm_path(const Tensor& xs, const Tensor& w, const Tensor& tile_expert,
                       int64_t tile_m) {
  const int E = static_cast<int>(w.size(0));
  const int n_tiles = static_cast<int>(tile_expert.size(0));
  Tensor scratch = at::empty({E + 1}, tile_expert.options());
  Tensor ends = scratch.narrow(0, 0, E);
  int* ok = scratch.data_ptr<int>() + E;
  group_ends_kernel<<<1, 1024, E * sizeof(int), stream()>>>(
      tile_expert.const_data_ptr<int>(), n_tiles, E, static_cast<int>(tile_m), ends.data_ptr<int>(),
      ok);
  ARGON_CUDA_CHECK_LAUNCH();
  Tensor result = at::_grouped_mm(xs, w.transpose(1, 2), ends);
  MmParams<c10::BFloat16> p = mm_params<c10::BFloat16>(xs, w, tile_expert, tile_m, result);
  p.layout_ok = ok;
  launch_tiles(p);
  return result;
}

void moe_mm_out_cuda(const Tensor& xs, const Tensor& w, const Tensor& tile_expert_in,
                     int64_t tile_m, const Tensor& out) {
  check_moe_mm(xs, w, tile_expert_in, tile_m, out);
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(xs.device());
  const Tensor tile_expert = tile_expert_in.contiguous();
  if (grouped_mm_applies(xs, w, out)) {
    out.copy_(grouped_mm_path(xs, w, tile_expert, tile_m));
    return;
  }
  ARGON_DISPATCH_FLOAT(xs.scalar_type(), "moe_mm_cuda", [&] {
    launch_tiles(mm_params<scalar_t>(xs, w, tile_expert, tile_m, out));
  });
}

// The functional form, registered for CUDA so the grouped-GEMM path returns torch's output
// without a copy into a second buffer.
Tensor moe_mm_cuda(const Tensor& xs, const Tensor& w, const Tensor& tile_expert, int64_t tile_m) {
  TORCH_CHECK_VALUE(xs.dim() == 2, "xs must be 2-D [R, Kd], got shape ", xs.sizes());
  TORCH_CHECK_VALUE(w.dim() == 3, "w must be 3-D [E, N, Kd], got shape ", w.sizes());
  Tensor out = at::empty({xs.size(0), w.size(1)}, xs.options());
  check_moe_mm(xs, w, tile_expert, tile_m, out);
  if (out.numel() == 0 || !grouped_mm_applies(xs, w, Tensor())) {
    moe_mm_out_cuda(xs, w, tile_expert, tile_m, out);
    return out;
  }
  out.reset();  // the grouped GEMM allocates its own output (the allocator reuses this block)
  const c10::cuda::CUDAGuard guard(xs.device());
  Tensor result = grouped_mm_path(xs, w, tile_expert.contiguous(), tile_m);
  return result.is_contiguous() ? result : result.contiguous();
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("moe_mm_out", TORCH_FN(moe_mm_out_cuda));
  m.impl("moe_mm", TORCH_FN(moe_mm_cuda));
}

}  // namespace argon::cuda
