// moe_mm_weight_grad on CUDA: out[e] = sum over the rows r of tiles with tile_expert == e of
// grad_out[r]^T xs[r] ([N, Kd], moe_mm's weight layout), accumulated in fp32 and rounded once;
// experts with no tile get zeros.
//
// Fast path (bf16 on sm_90 / sm_100, N and Kd multiples of 8, at most 1024 experts), as moe_mm's:
// torch._grouped_mm of grad_out^T [N, R] and xs [R, Kd] with groups along the rows (its 2-D x 2-D
// form: one [N, Kd] product per group), the group ends derived on the device from the tile map
// (plan_groups.cuh), which also checks the plan's layout. The tile kernel below then runs with
// that check's flag: where the layout holds it only writes zeros for experts without rows; where
// it does not, it computes every expert itself, so any tile map gives the contract's result.
// CUTLASS's grouped GEMM splits no sum across blocks: the same bytes run to run.
//
// Each expert's tiles, in ascending order, come from a stable sort of the tile map by expert
// (torch's argsort, deterministic) and searchsorted for each expert's first tile: device ops
// only, no host sync, any tile map (not only a plan's sorted one).
// Launch: grid (E * ceil(Kd / 64), ceil(N / 64)) blocks of 256 threads; a block owns a 64 x 64
// output tile of one expert, each thread 4 x 4 of it (n = ty + 16 i, k = tx + 16 j). For each
// of the expert's tiles, 16 rows at a time, the block stages grad_out[rows, n tile] and
// xs[rows, k tile] in shared memory as fp32 (zeros past the tile's rows and the matrix edges),
// then every thread adds its 16 rank-1 products. Each output's sum runs over the rows in
// ascending order inside ascending tiles, in one thread: no atomics, the same bytes run to run.
// Limits: fp32 FMAs on the SIMT units (the fp32 and fp16 paths, and tile maps without the plan's
// layout: no tensor cores); N <= 65535 * 64.
#include <ATen/ops/argsort.h>
#include <ATen/ops/searchsorted.h>
#include <torch/library.h>

#include "../checks.h"
#include "../float_dispatch.h"
#include "../op_signatures.h"
#include "cuda_common.cuh"
#include "plan_groups.cuh"

namespace argon::cuda {
namespace {

constexpr int kWgTile = 64;   // outputs per block along N and along Kd
constexpr int kWgRows = 16;   // rows staged per step
constexpr int kWgThreads = 256;

template <typename scalar_t>
__global__ void __launch_bounds__(kWgThreads)
    moe_mm_weight_grad_kernel(const scalar_t* __restrict__ xs, const scalar_t* __restrict__ dy,
                              const int64_t* __restrict__ tiles_by_expert,
                              const int64_t* __restrict__ expert_first_tile,
                              scalar_t* __restrict__ out, int64_t N, int64_t Kd, int64_t tile_m,
                              int64_t k_blocks, const int* __restrict__ layout_ok) {
  __shared__ float dy_s[kWgRows][kWgTile];
  __shared__ float xs_s[kWgRows][kWgTile];
  const int64_t e = blockIdx.x / k_blocks;
  const int64_t k0 = (blockIdx.x - e * k_blocks) * kWgTile, n0 = int64_t{blockIdx.y} * kWgTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  const int64_t first = expert_first_tile[e], last = expert_first_tile[e + 1];
  // The grouped GEMM wrote every expert with rows (layout_ok set and true): zeros for the rest.
  if (layout_ok != nullptr && *layout_ok != 0 && last > first) return;
  const int64_t computed_last = layout_ok != nullptr && *layout_ok != 0 ? first : last;
  for (int64_t t = first; t < computed_last; ++t) {
    const int64_t row0 = tiles_by_expert[t] * tile_m;
    for (int64_t r0 = row0; r0 < row0 + tile_m; r0 += kWgRows) {
      const int64_t rows = row0 + tile_m - r0 < kWgRows ? row0 + tile_m - r0 : kWgRows;
      for (int idx = threadIdx.x; idx < kWgRows * kWgTile; idx += kWgThreads) {
        const int rr = idx / kWgTile, c = idx % kWgTile;  // consecutive threads: one row's columns
        const bool row_in = rr < rows;
        dy_s[rr][c] = row_in && n0 + c < N ? to_float(dy[(r0 + rr) * N + n0 + c]) : 0.0f;
        xs_s[rr][c] = row_in && k0 + c < Kd ? to_float(xs[(r0 + rr) * Kd + k0 + c]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kWgRows; ++rr) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = dy_s[rr][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = xs_s[rr][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
      }
      __syncthreads();
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t n = n0 + ty + 16 * i;
    if (n >= N) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t k = k0 + tx + 16 * j;
      if (k < Kd) out[(e * N + n) * Kd + k] = from_float<scalar_t>(acc[i][j]);
    }
  }
}

bool grouped_weight_grad_applies(const Tensor& xs, int64_t N, int64_t E) {
  if (xs.scalar_type() != at::kBFloat16) return false;
  const int major = at::cuda::getCurrentDeviceProperties()->major;
  const int64_t R = xs.size(0), Kd = xs.size(1);
  return (major == 9 || major == 10) && R > 0 && Kd % 8 == 0 && N % 8 == 0 &&
         E <= kGroupedMmMaxGroups;
}

// torch._grouped_mm's [E, N, Kd] from grad_out^T and xs grouped along the rows, and the device
// flag saying whether tile_expert had the plan's layout (else the result is not used).
Tensor grouped_weight_grad(const Tensor& xs, const Tensor& dy, const Tensor& tile_expert,
                           int64_t tile_m, int64_t E, Tensor& layout_ok) {
  const int n_tiles = static_cast<int>(tile_expert.size(0));
  Tensor scratch = at::empty({E + 1}, tile_expert.options().dtype(at::kInt));
  Tensor ends = scratch.narrow(0, 0, E);
  layout_ok = scratch.narrow(0, E, 1);
  group_ends_kernel<<<1, 1024, E * sizeof(int), stream()>>>(
      tile_expert.const_data_ptr<int>(), n_tiles, static_cast<int>(E), static_cast<int>(tile_m),
      ends.data_ptr<int>(), layout_ok.data_ptr<int>());
  ARGON_CUDA_CHECK_LAUNCH();
  return at::_grouped_mm(dy.t(), xs, ends);
}

void moe_mm_weight_grad_out_cuda(const Tensor& xs_in, const Tensor& grad_out_in,
                                 const Tensor& tile_expert, int64_t tile_m, int64_t n_expert,
                                 const Tensor& out) {
  check_moe_mm_weight_grad(xs_in, grad_out_in, tile_expert, tile_m, n_expert, out);
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(xs_in.device());
  const Tensor xs = xs_in.contiguous();
  const Tensor dy = grad_out_in.contiguous();
  const int64_t E = n_expert, N = out.size(1), Kd = out.size(2);
  TORCH_CHECK_VALUE(ceil_div(N, kWgTile) <= 65535, "moe_mm_weight_grad on CUDA: N = ", N,
                    " is more than one launch covers (at most ", 65535 * kWgTile, ")");
  // Tiles of experts outside [0, E) (-1: skipped) sort last, under key E, and belong to none.
  const Tensor key = at::where(tile_expert.ge(0).logical_and(tile_expert.lt(E)),
                               tile_expert.to(at::kLong), E);
  const Tensor tiles_by_expert = at::argsort(key, /*stable=*/true);
  const Tensor expert_first_tile = at::searchsorted(
      key.index_select(0, tiles_by_expert), at::arange(E + 1, key.options()));
  Tensor layout_ok;
  if (grouped_weight_grad_applies(xs, N, E)) {
    out.copy_(grouped_weight_grad(xs, dy, tile_expert.contiguous(), tile_m, E, layout_ok));
  }
  const int64_t k_blocks = ceil_div(Kd, kWgTile);
  const dim3 grid(static_cast<unsigned>(E * k_blocks), static_cast<unsigned>(ceil_div(N, kWgTile)));
  ARGON_DISPATCH_FLOAT(xs.scalar_type(), "moe_mm_weight_grad_cuda", [&] {
    moe_mm_weight_grad_kernel<scalar_t><<<grid, kWgThreads, 0, stream()>>>(
        xs.const_data_ptr<scalar_t>(), dy.const_data_ptr<scalar_t>(),
        tiles_by_expert.const_data_ptr<int64_t>(), expert_first_tile.const_data_ptr<int64_t>(),
        out.data_ptr<scalar_t>(), N, Kd, tile_m, k_blocks,
        layout_ok.defined() ? layout_ok.const_data_ptr<int>() : nullptr);
    ARGON_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("moe_mm_weight_grad_out", TORCH_FN(moe_mm_weight_grad_out_cuda));
}

}  // namespace argon::cuda
